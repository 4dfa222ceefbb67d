"""The one registry of task-inference methods: the FB methods and the baselines.

Each entry says what a method is called (its id in files and its display name), how it
looks in every figure, what it produces (a task vector of an FB model, or a policy
network), and its config class and named presets. The command line, the experiment specs
and runner, the figures and the docs read this table. Adding a method: its module, its
rows in its package's tables (an FB method: `inference.METHODS` and each of
`inference.SETTINGS`; a baseline: `baselines.BASELINES`, `POLICY_TYPES` and
`baseline_config`), and one entry here (tests/test_methods.py checks that every consumer
agrees with this table).
"""

from __future__ import annotations

from dataclasses import dataclass

from rbfm import baselines, inference
from rbfm.data.demos import Demos
from rbfm.errors import ConfigError, unknown
from rbfm.inference.goal import GoalConfig


@dataclass(frozen=True)
class Method:
    name: str  # the id in files, specs and results tables
    display: str  # the name a reader sees
    # "fb": a task vector of an FB model; "goals": a sequence of them, one per step;
    # "baseline": a policy network
    kind: str
    config: type  # the config dataclass
    # The names it reads: named settings (FB methods, goal) or presets (baselines).
    presets: tuple[str, ...]
    robust: bool  # has a robustness radius eps
    colour: str
    marker: str
    # An imitation reduction beyond the paper's three (its grids keep those three).
    reduction: bool = False

    @property
    def is_fb(self) -> bool:
        return self.kind == "fb"

    @property
    def reads_actions(self) -> bool:
        """The paper's methods clone the demonstrated actions; the reductions read states
        alone, so they take states-only demonstrations."""
        return not self.reduction

    @property
    def option(self) -> str:
        """The option its names come by (`rbfm infer`, specs): baselines' `preset`, the
        others' `settings`."""
        return "preset" if self.kind == "baseline" else "settings"


def _fb(
    name: str, display: str, robust: bool, colour: str, marker: str, reduction: bool = False
) -> Method:
    config = inference.METHODS[name][1]
    # Only the settings that change its config: `paper` is not one of the reductions'.
    presets = tuple(s for s, of in inference.SETTINGS.items() if s == "default" or of[name])
    return Method(name, display, "fb", config, presets, robust, colour, marker, reduction)


def _baseline(name: str, display: str, config: type, colour: str, marker: str) -> Method:
    presets = ("paper", "cpu")
    return Method(name, display, "baseline", config, presets, True, colour, marker)


# The paper's order, which every table and legend keeps, then the reductions.
REGISTRY: dict[str, Method] = {
    m.name: m
    for m in (
        _fb("fbil", "FB-IL", False, "C0", "^"),
        _fb("rbfm-light", "RBFM-Light", True, "C1", "s"),
        _fb("rbfm-heavy", "RBFM-Heavy", True, "C2", "o"),
        _baseline("drbc", "DRBC", baselines.drbc.DRBCConfig, "C3", "D"),
        _baseline("bedroil", "BE-DROIL", baselines.bedroil.BEDROILConfig, "C4", "X"),
        # Imitation reductions that read no actions (Pirotta et al., ICLR 2024).
        _fb("er", "ER-FB", False, "C5", "v", reduction=True),
        _fb("fm", "FM-FB", True, "C6", "P", reduction=True),
        Method("goal", "GOAL-FB", "goals", GoalConfig, ("default",), False, "C9", "*", True),
    )
}
NAMES = tuple(REGISTRY)
# The paper's FB methods: what its grids run.
FB_METHODS = tuple(n for n, m in REGISTRY.items() if m.is_fb and not m.reduction)
# The reductions with one task vector (the runner's and `inference.METHODS`).
REDUCTION_METHODS = tuple(n for n, m in REGISTRY.items() if m.is_fb and m.reduction)
# A task vector per step: `rbfm.imitate`, `rbfm infer` and `rbfm evaluate` carry it.
SEQUENCE_METHODS = tuple(n for n, m in REGISTRY.items() if m.kind == "goals")
BASELINE_METHODS = tuple(n for n, m in REGISTRY.items() if m.kind == "baseline")
# What `rbfm.imitate` and `rbfm infer` run when no method is named: of the methods that
# need only the demonstrations and the model, the one with the highest IQM share of an
# external demonstrator's return pooled over every task measured (a planner's, at
# nominal physics: docs/results/external). That is the case a user's own demonstrations
# are; on the model's own demonstrations FB-IL is exact, and stays available by name.
DEFAULT_METHOD = "er"
ROBUST_FB_METHODS = tuple(n for n, m in REGISTRY.items() if m.is_fb and m.robust)


def get_method(name: str) -> Method:
    if name not in REGISTRY:
        raise unknown("method", name, REGISTRY)
    return REGISTRY[name]


def check_demos(method: str, demos: Demos) -> None:
    """States-only demonstrations refused, before a model loads, by a method that clones
    the demonstrated actions (`Method.reads_actions`)."""
    if get_method(method).reads_actions:
        demos.require_actions(method)


def check_named(method: str, name: str | None, option: str | None = None) -> None:
    """Refuses, before any compute, a named settings or preset that `method` would ignore.

    `option`: `settings` or `preset` (dashed on the command line), each read by its own
    methods (`Method.option`); None for `rbfm.imitate`'s `settings`, which names either.
    `name` None: not given.
    """
    get_method(method)
    if name is None:
        return
    what = option or "settings"
    takers = {
        n: m.presets
        for n, m in REGISTRY.items()
        if option is None or option.lstrip("-") == m.option
    }
    known = dict.fromkeys(p for names in takers.values() for p in names)
    if name not in known:
        raise unknown(what, name, known)
    mine = takers.get(method, ())
    if name not in mine:
        readers = ", ".join(n for n, names in takers.items() if name in names)
        own = f"{method}'s {what}: {', '.join(mine)}" if mine else f"{method} takes no {what}"
        raise ConfigError(
            f"{what} {name!r} does nothing for {method} ({own}; {name!r} is for {readers})"
        )


def display_name(method: str) -> str:
    """The display name of a method id (unknown ids, e.g. a variant label, unchanged)."""
    return REGISTRY[method].display if method in REGISTRY else method


def display_label(label: str) -> str:
    """A results label (`rbfm-heavy`, `rbfm-heavy/paper`, `rbfm-light eps=0.4`) with its
    method id replaced by the display name: `RBFM-Heavy/paper`."""
    for name in sorted(REGISTRY, key=len, reverse=True):
        if label == name or label.startswith((f"{name}/", f"{name} ", f"{name}@", f"{name}(")):
            return REGISTRY[name].display + label[len(name) :]
    return label
