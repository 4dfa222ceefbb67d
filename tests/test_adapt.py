"""Reward-free adaptation of z with a few episodes in the deployed environment."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from rbfm.errors import ConfigError
from rbfm.evaluation import EnvSpec, RolloutEngine, RolloutResult, fb_policy
from rbfm.evaluation.sweep import sweep
from rbfm.fb import FBModel
from rbfm.fb.networks import project
from rbfm.inference import Demos, generate_demos
from rbfm.inference.adapt import (
    ADAPT_SEED_OFFSET,
    AdaptConfig,
    AdaptProblem,
    AdaptResult,
    _block_scores,
    _record,
    adapt,
    adapt_many,
    clearly_better,
    demo_states,
)
from rbfm.inference.expert_demos import demo_embedding
from rbfm.policy_files import adaptation_record

ENV = EnvSpec("cheetah", "run", "joint_friction", 15.0)


@pytest.fixture(scope="module")
def demos(model: FBModel) -> Demos:
    z = project(torch.randn(model.cfg.z_dim), model.radius)
    return generate_demos(model, "cheetah", "run", z, episodes=2, seed=0, action_noise=0.3)


@pytest.fixture(scope="module")
def z0(model: FBModel) -> torch.Tensor:
    return project(torch.randn(model.cfg.z_dim, generator=torch.Generator().manual_seed(1)), 1.0)


class _Counting(RolloutEngine):
    """An in-process engine that records the initial-state seeds it was asked for."""

    def __init__(self) -> None:
        super().__init__(0)
        self.seeds: list[tuple[int, int]] = []

    def run(self, *args: Any, **kwargs: Any) -> Any:
        res = super().run(*args, **kwargs)
        self.seeds += [tuple(s) for s in kwargs["seeds"]]  # type: ignore[misc]
        return res


def test_adaptation_never_reads_a_reward_and_is_deterministic(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    cfg = AdaptConfig(budget=3, keep="best")
    a = adapt(model, demos, z0, ENV, cfg, seed=2)
    # The same environment with another task's reward: every reward differs, nothing else.
    b = adapt(
        model,
        demos,
        z0,
        EnvSpec("cheetah", "walk_backward", ENV.perturbation, ENV.level),
        cfg,
        seed=2,
    )
    assert a.returns != b.returns
    assert torch.equal(a.z, b.z) and a.distances == b.distances and a.best == b.best
    again = adapt(model, demos, z0, ENV, cfg, seed=2)
    assert torch.equal(again.z, a.z) and again.distances == a.distances
    assert torch.allclose(a.z.norm(), torch.tensor(model.radius))
    # The first candidate is the start z; the answer is the one with the lowest distance.
    assert torch.allclose(a.candidates[0], project(z0, model.radius))
    assert a.z is a.candidates[int(np.argmin(a.distances))]


def test_adaptation_stops_at_its_budget_on_seeds_evaluation_never_uses(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    engine = _Counting()
    res = adapt(model, demos, z0, ENV, AdaptConfig(budget=4, states=2), seed=5, engine=engine)
    assert res.episodes == 4 and len(engine.seeds) == 4 and len(res.candidates) == 2
    adapt_seeds = set(engine.seeds)
    assert adapt_seeds == {(5, ADAPT_SEED_OFFSET), (5, ADAPT_SEED_OFFSET + 1)}
    engine.seeds.clear()
    sweep(
        model,
        [("z", res.z)],
        "cheetah",
        "run",
        ENV.perturbation,
        [ENV.level],
        3,
        seed=5,
        engine=engine,
    )
    assert not adapt_seeds & set(engine.seeds)
    # A smaller budget's answer is the same search stopped earlier.
    short = adapt(model, demos, z0, ENV, AdaptConfig(budget=2, states=2), seed=5)
    assert torch.equal(short.z, res.z_after(2))


def test_the_oracle_chooses_by_return(model: FBModel, demos: Demos, z0: torch.Tensor) -> None:
    cfg = AdaptConfig(budget=3, criterion="reward", keep="best")
    res = adapt(model, demos, z0, ENV, cfg, seed=2)
    assert res.z is res.candidates[int(np.argmax(res.returns))]


def test_the_cone_search_samples_at_a_fixed_angle_and_never_reads_a_reward(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    cfg = AdaptConfig(budget=4, search="cone", cosine=0.9, keep="best")
    a = adapt(model, demos, z0, ENV, cfg, seed=2)
    start = project(z0, model.radius)
    assert torch.allclose(a.candidates[0], start)
    for c in a.candidates[1:]:  # on the sphere, at the cosine asked, each elsewhere
        assert torch.allclose(c.norm(), torch.tensor(model.radius))
        assert float(c @ start) / model.radius**2 == pytest.approx(0.9, abs=1e-5)
    assert len({tuple(c.tolist()) for c in a.candidates}) == 4
    other = EnvSpec("cheetah", "walk_backward", ENV.perturbation, ENV.level)
    b = adapt(model, demos, z0, other, cfg, seed=2)
    assert a.returns != b.returns and torch.equal(a.z, b.z) and a.distances == b.distances
    assert a.z is a.candidates[int(np.argmin(a.distances))]
    # Another seed, other directions; the line search's candidates are others again.
    assert not torch.equal(adapt(model, demos, z0, ENV, cfg, seed=3).candidates[1], a.candidates[1])


def test_the_implied_criterion_chooses_by_the_start_z_reward_and_never_reads_a_reward(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    cfg = AdaptConfig(budget=4, search="cone", criterion="implied", keep="best")
    a = adapt(model, demos, z0, ENV, cfg, seed=2)
    other = EnvSpec("cheetah", "walk_backward", ENV.perturbation, ENV.level)
    b = adapt(model, demos, z0, other, cfg, seed=2)
    assert a.returns != b.returns and torch.equal(a.z, b.z) and a.implied == b.implied
    assert a.z is a.candidates[int(np.argmax(a.implied))]
    # Each candidate's score is mean_t B(s_t)^T z0 over its episode's states, recomputed.
    with RolloutEngine(0) as eng:
        res = eng.run(
            [ENV],
            fb_policy(model, a.candidates[2][None]),
            seeds=[(2, ADAPT_SEED_OFFSET)],
            record=True,
        )
    assert res.trajectories is not None
    obs = torch.as_tensor(res.trajectories[0]["observation"][1 : res.lengths[0] + 1])
    with torch.no_grad():
        want = float(model.backward_map(obs).mean(0) @ a.candidates[0])
    assert a.implied[2] == pytest.approx(want, rel=1e-5)
    # The same cone candidates as the distance's and the oracle's: only the choice differs.
    d = adapt(model, demos, z0, ENV, AdaptConfig(budget=4, search="cone"), seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.candidates, d.candidates, strict=True))


def test_the_states_criterion_matches_the_demonstrations_mean_observation(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    mean, scale = demo_states(demos)
    states = np.concatenate(list(demos.next_states()))
    spread = torch.as_tensor(states).float().std(0)
    torch.testing.assert_close(mean, torch.as_tensor(states).float().mean(0))  # equal lengths
    torch.testing.assert_close(scale, spread.clamp_min(0.1 * float(spread.mean())))
    cfg = AdaptConfig(budget=4, search="cone", criterion="states", keep="best")
    a = adapt(model, demos, z0, ENV, cfg, seed=2)
    other = EnvSpec("cheetah", "walk_backward", ENV.perturbation, ENV.level)
    b = adapt(model, demos, z0, other, cfg, seed=2)
    assert a.returns != b.returns and torch.equal(a.z, b.z) and a.observed == b.observed
    assert a.z is a.candidates[int(np.argmin(a.observed))] and len(a.observed) == 4
    assert adaptation_record(a, cfg, ENV)["observed"] == a.observed  # what the file keeps
    # A candidate's distance and its blocks', recomputed from its episode.
    with RolloutEngine(0) as eng:
        res = eng.run([ENV], fb_policy(model, a.candidates[1][None]),
                      seeds=[(2, ADAPT_SEED_OFFSET)], record=True)  # fmt: skip
    assert res.trajectories is not None
    obs = torch.as_tensor(res.trajectories[0]["observation"][1:]).float()
    unit = lambda x: float(torch.linalg.vector_norm((x - mean) / scale))  # noqa: E731
    assert a.observed[1] == pytest.approx(unit(obs.mean(0)), rel=1e-5)
    assert a.blocks[1][3] == pytest.approx(unit(obs[300:400].mean(0)), rel=1e-5)
    # Without the demonstrations' statistics the criterion cannot be computed: refused.
    bare = AdaptProblem(project(z0, model.radius), demo_embedding(model, demos), ENV)
    with pytest.raises(ConfigError, match="criterion 'states' and problem 0 has no"):
        adapt_many(model, [bare], cfg)
    flat = Demos.from_arrays("cheetah", "run", [np.ones((3, 17))], [np.zeros((2, 6))])
    with pytest.raises(ConfigError, match="states do not vary"):
        demo_states(flat)


def test_the_cem_search_keeps_its_elites_mean_and_never_reads_a_reward(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    cfg = AdaptConfig(budget=8, search="cem", population=4, elites=2)
    assert cfg.keep == "best" and AdaptConfig().keep == "clear"  # each search's default
    engine = _Counting()
    a = adapt(model, demos, z0, ENV, cfg, seed=2, engine=engine)
    # Every candidate from initial states of its own, none of evaluation's.
    assert engine.seeds == [(2, ADAPT_SEED_OFFSET + i) for i in range(8)]
    start = project(z0, model.radius)
    assert len(a.candidates) == 8 and torch.equal(a.candidates[0], start)
    assert all(torch.allclose(c.norm(), torch.tensor(model.radius)) for c in a.candidates)
    # After each generation: the mean of its 2 closest candidates, projected.
    for g in (0, 1):
        d = a.distances[4 * g : 4 * g + 4]
        elite = [a.candidates[4 * g + j] for j in np.argsort(d, kind="stable")[:2]]
        want = project(torch.stack(elite).mean(0), model.radius)
        assert torch.allclose(a.z_after(4 * g + 4), want)
    assert torch.equal(a.z, a.z_after(8)) and torch.equal(a.z_after(3), start)
    assert a.kept == [] and a.best[-1] == int(np.argmin(a.distances))
    record = adaptation_record(a, cfg, ENV)
    assert (record["generations"], record["population"], record["elites"]) == (2, 4, 2)
    with pytest.raises(ConfigError, match=r"episodes: 3.5 \(valid: an integer 1..8\)"):
        a.z_after(3.5)  # type: ignore[arg-type]
    # The second generation is drawn around the first's answer, at 0.8 of its spread.
    spread = [float((c - a.z_after(4)).norm()) for c in a.candidates[4:]]
    first = [float((c - start).norm()) for c in a.candidates[1:4]]
    assert np.mean(spread) < np.mean(first)
    # Another task's reward in the same environment: every return differs, nothing else.
    other = EnvSpec("cheetah", "walk_backward", ENV.perturbation, ENV.level)
    b = adapt(model, demos, z0, other, cfg, seed=2)
    assert a.returns != b.returns and torch.equal(a.z, b.z) and a.distances == b.distances


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"search": "cem", "keep": "clear"}, "keep: 'clear' tests the answer's episodes"),
        ({"search": "cem", "budget": 10}, r"10 is not a whole number .*multiples of 16"),
        ({"search": "cem", "budget": 12, "states": 2, "population": 4, "elites": 2}, "of 8"),
        ({"elites": 5, "population": 4}, "elites: 5 of a population of 4"),
        ({"elites": 4, "population": 4}, "leave none out"),  # the criterion never read
        ({"elites": 1, "population": 1}, "leave none out"),
        ({"population": 8}, "population: 8 is a setting of search 'cem'; the search is 'line'"),
        (
            {"search": "cem", "budget": 16, "cosine": 0.5},
            "cosine: 0.5 is a setting of search 'cone'",
        ),
        (
            {"search": "cone", "budget": 4, "step": 0.25},
            "step: 0.25 is a setting of searches 'line' and 'cem'; the search is 'cone'",
        ),
        ({"search": "cem", "budget": 16, "shrink": 0.9}, "shrink: 0.9 is a setting of search"),
        ({"keep": "best", "block": 7}, "block: 7 is a setting of keep 'clear'"),
        ({"search": "cem", "budget": 16, "alpha": 0.1}, r"alpha: .* and keep 'best' \(valid"),
        ({"budget": np.float64(4.0)}, "budget: np.float64"),
        ({"population": 0}, "population: 0"),
        ({"decay": 0.0}, "decay"),
        ({"budget": 0}, "budget: 0 episodes"),
        ({"budget": 2, "states": 3}, "do not divide the budget of 2"),
        ({"budget": 5, "states": 3}, "2 would go unused"),
        ({"alpha": "0.1"}, "AdaptConfig.alpha: '0.1' is not a number"),
        ({"criterion": "return"}, "criterion"),
        ({"step": 0.0}, "step"),
        ({"search": "grid"}, "search"),
        ({"search": "cone", "cosine": 1.0}, "cosine"),
        ({"keep": "last"}, "keep: 'last'"),
        ({"block": 0}, "block: 0 steps"),
        ({"alpha": 0.5}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
    ],
)
def test_bad_configs_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        AdaptConfig(**kwargs)


def test_numpy_counts_are_taken_as_python_integers() -> None:
    cfg = AdaptConfig(budget=np.int64(32), search="cem", population=np.int32(16))
    assert (cfg.budget, cfg.population) == (32, 16) and type(cfg.budget) is int


def test_a_start_z_the_model_cannot_take_is_refused_before_any_episode(
    model: FBModel, demos: Demos
) -> None:
    cfg, d = AdaptConfig(budget=2), model.cfg.z_dim
    with pytest.raises(ConfigError, match=rf"start z is \(5,\); the model's z is \({d},\)"):
        adapt(model, demos, torch.ones(5), ENV, cfg)
    with pytest.raises(ConfigError, match=rf"start z is \(1, {d}\)"):
        adapt(model, demos, torch.ones(1, d), ENV, cfg)
    with pytest.raises(ConfigError, match="start z is ndarray"):
        adapt(model, demos, np.ones(d), ENV, cfg)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="start z is zero"):
        adapt(model, demos, torch.zeros(d), ENV, cfg)
    # Finite, but float32 cannot square its norm (1e19 x sqrt(d)) or lifts it off the
    # floor of normalize: either would search from a z off the sphere (zero, or short).
    for scale in (1e19, 1e-14):
        with pytest.raises(ConfigError, match=r"cannot project onto the sphere of radius"):
            adapt(model, demos, torch.full((d,), scale), ENV, cfg)


def test_an_episode_ended_at_its_first_step_is_left_out_of_the_mean(
    model: FBModel, z0: torch.Tensor
) -> None:
    obs = torch.randn(4, 17, generator=torch.Generator().manual_seed(5)).numpy()
    empty = {"observation": obs[:1], "reward": np.zeros(0)}
    full = {"observation": obs, "reward": np.ones(3)}
    states = (torch.zeros(17), torch.ones(17))
    problem = AdaptProblem(z0, torch.zeros(model.cfg.z_dim), ENV, states=states)

    with torch.no_grad():
        want = model.backward_map(torch.as_tensor(obs[1:])).mean(0)
    r = AdaptResult(z=z0, states=2)
    n = np.array([0, 3])
    res = RolloutResult(n.astype(float), n, n == 0, 0.0, [empty, full])
    mu = _record(model, AdaptConfig(states=2, budget=2), r, problem, z0, res, range(2))
    torch.testing.assert_close(mu, want)
    # The mean observation's distance, of the full episode's states alone.
    assert r.observed[0] == pytest.approx(float(torch.as_tensor(obs[1:]).mean(0).norm()))
    n = np.array([0, 0])
    res = RolloutResult(n.astype(float), n, n == 0, 0.0, [empty, empty])
    with pytest.raises(ConfigError, match=r"every episode of candidate 1 .* at its first step"):
        _record(model, AdaptConfig(states=2, budget=2), r, problem, z0, res, range(2))


def test_an_environment_of_another_domain_is_refused(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    with pytest.raises(ConfigError, match="demonstrations of cheetah for an environment of walker"):
        adapt(model, demos, z0, EnvSpec("walker", "walk"), AdaptConfig(budget=2))
    walker_demos = Demos("walker", "walk", *(np.zeros(1),) * 6, {})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a model of another domain"):
        adapt(model, walker_demos, z0, EnvSpec("walker", "walk"), AdaptConfig(budget=2))


def test_the_paired_block_test_on_exact_cases() -> None:
    start = [1.0, 2.0, 3.0, 4.0]
    assert clearly_better([0.9, 1.9, 2.9, 3.9], start, 0.05)  # the same gain on every block
    assert not clearly_better([1.1, 2.1, 3.1, 4.1], start, 0.05)  # the same loss
    assert not clearly_better([0.0, 3.0, 2.0, 5.0], start, 0.05)  # gains +1 -1 +1 -1
    # gains 1.0, 1.1, 0.9, 1.0: t = 1 / (0.0816 / 2) = 24.5, p ~ 7e-5
    assert clearly_better([0.0, 0.9, 2.1, 3.0], start, 0.05)
    assert not clearly_better([0.0, 0.9, 2.1, 3.0], start, 1e-5)
    assert not clearly_better([0.0], [1.0], 0.05)  # one pair: no test
    nan = float("nan")
    # A block the candidate's episode did not reach (a physics failure): never clearly better.
    assert not clearly_better([0.0, nan, 2.0, 3.0], start, 0.05)
    # One the start's did not reach: the other places pair, place for place.
    assert clearly_better([0.0, 0.9, 2.1, 3.0], [1.0, nan, 3.0, 4.0], 0.05)
    assert not clearly_better([0.0, 0.9, 2.1, 3.0], [1.0, nan, nan, nan], 0.05)
    assert not clearly_better([0.5, 1.5], start, 0.05)  # places that do not line up


def test_block_places_line_up_across_candidates() -> None:
    """Each episode fills its full length's places: an episode ended early leaves NaN where
    its missing blocks would be, so place j is the same (episode, block) for every
    candidate, and the trailing part block is left out."""
    cfg = AdaptConfig(block=100)
    target, z0 = torch.zeros(3), torch.zeros(3)
    feats = [torch.ones(1000, 3), torch.ones(730, 3), torch.ones(1000, 3)]
    scores = _block_scores(cfg, target, z0, feats, None, range(3), np.array([1000, 730, 1000]), 10)
    assert len(scores) == 30
    missing = [j for j, s in enumerate(scores) if math.isnan(s)]
    assert missing == [17, 18, 19]
    assert scores[:17] == pytest.approx([math.sqrt(3)] * 17) and scores[20:] == scores[:10]


def test_clear_keeps_the_start_unless_the_best_is_better_on_paired_blocks(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    best = adapt(model, demos, z0, ENV, AdaptConfig(budget=4, keep="best"), seed=2)
    clear = adapt(model, demos, z0, ENV, AdaptConfig(budget=4, block=50), seed=2)
    # The search is the same; only what is kept differs.
    assert clear.distances == best.distances and clear.best == best.best
    assert best.kept == best.best
    for k, b in enumerate(clear.best):
        assert clear.kept[k] == (b if clearly_better(clear.blocks[b], clear.blocks[0], 0.05) else 0)
    assert clear.z is clear.candidates[clear.kept[-1]]
    assert torch.equal(clear.z_after(2), clear.candidates[clear.kept[1]])
    # Each block's score is the B distance of the block's mean state feature to the
    # demonstrations' mean, recomputed from the candidate's episode.
    with RolloutEngine(0) as eng:
        res = eng.run(
            [ENV], fb_policy(model, clear.candidates[1][None]), seeds=[(2, ADAPT_SEED_OFFSET)],
            record=True,
        )  # fmt: skip
    assert res.trajectories is not None
    obs = torch.as_tensor(res.trajectories[0]["observation"][1 : res.lengths[0] + 1])
    with torch.no_grad():
        feats = model.backward_map(obs)
    target = demo_embedding(model, demos)
    want = [float(torch.linalg.vector_norm(target - f.mean(0))) for f in feats.split(50)]
    assert len(clear.blocks[1]) == len(obs) // 50
    assert clear.blocks[1] == pytest.approx(want[: len(obs) // 50], rel=1e-5)
    # At a level no data can reach, nothing replaces the start z.
    never = adapt(model, demos, z0, ENV, AdaptConfig(budget=4, block=50, alpha=1e-300), seed=2)
    assert never.kept == [0, 0, 0, 0]


def test_a_block_too_long_for_the_paired_test_is_refused_before_any_episode(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    # 600 steps leave one block per 1000-step episode: `keep="clear"` could never leave z0.
    with pytest.raises(ConfigError, match=r"block: 600 steps leave 1 block\(s\) .*1\.\.500"):
        adapt(model, demos, z0, ENV, AdaptConfig(budget=2, block=600), seed=0)


def test_a_start_z_or_demonstrations_that_are_not_finite_are_refused_before_any_episode(
    model: FBModel, demos: Demos, z0: torch.Tensor
) -> None:
    engine = _Counting()
    with pytest.raises(ConfigError, match="problem 0's start z is not finite"):
        adapt(model, demos, z0 * math.nan, ENV, AdaptConfig(budget=2), engine=engine)
    obs = [o * np.float32(1e30) for o in demos.observations()]
    far = Demos.from_arrays(
        "cheetah", "run", obs, np.split(demos.action, np.cumsum(demos.lengths)[:-1])
    )
    with pytest.raises(ConfigError, match="B of episode 0's states is not finite"):
        adapt(model, far, z0, ENV, AdaptConfig(budget=2), engine=engine)
    assert engine.seeds == []
