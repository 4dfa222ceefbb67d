"""The FB objectives against direct computations and exact solutions."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from rbfm.fb import FBTrainer, actor_loss, fb_loss, orthonormality_loss, reward_z
from rbfm.fb.losses import pessimistic


def test_fb_loss_matches_a_loop() -> None:
    g = torch.Generator().manual_seed(0)
    E, N, gamma = 2, 6, 0.9
    M = torch.randn(E, N, N, generator=g, dtype=torch.float64)
    T = torch.randn(N, N, generator=g, dtype=torch.float64)
    disc = torch.rand(N, generator=g, dtype=torch.float64)
    off, diag = fb_loss(M, T, disc, gamma)
    want_off = want_diag = 0.0
    for k in range(E):
        pairs = [(i, j) for i, j in itertools.product(range(N), range(N)) if i != j]
        want_off += sum(
            0.5 * (M[k, i, j] - gamma * disc[i] * T[i, j]) ** 2 for i, j in pairs
        ) / len(pairs)
        want_diag += -sum(M[k, i, i] for i in range(N)) / N
    assert float(off) == pytest.approx(float(want_off), rel=1e-12)
    assert float(diag) == pytest.approx(float(want_diag), rel=1e-12)


def test_orthonormality_matches_the_pairwise_form_and_vanishes_when_orthonormal() -> None:
    g = torch.Generator().manual_seed(1)
    N, d = 40, 5
    B = torch.randn(N, d, generator=g, dtype=torch.float64)
    pairwise = sum(float(B[i] @ B[j]) ** 2 for i in range(N) for j in range(N)) / N**2
    norms = sum(float(B[i] @ B[i]) for i in range(N)) / N
    assert float(orthonormality_loss(B)) == pytest.approx(pairwise - 2 * norms + d, rel=1e-10)
    q, _ = torch.linalg.qr(B)  # orthonormal columns: (sqrt(N) q)^T (sqrt(N) q) / N = I
    assert float(orthonormality_loss(np.sqrt(N) * q)) == pytest.approx(0.0, abs=1e-20)
    assert float(orthonormality_loss(2 * B)) > 10.0  # far from orthonormal


def test_actor_loss_is_the_pessimistic_q() -> None:
    g = torch.Generator().manual_seed(2)
    F_pi, z = torch.randn(2, 7, 4, generator=g), torch.randn(7, 4, generator=g)
    q = [min(float(F_pi[0, i] @ z[i]), float(F_pi[1, i] @ z[i])) for i in range(7)]
    assert float(actor_loss(F_pi, z)) == pytest.approx(-np.mean(q), rel=1e-6)


def test_reward_inference_recovers_z_for_a_reward_linear_in_b() -> None:
    g = torch.Generator().manual_seed(3)
    N, d = 500, 8
    q, _ = torch.linalg.qr(torch.randn(N, d, generator=g, dtype=torch.float64))
    B = np.sqrt(N) * q  # E[B B^T] = I on these states
    z_true = torch.randn(d, generator=g, dtype=torch.float64)
    z_true = np.sqrt(d) * z_true / z_true.norm()
    z = reward_z(B, B @ z_true)
    torch.testing.assert_close(z, z_true, rtol=0, atol=1e-10)
    assert float(z.norm()) == pytest.approx(np.sqrt(d))


def _finite_mdp() -> tuple[np.ndarray, np.ndarray]:
    """3 states, 2 actions; probabilities in quarters so a batch can hold them exactly."""
    P = (
        np.array(
            [
                [[2, 2, 0], [0, 1, 3]],
                [[1, 0, 3], [4, 0, 0]],
                [[0, 3, 1], [1, 1, 2]],
            ]
        )
        / 4.0
    )
    policy = np.array([1, 0, 1])  # a deterministic policy pi(s)
    return P, policy


def test_minimising_the_fb_loss_recovers_the_successor_measure() -> None:
    """Tabular F, B on one-hot states: F(s,a)^T B(s') rho(s') must equal
    M^pi(s, a, s') = [P (I - gamma P_pi)^-1](s, a, s') computed in closed form."""
    P, pi = _finite_mdp()
    S, A, gamma, copies = 3, 2, 0.8, 8
    # The batch is the data distribution itself: every (s, a) equally often, s' in
    # proportion to P; `copies` repeats make the i != j pairs nearly independent.
    rows = [
        (s, a, s2)
        for s in range(S)
        for a in range(A)
        for s2 in range(S)
        for _ in range(int(4 * P[s, a, s2]) * copies)
    ]
    s, a, s2 = (torch.tensor(c) for c in zip(*rows, strict=True))
    rho = np.bincount(s2.numpy(), minlength=S) / len(s2)
    torch.manual_seed(0)
    F = torch.nn.Parameter(0.1 * torch.randn(S, A, S, dtype=torch.float64))
    B = torch.nn.Parameter(
        torch.eye(S, dtype=torch.float64) + 0.1 * torch.randn(S, S, dtype=torch.float64)
    )
    opt = torch.optim.Adam([F, B], lr=0.02)
    disc = torch.ones(len(rows), dtype=torch.float64)
    next_a = torch.tensor(pi)[s2]
    for _ in range(4000):
        f, b = F[s, a][None], B[s2]
        with torch.no_grad():  # target: the same tables, stop-gradient
            target = F[s2, next_a] @ B[s2].T
        off, diag = fb_loss(f @ b.T, target, disc, gamma)
        loss = off + diag + orthonormality_loss(b)
        opt.zero_grad()
        loss.backward()
        opt.step()
    P_pi = P[np.arange(S), pi]
    exact = np.einsum("sat,tu->sau", P, np.linalg.inv(np.eye(S) - gamma * P_pi))
    learned = np.einsum("sad,td->sat", F.detach().numpy(), B.detach().numpy()) * rho
    # Remaining error: the i != j estimator's O(1/N) dependence between s and s+.
    # Measured: 0.5% of max M.
    np.testing.assert_allclose(learned, exact, atol=0.015 * exact.max())


def test_bf16_update_keeps_the_fb_matrices_in_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from rbfm.fb import FBModel, FBTrainer, fb_config
    from rbfm.fb import model as fb_model

    seen: list[torch.dtype] = []
    real = fb_model.fb_loss

    def spy(M: torch.Tensor, target_M: torch.Tensor, *args: object) -> object:
        seen.extend([M.dtype, target_M.dtype])
        return real(M, target_M, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(fb_model, "fb_loss", spy)
    cfg = replace(fb_config("tiny"), bf16=True)
    trainer = FBTrainer(FBModel(17, 6, cfg), seed=0)
    g = torch.Generator().manual_seed(0)
    batch = {
        "observation": torch.randn(32, 17, generator=g),
        "action": torch.rand(32, 6, generator=g) * 2 - 1,
        "next_observation": torch.randn(32, 17, generator=g),
        "discount": torch.ones(32),
    }
    out = trainer.update(batch)
    assert seen == [torch.float32, torch.float32]
    assert all(torch.isfinite(v) for v in out.values())


def test_pessimism_is_the_min_at_one_half_and_the_mean_at_zero() -> None:
    g = torch.Generator().manual_seed(4)
    X = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    assert torch.equal(pessimistic(X, 0.5), X.min(0).values)
    torch.testing.assert_close(pessimistic(X, 0.0), X.mean(0))
    # Between the two: mean - p |X_1 - X_2| equals the min at p = 0.5 up to rounding.
    torch.testing.assert_close(X.mean(0) - 0.5 * (X[0] - X[1]).abs(), X.min(0).values)
    torch.testing.assert_close(pessimistic(X, 0.25), (X.mean(0) + X.min(0).values) / 2)
    F_pi, z = torch.randn(2, 7, 4, generator=g), torch.randn(7, 4, generator=g)
    q = (F_pi * z).sum(-1)
    assert float(actor_loss(F_pi, z, 0.0)) == pytest.approx(-float(q.mean()), rel=1e-6)


def test_noisy_actions_clamp_values_but_pass_gradients_straight_through() -> None:
    from rbfm.fb.model import noisy

    mu = torch.tensor([0.99, -0.99, 0.0, 0.5]).repeat(50, 1).requires_grad_()
    g = torch.Generator().manual_seed(0)
    a = noisy(mu, 0.2, 0.3, g)
    g = torch.Generator().manual_seed(0)
    noise = (torch.randn(mu.shape, generator=g) * 0.2).clamp(-0.3, 0.3)
    assert torch.equal(a, (mu + noise).clamp(-1, 1))  # values as a plain clamp
    assert bool((a.abs() == 1).any())  # some samples were clamped...
    a.sum().backward()
    assert mu.grad is not None and torch.equal(mu.grad, torch.ones_like(mu))  # ...yet pass


def test_fb_networks_start_orthogonal_with_zero_biases() -> None:
    from rbfm.fb import FBModel, fb_config
    from rbfm.fb.networks import ParallelLinear

    model = FBModel(17, 6, fb_config("tiny"))
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear | ParallelLinear)]
    assert len(layers) > 6
    for layer in layers:
        weights = layer.weight.detach()
        for w in weights if isinstance(layer, ParallelLinear) else [weights.T]:
            # Orthonormal rows or columns, whichever the shape allows (orthogonal_ init).
            gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
            torch.testing.assert_close(gram, torch.eye(len(gram)), atol=1e-5, rtol=0)
        assert not layer.bias.detach().any()


def test_fb_config_overrides_are_checked() -> None:
    from rbfm.errors import ConfigError
    from rbfm.fb import fb_config

    cfg = fb_config("cpu", target_pessimism=0, batch_size=1024, forward_hidden=[64])
    assert (cfg.target_pessimism, cfg.batch_size, cfg.forward_hidden) == (0.0, 1024, (64,))
    with pytest.raises(ConfigError, match="unknown FB config field 'batchsize'"):
        fb_config("cpu", batchsize=1)
    with pytest.raises(ConfigError, match="batch_size: expected int"):
        fb_config("cpu", batch_size=1.5)
    # Every field's range, before a network is built (a NaN tau trained to NaN weights).
    for field, value, valid in [
        ("actor_pessimism", 2, "2.0 is out of range (valid: a number in [0, 1])"),
        ("conservative_coef", -1, "-1.0 is out of range (valid: a number in [0, inf))"),
        ("conservative_actions", 1, "1 is out of range (valid: an integer in [2, inf))"),
        ("actor_bc", -0.1, "-0.1 is out of range"),
        ("lr_end", 1.5, "1.5 is out of range (valid: a number in [0, 1])"),
        ("average_tau", 1, "1.0 is out of range (valid: a number in [0, 1))"),
        ("tau", float("nan"), "nan is out of range (valid: a number in (0, 1])"),
        ("lr", 0, "0.0 is out of range (valid: a number in (0, inf))"),
        ("gamma", 1, "1.0 is out of range (valid: a number in [0, 1))"),
        ("batch_size", 1, "1 is out of range (valid: an integer in [2, inf))"),
        ("z_dim", 0, "0 is out of range"),
        ("eval_every", 0, "0 is out of range"),
        ("forward_hidden", ["a"], "'a' is not a number"),
        ("forward_hidden", [], "needs at least one layer width"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(f"FB config.{field}: {valid}")):
            fb_config("cpu", **{field: value})


def _batch(seed: int, obs_dim: int = 17, action_dim: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "observation": torch.randn(32, obs_dim, generator=g),
        "action": torch.rand(32, action_dim, generator=g) * 2 - 1,
        "next_observation": torch.randn(32, obs_dim, generator=g),
        "discount": torch.ones(32),
    }


def test_served_weights_are_the_running_mean_then_an_exponential_average() -> None:
    from rbfm.fb import FBModel, FBTrainer, fb_config

    tau = 0.25  # the plain mean for 4 updates, then an exponential average
    trainer = FBTrainer(FBModel(17, 6, fb_config("tiny", average_tau=tau)), seed=0)
    online = dict(trainer.model.named_parameters())
    names = [k for k, p in online.items() if p.requires_grad]
    history = [{k: online[k].detach().clone() for k in names}]
    for i in range(7):
        trainer.update(_batch(i))
        history.append({k: online[k].detach().clone() for k in names})
    expected = {k: torch.stack([h[k] for h in history[1:5]]).mean(0) for k in names}
    for h in history[5:]:
        expected = {k: expected[k] + tau * (h[k] - expected[k]) for k in names}
    with trainer.served() as served:
        for k in names:
            torch.testing.assert_close(dict(served.named_parameters())[k], expected[k], msg=k)
        assert not torch.equal(online[names[0]], history[-1][names[0]])
    for k in names:  # the online weights are back, bitwise
        torch.testing.assert_close(online[k], history[-1][k], rtol=0, atol=0, msg=k)
    assert "target_forward_map" not in " ".join(names)


def test_without_averaging_the_online_model_is_served() -> None:
    from rbfm.fb import FBModel, FBTrainer, fb_config

    trainer = FBTrainer(FBModel(17, 6, fb_config("tiny")), seed=0)
    trainer.update(_batch(0))
    with trainer.served() as served:
        assert served is trainer.model
    assert trainer.average is None and trainer.schedules == []


def test_learning_rates_follow_a_cosine_from_lr_to_lr_end() -> None:
    from rbfm.fb import FBModel, FBTrainer, fb_config

    cfg = fb_config("tiny", steps=8, lr=1e-3, lr_end=0.1)
    trainer = FBTrainer(FBModel(17, 6, cfg), seed=0)
    seen = []
    for i in range(cfg.steps):
        seen.append(
            [g["lr"] for opt in (trainer.fb_opt, trainer.actor_opt) for g in opt.param_groups]
        )
        trainer.update(_batch(i))
    expected = [1e-4 + 0.5 * (1e-3 - 1e-4) * (1 + np.cos(np.pi * t / 8)) for t in range(8)]
    np.testing.assert_allclose(np.array(seen), np.repeat(np.array(expected)[:, None], 2, 1))
    assert trainer.fb_opt.param_groups[0]["lr"] == pytest.approx(1e-4)


def test_conservative_penalty_is_the_logsumexp_gap_summed_over_heads() -> None:
    from rbfm.fb.losses import conservative_penalty

    # Two equal sampled actions and the data's, all valued 0: log 3 per head.
    zeros = torch.zeros(2, 2, 1, dtype=torch.float64)
    assert float(conservative_penalty(zeros, zeros[:, 0])) == pytest.approx(2 * np.log(3))
    g = torch.Generator().manual_seed(5)
    q, q_data = torch.randn(2, 4, 9, generator=g), torch.randn(2, 9, generator=g)
    loop = sum(
        float(torch.logsumexp(torch.cat([q[k, :, i], q_data[k, i : i + 1]]), 0) - q_data[k, i])
        for k in range(2)
        for i in range(9)
    )
    assert float(conservative_penalty(q, q_data)) == pytest.approx(loop / 9, rel=1e-5)
    assert float(conservative_penalty(q - 100, q_data)) == pytest.approx(0, abs=1e-6)


def _one_action_batch() -> tuple[torch.Generator, dict[str, torch.Tensor]]:
    """32 transitions of a 5-dim state in which the data always takes action (0.5, 0.5);
    the generator goes on from where the batch left it."""
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(32, 5, generator=g)
    batch = {
        "observation": obs,
        "action": torch.full((32, 2), 0.5),
        "next_observation": obs + 0.1 * torch.randn(32, 5, generator=g),
        "discount": torch.ones(32),
    }
    return g, batch


def _trained_on(
    batch: dict[str, torch.Tensor], **overrides: float
) -> tuple[FBTrainer, dict[str, torch.Tensor]]:
    """A tiny-preset trainer (lr 1e-3, seed 0) after 200 updates on `batch`, and the last
    update's metrics."""
    from dataclasses import replace

    from rbfm.fb import FBModel, fb_config

    torch.manual_seed(0)
    cfg = replace(fb_config("tiny"), lr=1e-3, **overrides)
    trainer = FBTrainer(FBModel(5, 2, cfg), 0)
    for _ in range(200):
        out = trainer.update(batch)
    return trainer, out


def test_the_conservative_penalty_lowers_the_value_of_unseen_actions() -> None:
    """From the same start and minibatches, in which the data takes a single action, F
    trained with the penalty values uniform actions below the data's action, and F
    trained without it above (the actor's exploitation the penalty is there to stop)."""
    g, batch = _one_action_batch()
    obs = batch["observation"]
    uniform = torch.rand(32, 2, generator=g) * 2 - 1
    gaps = []
    for coef in (0.0, 5.0):
        trainer, out = _trained_on(batch, conservative_coef=coef)
        assert ("conservative" in out) == (coef > 0)
        with torch.no_grad():
            z = trainer.sample_z(obs)
            f_uniform = trainer.model.forward_map(obs, uniform, z)
            f_data = trainer.model.forward_map(obs, batch["action"], z)
        gaps.append(float(((f_uniform - f_data) * z).sum(-1).mean()))
    # Measured: 0.21 without the penalty, -0.13 with it.
    assert gaps[0] > 0.1 and gaps[1] < -0.05, gaps


def test_observation_normaliser_feeds_every_network_standardised_states(tmp_path: Path) -> None:
    from rbfm.fb import FBModel, fb_config
    from rbfm.fb.checkpoint import export_checkpoint, load_checkpoint, save_checkpoint

    g = torch.Generator().manual_seed(0)
    mean, std = torch.randn(17, generator=g), torch.rand(17, generator=g) + 0.5
    std[3] = 0.0  # a constant feature keeps a scale of 1
    torch.manual_seed(0)
    normed = FBModel(17, 6, fb_config("tiny", obs_norm=True))
    normed.set_obs_stats(mean, std)
    plain = FBModel(17, 6, fb_config("tiny"))
    missing = plain.load_state_dict(normed.state_dict(), strict=False)
    assert missing.missing_keys == [] and all(".norm." in k for k in missing.unexpected_keys)
    obs, z = torch.randn(5, 17, generator=g) * 10, torch.randn(5, 8, generator=g)
    action = torch.rand(5, 6, generator=g)
    scale = torch.where(std > 0, std, torch.ones(17))
    x = (obs - mean) / scale
    with torch.no_grad():
        torch.testing.assert_close(normed.actor(obs, z), plain.actor(x, z))
        torch.testing.assert_close(normed.backward_map(obs), plain.backward_map(x))
        torch.testing.assert_close(
            normed.forward_map(obs, action, z), plain.forward_map(x, action, z)
        )
        torch.testing.assert_close(normed.target_backward_map(obs), plain.target_backward_map(x))
    # The statistics travel with the weights, exported (no targets) or not.
    save_checkpoint(tmp_path / "best", normed, {"domain": "cheetah", "step": 1})
    stem = export_checkpoint(tmp_path, tmp_path / "export", {})
    for path in (tmp_path, stem):
        loaded, _ = load_checkpoint(path, device="cpu")  # compared with CPU tensors
        with torch.no_grad():
            torch.testing.assert_close(loaded.actor(obs, z), normed.actor(obs, z))
            torch.testing.assert_close(loaded.target_forward_map.norm.std, scale)
    with pytest.raises(ValueError, match="no observation normaliser"):
        plain.set_obs_stats(mean, std)


def test_behaviour_cloned_actor_loss_is_td3_bc_over_alpha() -> None:
    """-lambda Q + (pi - a)^2 with lambda = alpha / mean|Q|, divided by alpha = 1 / bc;
    the normaliser carries no gradient."""
    from rbfm.fb.losses import behaviour_cloned_actor_loss

    g = torch.Generator().manual_seed(4)
    F_pi, z = torch.randn(2, 9, 4, generator=g), torch.randn(9, 4, generator=g)
    pi = torch.randn(9, 3, generator=g, requires_grad=True)
    a = torch.randn(9, 3, generator=g)
    q = torch.minimum((F_pi[0] * z).sum(-1), (F_pi[1] * z).sum(-1))
    alpha = 2.5
    td3_bc = -alpha / q.abs().mean() * q.mean() + ((pi - a) ** 2).mean()
    loss = behaviour_cloned_actor_loss(F_pi, z, pi, a, 1 / alpha)
    assert loss.item() == pytest.approx(td3_bc.item() / alpha, rel=1e-6)
    F_pi.requires_grad_(True)
    behaviour_cloned_actor_loss(F_pi, z, pi, a, 0.0).backward()
    # Without cloning the gradient is actor_loss's divided by the held mean |Q|.
    want = torch.autograd.grad(actor_loss(F_pi, z), F_pi)[0] / q.abs().mean()
    torch.testing.assert_close(F_pi.grad, want)


def test_behaviour_cloning_keeps_the_actor_on_the_data_action() -> None:
    """From the same start and minibatches, in which the data takes a single action, the
    actor trained with cloning ends nearer that action than the actor trained without."""
    _, batch = _one_action_batch()
    obs = batch["observation"]
    distances = []
    for bc in (0.0, 1.0):
        trainer, out = _trained_on(batch, actor_bc=bc)
        assert ("bc" in out) == (bc > 0)
        with torch.no_grad():
            pi = trainer.model.actor(obs, trainer.sample_z(obs))
        distances.append(float((pi - batch["action"]).square().mean()))
    # Measured: 0.71 without cloning, 0.018 with it.
    assert distances[1] < 0.2 * distances[0], distances


def test_a_compiled_update_trains_the_same_model() -> None:
    """`compile` changes how the update runs, not what it computes; the modules that
    evaluation and export read stay the eager ones, with the trained parameters."""
    from rbfm.fb import FBModel, FBTrainer, fb_config

    cfg = fb_config("tiny", conservative_coef=0.5)  # every network call of the update
    eager, compiled = (FBTrainer(FBModel(17, 6, cfg), seed=0, compile=c) for c in (False, True))
    compiled.model.load_state_dict(eager.model.state_dict())
    for i in range(3):
        a, b = eager.update(_batch(i)), compiled.update(_batch(i))
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)
    for (k, p), q in zip(
        eager.model.state_dict().items(), compiled.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=k)
    # The update ran compiled views of the model's own modules, not copies or eager ones.
    views = (compiled._forward, compiled._backward, compiled._actor)
    views += (compiled._target_forward, compiled._target_backward)
    assert all(isinstance(v, torch._dynamo.eval_frame.OptimizedModule) for v in views)
    assert compiled._forward._orig_mod is compiled.model.forward_map  # type: ignore[union-attr]
    assert type(compiled.model.forward_map) is type(eager.model.forward_map)
    assert not any(k.startswith("_orig_mod") for k in compiled.model.state_dict())


def test_a_cuda_graph_is_refused_where_it_cannot_run() -> None:
    from rbfm.errors import ConfigError
    from rbfm.fb import FBModel, FBTrainer, fb_config

    cfg = fb_config("tiny")
    with pytest.raises(ConfigError, match=r"cuda_graph needs a CUDA device \(the model is on cpu"):
        FBTrainer(FBModel(17, 6, cfg).to("cpu"), seed=0, cuda_graph=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize(("bf16", "context"), [(False, 0), (True, 0), (True, 2)])
def test_a_cuda_graph_update_trains_the_same_model(bf16: bool, context: int) -> None:
    """Replaying the captured update computes what the eager one does: fresh random
    numbers each replay (the generator registered with the graph), the cosine schedule's
    rate read each replay, both optimizers and the Polyak step inside the graph; with a
    context, the windows and the bare next state are graph inputs too."""
    from rbfm.fb import FBModel, FBTrainer, fb_config
    from rbfm.fb.model import GRAPH_WARMUP

    cfg = fb_config("tiny", conservative_coef=0.5, lr_end=0.0, steps=12, bf16=bf16, context=context)
    eager, graphed = (
        FBTrainer(FBModel(17, 6, cfg).to("cuda"), seed=0, cuda_graph=g) for g in (False, True)
    )
    graphed.model.load_state_dict(eager.model.state_dict())
    width = eager.model.input_dim
    for i in range(GRAPH_WARMUP + 6):
        batch = _batch(i, obs_dim=width)
        if context:
            batch["next_state"] = batch["next_observation"][:, :17].clone()
        batch = {k: v.cuda() for k, v in batch.items()}
        a, b = eager.update(batch), graphed.update(batch)
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-3, atol=1e-4, msg=f"{k} at {i}")
    assert graphed._graph is not None and graphed.updates == eager.updates
    # The graph's rate is a GPU tensor that the schedule fills, the eager one a float.
    assert float(graphed.fb_opt.param_groups[0]["lr"]) == pytest.approx(
        eager.fb_opt.param_groups[0]["lr"], rel=1e-5
    )
    for (k, p), q in zip(
        eager.model.state_dict().items(), graphed.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4, msg=k)
    # The generator advanced as the eager one did: the next draws agree.
    torch.testing.assert_close(
        torch.randn(4, generator=graphed.gen, device="cuda"),
        torch.randn(4, generator=eager.gen, device="cuda"),
    )
