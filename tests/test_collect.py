"""Collection: resuming after an interruption gives exactly the uninterrupted result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rbfm.data.exorl import KEYS, parse_name, read_episode
from rbfm.envs import get_domain
from rbfm.errors import ConfigError
from rbfm.exploration import CollectConfig, collect


def _episodes(buffer: Path) -> dict[int, dict[str, np.ndarray]]:
    # Keyed by episode index: a regenerated episode's name carries a later timestamp,
    # so file-name order may differ between an interrupted and an uninterrupted run.
    spec = get_domain("cheetah")
    return {parse_name(f.name)[0]: read_episode(f, spec) for f in buffer.glob("*.npz")}  # type: ignore[index]


def _assert_same(a: Path, b: Path) -> None:
    ea, eb = _episodes(a), _episodes(b)
    assert sorted(ea) == sorted(eb) == list(range(len(ea)))
    for i in ea:
        for k in KEYS:
            np.testing.assert_array_equal(ea[i][k], eb[i][k], err_msg=f"episode {i} {k}")


def _cfg(out: Path, agent: str, transitions: int, **kw: object) -> CollectConfig:
    return CollectConfig("cheetah", agent, transitions, str(out), preset="tiny", seed=5, **kw)


@pytest.mark.parametrize("agent", ["random", "rnd", "aps", "proto"])
def test_extending_a_collection_equals_collecting_at_once(tmp_path: Path, agent: str) -> None:
    whole = collect(_cfg(tmp_path / "whole", agent, 3000), progress=False)
    part = _cfg(tmp_path / "part", agent, 1500)  # rounds up to 2 episodes
    collect(part, progress=False)
    assert len(list((tmp_path / "part/cheetah" / agent / "buffer").glob("*.npz"))) == 2
    resumed = collect(_cfg(tmp_path / "part", agent, 3000), progress=False)
    _assert_same(whole, resumed)


def test_random_collection_regenerates_lost_and_half_written_episodes(tmp_path: Path) -> None:
    whole = collect(_cfg(tmp_path / "whole", "random", 3000), progress=False)
    broken = collect(_cfg(tmp_path / "broken", "random", 3000), progress=False)
    victim = sorted(broken.glob("*_1_1000.npz"))[0]
    (broken / f".{victim.name}.part").write_bytes(victim.read_bytes()[:1000])
    victim.unlink()
    collect(_cfg(tmp_path / "broken", "random", 3000), progress=False)
    assert not list(broken.glob(".*"))
    _assert_same(whole, broken)


def test_rnd_killed_mid_run_resumes_to_the_same_episodes(tmp_path: Path) -> None:
    """A real SIGKILL in the middle of an episode (the second of three)."""
    whole = collect(_cfg(tmp_path / "whole", "rnd", 3000), progress=False)
    out = tmp_path / "killed"
    buffer = out / "cheetah" / "rnd" / "buffer"
    cmd = [
        sys.executable,
        "-m",
        "rbfm.cli",
        "collect",
        "--domain",
        "cheetah",
        "--agent",
        "rnd",
        "--transitions",
        "3000",
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--seed",
        "5",
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Generous: on a machine whose cores are busy elsewhere the first episode took
        # over 120 s (14 s alone).
        deadline = time.monotonic() + 900
        while not list(buffer.glob("*.npz")) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert list(buffer.glob("*.npz")), "no episode was written within 900 s"
        time.sleep(0.3)  # into the second episode, whose updates take a few seconds
        assert proc.poll() is None, "the run finished before it could be interrupted"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done = len(list(buffer.glob("*.npz")))
    assert 1 <= done < 3
    collect(_cfg(out, "rnd", 3000), progress=False)
    _assert_same(whole, buffer)


def test_rerun_with_other_settings_is_refused(tmp_path: Path) -> None:
    collect(_cfg(tmp_path, "random", 1000), progress=False)
    other = CollectConfig("cheetah", "random", 1000, str(tmp_path), seed=6)
    with pytest.raises(ConfigError, match="seed: was 5, now 6"):
        collect(other, progress=False)


def test_overrides_reach_the_agent_and_bind_the_collection(tmp_path: Path) -> None:
    # tiny: 1000 random seed steps, then an update every 4 steps; episode 1 is the first
    # the agent acts in, so only it can tell how often the agent was updated.
    plain = _episodes(collect(_cfg(tmp_path / "plain", "rnd", 2000), progress=False))
    every = (("update_every_steps", 1),)
    changed = _episodes(collect(_cfg(tmp_path / "u1", "rnd", 2000, overrides=every), False))
    np.testing.assert_array_equal(plain[0]["action"], changed[0]["action"])
    assert not np.array_equal(plain[1]["action"], changed[1]["action"])
    with pytest.raises(ConfigError, match=r"overrides\.update_every_steps: was 1, now None"):
        collect(_cfg(tmp_path / "u1", "rnd", 2000), progress=False)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"agent": "diayn"}, "valid choices: random, rnd, aps, proto"),
        (
            {"agent": "rnd", "overrides": (("width", 3),)},
            r"^rnd: no field width \(valid: ",
        ),
        ({"overrides": (("batch_size", 3),)}, "^overrides: the random agent has no network"),
        ({"device": "cpu"}, "^device: the random agent has no network"),
        ({"agent": "rnd", "device": "bogus"}, r"device 'bogus' \(valid: cpu, cuda, cuda:N\)"),
        ({"agent": "rnd", "overrides": (("lr", float("nan")),)}, r"RNDConfig\.lr: nan is out"),
        ({"agent": "aps", "overrides": (("knn_k", 999),)}, r"APSConfig\.knn_k: 999 is out"),
        ({"transitions": 0}, r"transitions: 0 is out of range \(valid: >= 1\)"),
        ({"domain": "hopper"}, "valid choices: walker"),
        ({"task": "flip"}, "valid choices: walk, run"),
        ({"agent": "rnd", "preset": "huge"}, "valid choices: paper, cpu, tiny"),
    ],
)
def test_bad_collection_arguments(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "domain": "cheetah",
        "agent": "random",
        "transitions": 1000,
        "out": str(tmp_path),
    }
    args.update(changes)
    with pytest.raises(ConfigError, match=message):
        collect(CollectConfig(**args), progress=False)  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())  # rejected before any directory is made


def test_aps_particle_reward_and_skills() -> None:
    import torch

    from rbfm.exploration.aps import aps_config, episode_skills, particle_reward
    from rbfm.exploration.ddpg import RunningMeanStd

    rep = torch.randn(20, 10)
    rms = RunningMeanStd((1,))
    got = particle_reward(rep, k=4, clip=1e-4, rms=rms)
    # URLB's formula with a loop: mean over the 4 nearest (self included) of
    # max(d / running variance - clip, 0), then log(1 + .)
    d = torch.tensor([[float((a - b).norm()) for b in rep] for a in rep])
    knn = d.sort(dim=1).values[:, :4]
    var = knn.reshape(-1).var(unbiased=True)  # first update from var 1, count 1e-4
    n = knn.numel()
    merged = (1 * 1e-4 + var * n + knn.mean().square() * 1e-4 * n / (n + 1e-4)) / (n + 1e-4)
    want = torch.log1p((knn / merged - 1e-4).clamp(min=0).mean(1, keepdim=True))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)

    cfg = aps_config("tiny")
    w = episode_skills(7, 3, 1000, cfg)
    assert w.shape == (1001, cfg.sf_dim)
    np.testing.assert_allclose(np.linalg.norm(w, axis=1), 1, rtol=1e-5)
    # row t is the skill of the action at row t; a new skill every 5 actions
    assert (w[1:6] == w[1]).all() and not np.allclose(w[5], w[6])
    np.testing.assert_array_equal(w, episode_skills(7, 3, 1000, cfg))  # regenerated on resume
    assert not np.allclose(w, episode_skills(7, 4, 1000, cfg))


def test_proto_sinkhorn_balances_and_the_queue_fills() -> None:
    import torch

    from rbfm.exploration.proto import ProtoAgent, proto_config, sinkhorn_knopp

    scores = torch.randn(64, 8) * 3
    q = sinkhorn_knopp(scores, iters=200)
    torch.testing.assert_close(q.sum(1), torch.ones(64))  # a distribution per sample
    torch.testing.assert_close(q.sum(0), torch.full((8,), 64 / 8), rtol=1e-3, atol=0)
    torch.testing.assert_close(sinkhorn_knopp(scores + 5, 3), sinkhorn_knopp(scores, 3))
    # Balancing moves mass from the favourite prototype to the others:
    p = torch.softmax(scores, 1)
    assert q.sum(0).std() < p.sum(0).std()

    agent = ProtoAgent(17, 6, proto_config("tiny"), seed=0, device="cpu")
    reward = agent._novelty(torch.randn(32, 17))
    assert reward.shape == (32, 1) and (reward >= 0).all()
    assert int(agent.proto.queue_ptr) == 16 and agent.proto.queue[:16].norm(dim=1).gt(0.99).all()


def test_the_callers_thread_count_is_restored(tmp_path: Path) -> None:
    """`torch_threads` applies while the explorer trains; a library caller gets its own
    count back."""
    before = torch.get_num_threads()
    wanted = 2 if before == 1 else 1
    collect(_cfg(tmp_path, "rnd", 1000, torch_threads=wanted), progress=False)
    assert torch.get_num_threads() == before
