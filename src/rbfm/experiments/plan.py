"""From a spec to cells (demonstrations, inferences, evaluations, certificates) with stable
ids.

A cell's id is a hash of everything its result depends on, its inputs' ids included:
the same spec gives the same ids on any machine, a changed setting gives new ids (so
the cells it affects are recomputed and no others), and a finished cell is never
computed twice. `plan` validates the whole spec first and raises a ConfigError that
names the offending field before any work is done.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rbfm.checks import seed_option
from rbfm.envs import DOMAINS, NOMINAL, PERTURBATIONS, TASKS, get_perturbation
from rbfm.errors import ConfigError, RbfmError
from rbfm.experiments.certificate import HEAVY, RADII
from rbfm.experiments.spec import (
    EXPERT_KINDS,
    NOISY_STD,
    AdaptEntry,
    ExperimentSpec,
    MethodEntry,
    ModelEntry,
    pick_levels,
)
from rbfm.fb.checkpoint import read_meta, resolve, shipped_model, verify_weights
from rbfm.methods import (
    BASELINE_METHODS,
    ROBUST_FB_METHODS,
    SEQUENCE_METHODS,
    check_named,
    get_method,
)
from rbfm.methods import NAMES as ALL_METHODS
from rbfm.planning import mpc_config


def cell_id(kind: str, payload: dict[str, Any]) -> str:
    """A short stable hash of a cell's defining fields (canonical JSON)."""
    blob = json.dumps({"kind": kind, **payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Model:
    index: int  # position in spec.models
    domain: str
    dataset: str
    checkpoint: str  # stem of the checkpoint files
    sha256: str  # of its weights: the model's identity in cell ids
    task_z: dict[str, list[float]]


@dataclass(frozen=True)
class Expert:
    """Who demonstrates: the policy pi_z of `checkpoint` with `z`, plus Gaussian action
    noise of std `noise`, or (`planner`: its `MPPIConfig` fields) the MPPI planner on the
    true simulator. `name` is the spec's ("own", "noisy", "model:walker:aps", "mpc")."""

    name: str
    checkpoint: str
    sha256: str
    noise: float
    planner: dict[str, Any] | None = None

    def key(self, task: str) -> dict[str, Any]:
        """Its part of a demonstration cell's id (empty for "own": ids from before the
        expert axis existed stay valid)."""
        if self.name == "own":
            return {}
        if self.planner is not None:  # threads change no rollout: not part of the identity
            settings = {k: v for k, v in self.planner.items() if k != "threads"}
            return {"expert": {"mpc": settings, "task": task}}
        return {"expert": {"model": self.sha256, "task": task, "noise": self.noise}}


@dataclass(frozen=True)
class DemosCell:
    id: str
    model: Model
    task: str
    episodes: int
    seed: int
    expert: Expert
    expert_z: tuple[float, ...]  # the expert model's reward-inferred z for the task


@dataclass(frozen=True)
class Variant:
    method: str
    eps: float | None  # the radius used (None for fbil)
    label: str  # "" for the defaults, else e.g. "eps=0.4"
    config: dict[str, Any]  # the full config the method runs with
    preset: str | None  # baselines


@dataclass(frozen=True)
class InferCell:
    id: str
    demos: DemosCell
    variant: Variant
    seed: int
    num_demos: int
    bf16: bool


@dataclass(frozen=True)
class AdaptCell:
    """An FB task vector adapted by a few episodes at one (family, level)
    (`rbfm.inference.adapt`); `config` is the `AdaptConfig`'s fields."""

    id: str
    infer: InferCell
    family: str
    level: float | None
    config: dict[str, Any]
    label: str  # AdaptEntry.label: "adapt", "implied", "oracle", with "-cone" for that search


@dataclass(frozen=True)
class EvalCell:
    id: str
    infer: InferCell
    family: str  # NOMINAL for nominal dynamics
    level: float | None
    episodes: int
    eval_seed: int
    # An adapted task vector: the search's answer after `budget` episodes.
    adapt: AdaptCell | None = None
    budget: int | None = None

    @property
    def variant(self) -> str:
        """The results' variant: the inference's, and the adaptation's with its budget."""
        parts = [self.infer.variant.label]
        if self.adapt is not None:
            parts.append(f"{self.adapt.label}-k{self.budget}")
        return ",".join(x for x in parts if x)


@dataclass(frozen=True)
class CeilingCell:
    """The expert itself evaluated at one level: the ceiling its imitators are read
    against (with its action noise, from its own model), on the same initial states."""

    id: str
    demos: DemosCell
    family: str
    level: float | None
    episodes: int
    eval_seed: int


@dataclass(frozen=True)
class CertCell:
    """An inferred policy's robustness certificates (`experiments.certificate`): a cell of
    its own, so that certificates can be added to a run whose inferences are done."""

    id: str
    infer: InferCell
    radii: tuple[float, ...]
    steps: int  # the cap on each Heavy fit


@dataclass(frozen=True)
class Plan:
    spec: ExperimentSpec
    demos: list[DemosCell]
    infers: list[InferCell]
    evals: list[EvalCell]
    ceilings: list[CeilingCell] = dataclasses.field(default_factory=list)
    certs: list[CertCell] = dataclasses.field(default_factory=list)
    adapts: list[AdaptCell] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> int:
        cells = (self.demos, self.infers, self.adapts, self.evals, self.ceilings, self.certs)
        return sum(len(c) for c in cells)


def _model(entry: ModelEntry, index: int, pins: dict[str, str]) -> Model:
    where = f"models[{index}]"
    if entry.domain not in DOMAINS:
        raise ConfigError(
            f"{where}.domain: unknown domain {entry.domain!r}; valid: {', '.join(DOMAINS)}"
        )
    # The label names files (figures per model's data) and groups results: a name.
    label = entry.dataset
    if (
        not isinstance(label, str)
        or not label.strip(".")
        or not all(c.isalnum() or c in "-_." for c in label)
    ):
        raise ConfigError(
            f"{where}.dataset: {label!r} must be letters, digits, '-', '_' or '.' (a data label)"
        )
    if entry.checkpoint == "shipped":
        stem = shipped_model(entry.domain, entry.dataset)
        if stem is None:
            raise ConfigError(
                f"{where}.checkpoint: no model is shipped for {entry.domain} on "
                f"{entry.dataset!r} data; give the path of a checkpoint (a pretraining run "
                "directory or a .json/.safetensors file)"
            )
    else:
        stem = resolve(pins.get(entry.checkpoint, entry.checkpoint))
    meta = _meta(stem, entry.domain, f"{where}.checkpoint")
    return Model(
        index, entry.domain, entry.dataset, str(stem), str(meta["sha256"]), meta.get("task_z", {})
    )


def _meta(stem: Path, domain: str, where: str) -> dict[str, Any]:
    """A checkpoint's metadata, which must be that of a `domain` model."""
    try:
        meta = read_meta(stem)
        verify_weights(stem, meta)  # a truncated file is refused here, not after the work
    except RbfmError as e:
        raise ConfigError(f"{where}: {e}") from e
    if meta.get("domain") != domain:
        raise ConfigError(f"{where}: {stem} is a {meta.get('domain')} model, not {domain}")
    return meta


def _expert(
    name: str, model: Model, where: str, spec: ExperimentSpec
) -> tuple[Expert, dict[str, list[float]]]:
    """The expert `name` demonstrating for `model`, with the task z's of its model (the
    planner has none: an empty z per task); errors start with `where`."""
    mpc = spec.mpc
    if name == "mpc":
        config = mpc_config(model.domain, mpc)  # its errors name the spec's `mpc` table
        no_z: dict[str, list[float]] = {t: [] for t in TASKS[model.domain]}
        return Expert(name, "", "", 0.0, config.record()), no_z
    if name in ("own", "noisy"):
        noise = NOISY_STD if name == "noisy" else 0.0
        return Expert(name, model.checkpoint, model.sha256, noise), model.task_z
    kind, _, ref = name.partition(":")
    if kind not in ("model", "noisy") or not ref:
        raise ConfigError(
            f"{where}: unknown expert {name!r}; valid: {', '.join(EXPERT_KINDS)} (NAME: a "
            "shipped model such as walker:aps, or a checkpoint path)"
        )
    try:
        stem = resolve(spec.pins.get(ref, ref))
    except RbfmError as e:
        raise ConfigError(f"{where}: {e}") from e
    meta = _meta(stem, model.domain, where)
    if kind == "noisy":  # the model itself included: its cells are then its "noisy" ones
        return Expert(name, str(stem), str(meta["sha256"]), NOISY_STD), meta.get("task_z", {})
    if meta["sha256"] == model.sha256:
        raise ConfigError(
            f'{where}: {stem} is models[{model.index}] itself (use "own" for its own expert)'
        )
    return Expert(name, str(stem), str(meta["sha256"]), 0.0), meta.get("task_z", {})


def _names(
    given: tuple[str, ...], valid: tuple[str, ...], where: str, kind: str
) -> tuple[str, ...]:
    for name in given:
        if name not in valid:
            raise ConfigError(f"{where}: unknown {kind} {name!r}; valid: {', '.join(valid)}")
    if len(set(given)) != len(given):
        raise ConfigError(f"{where}: a {kind} is listed twice")
    return given or valid


def _families(entry: ModelEntry, where: str) -> dict[str, tuple[float | None, ...]]:
    """Each family's levels (nominal: a single None)."""
    valid = tuple(f for d, f in PERTURBATIONS if d == entry.domain)
    names = _names(entry.families, (*valid, NOMINAL), f"{where}.families", "family")
    if not entry.families:
        names = valid
    levels = entry.levels
    if names == (NOMINAL,) and levels != ModelEntry.levels:
        raise ConfigError(f'{where}.levels: nominal dynamics only (families = ["none"]) has none')
    if isinstance(levels, dict):
        for fam in levels:
            if fam not in names or fam == NOMINAL:
                raise ConfigError(
                    f"{where}.levels: {fam!r} is not a perturbation family of this model "
                    f"(families: {', '.join(names)})"
                )
    elif isinstance(levels, bool) or not isinstance(levels, int) or not 1 <= levels <= 6:
        raise ConfigError(
            f"{where}.levels: {levels!r} is out of range (valid: 1..6 sweep levels per "
            "family, or a table of levels per family)"
        )
    out: dict[str, tuple[float | None, ...]] = {}
    for fam in names:
        if fam == NOMINAL:
            out[fam] = (None,)
            continue
        sweep = get_perturbation(entry.domain, fam).levels
        if isinstance(levels, int):
            out[fam] = pick_levels(tuple(sweep), levels)
            continue
        chosen = levels.get(fam, tuple(sweep))
        lo, hi = min(sweep), max(sweep)
        if len(set(chosen)) != len(chosen):  # a level twice: its cells counted twice
            raise ConfigError(f"{where}.levels.{fam}: a level is listed twice")
        for x in chosen:
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise ConfigError(f"{where}.levels.{fam}: {x!r} is not a number")
            if not math.isfinite(x) or not lo <= x <= hi:
                raise ConfigError(
                    f"{where}.levels.{fam}: {x} is outside the family's range [{lo:g}, {hi:g}]"
                )
        out[fam] = tuple(chosen)
    return out


def _variants(entry: MethodEntry, domain: str, where: str) -> list[Variant]:
    """The method's configs (one per eps), built and so validated by the config classes."""
    from rbfm.baselines import baseline_config
    from rbfm.inference import method_config
    from rbfm.inference.goal import goal_config

    if entry.name not in ALL_METHODS:
        raise ConfigError(
            f"{where}.name: unknown method {entry.name!r}; valid: {', '.join(ALL_METHODS)}"
        )
    if entry.eps and entry.name not in (*ROBUST_FB_METHODS, *BASELINE_METHODS):
        raise ConfigError(f"{where}.eps: {entry.name} has no robustness radius")
    if "eps" in entry.overrides:
        raise ConfigError(f"{where}.overrides.eps: give the radius as the method's `eps` field")
    if len(set(entry.eps)) != len(entry.eps):
        raise ConfigError(f"{where}.eps: a value is listed twice")
    try:  # a name the method would ignore is refused too: `paper` on er, fm, goal, baselines
        check_named(entry.name, None if entry.settings == "default" else entry.settings, "settings")
    except ConfigError as e:
        raise ConfigError(f"{where}.settings: {e}") from None
    variants = []
    for eps in entry.eps or (None,):
        overrides = dict(entry.overrides) | ({} if eps is None else {"eps": eps})
        try:
            if entry.name in BASELINE_METHODS:
                cfg = dataclasses.asdict(
                    baseline_config(entry.name, entry.preset, domain, overrides)
                )
            elif entry.name in SEQUENCE_METHODS:  # nothing fitted: no named settings
                # The time index (the default) stays out of the config: cells made before
                # the state index existed keep their ids.
                full = dataclasses.asdict(goal_config(overrides))
                cfg = {k: v for k, v in full.items() if (k, v) != ("index", "time")}
            else:
                full = dataclasses.asdict(method_config(entry.name, entry.settings, **overrides))
                # ER-FB's whitening (off by default) likewise: its cells keep their ids.
                cfg = {k: v for k, v in full.items() if (k, v) != ("whiten", False)}
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from e
        label = "" if eps is None or len(entry.eps) == 1 else f"eps={eps:g}"
        if cfg.get("index", "time") != "time":  # goal by state: its rows apart from by time
            label = f"index={cfg['index']}"
        if cfg.get("whiten"):
            label = "whiten"
        if entry.settings != "default":
            label = ",".join(x for x in (entry.settings, label) if x)
        used = cfg.get("eps")
        variants.append(
            Variant(
                entry.name,
                None if used is None else float(used),
                label,
                cfg,
                entry.preset if entry.name in BASELINE_METHODS else None,
            )
        )
    return variants


def _adapt_config(entry: AdaptEntry, where: str, labels: set[str]) -> dict[str, Any]:
    """The entry's `AdaptConfig` fields, validated, and its budgets checked."""
    from rbfm.inference.adapt import AdaptConfig

    try:
        cfg = AdaptConfig(
            budget=entry.budget,
            states=entry.states,
            criterion=entry.criterion,
            search=entry.search,
            keep="best",
        )
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from e
    if cfg.criterion == "states":
        raise ConfigError(
            f"{where}.criterion: 'states' is rbfm.adapt's; a stage's records keep B's distances "
            "and implied rewards, not its (valid in stages: demos, implied, reward)"
        )
    if cfg.search == "cem":
        raise ConfigError(
            f"{where}.search: 'cem' answers its elites' mean, not one of its candidates, and "
            "a stage evaluates candidates (valid in stages: line, cone; cem: rbfm.adapt)"
        )
    if not entry.evaluate or len(set(entry.evaluate)) != len(entry.evaluate):
        raise ConfigError(f"{where}.evaluate: give distinct episode budgets")
    for k in entry.evaluate:
        if isinstance(k, bool) or not cfg.states <= k <= cfg.budget or k % cfg.states:
            raise ConfigError(
                f"{where}.evaluate: {k!r} (valid: multiples of states={cfg.states} up to the "
                f"budget {cfg.budget})"
            )
    if not entry.methods or len(set(entry.methods)) != len(entry.methods):
        raise ConfigError(f"{where}.methods: give distinct FB methods (an empty list adapts none)")
    for m in entry.methods:
        if m not in ALL_METHODS or m in BASELINE_METHODS or m in SEQUENCE_METHODS:
            raise ConfigError(f"{where}.methods: {m!r} is not an FB method with one task vector")
    for label in entry.datasets:
        if label not in labels:
            raise ConfigError(f"{where}.datasets: {label!r} is not the dataset of any model")
    # `search`, `cosine` and cem's fields enter a cell's identity only where they differ
    # from their defaults: a line search's cell keeps the id it has without these fields.
    # Stages keep the search's best candidate, as they ran (`run_adapt` reads a config
    # without `keep` so), and the clear-margin test's fields stay out of their ids.
    optional = ("search", "cosine", "population", "elites", "decay")
    return {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k not in (*optional, "keep", "block", "alpha")
        or (k in optional and v != getattr(AdaptConfig, k))
    }


def _check_counts(spec: ExperimentSpec) -> None:
    # The name is a folder under runs/experiments: "." or ".." would be another one.
    name = spec.name
    if not isinstance(name, str) or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"name: {name!r} must be letters, digits, '-', '_' or '.'")
    if not name.strip("."):
        raise ConfigError(f"name: {name!r} must hold a letter, digit, '-' or '_'")
    if not spec.seeds or len(set(spec.seeds)) != len(spec.seeds):
        raise ConfigError("seeds: give distinct inference seeds (a list, or a count)")
    for s in spec.seeds:
        if isinstance(s, bool) or not isinstance(s, int):
            raise ConfigError(f"seeds: {s!r} is not an integer")
        seed_option("seeds", s)
    for name, value, low in (
        ("demos", spec.demos, 1),
        ("num_demos", spec.num_demos, 1),
        ("episodes", spec.episodes, 1),
        ("eval_seed", spec.eval_seed, 0),
        ("demo_seed", spec.demo_seed, 0),
        ("certificate_steps", spec.certificate_steps, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name}: {value!r} is out of range (valid: >= {low})")
    seed_option("eval_seed", spec.eval_seed)
    seed_option("demo_seed", spec.demo_seed)
    for name, flag in (("ceiling", spec.ceiling), ("bf16", spec.bf16)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{name}: {flag!r} is not true or false")
    for name, value, low in (
        ("planner_episodes", spec.planner_episodes, 1),
        ("planner_levels", spec.planner_levels, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name}: {value!r} is out of range (valid: >= {low})")
    planned = "mpc" in spec.experts or any("mpc" in m.experts for m in spec.models)
    defaults = ExperimentSpec.planner_episodes, ExperimentSpec.planner_levels
    if not planned and (spec.planner_episodes, spec.planner_levels) != defaults:
        raise ConfigError('planner_episodes, planner_levels: no expert source is "mpc"')
    if spec.mpc and not planned:
        raise ConfigError('mpc: planner settings are given but no expert source is "mpc"')
    # A model's own expert sources replace the spec's, so each list is checked alike.
    sources = [("experts", spec.experts)] + [
        (f"models[{i}].experts", m.experts) for i, m in enumerate(spec.models) if m.experts
    ]
    for at, names in sources:
        if not names or len(set(names)) != len(names):
            raise ConfigError(
                f"{at}: give distinct expert sources (valid: {', '.join(EXPERT_KINDS)})"
            )
    if not 1 <= spec.num_demos <= spec.demos:
        raise ConfigError(
            f"num_demos: {spec.num_demos} demonstrations cannot be drawn from {spec.demos} "
            f"(valid: 1..{spec.demos})"
        )


def plan(spec: ExperimentSpec) -> Plan:
    """Every cell of the spec, in a deterministic order; validates the spec first."""
    _check_counts(spec)
    models = [_model(m, i, spec.pins) for i, m in enumerate(spec.models)]
    _check_models(models)
    _check_methods(spec)
    adapt_cfgs = [
        _adapt_config(a, f"adapt[{j}]", {m.dataset for m in spec.models})
        for j, a in enumerate(spec.adapt)
    ]
    inferred = {m.name for m in spec.methods}
    for j, a in enumerate(spec.adapt):  # a method the spec does not infer: nothing to adapt
        if missing := [m for m in a.methods if m not in inferred]:
            raise ConfigError(
                f"adapt[{j}].methods: {missing[0]!r} is not among the spec's methods "
                f"({', '.join(sorted(inferred))}); it would adapt nothing"
            )
    cells = _Cells()
    for model, entry in zip(models, spec.models, strict=True):
        _model_cells(spec, model, entry, adapt_cfgs, cells)
    if not cells.evals:
        raise ConfigError("methods: no method applies to any task and family of the models")
    # Two entries giving identical cells would be computed once and counted twice.
    if len({d.id for d in cells.demos}) != len(cells.demos):
        raise ConfigError("experts: two experts of a model give the same demonstrations")
    if len({i.id for i in cells.infers}) != len(cells.infers):
        raise ConfigError("methods: two entries give the same method with the same settings")
    if len({a.id for a in cells.adapts}) != len(cells.adapts):
        raise ConfigError("adapt: two entries give the same adaptation")
    ceilings = _ceilings(spec, cells) if spec.ceiling else []
    certs = _certs(cells.infers, spec.certificate_steps)
    return Plan(spec, cells.demos, cells.infers, cells.evals, ceilings, certs, cells.adapts)


@dataclass
class _Cells:
    """The cells being planned, in the order `plan` returns them."""

    demos: list[DemosCell] = field(default_factory=list)
    infers: list[InferCell] = field(default_factory=list)
    evals: list[EvalCell] = field(default_factory=list)
    adapts: list[AdaptCell] = field(default_factory=list)


def _check_models(models: list[Model]) -> None:
    first: dict[str, int] = {}
    labels: dict[tuple[str, str], int] = {}
    for m in models:
        # Cells are keyed by the weights: one model under two labels would clash.
        if m.sha256 in first:
            raise ConfigError(
                f"models[{m.index}].checkpoint: the same weights as models[{first[m.sha256]}] "
                "(list each model once)"
            )
        first[m.sha256] = m.index
        # Figures, tables and IQMs group rows by (domain, data label).
        if (m.domain, m.dataset) in labels:
            raise ConfigError(
                f"models[{m.index}].dataset: {m.domain} on {m.dataset!r} is already "
                f"models[{labels[m.domain, m.dataset]}]; give each model of a domain its own "
                'data label (e.g. dataset = "rnd-v1"), or its results would be pooled'
            )
        labels[m.domain, m.dataset] = m.index


def _check_methods(spec: ExperimentSpec) -> None:
    """Each method entry's tasks, families and data labels are some model's."""
    all_tasks = {t for m in spec.models for t in (m.tasks or TASKS[m.domain])}
    all_families = {f for m in spec.models for f in (m.families or ())}
    all_families |= {f for d, f in PERTURBATIONS for m in spec.models if d == m.domain}
    for j, method in enumerate(spec.methods):
        for t in method.tasks:
            if t not in all_tasks:
                raise ConfigError(f"methods[{j}].tasks: {t!r} is not a task of any model")
        for f in method.families:
            if f not in all_families | {NOMINAL}:
                raise ConfigError(f"methods[{j}].families: {f!r} is not a family of any model")
        for label in method.datasets:
            if label not in {m.dataset for m in spec.models}:
                raise ConfigError(
                    f"methods[{j}].datasets: {label!r} is not the dataset of any model"
                )


def _model_cells(
    spec: ExperimentSpec,
    model: Model,
    entry: ModelEntry,
    adapt_cfgs: list[dict[str, Any]],
    cells: _Cells,
) -> None:
    """One model's cells: per (expert, task) its demonstrations, per method variant and
    seed an inference, per family and level its evaluation and adaptations."""
    where = f"models[{model.index}]"
    tasks = _names(entry.tasks, TASKS[model.domain], f"{where}.tasks", "task")
    missing = [t for t in tasks if t not in model.task_z]
    if missing:
        raise ConfigError(
            f"{where}.checkpoint: {model.checkpoint} stores no reward-inferred z for "
            f"{', '.join(missing)} (make it with `rbfm export`)"
        )
    families = _families(entry, where)
    variants = [
        (m, v)
        for j, m in enumerate(spec.methods)
        if not m.datasets or model.dataset in m.datasets
        for v in _variants(m, model.domain, f"methods[{j}]")
    ]
    # A model's own expert sources replace the spec's (both checked in `_check_counts`).
    sources, at = (
        (entry.experts, f"{where}.experts") if entry.experts else (spec.experts, "experts")
    )
    experts = [_expert(name, model, f"{at}[{k}]", spec) for k, name in enumerate(sources)]
    for (expert, expert_z), task in itertools.product(experts, tasks):
        if task not in expert_z:
            raise ConfigError(
                f"experts: {expert.checkpoint} stores no reward-inferred z for {task} "
                "(make it with `rbfm export`)"
            )
        d_id = cell_id(
            "demos",
            {
                "model": model.sha256,
                "task": task,
                "episodes": spec.demos,
                "seed": spec.demo_seed,
                **expert.key(task),
            },
        )
        d = DemosCell(d_id, model, task, spec.demos, spec.demo_seed, expert, tuple(expert_z[task]))
        cells.demos.append(d)
        for m_entry, variant in variants:
            if m_entry.tasks and task not in m_entry.tasks:
                continue
            fams = [f for f in families if not m_entry.families or f in m_entry.families]
            for seed in spec.seeds if fams else ():
                # The actor's bfloat16 copy, for the methods that descend through it (not
                # the baselines, nor the closed forms and FM).
                config = get_method(variant.method).config
                bf16 = spec.bf16 and "bf16" in {f.name for f in dataclasses.fields(config)}
                i_id = cell_id(
                    "infer",
                    {
                        "demos": d_id,
                        "method": variant.method,
                        "config": variant.config,
                        "preset": variant.preset,
                        "seed": seed,
                        "num_demos": spec.num_demos,
                        "bf16": bf16,
                    },
                )
                inf = InferCell(i_id, d, variant, seed, spec.num_demos, bf16)
                cells.infers.append(inf)
                for fam in fams:
                    for level in families[fam]:
                        _eval_cells(spec, inf, fam, level, adapt_cfgs, cells)


def _eval_cells(
    spec: ExperimentSpec,
    inf: InferCell,
    fam: str,
    level: float | None,
    adapt_cfgs: list[dict[str, Any]],
    cells: _Cells,
) -> None:
    """An inference's evaluation at one (family, level), and its adaptations there with
    the evaluation of each of their budgets."""
    where = {"family": fam, "level": level, "episodes": spec.episodes, "eval_seed": spec.eval_seed}
    e_id = cell_id("eval", {"infer": inf.id} | where)
    cells.evals.append(EvalCell(e_id, inf, fam, level, spec.episodes, spec.eval_seed))
    dataset = inf.demos.model.dataset
    for a_entry, a_cfg in zip(spec.adapt, adapt_cfgs, strict=True):
        if inf.variant.method not in a_entry.methods or (
            a_entry.datasets and dataset not in a_entry.datasets
        ):
            continue
        a = _adapt_cell(inf, fam, level, a_cfg, a_entry.label)
        cells.adapts.append(a)
        for k in a_entry.evaluate:
            k_id = cell_id("eval", {"adapt": a.id, "budget": k} | where)
            cells.evals.append(EvalCell(k_id, inf, fam, level, spec.episodes, spec.eval_seed, a, k))


def _ceilings(spec: ExperimentSpec, cells: _Cells) -> list[CeilingCell]:
    """Each demonstration set's expert, evaluated where its imitators are: an FB expert on
    the evaluation's initial states, the planner (its own stream, demo_seed + 1) at
    nominal and at each family's `planner_levels` strongest levels only."""
    out = []
    for d in cells.demos:
        where = list(dict.fromkeys((e.family, e.level) for e in cells.evals if e.infer.demos is d))
        episodes, seed = spec.episodes, spec.eval_seed
        if d.expert.planner is not None:
            where = _planner_levels(d.model.domain, where, spec.planner_levels)
            episodes, seed = spec.planner_episodes, spec.demo_seed + 1
        for fam, level in where:
            payload = {
                "demos": d.id,
                "family": fam,
                "level": level,
                "episodes": episodes,
                "eval_seed": seed,
            }
            out.append(CeilingCell(cell_id("ceiling", payload), d, fam, level, episodes, seed))
    return out


def _planner_levels(
    domain: str, where: list[tuple[str, float | None]], strongest: int
) -> list[tuple[str, float | None]]:
    """The (family, level)s of `where` that are nominal or among the `strongest` last
    evaluated levels of their family (sweeps run from nominal to the strongest)."""
    by_family: dict[str, list[float | None]] = {}
    for fam, level in where:
        by_family.setdefault(fam, []).append(level)
    keep: set[tuple[str, float | None]] = set()
    for fam, levels in by_family.items():
        if fam == NOMINAL:
            keep.add((fam, None))
            continue
        nominal = get_perturbation(domain, fam).nominal
        shifted = [x for x in levels if x != nominal]
        keep |= {(fam, x) for x in levels if x == nominal}
        keep |= {(fam, x) for x in shifted[max(0, len(shifted) - strongest) :] if strongest}
    return [w for w in where if w in keep]


def _adapt_cell(
    inf: InferCell, family: str, level: float | None, config: dict[str, Any], label: str
) -> AdaptCell:
    payload = {"infer": inf.id, "family": family, "level": level, "config": config}
    return AdaptCell(cell_id("adapt", payload), inf, family, level, config, label)


def _certs(infers: list[InferCell], steps: int) -> list[CertCell]:
    """Each inference's certificates at RADII and the radius it used (none at 0 steps)."""
    out = []
    for i in infers if steps else []:
        if i.variant.method in SEQUENCE_METHODS:  # no one policy's loss to certify
            continue
        radii = tuple(sorted({*RADII, *([] if i.variant.eps is None else [i.variant.eps])}))
        payload = {"infer": i.id, "radii": radii, "steps": steps, **dataclasses.asdict(HEAVY)}
        out.append(CertCell(cell_id("certificate", payload), i, radii, steps))
    return out


def describe(p: Plan) -> str:
    """What the plan runs: its cells by stage, then one line per demonstration set."""
    lines = [
        f"experiment {p.spec.name}: {len(p.demos)} demonstration sets, {len(p.infers)} "
        f"inferences, {len(p.evals)} evaluations ({len(p.evals) * p.spec.episodes:,} "
        f"episodes), {len(p.ceilings)} of the experts themselves, {len(p.certs)} policies' "
        "certificates" + (f", {len(p.adapts)} adaptations" if p.adapts else "")
    ]
    for d in p.demos:
        n_inf = sum(1 for i in p.infers if i.demos.id == d.id)
        n_eval = sum(1 for e in p.evals if e.infer.demos.id == d.id)
        n_adapt = sum(1 for a in p.adapts if a.infer.demos.id == d.id)
        expert = "" if d.expert.name == "own" else f", expert {d.expert.name}"
        lines.append(
            f"  {d.model.domain}/{d.task} ({d.model.dataset}, {Path(d.model.checkpoint).name}"
            f"{expert}): {n_inf} inferences, {n_eval} evaluations"
            + (f", {n_adapt} adaptations" if n_adapt else "")
        )
    return "\n".join(lines)
