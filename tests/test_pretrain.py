"""Pretraining runs: exact resume, logs, best/latest checkpoints."""

from __future__ import annotations

import csv
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
from safetensors.torch import load_file

from rbfm.errors import ConfigError
from rbfm.exploration import CollectConfig, collect
from rbfm.training.pretrain import PretrainConfig, pretrain


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data")
    collect(CollectConfig("cheetah", "random", 3000, str(out), seed=1), progress=False)
    return out


def _cfg(
    dataset: Path, out: Path, steps: int, overrides: tuple[tuple[str, float | bool], ...] = ()
) -> PretrainConfig:
    return PretrainConfig(
        dataset=str(dataset),
        out=str(out),
        preset="tiny",
        steps=steps,
        checkpoint_every=20,
        eval_every=40,
        log_every=10,
        overrides=overrides,
    )


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "latest.safetensors"))


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0, msg=k)


def test_run_writes_logs_and_checkpoints(dataset: Path, tmp_path: Path) -> None:
    run = pretrain(_cfg(dataset, tmp_path / "run", 80), progress=False)
    for name in ("run.json", "resume.pt", "latest.json", "best.json", "best.safetensors"):
        assert (run / name).exists(), name
    task_z = json.loads((run / "best.json").read_text())["task_z"]
    assert sorted(task_z) == ["run", "run_backward", "walk", "walk_backward"]
    assert all(abs(np.linalg.norm(z) - 8**0.5) < 1e-4 for z in task_z.values())
    evals = list(_csv(run / "eval.csv"))
    assert [int(r["step"]) for r in evals] == [40, 80]
    assert set(evals[0]) == {"step", "iqm", "walk", "run", "walk_backward", "run_backward"}
    # latest (step 80, just evaluated) carries that evaluation's IQM and z, as best does.
    latest = json.loads((run / "latest.json").read_text())
    assert latest["step"] == 80 and latest["iqm"] == float(evals[-1]["iqm"])
    assert sorted(latest["task_z"]) == sorted(task_z)
    if json.loads((run / "best.json").read_text())["step"] == 80:
        assert latest["task_z"] == task_z
    trains = list(_csv(run / "train.csv"))
    assert [int(r["step"]) for r in trains] == list(range(10, 81, 10))
    assert float(trains[-1]["updates_per_s"]) > 0
    assert list((run / "tb").glob("events.out.tfevents.*"))
    # The run's time travels with its checkpoints: updates only, and all of it.
    assert 0 < latest["train_seconds"] <= latest["wall_seconds"]


def test_resume_equals_uninterrupted(dataset: Path, tmp_path: Path) -> None:
    whole = pretrain(_cfg(dataset, tmp_path / "whole", 100), progress=False)
    pretrain(_cfg(dataset, tmp_path / "parts", 50), progress=False)  # stops between checkpoints
    half = json.loads((tmp_path / "parts" / "latest.json").read_text())
    parts = pretrain(_cfg(dataset, tmp_path / "parts", 100), progress=False)
    _assert_same_weights(whole, parts)
    # The resumed run's time adds to the first part's, as the weights continue it.
    done = json.loads((parts / "latest.json").read_text())
    assert done["train_seconds"] > half["train_seconds"]
    assert (
        done["wall_seconds"]
        > half["wall_seconds"] + (done["train_seconds"] - half["train_seconds"]) * 0.99
    )
    # A run also evaluates at its last step, so the 50-step run left its row.
    steps = [r["step"] for r in _csv(parts / "eval.csv")]
    assert steps == ["40", "50", "80", "100"]
    # Cut back, a finished run would say "finished" at its 100 updates: refused.
    with pytest.raises(ConfigError, match=r"has trained 100 updates, more than 60 \(valid: 100"):
        pretrain(_cfg(dataset, tmp_path / "parts", 60), progress=False)


# The second case also carries the learning-rate schedule and the averaged weights
# (which latest.safetensors then holds) through the kill.
@pytest.mark.parametrize("overrides", [(), (("lr_end", 0.1), ("average_tau", 0.05))])
def test_killed_run_resumes_to_the_same_weights(
    dataset: Path, tmp_path: Path, overrides: tuple[tuple[str, float], ...]
) -> None:
    whole = pretrain(_cfg(dataset, tmp_path / "whole", 120, overrides), progress=False)
    run = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "rbfm.cli",
        "pretrain",
        "--dataset",
        str(dataset),
        "--preset",
        "tiny",
        "--steps",
        "120",
        "--checkpoint-every",
        "20",
        "--eval-every",
        "40",
        "--log-every",
        "10",
        "--out",
        str(run),
        "--quiet",
        *(arg for k, v in overrides for arg in ("--set", f"{k}={v}")),
    ]
    # Same intra-op thread count as this process (conftest): float sums depend on it.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (run / "resume.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the run finished before it could be interrupted"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    resumed = pretrain(_cfg(dataset, run, 120, overrides), progress=False)
    _assert_same_weights(whole, resumed)
    steps = [int(r["step"]) for r in _csv(resumed / "train.csv")]
    assert steps == list(range(10, 121, 10))  # no duplicated rows after the resume


def test_rerun_with_other_settings_is_refused(dataset: Path, tmp_path: Path) -> None:
    pretrain(_cfg(dataset, tmp_path, 20), progress=False)
    other = PretrainConfig(dataset=str(dataset), out=str(tmp_path), preset="tiny", seed=3)
    with pytest.raises(ConfigError, match="seed"):
        pretrain(other, progress=False)
    # A decaying learning rate ties the run to its length; a constant one does not.
    decaying = (("lr_end", 0.5),)
    pretrain(_cfg(dataset, tmp_path / "decay", 20, decaying), progress=False)
    with pytest.raises(ConfigError, match="config"):
        pretrain(_cfg(dataset, tmp_path / "decay", 40, decaying), progress=False)


def test_runs_from_before_a_config_field_existed_still_resume(
    dataset: Path, tmp_path: Path
) -> None:
    run = pretrain(_cfg(dataset, tmp_path, 20), progress=False)
    ident = json.loads((run / "run.json").read_text())
    for field in ("lr_end", "average_tau"):  # added after runs were made
        del ident["config"][field]
    (run / "run.json").write_text(json.dumps(ident))
    pretrain(_cfg(dataset, tmp_path, 40), progress=False)
    assert [r["step"] for r in _csv(run / "eval.csv")] == ["20", "40"]


def test_plot_of_a_run(dataset: Path, tmp_path: Path) -> None:
    from rbfm.reporting.plots import plot_pretraining

    run = pretrain(_cfg(dataset, tmp_path / "run", 40), progress=False)
    png = plot_pretraining(run, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    from PIL import Image

    assert "best IQM" in Image.open(png).info["Title"]
    titled = plot_pretraining(run, tmp_path / "titled.png", "walker, 300k updates")
    assert Image.open(titled).info["Title"] == "walker, 300k updates"


def test_cli_pipeline_from_pretraining_to_a_sweep(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rbfm.cli import main
    from rbfm.methods import FB_METHODS

    run = pretrain(_cfg(dataset, tmp_path / "run", 40), progress=False)
    table = tmp_path / "zero_shot.csv"
    args = ["zero-shot", "--checkpoint", str(run), "--episodes", "2", "--random", "--task", "run"]
    assert main([*args, "--task", "walk", "--out", str(table)]) == 0
    printed = capsys.readouterr().out.splitlines()
    with open(table, newline="") as f:
        row, _ = list(csv.DictReader(f))
    # Pretraining's selection metric over the 4 episodes, with its bootstrap interval.
    score, low, high = (float(x) for x in re.findall(r"-?\d+\.\d", printed[-2])[:3])
    assert printed[-2].startswith("IQM over the 4 episodes") and low <= score <= high
    mean, half, r_mean, r_half = (
        float(row[k]) for k in ("mean", "ci95", "random_mean", "random_ci95")
    )
    line = next(x for x in printed if x.startswith("run "))
    assert f"{mean:.1f} +- {half:.1f}" in line and f"{r_mean:.1f} +- {r_half:.1f}" in line
    verdict = mean - half > r_mean + r_half
    assert row["above_random"] == str(verdict) and line.split()[-1] == ("yes" if verdict else "no")
    assert main([*args[:4], "0"]) == 2  # --episodes 0: refused before any rollout
    assert "--episodes: 0 is out of range" in capsys.readouterr().err
    demos = tmp_path / "demos.npz"
    assert (
        main(
            [
                "demos",
                "--checkpoint",
                str(run),
                "--task",
                "walk",
                "--episodes",
                "4",
                "--out",
                str(demos),
            ]
        )
        == 0
    )
    # The best checkpoint stores each task's z: demonstrations use it, no dataset needed.
    from rbfm.fb.checkpoint import read_meta
    from rbfm.inference import load_demos

    assert load_demos(demos).meta["z_source"] == "checkpoint"
    assert "task_z" in read_meta(run / "best")
    zs = []
    for method in ("fbil", "rbfm-light", "rbfm-heavy", "drbc", "bedroil"):
        # A baseline takes no FB model: the same demos and seed, and a policy stem.
        model = ["--checkpoint", str(run)] if method in FB_METHODS else []
        out = tmp_path / (f"{method}.json" if model else method)
        infer = ["infer", *model, "--demos", str(demos), "--method", method, "--steps", "20"]
        assert main([*infer, "--num-demos", "2", "--out", str(out)]) == 0
        zs.append(str(out.with_suffix(".json")))
    table = tmp_path / "sweep.csv"
    evaluate = ["evaluate", "--checkpoint", str(run), "--task", "walk"]
    evaluate += ["--perturbation", "actuator_strength"]
    # The rows come in the paper's order whatever the files' order.
    sweep = [*evaluate, "--z", *reversed(zs), "--levels", "0", "30", "--episodes", "2"]
    assert main([*sweep, "--out", str(table)]) == 0
    png = tmp_path / "sweep.png"
    assert main(["plot", str(table), str(table), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Another suffix gets .png appended: PNG bytes are never written under `.jpg`.
    assert main(["plot", str(table), "--out", str(tmp_path / "sweep.jpg")]) == 0
    assert (tmp_path / "sweep.jpg.png").is_file() and not (tmp_path / "sweep.jpg").exists()
    rows = _csv(table)
    assert [(r["method"], r["level"]) for r in rows] == [
        (m, lvl)
        for lvl in ("0.0", "30.0")
        for m in ("fbil", "rbfm-light", "rbfm-heavy", "drbc", "bedroil")
    ]
    assert main([*evaluate, "--z", zs[0], "--levels", "31"]) == 2
    assert (
        "level 31.0 is outside the range of cheetah/actuator_strength [0, 30]"
        in capsys.readouterr().err
    )


def test_quickstart_pipeline_on_a_tiny_model(
    dataset: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    import rbfm.quickstart
    from rbfm.quickstart import QuickstartConfig, quickstart, reading

    # The quickstart works on one torch thread and gives the caller's count back.
    threads: list[int] = []
    real_sweep = rbfm.quickstart.sweep

    def counting_sweep(*args: Any, **kwargs: Any) -> Any:
        threads.append(torch.get_num_threads())
        return real_sweep(*args, **kwargs)

    monkeypatch.setattr(rbfm.quickstart, "sweep", counting_sweep)
    run = pretrain(_cfg(dataset, tmp_path / "run", 40), progress=False)
    cfg = QuickstartConfig(
        out=str(tmp_path / "qs"),
        checkpoint=str(run),
        demos=4,
        seeds=3,
        inference_steps=10,
        episodes=2,
    )
    outer = torch.get_num_threads()
    request.addfinalizer(lambda: torch.set_num_threads(outer))
    torch.set_num_threads(2)
    drawn: list[int] = []
    real_infer = rbfm.inference.infer

    def recording_infer(model: Any, demos: Any, *args: Any, **kwargs: Any) -> Any:
        drawn.append(round(float(demos.returns.sum()), 6))
        return real_infer(model, demos, *args, **kwargs)

    monkeypatch.setattr(rbfm.inference, "infer", recording_infer)
    rows = quickstart(cfg)
    assert threads == [1] and torch.get_num_threads() == 2
    # Each seed imitates demonstrations of its own: the CI across seeds is not one draw's.
    assert len(drawn) == 3 * 3 and len(set(drawn[:3])) == 3 and drawn[:3] * 3 == drawn
    assert len(rows) == 3 * 6  # three methods at the family's six levels
    assert {r.seeds for r in rows} == {3}
    for name in ("sweep.csv", "sweep.png", "summary.json"):
        assert (tmp_path / "qs" / name).stat().st_size > 0
    line = reading(rows)
    assert line.startswith("At the largest level (25)") and line.count("\n") == 0
    # Display names, as the plot's legend has them, not method ids.
    assert all(name in line for name in ("FB-IL", "RBFM-Light", "RBFM-Heavy"))
    assert "fbil" not in line and "rbfm-" not in line
    with pytest.raises(ConfigError, match="3 seeds x 2 demonstrations need 6 distinct"):
        QuickstartConfig(demos=5, seeds=3, num_demos=2)
    with pytest.raises(ConfigError, match=r"quickstart.num_demos: 0 is out of range"):
        QuickstartConfig(num_demos=0)


def test_observation_statistics_come_from_the_training_data(dataset: Path, tmp_path: Path) -> None:
    from rbfm.data import load_dataset
    from rbfm.fb.checkpoint import load_checkpoint

    run = pretrain(_cfg(dataset, tmp_path, 20, (("obs_norm", True),)), progress=False)
    model, _ = load_checkpoint(run / "latest", device="cpu")  # compared with CPU tensors
    obs = torch.as_tensor(load_dataset(str(dataset)).transitions().observation)
    for net in (model.actor, model.backward_map, model.forward_map, model.target_forward_map):
        torch.testing.assert_close(net.norm.mean, obs.mean(0))  # type: ignore[arg-type]
        torch.testing.assert_close(net.norm.std, obs.std(0))  # type: ignore[arg-type]


def test_resuming_with_another_compile_choice_warns(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses
    import warnings

    from rbfm import cli

    module = sys.modules[PretrainConfig.__module__]  # `rbfm.training.pretrain` names the function

    cfg = _cfg(dataset, tmp_path, 20)
    pretrain(cfg, progress=False)
    assert torch.load(tmp_path / "resume.pt", weights_only=True)["compile"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pretrain(cfg, progress=False)  # the same choice: silent
    # Finished at 20, so nothing is compiled here: only the recorded choice is compared.
    with pytest.warns(UserWarning, match="without --compile until step 20 and resumes with"):
        pretrain(dataclasses.replace(cfg, compile=True), progress=False)
    # The command line's flag reaches the config.
    seen: list[PretrainConfig] = []
    monkeypatch.setattr(module, "pretrain", lambda c, progress: seen.append(c) or tmp_path)
    args = ["pretrain", "--dataset", str(dataset), "--out", str(tmp_path), "--compile"]
    parsed = cli.build_parser().parse_args(args)
    parsed.func(parsed)
    assert seen[0].compile is True


def test_a_cuda_graph_on_the_cpu_is_refused_before_any_work(dataset: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    cfg = replace(_cfg(dataset, tmp_path / "run", 10), device="cpu", cuda_graph=True)
    with pytest.raises(ConfigError, match=r"cuda_graph needs a CUDA device"):
        pretrain(cfg, progress=False)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"cuda_graph and compile are exclusive"):
        pretrain(replace(cfg, device=None, compile=True), progress=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # A NaN tau trained to NaN weights, saved as the run's best model, with exit 0.
        (["--set", "tau=NaN"], "FB config.tau: nan is out of range"),
        (["--set", "steps=5"], "steps is an option of its own (--steps), not a --set field"),
        (["--eval-every", "0"], "FB config.eval_every: 0 is out of range"),
        (["--steps", "-10"], "FB config.steps: -10 is out of range"),
        (["--log-every", "0"], "pretrain.log_every: 0 is out of range"),
        (["--workers", "-1"], "pretrain.workers: -1 is out of range"),
        (["--transitions", "0"], "pretrain.transitions: 0 is out of range"),
        (["--threads", "0"], "pretrain.threads: 0 is out of range"),
    ],
)
def test_bad_pretraining_options_are_refused_before_the_run_folder_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    from rbfm.cli import main

    out = tmp_path / "run"
    base = ["pretrain", "--dataset", str(tmp_path / "none"), "--out", str(out), "--preset", "tiny"]
    assert main([*base, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_a_cuda_graph_run_trains_resumes_and_extends(dataset: Path, tmp_path: Path) -> None:
    """`--cuda-graph` end to end: evaluations and checkpoints between replays, then the
    finished run extended, its optimizers' state loaded before the graph is captured."""
    from dataclasses import replace

    cfg = replace(_cfg(dataset, tmp_path / "run", 40), cuda_graph=True)
    run = pretrain(cfg, progress=False)
    assert [r["step"] for r in _csv(run / "eval.csv")] == ["40"]
    run = pretrain(replace(cfg, steps=60), progress=False)
    rows = _csv(run / "train.csv")
    assert rows[-1]["step"] == "60" and all(np.isfinite(float(r["fb_diag"])) for r in rows)
    assert torch.load(run / "resume.pt", weights_only=True)["cuda_graph"] is True


def test_more_transitions_than_the_dataset_holds_are_refused(dataset: Path, tmp_path: Path) -> None:
    """A subsample of the data: asking for more was trained on all of it, said nowhere."""
    from dataclasses import replace

    from rbfm.data import load_dataset

    n = len(load_dataset(str(dataset)))
    cfg = replace(_cfg(dataset, tmp_path / "run", 5), transitions=n + 1)
    with pytest.raises(
        ConfigError, match=rf"transitions: {n + 1} is out of range \(valid: 1 to {n},"
    ):
        pretrain(cfg, progress=False)
    assert not (tmp_path / "run").exists()
