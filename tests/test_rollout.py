"""The rollout engine: lockstep episodes, worker-independent results, unstable physics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rbfm.envs import TASKS, make_env
from rbfm.evaluation import EnvSpec, RolloutEngine, iqm, mean_ci


def _linear_policy(obs: np.ndarray, episodes: np.ndarray | None = None) -> np.ndarray:
    w = np.linspace(-1, 1, obs.shape[1] * 6).reshape(obs.shape[1], 6)
    return np.tanh(obs @ w).astype(np.float32)


def test_results_match_a_plain_loop_and_do_not_depend_on_workers() -> None:
    spec = EnvSpec("cheetah", "run", "joint_friction", 10.0)
    results = []
    for workers in (0, 2):
        with RolloutEngine(workers) as engine:
            results.append(engine.run(spec, _linear_policy, 4, seed=3))
    np.testing.assert_array_equal(results[0].returns, results[1].returns)
    assert (results[0].lengths == 1000).all() and not results[0].unstable.any()
    with RolloutEngine(3) as engine:  # more workers than episodes: the third waits
        two = engine.run(spec, _linear_policy, 2, seed=3)
    np.testing.assert_array_equal(two.returns, results[0].returns[:2])
    env = make_env("cheetah", "run", "joint_friction", 10.0)
    env.reseed(np.random.SeedSequence((3, 2)))  # episode 2 of seed 3
    ts, total = env.reset(), 0.0
    while not ts.last():
        ts = env.step(_linear_policy(ts.observation[None])[0])
        total += ts.reward
    assert results[0].returns[2] == pytest.approx(total, rel=1e-9)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unstable_episode_is_recorded_and_the_run_goes_on(workers: int) -> None:
    calls = {"n": 0}

    def policy(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        act = _linear_policy(obs)
        if calls["n"] == 50:
            act[0] = np.nan  # MuJoCo flags BADCTRL: dm_control raises PhysicsError
        return act

    with RolloutEngine(workers) as engine:
        res = engine.run(EnvSpec("cheetah", "walk"), policy, 3, seed=0)
    assert res.unstable.tolist() == [True, False, False]
    assert res.lengths.tolist() == [49, 1000, 1000]
    assert np.isfinite(res.returns).all()


def test_iqm_and_confidence_interval() -> None:
    assert iqm(np.array([0, 1, 2, 3, 4, 5, 6, 100.0])) == pytest.approx(3.5)
    mean, half = mean_ci(np.array([1.0, 2.0, 3.0]))
    assert mean == 2.0 and half == pytest.approx(2.4841, rel=1e-4)  # t(0.975, 2) * 1 / sqrt 3


def test_a_mixed_batch_equals_separate_runs() -> None:
    """Episodes of several tasks and task vectors in one batch: each episode gets its own
    row of actions and the same initial state as in a run of its task alone."""
    w = {0: 1.0, 1: -1.0}  # a different "task vector" per task, selected by episode index
    specs = [EnvSpec("cheetah", "run")] * 2 + [EnvSpec("cheetah", "walk_backward")] * 2
    signs = np.array([w[0], w[0], w[1], w[1]])

    def mixed(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        return signs[episodes, None] * _linear_policy(obs)

    with RolloutEngine(0) as engine:
        together = engine.run(specs, mixed, seed=4)
        alone = [
            engine.run(EnvSpec("cheetah", "run"), lambda o, e: _linear_policy(o), 2, seed=4),
            engine.run(
                EnvSpec("cheetah", "walk_backward"), lambda o, e: -_linear_policy(o), 2, seed=4
            ),
        ]
    np.testing.assert_allclose(
        together.returns, np.concatenate([r.returns for r in alone]), rtol=1e-12
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_recorded_trajectories_are_the_episodes_that_ran(workers: int) -> None:
    from rbfm.data import relabel

    with RolloutEngine(workers) as engine:
        res = engine.run(EnvSpec("walker", "walk"), _linear_policy, 2, seed=1, record=True)
    assert res.trajectories is not None and len(res.trajectories) == 2
    for traj, ret in zip(res.trajectories, res.returns, strict=True):
        assert traj["observation"].shape == (1001, 24) and traj["physics"].shape == (1001, 18)
        assert traj["action"].shape == (1000, 6) and traj["reward"].shape == (1000,)
        assert traj["reward"].sum() == pytest.approx(ret)
        np.testing.assert_allclose(
            traj["action"], _linear_policy(traj["observation"][:-1]), rtol=1e-6
        )
        # The physics rows are the states the rewards were computed at.
        np.testing.assert_allclose(
            relabel(traj["physics"][1:], "walker", "walk", progress=False),
            traj["reward"],
            atol=1e-9,
        )


def test_tables_round_trip_and_plot(tmp_path: Path) -> None:
    from rbfm.errors import ConfigError
    from rbfm.evaluation.sweep import SweepRow, read_csv, write_csv
    from rbfm.reporting.plots import plot_nominal

    rows = [
        SweepRow("fbil", None, 101.5, 3.25, 5, 100, 0),
        SweepRow("drbc", None, 80.0, 12.0, 5, 100, 2),
    ]
    path = tmp_path / "nominal.csv"
    write_csv(path, rows, {"domain": "cheetah", "task": "walk", "perturbation": "none"})
    back, extra = read_csv(path)
    assert back == rows
    assert extra == {"domain": "cheetah", "task": "walk", "perturbation": "none"}
    png = plot_nominal([("walk", back), ("run", back[:1])], "nominal", tmp_path / "n.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.csv").write_text("method,level\nfbil,\n")
    with pytest.raises(ConfigError, match="not a table"):
        read_csv(tmp_path / "bad.csv")


def test_large_batches_run_in_chunks_with_the_same_results() -> None:
    specs = [EnvSpec("cheetah", "run")] * 3 + [EnvSpec("cheetah", "walk_backward")] * 2
    signs = np.array([1.0, -1.0, 0.5, 1.0, -0.5])

    def mixed(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        return signs[episodes, None] * _linear_policy(obs)

    with RolloutEngine(0) as whole, RolloutEngine(0, max_envs=2) as chunked:
        a = whole.run(specs, mixed, seed=2, record=True)
        b = chunked.run(specs, mixed, seed=2, record=True, progress="chunks")
    np.testing.assert_array_equal(a.returns, b.returns)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    assert a.trajectories is not None and b.trajectories is not None
    for ta, tb in zip(a.trajectories, b.trajectories, strict=True):
        np.testing.assert_array_equal(ta["action"], tb["action"])


def test_episodes_reuse_finished_physics_and_stay_bitwise_those_of_env_step() -> None:
    """Every domain under a perturbation, twice through one engine (the second run steps
    the first run's MjData again) and against a plain `RbfmEnv.step` loop: the same
    returns and recorded observations, bit for bit. Templates stay bounded."""
    from rbfm.evaluation.rollout import _Shard

    for domain, family, level in [
        ("walker", "body_mass", 100.0),
        ("quadruped", "contact_stiffness", 0.25),
        ("cheetah", "range_of_motion", 60.0),
    ]:
        task = TASKS[domain][1]
        spec = EnvSpec(domain, task, family, level)
        env = make_env(domain, task, family, level)
        w = np.random.default_rng(0).uniform(-1, 1, (env.spec.obs_dim, env.spec.action_dim))

        def policy(obs: np.ndarray, episodes: np.ndarray, w: np.ndarray = w) -> np.ndarray:
            return np.tanh(obs @ w).astype(np.float32)

        with RolloutEngine(0) as engine:
            first = engine.run(spec, policy, 2, seed=4, record=True)
            again = engine.run(spec, policy, 2, seed=4, record=True)
        np.testing.assert_array_equal(first.returns, again.returns)
        env.reseed(np.random.SeedSequence((4, 1)))
        ts, rewards = env.reset(), []
        observations = [ts.observation]
        for _ in range(300):  # the start of episode 1, step by step
            ts = env.step(policy(ts.observation[None], np.zeros(1))[0])
            rewards.append(ts.reward)
            observations.append(ts.observation)
        assert first.trajectories is not None
        np.testing.assert_array_equal(first.trajectories[1]["observation"][:301], observations)
        np.testing.assert_array_equal(first.trajectories[1]["reward"][:300], rewards)
    shard = _Shard(max_dynamics=2)
    for level in (0.0, 10.0, 20.0, 25.0):
        shard.reset(
            [(EnvSpec("cheetah", "run", "joint_friction", level), (0, k)) for k in range(3)]
        )
    assert len(shard._dynamics) == 2


def test_an_episode_s_actions_do_not_depend_on_how_many_share_its_actor_call() -> None:
    import torch

    from rbfm.evaluation.fb_policy import ROWS, batch_invariant, fb_policy
    from rbfm.fb.checkpoint import load_checkpoint

    model, meta = load_checkpoint("cheetah:rnd-v1")
    z = torch.tensor(meta["task_z"]["walk"])
    obs = torch.randn(400, 17, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model.act(obs, z)
        for n in (1, 2, 3, 5, 7, 9, 13, 399):  # the row counts whose kernels round apart
            for start in (0, 101):
                rows = batch_invariant(model.act, obs[start : start + n], z)
                assert torch.equal(rows, full[start : start + n]), (n, start)
    assert ROWS == 8
    # Through the rollout engine's policy: one episode's actions, alone or beside others.
    act = fb_policy(model, z)
    alone = act(obs[:1].numpy(), np.array([0]))
    assert np.array_equal(alone, act(obs[:5].numpy(), np.arange(5))[:1])


def test_goal_and_baseline_policies_do_not_depend_on_their_batch() -> None:
    import torch

    from rbfm.baselines import as_policy, build_policy
    from rbfm.fb.checkpoint import load_checkpoint
    from rbfm.inference.goal import GoalPolicy, GoalSequences

    model, _ = load_checkpoint("cheetah:rnd-v1")
    obs = torch.randn(400, 17, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        b = model.backward_map(obs)
    seqs = [b[10 * i : 10 * i + 30] for i in range(3)]
    policies = {
        index: lambda index=index: GoalPolicy(
            model, GoalSequences(seqs, b[:3], 0.0, index, seqs if index == "state" else [])
        )
        for index in ("time", "state")
    }
    torch.manual_seed(0)
    network = as_policy(build_policy("drbc", 17, 6, (64, 64)))
    policies["drbc"] = lambda: network
    for name, make in policies.items():
        everyone = _begun(make())(obs.numpy(), np.arange(400))
        for n in (1, 2, 3, 5, 9, 13):  # row counts whose kernels round apart unpadded
            for start in (0, 101):
                rows = _begun(make())(obs[start : start + n].numpy(), np.arange(start, start + n))
                assert np.array_equal(rows, everyone[start : start + n]), (name, n, start)


def _begun(policy: Any) -> Any:
    """`policy` with `begin` called for 400 episodes where it keeps per-episode state."""
    if hasattr(policy, "begin"):
        policy.begin(400)
    return policy
