"""DRBC and BE-DROIL: shared duals, recovery of a linear expert, saving, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from rbfm.baselines import bedroil, drbc, load_weights, read_policy_meta, save_policy
from rbfm.errors import ConfigError, DatasetError
from rbfm.fb.checkpoint import CheckpointError
from rbfm.inference import Demos, rbfm_heavy, rbfm_light
from rbfm.robust import duals, get_divergence


def _linear_expert_demos(episodes: int = 4, steps: int = 200) -> tuple[Demos, np.ndarray]:
    rng = np.random.default_rng(0)
    K = rng.normal(0, 0.3, (6, 17))
    rows = episodes * (steps + 1)
    obs = rng.standard_normal((rows, 17)).astype(np.float32)
    # Row t of an episode's actions is the action taken at observation t.
    keep = np.ones(rows, bool)
    keep[steps :: steps + 1] = False  # the last observation of each episode has no action
    actions = np.tanh(obs[keep] @ K.T).astype(np.float32)
    demos = Demos(
        "cheetah",
        "run",
        obs,
        actions,
        np.zeros((rows, 18)),
        np.zeros(len(actions)),
        np.full(episodes, steps),
        np.zeros(episodes),
        {},
    )
    return demos, K


def test_drbc_and_rbfm_light_share_the_exact_tv_dual() -> None:
    assert drbc.light_objective is rbfm_light.light_objective is duals.light_objective
    policy = drbc.DeterministicPolicy(17, 6, (32, 32))
    demos, _ = _linear_expert_demos(1, 40)
    tr = demos.transitions()
    obs, act = torch.as_tensor(tr["observation"]), torch.as_tensor(tr["action"])
    losses = (policy(obs) - act).square().sum(-1).detach().double()
    value, _ = duals.light_objective(losses, 0.3)
    # The TV-ball worst case as a linear program over distributions q (uniform nominal).
    n, p, ls = len(losses), np.full(len(losses), 1 / len(losses)), losses.numpy()
    eye = np.eye(n)
    res = linprog(
        np.concatenate([-ls, np.zeros(n)]),
        A_ub=np.block([[eye, -eye], [-eye, -eye], [np.zeros((1, n)), 0.5 * np.ones((1, n))]]),
        b_ub=np.concatenate([p, -p, [0.3]]),
        A_eq=np.concatenate([np.ones(n), np.zeros(n)])[None],
        b_eq=[1.0],
        bounds=[(0, None)] * (2 * n),
    )
    assert float(value) == pytest.approx(-res.fun, abs=1e-9)


def test_bedroil_and_rbfm_heavy_share_the_critic_loss() -> None:
    # BE-DROIL's critic step and RBFM-Heavy's critic are built on the same pure dual.
    assert bedroil.heavy_critic_loss is rbfm_heavy.heavy_critic_loss is duals.heavy_critic_loss
    g = torch.Generator().manual_seed(0)
    q0, q, q_next, loss = (torch.randn(64, generator=g) for _ in range(4))
    c = duals.heavy_residual(loss, q, q_next, 0.99)
    div = get_divergence("soft_tv")
    floor = div.tau_floor(c)  # below it some c / tau exceeds 1/2: the dual is +inf
    assert float(floor) > 0.7
    below, _ = duals.heavy_critic_loss(q0, c, torch.tensor(0.7), 0.8, 0.99, div)
    assert math.isinf(float(below))
    value, w = duals.heavy_critic_loss(q0, c, floor, 0.8, 0.99, div)
    expected = (1 - 0.99) * q0.mean() + 0.8 * floor + (w * c - floor * div.f(w)).mean()
    torch.testing.assert_close(value, expected)
    assert torch.isfinite(w).all()
    # The step first raises tau to the floor (where the dual is finite), evaluates that
    # value and w*, steps, then keeps tau >= 1e-6: an SGD step of size 10 would take
    # it below zero.
    tau_g = floor.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(duals.heavy_critic_loss(q0, c, tau_g, 0.8, 0.99, div)[0], tau_g)
    assert float(floor) - 10 * float(grad) < 0
    tau_p = torch.tensor(0.7, requires_grad=True)
    params = [t.clone().requires_grad_(True) for t in (q, q_next, q0)]
    opt = torch.optim.SGD([*params, tau_p], lr=10.0)
    step_value, step_w = bedroil.critic_step(*params, loss, tau_p, opt, 0.8, 0.99, div)
    torch.testing.assert_close(step_value.detach(), expected)
    torch.testing.assert_close(step_w, w)
    assert float(tau_p.detach()) == pytest.approx(1e-6, rel=1e-6)


@pytest.mark.parametrize("method", ["drbc", "bedroil"])
def test_recovers_a_deterministic_linear_expert(method: str) -> None:
    demos, K = _linear_expert_demos()
    if method == "drbc":
        cfg = drbc.DRBCConfig(
            eps=0.3,
            hidden=(64, 64),
            steps=3000,
            batch_size=256,
            lr=3e-3,
            decay_every=1000,
            lr_decay=0.7,
        )
        result = drbc.train(demos, 17, 6, cfg, seed=0)
    else:
        cfg = bedroil.BEDROILConfig(hidden=(64, 64), steps=1500, batch_size=256, lr=3e-3)
        result = bedroil.train(demos, 17, 6, cfg, seed=0)
    test_obs = np.random.default_rng(9).standard_normal((500, 17)).astype(np.float32)
    with torch.no_grad():
        pred = result.policy(torch.as_tensor(test_obs)).numpy()
    err = np.square(pred - np.tanh(test_obs @ K.T)).sum(-1).mean()
    assert err < 0.05, err  # a random policy is ~1.5 here
    assert result.steps == cfg.steps and result.seconds > 0


def test_policies_round_trip_and_refuse_bad_files(tmp_path: Path) -> None:
    policy = bedroil.TanhGaussianPolicy(17, 6, (32, 32))
    stem = save_policy(tmp_path / "p", policy, {"method": "bedroil", "domain": "cheetah"})
    meta = read_policy_meta(stem)
    assert meta["method"] == "bedroil"
    back = load_weights(stem, bedroil.TanhGaussianPolicy(17, 6, (32, 32)), meta)
    obs = torch.randn(5, 17)
    torch.testing.assert_close(back(obs), policy(obs))
    with pytest.raises(CheckpointError, match="does not hold this policy"):
        load_weights(stem, bedroil.TanhGaussianPolicy(17, 6, (64, 64)), meta)
    (tmp_path / "q.json").write_text('{"format": "other"}')
    with pytest.raises(CheckpointError, match="not an rbfm policy"):
        read_policy_meta(tmp_path / "q")


def test_bad_inputs() -> None:
    demos, _ = _linear_expert_demos(1, 10)
    with pytest.raises(DatasetError, match="do not fit a policy"):
        drbc.train(demos, 24, 6, drbc.DRBCConfig(steps=1), seed=0)
    with pytest.raises(ConfigError, match="valid choices: paper, cpu"):
        drbc.drbc_config("huge", "cheetah")
    assert drbc.drbc_config("paper", "cheetah").eps == 0.3
    assert drbc.drbc_config("paper", "quadruped").lr_decay == 0.9
    with pytest.raises(ConfigError, match="valid choices: paper, cpu"):
        bedroil.bedroil_config("tiny")


class _Killed(Exception):
    pass


@pytest.mark.parametrize("method", ["drbc", "bedroil"])
def test_an_interrupted_run_resumes_to_the_uninterrupted_result(
    method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demos, _ = _linear_expert_demos(2, 50)
    module = {"drbc": drbc, "bedroil": bedroil}[method]
    cfg = (
        drbc.DRBCConfig(hidden=(32, 32), steps=50, batch_size=32, decay_every=7, trace_every=3)
        if method == "drbc"
        else bedroil.BEDROILConfig(hidden=(32, 32), steps=50, batch_size=32, trace_every=3)
    )
    full = module.train(demos, 17, 6, cfg, seed=1)  # type: ignore[attr-defined]

    from rbfm.baselines import common

    real_bar = common.steps_bar  # the loop both baselines share

    def killed_at_33(steps, desc, enabled):  # type: ignore[no-untyped-def]
        for step in real_bar(steps, desc, enabled):
            if step == 33:
                raise _Killed
            yield step

    resume = tmp_path / "run.resume.pt"
    monkeypatch.setattr(common, "steps_bar", killed_at_33)
    with pytest.raises(_Killed):
        module.train(demos, 17, 6, cfg, seed=1, resume=resume, resume_every=10)  # type: ignore[attr-defined]
    assert resume.exists()
    monkeypatch.setattr(common, "steps_bar", real_bar)
    with pytest.raises(CheckpointError, match="other settings"):  # another seed: refused
        module.train(demos, 17, 6, cfg, seed=2, resume=resume, resume_every=10)  # type: ignore[attr-defined]
    back = module.train(demos, 17, 6, cfg, seed=1, resume=resume, resume_every=10)  # type: ignore[attr-defined]
    assert back.steps == 20 and not resume.exists()  # resumed at 30, file removed at the end
    assert back.trace == full.trace
    for a, b in zip(
        back.policy.state_dict().values(), full.policy.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
