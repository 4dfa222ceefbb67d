"""Dynamics-diverse data: several families at once, drawn per episode, stored and
reproduced."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rbfm.data import load_dataset, relabel_all, write_episode
from rbfm.data.exorl import KEYS, parse_name, read_episode
from rbfm.data.resimulate import Collection, regenerate
from rbfm.envs import get_domain, get_perturbation, make_env
from rbfm.envs.dynamics import DynamicsDistribution, dynamics_of_vector, dynamics_vector
from rbfm.errors import ConfigError, DatasetError
from rbfm.exploration import CollectConfig, collect


def _cfg(out: Path, transitions: int, nominal_share: float = 0.25) -> CollectConfig:
    dynamics = DynamicsDistribution(nominal_share=nominal_share)
    return CollectConfig("walker", "random", transitions, str(out), seed=3, dynamics=dynamics)


def _episodes(buffer: Path) -> dict[int, dict[str, np.ndarray]]:
    spec = get_domain("walker")
    return {parse_name(f.name)[0]: read_episode(f, spec) for f in buffer.glob("*.npz")}  # type: ignore[index]


def test_draws_stay_in_the_training_range_and_a_share_is_nominal() -> None:
    dist = DynamicsDistribution()
    for domain in ("walker", "quadruped", "cheetah"):
        ranges = dist.ranges(domain)
        for family, (lo, hi) in ranges.items():
            p = get_perturbation(domain, family)
            assert lo == p.nominal and hi == pytest.approx(p.levels[3])  # the grid's 4th level
        draws = [dist.draw(domain, 0, k) for k in range(400)]
        nominal = sum(d == {} for d in draws)
        assert 60 <= nominal <= 140  # a quarter of 400, within sampling noise
        for d in draws:
            for family, level in d.items():
                lo, hi = ranges[family]
                assert min(lo, hi) <= level <= max(lo, hi)
        assert draws == [dist.draw(domain, 0, k) for k in range(400)]  # (seed, index) only
    with pytest.raises(ConfigError, match="nominal_share"):
        DynamicsDistribution(nominal_share=1.5)


def test_one_family_as_dynamics_is_that_perturbation() -> None:
    a = make_env("walker", "walk", "body_mass", 40.0, seed=1)
    b = make_env("walker", "walk", seed=1, dynamics={"body_mass": 40.0})
    assert b.describe() == a.describe() == "walker/walk (body_mass=40)"
    oa, ob = a.reset().observation, b.reset().observation
    for _ in range(50):
        action = np.full(6, 0.3)
        oa, ob = a.step(action).observation, b.step(action).observation
    np.testing.assert_array_equal(oa, ob)
    with pytest.raises(ConfigError, match="outside the range"):
        make_env("walker", "walk", dynamics={"gravity": 99.0})
    vector = dynamics_vector("walker", {"gravity": 7.0})
    assert dynamics_of_vector("walker", vector) == {"gravity": 7.0}


def test_a_diverse_collection_stores_and_reproduces_its_physics(tmp_path: Path) -> None:
    buffer = collect(_cfg(tmp_path / "a", 4000), progress=False)
    record = json.loads((buffer.parent / "collect.json").read_text())
    dist = DynamicsDistribution()
    assert record["dynamics"] == dist.record("walker")
    levels = record["episode_dynamics"]["levels"]
    episodes = _episodes(buffer)
    perturbed = 0
    for k, ep in episodes.items():
        drawn = dist.draw("walker", 3, k)
        want = dynamics_vector("walker", drawn)
        np.testing.assert_array_equal(ep["dynamics"], np.tile(want, (1001, 1)))
        assert levels[k] == want.tolist()
        # The stored actions under the stored physics give the stored episode, bitwise.
        env = make_env("walker", "stand", seed=3, dynamics=dynamics_of_vector("walker", want))
        again = regenerate(Collection("walker", "stand", 3), env, k, ep["action"])
        for key in KEYS:
            np.testing.assert_array_equal(again[key], ep[key], err_msg=f"episode {k} {key}")
        perturbed += drawn != {}
    assert perturbed >= 1
    # Relabelling puts each state back into its own physics: walk's speed reads subtree
    # momenta, which depend on the body masses.
    ds = load_dataset(buffer)
    assert ds.transitions().next_dynamics is not None
    rewards = relabel_all(ds, "walker")
    stored = ds.rows["reward"][ds.transition_rows, 0]
    np.testing.assert_allclose(rewards["stand"], stored, atol=1e-6)
    # An extended collection is the same episodes plus new ones.
    collect(_cfg(tmp_path / "b", 2000), progress=False)
    longer = collect(_cfg(tmp_path / "b", 4000), progress=False)
    again_eps = _episodes(longer)
    for k in episodes:
        np.testing.assert_array_equal(again_eps[k]["observation"], episodes[k]["observation"])


def test_a_buffer_mixing_diverse_and_nominal_episodes_is_refused(tmp_path: Path) -> None:
    diverse = collect(_cfg(tmp_path / "a", 1000), progress=False)
    nominal = collect(
        CollectConfig("walker", "random", 1000, str(tmp_path / "b"), seed=4), progress=False
    )
    for f in nominal.glob("*.npz"):
        f.rename(diverse / f.name.replace("_0_", "_1_"))
    with pytest.raises(Exception, match="mixes collections"):
        load_dataset(diverse)


def test_a_diverse_collection_packs_and_unpacks_with_its_physics(tmp_path: Path) -> None:
    from rbfm.data.pack import pack_episodes, unpack_episodes

    # seed 3 at this share: episode 0 nominal, 1 and 2 perturbed
    buffer = collect(_cfg(tmp_path / "src", 3000, nominal_share=0.34), progress=False)
    record = json.loads((buffer.parent / "collect.json").read_text())
    assert Collection.of_record(record, buffer).levels == tuple(
        tuple(row) for row in record["episode_dynamics"]["levels"]
    )
    episodes = _episodes(buffer)
    assert any(ep["dynamics"].any() for ep in episodes.values())  # a perturbed one
    # Replayed: every episode regenerated under its own physics, bitwise, dynamics too.
    pack_episodes(buffer, tmp_path / "r.xz", replay=True)
    out = unpack_episodes(tmp_path / "r.xz", tmp_path / "replayed")
    assert (out.episodes, out.reproduced, out.differing) == (3, 3, ())
    # At nominal: the same actions from the same initial states under nominal physics, a
    # nominal collection whose record regenerates it in turn; only nominal episodes match.
    twin = unpack_episodes(tmp_path / "r.xz", tmp_path / "nominal", nominal=True)
    assert "at nominal physics" in twin.unpacked()
    at_nominal = [k for k, ep in episodes.items() if not ep["dynamics"].any()]
    assert twin.reproduced == len(at_nominal) == 1
    twin_record = json.loads((twin.path.parent / "collect.json").read_text())
    assert "dynamics" not in twin_record and "episode_dynamics" not in twin_record
    env = make_env("walker", "stand", seed=3)
    for k, ep in _episodes(twin.path).items():
        assert "dynamics" not in ep
        np.testing.assert_array_equal(ep["action"], episodes[k]["action"])
        again = regenerate(Collection("walker", "stand", 3), env, k, ep["action"])
        np.testing.assert_array_equal(again["physics"], ep["physics"])
    pack_episodes(twin.path, tmp_path / "n.xz", replay=True)
    with pytest.raises(ConfigError, match="nominal physics already"):
        unpack_episodes(tmp_path / "n.xz", tmp_path / "again", nominal=True)
    # Whole episodes: the dynamics travel as a key of their own.
    pack_episodes(buffer, tmp_path / "e.xz", half=["observation"])
    with pytest.raises(ConfigError, match="not actions to replay"):
        unpack_episodes(tmp_path / "e.xz", tmp_path / "whole2", nominal=True)
    unpack_episodes(tmp_path / "e.xz", tmp_path / "whole")
    for root in ("replayed", "whole"):
        got = _episodes(tmp_path / root / "walker" / "random" / "buffer")
        for k, ep in episodes.items():
            np.testing.assert_array_equal(got[k]["dynamics"], ep["dynamics"])
            np.testing.assert_array_equal(got[k]["physics"], ep["physics"])
    # A record that does not list an episode's physics cannot regenerate it.
    record["episode_dynamics"]["levels"] = record["episode_dynamics"]["levels"][:1]
    (buffer.parent / "collect.json").write_text(json.dumps(record))
    with pytest.raises(DatasetError, match="lists dynamics for episodes 0-0 only"):
        pack_episodes(buffer, tmp_path / "r2.xz", replay=True)
    del record["episode_dynamics"]
    (buffer.parent / "collect.json").write_text(json.dumps(record))
    with pytest.raises(DatasetError, match="does not list each episode's levels"):
        pack_episodes(buffer, tmp_path / "r2.xz", replay=True)
    assert not (tmp_path / "r2.xz").exists()
    # A file holds episodes of one kind: one without dynamics among them is refused.
    (first,) = buffer.glob("*_0_*.npz")
    nominal = {k: v for k, v in episodes[0].items() if k != "dynamics"}
    first.unlink()
    write_episode(buffer, 0, nominal)
    with pytest.raises(DatasetError, match="its keys differ"):
        pack_episodes(buffer, tmp_path / "e2.xz")
    assert not (tmp_path / "e2.xz").exists()
