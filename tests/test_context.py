"""FB with a context of recent history: one window layout in training, demonstrations
and rollouts; episodes start with an empty history; checkpoints, inference and
evaluation accept such a model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rbfm.data import load_dataset
from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy
from rbfm.evaluation.sweep import sweep
from rbfm.exploration import CollectConfig, collect
from rbfm.fb import FBModel, fb_config
from rbfm.fb.checkpoint import load_checkpoint
from rbfm.fb.context import demo_inputs, episode_windows, slot_width
from rbfm.fb.networks import project
from rbfm.inference import generate_demos, infer
from rbfm.inference.adapt import AdaptConfig, adapt
from rbfm.training.pretrain import PretrainConfig, _Windows, pretrain

K = 3


@pytest.fixture(scope="module")
def model() -> FBModel:
    torch.manual_seed(0)
    return FBModel(17, 6, fb_config("tiny", context=K)).eval()


def test_windows_hold_the_last_k_steps_and_nothing_before_the_episode() -> None:
    obs = np.arange(5 * 2, dtype=np.float32).reshape(5, 2)  # 4 steps, rows 0..4
    actions = -np.arange(4, dtype=np.float32)[:, None] - 1
    win = episode_windows(obs, actions, K).reshape(5, K, slot_width(2, 1))
    assert (win[0] == 0).all()  # the reset row has no history
    np.testing.assert_array_equal(win[1, -1], [0, 1, -1, 1])  # (s_0, a_0, in episode)
    assert (win[1, :-1] == 0).all()
    np.testing.assert_array_equal(win[4], [[2, 3, -2, 1], [4, 5, -3, 1], [6, 7, -4, 1]])


def test_rollouts_and_demonstrations_build_the_same_windows(model: FBModel) -> None:
    z = project(torch.randn(model.cfg.z_dim), model.radius)
    demos = generate_demos(model, "cheetah", "run", z, episodes=2, seed=0)
    t = demo_inputs(demos, K)
    assert t["observation"].shape[1] == model.input_dim
    np.testing.assert_array_equal(t["state"], t["observation"][:, :17])
    with torch.no_grad():
        again = model.act(torch.as_tensor(t["observation"]), z).numpy()
    # The actions the rollout's policy chose are the policy on the demonstration windows.
    np.testing.assert_allclose(again, t["action"], atol=1e-6)
    # Noisy experts: the window holds the executed (noisy) actions.
    noisy = generate_demos(model, "cheetah", "run", z, episodes=1, seed=1, action_noise=0.3)
    tn = demo_inputs(noisy, K)
    with torch.no_grad():
        clean = model.act(torch.as_tensor(tn["observation"]), z).numpy()
    assert 0.01 < np.abs(clean - tn["action"]).mean() < 0.5


def test_the_history_resets_between_runs_of_one_policy(model: FBModel) -> None:
    z = project(torch.randn(model.cfg.z_dim), model.radius)
    policy = fb_policy(model, z)
    with RolloutEngine(0, max_envs=2) as engine:
        a = engine.run(EnvSpec("cheetah", "run"), policy, 3, seed=4)  # two chunks
        b = engine.run(EnvSpec("cheetah", "run"), policy, 3, seed=4)
    np.testing.assert_array_equal(a.returns, b.returns)
    rows = sweep(model, [("z", z)], "cheetah", "run", "joint_friction", [0.0, 10.0], 2)
    assert len(rows) == 2


def test_a_context_model_trains_round_trips_and_is_inferred_and_adapted(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    collect(CollectConfig("cheetah", "random", 2000, str(data), seed=1), progress=False)
    ds = load_dataset(data)
    # Training batches gather the same windows as an episode's own.
    index = np.arange(len(ds))
    windows = _Windows(ds, index, K, torch.device("cpu"))
    t = ds.transitions(index)
    idx = torch.tensor([0, 1, 5, 998, 999, 1500])
    batch = {
        "observation": torch.as_tensor(t.observation)[idx],
        "next_observation": torch.as_tensor(t.next_observation)[idx],
    }
    wide = windows.widen(batch, idx)
    rows = ds.rows
    for i in idx.tolist():
        e = int(ds.transition_episodes[i])
        start, steps = int(ds.episode_starts[e]), int(ds.episode_lengths[e])
        obs = rows["observation"][start : start + steps + 1]
        win = episode_windows(obs, rows["action"][start + 1 : start + steps + 1], K)
        r = int(ds.transition_rows[i]) - start
        np.testing.assert_array_equal(wide["observation"][idx.tolist().index(i), 17:], win[r - 1])
        np.testing.assert_array_equal(wide["next_observation"][idx.tolist().index(i), 17:], win[r])
    run = pretrain(
        PretrainConfig(
            dataset=str(data),
            out=str(tmp_path / "run"),
            preset="tiny",
            steps=20,
            eval_every=20,
            checkpoint_every=20,
            overrides=(("context", K),),
        ),
        progress=False,
    )
    trained, meta = load_checkpoint(run / "best")
    assert trained.cfg.context == K and trained.input_dim == 17 + K * slot_width(17, 6)
    z = torch.tensor(meta["task_z"]["run"])
    demos = generate_demos(trained, "cheetah", "run", z, episodes=2, seed=0, action_noise=0.3)
    for method in ("fbil", "rbfm-light", "rbfm-heavy"):
        res = infer(trained, demos, method, seed=0, steps=30)
        assert torch.isfinite(res.z).all()
    res = adapt(
        trained, demos, z, EnvSpec("cheetah", "run", "joint_friction", 10.0), AdaptConfig(budget=2)
    )
    assert res.episodes == 2
