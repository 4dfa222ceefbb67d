"""Output paths checked before any compute; one run at a time in a run directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rbfm.cli import main
from rbfm.data.demos import Demos, save_demos
from rbfm.envs import TASKS
from rbfm.errors import ConfigError, InUseError
from rbfm.experiments import LocalExecutor, load_spec, run_experiment
from rbfm.fb import fb_config
from rbfm.fb.checkpoint import load_checkpoint, read_meta, save_checkpoint
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.locks import LOCK_NAME, hold
from rbfm.policy_files import load_any

UNWRITABLE = "/proc/rbfm-test"  # /proc takes no new files, even from root


def _never(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("compute started before the output path was checked")


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_infer_and_demos_refuse_an_unwritable_out_before_compute(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import rbfm.inference
    import rbfm.inference.expert_demos
    import rbfm.policy_files

    monkeypatch.setattr(rbfm.inference, "load_demos", _never)
    monkeypatch.setattr(rbfm.policy_files, "imitate_to_file", _never)
    monkeypatch.setattr(rbfm.inference.expert_demos, "expert_demos", _never)
    infer = ["infer", "--demos", str(tmp_path / "d.npz"), "--method", "fbil"]
    err = _refused([*infer, "--out", "/proc/z.json"], capsys)
    assert err.startswith("rbfm infer: error: --out: cannot write into /proc")
    demos = ["demos", "--checkpoint", "cheetah", "--task", "run", "--out", "/proc/d.npz"]
    assert "--out: cannot write into /proc" in _refused(demos, capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["collect", "--domain", "cheetah", "--agent", "rnd", "--transitions", "1000"],
        ["pretrain", "--dataset", "nowhere"],
        ["pack", "nowhere"],
        ["unpack", "nowhere.xz"],
        ["export", "--checkpoint", "nowhere"],
        ["plot", "nowhere"],
        ["quickstart"],
        ["experiment", "paper"],
        ["zero-shot", "--checkpoint", "nowhere"],
        ["adapt", "--demos", "nowhere.npz", "--z", "nowhere.json"],
        ["evaluate", "--z", "nowhere.json"],
        ["render", "--checkpoint", "nowhere", "--task", "run"],
    ],
    ids=lambda argv: argv[0],
)
def test_every_out_is_checked_first(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Each command's other inputs are missing: only an output check made first refuses
    with the output's message."""
    assert "--out: cannot write into /proc" in _refused([*argv, "--out", UNWRITABLE], capsys)


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A spec of a few cells on a tiny cheetah model: one task, level, method and seed."""
    torch.manual_seed(0)
    model = FBModel(17, 6, fb_config("tiny")).eval()
    task_z = {"walk": project(torch.randn(model.cfg.z_dim), model.radius).tolist()}
    folder = tmp_path_factory.mktemp("spec")
    stem = folder / "tiny"
    save_checkpoint(stem, model, {"domain": "cheetah", "task_z": task_z})
    path = folder / "lock.toml"
    path.write_text(
        'name = "lock"\nseeds = [0]\ndemos = 2\nnum_demos = 1\nepisodes = 1\n'
        "certificate_steps = 0\n[[models]]\n"
        f'domain = "cheetah"\ncheckpoint = "{stem}"\ntasks = ["walk"]\n'
        'families = ["joint_friction"]\nlevels = 1\n'
        '[[methods]]\nname = "fbil"\noverrides = { steps = 5 }\n'
    )
    return path


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file of a run directory but its lock: modification time and content."""
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def test_a_second_run_into_a_held_directory_is_refused_until_its_holder_dies(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    spec = load_spec(str(spec_file))
    first = run_experiment(spec, out, LocalExecutor(0), progress=False)
    assert sum(first.computed.values()) > 0
    before = _files(out)

    script = (
        "import sys, time\nfrom rbfm.locks import hold\nwith hold(sys.argv[1]):\n"
        "    print('held', flush=True)\n    time.sleep(300)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(InUseError, match=rf"another run .* \(process {holder.pid}\)"):
            run_experiment(spec, out, LocalExecutor(0), progress=False)
        argv = ["experiment", str(spec_file), "--out", str(out), "--workers", "0", "--quiet"]
        assert f"(process {holder.pid})" in _refused(argv, capsys)
        assert _files(out) == before  # the refused runs wrote nothing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()

    # The dead holder's lock file stays, naming it; the OS released its lock.
    assert (out / LOCK_NAME).read_text().strip() == str(holder.pid)
    assert main(argv) == 0  # the command line holds the folder around the runner's hold
    again = run_experiment(spec, out, LocalExecutor(0), progress=False)
    assert sum(again.computed.values()) == 0 and again.skipped == first.skipped + sum(
        first.computed.values()
    )
    assert (out / "results.csv").read_bytes() == before["results.csv"][1]


@pytest.fixture(scope="module")
def model_and_demos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny cheetah model storing every task's z (what `export` copies), and demos."""
    torch.manual_seed(0)
    model = FBModel(17, 6, fb_config("tiny")).eval()
    radius = model.radius
    task_z = {t: project(torch.randn(model.cfg.z_dim), radius).tolist() for t in TASKS["cheetah"]}
    folder = tmp_path_factory.mktemp("dots")
    save_checkpoint(folder / "model", model, {"domain": "cheetah", "task_z": task_z})
    rng = np.random.default_rng(0)
    obs = [rng.standard_normal((21, 17)) for _ in range(4)]
    acts = [rng.uniform(-1, 1, (20, 6)) for _ in range(4)]
    save_demos(folder / "demos.npz", Demos.from_arrays("cheetah", "run", obs, acts))
    return folder / "model", folder / "demos.npz"


@pytest.mark.parametrize(
    ("argv", "given", "written"),
    [
        (["infer", "--method", "goal"], "goals.v1.json", "goals.v1"),
        (["infer", "--method", "goal"], "goals.v1", "goals.v1"),
        (["infer", "--method", "drbc", "--steps", "2"], "policy.v2.json", "policy.v2"),
        (["infer", "--method", "drbc", "--steps", "2"], "policy.v2", "policy.v2"),
        (["export"], "name.v2", "name.v2"),
        (["export"], "name.v2.json", "name.v2"),
    ],
)
def test_an_output_name_with_dots_is_written_as_given_and_printed_as_written(
    model_and_demos: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    given: str,
    written: str,
) -> None:
    """The pair `.json`/`.safetensors` is appended to the name given, never put in place
    of its last dotted part: an existing file of that shorter name is left as it was."""
    model, demos = model_and_demos
    shorter = given.partition(".")[0]
    kept = {tmp_path / f"{shorter}{s}": f"{s} of another run" for s in (".json", ".safetensors")}
    for path, text in kept.items():
        path.write_text(text)
    inputs = ["--checkpoint", str(model)] + ([] if argv[0] == "export" else ["--demos", str(demos)])
    assert main([*argv, *inputs, "--out", str(tmp_path / given)]) == 0
    printed = capsys.readouterr().out
    assert all(path.read_text() == text for path, text in kept.items())
    pair = [tmp_path / f"{written}{s}" for s in (".json", ".safetensors")]
    assert all(p.is_file() for p in pair)
    assert str(pair[0]) in printed or f"{tmp_path / written}.safetensors/.json" in printed
    assert not any(str(path) in printed for path in kept)
    if argv[0] == "export":
        assert read_meta(pair[0])["task_z"].keys() == set(TASKS["cheetah"])
        load_checkpoint(tmp_path / written)
    else:
        load_any(pair[0])


def test_a_symlinked_run_lock_never_truncates_its_target(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("kept\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(target)
    with (
        pytest.raises(ConfigError, match=rf"{out / LOCK_NAME}: a symbolic link; remove it"),
        hold(out),
    ):
        pass
    argv = ["experiment", str(spec_file), "--out", str(out), "--workers", "0", "--quiet"]
    assert "a symbolic link" in _refused(argv, capsys)
    assert target.read_text() == "kept\n"
    # Nor is a dangling link's target made.
    (out / LOCK_NAME).unlink()
    (out / LOCK_NAME).symlink_to(tmp_path / "made")
    with pytest.raises(ConfigError, match="a symbolic link"), hold(out):
        pass
    assert not (tmp_path / "made").exists()


@pytest.mark.parametrize("kind", ["folder", "fifo", "hard link", "unwritable"])
def test_a_run_lock_that_is_no_plain_file_of_its_own_is_refused_in_one_line(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    out, other = tmp_path / "run", tmp_path / "other.txt"
    out.mkdir()
    other.write_text("kept\n")
    lock = out / LOCK_NAME
    if kind == "folder":
        lock.mkdir()
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "hard link":
        os.link(other, lock)
    else:
        out = Path("/proc")  # takes no new files, even from root
        lock = out / LOCK_NAME
    with pytest.raises(ConfigError, match=rf"{lock}: cannot be this run's lock file \("), hold(out):
        pass
    assert other.read_text() == "kept\n"
    if kind != "unwritable":
        argv = ["experiment", str(spec_file), "--out", str(out), "--workers", "0", "--quiet"]
        assert f"{lock}: cannot be this run's lock file" in _refused(argv, capsys)


@pytest.mark.parametrize("folder", ["cells/infer", "cells/eval", "policies", "demos"])
def test_a_cell_folder_that_takes_no_files_is_refused_before_compute(
    spec_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    folder: str,
) -> None:
    import rbfm.experiments.runner

    out = tmp_path / "run"
    (out / folder).parent.mkdir(parents=True)
    (out / folder).symlink_to("/proc")  # a folder that takes no new files, even from root
    monkeypatch.setattr(rbfm.experiments.runner, "_run_stage", _never)
    spec = load_spec(str(spec_file))
    with pytest.raises(ConfigError, match=rf"cannot write into {out / folder} \("):
        run_experiment(spec, out, LocalExecutor(0), progress=False)
    argv = ["experiment", str(spec_file), "--out", str(out), "--workers", "0", "--quiet"]
    assert f"cannot write into {out / folder} (" in _refused(argv, capsys)
