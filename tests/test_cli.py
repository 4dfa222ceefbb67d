"""The command line: help, listings, summaries and clean errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rbfm.cli import main


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in ("collect", "info", "envs"):
        assert command in out


def test_experiment_help_names_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    # The help is written out (importing the presets would slow every command's start).
    from rbfm.experiments.spec import PRESETS

    with pytest.raises(SystemExit):
        main(["experiment", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    listed = out.split("Presets: ")[1].split(" (see")[0].split(", ")
    assert listed == list(PRESETS)


def test_envs_lists_tasks_and_perturbations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "walk_backward" in out and "range_of_motion" in out and "0.058" in out


def test_collect_prints_a_summary_with_every_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "collect",
        "--domain",
        "walker",
        "--agent",
        "random",
        "--transitions",
        "1000",
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "episodes    1 (1,000 steps)" in out and "transitions 999" in out
    for task in ("stand", "walk", "run", "flip"):
        assert f"  {task} " in out
    assert main(["info", str(tmp_path)]) == 0


def test_info_gives_each_task_its_best_episode_and_returns_by_tenth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rbfm.data import load_dataset, relabel_all

    collect = ["collect", "--domain", "cheetah", "--agent", "random", "--quiet"]
    assert main([*collect, "--transitions", "2000", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    ds = load_dataset(tmp_path)
    for task, r in relabel_all(ds, "cheetah").items():
        ret = ds.episode_returns(r)  # two episodes: two "tenths", one episode each
        row = next(line.split() for line in lines if line.startswith(f"  {task} "))
        expected = [ret.mean(), ret.max(), *ret]
        assert [float(x) for x in row[2:]] == pytest.approx(expected, abs=0.51)


def test_packed_episodes_relabel_as_the_originals_after_unpacking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rbfm.data import load_dataset, relabel_all

    collect = ["collect", "--domain", "cheetah", "--agent", "random", "--quiet"]
    assert main([*collect, "--transitions", "3000", "--out", str(tmp_path / "src")]) == 0
    packed = tmp_path / "p.xz"
    assert main(["pack", str(tmp_path / "src"), "--every", "2", "--out", str(packed)]) == 0
    assert "packed 2 cheetah random episodes (2,000 steps)" in capsys.readouterr().out
    assert main(["unpack", str(packed), "--out", str(tmp_path / "dst")]) == 0
    assert main(["unpack", str(packed), "--out", str(tmp_path / "dst")]) == 2
    assert "already holds episodes" in capsys.readouterr().err
    src, dst = load_dataset(tmp_path / "src"), load_dataset(tmp_path / "dst")
    assert dst.files == [src.files[0], src.files[2]]
    want = {t: src.episode_returns(r)[[0, 2]] for t, r in relabel_all(src, "cheetah").items()}
    for task, r in relabel_all(dst, "cheetah").items():
        assert dst.episode_returns(r) == pytest.approx(want[task], abs=1e-9)


def test_errors_exit_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_pretrain_set_rejects_unknown_fields_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    for item, message in [
        ("z_dims=3", "unknown FB config field 'z_dims'"),
        (
            "target_pessimism=1.5",
            "target_pessimism: 1.5 is out of range (valid: a number in [0, 1])",
        ),
        ("batch_size", "--set: expected KEY=VALUE, got 'batch_size'"),
    ]:
        args = ["pretrain", "--dataset", str(tmp_path), "--out", str(out), "--set", item]
        assert main(args) == 2
        assert message in capsys.readouterr().err
    assert not out.exists()


def test_zero_shot_runs_a_shipped_model_by_domain_name_without_its_data(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["zero-shot", "--checkpoint", "cheetah", "--task", "walk", "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "task vectors stored with the checkpoint" in out
    assert out.strip().splitlines()[-1].startswith("walk")


def test_rollout_commands_run_on_one_thread_unless_omp_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    outer = torch.get_num_threads()
    request.addfinalizer(lambda: torch.set_num_threads(outer))
    missing = ["infer", "--demos", str(tmp_path / "none.npz"), "--method", "fbil"]
    missing += ["--out", str(tmp_path / "z.json")]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    assert main(missing) == 2 and torch.get_num_threads() == 2  # the user's choice stands
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert main(missing) == 2 and torch.get_num_threads() == 1


def test_bare_rbfm_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(c in out for c in ("quickstart", "pretrain", "infer", "evaluate", "experiment"))


def test_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demos", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 200)" in out and "(default: 0)" in out and "cuda if available" in out


def test_first_hour_mistakes_are_clean_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a new user typed in the first hour, each refused with a message that says
    what would work, before any work starts."""
    from rbfm.fb.checkpoint import read_meta
    from rbfm.policy_files import save_z

    demos = ["demos", "--checkpoint", "cheetah", "--task", "run", "--out", str(tmp_path / "d")]
    assert main([*demos, "--episodes", "0"]) == 2
    assert "--episodes: 0 is out of range (valid: >= 1)" in capsys.readouterr().err
    assert main(["zero-shot", "--checkpoint", "cheeta"]) == 2
    err = capsys.readouterr().err  # every shipped model, named as --checkpoint takes it
    assert "shipped model: cheetah, cheetah:cpu, cheetah:rnd-nominal-paper, " in err
    assert "quadruped, quadruped:rnd-rand, " in err and "walker:rnd-v5)" in err
    assert all(f"walker:{label}" in err for label in ("rnd-rand", "rnd-rand-ctx", "aps"))
    meta = read_meta("walker")
    z = save_z(
        tmp_path / "jump.json",
        torch.ones(int(meta["config"]["z_dim"])),  # on the sqrt(d) sphere
        {"method": "fbil", "domain": "walker", "task": "flip"},
    )
    assert main(["evaluate", "--checkpoint", "walker", "--z", str(z), "--task", "walk"]) == 2
    assert "inferred for the task 'flip', not --task 'walk'" in capsys.readouterr().err
    assert not list(tmp_path.glob("d*"))


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """`rbfm ... | head -1`: no BrokenPipeError traceback when the reader stops."""
    proc = subprocess.run(
        f"{sys.executable} -m rbfm.cli experiment paper --episodes 20 --dry-run | head -c 1",
        shell=True,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout == "e" and "Traceback" not in proc.stderr


def test_replay_packing_round_trips_through_worker_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    collect = ["collect", "--domain", "cheetah", "--agent", "random", "--quiet"]
    assert main([*collect, "--transitions", "5000", "--out", str(tmp_path / "src")]) == 0
    packed = tmp_path / "deep" / "r.xz"  # its folder is made
    assert main(["pack", str(tmp_path / "src"), "--replay", "--out", str(packed)]) == 0
    assert "packed 5 cheetah random episodes (5,000 steps)" in capsys.readouterr().out
    # one worker: chunks of 2, 2 and 1 episodes, results in order
    assert main(["unpack", str(packed), "--out", str(tmp_path / "dst"), "--workers", "1"]) == 0
    assert "regenerated from their actions: 5 of 5 bitwise as packed" in capsys.readouterr().out
    src = sorted((tmp_path / "src" / "cheetah" / "random" / "buffer").glob("*.npz"))
    dst = tmp_path / "dst" / "cheetah" / "random" / "buffer"
    assert [(dst / f.name).read_bytes() == f.read_bytes() for f in src] == [True] * 5


def test_the_command_line_is_thin_and_declares_each_option_once() -> None:
    """Every option of every command comes from the one table (rbfm.cli.options.OPTIONS);
    the package stays small enough to read."""
    import argparse

    from rbfm import cli
    from rbfm.cli.options import OPTIONS

    files = sorted(Path(cli.__file__).parent.glob("*.py"))
    sizes = [len(p.read_text().splitlines()) for p in files]
    # Checks an option's value needs are declared with it (`Use.check`), and what a
    # command does past its options is the Python API's (`call`).
    assert sum(sizes) <= 710 and max(sizes) <= 400
    assert sum(p.read_text().count(".add_argument(") for p in files) == 3  # the generic ones
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            option = action.dest
            assert option in OPTIONS, f"{name}: {option} is not in the table"
            assert action.help, f"{name} --{option} has no help"


def test_adapt_writes_the_chosen_z_and_says_how_it_chose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ["--checkpoint", "cheetah:rnd-v1"]
    demos, z = str(tmp_path / "demos.npz"), str(tmp_path / "z.json")
    assert main(["demos", *model, "--task", "run", "--episodes", "1", "--out", demos]) == 0
    infer = ["infer", *model, "--demos", demos, "--method", "fbil", "--steps", "5"]
    assert main([*infer, "--num-demos", "1", "--out", z]) == 0
    adapt = ["adapt", *model, "--demos", demos, "--z", z, "--num-demos", "1"]
    adapt += ["--perturbation", "joint_friction", "--level", "15", "--episodes", "2"]
    out = str(tmp_path / "adapted.json")
    assert main([*adapt, "--criterion", "implied", "--search", "cone", "--out", out]) == 0
    said = capsys.readouterr().out.strip().splitlines()[-1]
    assert said.startswith(f"implied-k2: z written to {out}") and "implied reward" in said
    assert " kept" in said  # which z it returns, and why
    record = json.loads(Path(out).read_text())
    assert record["method"] == "fbil+implied-k2"
    assert record["adaptation"]["criterion"] == "implied"
    assert len(record["adaptation"]["implied"]) == 2
    assert record["adaptation"]["keep"] == "clear" and len(record["adaptation"]["kept"]) == 2
    # Without --checkpoint, the model the task vector's file records: the same z.
    bare, again = [adapt[0], *adapt[3:]], str(tmp_path / "again.json")
    assert main([*bare, "--criterion", "implied", "--search", "cone", "--out", again]) == 0
    assert json.loads(Path(again).read_text())["z"] == record["z"]
    # The model and task are read from the files when not given.
    assert main(["evaluate", "--z", z, out, "--episodes", "1"]) == 0
    assert "cheetah/run, nominal: mean return" in capsys.readouterr().out
    assert main([*adapt, "--episodes", "0", "--out", str(tmp_path / "none.json")]) == 2
    assert "--episodes: 0 is out of range (valid: >= 1)" in capsys.readouterr().err
    assert not (tmp_path / "none.json").exists()


def test_infer_refuses_a_settings_or_preset_the_method_ignores_before_loading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    from rbfm.data.demos import Demos, save_demos

    rng = np.random.default_rng(0)
    obs = [rng.standard_normal((51, 17)) for _ in range(2)]
    acts = [np.clip(rng.standard_normal((50, 6)), -1, 1) for _ in range(2)]
    demos = save_demos(tmp_path / "d.npz", Demos.from_arrays("cheetah", "run", obs, acts))
    out = tmp_path / "z.json"
    # A checkpoint that is not there: the refusal comes before any model loads.
    base = ["infer", "--checkpoint", str(tmp_path / "none"), "--demos", str(demos)]
    base += ["--num-demos", "2", "--out", str(out)]
    for extra, message in [
        (["--method", "er", "--settings", "paper"], "--settings 'paper' does nothing for er "
         "(er's --settings: default; 'paper' is for fbil, rbfm-light, rbfm-heavy)"),
        (["--method", "fm", "--settings", "paper"], "--settings 'paper' does nothing for fm"),
        (["--method", "er", "--preset", "cpu"], "--preset 'cpu' does nothing for er (er takes "
         "no --preset; 'cpu' is for drbc, bedroil)"),
        (["--method", "goal", "--preset", "paper"], "--preset 'paper' does nothing for goal"),
        (["--method", "fbil", "--preset", "cpu"], "--preset 'cpu' does nothing for fbil"),
        (["--method", "drbc", "--settings", "default"], "--settings 'default' does nothing "
         "for drbc (drbc takes no --settings;"),
    ]:  # fmt: skip
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz"]
