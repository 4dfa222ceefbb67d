"""Demonstrations and the three inference methods on small models."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from rbfm.errors import ConfigError, DatasetError
from rbfm.fb import FBModel, fb_config
from rbfm.fb.networks import project
from rbfm.inference import (
    Demos,
    generate_demos,
    infer,
    load_demos,
    method_config,
    save_demos,
    warm_start,
)
from rbfm.inference.common import full_losses, prepare
from rbfm.inference.continuation import _fit_duals, _stage_losses, _working_set
from rbfm.inference.rbfm_heavy import heavy_value
from rbfm.methods import FB_METHODS
from rbfm.robust import InactiveBallWarning, light_objective
from rbfm.robust.duals import light_smoothed


@pytest.fixture(scope="module")
def demos(model: FBModel) -> Demos:
    z = project(torch.randn(model.cfg.z_dim), model.radius)
    return generate_demos(model, "cheetah", "run", z, episodes=3, seed=0)


def test_demos_round_trip_and_transitions(demos: Demos, tmp_path: Path) -> None:
    assert demos.num_episodes == 3 and (demos.lengths == 1000).all()
    path = save_demos(tmp_path / "demos.npz", demos)
    back = load_demos(path, domain="cheetah")
    assert back.task == "run" and back.meta["seed"] == 0
    np.testing.assert_array_equal(back.observation, demos.observation)
    np.testing.assert_array_equal(back.physics, demos.physics)
    tr = back.transitions()
    assert len(tr["observation"]) == 3 * 999
    # s' of a transition is the next row's s, and a' the next action, within an episode.
    np.testing.assert_array_equal(tr["next_observation"][:998], tr["observation"][1:999])
    np.testing.assert_array_equal(tr["next_action"][:998], tr["action"][1:999])
    two = back.sample(2, seed=1)
    assert two.num_episodes == 2 and len(two.transitions()["action"]) == 2 * 999


def test_warm_start_is_the_mean_backward_embedding(model: FBModel, demos: Demos) -> None:
    z = warm_start(model, demos)
    with torch.no_grad():
        means = [model.backward_map(torch.as_tensor(s)).mean(0) for s in demos.next_states()]
    expected = torch.stack(means).mean(0)
    torch.testing.assert_close(z, project(expected, model.radius))
    assert float(z.norm()) == pytest.approx(model.radius, rel=1e-5)


class LinearActor(nn.Module):
    """pi(s, z) = A s + W z: an actor linear in z with a unique z for any action set."""

    def __init__(self, obs_dim: int, action_dim: int, z_dim: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.A = nn.Parameter(0.1 * torch.randn(action_dim, obs_dim, generator=g))
        self.W = nn.Parameter(torch.randn(action_dim, z_dim, generator=g) / math.sqrt(z_dim))

    def embed_state(self, obs: torch.Tensor) -> torch.Tensor:
        return obs @ self.A.T

    def from_embedding(
        self, s_embed: torch.Tensor, obs: torch.Tensor, z: torch.Tensor
    ) -> torch.Tensor:
        return s_embed + z @ self.W.T

    def forward(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.from_embedding(self.embed_state(obs), obs, z)


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("method", FB_METHODS)  # the descents; the reductions: test_reductions
def test_methods_keep_z_on_the_sphere(
    model: FBModel, demos: Demos, method: str, bf16: bool
) -> None:
    """The returned z is an iterate of the descent, not re-projected afterwards: its norm
    is what the descent's own projection made it."""
    res = infer(model, demos.sample(2, seed=0), method, seed=3, steps=60, bf16=bf16)
    assert res.method == method and 0 < res.steps <= 60 and res.seconds > 0
    assert float(res.z.norm()) == pytest.approx(model.radius, rel=1e-5)
    # L-BFGS (FB-IL) and the smoothed L-BFGS stages (the robust methods): the exact
    # full-set value at the start and after each round or stage; the best one returned.
    assert res.objective == min(res.trace) and len(res.trace) <= res.steps + 1
    if method == "fbil":
        assert np.all(np.diff(res.trace) <= 0)
    assert all(np.isfinite(res.trace)) and math.isfinite(res.objective)


def test_bf16_actor_computed_in_float32_matches_the_native_bf16_one(
    model: FBModel, demos: Demos, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CPUs without bfloat16 units the bf16 copy's Linears run in float32 from bfloat16
    inputs and weights: the same values as torch's bfloat16 kernel, up to the order of
    the sums, and the same gradient direction for z."""
    import rbfm.inference.common as common

    few = demos.sample(2, seed=0)
    z = project(torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(0)), 1.0)
    z = (z * model.radius).requires_grad_(True)
    out = {}
    for name, swap in (("float32", True), ("native", False)):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda s=swap: not s)
        data = prepare(model, few, bf16=True)
        linears = [m for m in data.actor.modules() if isinstance(m, nn.Linear)]
        assert (linears == []) == swap
        assert data.actor_obs.dtype == data.s_embed.dtype == torch.bfloat16
        losses = common.imitation_losses(data, None, z, model.radius, 0.0, None)
        (grad,) = torch.autograd.grad(losses.mean(), z)
        out[name] = (losses.detach(), grad)
    (l32, g32), (lnat, gnat) = out["float32"], out["native"]
    assert l32.dtype == torch.float32 and not torch.equal(l32, torch.zeros_like(l32))
    torch.testing.assert_close(l32, lnat, rtol=2e-2, atol=1e-3)
    assert float(torch.nn.functional.cosine_similarity(g32, gnat, dim=0)) > 0.99


def _linear_model() -> tuple[FBModel, torch.Tensor]:
    torch.manual_seed(1)
    m = FBModel(17, 6, fb_config("tiny", z_dim=4)).eval()
    m.actor = LinearActor(17, 6, 4)
    return m, project(torch.tensor([1.0, -2.0, 0.5, 1.5]), m.radius)


def _relabelled(demos: Demos, actions: np.ndarray) -> Demos:
    """`demos` with the actions of each step replaced (rows as Demos stores them)."""
    rows, _ = demos._offsets()
    act = np.concatenate(
        [actions[rows[i] : rows[i + 1] - 1] for i in range(demos.num_episodes)]
    ).astype(np.float32)
    return Demos(
        demos.domain,
        demos.task,
        demos.observation,
        act,
        demos.physics,
        demos.reward,
        demos.lengths,
        demos.returns,
        {},
    )


def _expert(demos: Demos, m: FBModel, z: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        obs = torch.as_tensor(demos.observation)
        return m.actor(obs, z.expand(len(obs), -1)).numpy()


@pytest.mark.parametrize("method", FB_METHODS)
def test_recovers_the_experts_z_with_a_linear_actor(demos: Demos, method: str) -> None:
    """The expert's actions are exactly pi_{z*}: every method's objective is minimal
    (zero loss on every state, whatever the weights) at z*, and nowhere else. At the
    default settings each method stops by its convergence rule, before its cap."""
    m, z_true = _linear_model()
    expert = _relabelled(demos, _expert(demos, m, z_true))
    res = infer(m, expert, method, seed=0)
    torch.testing.assert_close(res.z, z_true, atol=5e-3, rtol=0)
    assert res.converged and res.steps < method_config(method).steps
    # (RBFM-Heavy's first check is its dual at FB-IL's z, already near 0.)
    assert res.objective < 1e-2 and res.objective <= res.trace[0]


def test_robust_methods_beat_fbil_on_their_own_objectives(demos: Demos) -> None:
    """Demonstrations the model cannot reproduce (the expert's actions plus noise whose
    scale grows along each episode): FB-IL's z is a feasible point of RBFM-Light's and
    RBFM-Heavy's problems, so converged robust descents must do at least as well on
    their own objectives, and here strictly better (the worst case is not the mean)."""
    m, z_true = _linear_model()
    demos = demos.sample(1, seed=0)  # 999 transitions keep the test to seconds
    rng = np.random.default_rng(0)
    act = _expert(demos, m, z_true)
    scale = 0.05 + 0.5 * (np.arange(len(act)) % 1001 / 1000.0)[:, None] ** 4
    noisy = _relabelled(demos, act + scale * rng.standard_normal(act.shape))
    data = prepare(m, noisy)
    res = {k: infer(m, noisy, k, seed=0) for k in FB_METHODS}
    # Each stage starts from the best iterate, its dual variables fitted there first: no
    # stage ends above its start here, and both continuations converge. (With the duals
    # carried over, or zero at the start, Heavy's first stage left FB-IL's z for a worst
    # case 5% higher and six stages never came back below it.)
    for method in ("rbfm-light", "rbfm-heavy"):  # within float32's rounding of the value
        trace = res[method].trace
        assert res[method].converged and np.all(np.diff(trace) <= 1e-6 * trace[0]), method

    def tv(z: torch.Tensor) -> float:
        return float(light_objective(full_losses(data, z, m.radius, 4096), 0.8)[0])

    assert tv(res["rbfm-light"].z) < tv(res["fbil"].z) - 1e-3
    # RBFM-Heavy's objective at a z is exact (the linear critic's LP): its own objective
    # is the one it reports, and strictly below FB-IL's z's.
    heavy = res["rbfm-heavy"]
    refit = {k: heavy_value(m, noisy, r.z, method_config("rbfm-heavy"))[0] for k, r in res.items()}
    assert heavy.objective == pytest.approx(refit["rbfm-heavy"], rel=1e-5)
    assert refit["rbfm-heavy"] < refit["fbil"] - 1e-3 and heavy.trace[0] == pytest.approx(
        refit["fbil"], rel=1e-5
    )
    assert all(math.isfinite(v) for v in refit.values())


def test_fbil_lbfgs_reaches_the_adam_descents_loss_in_fewer_passes(demos: Demos) -> None:
    """FB-IL's default solver (L-BFGS on the full-set mean) against its Adam descent on
    demonstrations the model cannot reproduce: at least as low a loss, in fewer actor
    passes, and converged; L-BFGS is refused where the objective is sampled."""
    m, z_true = _linear_model()
    demos = demos.sample(1, seed=0)
    rng = np.random.default_rng(1)
    act = _expert(demos, m, z_true)
    noisy = _relabelled(demos, act + 0.3 * rng.standard_normal(act.shape))
    quasi = infer(m, noisy, "fbil", seed=0)
    adam = infer(m, noisy, "fbil", seed=0, solver="adam")
    assert quasi.converged and adam.converged and quasi.steps < adam.steps
    assert quasi.objective <= adam.objective + 1e-6
    losses = full_losses(prepare(m, noisy), quasi.z, m.radius, 4096)
    assert quasi.objective == pytest.approx(float(losses.mean()), rel=1e-6)
    with pytest.raises(ConfigError, match="'lbfgs' needs the deterministic full-set"):
        method_config("fbil", batch_size=512)
    with pytest.raises(ConfigError, match="solver: 'sgd' is not one of lbfgs, adam"):
        method_config("fbil", solver="sgd")


def test_paper_settings_are_tables_5_to_7(demos: Demos) -> None:
    """The "paper" settings: Tables 5-7, a constant step size and every step of the cap
    taken; the result still reports the full-set objective of its last iterate."""
    tables = {
        "fbil": {"steps": 3000, "lr": 1e-3},
        "rbfm-light": {"steps": 5000, "lr": 5e-4, "eps": 0.8},
        "rbfm-heavy": {"steps": 5000, "lr": 3e-4, "eps": 0.8, "gamma": 0.99},
    }
    for method, fields in tables.items():
        cfg = method_config(method, "paper")
        assert cfg.batch_size == 512 and cfg.noise_std == 0.1 and cfg.schedule == "constant"
        assert {k: getattr(cfg, k) for k in fields} == fields
    # The reductions take no settings: a name that would change nothing is refused here
    # too, as on the command line and in specs.
    for method in ("er", "fm"):
        with pytest.raises(ConfigError, match=f"'paper' does nothing for {method}"):
            method_config(method, "paper")
    heavy = method_config("rbfm-heavy", "paper")
    assert heavy.critic_lr == heavy.tau_lr == 3e-4 and heavy.tau_param == "raw"
    m, z_true = _linear_model()
    expert = _relabelled(demos, _expert(demos, m, z_true))
    data = prepare(m, expert)
    for method in FB_METHODS:
        res = infer(m, expert, method, seed=0, settings="paper", steps=400)
        assert res.steps == 400 and len(res.trace) == 8  # a check every 50 steps
        losses = full_losses(data, res.z, m.radius, 4096)
        if method == "fbil":
            assert res.objective == pytest.approx(float(losses.mean()), rel=1e-5)
        # (The paper's RBFM-Heavy need not lower its dual in 400 steps: its critic's
        # shift moves ~1e-4 a step; docs/inference.md.)
        assert res.objective < res.trace[0] or method == "rbfm-heavy"


def test_a_capped_descent_says_it_did_not_converge(model: FBModel, demos: Demos) -> None:
    for method, settings in [
        ("rbfm-light", "default"),
        ("rbfm-light", "paper"),
        ("fbil", "default"),
    ]:
        res = infer(model, demos.sample(2, seed=0), method, seed=0, steps=5, settings=settings)
        # L-BFGS stops at the cap too, after the line search under way (<= 25 evaluations).
        assert 5 <= res.steps < 5 + 25 and not res.converged, (method, settings)
        assert res.cap == "step cap"
    # One stage that lowers the objective: the stage cap, not the step cap, stops it.
    z = project(torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(2)), 1.0)
    noisy = generate_demos(model, "cheetah", "run", z * model.radius, 2, 0, action_noise=0.3)
    res = infer(model, noisy.sample(2, seed=0), "rbfm-light", seed=0, stages=1)
    assert not res.converged and res.cap == "stage cap" and res.steps < 3000


def test_a_z_file_says_what_stopped_an_unconverged_run(
    model: FBModel, demos: Demos, tmp_path: Path
) -> None:
    from rbfm.policy_files import infer_to_file, load_z

    meta = {"sha256": "0" * 64}
    d = demos.sample(2, seed=0)
    infer_to_file(model, meta, "m", d, "fbil", 0, tmp_path / "a.json", overrides={"steps": 5})
    assert load_z(tmp_path / "a.json")[1]["cap"] == "step cap"
    infer_to_file(model, meta, "m", d, "fbil", 0, tmp_path / "b.json")
    _, done = load_z(tmp_path / "b.json")
    assert done["converged"] and "cap" not in done
    # A converged result names no cap.
    assert infer(model, d, "fbil", seed=0).cap is None


def test_library_calls_leave_the_global_random_state_alone(model: FBModel, demos: Demos) -> None:
    before = torch.random.get_rng_state()
    infer(model, demos.sample(1, seed=0), "rbfm-heavy", seed=0, steps=5)
    heavy_value(
        model, demos.sample(1, seed=0), model_z(model), method_config("rbfm-heavy", steps=5)
    )
    assert torch.equal(torch.random.get_rng_state(), before)


def model_z(model: FBModel) -> torch.Tensor:
    return project(torch.ones(model.cfg.z_dim), model.radius)


def test_bad_inputs(model: FBModel, demos: Demos, tmp_path: Path) -> None:
    path = save_demos(tmp_path / "d.npz", demos)
    with pytest.raises(DatasetError, match="demonstrations of cheetah, not walker"):
        load_demos(path, domain="walker")
    walker_model = FBModel(24, 6, fb_config("tiny"))
    with pytest.raises(DatasetError, match="do not fit this model"):
        infer(walker_model, demos, "fbil", steps=1)
    with pytest.raises(ConfigError, match="valid choices: fbil, rbfm-light, rbfm-heavy"):
        infer(model, demos, "gail")
    with pytest.raises(DatasetError, match="no such demonstrations file"):
        load_demos(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    with pytest.raises(DatasetError, match="unreadable"):
        load_demos(tmp_path / "bad.npz")
    empty = Demos(
        "cheetah",
        "run",
        np.zeros((0, 17), np.float32),
        np.zeros((0, 6), np.float32),
        np.zeros((0, 18)),
        np.zeros(0),
        np.zeros(0, np.int64),
        np.zeros(0),
        {},
    )
    with pytest.raises(DatasetError, match="holds no episodes"):
        load_demos(save_demos(tmp_path / "empty.npz", empty))
    np.savez_compressed(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(DatasetError, match="not an rbfm demonstrations file"):
        load_demos(tmp_path / "other.npz")
    with np.load(save_demos(tmp_path / "ok.npz", demos)) as npz:
        arrays = dict(npz)
    np.savez_compressed(tmp_path / "more.npz", **arrays, next_observation=np.zeros(3))
    with pytest.raises(DatasetError, match=r"arrays \['next_observation'\] are not a demo"):
        load_demos(tmp_path / "more.npz")


def test_sweep_pairs_initial_states_across_entries(model: FBModel) -> None:
    from rbfm.baselines import as_policy, drbc
    from rbfm.evaluation.sweep import sweep

    z = project(
        torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(1)), model.radius
    )
    net = drbc.DeterministicPolicy(17, 6, (16,))
    rows = sweep(
        model,
        [("a", z), ("b", z)],
        "cheetah",
        "run",
        "joint_friction",
        [0.0, 25.0],
        episodes=2,
        policies=[("c", as_policy(net)), ("d", as_policy(net))],
    )
    by = {(r.method, r.level): r.mean for r in rows}
    for level in (0.0, 25.0):  # identical agents see identical episodes
        assert by[("a", level)] == by[("b", level)] and by[("c", level)] == by[("d", level)]
    assert by[("a", 0.0)] != by[("c", 0.0)]


def test_noisy_experts_are_not_the_models_own_policy(model: FBModel) -> None:
    """`action_noise` records the noisy actions actually executed: the model's own
    deterministic policy no longer reproduces them; without noise it does exactly."""
    z = project(torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(2)), 1.0)
    z = project(z, model.radius)
    for noise in (0.0, 0.3):
        d = generate_demos(model, "cheetah", "run", z, episodes=1, seed=0, action_noise=noise)
        assert d.meta["action_noise"] == noise
        assert np.abs(d.action).max() <= 1.0
        data = prepare(model, d)
        loss = float(full_losses(data, z, model.radius, 4096).mean())
        if noise == 0:
            assert loss < 1e-10
        else:  # E||clip(a + n) - a||^2 ~ 6 x 0.09 less the clipping
            assert 0.2 < loss < 0.6
    with pytest.raises(ConfigError, match="action_noise"):
        generate_demos(model, "cheetah", "run", z, episodes=1, seed=0, action_noise=-1.0)


@pytest.mark.parametrize("method", ["rbfm-light", "rbfm-heavy"])
def test_working_sets_leave_the_continuation_where_it_was(
    model: FBModel, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stages run on the transitions that weigh (`continuation._working_set`) reach the
    same exact values, stage by stage, as stages run on every transition (to 1e-3: the
    actor's smaller passes sum in another order, and L-BFGS's path amplifies last bits)."""
    from rbfm.inference import continuation

    sizes: list[int] = []

    def spy(*args: Any) -> torch.Tensor | None:
        members = _working_set(*args)
        sizes.append(-1 if members is None else len(members))
        return members

    monkeypatch.setattr(continuation, "_working_set", spy)
    z = project(torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(2)), 1.0)
    noisy = generate_demos(model, "cheetah", "run", z * model.radius, 3, 0, action_noise=0.3)
    d = noisy.sample(2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InactiveBallWarning)
        full = infer(model, d, method, seed=0, working_set=0)
        sizes.clear()
        sets = infer(model, d, method, seed=0)
    assert any(k >= 0 for k in sizes), sizes  # some stage ran on a subset
    assert full.converged and sets.converged and len(full.trace) == len(sets.trace) >= 4
    np.testing.assert_allclose(sets.trace, full.trace, rtol=1e-3)
    assert sets.objective == pytest.approx(full.objective, rel=1e-3)


def test_the_working_set_holds_what_weighs_and_leaves_out_what_does_not() -> None:
    """For RBFM-Light's smoothed objective at a low temperature: every loss above lambda*
    (the worst case's support) is in the set, every loss 40 temperatures below it out,
    and a stage's losses are the actor's on the set, the frozen ones elsewhere."""
    losses = torch.linspace(0.0, 2.0, 1000)
    lam = torch.tensor(float(light_objective(losses, 0.8)[1]))
    t = 0.002

    def surrogate(v: torch.Tensor, temp: float) -> torch.Tensor:
        return light_smoothed(v, lam, 0.8, temp)

    members = _working_set(surrogate, losses, t, 30.0)
    assert members is not None
    inside = torch.zeros(1000, dtype=torch.bool)
    inside[members] = True
    assert inside[losses >= lam].all() and not inside[losses < lam - 40 * t].any()
    assert _working_set(surrogate, losses, 10.0, 30.0) is None  # hot: everything weighs
    assert _working_set(surrogate, losses, t, 0.0) is None  # off


def test_stage_losses_run_the_actor_only_on_the_set(model: FBModel, demos: Demos) -> None:
    data = prepare(model, demos.sample(1, seed=0))
    z = warm_start(model, demos)
    losses = full_losses(data, z, model.radius, 16_384)
    members = torch.arange(0, len(losses), 3)
    v = z.clone().requires_grad_(True)
    stage = _stage_losses(data, members, losses, model.radius)(v)
    torch.testing.assert_close(stage, losses)
    (out,) = torch.autograd.grad(stage[1], v, retain_graph=True)  # 1 is left out: frozen
    (member,) = torch.autograd.grad(stage[3], v)
    assert float(out.abs().max()) == 0.0 and float(member.abs().max()) > 0.0


def test_a_stage_starts_with_its_duals_fitted_at_the_start() -> None:
    """`_fit_duals` minimises the smoothed flow dual over beta alone at fixed losses: its
    gradient in beta vanishes there, and the value is at most the one at beta = 0."""
    from rbfm.robust.flow_lp import flow_smoothed

    g = torch.Generator().manual_seed(0)
    feat, next_feat = torch.randn(200, 6, generator=g), torch.randn(200, 6, generator=g)
    losses = torch.rand(200, generator=g)
    beta = torch.zeros(6, requires_grad=True)

    def surrogate(values: torch.Tensor, t: float) -> torch.Tensor:
        return flow_smoothed(values, beta, feat, next_feat, 0.99, t)

    at_zero = surrogate(losses, 0.05)
    (grad_zero,) = torch.autograd.grad(at_zero, beta)
    _fit_duals(surrogate, losses, [beta], 0.05)
    value = surrogate(losses, 0.05)
    (grad,) = torch.autograd.grad(value, beta)
    assert float(value.detach()) < float(at_zero.detach()) - 0.01
    assert float(grad.norm()) < 1e-3 * float(grad_zero.norm())  # fp32's floor, ~2e-4
