"""The registry of methods is the one place a method is declared: every consumer (the
inference and baseline packages, the command line, experiment specs, figures) agrees
with it, so adding a method touches its module and one registry entry."""

from __future__ import annotations

import argparse

import pytest

from rbfm import baselines, inference
from rbfm.cli import build_parser
from rbfm.errors import ConfigError
from rbfm.inference.goal import GoalConfig
from rbfm.methods import (
    BASELINE_METHODS,
    FB_METHODS,
    NAMES,
    REDUCTION_METHODS,
    REGISTRY,
    SEQUENCE_METHODS,
    check_named,
    display_label,
    get_method,
)
from rbfm.reporting import figures


def _choices(command: str, option: str) -> tuple[str, ...]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if option in a.option_strings)
    return tuple(action.choices)


def test_every_consumer_reads_the_registry() -> None:
    assert tuple(inference.METHODS) == (*FB_METHODS, *REDUCTION_METHODS)
    assert BASELINE_METHODS == baselines.BASELINES == tuple(baselines.POLICY_TYPES)
    assert _choices("infer", "--method") == NAMES
    assert figures.METHODS == NAMES
    assert SEQUENCE_METHODS == ("goal",) and REGISTRY["goal"].config is GoalConfig
    for name, m in REGISTRY.items():
        if m.kind == "goals":  # nothing fitted: no settings of the paper's to name
            continue
        assert m.config in {inference.METHODS.get(name, (None, None))[1], *_baseline_configs()}
        # Its named choices: a baseline's presets, else the settings that change its config.
        assert m.presets == (
            ("paper", "cpu")
            if m.kind == "baseline"
            else tuple(n for n, of in inference.SETTINGS.items() if n == "default" or of[name])
        )
        assert figures._COLOURS[name] == m.colour


def _baseline_configs() -> set[type]:
    return {baselines.drbc.DRBCConfig, baselines.bedroil.BEDROILConfig}


def test_display_names_and_labels() -> None:
    assert [REGISTRY[n].display for n in NAMES] == [
        "FB-IL",
        "RBFM-Light",
        "RBFM-Heavy",
        "DRBC",
        "BE-DROIL",
        "ER-FB",
        "FM-FB",
        "GOAL-FB",
    ]
    assert display_label("rbfm-heavy/paper") == "RBFM-Heavy/paper"
    assert display_label("rbfm-light eps=0.4") == "RBFM-Light eps=0.4"
    assert display_label("fbil") == "FB-IL" and display_label("other") == "other"
    with pytest.raises(ConfigError, match="valid choices: fbil, rbfm-light"):
        get_method("gail")


def test_an_unknown_override_names_the_method_and_its_fields() -> None:
    """rbfm.imitate(..., eps=0.5) on FB-IL or a typo in a baseline's field: one ConfigError
    naming the method and what it takes, not a constructor's TypeError."""
    with pytest.raises(ConfigError, match=r"^fbil: no field eps \(valid: .*steps"):
        inference.method_config("fbil", "default", eps=0.5)
    with pytest.raises(ConfigError, match=r"^drbc: no field bf16, stepz \(valid: .*steps"):
        baselines.baseline_config("drbc", "cpu", "walker", {"stepz": 1, "bf16": True})
    assert inference.method_config("rbfm-light", "default", eps=0.5).eps == 0.5


def test_a_named_choice_the_method_would_ignore_is_refused_naming_the_methods_that_take_it() -> (
    None
):
    """One check for the command line's --settings and --preset and the API's settings=:
    a name no method takes, or one this method would ignore, is refused."""
    assert REGISTRY["er"].presets == REGISTRY["fm"].presets == ("default",)  # paper = default
    assert REGISTRY["fbil"].presets == ("default", "paper")
    check_named("er", "default", "--settings")
    check_named("drbc", "cpu", "--preset")
    check_named("rbfm-heavy", "paper")
    check_named("bedroil", None, "--settings")  # not given
    with pytest.raises(
        ConfigError, match=r"^unknown --settings 'cpu'; valid choices: default, paper$"
    ):
        check_named("fbil", "cpu", "--settings")
    with pytest.raises(
        ConfigError, match=r"^unknown settings 'x'; valid choices: default, paper, cpu$"
    ):
        check_named("goal", "x")
    with pytest.raises(ConfigError, match=r"^--settings 'paper' does nothing for er \(er's "):
        check_named("er", "paper", "--settings")
    with pytest.raises(ConfigError, match=r"goal takes no --preset; 'cpu' is for drbc, bedroil\)$"):
        check_named("goal", "cpu", "--preset")
    with pytest.raises(ConfigError, match="valid choices: fbil, rbfm-light"):
        check_named("gail", None)
