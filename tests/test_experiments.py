"""The experiment runner: plans, stable ids, resumption, executors, validation."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rbfm.data.demos import content_sha256, load_demos, save_demos
from rbfm.envs import TASKS
from rbfm.errors import ConfigError, DatasetError
from rbfm.experiments import LocalExecutor, from_dict, plan, read_table, run_experiment
from rbfm.experiments.certificate import heavy_certificates, tv_certificates
from rbfm.experiments.plan import EvalCell, InferCell, Plan
from rbfm.experiments.runner import RunSummary, Store, pending
from rbfm.experiments.spec import CPU_WALKER, PRESETS, with_overrides
from rbfm.experiments.table import read_adaptations
from rbfm.fb import fb_config
from rbfm.fb.checkpoint import read_meta, resolve, save_checkpoint
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.methods import BASELINE_METHODS


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny cheetah FB model with a reward-inferred-like z for walk and run."""
    torch.manual_seed(0)
    model = FBModel(17, 6, fb_config("tiny")).eval()
    task_z = {
        t: project(torch.randn(model.cfg.z_dim), model.radius).tolist() for t in ("walk", "run")
    }
    stem = tmp_path_factory.mktemp("model") / "tiny"
    save_checkpoint(stem, model, {"domain": "cheetah", "task_z": task_z})
    return str(stem)


def smoke_dict(checkpoint: str, **changes: Any) -> dict[str, Any]:
    """The smoke spec: tiny model, 2 tasks, 2 levels, 2 methods, 2 seeds."""
    spec: dict[str, Any] = {
        "name": "test",
        "seeds": [0, 1],
        "demos": 3,
        "num_demos": 2,
        "episodes": 2,
        "certificate_steps": 5,
        "models": [
            {
                "domain": "cheetah",
                "checkpoint": checkpoint,
                "tasks": ["walk", "run"],
                "families": ["joint_friction"],
                "levels": 2,
            }
        ],
        # RBFM-Heavy at the paper's settings: the tables are compared bit for bit across
        # processes, and the default settings' plateau decisions (halve or not, a new
        # best or not) turn last-bit differences of CPU kernels between a fresh process
        # and this one into different descents (docs/inference.md).
        "methods": [
            {"name": "fbil", "overrides": {"steps": 10}},
            {"name": "rbfm-heavy", "settings": "paper", "overrides": {"steps": 10}},
        ],
    }
    spec.update(changes)
    return spec


def test_plan_has_stable_ids_and_the_full_grid(checkpoint: str) -> None:
    p = plan(from_dict(smoke_dict(checkpoint)))
    assert (len(p.demos), len(p.infers), len(p.evals)) == (2, 8, 16)
    assert {e.level for e in p.evals} == {0.0, 25.0}
    again = plan(from_dict(smoke_dict(checkpoint)))
    assert [c.id for c in again.evals] == [c.id for c in p.evals]
    # A changed setting changes the ids of the cells it affects, and only those.
    more = plan(from_dict(smoke_dict(checkpoint, episodes=3)))
    assert {c.id for c in more.infers} == {c.id for c in p.infers}
    assert not {c.id for c in more.evals} & {c.id for c in p.evals}


def test_a_method_restricted_to_a_dataset_runs_on_its_models_only(
    checkpoint: str, tmp_path: Path
) -> None:
    torch.manual_seed(1)
    other = FBModel(17, 6, fb_config("tiny")).eval()
    meta = {"domain": "cheetah", "task_z": read_meta(Path(checkpoint))["task_z"]}
    save_checkpoint(tmp_path / "aps", other, meta)
    data = smoke_dict(checkpoint)
    data["models"].append(
        {**data["models"][0], "dataset": "aps", "checkpoint": str(tmp_path / "aps")}
    )
    data["methods"][1]["datasets"] = ["aps"]
    p = plan(from_dict(data))
    methods = {(c.demos.model.dataset, c.variant.method) for c in p.infers}
    assert methods == {("rnd", "fbil"), ("aps", "fbil"), ("aps", "rbfm-heavy")}


def test_experts_are_an_axis_and_the_own_expert_keeps_its_ids(
    checkpoint: str, tmp_path: Path
) -> None:
    torch.manual_seed(1)
    other = FBModel(17, 6, fb_config("tiny")).eval()
    meta = read_meta(Path(checkpoint))
    save_checkpoint(tmp_path / "other", other, {k: meta[k] for k in ("domain", "task_z")})
    own = plan(from_dict(smoke_dict(checkpoint)))
    data = smoke_dict(checkpoint, experts=["own", "noisy", f"model:{tmp_path / 'other'}"])
    p = plan(from_dict(data))
    assert (len(p.demos), len(p.infers), len(p.evals)) == (6, 24, 48)
    # "own" cells are those of a spec written before the axis existed: no recomputation.
    assert [d.id for d in p.demos if d.expert.name == "own"] == [d.id for d in own.demos]
    assert len({d.id for d in p.demos}) == 6
    noisy = [d for d in p.demos if d.expert.name == "noisy"]
    assert {d.expert.noise for d in noisy} == {0.3}
    independent = [d for d in p.demos if d.expert.name.startswith("model:")]
    assert {d.expert.sha256 for d in independent} == {read_meta(tmp_path / "other")["sha256"]}
    assert all(d.model.checkpoint == checkpoint for d in p.demos)


def test_a_model_s_own_experts_replace_the_spec_s(checkpoint: str, tmp_path: Path) -> None:
    torch.manual_seed(1)
    other = FBModel(17, 6, fb_config("tiny")).eval()
    meta = read_meta(Path(checkpoint))
    save_checkpoint(tmp_path / "other", other, {k: meta[k] for k in ("domain", "task_z")})
    data = smoke_dict(checkpoint, experts=["own", "noisy"])
    data["models"].append(
        {
            **data["models"][0],
            "dataset": "other",
            "checkpoint": str(tmp_path / "other"),
            "experts": [f"model:{checkpoint}"],
        }
    )
    p = plan(from_dict(data))
    by_model = {
        ds: sorted({d.expert.name for d in p.demos if d.model.dataset == ds})
        for ds in ("rnd", "other")
    }
    assert by_model == {"rnd": ["noisy", "own"], "other": [f"model:{checkpoint}"]}
    # The independent expert demonstrates with the first model's weights, for the second.
    (ind,) = {d.expert.sha256 for d in p.demos if d.model.dataset == "other"}
    assert ind == meta["sha256"]
    assert (len(p.demos), len(p.infers)) == (6, 24)


@pytest.mark.parametrize(
    ("experts", "message"),
    [
        (["loud"], r"models\[0\]\.experts\[0\]: unknown expert 'loud'"),
        (["noisy", "noisy"], r"models\[0\]\.experts: give distinct expert sources"),
        (["model:SELF"], r"models\[0\]\.experts\[0\]: .* is models\[0\] itself"),
        ([3], r"models\[0\]\.experts: expected a list of names"),
    ],
)
def test_a_model_s_invalid_experts_fail_naming_the_model(
    checkpoint: str, experts: list[Any], message: str
) -> None:
    data = smoke_dict(checkpoint)
    data["models"][0]["experts"] = [
        e.replace("SELF", checkpoint) if isinstance(e, str) else e for e in experts
    ]
    with pytest.raises(ConfigError, match=message):
        plan(from_dict(data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": 5}, r"^name: 5 must be letters"),
        ({"name": ".."}, r"^name: '\.\.' must hold a letter, digit"),
        ({"eval_seed": 2**32}, r"^eval_seed: 4294967296 is out of range \(valid: 0 to 4294967295"),
        ({"num_demos": "2"}, r"^num_demos: '2' is out of range"),
        ({"eval_seed": -4}, r"^eval_seed: -4 is out of range"),
        ({"demo_seed": 1.5}, r"^demo_seed: 1.5 is out of range"),
        ({"bf16": "yes"}, r"^bf16: 'yes' is not true or false"),
        ({"adapt": [{"budget": 2, "methods": []}]}, r"adapt\[0\]\.methods: give distinct FB"),
        ({"levels": {"joint_friction": [0.0, 15.0, 15.0]}}, r"levels\.joint_friction: a level"),
    ],
)
def test_spec_fields_of_another_type_or_repeated_are_refused_by_name(
    checkpoint: str, change: dict[str, Any], message: str
) -> None:
    data = smoke_dict(checkpoint)
    if "levels" in change:
        data["models"][0]["families"] = ["joint_friction"]
        data["models"][0]["levels"] = change["levels"]
    else:
        data.update(change)
    with pytest.raises(ConfigError, match=message):
        plan(from_dict(data))


@pytest.mark.parametrize(
    ("experts", "message"),
    [
        (["own", "own"], "experts: give distinct expert sources"),
        (["loud"], r"experts\[0\]: unknown expert 'loud'; valid: own, noisy, model:NAME"),
        (["own", "model:/nonexistent/x"], r"experts\[1\]: .*no such checkpoint"),
        (["model:SELF"], r"experts\[0\]: .* is models\[0\] itself"),
        (["model:walker"], r"experts\[0\]: .* is a walker model, not cheetah"),
    ],
)
def test_invalid_experts_fail_naming_the_field(
    checkpoint: str, tmp_path: Path, experts: list[str], message: str
) -> None:
    experts = [e.replace("SELF", checkpoint) for e in experts]
    with pytest.raises(ConfigError, match=message):
        run_experiment(
            from_dict(smoke_dict(checkpoint, experts=experts)), tmp_path, LocalExecutor(0)
        )
    assert not any(tmp_path.iterdir())


def _own_and_noisy(checkpoint: str, out: Path, episodes: int) -> RunSummary:
    """A run of one task, level, seed and method, on the model's own and noisy experts."""
    data = smoke_dict(checkpoint, experts=["own", "noisy"], seeds=[0], episodes=episodes)
    data["models"][0].update(tasks=["walk"], levels=1)
    data["methods"] = data["methods"][:1]
    return run_experiment(from_dict(data), out, LocalExecutor(0), progress=False)


def test_a_noisy_expert_demonstrates_with_noise_and_rows_name_it(
    checkpoint: str, tmp_path: Path
) -> None:
    run = _own_and_noisy(checkpoint, tmp_path, episodes=1)
    rows = read_table(run.results)
    assert sorted(r.expert for r in rows) == ["noisy", "own"]
    assert len({r.mean for r in rows}) == 2  # other demonstrations, another task vector
    demos = sorted((tmp_path / "demos").glob("*.npz"))
    noise = sorted(float(load_demos(d).meta["action_noise"]) for d in demos)
    assert noise == [0.0, 0.3]
    # Each inference records the full-set objective it reached and whether it converged.
    for record in (tmp_path / "cells" / "infer").glob("*.json"):
        rec = json.loads(record.read_text())
        assert rec["objective"] > 0 and isinstance(rec["converged"], bool)
        z_file = json.loads((tmp_path / rec["policy"]).read_text())
        assert z_file["objective"] == rec["objective"]
    certs = (tmp_path / "certificates.csv").read_text().splitlines()
    assert certs[0].split(",")[3] == "expert" and {c.split(",")[3] for c in certs[1:]} == {
        "own",
        "noisy",
    }


def test_the_experts_ceiling_is_the_expert_rolled_out_on_the_imitators_states(
    checkpoint: str, tmp_path: Path
) -> None:
    from rbfm import EVAL_SEED
    from rbfm.evaluation import EnvSpec, RolloutEngine, fb_policy, noisy_policy
    from rbfm.fb.checkpoint import load_checkpoint

    _own_and_noisy(checkpoint, tmp_path, episodes=3)
    with open(tmp_path / "experts.csv") as f:
        rows = {r["expert"]: r for r in csv.DictReader(f)}
    model, _ = load_checkpoint(checkpoint, device="cpu")
    z = torch.tensor(read_meta(Path(checkpoint))["task_z"]["walk"])
    seeds = [(EVAL_SEED, k) for k in range(3)]
    with RolloutEngine(0) as engine:
        own = engine.run(EnvSpec("cheetah", "walk"), fb_policy(model, z), 3, seeds=seeds)
        act = noisy_policy(fb_policy(model, z), 0.3, seeds)
        noisy = engine.run(EnvSpec("cheetah", "walk"), act, 3, seeds=seeds).returns
    assert float(rows["own"]["mean"]) == pytest.approx(float(own.returns.mean()), rel=1e-5)
    assert float(rows["noisy"]["mean"]) == pytest.approx(float(noisy.mean()), rel=1e-5)
    assert rows["own"]["mean"] != rows["noisy"]["mean"]
    assert rows["noisy"]["family"] == "joint_friction" and rows["noisy"]["level"] == "0.0"


def test_each_episode_draws_its_own_action_noise() -> None:
    """An episode's noise depends on its seed only, not on the episodes beside it."""
    from rbfm.evaluation import noisy_policy

    def zero(obs: np.ndarray, episodes: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), 4), np.float32)

    seeds = [(5, k) for k in range(3)]
    together = noisy_policy(zero, 0.3, seeds)(np.zeros((3, 2)), np.arange(3))
    alone = [noisy_policy(zero, 0.3, [s])(np.zeros((1, 2)), np.arange(1))[0] for s in seeds]
    np.testing.assert_array_equal(together, np.stack(alone))
    big = noisy_policy(zero, 100.0, seeds)(np.zeros((3, 2)), np.arange(3))
    assert np.abs(big).max() == 1.0 and together.std() == pytest.approx(0.3, rel=0.5)


def _table(path: Path) -> list[tuple[Any, ...]]:
    return [
        (r.task, r.method, r.seed, r.family, r.level, r.mean, r.std, r.unstable, r.cell)
        for r in read_table(path)
    ]


def test_local_and_ray_give_the_same_table(checkpoint: str, tmp_path: Path) -> None:
    from rbfm.experiments import RayExecutor

    spec = from_dict(smoke_dict(checkpoint))
    local = run_experiment(spec, tmp_path / "local", LocalExecutor(0), progress=False)
    pytest.importorskip("ray")
    import ray

    try:
        remote = run_experiment(spec, tmp_path / "ray", RayExecutor("local", 2), progress=False)
    finally:
        ray.shutdown()
    counts = {"demos": 2, "infer": 8, "eval": 16, "ceiling": 4, "certificate": 8}
    assert remote.computed == local.computed == counts
    rows = _table(local.results)
    assert len(rows) == 16 and rows == _table(remote.results)  # bitwise: floats compared exactly
    experts = (tmp_path / "local" / "experts.csv").read_text()
    assert experts == (tmp_path / "ray" / "experts.csv").read_text()
    assert len(experts.splitlines()) == 1 + 4  # 2 tasks x 2 levels
    certs_local = (tmp_path / "local" / "certificates.csv").read_text()
    assert certs_local == (tmp_path / "ray" / "certificates.csv").read_text()
    # Every inference has its certificate: TV and Heavy sets at five radii (0.8 among them).
    assert len(certs_local.splitlines()) == 1 + 8 * 2 * 5


def test_rerun_skips_finished_cells(checkpoint: str, tmp_path: Path) -> None:
    spec = from_dict(smoke_dict(checkpoint))
    run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "cells").rglob("*.json")}
    again = run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    assert again.computed == {"demos": 0, "infer": 0, "eval": 0, "ceiling": 0, "certificate": 0}
    assert again.skipped == 38
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp_path / "cells").rglob("*.json")}
    # A data label names a model in figures; it is not part of any cell's identity, so
    # relabelling the model relabels its finished rows without recomputing them.
    data = smoke_dict(checkpoint)
    data["models"][0]["dataset"] = "rnd-v1"
    relabelled = run_experiment(from_dict(data), tmp_path, LocalExecutor(0), progress=False)
    assert relabelled.skipped == 38 and sum(relabelled.computed.values()) == 0
    with (tmp_path / "results.csv").open() as f:
        assert {row["dataset"] for row in csv.DictReader(f)} == {"rnd-v1"}


def test_cells_read_from_other_demonstrations_are_refused_or_computed_again(
    checkpoint: str, tmp_path: Path
) -> None:
    """A cell's id names its demonstrations' recipe, not their bits, which a CPU with other
    vector units changes: a finished inference that read other bits than the file now
    holds is refused before anything is computed, or with forget_stale computed again
    with every cell built on it, and the other task's cells are kept."""
    spec = from_dict(smoke_dict(checkpoint))
    run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    p = plan(spec)
    (walk,) = [d for d in p.demos if d.task == "walk"]
    path = tmp_path / "demos" / f"{walk.id}.npz"
    demos = load_demos(path, "cheetah")
    action = demos.action.copy()
    action[0, 0] = np.nextafter(action[0, 0], np.float32(2))  # the last bit of one action
    save_demos(path, dataclasses.replace(demos, action=action))
    cells = sorted((tmp_path / "cells").rglob("*.json"))
    stamps = {c: c.stat().st_mtime_ns for c in cells}
    with pytest.raises(DatasetError, match=rf"{walk.id}\.npz holds other .* than 4 .*forget-stale"):
        run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    assert stamps == {c: c.stat().st_mtime_ns for c in sorted((tmp_path / "cells").rglob("*.json"))}

    again = run_experiment(spec, tmp_path, LocalExecutor(0), progress=False, forget_stale=True)
    assert again.computed == {"demos": 0, "infer": 4, "eval": 8, "ceiling": 0, "certificate": 4}
    assert again.skipped == 38 - 16
    walks = {i.id for i in p.infers if i.demos.id == walk.id}
    kept = [c for c in cells if c.stem not in walks and "infer" in c.parts]
    assert len(kept) == 4 and all(c.stat().st_mtime_ns == stamps[c] for c in kept)
    for i in p.infers:
        recorded = json.loads((tmp_path / "cells" / "infer" / f"{i.id}.json").read_text())
        on_file = load_demos(tmp_path / "demos" / f"{i.demos.id}.npz", "cheetah")
        assert recorded["demos_sha256"] == content_sha256(on_file)
    assert sum(run_experiment(spec, tmp_path, LocalExecutor(0), False).computed.values()) == 0


def test_a_killed_run_resumes_to_the_uninterrupted_table(checkpoint: str, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.toml"
    data = smoke_dict(checkpoint, episodes=4)
    spec_file.write_text(_toml(data))
    # The uninterrupted run evaluates every cell in one lockstep batch; the killed one in
    # jobs of one cell (4 episodes), so the kill lands between stored cells. The tables
    # must still agree bitwise: a cell's returns do not depend on what shares its batch.
    whole = run_experiment(from_dict(data), tmp_path / "whole", LocalExecutor(0), progress=False)

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "rbfm.cli", "experiment", str(spec_file), "--out", str(out)]
    cmd += ["--workers", "0", "--quiet", "--eval-batch", "4"]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"})
    evals = out / "cells" / "eval"
    deadline = time.monotonic() + 300
    while not (evals.is_dir() and len(list(evals.glob("*.json"))) >= 3):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in evals.glob("*.json")}
    assert 3 <= len(finished) < 16
    assert not list(out.rglob(".*.part")) or all(
        p.suffix == ".part" for p in out.rglob(".*.part")
    )  # leftovers are only temporaries, never read

    # A dry run reports what the killed run left, without computing anything.
    p = plan(from_dict(data))
    left = pending(p, out)
    assert f" {len(finished)}/16 evaluation," in left and "100%" not in left
    assert pending(p, tmp_path / "whole").endswith(" 100% of the estimated work")
    assert "; 0% of" in pending(p, tmp_path / "nothing")

    resumed = run_experiment(from_dict(data), out, LocalExecutor(0), False, eval_batch=4)
    assert resumed.computed["eval"] == 16 - len(finished)  # nothing finished is repeated
    assert {p.name: p.stat().st_mtime_ns for p in evals.glob("*.json") if p.name in finished} == (
        finished
    )
    assert _table(resumed.results) == _table(whole.results)


def _marked(marker: str) -> set[int]:
    """Live processes whose environment holds `marker`."""
    pids = set()
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in env.read_bytes():
                pids.add(int(env.parent.name))
        except OSError:  # gone, or not ours to read
            pass
    return pids


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_workers_exit_when_the_driver_is_killed() -> None:
    marker = f"RBFM_TEST_{os.getpid()}_{time.monotonic_ns()}"
    script = (
        "import time\n"
        "from rbfm.experiments.executors import LocalExecutor\n"
        "for _ in LocalExecutor(2).map_unordered(time.sleep, [120, 120]):\n"
        "    pass\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, marker: "1"})
    deadline = time.monotonic() + 120
    # The driver, its forkserver and two workers, each with its watchdog started.
    while len(_marked(marker)) < 4:
        assert driver.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.0)
    driver.kill()  # SIGKILL: no cleanup runs in the driver
    driver.wait()
    # The watchdog polls each second; on a loaded machine the forkserver and the workers'
    # exits took over 15 s. 60 s is still half the jobs' sleep, so only the watchdog passes.
    deadline = time.monotonic() + 60
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _marked(marker), "workers outlived their driver"


def _toml(data: dict[str, Any]) -> str:
    """Minimal TOML writer for the test specs (scalars, lists, tables of scalars)."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    lines = [f"{k} = {value(v)}" for k, v in data.items() if k not in ("models", "methods")]
    for key in ("models", "methods"):
        for entry in data[key]:
            lines.append(f"[[{key}]]")
            lines += [f"{k} = {value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def test_toml_spec_round_trip(checkpoint: str, tmp_path: Path) -> None:
    from rbfm.experiments import load_spec

    path = tmp_path / "s.toml"
    path.write_text(_toml(smoke_dict(checkpoint)))
    assert load_spec(str(path)) == from_dict(smoke_dict(checkpoint))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seeds": [0, 0]}, "seeds: give distinct"),
        ({"num_demos": 9}, r"num_demos: .* \(valid: 1..3\)"),
        ({"episodes": 0}, r"episodes: 0 is out of range"),
        ({"colour": 1}, "unknown field 'colour'"),
        ({"methods": [{"name": "gail"}]}, r"methods\[0\].name: unknown method 'gail'"),
        ({"methods": [{"name": "fbil", "eps": 0.5}]}, r"methods\[0\].eps: fbil has no"),
        # A named settings the method would ignore: the reductions' configs have no paper one.
        (
            {"methods": [{"name": "er", "settings": "paper"}]},
            r"methods\[0\].settings: settings 'paper' does nothing for er \(er's settings: ",
        ),
        (
            {"methods": [{"name": "fm", "settings": "paper"}]},
            r"methods\[0\].settings: settings 'paper' does nothing for fm ",
        ),
        (
            {"methods": [{"name": "drbc", "settings": "paper"}]},
            r"methods\[0\].settings: settings 'paper' does nothing for drbc \(drbc takes no",
        ),
        (
            {"methods": [{"name": "fbil", "preset": "paper"}]},
            r"spec.methods\[0\].preset: preset 'paper' does nothing for fbil \(fbil takes no",
        ),
        (
            {"methods": [{"name": "fbil", "settings": "best"}]},
            r"methods\[0\].settings: unknown settings 'best'; valid choices: default, paper$",
        ),
        (
            {"methods": [{"name": "rbfm-light", "eps": 1.5}]},
            r"methods\[0\]: LightConfig.eps: 1.5 is out of range \(valid: a number in \[0, 1\]\)",
        ),
        (
            {"methods": [{"name": "rbfm-heavy", "overrides": {"gamma": 1.0}}]},
            r"HeavyConfig.gamma: 1.0 is out of range",
        ),
        (
            {"methods": [{"name": "fbil", "overrides": {"momentum": 0.9}}]},
            r"methods\[0\]: fbil: no field momentum \(valid: ",
        ),
        (
            {"methods": [{"name": "drbc", "preset": "huge"}]},
            r"methods\[0\]: unknown DRBC preset 'huge'",
        ),
        ({"methods": [{"name": "fbil", "tasks": ["flip"]}]}, r"methods\[0\].tasks: 'flip'"),
        (
            {"methods": [{"name": "fbil", "datasets": ["aps"]}]},
            r"methods\[0\].datasets: 'aps' is not the dataset of any model",
        ),
    ],
)
def test_invalid_specs_fail_naming_the_field(
    checkpoint: str, tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        run_experiment(from_dict(smoke_dict(checkpoint, **change)), tmp_path, LocalExecutor(0))
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("model_change", "message"),
    [
        ({"domain": "hopper"}, r"models\[0\].domain: unknown domain 'hopper'"),
        ({"domain": "walker"}, r"models\[0\].checkpoint: .* is a cheetah model, not walker"),
        ({"tasks": ["walk", "flip"]}, r"models\[0\].tasks: unknown task 'flip'"),
        ({"tasks": ["run_backward"]}, r"stores no reward-inferred z for run_backward"),
        ({"families": ["gravity"]}, r"models\[0\].families: unknown family 'gravity'"),
        ({"levels": 9}, r"models\[0\].levels: 9 is out of range \(valid: 1..6"),
        (
            {"levels": {"joint_friction": [0.0, 40.0]}},
            r"levels.joint_friction: 40.0 is outside the family's range \[0, 25\]",
        ),
        ({"checkpoint": "/nonexistent/model"}, r"models\[0\].checkpoint: .*no such checkpoint"),
    ],
)
def test_invalid_models_fail_naming_the_field(
    checkpoint: str, tmp_path: Path, model_change: dict[str, Any], message: str
) -> None:
    data = smoke_dict(checkpoint)
    data["models"][0].update(model_change)
    with pytest.raises(ConfigError, match=message):
        run_experiment(from_dict(data), tmp_path, LocalExecutor(0))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("levels", "found"),
    [
        ("3", "count"),
        (["0.0", "25.0"], "count"),
        ([0.0, 25.0], "count"),
        (True, "count"),
        (2.5, "count"),
        ({"joint_friction": ["a"]}, "family"),
        ({"joint_friction": "25"}, "family"),
        ({"joint_friction": [True]}, "family"),
        ({"joint_friction": [0.0, "25"]}, "family"),
        ({"joint_friction": {"low": 0.0}}, "family"),
    ],
)
def test_levels_of_the_wrong_type_are_refused_naming_the_file_and_field(
    checkpoint: str, tmp_path: Path, levels: Any, found: str
) -> None:
    from rbfm.experiments import load_spec

    data = smoke_dict(checkpoint)
    data["models"][0]["levels"] = levels
    path = tmp_path / "s.toml"
    path.write_text(_toml(data))
    field = f"{path}.models[0].levels" + (".joint_friction" if found == "family" else "")
    expected = "a number or a list of numbers" if found == "family" else "a count of sweep levels"
    with pytest.raises(ConfigError, match=rf"^{re.escape(field)}: expected {expected}"):
        load_spec(str(path))


def test_one_model_under_two_labels_is_refused(checkpoint: str, tmp_path: Path) -> None:
    data = smoke_dict(checkpoint)
    data["models"].append({**data["models"][0], "dataset": "aps"})
    with pytest.raises(
        ConfigError, match=r"models\[1\].checkpoint: the same weights as models\[0\]"
    ):
        run_experiment(from_dict(data), tmp_path, LocalExecutor(0))
    assert not any(tmp_path.iterdir())


def test_two_models_under_one_label_are_refused(checkpoint: str, tmp_path: Path) -> None:
    # Figures and IQMs group rows by (domain, data label): two models would be pooled.
    data = smoke_dict(checkpoint)
    data["models"].append({**data["models"][0], "checkpoint": "cheetah:cpu"})
    with pytest.raises(ConfigError, match=r"models\[1\].dataset: cheetah on 'rnd' is already"):
        run_experiment(from_dict(data), tmp_path, LocalExecutor(0))
    assert not any(tmp_path.iterdir())
    data["models"][1]["dataset"] = "cpu"
    assert len(plan(from_dict(data)).demos) == 4


def test_the_first_inference_of_a_process_is_warmed_up_without_changing_it(
    checkpoint: str,
) -> None:
    from rbfm.experiments import jobs

    z = read_meta(checkpoint)["task_z"]["walk"]
    demos = jobs.run_demos(jobs.DemosJob(checkpoint, "cheetah", "walk", z, 1, 0, noise=0.3))
    job = jobs.InferJob("fbil", {"steps": 30}, None, 0, demos, checkpoint)
    jobs._WARMED.clear()
    first = jobs.run_infer(job)
    assert (checkpoint, "fbil") in jobs._WARMED
    again = jobs.run_infer(job)  # no warm-up this time: the same descent, bit for bit
    assert first.z == again.z and first.objective == again.objective


def test_tv_certificate_is_the_exact_worst_case() -> None:
    from scipy.optimize import linprog

    losses = torch.tensor([0.5, 2.0, 1.0, 4.0, 0.1], dtype=torch.float64)
    (cert,) = tv_certificates(losses, (0.3,))
    # max_q q.l  s.t. q in the simplex, sum |q - p| / 2 <= 0.3, as an LP over (q, t = |q - p|).
    n, p = len(losses), np.full(len(losses), 0.2)
    c = np.concatenate([-losses.numpy(), np.zeros(n)])
    a_ub = np.block([[np.eye(n), -np.eye(n)], [-np.eye(n), -np.eye(n)], [np.zeros(n), np.ones(n)]])
    b_ub = np.concatenate([p, -p, [0.6]])
    lp = linprog(c, a_ub, b_ub, np.concatenate([np.ones(n), np.zeros(n)])[None], [1.0])
    assert cert.nominal == pytest.approx(float(losses.mean()))
    assert cert.worst_case == pytest.approx(-lp.fun, abs=1e-9)


def test_heavy_certificate_is_the_dual_minimised() -> None:
    torch.manual_seed(0)
    losses = torch.rand(400)
    # A closed trajectory: each next pair is the following current pair, so the states'
    # and next states' distributions are the same, as along demonstrations.
    feat = torch.randn(400, 8)
    nxt = feat.roll(-1, 0)
    (start,) = heavy_certificates(losses, feat, nxt, (0.5,), steps=1)
    (fitted,) = heavy_certificates(losses, feat, nxt, (0.5,), steps=300)
    # Fitting (Q, tau) lowers the dual, but never below the nominal loss: with w = 1 the
    # inner supremum is at least c, and the Q terms of E[c] cancel on such a chain.
    assert fitted.nominal == pytest.approx(float(losses.mean()))
    assert fitted.worst_case < start.worst_case
    assert fitted.worst_case >= fitted.nominal - 1e-5


def test_heavy_certificates_grow_with_the_radius_and_keep_each_fits_bound() -> None:
    """The worst case over a ball grows with its radius, so a radius's certificate is the
    least bound found at it or at any larger radius: never above its own fit, and
    non-decreasing in the radius even where a capped MLP fit stops high."""
    torch.manual_seed(1)
    losses = torch.rand(300)
    feat = torch.randn(300, 6)
    nxt = feat.roll(-1, 0)
    radii = (0.1, 0.3, 0.8)
    certs = heavy_certificates(losses, feat, nxt, radii, steps=1)
    alone = [heavy_certificates(losses, feat, nxt, (r,), steps=1)[0] for r in radii]
    assert [c.radius for c in certs] == list(radii)
    bounds = [c.worst_case for c in certs]
    assert bounds == sorted(bounds)
    assert all(c.worst_case <= a.worst_case for c, a in zip(certs, alone, strict=True))
    # 0.8 holds every distribution here (SoftTV's largest divergence is below it): its
    # value is exact, and one step leaves the fit at 0.3 above it, where it is used instead.
    assert alone[1].worst_case > alone[2].worst_case == bounds[1] == bounds[2]
    assert bounds[0] == alone[0].worst_case < bounds[1]


def test_certificates_turned_on_for_a_finished_run_compute_only_them(
    checkpoint: str, tmp_path: Path
) -> None:
    from rbfm.experiments import jobs
    from rbfm.experiments.table import read_certificates

    data = smoke_dict(checkpoint, certificate_steps=0, seeds=[0])
    data["models"][0].update(tasks=["walk"], levels=1)
    first = run_experiment(from_dict(data), tmp_path, LocalExecutor(0), progress=False)
    assert first.computed["certificate"] == 0
    assert read_certificates(first.certificates) == []
    data["certificate_steps"] = 5
    spec = from_dict(data)
    again = run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    assert again.computed == {"demos": 0, "infer": 0, "eval": 0, "ceiling": 0, "certificate": 2}
    rows = read_certificates(again.certificates)
    assert {(r.method, r.set) for r in rows} == {
        (m, s) for m in ("fbil", "rbfm-heavy") for s in ("tv", "heavy")
    }
    # The stored certificates are those of the stored policy on its drawn demonstrations.
    p = plan(spec)
    (fbil,) = [c for c in p.certs if c.infer.variant.method == "fbil"]
    demos = load_demos(tmp_path / "demos" / f"{fbil.infer.demos.id}.npz", "cheetah")
    z = json.loads((tmp_path / "policies" / f"{fbil.infer.id}.json").read_text())["z"]
    job = jobs.CertJob(demos.sample(2, 0), fbil.radii, 5, checkpoint, z)
    expected = {(c.uncertainty_set, c.radius): c.worst_case for c in jobs.run_cert(job)}
    mine = {(r.set, r.radius): r.worst_case_loss for r in rows if r.method == "fbil"}
    assert mine == pytest.approx(expected, rel=1e-12)


def test_evaluation_outputs_follow_the_job_order_whatever_the_policy_kinds(
    checkpoint: str,
) -> None:
    """A job mixing baseline policies and task vectors returns its outputs in entry order
    (the engine runs the task vectors first), each equal to the entry evaluated alone."""
    from rbfm.baselines.drbc import DeterministicPolicy
    from rbfm.experiments.jobs import EvalEntry, EvalJob, run_eval

    torch.manual_seed(0)
    state = {k: v.numpy() for k, v in DeterministicPolicy(17, 6, (8,)).state_dict().items()}
    meta = {"obs_dim": 17, "action_dim": 6, "config": {"hidden": [8]}}
    z = read_meta(Path(checkpoint))["task_z"]["walk"]
    base = EvalEntry("b", "cheetah", "walk", None, None, 1, 0, None, ("drbc", meta, state))
    fb = EvalEntry("f", "cheetah", "walk", None, None, 1, 0, z, None)
    together = run_eval(EvalJob(checkpoint, [base, fb]))
    assert [o.cell for o in together] == ["b", "f"]
    alone = [run_eval(EvalJob(checkpoint, [e]))[0] for e in (base, fb)]
    for a, b in zip(together, alone, strict=True):
        np.testing.assert_array_equal(a.returns, b.returns)
    assert together[0].returns[0] != together[1].returns[0]


def test_certificates_of_a_baseline_read_its_raw_state_action_pairs(checkpoint: str) -> None:
    """A baseline's certificates: its own action errors, and the Heavy critic on raw (s, a)
    and (s', a') pairs, as BE-DROIL's (no FB features: a baseline has no model)."""
    from rbfm.baselines.drbc import DeterministicPolicy
    from rbfm.experiments import jobs

    z = read_meta(checkpoint)["task_z"]["walk"]
    demos = jobs.run_demos(jobs.DemosJob(checkpoint, "cheetah", "walk", z, 1, 0, noise=0.3))
    torch.manual_seed(0)
    policy = DeterministicPolicy(17, 6, (8,))
    state = {k: v.numpy() for k, v in policy.state_dict().items()}
    meta = {"obs_dim": 17, "action_dim": 6, "config": {"hidden": [8]}}
    job = jobs.CertJob(demos, (0.2, 0.8), 5, policy=("drbc", meta, state))
    t = {k: torch.as_tensor(v) for k, v in demos.transitions().items()}
    with torch.no_grad():
        losses = (policy(t["observation"]) - t["action"]).square().sum(-1)
    feat = torch.cat([t["observation"], t["action"]], -1)
    nxt = torch.cat([t["next_observation"], t["next_action"]], -1)
    expected = tv_certificates(losses, (0.2, 0.8)) + heavy_certificates(
        losses, feat, nxt, (0.2, 0.8), 5
    )
    assert jobs.run_cert(job) == expected
    assert expected[0].nominal > 0.1  # an untrained policy: the losses are not trivially 0


def test_cell_ids_are_pinned() -> None:
    """Runs of hours are resumed by cell id: a change to what ids hash (or how) would
    silently recompute everything. These are q1's ids as its first run stored them; they
    change only with the shipped models' weights or the cells' defining settings."""
    p = plan(PRESETS["q1"])
    ids = (p.demos[0].id, p.infers[0].id, p.evals[0].id, p.ceilings[0].id)
    assert ids == ("4deb62d31d346b40", "7c71e146263291e6", "d37304d7278fc466", "73b2ae98f6890dc0")


def _ids(p: Plan) -> set[str]:
    return {c.id for c in [*p.demos, *p.infers, *p.adapts, *p.evals, *p.ceilings]}


def test_the_grid_stages_are_slices_of_the_grid() -> None:
    """docs/results/run.sh runs q1 and q2 before `grid` into one directory: every cell they
    compute must be one of the grid's, so the grid reuses them (and rerunning finds all done)."""
    grid = _ids(plan(PRESETS["grid"]))
    for stage in ("q1", "q2"):
        assert _ids(plan(PRESETS[stage])) <= grid, stage
    # `certify` adds certificates to q1's and q2's policies, and computes nothing else.
    certify = plan(PRESETS["certify"])
    q1, q2 = plan(PRESETS["q1"]), plan(PRESETS["q2"])
    assert _ids(certify) == _ids(q1) | _ids(q2)
    assert {c.infer.id for c in certify.certs} == {i.id for i in [*q1.infers, *q2.infers]}
    assert len(certify.certs) == 110 and not q1.certs and not q2.certs
    # The grid runs as one stage per domain: together they are the grid.
    parts = [_ids(plan(PRESETS[f"grid-{d}"])) for d in ("walker", "quadruped", "cheetah")]
    assert set().union(*parts) == grid and sum(map(len, parts)) == len(grid)
    # So does `shift`, and each domain's part holds its FB-IL stage's cells.
    shift = _ids(plan(PRESETS["shift"]))
    parts = [_ids(plan(PRESETS[f"shift-{d}"])) for d in ("walker", "quadruped", "cheetah")]
    assert set().union(*parts) == shift and sum(map(len, parts)) == len(shift)
    for d, part in zip(("walker", "quadruped", "cheetah"), parts, strict=True):
        assert _ids(plan(PRESETS[f"shift-fbil-{d}"])) <= part
    adapt = _ids(plan(PRESETS["adapt"]))
    parts = [_ids(plan(PRESETS[f"adapt-{d}"])) for d in ("walker", "quadruped", "cheetah")]
    assert set().union(*parts) == adapt and sum(map(len, parts)) == len(adapt)
    # datasize and sources share their walker:rnd-1m flip cells under joint friction.
    shared = _ids(plan(PRESETS["datasize"])) & _ids(plan(PRESETS["sources"]))
    assert len(shared) == 2 * (1 + 15 + 6 * 15 + 6)  # per expert: demos, infers, evals, ceilings
    # `independent` imitates other models of each domain: all its cells are its own.
    independent = plan(PRESETS["independent"])
    assert not _ids(independent) & grid
    assert {(d.model.domain, d.expert.name) for d in independent.demos} == {
        ("walker", "model:walker:rnd-v4"),
        ("quadruped", "model:quadruped:rnd-v2"),
        ("cheetah", "model:cheetah:rnd-v1"),
    }
    assert (len(independent.infers), len(independent.evals)) == (90, 1620)
    # Its adaptation slice reuses FB-IL's inferences and evaluations there, and adds only
    # searches and the adapted z's evaluations (nominal and the two strongest levels).
    adapted = plan(PRESETS["adapt-independent"])
    assert {i.id for i in adapted.infers} <= {i.id for i in independent.infers}
    plain = {e.id for e in adapted.evals if e.adapt is None}
    assert plain <= {e.id for e in independent.evals} and len(plain) == 6 * 3 * 3 * 5
    assert len(adapted.adapts) == 2 * len(plain)  # the distance's search and the oracle's


def test_q1_walker_asks_q1_of_walkers_default() -> None:
    """`q1-walker` is `q1`'s walker cells on walker's default (Table 4's size) instead of
    the `cpu` walker `q1` is pinned to: the same cells in shape, none of them shared."""
    ours, q1 = plan(PRESETS["q1-walker"]), plan(PRESETS["q1"])
    theirs = [e for e in q1.evals if e.infer.demos.model.domain == "walker"]

    def shape(e: EvalCell) -> tuple[str, str, str, float | None, int]:
        i = e.infer
        return (i.variant.method, i.demos.expert.name, e.family, e.level, i.seed)

    assert sorted(map(shape, ours.evals), key=str) == sorted(map(shape, theirs), key=str)
    default, cpu = (read_meta(resolve(name))["sha256"] for name in ("walker", CPU_WALKER))
    assert {e.infer.demos.model.sha256 for e in ours.evals} == {default} != {cpu}
    assert not _ids(ours) & _ids(q1)


@pytest.mark.parametrize("name", ["external-walker", "grid-walker", "adapt-walker"])
def test_walker_default_stages_are_their_stages_cells_on_the_default(name: str) -> None:
    """`STAGE-default` is `STAGE`'s cells that read walker's RND model, on walker's default
    (Table 4's size) instead of the `cpu` walker: the same methods, adaptations, experts,
    levels and seeds; no baseline (it trains on the dataset), none of their cells shared.
    The planner's episodes are the same; its ceiling, independent of the imitator, is not
    planned again. `q1-walker`'s cells are among them where the stage has its cells."""
    ours, cpu = plan(PRESETS[f"{name}-default"]), plan(PRESETS[name])
    default, cpu_walker = (read_meta(resolve(n))["sha256"] for n in ("walker", CPU_WALKER))
    theirs = [
        e
        for e in cpu.evals
        if e.infer.demos.model.sha256 == cpu_walker
        and e.infer.variant.method not in BASELINE_METHODS
    ]

    def shape(e: EvalCell) -> tuple[object, ...]:
        i = e.infer
        return (
            i.variant.method,
            i.variant.label,
            i.demos.expert.name,
            i.demos.task,
            e.family,
            e.level,
            i.seed,
            e.budget,
        )

    assert sorted(map(shape, ours.evals), key=str) == sorted(map(shape, theirs), key=str)
    assert {e.infer.demos.model.sha256 for e in ours.evals} == {default}
    assert len(ours.adapts) == len(
        [a for a in cpu.adapts if a.infer.demos.model.sha256 == cpu_walker]
    )
    assert not _ids(ours) & _ids(cpu)
    planner = [repr(d.expert.planner) for d in cpu.demos if d.model.sha256 == cpu_walker]
    assert [repr(d.expert.planner) for d in ours.demos] == planner
    if name == "external-walker":
        assert not ours.ceilings
    else:
        q1 = plan(PRESETS["q1-walker"]).infers

        def kind(i: InferCell) -> tuple[str, str, str, str]:
            return (i.variant.method, i.variant.label, i.demos.expert.name, i.demos.task)

        mine = {kind(i) for i in ours.infers}
        assert {i.id for i in q1 if kind(i) in mine} <= {i.id for i in ours.infers}
        assert any(kind(i) in mine for i in q1)


@pytest.mark.parametrize("name", ["shift-quadruped", "adapt"])
def test_task_slices_partition_a_stage(name: str) -> None:
    """`rbfm experiment STAGE --tasks T` (run.sh's STAGE@T) runs a long stage a task at a
    time: the slices' cells are the stage's, each exactly once, and an unknown task is
    refused with the stage's tasks named."""
    spec = PRESETS[name]
    whole = _ids(plan(spec))
    tasks = sorted({t for m in spec.models for t in (m.tasks or TASKS[m.domain])})
    parts = [_ids(plan(with_overrides(spec, tasks=(t,)))) for t in tasks]
    assert set().union(*parts) == whole and sum(map(len, parts)) == len(whole)
    pair = _ids(plan(with_overrides(spec, tasks=(tasks[0], tasks[1]))))
    assert pair == parts[0] | parts[1]
    with pytest.raises(ConfigError, match=r"--tasks: backflip not in .*\(.*walk"):
        with_overrides(spec, tasks=("walk", "backflip"))


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_plans_from_the_shipped_models(name: str, tmp_path: Path) -> None:
    """docs/experiments.md promises that every preset's models and experts ship with
    rbfm: a preset naming a model that is not in the package fails here, not hours into
    a stage; and the progress bar's cost model prices each of its cells."""
    p = plan(PRESETS[name])
    assert p.infers and p.evals
    assert "0% of the estimated work" in pending(p, tmp_path)


def test_the_grid_covers_every_shipped_default_model_and_question() -> None:
    spec = PRESETS["grid"]
    assert {(m.domain, m.dataset) for m in spec.models} == {
        ("walker", "rnd"),
        ("walker", "aps"),
        ("walker", "proto"),
        ("quadruped", "rnd"),
        ("cheetah", "rnd"),
    }
    # Walker's cells are the `cpu` walker's, walker's default when the grid ran.
    assert all(
        m.checkpoint == (CPU_WALKER if (m.domain, m.dataset) == ("walker", "rnd") else "shipped")
        and not m.tasks
        and not m.families
        for m in spec.models
    )
    labels = {(m.name, m.settings) for m in spec.methods}
    assert {("fbil", "default"), ("rbfm-light", "paper"), ("rbfm-heavy", "paper")} <= labels
    assert {"drbc", "bedroil"} <= {m.name for m in spec.methods}
    stages = ("q1", "q2", "eps", "datasize", "sources", "certify", "grid", "grid-walker")
    for name in (*stages, "grid-quadruped", "grid-cheetah"):
        s = PRESETS[name]
        assert (s.episodes, s.experts, s.seeds) == (20, ("own", "noisy"), (0, 1, 2, 3, 4)), name


def test_adaptation_is_an_axis_of_cells_evaluated_at_each_budget(
    checkpoint: str, tmp_path: Path
) -> None:
    data = smoke_dict(
        checkpoint,
        seeds=[0],
        certificate_steps=0,
        adapt=[
            {"budget": 2, "evaluate": [1, 2], "methods": ["fbil"]},
            {"budget": 2, "evaluate": [2], "criterion": "reward"},
        ],
    )
    data["models"][0]["tasks"] = ["run"]
    spec = from_dict(data)
    p = plan(spec)
    plain = plan(from_dict({k: v for k, v in data.items() if k != "adapt"}))
    # The plain cells keep their ids; FB-IL's z is adapted at each (family, level).
    assert {e.id for e in plain.evals} <= {e.id for e in p.evals}
    assert len(p.adapts) == 2 * 2  # two entries x two levels, FB-IL only
    assert len(p.evals) == len(plain.evals) + 2 * (2 + 1)
    run = run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    assert run.computed["adapt"] == 4
    rows = read_table(tmp_path / "results.csv")
    variants = sorted({r.variant for r in rows if r.method == "fbil"})
    assert variants == ["", "adapt-k1", "adapt-k2", "oracle-k2"]
    # A budget of one episode is the start z itself: FB-IL's evaluation, reused, not
    # recomputed; so is any budget whose search kept its start.
    by = {(r.variant, r.level): r.mean for r in rows if r.method == "fbil"}
    for level in {r.level for r in rows}:
        assert by["adapt-k1", level] == by["", level]
    k1 = [e for e in p.evals if e.variant == "adapt-k1"]
    store = Store(tmp_path)
    assert all("same_as" in json.loads(store.eval_record(e).read_text()) for e in k1)
    assert len(k1) <= run.computed["reused"] < len(k1) + 2 * (2 + 1)
    adapted = [r for r in rows if r.variant == "adapt-k2"]
    assert all((tmp_path / r.policy).exists() for r in adapted)
    costs = read_adaptations(tmp_path / "adaptations.csv")
    assert len(costs) == 4 and {c.cell for c in costs} == {a.id for a in p.adapts}
    # The oracle chooses the candidate with the best return on its own episodes.
    assert all(r.return_chosen == r.return_best for r in costs if r.adaptation == "oracle")
    again = run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    assert sum(again.computed.values()) == 0
    with pytest.raises(ConfigError, match=r"adapt\[0\].evaluate: 3"):
        plan(from_dict({**data, "adapt": [{"budget": 2, "evaluate": [3]}]}))
    with pytest.raises(ConfigError, match=r"adapt\[0\].methods: 'drbc'"):
        plan(from_dict({**data, "adapt": [{"budget": 2, "methods": ["drbc"]}]}))
    # The cone search is another configuration: cells and results of its own; the line
    # search's configuration (and so its cells' ids) does not name the search.
    cone = plan(from_dict({**data, "adapt": [{"budget": 2, "search": "cone"}]}))
    assert {a.config.get("search") for a in cone.adapts} == {"cone"}
    assert {a.config.get("search") for a in p.adapts} == {None}
    assert {e.variant for e in cone.evals if e.adapt} == {"adapt-cone-k2"}
    with pytest.raises(ConfigError, match=r"adapt\[0\]: search: 'grid'"):
        plan(from_dict({**data, "adapt": [{"budget": 2, "search": "grid"}]}))
    # A stage evaluates candidates; cem answers a mean of them.
    with pytest.raises(ConfigError, match=r"adapt\[0\].search: 'cem' answers its elites' mean"):
        plan(from_dict({**data, "adapt": [{"budget": 16, "evaluate": [16], "search": "cem"}]}))
    with pytest.raises(ConfigError, match=r"adapt\[0\].criterion: 'states' is rbfm.adapt's"):
        plan(
            from_dict({**data, "adapt": [{"budget": 10, "evaluate": [10], "criterion": "states"}]})
        )


def test_a_truncated_model_is_refused_before_anything_is_written(
    checkpoint: str, tmp_path: Path
) -> None:
    import shutil

    stem = tmp_path / "cut"
    for suffix in (".json", ".safetensors"):
        shutil.copy(Path(checkpoint).with_suffix(suffix), stem.with_suffix(suffix))
    weights = stem.with_suffix(".safetensors")
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ConfigError, match=r"models\[0\].checkpoint: .*corrupt"):
        run_experiment(from_dict(smoke_dict(str(stem))), tmp_path / "run", LocalExecutor(0))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("domain", ["walker", "quadruped", "cheetah"])
def test_the_context_models_adapt_as_the_nominal_ones_do(domain: str) -> None:
    """Adaptation on a dynamics-diverse context model is compared at the settings of the
    nominal model's cone slice (searches, budgets, criteria, levels, expert source), and its
    plain FB-IL cells are those `shift-own-fbil-DOMAIN` computed: only searches are new."""
    ctx, nominal = PRESETS[f"adapt-cone-{domain}-rand-ctx"], PRESETS[f"adapt-cone-{domain}"]
    assert ctx.adapt == nominal.adapt and ctx.experts == nominal.experts == ("noisy",)
    assert ctx.models[0].levels == nominal.models[0].levels
    assert ctx.models[0].checkpoint == f"{domain}:rnd-rand-ctx"
    p = plan(ctx)
    own = plan(PRESETS[f"shift-own-fbil-{domain}"])
    plain = {e.id for e in p.evals if e.adapt is None}
    assert {i.id for i in p.infers} <= {i.id for i in own.infers}
    assert plain <= {e.id for e in own.evals} and len(plain) == 4 * 3 * 3 * 5


def test_a_planner_expert_plans_runs_and_resumes_from_its_kept_episodes(
    checkpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """experts = ["mpc"]: the planner demonstrates, its ceiling is the planner inside the
    shifted simulator at nominal and the strongest level only, and a run that lost its
    cells but kept the planner's episodes replans nothing."""
    import rbfm.planning.demos as planning
    from rbfm.cli import main
    from rbfm.planning import mpc_config

    data = smoke_dict(checkpoint, experts=["mpc"], seeds=[0], demos=2, num_demos=1, episodes=1)
    data.update(mpc={"samples": 8, "horizon": 4}, planner_episodes=1, planner_levels=1)
    data["models"][0].update(tasks=["walk"], levels=3)
    data["methods"] = data["methods"][:1]
    spec = from_dict(data)
    run = run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    assert {r.expert for r in read_table(run.results)} == {"mpc"}
    (demos_file,) = (tmp_path / "demos").glob("*.npz")
    demos = load_demos(demos_file)
    assert demos.meta["source"] == "mpc" and demos.meta["mpc"]["samples"] == 8
    config = mpc_config("cheetah", {"samples": 8, "horizon": 4})
    first = planning.planned_episode("cheetah", "walk", config, 0, seed=0)
    assert np.array_equal(demos.observations()[0], first.observation.astype(np.float32))
    with open(tmp_path / "experts.csv") as f:
        ceilings = {r["level"]: float(r["mean"]) for r in csv.DictReader(f)}
    assert sorted(ceilings, key=float) == ["0.0", "25.0"]  # nominal and strongest, not 10
    strongest = planning.planned_episode("cheetah", "walk", config, 0, 1, {"joint_friction": 25})
    assert ceilings["25.0"] == pytest.approx(strongest.total, rel=1e-6)
    assert ceilings["0.0"] == pytest.approx(planning.planned_episode(
        "cheetah", "walk", config, 0, seed=1).total, rel=1e-6)  # fmt: skip

    # `rbfm demos --expert mpc --parts` keeps the same episodes under the same names, so a
    # run given that folder as its planner/ finds its demonstrations planned.
    kept, out = tmp_path / "kept", tmp_path / "mine.npz"
    demos_cli = ["demos", "--expert", "mpc", "--domain", "cheetah", "--task", "walk"]
    demos_cli += ["--episodes", "2", "--mpc", "samples=8", "--mpc", "horizon=4"]
    assert main([*demos_cli, "--parts", str(kept), "--out", str(out)]) == 0
    assert len(list(kept.iterdir())) == 2 and load_demos(out).returns.tolist() == [
        e.total for e in planning.planned_episodes("cheetah", "walk", config, 2, kept)
    ]
    for part in kept.iterdir():
        with np.load(part) as mine, np.load(tmp_path / "planner" / part.name) as runs:
            assert all(np.array_equal(mine[k], runs[k]) for k in runs.files)

    def replan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a kept planner episode was planned again")

    monkeypatch.setattr(planning, "planned_episode", replan)
    returns = [(r.cell, r.mean, r.std) for r in read_table(run.results)]
    ceiling_table = (tmp_path / "experts.csv").read_text()
    for kind in ("ceiling", "eval", "infer"):
        for record in (tmp_path / "cells" / kind).glob("*.json"):
            record.unlink()
    demos_file.unlink()
    again = run_experiment(spec, tmp_path, LocalExecutor(0), progress=False)
    assert again.computed["demos"] == 1 and again.computed["ceiling"] == 2
    assert [(r.cell, r.mean, r.std) for r in read_table(again.results)] == returns
    assert (tmp_path / "experts.csv").read_text() == ceiling_table
    # planner_levels = 0: the ceiling at nominal only; 6 > the 2 shifted levels: all three.
    for k, levels in ((0, {0.0}), (6, {0.0, 10.0, 25.0})):
        only = plan(from_dict({**data, "planner_levels": k}))
        assert {c.level for c in only.ceilings} == levels
    # Planner settings are checked before anything runs, naming the field.
    data["mpc"] = {"samples": 0}
    with pytest.raises(ConfigError, match=r"^mpc\.samples: 0 is out of range"):
        plan(from_dict(data))
    data.update(mpc={"samples": 8}, experts=["own"])
    with pytest.raises(ConfigError, match='no expert source is "mpc"'):
        plan(from_dict(data))


def test_the_runner_carries_the_goal_reduction_as_a_z_per_step(
    checkpoint: str, tmp_path: Path
) -> None:
    """A `goal` inference is stored as its sequences file and evaluated by tracking them:
    its rows equal the goal policy rolled out on the same initial states. In a bf16 spec
    (the grid's) only the descending methods get the actor's bfloat16 copy: ER's closed
    form and the goals run as they would alone."""
    from rbfm import EVAL_SEED
    from rbfm.evaluation import EnvSpec, RolloutEngine
    from rbfm.fb.checkpoint import load_checkpoint
    from rbfm.inference import infer
    from rbfm.inference.goal import GoalConfig, GoalPolicy, infer_sequences

    data = smoke_dict(checkpoint, seeds=[0], episodes=3, certificate_steps=5, bf16=True)
    data["models"][0].update(tasks=["walk"], levels=1)
    data["methods"] = [{"name": "goal"}, {"name": "er"}, data["methods"][0]]
    run = run_experiment(from_dict(data), tmp_path, LocalExecutor(0), progress=False)
    assert {i.variant.method: i.bf16 for i in run.plan.infers} == {
        "goal": False,
        "er": False,
        "fbil": True,
    }
    (row,) = [r for r in read_table(run.results) if r.method == "goal"]
    (inf,) = [i for i in run.plan.infers if i.variant.method == "goal"]
    demos = load_demos(tmp_path / "demos" / f"{inf.demos.id}.npz").sample(2, 0)
    model, _ = load_checkpoint(checkpoint, device="cpu")
    goals = infer_sequences(model, demos, GoalConfig())
    (er,) = [i for i in run.plan.infers if i.variant.method == "er"]
    record = json.loads((tmp_path / "cells" / "infer" / f"{er.id}.json").read_text())
    stored = json.loads((tmp_path / record["policy"]).read_text())["z"]
    assert np.allclose(stored, infer(model, demos, "er").z.tolist(), atol=1e-6)
    with RolloutEngine(0) as engine:
        seeds = [(EVAL_SEED, k) for k in range(3)]
        direct = engine.run(EnvSpec("cheetah", "walk"), GoalPolicy(model, goals), 3, seeds=seeds)
    assert row.mean == pytest.approx(float(direct.returns.mean()), rel=1e-5)
    assert Path(tmp_path / row.policy).with_suffix(".safetensors").is_file()
    # FB-IL's and ER-FB's: a sequence has no one policy's loss.
    assert sorted(c.infer.variant.method for c in run.plan.certs) == ["er", "fbil"]
    again = run_experiment(from_dict(data), tmp_path, LocalExecutor(0), progress=False)
    assert sum(again.computed.values()) == 0
    # The time index (the default) is not in the cell's config, so cells made before the
    # state index existed keep their ids; the state index is a cell of its own.
    assert "index" not in inf.variant.config
    by_state = {**data, "methods": [{"name": "goal", "overrides": {"index": "state"}}]}
    (state,) = plan(from_dict(by_state)).infers
    assert state.variant.config["index"] == "state" and state.id != inf.id
    assert state.variant.label == "index=state"  # its rows apart from the time index's
    by_time = {**data, "methods": [{"name": "goal", "overrides": {"index": "time"}}]}
    assert plan(from_dict(by_time)).infers[0].id == inf.id  # named or not, one cell
    data["adapt"] = [{"budget": 2, "methods": ["goal"]}]
    with pytest.raises(ConfigError, match="'goal' is not an FB method with one task vector"):
        plan(from_dict(data))


def test_presets_computed_on_the_cpu_walker_keep_it_under_the_names_they_ran_with() -> None:
    """Walker's default changed after the presets ran: each keeps the `cpu` walker (its
    cells and experts' labels unchanged), and only `paper` takes the new default."""
    from rbfm.experiments.plan import plan

    new = read_meta(resolve("walker"))["sha256"]
    old = read_meta(resolve(CPU_WALKER))["sha256"]
    for name in ("shift-paper-fbil-walker", "shift-fbil-walker", "external-walker", "paper"):
        cells = plan(PRESETS[name]).demos
        walker = [c for c in cells if c.model.domain == "walker"]
        models = {c.model.sha256 for c in walker if c.model.dataset == "rnd"}
        experts = {c.expert.sha256 for c in walker if c.expert.name != "mpc"}
        assert models == ({new} if name == "paper" else {old}), name
        assert new not in experts or name == "paper", name
    # An expert named for walker's default keeps its name in the results' rows.
    names = {c.expert.name for c in plan(PRESETS["shift-paper-fbil-walker"]).demos}
    assert names == {"noisy:walker"}
    assert {c.expert.sha256 for c in plan(PRESETS["shift-paper-fbil-walker"]).demos} == {old}


def test_a_negative_worker_count_is_refused_before_the_run_folder_and_lock_exist(
    checkpoint: str, tmp_path: Path
) -> None:
    from rbfm.reporting.experiment import run_and_report

    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"experiment\.workers: -1 is out of range"):
        list(run_and_report(from_dict(smoke_dict(checkpoint)), out, workers=-1))
    assert not out.exists()


def test_command_line_overrides_take_the_specs_first_seeds_and_skip_stepless_methods() -> None:
    spec = dataclasses.replace(PRESETS["external-cheetah"], seeds=(3, 7, 9))
    assert with_overrides(spec, seeds=2).seeds == (3, 7)
    with pytest.raises(ConfigError, match=r"--seeds: 4 is out of range \(valid: 1 to 3, the"):
        with_overrides(spec, seeds=4)
    stepped = {m.name: m.overrides.get("steps") for m in with_overrides(spec, steps=5).methods}
    assert stepped["fbil"] == 5 and stepped["er"] is None and stepped["goal"] is None
    plan(with_overrides(spec, steps=5))  # er's config has no steps: no refusal


def test_spec_entries_that_would_do_nothing_or_name_a_path_are_refused(checkpoint: str) -> None:
    data = smoke_dict(checkpoint)
    data["models"][0]["dataset"] = "../x"
    with pytest.raises(ConfigError, match=r"models\[0\]\.dataset: '\.\./x' must be letters"):
        plan(from_dict(data))
    data = smoke_dict(checkpoint, adapt=[{"budget": 4, "states": 2, "methods": ["er"]}])
    with pytest.raises(ConfigError, match=r"adapt\[0\]\.methods: 'er' is not among the spec's"):
        plan(from_dict(data))


def test_spec_settings_nothing_would_read_are_refused(checkpoint: str) -> None:
    data = smoke_dict(checkpoint)
    data["models"][0]["families"] = ["none"]  # levels 2 as given by the smoke spec
    with pytest.raises(ConfigError, match=r"models\[0\]\.levels: nominal dynamics only"):
        plan(from_dict(data))
    with pytest.raises(ConfigError, match=r"planner_episodes, planner_levels: no expert source"):
        plan(from_dict(smoke_dict(checkpoint, planner_episodes=7)))
