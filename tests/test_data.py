"""ExORL format round trips, transition alignment, subsampling, the cache, and bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import fake_episode
from rbfm.data import load_dataset, write_episode
from rbfm.data.dataset import CACHE_DIR
from rbfm.data.exorl import KEYS, parse_name
from rbfm.errors import ConfigError, DatasetError


def _write(
    root: Path, domain: str = "cheetah", episodes: int = 3, steps: int = 50, seed: int = 0
) -> tuple[Path, list[dict[str, np.ndarray]]]:
    buffer = root / domain / "rnd" / "buffer"
    buffer.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    eps = [fake_episode(domain, steps, rng) for _ in range(episodes)]
    for i, ep in enumerate(eps):
        write_episode(buffer, i, ep)
    return buffer, eps


def test_written_files_follow_exorl_exactly(tmp_path: Path) -> None:
    buffer, eps = _write(tmp_path, steps=1000, episodes=1)
    [f] = list(buffer.iterdir())
    assert parse_name(f.name) == (0, 1000)
    with np.load(f) as npz:
        assert sorted(npz.files) == sorted(KEYS)
        assert npz["observation"].shape == (1001, 17) and npz["observation"].dtype == np.float32
        assert npz["reward"].shape == (1001, 1) and npz["discount"].shape == (1001, 1)
        assert npz["physics"].dtype == np.float64
        np.testing.assert_array_equal(npz["action"], eps[0]["action"])


@pytest.mark.parametrize("where", ["root", "domain", "algo", "buffer"])
def test_round_trip_from_any_directory_above_the_buffer(tmp_path: Path, where: str) -> None:
    buffer, eps = _write(tmp_path)
    path = {
        "root": tmp_path,
        "domain": tmp_path / "cheetah",
        "algo": buffer.parent,
        "buffer": buffer,
    }[where]
    ds = load_dataset(path)
    assert ds.domain.name == "cheetah" and ds.algo == "rnd" and ds.num_episodes == 3
    for k in KEYS:
        np.testing.assert_array_equal(ds.rows[k], np.concatenate([e[k] for e in eps]))


def test_transitions_align_and_never_cross_episodes(tmp_path: Path) -> None:
    buffer, eps = _write(tmp_path, episodes=3, steps=6)
    ds = load_dataset(buffer)
    assert len(ds) == 3 * 5  # T-1 per episode: the last step has no next action
    tr = ds.transitions()
    k = 0
    for ep in eps:
        for t in range(1, 6):
            np.testing.assert_array_equal(tr.observation[k], ep["observation"][t - 1])
            np.testing.assert_array_equal(tr.action[k], ep["action"][t])
            np.testing.assert_array_equal(tr.next_observation[k], ep["observation"][t])
            np.testing.assert_array_equal(tr.next_action[k], ep["action"][t + 1])
            np.testing.assert_array_equal(tr.next_physics[k], ep["physics"][t])
            assert tr.reward[k] == ep["reward"][t, 0] and tr.discount[k] == ep["discount"][t, 0]
            k += 1
    expected = [ep["reward"][1:6, 0].sum() for ep in eps]
    np.testing.assert_allclose(ds.episode_returns(tr.reward), expected, rtol=1e-6)


def test_subsample_is_uniform_without_replacement_and_seeded(tmp_path: Path) -> None:
    ds = load_dataset(_write(tmp_path, episodes=4, steps=100)[0])
    a, b, c = ds.subsample(150, seed=1), ds.subsample(150, seed=1), ds.subsample(150, seed=2)
    np.testing.assert_array_equal(a.observation, b.observation)
    assert not np.array_equal(a.observation, c.observation)
    assert len({row.tobytes() for row in a.observation}) == 150
    every = ds.transitions()
    assert len(every.subsample(396, seed=0)) == 396
    with pytest.raises(ValueError, match="cannot subsample"):
        ds.subsample(397, seed=0)


def test_cache_is_used_then_rebuilt_when_files_change(tmp_path: Path) -> None:
    buffer, eps = _write(tmp_path)
    first = load_dataset(buffer)
    manifest = buffer.parent / CACHE_DIR / "manifest.json"
    assert len(json.loads(manifest.read_text())["files"]) == 3
    # Poison the cached observations: a cache hit must return them as they are.
    cached = buffer.parent / CACHE_DIR / "observation.npy"
    np.save(cached, np.zeros_like(first.rows["observation"]))
    assert not load_dataset(buffer).rows["observation"].any()
    write_episode(buffer, 3, fake_episode("cheetah", 50, np.random.default_rng(9)))
    again = load_dataset(buffer)
    assert again.num_episodes == 4
    np.testing.assert_array_equal(again.rows["observation"][:51], eps[0]["observation"])


def test_unfinished_temporary_files_are_ignored(tmp_path: Path) -> None:
    buffer, _ = _write(tmp_path, episodes=2)
    (buffer / ".20260101T000000_2_50.npz.part").write_bytes(b"half an episode")
    assert load_dataset(buffer).num_episodes == 2


# ------------------------------------------------------------------ bad input


def _corrupt(tmp_path: Path, how: str) -> tuple[Path, str]:
    buffer, eps = _write(tmp_path, episodes=2)
    victim = sorted(buffer.iterdir())[1]
    if how == "truncated":
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
        return buffer, "not a readable npz"
    if how == "garbage":
        victim.write_bytes(os.urandom(500))
        return buffer, "not a readable npz"
    ep = dict(eps[1])
    if how == "obs_size":
        ep["observation"] = np.zeros((51, 24), np.float32)
        msg = "observation has width 24 but the cheetah domain needs 17"
    elif how == "nan":
        ep["action"] = ep["action"].copy()
        ep["action"][7, 2] = np.nan
        msg = r"action has non-finite values .* rows \[7\]"
    elif how == "missing_key":
        del ep["physics"]
        msg = r"missing keys \['physics'\]"
    elif how == "text":
        ep["observation"] = np.full(ep["observation"].shape, "a")
        msg = "observation holds <U1 values; expected real numbers"
    elif how == "scalar":
        ep["reward"] = np.array(0.0)
        msg = "reward holds one value, not one row per step"
    elif how == "action_bound":
        ep["action"] = ep["action"].copy()
        ep["action"][3, 0] = 100.0
        msg = r"action holds 100 in magnitude \(valid: \[-1, 1\]\)"
    elif how == "discount":
        ep["discount"] = ep["discount"].copy()
        ep["discount"][4] = -5.0
        msg = r"discount holds -5 \(valid: \[0, 1\]\)"
    else:
        ep["reward"] = ep["reward"][:-3]
        msg = "different row counts"
    victim.unlink()
    np.savez_compressed(victim, **ep)
    return buffer, msg


@pytest.mark.parametrize(
    "how",
    ["truncated", "garbage", "obs_size", "nan", "missing_key", "rows", "text", "scalar",
     "action_bound", "discount"],
)  # fmt: skip
def test_defective_episode_names_the_file_and_the_defect(tmp_path: Path, how: str) -> None:
    buffer, msg = _corrupt(tmp_path, how)
    victim = sorted(buffer.iterdir())[1].name
    with pytest.raises(DatasetError, match=msg) as err:
        load_dataset(buffer)
    assert victim in str(err.value)


def test_a_dataset_of_one_step_episodes_holds_no_transition_and_is_refused(tmp_path: Path) -> None:
    buffer, _ = _write(tmp_path, episodes=2, steps=1)
    with pytest.raises(DatasetError, match=r"2 episodes and no transition \(s, a, s', a'\)"):
        load_dataset(buffer)


def test_length_in_name_must_match_contents(tmp_path: Path) -> None:
    buffer, _ = _write(tmp_path, episodes=1)
    f = next(buffer.iterdir())
    f.rename(buffer / f.name.replace("_50.npz", "_1000.npz"))
    with pytest.raises(DatasetError, match="says 1000 steps but it holds 50"):
        load_dataset(buffer)


def test_missing_and_empty_directories(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such directory"):
        load_dataset(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="no ExORL buffer directory"):
        load_dataset(tmp_path)
    empty = tmp_path / "walker" / "rnd" / "buffer"
    empty.mkdir(parents=True)
    with pytest.raises(DatasetError, match="no episode files"):
        load_dataset(empty)


def test_several_buffers_must_be_disambiguated(tmp_path: Path) -> None:
    _write(tmp_path / "a")
    _write(tmp_path / "b", domain="walker")
    with pytest.raises(DatasetError, match="several buffers") as err:
        load_dataset(tmp_path)
    assert "walker/rnd/buffer" in str(err.value)


def test_unknown_domain(tmp_path: Path) -> None:
    buffer, _ = _write(tmp_path)
    with pytest.raises(ConfigError, match="valid choices: walker, quadruped, cheetah"):
        load_dataset(buffer, domain="humanoid")
    odd = tmp_path / "mydata" / "buffer"
    odd.mkdir(parents=True)
    write_episode(odd, 0, fake_episode("cheetah", 5, np.random.default_rng(0)))
    with pytest.raises(DatasetError, match="cannot tell the domain"):
        load_dataset(odd)
    assert load_dataset(odd, domain="cheetah").num_episodes == 1
    # A domain asked for that the path contradicts: refused before any episode is read.
    with pytest.raises(DatasetError, match="the path names cheetah, not walker"):
        load_dataset(buffer, domain="walker")


def test_packed_episodes_unpack_to_the_same_files_with_only_the_halved_keys_rounded(
    tmp_path: Path,
) -> None:
    from rbfm.data.pack import pack_episodes, unpack_episodes

    buffer, eps = _write(tmp_path / "src", episodes=6, steps=20)
    summary = pack_episodes(tmp_path / "src", tmp_path / "p.xz", first=5, every=2, half=["physics"])
    assert (summary.episodes, summary.steps, summary.domain) == (3, 60, "cheetah")
    out = unpack_episodes(tmp_path / "p.xz", tmp_path / "dst")
    assert out.path == tmp_path / "dst" / "cheetah" / "rnd" / "buffer"
    originals = {f.name: f for f in buffer.iterdir()}
    names = sorted(p.name for p in out.path.iterdir())
    assert [parse_name(n) for n in names] == [(0, 20), (2, 20), (4, 20)]
    for name in names:
        index = parse_name(name)[0]  # type: ignore[index]
        with np.load(out.path / name) as got, np.load(originals[name]) as want:
            for key in KEYS:
                expected = eps[index][key]
                if key == "physics":  # float16's rounding, and nothing else
                    expected = expected.astype(np.float16).astype(np.float64)
                    assert not np.array_equal(expected, eps[index][key])
                np.testing.assert_array_equal(got[key], expected)
                assert got[key].dtype == want[key].dtype
    assert len(load_dataset(tmp_path / "dst")) == 3 * 19


def test_pack_and_unpack_reject_what_they_cannot_carry(tmp_path: Path) -> None:
    from rbfm.data.pack import pack_episodes, unpack_episodes

    buffer, _ = _write(tmp_path / "src", episodes=2, steps=5)
    with pytest.raises(ConfigError, match="action"):
        pack_episodes(buffer, tmp_path / "p.xz", half=["action"])
    with pytest.raises(ConfigError, match="every"):
        pack_episodes(buffer, tmp_path / "p.xz", every=0)
    big = fake_episode("cheetah", 5, np.random.default_rng(1))
    big["observation"][2, 3] = 1e5
    write_episode(buffer, 2, big)
    with pytest.raises(DatasetError, match="float16"):
        pack_episodes(buffer, tmp_path / "p.xz", half=["observation"])
    assert not (tmp_path / "p.xz").exists()
    pack_episodes(buffer, tmp_path / "p.xz")
    with pytest.raises(DatasetError, match="already holds"):
        unpack_episodes(tmp_path / "p.xz", tmp_path / "src")
    data = (tmp_path / "p.xz").read_bytes()
    (tmp_path / "cut.xz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError):
        unpack_episodes(tmp_path / "cut.xz", tmp_path / "dst")
    assert not (tmp_path / "dst").exists()  # nothing half-written


def _collected(root: Path, seed: int = 3, transitions: int = 3000) -> Path:
    from rbfm.exploration.collect import CollectConfig, collect

    cfg = CollectConfig("cheetah", "random", transitions, str(root), seed=seed)
    return collect(cfg, progress=False)


def _repack(src: Path, dst: Path, edit: Any) -> None:
    """Rewrites a packed file with `edit(header, arrays)` applied, as a corrupted or
    hand-made file would arrive."""
    import lzma

    from rbfm.data.pack import _layout, _shuffled, _unshuffled

    with lzma.open(src, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        arrays = {}
        for k, (dtype, rows, cols) in _layout(src, header).items():
            arrays[k] = _unshuffled(f.read(dtype.itemsize * rows * cols), dtype, rows, cols)
    edit(header, arrays)
    text = json.dumps(header).encode()
    with lzma.open(dst, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for a in arrays.values():
            f.write(_shuffled(a))


def test_a_replay_file_regenerates_every_episode_bitwise_from_its_actions(tmp_path: Path) -> None:
    from rbfm.data.pack import pack_episodes, unpack_episodes

    buffer = _collected(tmp_path / "src")
    packed = pack_episodes(buffer, tmp_path / "r.xz", replay=True)
    full = pack_episodes(buffer, tmp_path / "f.xz")
    assert packed.bytes < full.bytes / 3  # actions alone: cheetah's 6 of ~44 numbers a row
    out = unpack_episodes(tmp_path / "r.xz", tmp_path / "dst")
    assert (out.episodes, out.steps, out.reproduced, out.deviation) == (3, 3000, 3, 0.0)
    assert (out.differing, out.version_changes) == ((), ())
    returns = [float(np.load(f)["reward"].sum()) for f in buffer.glob("*.npz")]
    assert out.returns == (pytest.approx(np.mean(returns)),) * 2
    originals = sorted(buffer.glob("*.npz"))
    assert sorted(p.name for p in out.path.iterdir()) == [p.name for p in originals]
    for want in originals:
        with np.load(out.path / want.name) as got, np.load(want) as ref:
            for key in KEYS:
                np.testing.assert_array_equal(got[key], ref[key])
                assert got[key].dtype == ref[key].dtype
    record = json.loads((buffer.parent / "collect.json").read_text())
    assert json.loads((out.path.parent / "collect.json").read_text()) == record
    assert pack_episodes(out.path, tmp_path / "again.xz", replay=True).episodes == 3
    assert sorted(p.name for p in out.path.parent.iterdir()) == ["buffer", "collect.json"]


def test_a_replay_that_diverges_is_reported_with_its_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rbfm.data.pack as pack
    from rbfm.data.resimulate import Collection, collection_record

    buffer = _collected(tmp_path / "src")
    pack.pack_episodes(buffer, tmp_path / "r.xz", replay=True)
    real = pack.regenerate

    def flipped(actions: np.ndarray) -> np.ndarray:
        actions = actions.copy()
        actions[100:] *= -1
        return actions

    def nudged(collection, env, index, actions):  # type: ignore[no-untyped-def]
        if index == 1:  # a processor that rounds differently, much exaggerated
            actions = flipped(actions)
        return real(collection, env, index, actions)

    monkeypatch.setattr(pack, "regenerate", nudged)
    out = pack.unpack_episodes(tmp_path / "r.xz", tmp_path / "dst")
    collection = Collection.of_record(collection_record(buffer), buffer)
    ep1 = next(buffer.glob("*_1_1000.npz"))
    with np.load(ep1) as original:
        alone = real(collection, collection.env(), 1, flipped(original["action"]))
        gap = np.abs(alone["physics"][-1] - original["physics"][-1]).max()
    assert out.reproduced == 2 and out.deviation == gap > 0
    assert out.differing == ("observation", "action", "reward", "physics")
    assert out.returns is not None and out.returns[0] != out.returns[1]
    assert len(list(out.path.glob("*.npz"))) == 3


def test_replay_packing_refuses_episodes_it_could_not_regenerate(tmp_path: Path) -> None:
    from rbfm.data.pack import pack_episodes

    buffer = _collected(tmp_path / "src")
    with pytest.raises(ConfigError, match="only actions"):
        pack_episodes(buffer, tmp_path / "r.xz", replay=True, half=["physics"])
    first = sorted(buffer.glob("*.npz"), key=lambda p: parse_name(p.name))[0]
    with np.load(first) as f:
        episode = {k: f[k] for k in KEYS}
    episode["action"][10, 0] *= -1  # no longer the actions its states came from
    first.unlink()
    write_episode(buffer, 0, episode)
    with pytest.raises(DatasetError, match="do not regenerate it bitwise"):
        pack_episodes(buffer, tmp_path / "r.xz", replay=True)
    first = sorted(buffer.glob("*.npz"), key=lambda p: parse_name(p.name))[0]
    first.rename(first.with_name(first.name.replace("_0_", "_7_")))  # not its index
    with pytest.raises(DatasetError, match="reset state is not the one"):
        pack_episodes(buffer, tmp_path / "r.xz", replay=True)
    (buffer.parent / "collect.json").unlink()
    with pytest.raises(DatasetError, match=r"collect\.json: missing"):
        pack_episodes(buffer, tmp_path / "r.xz", replay=True)
    assert not (tmp_path / "r.xz").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h, a: h.update(digests=h["digests"][:2]), "digests"),
        (lambda h, a: h.update(returns=h["returns"][:2]), "2 returns for 3"),
        (lambda h, a: h.update(algo="../x"), "not a folder name"),
        (lambda h, a: h.update(names=[h["names"][0]] * 3), "names repeat"),
        (lambda h, a: h.update(rows=[-1001, 2002, 2002]), "1001 rows each"),
        (lambda h, a: h["keys"].update(final=["float64", 1]), "final stored as float64 x 1"),
        (lambda h, a: h["collection"].update(task="fly"), "fly"),
        (lambda h, a: a["action"].__setitem__((5, 0), np.nan), "NaN"),
    ],
)
def test_unpacking_a_malformed_replay_file_writes_nothing(
    tmp_path: Path, edit: Any, message: str
) -> None:
    from rbfm.data.pack import pack_episodes, unpack_episodes

    pack_episodes(_collected(tmp_path / "src"), tmp_path / "r.xz", replay=True)
    _repack(tmp_path / "r.xz", tmp_path / "bad.xz", edit)
    with pytest.raises((DatasetError, ConfigError), match=message):
        unpack_episodes(tmp_path / "bad.xz", tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


def test_a_version_1_file_still_unpacks(tmp_path: Path) -> None:
    from rbfm.data.pack import pack_episodes, unpack_episodes

    buffer, eps = _write(tmp_path / "src", episodes=2, steps=5)
    pack_episodes(buffer, tmp_path / "p.xz")

    def as_version_1(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        header["version"] = 1
        del header["mode"]

    _repack(tmp_path / "p.xz", tmp_path / "v1.xz", as_version_1)
    out = unpack_episodes(tmp_path / "v1.xz", tmp_path / "dst")
    with np.load(next(out.path.glob("*_1_5.npz"))) as got:
        np.testing.assert_array_equal(got["physics"], eps[1]["physics"])
