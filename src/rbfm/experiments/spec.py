"""Experiment specs: which models, tasks, perturbations, methods, seeds and episodes.

A spec is a named preset (`smoke`, `cpu`, `slice`, `paper`, ...) or a TOML file with
the same fields (TOML because Python reads it without a dependency). Planning it
(`rbfm.experiments.plan.plan`) checks every field against what exists (domains, tasks,
families, methods and their config fields, checkpoints) before any work starts, and
names the field in its errors.
Its fields, with a tested example: docs/spec.md.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rbfm import EVAL_SEED
from rbfm.envs import TASKS, families, get_perturbation
from rbfm.errors import ConfigError
from rbfm.methods import BASELINE_METHODS, FB_METHODS, NAMES, check_named

# Expert sources: who demonstrates the task. "own" is the paper's protocol, the
# model's own deterministic pi_{z_e}, which its z_e reproduces to ~1e-12, so every
# method's objective shares that minimiser. "noisy" adds N(0, NOISY_STD^2) to each action,
# clipped to [-1, 1]: 0.3 is 15% of the action range, enough that no z reproduces the
# demonstrations (FB-IL's nominal loss 0.3-0.6 against ~1e-12) while the expert still
# does the task (docs/inference.md: its returns). "model:NAME" is the reward-inferred
# policy of another FB model of the same domain (a shipped name such as "walker:aps", or
# a checkpoint path): an independent expert. "noisy:NAME" is NAME's policy with the noisy
# expert's noise (NAME may be the model itself): several models imitating one model's
# noisy demonstrations, the same episodes for all (same expert, z, noise and seed).
# "mpc" is the MPPI planner on the true simulator with the task's reward
# (`rbfm.planning`): a demonstrator from outside every FB model, whose ceiling under a
# shift is the same planner inside the shifted simulator.
NOISY_STD = 0.3
EXPERT_KINDS = ("own", "noisy", "model:NAME", "noisy:NAME", "mpc")


@dataclass(frozen=True)
class ModelEntry:
    domain: str
    dataset: str = "rnd"
    checkpoint: str = "shipped"
    tasks: tuple[str, ...] = ()  # () = all of the domain's
    families: tuple[str, ...] = ()  # () = all of the domain's; ("none",) = nominal only
    levels: int | dict[str, tuple[float, ...]] = 6
    # () = the spec's expert sources; else this model's own (a "model:NAME" expert is of
    # one domain, so a spec over several domains names each model's independent expert).
    experts: tuple[str, ...] = ()


@dataclass(frozen=True)
class MethodEntry:
    name: str
    eps: tuple[float, ...] = ()  # () = the method's default; several = one variant each
    overrides: dict[str, Any] = field(default_factory=dict)
    preset: str = "cpu"  # baselines: "paper" (Tables 8-9) or "cpu"
    # FB methods: the named inference settings, "default" (converged) or "paper"
    # (Tables 5-7); rbfm.inference.SETTINGS. Results name the paper's as "paper".
    settings: str = "default"
    tasks: tuple[str, ...] = ()  # () = every task of every model
    families: tuple[str, ...] = ()  # () = every family of every model
    datasets: tuple[str, ...] = ()  # () = every model; else the models of these data labels


@dataclass(frozen=True)
class AdaptEntry:
    """Reward-free adaptation (`rbfm.inference.adapt`) of FB task vectors in each
    evaluated environment; each budget in `evaluate` is evaluated like a task vector and
    named `adapt-kK` (`implied-kK` for the implied-reward criterion, `oracle-kK` for the
    reward oracle) in the results' variant."""

    budget: int = 10
    evaluate: tuple[int, ...] = (2, 5, 10)
    criterion: str = "demos"
    states: int = 1
    search: str = "line"  # or "cone" (AdaptConfig); results: adapt-cone-kK, oracle-cone-kK
    methods: tuple[str, ...] = ("fbil",)
    datasets: tuple[str, ...] = ()  # () = every model; else the models of these labels

    @property
    def label(self) -> str:
        from rbfm.inference.adapt import CRITERION_LABELS

        kind = CRITERION_LABELS[self.criterion]
        label = kind if self.search == "line" else f"{kind}-{self.search}"
        return label if self.states == 1 else f"{label}-s{self.states}"


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    models: tuple[ModelEntry, ...]
    methods: tuple[MethodEntry, ...]
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    demos: int = 200
    num_demos: int = 4
    episodes: int = 100
    eval_seed: int = EVAL_SEED  # evaluation initial states: (eval_seed, k), the same for all
    demo_seed: int = 0
    experts: tuple[str, ...] = ("own",)  # EXPERT_KINDS; one demonstration set each
    # Evaluate each expert itself at every (family, level) its imitators are evaluated at:
    # the ceiling to read them against (experts.csv).
    ceiling: bool = True
    bf16: bool = False  # FB methods: a bfloat16 actor copy (faster on CPUs with AMX)
    # Critic steps per radius of each policy's Heavy robustness certificate (0: none).
    # Certificates are cells of their own: turned on for a run whose inferences are done,
    # they are all that is computed.
    certificate_steps: int = 1000
    adapt: tuple[AdaptEntry, ...] = ()
    # The "mpc" expert: overrides of each domain's planner preset (rbfm.planning.PRESETS),
    # and its ceiling. A planner episode costs 15-300 s on 2 cores, so the ceiling plans
    # `planner_episodes` per cell at nominal and at the `planner_levels` strongest
    # evaluated levels of each family only, from the planner's stream demo_seed + 1.
    mpc: dict[str, Any] = field(default_factory=dict)
    planner_episodes: int = 2
    planner_levels: int = 2
    # Model names read as other models, for the models and experts that name them: a
    # preset computed on an earlier default keeps it under the name it ran with (its
    # results label experts by the names written here). Presets only, not TOML.
    pins: dict[str, str] = field(default_factory=dict)


def _methods(
    *names: str, baselines_on: tuple[str, ...] = (), preset: str = "cpu"
) -> tuple[MethodEntry, ...]:
    fb = tuple(MethodEntry(m) for m in names if m in FB_METHODS)
    base = tuple(
        MethodEntry(m, preset=preset, tasks=baselines_on) for m in names if m in BASELINE_METHODS
    )
    return fb + base


# The laptop-sized presets use the `cpu`-sized cheetah: the default one has Table 4's
# sizes, and `smoke` took 214 s on it against 14-19 s.
CPU_CHEETAH = "cheetah:rnd-v1"

# The grid (docs/results.md) at CPU scale. bf16: the inference's actor passes in bfloat16 (a copy;
# evaluation stays float32). On this project's 2-core AMD EPYC (avx512_bf16, no AMX) one
# forward+backward pass over 4,000 demonstrated states costs 0.35 s instead of 1.30 s
# for the paper-size quadruped actor and 0.023 s instead of 0.066 s for a `cpu`-size
# walker's, and whole inferences on quadruped jump took 24-38 s instead of 146-163 s,
# all converged: without it the paper-size models' 240 inferences alone would take ~10
# hours of one core. On CPUs without bfloat16 units (avx2 only) the copy's Linears run in
# float32 from bfloat16 values (rbfm.inference.common), the same arithmetic: torch's generic
# bfloat16 kernel made a quadruped inference ~100x slower there. Certificates off: their
# critic fits cost more than the inference (docs/inference.md measures each method's own
# objective exactly instead).
# The paper's models (Section 4): walker on RND, APS and ProtoRL, quadruped and cheetah on
# RND, each domain's shipped model for that data.
PAPER_MODELS = (
    ModelEntry("walker", "rnd"),
    ModelEntry("walker", "aps"),
    ModelEntry("walker", "proto"),
    ModelEntry("quadruped", "rnd"),
    ModelEntry("cheetah", "rnd"),
)
# Q1's tasks: one per domain (the paper's Figures 5-6 and the quickstart's).
Q1_MODELS = (
    ModelEntry("walker", tasks=("flip",)),
    ModelEntry("quadruped", tasks=("jump",)),
    ModelEntry("cheetah", tasks=("run",)),
)
CPU_GRID: dict[str, Any] = {
    "episodes": 20,
    "experts": ("own", "noisy"),
    "bf16": True,
    "certificate_steps": 0,
}


# Robustness from the model: per domain, the nominal comparison model (the `cpu`-sized
# model whose data and recipe the diverse ones repeat) and the models pretrained on
# dynamics-diverse data with that recipe (docs/models.md: plain FB, and FB with a context
# of the last 8 steps). Every model imitates the same demonstrations: the nominal model's
# noisy expert, and an independent expert (another model of the domain, noiseless).
# Quadruped's diverse models ship at 0.23x and 0.28x the nominal model's selection IQM.
SHIFT_DOMAINS = {
    "cheetah": ("rnd-v1", "cheetah:cpu", ("rnd-rand", "rnd-rand-ctx")),
    "quadruped": ("rnd-v2", "quadruped:rnd-v1", ("rnd-rand", "rnd-rand-ctx")),
    "walker": ("rnd", "walker:rnd-v4", ("rnd-rand", "rnd-rand-ctx")),
}


def _shift_models(domain: str, independent: bool = True) -> tuple[ModelEntry, ...]:
    nominal, other, diverse = SHIFT_DOMAINS[domain]
    experts = (f"noisy:{domain}:{nominal}", *([f"model:{other}"] if independent else []))
    return tuple(
        ModelEntry(domain, label, checkpoint=f"{domain}:{label}", experts=experts)
        for label in (nominal, *diverse)
    )


# Adapting to the dynamics met: FB-IL's and RBFM-Light's task vectors adapted with
# K = 2, 5 and 10 reward-free episodes at every evaluated level, and the reward oracle's
# search at the same budgets (rbfm.inference.adapt; settings fixed before any grid ran).
ADAPT = (
    AdaptEntry(budget=10, evaluate=(2, 5, 10), methods=("fbil", "rbfm-light")),
    AdaptEntry(budget=10, evaluate=(2, 5, 10), criterion="reward", methods=("fbil",)),
)


# The slices' models: each domain's `cpu`-sized nominal comparison model (label, checkpoint;
# "shipped" = the domain's default, which `_on_cpu_walker` makes the `cpu`-sized walker).
ADAPT_SLICE_MODELS = {
    "walker": ("rnd", "shipped"),
    "quadruped": ("rnd-v2", "quadruped:rnd-v2"),
    "cheetah": ("rnd-v1", "cheetah:rnd-v1"),
}


def _ends(domain: str) -> dict[str, tuple[float, ...]]:
    """Each family's nominal and two strongest levels (where the adaptation goal reads)."""
    levels = {f: get_perturbation(domain, f).levels for f in families(domain)}
    return {f: (lv[0], *lv[-2:]) for f, lv in levels.items()}


# Q1 with independent experts: each domain's RND model imitating the reward-inferred
# policy of another FB model of its domain: noiseless demonstrations that no z of the
# imitating model reproduces (walker: `walker:rnd-v4`, the `cpu` walker's data and
# recipe on another seed, zero-shot close to it on every task, so all four tasks;
# quadruped and cheetah: `quadruped:rnd-v2` and `cheetah:rnd-v1`, `cpu`-sized models of
# other RND data, on each domain's first task, stand
# and walk, where those return 725 and 500 zero-shot, docs/models.md; at cheetah run
# the other RND cheetah returns 105).
INDEPENDENT_MODELS = (
    ModelEntry("walker", experts=("model:walker:rnd-v4",)),
    ModelEntry("quadruped", tasks=("stand",), experts=("model:quadruped:rnd-v2",)),
    ModelEntry("cheetah", tasks=("walk",), experts=("model:cheetah:rnd-v1",)),
)


def _adapt_slice(
    name: str, domain: str, label: str, checkpoint: str, search: str, states: int = 1
) -> ExperimentSpec:
    """FB-IL adapted on one model at nominal and the two strongest levels, noisy expert;
    the cone search also chooses among its candidates by the implied reward. With
    `states` > 1 each candidate is judged on that many initial states, at K = 10 only."""
    entries: tuple[AdaptEntry, ...] = ADAPT
    if search == "cone":
        entries = (*ADAPT, AdaptEntry(criterion="implied"))
    if states > 1:
        entries = tuple(dataclasses.replace(a, states=states, evaluate=(10,)) for a in entries)
    return ExperimentSpec(
        name=name,
        models=(ModelEntry(domain, label, checkpoint=checkpoint, levels=_ends(domain)),),
        methods=(MethodEntry("fbil"),),
        adapt=tuple(dataclasses.replace(a, methods=("fbil",), search=search) for a in entries),
        **{**CPU_GRID, "experts": ("noisy",)},
    )


def _grid(name: str, models: tuple[ModelEntry, ...]) -> ExperimentSpec:
    """The grid on some of the paper's models: FB methods at their defaults, RBFM-Light and
    RBFM-Heavy also at the paper's settings on RND data, and the baselines on walker body
    mass with RND data (where the models include walker)."""
    baselines = tuple(
        MethodEntry(m, families=("body_mass",), datasets=("rnd",))
        for m in BASELINE_METHODS
        if any(e.domain == "walker" for e in models)
    )
    paper = tuple(
        MethodEntry(m, settings="paper", datasets=("rnd",)) for m in ("rbfm-light", "rbfm-heavy")
    )
    return ExperimentSpec(
        name=name, models=models, methods=(*_methods(*FB_METHODS), *paper, *baselines), **CPU_GRID
    )


# Demonstrations from outside every model: the MPPI planner on the true simulator, 8
# episodes per task at nominal physics (4 drawn per seed), imitated by the domain's
# default model with the paper's three methods and the reward- and goal-based reductions
# (the two that beat FB-IL on six of seven tasks at nominal), by the
# baselines on walker (as Q2), with FB-IL's and ER-FB's z adapted at the `adapt` stage's
# budgets, and by the domain's dynamics-diverse models with FB-IL. The ceiling is the
# planner inside the shifted simulator at nominal and each family's two strongest levels.
# One stage per domain (a planner ceiling costs minutes an episode); settings fixed
# before the grid ran.
EXTERNAL_ADAPT = (AdaptEntry(budget=10, evaluate=(2, 5, 10), methods=("fbil", "er")),)


def _external(domain: str) -> ExperimentSpec:
    default = ("rnd",)
    diverse = SHIFT_DOMAINS[domain][2]
    baselines = tuple(
        MethodEntry(m, preset="cpu", datasets=default)
        for m in BASELINE_METHODS
        if domain == "walker"
    )
    return ExperimentSpec(
        name=f"external-{domain}",
        models=(
            ModelEntry(domain),
            *(ModelEntry(domain, x, checkpoint=f"{domain}:{x}") for x in diverse),
        ),
        methods=(
            MethodEntry("fbil"),
            *(MethodEntry(m, datasets=default) for m in ("rbfm-light", "rbfm-heavy", "er", "goal")),
            *baselines,
        ),
        adapt=tuple(dataclasses.replace(a, datasets=default) for a in EXTERNAL_ADAPT),
        demos=8,
        **{**CPU_GRID, "experts": ("mpc",)},
    )


PRESETS: dict[str, ExperimentSpec] = {
    # Seconds on a laptop: the pipeline end to end on a shipped cheetah model.
    "smoke": ExperimentSpec(
        name="smoke",
        models=(
            ModelEntry(
                "cheetah",
                checkpoint=CPU_CHEETAH,
                tasks=("walk", "run"),
                families=("joint_friction",),
                levels=2,
            ),
        ),
        methods=(
            MethodEntry("fbil", overrides={"steps": 50}),
            MethodEntry("rbfm-heavy", overrides={"steps": 50}),
        ),
        seeds=(0, 1),
        demos=4,
        num_demos=2,
        episodes=2,
        certificate_steps=50,
    ),
    # One real slice: cheetah walk under joint friction, all five
    # methods at their default settings, the baselines at their cpu presets.
    "slice": ExperimentSpec(
        name="slice",
        models=(
            ModelEntry(
                "cheetah", checkpoint=CPU_CHEETAH, tasks=("walk",), families=("joint_friction",)
            ),
        ),
        methods=_methods(*NAMES),
        episodes=20,
    ),
    # The paper's protocol on the `cpu`-sized shipped cheetah (docs/imitation.md runs it on
    # `cheetah:cpu`): four tasks, three families, five methods (baselines on
    # walk), 5 seeds x 20 episodes per level.
    "cpu": ExperimentSpec(
        name="cpu",
        models=(ModelEntry("cheetah", checkpoint=CPU_CHEETAH),),
        methods=_methods(*NAMES, baselines_on=("walk",)),
        episodes=20,
    ),
    # The converged default settings against the paper's, one
    # (task, family) per domain (those of the paper's Figures 5-6 and the cheetah
    # quickstart), all 6 levels, 5 seeds x 20 episodes, on the model's own demonstrations
    # (where converged methods all return the expert) and on noisy ones (where they need
    # not). No certificates: their MLP critic fits would cost more than the whole
    # inference, and docs/inference.md measures each method's own objective exactly.
    # Its models are pinned to those it was measured on (`cheetah:rnd-v1`, `walker:rnd-v1`,
    # `quadruped:rnd-v1`), so that rerunning the preset measures the same models.
    "converge": ExperimentSpec(
        name="converge",
        models=(
            ModelEntry(
                "cheetah", checkpoint="cheetah:rnd-v1", tasks=("run",), families=("joint_friction",)
            ),
            ModelEntry(
                "walker", checkpoint="walker:rnd-v1", tasks=("flip",), families=("joint_friction",)
            ),
            ModelEntry(
                "quadruped",
                checkpoint="quadruped:rnd-v1",
                tasks=("jump",),
                families=("contact_stiffness",),
            ),
        ),
        methods=(
            *_methods(*FB_METHODS),
            *(MethodEntry(m, settings="paper") for m in FB_METHODS),
        ),
        episodes=20,
        experts=("own", "noisy"),
        certificate_steps=0,
    ),
    # The grid of docs/results.md, in the stages `docs/results/run.sh` runs in order into one run
    # directory (cells are content-addressed, so a stage reuses every cell an earlier one
    # computed). At CPU scale: 20 evaluation episodes per level (the paper: 100), 5 seeds,
    # the model's own expert and the noisy one (figures and IQMs per source), FB methods
    # with a bfloat16 actor copy for inference (CPU_GRID below), no certificates.
    # Q1 on each domain's default model (walker's: the `cpu` walker, `_on_cpu_walker`), one
    # task each (the paper's Figures 5-6 and the quickstart's), every family at all 6 levels.
    "q1": ExperimentSpec(
        name="q1",
        models=Q1_MODELS,
        methods=_methods(*FB_METHODS),
        **CPU_GRID,
    ),
    # Q5: RBFM-Heavy's eps on quadruped jump under contact stiffness (Figure 6).
    "eps": ExperimentSpec(
        name="eps",
        models=(ModelEntry("quadruped", tasks=("jump",), families=("contact_stiffness",)),),
        methods=(MethodEntry("rbfm-heavy", eps=(0.2, 0.4, 0.6, 0.8, 1.0)),),
        **CPU_GRID,
    ),
    # Q4, data size: walker flip under joint friction, FB models pretrained on 100k, 500k
    # and 1M RND transitions (Figure 5 of the paper); models shipped as walker_rnd-100k...
    "datasize": ExperimentSpec(
        name="datasize",
        models=tuple(
            ModelEntry("walker", label, tasks=("flip",), families=("joint_friction",))
            # One collection: its first 100k and 500k transitions, and all of it
            # (`walker:rnd-v1` and `walker:rnd-v2` trained on a sibling collection made by
            # the same command on another machine; docs/models.md).
            for label in ("rnd-100k", "rnd-500k", "rnd-1m")
        ),
        methods=_methods(*FB_METHODS),
        **CPU_GRID,
    ),
    # Q2: DRBC and BE-DROIL against the FB methods on walker body mass with RND data
    # (Figure 5), the baselines at their `cpu` presets: the `paper` presets' 2M and 1M
    # updates cost hours per policy on this machine (benchmarks/inference.py).
    "q2": ExperimentSpec(
        name="q2",
        models=(ModelEntry("walker", tasks=("flip",), families=("body_mass",)),),
        methods=_methods(*NAMES),
        **CPU_GRID,
    ),
    # Q4, data source: walker on RND, APS and ProtoRL data (Figures 7-8), flip under every
    # family. RND is `rnd-1m`, not the default walker: its explorer has APS's and ProtoRL's
    # (`cpu`) sizes and its recipe is ProtoRL's (40k cosine), where the default walker's
    # data come from a wider explorer and a longer run, which would confound source with both.
    "sources": ExperimentSpec(
        name="sources",
        models=tuple(
            ModelEntry("walker", label, tasks=("flip",)) for label in ("rnd-1m", "aps", "proto")
        ),
        methods=_methods(*FB_METHODS),
        **CPU_GRID,
    ),
    # Robustness certificates (`rbfm.experiments.certificate`) of every policy of `q1` and
    # `q2`, whose cells these are: only the certificates are computed, 110 policies at
    # ~34 s each on one core (the Heavy bound fitted for up to 1,000 steps at each radius
    # where its ball binds; measured on walker and quadruped policies).
    "certify": ExperimentSpec(
        name="certify",
        models=Q1_MODELS,
        methods=(
            *_methods(*FB_METHODS),
            *(MethodEntry(m, tasks=("flip",), families=("body_mass",)) for m in BASELINE_METHODS),
        ),
        **{**CPU_GRID, "certificate_steps": 1000},
    ),
    # Q1 with independent experts (INDEPENDENT_MODELS): FB methods at their defaults,
    # every family.
    "independent": ExperimentSpec(
        name="independent",
        models=INDEPENDENT_MODELS,
        methods=_methods(*FB_METHODS),
        **CPU_GRID,
    ),
    # The whole grid at CPU scale (Section 4): the paper's models, every task and family;
    # the paper-settings variants of RBFM-Light and RBFM-Heavy on the RND models; the
    # baselines at their `cpu` presets on walker body mass with RND data. Run as one stage
    # per domain (below; their cost on 2 cores: docs/results/protocol.md's stage table) so
    # that each domain's results are complete before the next domain starts.
    "grid": _grid("grid", PAPER_MODELS),
    **{
        f"grid-{domain}": _grid(
            f"grid-{domain}", tuple(m for m in PAPER_MODELS if m.domain == domain)
        )
        for domain in ("walker", "quadruped", "cheetah")
    },
    # Robustness from the model (docs/results.md): every FB method, both experts.
    "shift": ExperimentSpec(
        name="shift",
        models=tuple(m for domain in SHIFT_DOMAINS for m in _shift_models(domain)),
        methods=_methods(*FB_METHODS),
        **CPU_GRID,
    ),
    # The same, one domain at a time, so that each domain's results are complete before
    # the next domain starts.
    **{
        f"shift-{domain}": ExperimentSpec(
            name=f"shift-{domain}",
            models=_shift_models(domain),
            methods=_methods(*FB_METHODS),
            **CPU_GRID,
        )
        for domain in SHIFT_DOMAINS
    },
    # Its FB-IL cells on the noisy demonstrations: what the goal reads, first.
    **{
        f"shift-fbil-{domain}": ExperimentSpec(
            name=f"shift-fbil-{domain}",
            models=_shift_models(domain, independent=False),
            methods=(MethodEntry("fbil"),),
            **CPU_GRID,
        )
        for domain in SHIFT_DOMAINS
    },
    # The same models each imitating its own noisy expert (demonstrations differ between
    # models; the nominal model's are those of `shift-fbil-*`): whether a model whose
    # policies differ from the nominal model's imitates its own better.
    **{
        f"shift-own-fbil-{domain}": ExperimentSpec(
            name=f"shift-own-fbil-{domain}",
            models=tuple(
                dataclasses.replace(m, experts=("noisy",))
                for m in _shift_models(domain, independent=False)
            ),
            methods=(MethodEntry("fbil"),),
            **CPU_GRID,
        )
        for domain in SHIFT_DOMAINS
    },
    # Walker's diverse models at Table 4's sizes (50k updates each on a lent H100) beside the
    # nominal `cpu`-sized walker, all imitating its noisy expert: plain against context is
    # a comparison at one size, budget and selection rule; either against the nominal
    # model confounds size with data (their nominal twin is `shift-paper-walker`'s).
    "shift-paper-fbil-walker": ExperimentSpec(
        name="shift-paper-fbil-walker",
        models=tuple(
            ModelEntry("walker", label, checkpoint=checkpoint, experts=("noisy:walker",))
            for label, checkpoint in (
                ("rnd", "shipped"),
                ("rnd-rand-paper", "walker:rnd-rand-paper"),
                ("rnd-rand-ctx-paper", "walker:rnd-rand-ctx-paper"),
            )
        ),
        methods=(MethodEntry("fbil"),),
        **CPU_GRID,
    ),
    # Each domain's diverse pair at Table 4's sizes beside a nominal model of their size,
    # budget (50k updates, 10-episode IQM every 10k, the best kept) and data: the diverse
    # data's actions replayed at nominal physics (`rbfm unpack --nominal`), so randomised
    # physics is the one difference. All three imitate that nominal model's noisy expert;
    # in `shift-own-paper-*` each imitates its own.
    **{
        f"shift{own}-paper-{domain}": ExperimentSpec(
            name=f"shift{own}-paper-{domain}",
            models=tuple(
                ModelEntry(domain, label, checkpoint=f"{domain}:{label}", experts=(expert,))
                for label in ("rnd-nominal-paper", "rnd-rand-paper", "rnd-rand-ctx-paper")
            ),
            methods=(MethodEntry("fbil"),),
            **CPU_GRID,
        )
        for domain in ("walker", "cheetah")
        for own, expert in (("", f"noisy:{domain}:rnd-nominal-paper"), ("-own", "noisy"))
    },
    # Adapting to the dynamics met: each domain's default model (walker's: the `cpu` one) on
    # the noisy expert's demonstrations, FB-IL and RBFM-Light, every task, family and level.
    "adapt": ExperimentSpec(
        name="adapt",
        models=(ModelEntry("walker"), ModelEntry("quadruped"), ModelEntry("cheetah")),
        methods=_methods("fbil", "rbfm-light"),
        adapt=ADAPT,
        **{**CPU_GRID, "experts": ("noisy",)},
    ),
    # The same, one domain at a time (each domain's results complete before the next).
    **{
        f"adapt-{domain}": ExperimentSpec(
            name=f"adapt-{domain}",
            models=(ModelEntry(domain),),
            methods=_methods("fbil", "rbfm-light"),
            adapt=ADAPT,
            **{**CPU_GRID, "experts": ("noisy",)},
        )
        for domain in ("walker", "quadruped", "cheetah")
    },
    # Its FB-IL slice per domain, on the `cpu`-sized nominal comparison model of the
    # dynamics-diverse models (walker, cheetah:rnd-v1, quadruped:rnd-v2), at nominal and the
    # two strongest levels (what the goal reads). Same adaptation settings everywhere;
    # `adapt-cone-*`: the same slices with the cone search (AdaptConfig.search), whose
    # candidates do not depend on the criterion, so it also chooses among the same
    # candidates by the start z's implied reward (criterion "implied").
    **{
        f"{name}-{domain}": _adapt_slice(f"{name}-{domain}", domain, *model, search)
        for name, search in (("adapt-fbil", "line"), ("adapt-cone", "cone"))
        for domain, model in ADAPT_SLICE_MODELS.items()
    },
    # On walker and quadruped no criterion's choice from one episode per candidate carried to
    # fresh initial states (the oracle's neither): each of 5 candidates (the start z's
    # included) judged on 2 initial states, at the same budget of 10. 2, not 5: with 5
    # states the budget buys one candidate beside the start. Fixed before it ran.
    "adapt-cone-s2-walker": _adapt_slice(
        "adapt-cone-s2-walker", "walker", *ADAPT_SLICE_MODELS["walker"], "cone", states=2
    ),
    **{f"external-{domain}": _external(domain) for domain in ("walker", "quadruped", "cheetah")},
    # FB-IL's z from the independent experts' demonstrations (the `independent` stage's
    # inferences and evaluations, reused) adapted with the `adapt` stage's settings, at
    # nominal and the two strongest levels: demonstrations no z of the model reproduces,
    # beside the noisy expert's. FB-IL only and three levels per family, to fit a sitting.
    "adapt-independent": ExperimentSpec(
        name="adapt-independent",
        models=tuple(dataclasses.replace(m, levels=_ends(m.domain)) for m in INDEPENDENT_MODELS),
        methods=(MethodEntry("fbil"),),
        adapt=tuple(dataclasses.replace(a, methods=("fbil",)) for a in ADAPT),
        **CPU_GRID,
    ),
    # The cone slice on each domain's dynamics-diverse context model, its own noisy expert:
    # adaptation on a model that has seen several physics and reads the recent history.
    **{
        f"adapt-cone-{domain}-rand-ctx": _adapt_slice(
            f"adapt-cone-{domain}-rand-ctx",
            domain,
            "rnd-rand-ctx",
            f"{domain}:rnd-rand-ctx",
            "cone",
        )
        for domain in ("cheetah", "walker", "quadruped")
    },
    # The paper's grid (Section 4) at its scale: the paper's models, the FB methods at their
    # default settings, the baselines at their paper presets, 100 episodes per level, FB
    # inference in float32, both expert sources.
    "paper": ExperimentSpec(
        name="paper",
        models=PAPER_MODELS,
        methods=(
            *_methods(*FB_METHODS),
            MethodEntry("drbc", preset="paper", families=("body_mass",), datasets=("rnd",)),
            MethodEntry("bedroil", preset="paper", families=("body_mass",), datasets=("rnd",)),
        ),
        experts=("own", "noisy"),
    ),
}

# Walker's default was the `cpu` walker until 2026-12-05 (now `walker:rnd-v5`; the default is
# `paper`-sized, rbfm.fb.checkpoint.DEFAULTS). Every preset was computed on it but `paper`,
# which takes the default: the others keep it, so their cells and committed tables stay
# theirs (a cell's id holds its model's weights' hash, a row its expert's name as written).
CPU_WALKER = "walker:rnd-v5"


def _on_cpu_walker(spec: ExperimentSpec) -> ExperimentSpec:
    """`spec` with walker's default, as a model or an expert's model, the `cpu` walker."""

    def model(m: ModelEntry) -> ModelEntry:
        shipped = m.domain == "walker" and m.checkpoint == "shipped" and m.dataset == "rnd"
        return dataclasses.replace(m, checkpoint=CPU_WALKER) if shipped else m

    pins = {"walker": CPU_WALKER, "walker:rnd": CPU_WALKER}
    return dataclasses.replace(spec, models=tuple(model(m) for m in spec.models), pins=pins)


_UNPINNED = PRESETS
PRESETS = {
    name: spec if name == "paper" else _on_cpu_walker(spec) for name, spec in PRESETS.items()
}
# Q1 asked again of walker's default (Table 4's size): `q1`'s walker cells, not pinned.
PRESETS["q1-walker"] = ExperimentSpec(
    name="q1-walker", models=Q1_MODELS[:1], methods=_methods(*FB_METHODS), **CPU_GRID
)
# `grid-walker`'s and `adapt-walker`'s cells of walker's RND model, on walker's default: the
# FB methods (`grid-walker`'s paper-settings RBFM-Light and RBFM-Heavy too; its flip cells
# at the default settings are `q1-walker`'s), without the baselines, which train on the
# dataset (not shipped).
PRESETS["grid-walker-default"] = dataclasses.replace(
    _grid("grid-walker-default", (ModelEntry("walker"),)),
    methods=tuple(m for m in _grid("", PAPER_MODELS).methods if m.name not in BASELINE_METHODS),
)
PRESETS["adapt-walker-default"] = dataclasses.replace(
    _UNPINNED["adapt-walker"], name="adapt-walker-default"
)
# `external-walker`'s cells that read walker's FB model, on walker's default (Table 4's
# size): the paper's three methods, the two reductions and the adaptations, the same
# planner episodes. Not the baselines or the dynamics-diverse models (no FB model of
# walker's default in them: their rows are `external-walker`'s), nor the planner's ceiling
# (the planner inside the shifted simulator does not depend on the imitating model: its
# cells are `external-walker`'s experts.csv).
PRESETS["external-walker-default"] = dataclasses.replace(
    _external("walker"),
    name="external-walker-default",
    models=(ModelEntry("walker"),),
    methods=tuple(m for m in _external("walker").methods if m.name not in BASELINE_METHODS),
    ceiling=False,
)


def _err(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _str_tuple(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _err(where, f"expected a list of names, got {value!r}")
    return tuple(value)


def _numbers(value: Any, where: str) -> tuple[float, ...]:
    """A number or a list of numbers; TOML's `true` is neither (Python's bool is an int)."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in items):
        raise _err(where, f"expected a number or a list of numbers, got {value!r}")
    return tuple(float(x) for x in items)


def _take(table: dict[str, Any], known: set[str], where: str) -> dict[str, Any]:
    unknown = sorted(set(table) - known)
    if unknown:
        raise _err(where, f"unknown field {unknown[0]!r}; valid fields: {', '.join(sorted(known))}")
    return table


def _tables(
    data: dict[str, Any], key: str, entry: type, required: str, where: str
) -> list[tuple[str, dict[str, Any]]]:
    """The [[key]] tables of a spec with their error prefixes; fields checked against
    the entry dataclass's, `required` present."""
    tables = data[key]
    if not isinstance(tables, list) or not tables:
        raise _err(f"{where}.{key}", f"expected a non-empty list of [[{key}]] tables")
    known = {f.name for f in dataclasses.fields(entry)}
    out = []
    for i, table in enumerate(tables):
        w = f"{where}.{key}[{i}]"
        if not isinstance(table, dict):
            raise _err(w, "expected a table")
        _take(table, known, w)
        if required not in table:
            raise _err(w, f"missing field {required!r}")
        out.append((w, table))
    return out


def from_dict(data: dict[str, Any], where: str = "spec") -> ExperimentSpec:
    """Builds a spec from parsed TOML; types and names are checked here, ranges by `plan`."""
    top = {f.name for f in dataclasses.fields(ExperimentSpec)} - {"pins"}
    _take(data, top, where)
    for key in ("name", "models", "methods"):
        if key not in data:
            raise _err(where, f"missing field {key!r}")
    models = []
    for w, m in _tables(data, "models", ModelEntry, "domain", where):
        levels = m.get("levels", 6)
        if isinstance(levels, dict):
            levels = {k: _numbers(v, f"{w}.levels.{k}") for k, v in levels.items()}
        elif isinstance(levels, bool) or not isinstance(levels, int):
            raise _err(
                f"{w}.levels",
                f"expected a count of sweep levels per family (1..6) or a table of levels "
                f"per family, got {levels!r}",
            )
        models.append(
            ModelEntry(
                domain=str(m["domain"]),
                dataset=str(m.get("dataset", "rnd")),
                checkpoint=str(m.get("checkpoint", "shipped")),
                tasks=_str_tuple(m.get("tasks", []), f"{w}.tasks"),
                families=_str_tuple(m.get("families", []), f"{w}.families"),
                levels=levels,
                experts=_str_tuple(m.get("experts", []), f"{w}.experts"),
            )
        )
    methods = []
    for w, m in _tables(data, "methods", MethodEntry, "name", where):
        eps = _numbers(m.get("eps", []), f"{w}.eps")
        overrides = m.get("overrides", {})
        if not isinstance(overrides, dict):
            raise _err(f"{w}.overrides", "expected a table of config fields")
        # A preset given to a method that reads none is refused (the baselines check theirs).
        if "preset" in m and m["name"] in NAMES and m["name"] not in BASELINE_METHODS:
            try:
                check_named(str(m["name"]), str(m["preset"]), "preset")
            except ConfigError as e:
                raise _err(f"{w}.preset", str(e)) from None
        methods.append(
            MethodEntry(
                name=str(m["name"]),
                eps=eps,
                overrides=dict(overrides),
                preset=str(m.get("preset", "cpu")),
                settings=str(m.get("settings", "default")),
                tasks=_str_tuple(m.get("tasks", []), f"{w}.tasks"),
                families=_str_tuple(m.get("families", []), f"{w}.families"),
                datasets=_str_tuple(m.get("datasets", []), f"{w}.datasets"),
            )
        )
    adapt = []
    for w, a in _tables(data, "adapt", AdaptEntry, "budget", where) if "adapt" in data else []:
        evaluate = a.get("evaluate", [a["budget"]])
        if not isinstance(evaluate, list) or not all(isinstance(k, int) for k in evaluate):
            raise _err(f"{w}.evaluate", f"expected a list of episode budgets, got {evaluate!r}")
        adapt.append(
            AdaptEntry(
                budget=a["budget"],
                evaluate=tuple(evaluate),
                criterion=str(a.get("criterion", "demos")),
                states=a.get("states", 1),
                search=str(a.get("search", "line")),
                methods=_str_tuple(a.get("methods", ["fbil"]), f"{w}.methods"),
                datasets=_str_tuple(a.get("datasets", []), f"{w}.datasets"),
            )
        )
    rest = {k: v for k, v in data.items() if k not in ("models", "methods", "adapt")}
    rest["adapt"] = tuple(adapt)
    if "seeds" in rest:
        seeds = rest["seeds"]
        if isinstance(seeds, int) and not isinstance(seeds, bool):
            seeds = list(range(seeds))
        if not isinstance(seeds, list):
            raise _err(f"{where}.seeds", f"expected a list of integers or a count, got {seeds!r}")
        rest["seeds"] = tuple(seeds)
    if "experts" in rest:
        rest["experts"] = _str_tuple(rest["experts"], f"{where}.experts")
    if not isinstance(rest.get("mpc", {}), dict):
        raise _err(f"{where}.mpc", "expected a table of planner settings (FIELD = VALUE)")
    return ExperimentSpec(models=tuple(models), methods=tuple(methods), **rest)


def load_spec(name_or_path: str) -> ExperimentSpec:
    """A preset by name, or a TOML file."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if not path.suffix == ".toml":
        raise ConfigError(
            f"unknown experiment {name_or_path!r}: a preset ({', '.join(PRESETS)}) or a .toml file"
        )
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the spec ({e})") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from e
    return from_dict(data, str(path))


def with_overrides(
    spec: ExperimentSpec,
    seeds: int | None = None,
    episodes: int | None = None,
    steps: int | None = None,
    tasks: tuple[str, ...] | None = None,
) -> ExperimentSpec:
    """The spec with its first `seeds` seeds, other episode counts or step counts (of
    each method that takes steps), or some of its tasks only (command-line knobs)."""
    from rbfm.methods import get_method

    out = spec if tasks is None else only_tasks(spec, tasks)
    if seeds is not None:
        if not 1 <= seeds <= len(spec.seeds):
            raise ConfigError(
                f"--seeds: {seeds} is out of range (valid: 1 to {len(spec.seeds)}, the number "
                f"of {spec.name}'s seeds; add seeds to the spec for more)"
            )
        out = dataclasses.replace(out, seeds=spec.seeds[:seeds])
    if episodes is not None:
        out = dataclasses.replace(out, episodes=episodes)
    if steps is not None:
        stepped = {m.name for m in out.methods if "steps" in _fields(get_method(m.name).config)}
        if not stepped:
            raise ConfigError(f"--steps: none of {spec.name}'s methods takes steps")
        out = dataclasses.replace(
            out,
            methods=tuple(
                dataclasses.replace(m, overrides={**m.overrides, "steps": steps})
                if m.name in stepped
                else m
                for m in out.methods
            ),
        )
    return out


def _fields(config: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config)}


def only_tasks(spec: ExperimentSpec, tasks: tuple[str, ...]) -> ExperimentSpec:
    """The spec's cells of these tasks only: a slice whose cells are the whole spec's
    (cell ids do not depend on the spec), so that a long stage can run a task at a time
    and its slices' results together are the stage's."""
    offers = [m.tasks or TASKS[m.domain] for m in spec.models]
    if missing := [t for t in tasks if not any(t in own for own in offers)]:
        offered = sorted({t for own in offers for t in own})
        raise ConfigError(
            f"--tasks: {', '.join(missing)} not in {spec.name}'s tasks ({', '.join(offered)})"
        )
    models = tuple(
        dataclasses.replace(m, tasks=tuple(t for t in own if t in tasks))
        for m, own in zip(spec.models, offers, strict=True)
        if any(t in tasks for t in own)
    )
    return dataclasses.replace(spec, models=models)


def pick_levels(levels: tuple[float, ...], k: int) -> tuple[float, ...]:
    """k of a family's sweep levels, evenly spread, the first (nominal) and last included."""
    if k >= len(levels):
        return levels
    idx = np.unique(np.round(np.linspace(0, len(levels) - 1, k)).astype(int))
    return tuple(levels[i] for i in idx)
