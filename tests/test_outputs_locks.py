"""Output paths checked before any compute; one run at a time in a run directory."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rbfm.cli import main
from rbfm.errors import InUseError
from rbfm.experiments import LocalExecutor, load_spec, run_experiment
from rbfm.fb import fb_config
from rbfm.fb.checkpoint import save_checkpoint
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.locks import LOCK_NAME

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
