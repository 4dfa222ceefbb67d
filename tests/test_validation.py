"""Inputs that task inference, baseline training and evaluation cannot use are refused
before any compute, by the command line with a message (exit 2, no traceback) and
without writing an output file."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from rbfm.cli import main
from rbfm.errors import ConfigError, DatasetError
from rbfm.fb import fb_config
from rbfm.fb.checkpoint import save_checkpoint
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference import Demos, load_demos, save_demos


def _demos(episodes: int = 3, steps: int = 20) -> Demos:
    rng = np.random.default_rng(0)
    rows = episodes * (steps + 1)
    reward = rng.uniform(0, 1, episodes * steps)
    return Demos(
        "cheetah",
        "run",
        rng.standard_normal((rows, 17)).astype(np.float32),
        rng.uniform(-1, 1, (episodes * steps, 6)).astype(np.float32),
        rng.standard_normal((rows, 18)),
        reward,
        np.full(episodes, steps),
        reward.reshape(episodes, steps).sum(1),
        {},
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("files")
    torch.manual_seed(0)
    model = FBModel(17, 6, fb_config("tiny")).eval()
    save_checkpoint(root / "model", model, {"domain": "cheetah"})
    other = FBModel(17, 6, fb_config("tiny")).eval()  # another model of the same shape
    save_checkpoint(root / "other", other, {"domain": "cheetah"})
    save_demos(root / "demos.npz", _demos(episodes=5))
    z = project(torch.randn(model.cfg.z_dim), model.radius).tolist()
    (root / "z.json").write_text(json.dumps({"z": z, "method": "fbil", "domain": "cheetah"}))
    return {
        "root": root,
        "model": root / "model",
        "other": root / "other",
        "demos": root / "demos.npz",
        "z": root / "z.json",
    }


def _fails(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"action": "nan"}, "action holds NaN or infinite values"),
        ({"observation": "inf"}, "observation holds NaN or infinite values"),
        (
            {"action": "big"},
            "actions must lie in [-1, 1] (the environments' bounds); episode 2 holds 1.5",
        ),
        ({"reward": "short"}, "reward has shape"),
        # Fractional lengths would silently shift every episode's boundary.
        ({"lengths": "float"}, "lengths must be a 1-d array of integers; found float64"),
        ({"physics": "scalar"}, "physics holds one value, not an array"),
        ({"returns": "wrong"}, "episode 1's return is 1e+09, but its rewards sum to"),
    ],
)
def test_bad_demonstration_files(tmp_path: Path, change: dict[str, str], message: str) -> None:
    d = _demos()
    ((key, kind),) = change.items()
    arr = getattr(d, key).copy()
    if kind == "nan":
        arr[3, 0] = np.nan
    elif kind == "inf":
        arr[5, 1] = np.inf
    elif kind == "big":
        arr[45, 2] = 1.5  # step 5 of the third episode
    elif kind == "float":
        arr = arr + 0.5
    elif kind == "scalar":
        arr = np.array(0.0)
    elif kind == "wrong":  # a return the episode's rewards do not add up to
        arr[1] = 1e9
    else:
        arr = arr[:-1]
    path = save_demos(tmp_path / "bad.npz", dataclasses.replace(d, **{key: arr}))
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_demos(path)


def test_infer_refuses_before_writing(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "z.json"
    base = ["infer", "--checkpoint", str(files["model"]), "--demos", str(files["demos"])]
    cases = [
        (["--method", "fbil", "--num-demos", "6"], "cannot draw 6 demonstrations from the 5"),
        (["--method", "rbfm-light", "--eps", "1.5"], "LightConfig.eps: 1.5 is out of range"),
        (["--method", "rbfm-heavy", "--eps", "-0.1"], "HeavyConfig.eps: -0.1 is out of range"),
        (["--method", "fbil", "--steps", "0"], "FBILConfig.steps: 0 is out of range"),
        (["--method", "drbc", "--steps", "0"], "DRBCConfig.steps: 0 is out of range"),
        (["--method", "drbc", "--bf16"], "--bf16: FB methods only, not drbc"),
        (["--method", "bedroil", "--settings", "paper"], "--settings 'paper' does nothing for"),
        (["--method", "bedroil", "--eps", "500"], "BEDROILConfig.eps: 500.0 is out of range"),
        (["--method", "fbil", "--eps", "0.5"], "eps applies to the robust methods only, not fbil"),
    ]
    for extra, message in cases:
        _fails([*base, *extra, "--out", str(out)], message, capsys)
        assert not out.exists() and not list(tmp_path.iterdir())
    _fails([*base, "--method", "fbil", "--out", str(tmp_path / "no" / "z.json")], "--out", capsys)
    other = tmp_path / "elsewhere"
    other.mkdir()
    walker = other / "walker.npz"
    save_demos(walker, dataclasses.replace(_demos(), domain="walker"))
    _fails(
        [
            "infer",
            "--checkpoint",
            str(files["model"]),
            "--demos",
            str(walker),
            "--method",
            "fbil",
            "--out",
            str(out),
        ],
        "observation has shape (63, 17), expected (63, 24) for 3 walker episodes",
        capsys,
    )
    assert not out.exists()


def test_evaluate_refuses_foreign_task_vectors_and_policies(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "table.csv"
    root = files["root"]
    z = json.loads(files["z"].read_text())
    model_sha = json.loads((root / "model.json").read_text())["sha256"]
    (root / "z_other.json").write_text(
        json.dumps({**z, "model_sha256": json.loads((root / "other.json").read_text())["sha256"]})
    )
    (root / "z_short.json").write_text(json.dumps({**z, "z": z["z"][:3]}))
    (root / "z_nan.json").write_text(json.dumps({**z, "z": [float("nan")] * len(z["z"])}))
    (root / "z_walker.json").write_text(json.dumps({**z, "domain": "walker"}))
    (root / "z_same.json").write_text(json.dumps({**z, "model_sha256": model_sha}))
    base = ["evaluate", "--checkpoint", str(files["model"]), "--task", "run", "--out", str(out)]
    cases = [
        ("z_other.json", [], "inferred with another model"),
        ("z_short.json", [], "a 3-dim task vector, but the model's z has"),
        ("z_nan.json", [], "must be a finite 1-d list"),
        ("z_walker.json", [], "a walker task vector, but the model is a cheetah model"),
        ("z_same.json", ["--task", "flip"], "task: unknown cheetah task 'flip'"),
        ("z_same.json", ["--perturbation", "gravity"], "gravity"),
        (
            "z_same.json",
            ["--perturbation", "joint_friction", "--levels", "0", "40"],
            "level 40.0 is outside the range of cheetah/joint_friction [0, 25]",
        ),
        ("z_same.json", ["--episodes", "0"], "--episodes: 0 is out of range"),
    ]
    for name, extra, message in cases:
        _fails([*base, "--z", str(root / name), *extra], message, capsys)
        assert not out.exists()
    # The task and model default to the files' own, where they record one between them.
    (root / "z_walk.json").write_text(json.dumps({**z, "task": "walk"}))
    (root / "z_run.json").write_text(json.dumps({**z, "task": "run"}))
    far = {**z, "task": "run", "model_sha256": model_sha, "checkpoint": "elsewhere/model"}
    (root / "z_far.json").write_text(json.dumps(far))
    (root / "z_two.json").write_text(json.dumps({**far, "model_sha256": "0" * 64}))
    files_only = ["evaluate", "--out", str(out), "--z"]
    for zs, message in (
        (["z_same.json"], "--task is needed: the files do not record their task"),
        (["z_walk.json", "z_run.json"], "--task is needed: the files record run, walk"),
        (["z_run.json"], "--checkpoint is needed: the files do not record their model"),
        (["z_run.json", "z_other.json"], "--checkpoint is needed: the files do not record"),
        (["z_far.json"], "z_far.json records the model elsewhere/model, which cannot be read"),
        (["z_far.json", "z_two.json"], "--checkpoint is needed: the files record 2 models"),
    ):
        _fails([*files_only, *(str(root / n) for n in zs)], message, capsys)
        assert not out.exists()
    from rbfm.baselines import drbc, save_policy

    net = drbc.DeterministicPolicy(24, 6, (8,))
    stem = save_policy(
        tmp_path / "p",
        net,
        {
            "method": "drbc",
            "domain": "cheetah",
            "obs_dim": 24,
            "action_dim": 6,
            "config": {"hidden": [8]},
        },
    )
    _fails(
        ["evaluate", "--z", f"{stem}.json", "--task", "run", "--out", str(out)],
        "a policy for 24/6-dim observations/actions, but cheetah's are 17/6",
        capsys,
    )
    assert not out.exists()


def test_baseline_config_ranges() -> None:
    from rbfm.baselines import baseline_config

    with pytest.raises(ConfigError, match=r"DRBCConfig.lr_decay: 0 is out of range"):
        baseline_config("drbc", "cpu", "cheetah", {"lr_decay": 0})
    with pytest.raises(ConfigError, match=r"BEDROILConfig.hidden: 0 is out of range"):
        baseline_config("bedroil", "cpu", "cheetah", {"hidden": (256, 0)})
    with pytest.raises(ConfigError, match="unknown divergence 'tv2'"):
        baseline_config("bedroil", "cpu", "cheetah", {"divergence": "tv2"})


def test_bad_outputs_and_foreign_inputs_are_refused_before_any_work(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, model = files["root"], str(files["model"])
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "pair.json").mkdir()  # half of the pair `--out pair` names
    z = json.loads(files["z"].read_text())
    (root / "z_long.json").write_text(json.dumps({**z, "z": [2 * x for x in z["z"]]}))
    cases = [
        (["experiment", "smoke", "--out", str(a_file), "--dry-run"], f"--out: {a_file} is a file"),
        (["quickstart", "--out", str(a_file / "q")], f"--out: {a_file} is a file"),
        (
            ["demos", "--checkpoint", model, "--task", "run", "--out", str(a_file / "d.npz")],
            "--out: the folder of",
        ),
        (
            ["demos", "--checkpoint", model, "--task", "run", "--out", str(folder)],
            "is a folder; give a file name",
        ),
        (
            ["evaluate", "--task", "run", "--z", str(files["z"]), "--out", str(folder)],
            "is a folder; give a file name",
        ),
        (
            [
                "infer",
                "--checkpoint",
                model,
                "--demos",
                str(files["demos"]),
                "--method",
                "goal",
                "--out",
                str(tmp_path / "pair"),
            ],
            f"--out: {tmp_path / 'pair.json'} is a folder; give a file name",
        ),
        (
            ["evaluate", "--checkpoint", model, "--z", str(root / "z_long.json"), "--task", "run"],
            "the task vector's norm is",
        ),
    ]
    before = sorted(tmp_path.rglob("*"))
    for args, message in cases:
        _fails(args, message, capsys)
        assert sorted(tmp_path.rglob("*")) == before
    from rbfm.baselines import drbc, save_policy

    net = drbc.DeterministicPolicy(24, 6, (8,))
    meta = {"method": "drbc", "domain": "walker", "obs_dim": 24, "action_dim": 6}
    stem = save_policy(tmp_path / "w", net, {**meta, "config": {"hidden": [8]}})
    _fails(
        ["evaluate", "--checkpoint", model, "--z", f"{stem}.json", "--task", "run"],
        "different domains",
        capsys,
    )


def test_a_family_without_a_level_names_what_would_do() -> None:
    """rbfm.evaluate(im, perturbation="joint_friction") and its kin: the family's unit and
    sweep, or the domain's families, in the one-line error, before any environment."""
    from rbfm.envs import make_env
    from rbfm.evaluation import EnvSpec

    with pytest.raises(ConfigError, match=r"'joint_friction' needs a level \(Nm; its sweep: 0, 5"):
        make_env("cheetah", "run", "joint_friction")
    with pytest.raises(ConfigError, match=r"level 3 needs .* \(walker: gravity, body_mass, joint"):
        EnvSpec("walker", "walk", None, 3.0).checked()


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ('{"domain": ["cheetah"], "task": "run"}', 'meta\'s domain is ["cheetah"]; expected a'),
        ('{"domain": "cheetah", "task": 3}', "meta's task is 3; expected a name"),
        ('{"domain": "cheetah"}', "meta's task is null; expected a name"),
    ],
)
def test_a_demonstrations_file_whose_domain_or_task_is_no_name_is_refused(
    files: dict[str, Path], tmp_path: Path, meta: str, message: str
) -> None:
    with np.load(files["demos"]) as npz:
        arrays = {k: npz[k] for k in npz.files}
    path = tmp_path / "bad.npz"
    np.savez(path, **{**arrays, "meta": np.array(meta)})
    with pytest.raises(DatasetError, match=re.escape(f"{path}: {message}")):
        load_demos(path)


@pytest.mark.parametrize("meta", ['["cheetah", "run"]', '"cheetah"', "42", "null"])
def test_a_demonstrations_file_whose_meta_is_not_a_table_is_refused_by_name(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], meta: str
) -> None:
    with np.load(files["demos"]) as npz:
        arrays = {k: npz[k] for k in npz.files}
    path = tmp_path / "bad.npz"
    np.savez(path, **{**arrays, "meta": np.array(meta)})
    message = f"{path}: meta must be a JSON table (domain, task, ...), found "
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_demos(path)
    out = tmp_path / "z.json"
    base = ["infer", "--checkpoint", str(files["model"]), "--method", "fbil"]
    _fails([*base, "--demos", str(path), "--out", str(out)], message, capsys)
    assert not out.exists()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64])
def test_a_goal_file_in_another_dtype_is_refused_by_name(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: torch.dtype
) -> None:
    import rbfm
    from rbfm.inference.goal import GoalSequences, write_goals

    meta = json.loads((files["root"] / "model.json").read_text())
    d = meta["config"]["z_dim"]
    z = project(torch.randn(5, d), d**0.5)
    goals = GoalSequences([z.to(dtype)], z[:1].to(dtype), 0.0)
    info = {"method": "goal", "domain": "cheetah", "task": "run"}
    model = {"checkpoint": str(files["model"]), "model_sha256": meta["sha256"]}
    path = write_goals(tmp_path / "goals.v1", goals, info | model)
    message = f"{tmp_path / 'goals.v1.safetensors'}: starts is {str(dtype)[6:]}; goal sequences"
    with pytest.raises(ConfigError, match=re.escape(message)):
        rbfm.load_imitation(path)
    out = tmp_path / "table.csv"
    _fails(["evaluate", "--z", str(path), "--episodes", "1", "--out", str(out)], message, capsys)
    assert not out.exists()


def test_states_only_demonstrations_are_refused_by_cloning_methods_on_the_command_line(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = load_demos(files["demos"])
    path = save_demos(
        tmp_path / "states.npz", Demos.from_arrays("cheetah", "run", full.observations())
    )
    base = ["infer", "--checkpoint", str(files["model"]), "--demos", str(path), "--num-demos", "2"]
    message = f"fbil reads the actions taken, and {path} hold states only (no actions)"
    _fails([*base, "--method", "fbil", "--out", str(tmp_path / "z.json")], message, capsys)
    assert not (tmp_path / "z.json").exists()
    assert main([*base, "--method", "er", "--out", str(tmp_path / "er.json")]) == 0
    assert json.loads((tmp_path / "er.json").read_text())["method"] == "er"


def test_an_output_that_is_an_input_or_a_repeated_or_orphan_option_is_refused(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    z = str(files["z"])
    before = files["z"].read_text()
    # Writing the table over the task-vector file it reads would lose the file.
    _fails(["evaluate", "--z", z, "--checkpoint", str(files["model"]), "--out", z],
           f"--out: {z} would overwrite --z's {z}; give another name", capsys)  # fmt: skip
    assert files["z"].read_text() == before
    base = ["evaluate", "--z", z, "--checkpoint", str(files["model"]), "--episodes", "1"]
    _fails([*base, "--levels", "5"], "--levels: needs a --perturbation family", capsys)
    _fails([*base, "--perturbation", "joint_friction", "--levels", "5", "5"],
           "--levels: give distinct levels", capsys)  # fmt: skip
    _fails([*base, "--seed", "-1"], "--seed: -1 is out of range (valid: 0 to 4294967295)", capsys)
    _fails([*base, "--cross-task"], "--cross-task: needs --task, the task to score", capsys)
    _fails(["evaluate", "--z", z, z, "--checkpoint", str(files["model"])],
           "evaluate: a file is given twice", capsys)  # fmt: skip
    model = ["zero-shot", "--checkpoint", str(files["model"]), "--task", "run"]
    _fails([*model, "--workers", "-1"], "zero-shot.workers: -1 is out of range", capsys)
    _fails([*model, "--seed", str(2**64)], "--seed: 18446744073709551616 is out of range", capsys)


def test_nan_in_a_description_is_refused_where_it_would_be_copied_or_written(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python's json writes and reads NaN and Infinity; standard JSON has neither."""
    import rbfm
    from rbfm.inference import load_demos, save_demos
    from rbfm.policy_files import save_z

    data = json.loads(files["z"].read_text())
    text = json.dumps({**data, "objective": float("nan"), "seconds": float("inf")})
    (tmp_path / "z_nan.json").write_text(text)
    message = "z_nan.json: objective holds NaN or infinity, which standard JSON cannot"
    _fails(["evaluate", "--z", str(tmp_path / "z_nan.json"), "--task", "run"], message, capsys)
    with pytest.raises(ConfigError, match=message):
        rbfm.load_imitation(tmp_path / "z_nan.json")
    z = torch.tensor(data["z"])
    with pytest.raises(ConfigError, match=r"y\.json: seconds holds NaN"):
        save_z(tmp_path / "y.json", z, {"seconds": float("inf")})
    demos = load_demos(files["demos"])
    demos.meta["return"] = float("nan")
    with pytest.raises(ConfigError, match=r"d\.npz: return holds NaN"):
        save_demos(tmp_path / "d.npz", demos)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["z_nan.json"]
    # Names that are no names: an adapted file would be labelled "None+adapt-k2".
    for key, value in (("checkpoint", 5), ("method", None), ("task", ["run"])):
        (tmp_path / "z_odd.json").write_text(json.dumps({**data, key: value}))
        with pytest.raises(ConfigError, match=rf"z_odd\.json: {key} is .* \(valid: a name"):
            rbfm.load_imitation(tmp_path / "z_odd.json")


def test_device_is_refused_where_nothing_would_run_on_it(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rbfm.baselines import drbc, save_policy

    net = drbc.DeterministicPolicy(17, 6, (8,))
    meta = {"method": "drbc", "domain": "cheetah", "obs_dim": 17, "action_dim": 6}
    stem = save_policy(tmp_path / "p", net, {**meta, "task": "run", "config": {"hidden": [8]}})
    _fails(["evaluate", "--z", f"{stem}.json", "--device", "cpu"],
           "--device: policies run on the CPU; task vectors and goals take it", capsys)  # fmt: skip
    infer = ["infer", "--demos", str(files["demos"]), "--method", "drbc", "--steps", "1"]
    _fails([*infer, "--device", "cpu", "--out", str(tmp_path / "q")],
           "--device: drbc trains on the CPU (FB methods take it)", capsys)  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "p.safetensors"]


def test_plot_refuses_tables_it_cannot_draw_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = "method,level,mean,ci95,seeds,episodes,unstable\n"
    (tmp_path / "t.csv").write_text(header + "fbil,0,12.5,1.0,3,2,0\nfbil,5,nan,1.0,3,2,0\n")
    out = str(tmp_path / "p.png")
    _fails(["plot", str(tmp_path / "t.csv"), "--out", out],
           "t.csv: line 3's level, mean or ci95 is not a finite number", capsys)  # fmt: skip
    (tmp_path / "t.csv").write_text(header + "fbil,0,12.5,1.0,0,2,0\n")
    _fails(["plot", str(tmp_path / "t.csv"), "--out", out],
           "t.csv: line 2's seeds, episodes or unstable is out of range", capsys)  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    _fails(["plot", str(run), "--out", out], "run: no eval.csv (a pretraining run writes", capsys)
    (run / "eval.csv").write_text("step,iqm,walk\n")
    _fails(["plot", str(run), "--out", out], "eval.csv: no evaluations yet", capsys)
    (run / "eval.csv").write_text("step,iqm,walk\n100,50.0,40.0\n200,nan,41.0\n")
    _fails(["plot", str(run), "--out", out], "eval.csv: line 3 holds NaN or infinity", capsys)
    assert not (tmp_path / "p.png").exists()
