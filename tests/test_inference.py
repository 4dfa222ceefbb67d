"""Demonstrations and the three inference methods on small models."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from rbfm.errors import ConfigError, DatasetError
from rbfm.fb import FBModel, fb_config
from rbfm.fb.networks import project
from rbfm.inference import (
    METHODS,
    Demos,
    generate_demos,
    infer,
    load_demos,
    save_demos,
    warm_start,
)


@pytest.fixture(scope="module")
def model() -> FBModel:
    torch.manual_seed(0)
    return FBModel(17, 6, fb_config("tiny")).eval()


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


@pytest.mark.parametrize("method", list(METHODS))
def test_recovers_the_experts_z_with_a_linear_actor(demos: Demos, method: str) -> None:
    """The expert's actions are exactly pi_{z*}: every method's objective is minimal
    (zero loss on every state, whatever the weights) at z*, and nowhere else."""
    torch.manual_seed(1)
    m = FBModel(17, 6, fb_config("tiny", z_dim=4)).eval()
    m.actor = LinearActor(17, 6, 4)
    z_true = project(torch.tensor([1.0, -2.0, 0.5, 1.5]), m.radius)
    with torch.no_grad():
        actions = m.actor(
            torch.as_tensor(demos.observation), z_true.expand(len(demos.observation), -1)
        )
    rows, _ = demos._offsets()
    act = np.concatenate([actions[rows[i] : rows[i + 1] - 1].numpy() for i in range(3)])
    expert = Demos(
        "cheetah",
        "run",
        demos.observation,
        act,
        demos.physics,
        demos.reward,
        demos.lengths,
        demos.returns,
        {},
    )
    res = infer(m, expert, method, seed=0, steps=1500, lr=0.02, noise_std=0.0)
    torch.testing.assert_close(res.z, z_true, atol=5e-3, rtol=0)


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("method", list(METHODS))
def test_methods_keep_z_on_the_sphere(
    model: FBModel, demos: Demos, method: str, bf16: bool
) -> None:
    res = infer(model, demos.sample(2, seed=0), method, seed=3, steps=60, batch_size=64, bf16=bf16)
    assert res.method == method and res.steps == 60 and res.seconds > 0
    assert float(res.z.norm()) == pytest.approx(model.radius, rel=1e-5)
    assert len(res.trace) == 6 and all(np.isfinite(res.trace))


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
