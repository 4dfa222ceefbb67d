"""Reward-free adaptation of a task vector to the dynamics it meets.

Offline inference sees nominal demonstrations and a model of nominal physics. Given a
few episodes in the deployed (maybe perturbed) environment, `adapt` moves z so that the
states its policy visits there match the demonstrations' states, in the model's own
feature space: the backward map B. Its criterion is

    d(z) = || mean_t B(s_t) over an episode of pi_z  -  mean_t B(s_t) over the demos ||

(the demonstrations' term is the warm start before projection). No reward is read.

Search, and why. FB's policies pi_z are trained for the rewards r(s) = B(s)^T z, so the
step z <- z + (mu_demos - mu_z) is apprenticeship learning's feature-matching update
(Abbeel and Ng, 2004) with B as the features: it raises the reward of states the
demonstrations visit and the policy does not, and lowers it where the policy goes and
they do not. Budgets are a few episodes, so the search is a (1+1) line search along that
direction on the sqrt(d) sphere: the start z is the first candidate (its episode is paid
for too); each next candidate is a step from the best so far along the direction
computed at the best; a candidate that does not lower d halves the step. After any
number of episodes the answer is the best candidate so far, so one run with budget K
also gives every smaller budget. Every candidate of a problem runs from the same
`states` initial states (paired comparisons: d differences then come from z, not from
the starts), drawn from seeds that evaluation never uses (`ADAPT_SEED_OFFSET`); a
candidate's d is the distance of the mean of its episodes' mean B. A single state is
the most candidates per budget but the least general choice: on the shipped walker at
+100% body mass, the candidate with the lowest d on one adaptation state returned
372 there and 129 +- 56 on 20 fresh states (FB-IL's z: 118 +- 17).

The oracle (`criterion="reward"`) is the same search choosing by the task's return: an
upper bound for the selection signal at the same budget, reported beside the
reward-free search and never a method.

A second reward-free criterion, `criterion="implied"`, chooses by the reward the start z
implies in the model: FB trains pi_z to maximise r_z(s) = B(s)^T z, so FB-IL's answer z0
names a task whose reward in any state the model can compute, perturbed or not; the
candidate with the highest mean B(s_t)^T z0 over its episodes collects the most of that
reward in the environment met. It is the oracle's choice with the inferred reward in
place of the task's: on cheetah the cone's oracle gained 1.20x at the two strongest
levels while the distance chose no better than FB-IL (docs/results/adapting.md), so the
better candidates were there and the distance did not rank them.

A third, `criterion="states"`, leaves the model's features: the distance of the mean
observation of pi_z's episodes to the demonstrations', each dimension divided by the
demonstrations' spread (floored at a tenth of its mean, so that a dimension they hold
constant does not dominate). On the planner's demonstrations B's distance puts the
stored z (the model given the task's reward) farther than ER-FB's z on every seed of
walker walk and quadruped walk, stand and jump, and this one closer on 19 of those 20
seeds; on cheetah run it is the reverse (B's 5 of 5, this 1 of 5). Followed by the cem
search it returned less than B's distance on cheetah and as much on walker walk and
quadruped (docs/results/external/README.md,
`benchmarks/reward_free_signals.py` and `benchmarks/adapt_cem.py`), so it is a choice,
not the default; stages refuse it, as their records keep B's distances.

A second search, `search="cone"`, samples instead of stepping: after the start z, each
candidate is z0 rotated by a fixed angle (cosine `cosine` to z0, 0.9 by default) towards
a random direction orthogonal to it, drawn from (seed, ADAPT_SEED_OFFSET). The line
search's oracle gains only 1.04x on walker and 1.13x on cheetah at the two strongest
levels (docs/results/adapting.md): a line along one direction may not reach the better
policies, while the probe that motivated adaptation found them among 16 random z's at
cosine ~0.9 to the expert's. Each candidate is independent of the others' returns, so
the choice is the only place the criterion enters.

A third search, `search="cem"`, is the cross-entropy method on the sphere, for budgets
of tens of episodes. On the planner's demonstrations of cheetah, the stored z (the model
given the task's reward) gives episodes closer to the demonstrations in B's space than
ER-FB's z does on every seed, but the line search's direction from ER-FB's z points away
from it (cosine -0.09 to -0.47; docs/results/external/README.md): there the criterion
ranks well and a line does not reach (on walker walk and quadruped walk the criterion
itself puts the stored z farther). Each generation is `population` candidates, the mean
plus Gaussian noise of scale spread x radius / sqrt(d) projected (spread `step`, times
`decay` each generation; candidate 0 of the first generation the start z), each from its
own `states` initial states; the `elites` with the best criterion give the next mean,
their mean projected. The answer after each generation is that mean: an average of the
elites, less exposed to one episode's luck than the best candidate is.

What is kept (`keep`). The search's best candidate is chosen by one episode's criterion
(per initial state), and on the Table 4-sized walker that choice lowered walker walk's
return (ER-FB's z from 61.1% of the planner's to 52.0% with 5 episodes). `keep="clear"`,
the default, keeps the start z unless the evidence is clear: the best candidate replaces
it only if, over its episodes cut into blocks of `block` steps and paired with the
start's blocks (block j of both covers the same steps of episodes from the same initial
states; a candidate whose episode ended early is never clearly better), its
criterion is better by a one-sided paired t-test at level `alpha`. A 1,000-step episode
gives ten blocks of 100 steps; neighbouring blocks are correlated, which makes the test
readier to switch than its level says, never less. `keep="best"` returns the best
candidate whatever the margin (the stages' setting, as they ran). `AdaptResult.kept`
says which was kept after each candidate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from rbfm.checks import in_range
from rbfm.data.demos import Demos
from rbfm.envs import get_domain
from rbfm.errors import ConfigError
from rbfm.evaluation import EnvSpec, RolloutEngine, RolloutResult, fb_policy
from rbfm.fb.model import FBModel
from rbfm.fb.networks import project
from rbfm.inference.expert_demos import demo_embedding

# Each criterion's name in results and task-vector files (`adapt-k5`, `oracle-k5`, ...).
CRITERION_LABELS = {"demos": "adapt", "implied": "implied", "states": "states", "reward": "oracle"}
CRITERIA = tuple(CRITERION_LABELS)
SEARCHES = ("line", "cone", "cem")
KEEPS = ("clear", "best")
# AdaptConfig's counts (integers >= 1), each with its unit in messages.
COUNTS = {"budget": " episodes", "states": "", "population": "", "elites": "", "block": " steps"}
# Adaptation episode k of seed s starts from initial state (s, ADAPT_SEED_OFFSET + k);
# evaluation uses (s, k) with k < its episode count, far below this.
ADAPT_SEED_OFFSET = 1_000_000


@dataclass(frozen=True)
class AdaptConfig:
    budget: int = 10  # episodes in the deployed environment, the start z's included
    # Line: the first step along the matching direction; cem: the first generation's
    # spread; both as a fraction of the radius.
    step: float = 0.5
    shrink: float = 0.5  # step factor after a candidate that does not improve
    criterion: str = "demos"  # "reward" is the oracle: an upper bound, never a method
    states: int = 1  # initial states (episodes) per candidate; budget // states candidates
    # "cone": random candidates at `cosine` to the start z; "cem": the cross-entropy method.
    search: str = "line"
    cosine: float = 0.9
    # "best": the search's answer, however small its margin; "clear": the start z unless the
    # answer is clearly better (line and cone). None: "clear", or "best" for cem, whose
    # answer (its elites' mean) has no episodes of its own to test.
    keep: str | None = None
    block: int = 100  # steps per block of the paired test (`keep="clear"`)
    alpha: float = 0.05  # the test's level
    population: int = 16  # cem: candidates per generation
    elites: int = 4  # cem: the best candidates of a generation, whose mean is the next
    decay: float = 0.8  # cem: the spread's factor per generation

    def searches(self) -> None:
        """Refuses a budget of the start z's episodes alone, which a user asking for an
        adaptation would get back unchanged (a stage's smaller budgets are prefixes of
        one search, and K = states is its first)."""
        if self.budget < 2 * self.states:
            raise ConfigError(
                f"budget: {self.budget} episodes try no z but the start one (valid: at least "
                f"{2 * self.states}, two candidates of states={self.states} episodes)"
            )

    def __post_init__(self) -> None:
        for name, unit in COUNTS.items():
            value = getattr(self, name)
            if isinstance(value, np.integer):  # a count from numpy, recorded as Python's
                object.__setattr__(self, name, value := int(value))
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: {value!r}{unit} (valid: an integer >= 1)")
        in_range("AdaptConfig", "step", self.step, 0.0, 2.0, open_low=True, open_high=False)
        in_range("AdaptConfig", "shrink", self.shrink, 0.0, 1.0, open_low=True, open_high=True)
        if self.budget % self.states:
            raise ConfigError(
                f"states: {self.states} episodes per candidate do not divide the budget of "
                f"{self.budget} episodes ({self.budget % self.states} would go unused; valid: "
                f"a divisor of {self.budget})"
            )
        if self.search not in SEARCHES:
            raise ConfigError(f"search: {self.search!r} (valid: {', '.join(SEARCHES)})")
        in_range("AdaptConfig", "cosine", self.cosine, -1.0, 1.0, open_low=True, open_high=True)
        if self.criterion not in CRITERIA:
            raise ConfigError(f"criterion: {self.criterion!r} (valid: {', '.join(CRITERIA)})")
        if self.keep is None:
            object.__setattr__(self, "keep", "best" if self.search == "cem" else "clear")
        if self.keep not in KEEPS:
            raise ConfigError(f"keep: {self.keep!r} (valid: {', '.join(KEEPS)})")
        if self.elites >= self.population:
            # All of a generation averaged: the next mean would not read the criterion.
            raise ConfigError(
                f"elites: {self.elites} of a population of {self.population} leave none out "
                f"(valid: a population >= 2 and elites 1..population - 1)"
            )
        in_range("AdaptConfig", "decay", self.decay, 0.0, 1.0, open_low=True, open_high=False)
        # A setting the search or the keep rule never reads would be silently ignored:
        # refused.
        for name, owners, used in (
            ("cosine", "search 'cone'", self.search == "cone"),
            ("step", "searches 'line' and 'cem'", self.search != "cone"),
            ("shrink", "search 'line'", self.search == "line"),
            *((n, "search 'cem'", self.search == "cem") for n in ("population", "elites", "decay")),
            *((n, "keep 'clear'", self.keep == "clear") for n in ("block", "alpha")),
        ):
            if not used and getattr(self, name) != getattr(AdaptConfig, name):
                raise ConfigError(
                    f"{name}: {getattr(self, name)!r} is a setting of {owners}; the search is "
                    f"{self.search!r} and keep {self.keep!r} (valid: the default, "
                    f"{getattr(AdaptConfig, name)!r})"
                )
        if self.search == "cem":
            if self.keep == "clear":
                raise ConfigError(
                    "keep: 'clear' tests the answer's episodes against the start z's, and "
                    "search 'cem' answers its elites' mean, which runs none (valid with cem: "
                    "best)"
                )
            per = self.states * self.population
            if self.budget % per:
                raise ConfigError(
                    f"episodes (budget): {self.budget} is not a whole number of cem generations "
                    f"of {self.population} candidates x {self.states} episodes (valid: "
                    f"multiples of {per})"
                )
        in_range("AdaptConfig", "alpha", self.alpha, 0.0, 0.5, open_low=True, open_high=True)


@dataclass(frozen=True)
class AdaptProblem:
    """One adaptation: a start z, the demonstrations' mean B, where and from which seed."""

    z: torch.Tensor  # (d,)
    target: torch.Tensor  # (d,): `demo_embedding` of the demonstrations
    env: EnvSpec
    seed: int = 0
    # `demo_states` of the demonstrations: criterion "states" needs them.
    states: tuple[torch.Tensor, torch.Tensor] | None = None


@dataclass
class AdaptResult:
    z: torch.Tensor  # the answer after the whole budget
    states: int = 1  # episodes per candidate
    candidates: list[torch.Tensor] = field(default_factory=list)
    distances: list[float] = field(default_factory=list)  # d of each candidate
    implied: list[float] = field(default_factory=list)  # mean B(s)^T z0 of each candidate
    # Each candidate's "states" distance; empty without the demonstrations' `demo_states`.
    observed: list[float] = field(default_factory=list)
    # Each candidate's mean task return: recorded for reports; the reward-free search
    # never reads it (tested by adapting on another task's reward).
    returns: list[float] = field(default_factory=list)
    best: list[int] = field(default_factory=list)  # the best candidate after each candidate
    # The candidate kept after each: the best where its margin is clear (`keep`), else 0;
    # empty for cem, whose answer is its elites' mean, not a candidate.
    kept: list[int] = field(default_factory=list)
    answers: list[torch.Tensor] = field(default_factory=list)  # the answer after each
    # Each candidate's criterion per block of its episodes, lower is better (the test's data).
    blocks: list[list[float]] = field(default_factory=list)
    unstable: int = 0  # episodes ended by a physics failure
    seconds: float = 0.0

    @property
    def episodes(self) -> int:
        return len(self.candidates) * self.states

    def z_after(self, episodes: int) -> torch.Tensor:
        """The answer of the same search stopped after `episodes` episodes (of the
        candidates whose episodes all fit; cem's, after its last whole generation)."""
        episodes = int(episodes) if isinstance(episodes, np.integer) else episodes
        if not isinstance(episodes, int) or not self.states <= episodes <= self.episodes:
            raise ConfigError(
                f"episodes: {episodes!r} (valid: an integer {self.states}..{self.episodes})"
            )
        return self.answers[episodes // self.states - 1]


def demo_states(demos: Demos) -> tuple[torch.Tensor, torch.Tensor]:
    """The demonstrations' mean observation (mean over episodes of mean_t s_{t+1}, as
    `demo_embedding`'s B) and the scale criterion "states" divides each dimension by: their
    spread over every state, floored at a tenth of its mean."""
    states = [torch.as_tensor(s, dtype=torch.float32) for s in demos.next_states()]
    spread = torch.cat(states).std(0)
    if not float(spread.mean()) > 0:
        raise ConfigError(
            f"adapt: the {demos.domain}/{demos.task} demonstrations' states do not vary, so "
            "criterion 'states' has no scale (valid: demonstrations of two or more states)"
        )
    mean = torch.stack([s.mean(0) for s in states]).mean(0)
    return mean, spread.clamp_min(0.1 * float(spread.mean()))


def _standard_distance(
    observations: torch.Tensor, states: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """|| (mean - the demonstrations' mean) / their scale || of each row of means."""
    mean, scale = states
    return torch.linalg.vector_norm((observations - mean) / scale, dim=-1)


def _features(model: FBModel, observations: np.ndarray) -> torch.Tensor:
    """B of each state of an episode, (T, d), on the CPU."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return model.backward_map(torch.as_tensor(observations, device=device)).cpu()


def _block_scores(  # type: ignore[no-untyped-def]
    cfg: AdaptConfig,
    target: torch.Tensor,
    z0: torch.Tensor,
    feats: list[torch.Tensor],
    traj,
    rows: range,
    n: np.ndarray,
    slots: int,
    states: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> list[float]:
    """The criterion on each whole block of `cfg.block` steps of the candidate's episodes,
    in episode then time order, signed so that lower is better: the B distance of the
    block's mean to the demonstrations', minus the block's mean implied reward, the
    "states" distance of its mean observation (`states`: `demo_states`), or minus its
    return (the oracle). Each episode has `slots` places, its length's at full length,
    so that place j is the same (episode, block) for every candidate: the blocks an
    episode ended early (a physics failure) did not reach are NaN, as is a trailing part
    block's place."""
    scores = []
    for f, e in zip(feats, rows, strict=True):
        whole = (len(f) // cfg.block) * cfg.block
        if cfg.criterion == "reward":
            per = -np.asarray(traj[e]["reward"][: n[e]][:whole], dtype=np.float64)
            mine = per.reshape(-1, cfg.block).sum(1).tolist()
        elif cfg.criterion == "states":
            assert states is not None
            obs = torch.as_tensor(traj[e]["observation"][1 : n[e] + 1][:whole], dtype=torch.float32)
            means = obs.reshape(-1, cfg.block, obs.shape[1]).mean(1)
            mine = _standard_distance(means, states).tolist()
        else:
            means = f[:whole].reshape(-1, cfg.block, f.shape[1]).mean(1)
            if cfg.criterion == "demos":
                mine = torch.linalg.vector_norm(target.cpu().float() - means, dim=1).tolist()
            else:
                mine = (-(means @ z0)).tolist()
        scores += mine + [math.nan] * (slots - len(mine))
    return scores


def clearly_better(candidate: Sequence[float], start: Sequence[float], alpha: float) -> bool:
    """One-sided paired t-test that the candidate's block scores are below the start's
    (lower is better): True only with at least two pairs and p < alpha. Pairs are place j
    of both, the same block of episodes from the same initial states (`_block_scores`);
    a candidate with a block missing (an episode it ended early) is never clearly better,
    and a place the start's episodes did not reach is left out."""
    from scipy import stats

    cand, base = np.asarray(candidate, dtype=np.float64), np.asarray(start, dtype=np.float64)
    if len(cand) != len(base) or not np.isfinite(cand).all():
        return False
    both = np.isfinite(base)
    m = int(both.sum())
    if m < 2:
        return False
    gain = base[both] - cand[both]
    mean, sd = float(gain.mean()), float(gain.std(ddof=1))
    if sd <= 1e-12 * abs(mean):  # the same margin on every block: clear if it is a gain
        return mean > 0.0
    return bool(stats.t.sf(mean / (sd / math.sqrt(m)), m - 1) < alpha)


def adapt_many(
    model: FBModel,
    problems: Sequence[AdaptProblem],
    cfg: AdaptConfig,
    engine: RolloutEngine | None = None,
    progress: bool = False,
) -> list[AdaptResult]:
    """Adapts every problem, their episodes run together: episode k of every problem in
    one lockstep batch. Each problem's result is what `adapt` alone gives."""
    if not problems:
        raise ConfigError("adapt: no problems given")
    domain = problems[0].env.domain
    others = sorted({p.env.domain for p in problems} - {domain})
    if others:
        raise ConfigError(f"adapt: one call adapts one domain's problems ({domain}, not {others})")
    _check_model(model, domain)
    d = model.cfg.z_dim
    for i, p in enumerate(problems):
        for what, t in (("start z", p.z), ("demonstrations' mean B", p.target)):
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            if shape != (d,):
                raise ConfigError(
                    f"adapt: problem {i}'s {what} is {shape}; the model's z is ({d},) (valid: a "
                    f"finite ({d},) torch tensor); no episode run"
                )
        if not (torch.isfinite(p.z).all() and torch.isfinite(p.target).all()):
            what = "start z" if not torch.isfinite(p.z).all() else "demonstrations' mean B"
            raise ConfigError(f"adapt: problem {i}'s {what} is not finite; no episode run")
        if cfg.criterion == "states" and p.states is None:
            raise ConfigError(
                f"adapt: criterion 'states' and problem {i} has no demonstrations' states "
                "(AdaptProblem.states: rbfm.inference.adapt.demo_states); no episode run"
            )
        norm = float(torch.linalg.vector_norm(p.z.double()))
        if not norm > 0:
            raise ConfigError(f"adapt: problem {i}'s start z is zero; no episode run")
        # Searched in the model's precision: a norm it cannot square (float32 overflows
        # past ~1e19) or one below normalize's floor would not land on the sphere.
        on_sphere = float(torch.linalg.vector_norm(project(p.z, model.radius).double()))
        if not abs(on_sphere - model.radius) <= 1e-3 * model.radius:
            raise ConfigError(
                f"adapt: problem {i}'s start z has norm {norm:.3g}, which {p.z.dtype} cannot "
                f"project onto the sphere of radius {model.radius:.4g} (valid: a norm in about "
                "[1e-12, 1e19]; every rbfm inference returns z on the sphere); no episode run"
            )
    length = get_domain(domain).episode_length
    if cfg.keep == "clear" and length // cfg.block < 2:
        raise ConfigError(
            f"block: {cfg.block} steps leave {length // cfg.block} block(s) per {length}-step "
            f"{domain} episode; the paired test needs >= 2 (valid: 1..{length // 2})"
        )
    start = time.perf_counter()
    radius = model.radius
    results = [
        AdaptResult(z=project(p.z.detach().cpu().float(), radius), states=cfg.states)
        for p in problems
    ]
    m = cfg.states
    # Candidates per problem and round: a cem generation, else one.
    per = cfg.population if cfg.search == "cem" else 1
    step = [cfg.step] * len(problems)
    means: list[list[torch.Tensor]] = [[] for _ in problems]
    cem = [_Cem(r.z, cfg.step, p.seed) for r, p in zip(results, problems, strict=True)]
    own = engine is None
    engine = engine or RolloutEngine(0)
    try:
        rounds = cfg.budget // (m * per)
        for k in range(rounds):
            cands = [
                c.propose(k, cfg.population, radius)
                if cfg.search == "cem"
                else [
                    _propose(r, mu, p, s, radius)
                    if cfg.search == "line"
                    else _cone(r, p, k, cfg.cosine, radius)
                ]
                for r, mu, p, s, c in zip(results, means, problems, step, cem, strict=True)
            ]
            # Line and cone candidates share the problem's initial states (paired
            # comparisons); each cem candidate has its own.
            first = [(k * per + c) * m if cfg.search == "cem" else 0 for c in range(per)]
            zs = torch.stack([z for c in cands for z in c]).repeat_interleave(m, 0)
            seeds = [(p.seed, ADAPT_SEED_OFFSET + f + j) for p in problems for f in first
                     for j in range(m)]  # fmt: skip
            res = engine.run(
                [p.env for p in problems for _ in range(per * m)],
                fb_policy(model, zs),
                seeds=seeds,
                record=True,
                progress=f"adaptation round {k + 1}/{rounds}" if progress else None,
            )
            assert res.trajectories is not None
            for i, (r, p) in enumerate(zip(results, problems, strict=True)):
                for c, cand in enumerate(cands[i]):
                    first_row = (i * per + c) * m
                    mu = _record(model, cfg, r, p, cand, res, range(first_row, first_row + m))
                    means[i].append(mu)
                    score = _scores(cfg, r)
                    best = int(np.argmin(score))  # ties: the earliest, the start z first
                    if cfg.search != "cem":
                        if k > 0 and best == r.best[-1]:
                            step[i] *= cfg.shrink  # no gain: a shorter step along the same line
                        clear = cfg.keep == "best" or clearly_better(
                            r.blocks[best], r.blocks[0], cfg.alpha
                        )
                        r.kept.append(best if clear else 0)
                        r.z = r.candidates[r.kept[-1]]
                    elif c == per - 1:  # the generation is whole: its elites' mean
                        r.z = cem[i].update(np.asarray(score[-per:]), cands[i], cfg, radius)
                    r.best.append(best)
                    r.answers.append(r.z)
    finally:
        if own:
            engine.close()
    seconds = time.perf_counter() - start
    for r in results:
        r.seconds = seconds / len(results)
    return results


def _record(
    model: FBModel,
    cfg: AdaptConfig,
    r: AdaptResult,
    p: AdaptProblem,
    cand: torch.Tensor,
    res: RolloutResult,
    rows: range,
) -> torch.Tensor:
    """Adds a candidate and what its episodes (`rows` of `res`) showed to `r`; returns the
    mean over its episodes of mean_t B(s_t). Episodes a physics failure ended at their
    first step have no state and are left out of the mean (their blocks stay missing, so
    the candidate is never clearly better); a candidate with no state at all is refused."""
    assert res.trajectories is not None
    traj, n = res.trajectories, res.lengths
    feats = [_features(model, traj[e]["observation"][1 : n[e] + 1]) for e in rows]
    seen = [f.mean(0) for f in feats if len(f)]
    if not seen:
        raise ConfigError(
            f"adapt: every episode of candidate {len(r.candidates)} in {p.env} ended by a "
            "physics failure at its first step: the environment cannot run pi_z there"
        )
    mu = torch.stack(seen).mean(0)
    distance = float(torch.linalg.vector_norm(p.target.cpu().float() - mu))
    if not math.isfinite(distance):
        raise ConfigError(
            f"adapt: the model's B of the states pi_z visited in {p.env} is not finite"
        )
    r.candidates.append(cand)
    r.distances.append(distance)
    r.implied.append(float(mu @ r.candidates[0]))
    if p.states is not None:
        obs = [torch.as_tensor(traj[e]["observation"][1 : n[e] + 1], dtype=torch.float32)
               for e in rows if n[e] > 0]  # fmt: skip
        r.observed.append(
            float(_standard_distance(torch.stack([o.mean(0) for o in obs]).mean(0), p.states))
        )
    r.returns.append(float(res.returns[rows.start : rows.stop].mean()))
    r.unstable += int(res.unstable[rows.start : rows.stop].sum())
    slots = get_domain(p.env.domain).episode_length // cfg.block
    r.blocks.append(
        _block_scores(cfg, p.target, r.candidates[0], feats, traj, rows, n, slots, p.states)
    )
    return mu


def _scores(cfg: AdaptConfig, r: AdaptResult) -> list[float]:
    """Every candidate's criterion so far, lower is better."""
    return {
        "demos": r.distances,
        "implied": [-x for x in r.implied],
        "states": r.observed,
        "reward": [-x for x in r.returns],
    }[cfg.criterion]


class _Cem:
    """One problem's cross-entropy search: its mean, spread and noise."""

    def __init__(self, z0: torch.Tensor, spread: float, seed: int) -> None:
        self.z0, self.mean, self.spread = z0, z0, spread
        self.gen = torch.Generator().manual_seed(seed)

    def propose(self, k: int, population: int, radius: float) -> list[torch.Tensor]:
        """Generation k: the mean plus noise of scale spread x radius / sqrt(d), projected;
        the first generation's candidate 0 is the start z."""
        d = self.mean.shape[0]
        noise = torch.randn(population, d, generator=self.gen) * self.spread * radius / d**0.5
        zs = list(project(self.mean + noise, radius))
        if k == 0:
            zs[0] = self.z0
        return zs

    def update(
        self, scores: np.ndarray, cands: list[torch.Tensor], cfg: AdaptConfig, radius: float
    ) -> torch.Tensor:
        """The next mean, of the generation's `elites` best candidates, projected."""
        elite = torch.stack([cands[j] for j in np.argsort(scores, kind="stable")[: cfg.elites]])
        self.mean = project(elite.mean(0), radius)
        self.spread *= cfg.decay
        return self.mean


def _check_model(model: FBModel, domain: str) -> None:
    obs_dim = get_domain(domain).obs_dim
    if model.obs_dim != obs_dim:
        raise ConfigError(
            f"adapt: the environment is {domain} ({obs_dim}-dim observations) but the model "
            f"takes {model.obs_dim}-dim observations: a model of another domain"
        )


def _propose(
    r: AdaptResult, means: list[torch.Tensor], p: AdaptProblem, step: float, radius: float
) -> torch.Tensor:
    """The next candidate: the start z first, then a step from the best so far along the
    feature-matching direction computed at the best."""
    if not r.candidates:
        return r.z
    best = r.best[-1]
    g = p.target.cpu().float() - means[best]
    norm = float(torch.linalg.vector_norm(g))
    if norm == 0.0:
        return r.candidates[best]
    return project(r.candidates[best] + step * radius * g / norm, radius)


def _cone(r: AdaptResult, p: AdaptProblem, k: int, cosine: float, radius: float) -> torch.Tensor:
    """Candidate k of the cone search: the start z first, then the start rotated to
    `cosine` towards a random direction orthogonal to it (from the problem's seed)."""
    if k == 0:
        return r.z
    z0 = r.candidates[0] / radius
    rng = np.random.default_rng([p.seed, ADAPT_SEED_OFFSET, k])
    u = torch.as_tensor(rng.standard_normal(z0.shape[0]), dtype=z0.dtype)
    u = u - (u @ z0) * z0
    u = u / torch.linalg.vector_norm(u)
    return project(cosine * z0 + math.sqrt(1.0 - cosine**2) * u, radius)


def adapt(
    model: FBModel,
    demos: Demos,
    z: torch.Tensor,
    env: EnvSpec,
    cfg: AdaptConfig | None = None,
    seed: int = 0,
    engine: RolloutEngine | None = None,
    progress: bool = False,
) -> AdaptResult:
    """Adapts `z` (from any inference method) with `cfg.budget` episodes in `env`, matching
    the demonstrations' states in B's space (or their observations' mean: criterion
    "states"); never reads a reward (but for the oracle)."""
    if demos.domain != env.domain:
        raise ConfigError(
            f"adapt: demonstrations of {demos.domain} for an environment of {env.domain}"
        )
    _check_model(model, env.domain)
    cfg = cfg or AdaptConfig()
    states = demo_states(demos) if cfg.criterion == "states" else None
    problem = AdaptProblem(z, demo_embedding(model, demos), env, seed, states)
    return adapt_many(model, [problem], cfg, engine, progress)[0]
