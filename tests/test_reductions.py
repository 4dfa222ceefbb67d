"""The imitation reductions that read no actions (er, fm, goal) against cases whose
answer is known exactly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from rbfm.data.demos import Demos
from rbfm.errors import ConfigError, DatasetError
from rbfm.evaluation import EnvSpec, RolloutEngine
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference import generate_demos, infer, warm_start
from rbfm.inference.fm import (
    FMConfig,
    discounted_targets,
    fm_losses,
    fm_objective,
    horizon,
    score,
    starts_and_targets,
)
from rbfm.inference.fm import infer as fm_infer
from rbfm.inference.goal import (
    GoalConfig,
    GoalPolicy,
    infer_sequences,
    lookahead_goals,
    read_goals,
    write_goals,
)
from rbfm.robust import light_objective


@pytest.fixture(scope="module")
def demos(model: FBModel) -> Demos:
    z = project(torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(1)), 8.0)
    return generate_demos(model, "cheetah", "run", z * model.radius / 8.0, episodes=2, seed=0)


def test_er_is_the_mean_embedding_of_the_demonstrated_states(model: FBModel, demos: Demos) -> None:
    result = infer(model, demos, "er")
    with torch.no_grad():
        b = model.backward_map(torch.as_tensor(np.concatenate(demos.next_states())))
    assert torch.allclose(result.z, project(b.mean(0), model.radius), atol=1e-5)
    assert torch.equal(result.z, warm_start(model, demos)) and result.converged


@pytest.mark.parametrize("method", ["er", "fm", "goal"])
def test_states_beyond_what_b_embeds_are_refused_before_inference(
    model: FBModel, demos: Demos, method: str
) -> None:
    # Finite in float32, so the file is valid; B of them overflows, which would reach z.
    obs = [o * np.float32(1e30) for o in demos.observations()]
    actions = np.split(demos.action, np.cumsum(demos.lengths)[:-1])
    far = Demos.from_arrays("cheetah", "run", obs, actions)
    with pytest.raises(ConfigError, match=r"B of episode 0's states is not finite"):
        if method == "goal":
            infer_sequences(model, far, GoalConfig())
        else:
            infer(model, far, method)


def test_states_only_demonstrations_give_the_reductions_the_same_z_and_refuse_cloning(
    model: FBModel, demos: Demos, tmp_path: Path
) -> None:
    import rbfm
    from rbfm.inference import load_demos, save_demos

    states = Demos.from_arrays("cheetah", "run", demos.observations())
    assert not states.has_actions and states.action.shape == (0, 6)
    assert list(states.lengths) == list(demos.lengths)
    loaded = load_demos(save_demos(tmp_path / "states.npz", states))
    assert not loaded.has_actions and not loaded.sample(1, seed=0).has_actions
    # The reductions read states alone: the same z, with or without the actions.
    assert torch.equal(infer(model, loaded, "er").z, infer(model, demos, "er").z)
    cfg = FMConfig(steps=3)
    assert torch.equal(fm_infer(model, loaded, cfg).z, fm_infer(model, demos, cfg).z)
    assert len(infer_sequences(model, loaded, GoalConfig()).z) == 2
    # The cloning methods are refused by name, before any model loads (there is none).
    for method in ("fbil", "rbfm-heavy", "drbc"):
        model_arg = None if method == "drbc" else tmp_path / "none"
        with pytest.raises(
            DatasetError,
            match=rf"^{method} reads the actions taken, and .*"
            r"states\.npz hold states only \(no actions\); er, fm and goal",
        ):
            rbfm.imitate(loaded, method, model=model_arg)
    with pytest.raises(DatasetError, match="hold states only"):
        infer(model, loaded, "fbil")  # the library path below imitate refuses too
    # A file whose actions are neither all the steps' nor none is refused as before.
    half = dataclasses.replace(demos, action=demos.action[:10])
    with pytest.raises(DatasetError, match=r"action has shape \(10, 6\), expected"):
        load_demos(save_demos(tmp_path / "half.npz", half))


def test_discounted_targets_are_the_truncated_discounted_sums() -> None:
    b = torch.randn(30, 4, dtype=torch.float64)
    e = discounted_targets(b, 0.9, 7)
    expected = torch.stack([sum(0.9**t * b[k + t] for t in range(7)) for k in range(24)])
    assert e.shape == (24, 4) and torch.allclose(e, expected)
    assert horizon(0.98, 0.99) == 228  # 0.98^228 < 0.01 <= 0.98^227
    with pytest.raises(DatasetError, match=r"^fm: a demonstration of 5 steps is shorter"):
        discounted_targets(b[:5], 0.9, 7)


def test_robust_fm_is_the_tv_worst_case_of_the_per_start_losses() -> None:
    f, e = torch.randn(50, 3), torch.randn(50, 3)
    losses = fm_losses(f, e)
    assert torch.allclose(losses, ((f - e) ** 2).mean(1))
    assert fm_objective(losses, 0.0) == losses.mean()
    assert fm_objective(losses, 0.3) == light_objective(losses, 0.3)[0]
    assert fm_objective(losses, 0.3) > losses.mean()


class _ConstantF(nn.Module):
    """F(s, a, z) = z for every state and action: a policy whose successor features are
    its task vector, so FM's minimiser on the sphere is the projected mean target."""

    def forward(self, obs: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return z[None].expand(2, -1, -1) + 0 * action.sum()


def test_fm_finds_the_exact_minimiser_when_f_is_known(model: FBModel, demos: Demos) -> None:
    exact = FBModel(model.obs_dim, model.action_dim, model.cfg)
    exact.load_state_dict(model.state_dict())
    exact.forward_map = _ConstantF()
    cfg = FMConfig(steps=100, starts=10**6)
    result = fm_infer(exact, demos, cfg, seed=0)
    steps = horizon(model.cfg.gamma, cfg.coverage)
    with torch.no_grad():
        targets = torch.cat(
            [
                discounted_targets(model.backward_map(torch.as_tensor(s)), model.cfg.gamma, steps)
                for s in demos.next_states()
            ]
        )
    assert torch.allclose(result.z, project(targets.mean(0), model.radius), atol=1e-3)
    assert result.objective <= result.trace[0]
    # The score of a z is the objective there: F = z makes it ||z - e_k||^2 / d exactly.
    obs, target = starts_and_targets(exact, demos, cfg)
    z = project(torch.randn(model.cfg.z_dim), model.radius)
    assert score(exact, obs, target, z) == pytest.approx(float((z - target).square().mean()))
    assert score(exact, obs, target, result.z) == pytest.approx(result.objective)
    assert score(exact, obs, target, result.z) < score(exact, obs, target, z)


def test_fm_is_deterministic_for_a_seed_and_refuses_short_demonstrations(
    model: FBModel, demos: Demos
) -> None:
    cfg = FMConfig(steps=5, starts=64)
    a, b = fm_infer(model, demos, cfg, seed=3), fm_infer(model, demos, cfg, seed=3)
    assert torch.equal(a.z, b.z) and abs(float(a.z.norm()) - model.radius) < 1e-4
    short = demos.episodes(np.array([0]))
    short = Demos.from_arrays("cheetah", "run", [short.observation[:101]], [short.action[:100]])
    with pytest.raises(DatasetError, match="shorter than the 228-step horizon"):
        fm_infer(model, short, cfg)


def test_goal_sequences_average_the_next_states() -> None:
    b = torch.randn(10, 3, dtype=torch.float64)
    z = lookahead_goals(b, 4, 2.0)
    assert torch.allclose(z[0], project(b[0:4].mean(0), 2.0))
    assert torch.allclose(z[8], project(b[8:10].mean(0), 2.0))  # fewer at the end
    assert torch.allclose(z.norm(dim=1), torch.full((10,), 2.0, dtype=torch.float64))
    with pytest.raises(DatasetError, match="shorter than the lookahead of 4"):
        lookahead_goals(b[:3], 4, 2.0)


def test_goal_policy_tracks_its_demonstration_by_time(model: FBModel, demos: Demos) -> None:
    goals = infer_sequences(model, demos, GoalConfig(lookahead=8))
    assert [len(z) for z in goals.z] == list(demos.lengths)
    policy = GoalPolicy(model, goals)
    first = demos.observation[0 : demos.lengths[0] + 1]
    policy.begin(1)
    for t in (0, 1, 2):
        action = policy(first[t : t + 1], np.array([0]))
        expected = model.act(torch.as_tensor(first[t : t + 1]), goals.z[0][t]).numpy()
        np.testing.assert_allclose(action, expected, atol=1e-6)
        policy.executed(first[t : t + 1], np.array([0]), action)
    assert policy.demo[0] == 0  # the demonstration that began at this very state
    with RolloutEngine(0) as engine:
        run = engine.run(EnvSpec("cheetah", "run"), GoalPolicy(model, goals), 2, seed=5)
    assert np.isfinite(run.returns).all()


def test_goal_policy_by_state_tracks_the_step_after_the_nearest_demonstrated_state(
    model: FBModel, demos: Demos, tmp_path: Path
) -> None:
    goals = infer_sequences(model, demos, GoalConfig(lookahead=8, index="state"))
    assert [len(k) for k in goals.keys] == list(demos.lengths)
    policy = GoalPolicy(model, goals)
    policy.begin(3)
    # Three episodes at demonstrated states of two demonstrations, at their first step:
    # each tracks the z after its own state, not the z of its time index.
    second = demos.observation[demos.lengths[0] + 1 :]
    obs = np.stack([demos.observation[5], demos.observation[40], second[17]])
    action = policy(obs, np.arange(3))
    z = torch.stack([goals.z[0][5], goals.z[0][40], goals.z[1][17]])
    np.testing.assert_allclose(action, model.act(torch.as_tensor(obs), z).numpy(), atol=1e-6)
    # The time index at the same states tracks each one's first goal instead.
    by_time = GoalPolicy(model, infer_sequences(model, demos, GoalConfig(lookahead=8)))
    by_time.begin(3)
    assert not np.allclose(by_time(obs, np.arange(3)), action, atol=1e-4)
    # Its file keeps the index and the keys.
    path = write_goals(tmp_path / "g", goals, {"method": "goal"})
    loaded = read_goals(path, json.loads(path.read_text()))
    assert loaded.index == "state"
    assert all(torch.equal(a, b) for a, b in zip(loaded.keys, goals.keys, strict=True))
    # A description naming an unknown index, or the state index without its keys, is
    # refused in one line naming the file at fault.
    info = json.loads(path.read_text())
    with pytest.raises(ConfigError, match=r"g.json index: 'phase' \(valid: time, state\)"):
        read_goals(path, info | {"index": "phase"})
    by_time_file = write_goals(tmp_path / "t", by_time.goals, {"method": "goal"})
    with pytest.raises(ConfigError, match=r"t.safetensors: index 'state' needs a key .*key.0"):
        read_goals(by_time_file, json.loads(by_time_file.read_text()) | {"index": "state"})
    with pytest.raises(ConfigError, match=r"GoalConfig index: 'phase' \(valid: time, state\)"):
        GoalConfig(index="phase")


def test_imitate_runs_the_goal_reduction_as_a_sequence(model: FBModel, demos: Demos) -> None:
    import rbfm
    from rbfm.api import Model
    from rbfm.errors import ConfigError

    wrapped = Model(model, {"domain": "cheetah"}, "tiny")
    imitation = rbfm.imitate(demos, "goal", wrapped)
    assert imitation.goals is not None and len(imitation.goals.z) == demos.num_episodes
    assert isinstance(imitation.policy(), GoalPolicy)
    with pytest.raises(ConfigError, match="no field look"):
        rbfm.imitate(demos, "goal", wrapped, look=3)
    with pytest.raises(ConfigError, match="goal is a z per step; only task vectors adapt"):
        rbfm.adapt(imitation, demos)


def test_a_goal_file_round_trips_and_evaluates_as_the_imitation(
    demos: Demos, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rbfm infer --method goal` writes the sequences; `rbfm.load_imitation` and
    `rbfm evaluate` read them back to the same policy and returns."""
    import rbfm
    from rbfm.cli import main
    from rbfm.data.demos import save_demos
    from rbfm.errors import ConfigError

    model = rbfm.load_model("cheetah:rnd-v1")
    imitation = rbfm.imitate(demos, "goal", model)
    assert rbfm.imitate(demos, model=model).method == "er"  # the default method
    saved = imitation.save(tmp_path / "goal.json")
    assert saved.with_suffix(".safetensors").is_file()
    loaded = rbfm.load_imitation(saved)
    assert loaded.goals is not None and imitation.goals is not None
    # A file loads onto the CPU (as a z does); the policy moves it to the model's device.
    pairs = zip(loaded.goals.z, imitation.goals.z, strict=True)
    assert all(torch.equal(a, b.cpu()) for a, b in pairs)
    direct = rbfm.evaluate(imitation, episodes=2)
    assert np.array_equal(rbfm.evaluate(saved, episodes=2), direct)
    demos_file = tmp_path / "demos.npz"
    save_demos(demos_file, demos)
    out = tmp_path / "cli.json"
    infer = ["infer", "--checkpoint", "cheetah:rnd-v1", "--demos", str(demos_file)]
    assert main([*infer, "--num-demos", "2", "--out", str(tmp_path / "er.json")]) == 0
    assert json.loads((tmp_path / "er.json").read_text())["method"] == "er"  # the default
    assert main([*infer, "--method", "goal", "--num-demos", "2", "--out", str(out)]) == 0
    assert "goal: 2 z sequences (2000 steps)" in capsys.readouterr().out.splitlines()[-1]
    assert main(["evaluate", "--z", str(out), "--episodes", "2"]) == 0
    assert f"{direct.mean():.1f}" in capsys.readouterr().out
    adapt = ["adapt", "--demos", str(demos_file), "--num-demos", "2", "--z", str(out)]
    assert main([*adapt, "--episodes", "1", "--out", str(tmp_path / "a.json")]) == 2
    assert "goal is a z per step, not a task vector" in capsys.readouterr().err
    infer += ["--num-demos", "2", "--method", "goal"]
    assert main([*infer, "--steps", "5", "--out", str(out)]) == 2
    assert "goal: no field steps (valid: index, lookahead)" in capsys.readouterr().err
    assert main([*infer, "--steps", "5", "--set", "steps=6", "--out", str(out)]) == 2
    assert "--set steps: given again as --steps" in capsys.readouterr().err
    assert main([*infer, "--set", "lookahead=3", "--set", "lookahead=4", "--out", str(out)]) == 2
    assert "--set lookahead: given more than once" in capsys.readouterr().err
    er = [*infer[:-2], "--method", "er", "--set", "steps=5", "--out", str(out)]
    assert main(er) == 2
    assert "er: no field steps (valid: whiten)" in capsys.readouterr().err
    fbil = [*infer[:-2], "--method", "fbil", "--set", "bf16=yes", "--out", str(out)]
    assert main(fbil) == 2
    assert "FBILConfig bf16: 'yes' is not true or false" in capsys.readouterr().err
    # An FB method's unknown field is refused before its checkpoint is read.
    missing = [*fbil[:2], str(tmp_path / "none.pt"), *fbil[3:-4], "--set", "stepz=5", *fbil[-2:]]
    assert main(missing) == 2
    assert "fbil: no field stepz (valid: atol," in capsys.readouterr().err
    # `--set` reaches the method's config as `imitate`'s keywords do.
    assert main([*infer, "--set", "lookahead=3", "--out", str(tmp_path / "l3.json")]) == 0
    assert json.loads((tmp_path / "l3.json").read_text())["lookahead"] == 3
    three = rbfm.imitate(demos.sample(2, 0), "goal", model, lookahead=3).goals
    assert three is not None
    assert torch.equal(rbfm.load_imitation(tmp_path / "l3.json").goals.z[0], three.z[0].cpu())
    # A truncated sequences file is refused by name, before any rollout.
    weights = out.with_suffix(".safetensors")
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ConfigError, match=r"not the weights .*cli\.json was written with"):
        rbfm.load_imitation(out)
