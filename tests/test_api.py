"""The Python API: one call shape for every method, saved and loaded, evaluated and
adapted under a perturbation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import rbfm
from rbfm.errors import ConfigError, DatasetError
from rbfm.fb import FBModel, fb_config
from rbfm.fb.checkpoint import CheckpointError, save_checkpoint
from rbfm.fb.networks import project


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> rbfm.Model:
    torch.manual_seed(0)
    fb = FBModel(17, 6, fb_config("tiny")).eval()
    z = project(torch.randn(fb.cfg.z_dim), fb.radius).tolist()
    stem = tmp_path_factory.mktemp("m") / "model"
    save_checkpoint(stem, fb, {"domain": "cheetah", "task_z": {"run": z}})
    return rbfm.load_model(stem)


def _arrays() -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    obs = [rng.standard_normal((51, 17)) for _ in range(2)]
    acts = [np.clip(rng.standard_normal((50, 6)), -1, 1) for _ in range(2)]
    return obs, acts


def _demos() -> rbfm.Demos:
    return rbfm.Demos.from_arrays("cheetah", "run", *_arrays())


def test_every_method_has_one_call_and_its_result_saves_loads_and_evaluates(
    model: rbfm.Model, tmp_path: Path
) -> None:
    from rbfm.api import Imitation

    demos = _demos()
    assert model.tasks == ("run",) and model.task_z("run").shape == (model.fb.cfg.z_dim,)
    fbil = rbfm.imitate(demos, "fbil", model, steps=20)
    drbc = rbfm.imitate(demos, "drbc", steps=20)
    assert fbil.z is not None and drbc.network is not None
    for imitation in (fbil, drbc):
        path = imitation.save(tmp_path / f"{imitation.method}.json")
        back = rbfm.load_imitation(path)  # a task vector's file names its model
        a = rbfm.evaluate(imitation, perturbation="joint_friction", level=10.0, episodes=2)
        b = rbfm.evaluate(back, perturbation="joint_friction", level=10.0, episodes=2)
        np.testing.assert_array_equal(a, b)
    adapted = rbfm.adapt(fbil, demos, "joint_friction", 10.0, episodes=2)
    assert torch.allclose(adapted.z.norm(), fbil.z.norm())  # type: ignore[union-attr]
    implied = rbfm.adapt(fbil, demos, "joint_friction", 10.0, episodes=2, criterion="implied")
    assert implied.info is not None and implied.info["adaptation"]["criterion"] == "implied"
    record = adapted.info["adaptation"]  # type: ignore[index]
    assert record["episodes"] == 2 and len(record["distances"]) == 2  # what the CLI prints
    assert repr(adapted).startswith("Imitation(fbil, cheetah/run, z of ")
    assert "adapted with 2 episodes in joint_friction=10: " in repr(adapted)
    # What it kept, and by which rule: the start z unless clearly beaten, by default.
    assert record["keep"] == "clear" and len(record["kept"]) == 2
    assert record["kept"][-1] in (0, record["best"][-1])
    assert repr(adapted).endswith("kept)")
    best = rbfm.adapt(fbil, demos, "joint_friction", 10.0, episodes=2, keep="best")
    assert best.info is not None and best.info["adaptation"]["kept"] == record["best"]
    cem = {"search": "cem", "kept": [], "generations": 2}  # cem keeps no candidate
    shown = Imitation("fbil", "cheetah", "run", fbil.z, model, info={"adaptation": record | cem})
    assert repr(shown).endswith("the elites' mean of generation 2)")
    older = record | {"search": "cem", "kept": []}  # files of before `generations`
    shown = Imitation("fbil", "cheetah", "run", fbil.z, model, info={"adaptation": older})
    assert repr(shown).endswith("the elites' mean)")
    assert len(repr(model)) < 200 and "cheetah, d=" in repr(model)
    # Names and paths stand for what they load.
    by_name = rbfm.imitate(demos, "fbil", model.name, steps=20)
    torch.testing.assert_close(by_name.z, fbil.z)
    path = fbil.save(tmp_path / "again.json")
    np.testing.assert_array_equal(rbfm.evaluate(path, episodes=2), rbfm.evaluate(fbil, episodes=2))
    with pytest.raises(ConfigError, match=r"a task vector for 'run' cannot adapt to .*'walk'"):
        walk = rbfm.Demos.from_arrays("cheetah", "walk", *_arrays())
        rbfm.adapt(fbil, walk, "joint_friction", 10.0, episodes=2)
    with pytest.raises(ConfigError, match="the reward oracle is for reports"):
        rbfm.adapt(fbil, demos, "joint_friction", 10.0, episodes=2, criterion="reward")


def test_the_api_refuses_what_it_cannot_use(model: rbfm.Model, tmp_path: Path) -> None:
    demos = _demos()
    with pytest.raises(ConfigError, match=r"nope.json: no such file"):
        rbfm.load_imitation(tmp_path / "nope.json")
    with pytest.raises(CheckpointError, match=r"nope.pt: no such checkpoint \(give a run"):
        rbfm.load_model(tmp_path / "nope.pt")
    with pytest.raises(DatasetError, match=r"unreadable: not an .npz archive"):
        (tmp_path / "z.json").write_text("{}")
        rbfm.load_demos(tmp_path / "z.json")
    with pytest.raises(ConfigError, match=r"its folder .*nodir does not exist"):
        rbfm.save_demos(tmp_path / "nodir" / "d.npz", demos)
    with pytest.raises(ConfigError, match="pass model="):
        rbfm.imitate(demos, "fbil")
    with pytest.raises(ConfigError, match="takes no model"):
        rbfm.imitate(demos, "drbc", model)
    # `infer`'s own argument, not a field: it would be recorded as one and change nothing.
    with pytest.raises(ConfigError, match=r"er: no field progress \(valid: whiten\)"):
        rbfm.imitate(demos, "er", model, progress=True)
    with pytest.raises(ConfigError, match="stores no z for 'walk'"):
        model.task_z("walk")
    with pytest.raises(DatasetError, match="actions must lie in"):
        rbfm.Demos.from_arrays("cheetah", "run", [np.zeros((3, 17))], [np.full((2, 6), 2.0)])
    with pytest.raises(DatasetError, match=r"episode 0's observations have shape \(3, 16\)"):
        rbfm.Demos.from_arrays("cheetah", "run", [np.zeros((3, 16))], [np.zeros((2, 6))])
    # Per episode: totals that match can hide episodes that do not.
    obs, acts = [np.zeros((3, 17))] * 2, [np.zeros((2, 6))] * 2
    with pytest.raises(DatasetError, match="episode 1's actions have shape"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, [acts[0], np.zeros((2, 5))])
    with pytest.raises(DatasetError, match=r"episode 0's rewards have shape \(3,\), expected \(2"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, acts, rewards=[np.ones(3), np.ones(1)])
    with pytest.raises(DatasetError, match=r"episode 1's rewards have shape \(1, 2\)"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, acts, rewards=[np.ones(2), np.ones((1, 2))])
    with pytest.raises(DatasetError, match="1 reward sequences for 2 episodes"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, acts, rewards=[np.ones(4)])
    with pytest.raises(DatasetError, match="episode 0 has 4 physics states for 3"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, acts, physics=[np.zeros((4, 18))] * 2)
    # One episode's arrays, not wrapped in a list, would read as 3 episodes of 17 numbers.
    with pytest.raises(DatasetError, match=r"observations is one 2-d array; pass a list"):
        rbfm.Demos.from_arrays("cheetah", "run", np.zeros((3, 17)), np.zeros((2, 6)))
    # Arrays numpy would raise on, or cast without a word (a bool, a complex number), named.
    with pytest.raises(DatasetError, match=r"actions is str; pass a list with one array per"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, "actions")  # type: ignore[arg-type]
    ragged = [[0.0] * 17, [0.0] * 17, [0.0] * 3]
    with pytest.raises(DatasetError, match="episode 0's observations are not one rectangular"):
        rbfm.Demos.from_arrays("cheetah", "run", [ragged], acts[:1])
    with pytest.raises(DatasetError, match="episode 0's observations hold complex128 values"):
        rbfm.Demos.from_arrays("cheetah", "run", [o + 5j for o in obs], acts)
    with pytest.raises(DatasetError, match="episode 1's actions hold bool values; expected real"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, [acts[0], np.zeros((2, 6), bool)])
    with pytest.raises(DatasetError, match="episode 0's rewards hold <U1 values"):
        rbfm.Demos.from_arrays("cheetah", "run", obs, acts, rewards=[np.full(2, "a")] * 2)
    with pytest.raises(ConfigError, match=r"unknown domain \['cheetah'\]; valid choices"):
        rbfm.Demos.from_arrays(["cheetah"], "run", obs, acts)  # type: ignore[arg-type]
    two = rbfm.Demos.from_arrays("cheetah", "run", obs, acts)
    for index in ([], [2], [-1], [0.5]):
        with pytest.raises(ConfigError, match=r"names no episodes \(valid: a non-empty 1-d"):
            two.episodes(np.array(index))
    bad = np.zeros((3, 17))
    bad[2, 4] = np.nan
    with pytest.raises(DatasetError, match=r"NaN or infinite values \(episode 1, step 2\)"):
        rbfm.Demos.from_arrays("cheetah", "run", [np.zeros((3, 17)), bad], acts)
    # The commonest slip, T observations for T actions, named per episode.
    with pytest.raises(DatasetError, match="episode 1 has 2 observations for 2 actions; each"):
        rbfm.Demos.from_arrays(
            "cheetah", "run", [np.zeros((3, 17)), np.zeros((2, 17))], [np.zeros((2, 6))] * 2
        )


def test_a_settings_name_the_method_ignores_is_refused_before_the_model_loads(
    tmp_path: Path,
) -> None:
    demos, none = _demos(), tmp_path / "none"  # a model that is not there: never loaded
    with pytest.raises(ConfigError, match=r"^unknown settings 'bogus'; valid choices: default, "):
        rbfm.imitate(demos, "er", model=none, settings="bogus")
    for method in ("fbil", "drbc", "goal"):  # for every method
        with pytest.raises(ConfigError, match="unknown settings 'bogus'"):
            rbfm.imitate(demos, method, model=none, settings="bogus")
    for method, name, message in [
        ("er", "paper", "settings 'paper' does nothing for er (er's settings: default; 'paper' "
         "is for fbil, rbfm-light, rbfm-heavy, drbc, bedroil)"),
        ("goal", "cpu", "settings 'cpu' does nothing for goal (goal's settings: default; "),
        ("drbc", "default", "settings 'default' does nothing for drbc (drbc's settings: paper"),
        ("fbil", "cpu", "settings 'cpu' does nothing for fbil (fbil's settings: default, paper"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError, match=re.escape(message)):
            rbfm.imitate(demos, method, model=none, settings=name)


def test_api_calls_run_on_one_thread_and_restore_the_caller_s(
    model: rbfm.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rbfm.threads import one_torch_thread

    seen = []
    inside = one_torch_thread(lambda: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        inside()
        assert seen == [1] and torch.get_num_threads() == 2
        # An API call: one thread inside, the caller's count back after, also on an error.
        import rbfm.inference

        infer, during = rbfm.inference.infer, []

        def spy(*args: Any, **kwargs: Any) -> Any:
            during.append(torch.get_num_threads())
            return infer(*args, **kwargs)

        monkeypatch.setattr(rbfm.inference, "infer", spy)
        rbfm.imitate(_demos(), "fbil", model, steps=5)
        assert during == [1] and torch.get_num_threads() == 2
        with pytest.raises(ZeroDivisionError):
            one_torch_thread(lambda: 1 / 0)()
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice wins
        inside()
        assert seen == [1, 2]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("method", ["fbil", "goal", "drbc"])
@pytest.mark.parametrize("name", ["x.v2.json", "x.v2"])
def test_save_writes_the_name_given_and_returns_it_whatever_its_dots(
    model: rbfm.Model, tmp_path: Path, method: str, name: str
) -> None:
    """A file of the name less its last dotted part (`x.json`) is someone else's."""
    for other in ("x.json", "x.safetensors"):
        (tmp_path / other).write_text("another run's")
    fits = {} if method == "goal" else {"steps": 2}
    imitation = rbfm.imitate(_demos(), method, None if method == "drbc" else model, **fits)
    path = imitation.save(tmp_path / name)
    pair = method != "fbil"  # a task vector is one file, of the name as given
    assert path == tmp_path / (f"{name.removesuffix('.json')}.json" if pair else name)
    if pair:
        assert path.with_name("x.v2.safetensors").is_file()
    assert all((tmp_path / o).read_text() == "another run's" for o in ("x.json", "x.safetensors"))
    assert rbfm.load_imitation(path).method == method


def test_what_would_turn_into_nan_or_a_silent_zero_is_refused(
    model: rbfm.Model, tmp_path: Path
) -> None:
    from rbfm.api import Imitation
    from rbfm.device import pick_device
    from rbfm.inference.goal import GoalConfig, infer_sequences

    # A float64 value beyond float32's range would pass a check made before the cast.
    obs, acts = _arrays()
    big = [o.astype(np.float64) for o in obs]
    big[0][3, 1] = 1e300
    with pytest.raises(DatasetError, match=r"infinite values \(episode 0, step 3\), counting"):
        rbfm.Demos.from_arrays("cheetah", "run", big, acts)
    rbfm.save_demos(tmp_path / "d.npz", _demos())
    with np.load(tmp_path / "d.npz") as f:
        arrays = dict(f)
    arrays["observation"] = arrays["observation"].astype(str)
    np.savez(tmp_path / "s.npz", **arrays)
    with pytest.raises(DatasetError, match="observation holds <U32 values; expected real"):
        rbfm.load_demos(tmp_path / "s.npz")
    # A NaN z would end every episode at its first step and count a return of 0.
    nan = Imitation("er", "cheetah", "run", torch.full((model.fb.cfg.z_dim,), torch.nan), model)
    with pytest.raises(ConfigError, match="er imitation: NaN or infinite values in its z"):
        rbfm.evaluate(nan, episodes=1)
    demos = _demos()
    with pytest.raises(ConfigError, match=r"imitate.seed: -1 is out of range"):
        rbfm.imitate(demos, "er", model, seed=-1)
    seeded = rbfm.imitate(demos, "er", model, seed=np.int64(2))  # numpy's integers too
    assert seeded.info is not None and type(seeded.info["seed"]) is int
    # What the method was asked beyond its defaults is recorded, as `rbfm infer` does.
    fit = rbfm.imitate(demos, "fbil", model, steps=5)
    assert fit.info is not None and fit.info["overrides"] == {"steps": 5}
    assert "overrides" not in seeded.info
    with pytest.raises(ConfigError, match=r"Demos.sample.seed: -1 is out of range"):
        demos.sample(1, -1)  # the command line's --seed reaches here
    with pytest.raises(ConfigError, match="pass a Demos"):
        rbfm.imitate("demos.npz", "er", model)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"evaluate.episodes: 2.5 is not an integer"):
        rbfm.evaluate(rbfm.imitate(demos, "er", model), episodes=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"adapt.seed: -3 is out of range"):
        rbfm.adapt(rbfm.imitate(demos, "er", model), demos, episodes=2, seed=-3)
    # Seeds beyond numpy's and torch's generators: refused in one line, not an overflow.
    with pytest.raises(
        ConfigError,
        match=r"adapt.seed: 18446744073709551616 is out of range \(valid: an integer in "
        r"\[0, 4294967295\]\)",
    ):
        rbfm.adapt(rbfm.imitate(demos, "er", model), demos, episodes=2, seed=2**64)
    with pytest.raises(ConfigError, match=r"imitate.seed: 4294967296 is out of range"):
        rbfm.imitate(demos, "drbc", seed=2**32)
    # One episode is the start z's alone: the "adapted" z would be the one given.
    with pytest.raises(ConfigError, match=r"budget: 1 episodes try no z but the start one"):
        rbfm.adapt(rbfm.imitate(demos, "er", model), demos, episodes=1)
    with pytest.raises(ConfigError, match=r"adapt.episodes: 0 is out of range"):
        rbfm.adapt(rbfm.imitate(demos, "er", model), demos, episodes=0)
    with pytest.raises(ConfigError, match="adapt: demos is a list; pass a Demos"):
        rbfm.adapt(rbfm.imitate(demos, "er", model), [demos])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"episodes \(budget\): 5 is not a whole number of cem"):
        rbfm.adapt(rbfm.imitate(demos, "er", model), demos, episodes=5, search="cem")
    with pytest.raises(ConfigError, match="device 'xyz' \\(valid: cpu, cuda, cuda:N\\)"):
        pick_device("xyz")
    with pytest.raises(CheckpointError, match="an empty model name"):
        rbfm.load_model("")
    with pytest.raises(ConfigError, match=r"load_model: 5 is int, not a path; pass a model's"):
        rbfm.load_model(5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"imitate\.|load_model: 5 is int, not a path"):
        rbfm.imitate(demos, "er", 5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"load_imitation: 5 is int, not a path; pass a file"):
        rbfm.adapt(5, demos)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match=r"no walker: model is shipped .*walker, walker:"):
        rbfm.load_model("walker:")  # not the default walker: a label was left out
    # From Python as from the command line: a folder as `out` is refused before planning.
    from rbfm.policy_files import demos_to_file

    with pytest.raises(ConfigError, match="is a folder; give a file name"):
        demos_to_file("mpc", "walk", tmp_path, domain="walker", episodes=1)
    # The goal method on a model whose actor reads a window: refused, not a shape error later.
    windowed = FBModel(17, 6, fb_config("tiny", context=2)).eval()
    with pytest.raises(DatasetError, match="goal: models with a context are not supported"):
        infer_sequences(windowed, demos, GoalConfig())


def test_what_its_own_loader_would_refuse_is_not_written_and_odd_values_are_named(
    model: rbfm.Model, tmp_path: Path
) -> None:
    import json

    from rbfm.api import Imitation
    from rbfm.envs import get_perturbation

    d = model.fb.cfg.z_dim
    # save() refuses a z that load_imitation would refuse, before writing anything.
    for z, message in (
        (torch.full((d,), torch.nan), "NaN or infinite values in its z"),
        (2 * torch.ones(d), r"norm is 5\.\d+, but the model's policies take z on the sphere"),
    ):
        with pytest.raises(ConfigError, match=message):
            Imitation("er", "cheetah", "run", z, model).save(tmp_path / "z.json")
        assert not list(tmp_path.iterdir())
    demos = _demos()
    # A z or goals edited by hand: refused as their files' loader refuses them.
    import dataclasses

    er = rbfm.imitate(demos, "er", model)
    assert er.z is not None
    for z, message in (
        (er.z * 5, r"er imitation: the task vector's norm is 14\.1"),
        (er.z[:3], r"er imitation: a 3-dim task vector, but the model's z has 8"),
        (er.z.numpy(), r"er imitation: z is ndarray; it must be a 1-d torch float tensor"),
        (er.z[None].repeat(2, 1), r"er imitation: z is shape \(2, 8\); it must be a 1-d"),
    ):
        with pytest.raises(ConfigError, match=message):
            rbfm.evaluate(dataclasses.replace(er, z=z), episodes=1)
    wide = rbfm.evaluate(dataclasses.replace(er, z=er.z.double()), episodes=2)
    assert np.array_equal(wide, rbfm.evaluate(er, episodes=2))  # a float64 z: the same returns
    goal = rbfm.imitate(demos, "goal", model)
    assert goal.goals is not None
    off = [z.clone() for z in goal.goals.z]
    off[1][4] *= 100
    moved = dataclasses.replace(goal, goals=dataclasses.replace(goal.goals, z=off))
    with pytest.raises(ConfigError, match=r"goal imitation: goal \d+'s norm is \d+"):
        moved.save(tmp_path / "g")
    (tmp_path / "goals.json").mkdir()  # a folder where the pair's description would go
    with pytest.raises(ConfigError, match=r"save: .*goals\.json is a folder; give a file"):
        rbfm.imitate(demos, "goal", model).save(tmp_path / "goals")
    with pytest.raises(ConfigError, match="save: 5 is not a file name"):
        rbfm.imitate(demos, "er", model).save(5)  # type: ignore[arg-type]
    assert [p.name for p in tmp_path.iterdir()] == ["goals.json"]
    (tmp_path / "goals.json").rmdir()
    # numpy scalars in a method's settings are taken, and recorded, as Python's.
    fit = rbfm.imitate(demos, "fbil", model, steps=np.int64(3))
    assert fit.info is not None and type(fit.info["overrides"]["steps"]) is int
    goals = rbfm.imitate(demos, "goal", model, lookahead=np.int64(3))
    assert goals.info is not None and goals.info["lookahead"] == 3
    from rbfm.checks import in_range

    with pytest.raises(ConfigError, match=r"is a numpy float32; pass a Python number"):
        in_range("X", "step", np.float32(0.5), 0.0, 1.0)
    # A z file whose model hash is no hash is refused by name.
    path = rbfm.imitate(demos, "er", model).save(tmp_path / "er.json")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "model_sha256": 123}))
    with pytest.raises(ConfigError, match=r"er\.json: model_sha256 is 123 \(valid: the model's"):
        rbfm.load_imitation(path)
    # An adapted z written by a stage records its cell, family, level and budget: it prints.
    record = {"cell": "c", "episodes": 5, "family": "joint_friction", "level": 10.0}
    path.write_text(json.dumps({**data, "adaptation": record}))
    assert "adapted with 5 episodes in joint_friction=10)" in repr(rbfm.load_imitation(path))
    friction = get_perturbation("cheetah", "joint_friction")
    for level in (True, "15"):
        with pytest.raises(ConfigError, match=rf"level {level!r} of cheetah/joint_friction is not"):
            friction.check(level)  # type: ignore[arg-type]
    assert friction.check(np.float32(10.0)) == 10.0
    for n in (1.5, True):
        with pytest.raises(ConfigError, match=rf"cannot draw {n} .*valid: an integer in 1\.\.2"):
            demos.sample(n, 0)  # type: ignore[arg-type]


def test_a_torn_pair_is_refused_not_loaded_with_the_wrong_contents(
    model: rbfm.Model, tmp_path: Path
) -> None:
    demos = _demos()
    one = rbfm.imitate(demos, "goal", model, lookahead=3).save(tmp_path / "one.json")
    two = rbfm.imitate(demos, "goal", model, lookahead=5).save(tmp_path / "two.json")
    # two's weights beside one's description: a save killed between its two files.
    (tmp_path / "one.safetensors").write_bytes((tmp_path / "two.safetensors").read_bytes())
    with pytest.raises(ConfigError, match=r"not the weights .*one\.json was written with"):
        rbfm.load_imitation(one)
    assert rbfm.load_imitation(two).goals is not None
    policy = rbfm.imitate(demos, "drbc", steps=2).save(tmp_path / "p.json")
    weights = tmp_path / "p.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))
    with pytest.raises(CheckpointError, match="SHA-256 differs"):
        rbfm.load_imitation(policy)
