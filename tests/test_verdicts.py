"""The paper's-ordering readings: strongest levels, CI comparisons and verdicts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rbfm.envs.perturbations import get_perturbation
from rbfm.experiments.table import ResultRow
from rbfm.reporting.stats import IqmEstimate
from rbfm.reporting.verdicts import (
    baselines_table,
    compare,
    gap_table,
    readings,
    readings_table,
    settings_table,
    several_tasks,
    strongest,
    verdict,
)


def _row(
    method: str, seed: int, family: str, level: float, mean: float, domain: str = "walker"
) -> ResultRow:
    return ResultRow(
        domain=domain,
        dataset="rnd",
        task="flip",
        method=method,
        variant="",
        eps=None,
        seed=seed,
        family=family,
        level=level,
        episodes=20,
        mean=mean,
        std=1.0,
        unstable=0,
        inference_seconds=1.0,
        policy="p.json",
        cell=f"{method}-{seed}-{family}-{level}",
    )


FAMILIES = ("gravity", "body_mass", "joint_friction")


def _rows(gains: dict[str, float], spread: float) -> list[ResultRow]:
    """Every walker family at its 6 levels, 5 seeds; the return falls with the perturbation
    and each method adds its gain times the perturbation's fraction of the range."""
    rng = np.random.default_rng(0)
    out = []
    for family in FAMILIES:
        p = get_perturbation("walker", family)
        for i, level in enumerate(p.levels):
            for method, gain in gains.items():
                for seed in range(5):
                    mean = 500.0 - 40.0 * i + gain * i / 5 + float(rng.normal(0, spread))
                    out.append(_row(method, seed, family, level, mean))
    return out


def test_strongest_keeps_the_level_farthest_from_nominal_whichever_way_it_runs() -> None:
    rows = _rows({"fbil": 0.0}, 1.0)
    kept = strongest(rows)
    for family in FAMILIES:
        p = get_perturbation("walker", family)
        assert {r.level for r in kept if r.family == family} == {p.extreme}
    assert len(kept) == 3 * 5
    # A family whose perturbation grows as its level falls (cheetah's range of motion,
    # 100% retained at nominal) keeps its lowest level.
    p = get_perturbation("cheetah", "range_of_motion")
    assert p.extreme < p.nominal
    levels = [_row("fbil", 0, "range_of_motion", x, 1.0, "cheetah") for x in p.levels[:4]]
    assert [r.level for r in strongest(levels)] == [p.levels[3]]


def _est(low: float, high: float) -> IqmEstimate:
    return IqmEstimate("x", (low + high) / 2, low, high, 5, 1)


def test_only_disjoint_intervals_order_a_pair() -> None:
    assert compare(_est(10, 12), _est(5, 9)) == ">"
    assert compare(_est(5, 9), _est(10, 12)) == "<"
    assert compare(_est(5, 10), _est(9, 12)) == "~"


def test_verdicts_name_what_holds_and_what_is_reversed() -> None:
    pairs = (("rbfm-heavy", "fbil"), ("rbfm-light", "fbil"), ("rbfm-heavy", "rbfm-light"))
    assert verdict(dict.fromkeys(pairs, ">")).startswith("the paper's ordering holds")
    assert verdict(dict.fromkeys(pairs, "~")).startswith("cannot tell")
    assert verdict(dict.fromkeys(pairs, "<")).startswith("reversed")
    one = verdict({pairs[0]: "~", pairs[1]: "~", pairs[2]: "<"})
    assert one == "partly reversed: RBFM-Heavy < RBFM-Light; the rest overlap"
    mixed = verdict({pairs[0]: ">", pairs[1]: "<", pairs[2]: "~"})
    assert mixed == "mixed: RBFM-Heavy > FB-IL, RBFM-Light < FB-IL"
    partly = verdict({pairs[0]: ">", pairs[1]: "~", pairs[2]: "~"})
    assert partly.startswith("partly: RBFM-Heavy > FB-IL")


def test_a_clear_gain_at_the_strongest_level_is_read_as_the_paper_says() -> None:
    rows = _rows({"fbil": 0.0, "rbfm-light": 60.0, "rbfm-heavy": 120.0}, 2.0)
    found = {r.levels: r for r in readings(rows, reps=200)}
    assert found["strongest"].verdict.startswith("the paper's ordering holds")
    assert found["strongest"].tasks == 3
    assert found["all"].tasks == 18
    # With the three methods equal up to noise, nothing is ordered.
    same = _rows({"fbil": 0.0, "rbfm-light": 0.0, "rbfm-heavy": 0.0}, 20.0)
    assert all(r.verdict.startswith("cannot tell") for r in readings(same, reps=200))


def test_a_missing_method_is_named_not_compared() -> None:
    rows = _rows({"fbil": 0.0, "rbfm-heavy": 50.0}, 2.0)
    missing = "not comparable: no complete results for RBFM-Light"
    assert readings(rows, reps=100)[0].verdict == missing
    table = readings_table(rows, reps=100)
    assert "| walker | rnd | strongest | 3 |" in table


def test_per_task_readings_keep_apart_what_pooling_averages_away() -> None:
    # On flip the paper's ordering holds; on stand it is reversed. Pooled, the two cancel.
    flip = _rows({"fbil": 0.0, "rbfm-light": 60.0, "rbfm-heavy": 120.0}, 2.0)
    stand = [
        dataclasses.replace(r, task="stand")
        for r in _rows({"fbil": 120.0, "rbfm-light": 60.0, "rbfm-heavy": 0.0}, 2.0)
    ]
    assert not several_tasks(flip)
    assert several_tasks(flip + stand)
    per_task = {
        (r.task, r.levels): r.verdict for r in readings(flip + stand, reps=200, per_task=True)
    }
    assert per_task[("flip", "strongest")].startswith("the paper's ordering holds")
    assert per_task[("stand", "strongest")].startswith("reversed")
    pooled = readings(flip + stand, reps=200)
    assert {r.task for r in pooled} == {"all"}
    assert [r.tasks for r in pooled] == [36, 6]
    table = readings_table(flip + stand, reps=200, per_task=True)
    assert "| task | levels |" in table
    assert "| walker | rnd | stand | strongest | 3 |" in table


def test_no_fb_methods_is_an_error() -> None:
    rows = [_row("drbc", 0, "body_mass", 1.0, 1.0)]
    with pytest.raises(Exception, match="no FB-IL"):
        readings_table(rows)


def test_the_gap_table_pairs_seeds_and_grows_with_the_level() -> None:
    # Each seed's demonstrations move every method's return alike (+-30): paired by seed,
    # the differences carry none of it.
    offsets = [-30.0, 10.0, 30.0, -20.0, 5.0]
    rows = [
        dataclasses.replace(r, mean=r.mean + offsets[r.seed])
        for r in _rows({"fbil": 0.0, "rbfm-light": 50.0, "rbfm-heavy": 100.0}, 0.0)
    ]
    table = gap_table(rows).splitlines()
    assert table[0] == (
        "| expert | scope | difference | nominal | step 1 | step 2 | step 3 | step 4 | step 5 |"
    )
    # Gains are gain * k / 5 at the k-th level away from nominal.
    assert table[2] == (
        "| own | walker (rnd) | RBFM-Heavy - FB-IL | +0.0 +- 0.0 | +20.0 +- 0.0* | +40.0 +- 0.0* "
        "| +60.0 +- 0.0* | +80.0 +- 0.0* | +100.0 +- 0.0* |"
    )
    light = "| own | walker (rnd) | RBFM-Light - FB-IL | +0.0 +- 0.0 | +10.0 +- 0.0* |"
    assert table[3].startswith(light)


def test_the_gap_table_reads_each_task_where_pooling_cancels() -> None:
    # RBFM-Heavy gains 100 on flip and loses 100 on stand: pooled, 0 at every level.
    flip = _rows({"fbil": 0.0, "rbfm-light": 0.0, "rbfm-heavy": 100.0}, 0.0)
    stand = [
        dataclasses.replace(r, task="stand")
        for r in _rows({"fbil": 100.0, "rbfm-light": 100.0, "rbfm-heavy": 0.0}, 0.0)
    ]
    table = gap_table(flip + stand)
    pooled = "| own | walker (rnd) | RBFM-Heavy - FB-IL | +0.0 +- 0.0 | +0.0 +- 0.0 |"
    assert pooled in table
    for task, step_1 in (("flip", "+20.0"), ("stand", "-20.0")):
        row = f"| own | walker (rnd) {task} | RBFM-Heavy - FB-IL | +0.0 +- 0.0 | {step_1} +- 0.0* |"
        assert row in table
    # One task alone gets no per-task rows: they would repeat the model's.
    assert " flip |" not in gap_table(flip)


def test_the_gap_table_reads_falling_families_from_nominal_and_skips_incomplete_seeds() -> None:
    p = get_perturbation("cheetah", "range_of_motion")  # 100% retained at nominal, 60% far
    rows = []
    for i, level in enumerate(p.levels):
        for seed in range(3):
            rows.append(_row("fbil", seed, "range_of_motion", level, 100.0, "cheetah"))
            rows.append(_row("rbfm-heavy", seed, "range_of_motion", level, 100.0 + i, "cheetah"))
    rows.append(_row("fbil", 0, "joint_friction", 25.0, 0.0, "cheetah"))
    rows.append(_row("rbfm-heavy", 0, "joint_friction", 25.0, 90.0, "cheetah"))
    table = gap_table(rows)
    # The joint-friction cell has one seed of three: left out, not averaged into seed 0.
    assert "| own | cheetah (rnd) | RBFM-Heavy - FB-IL | +0.0 +- 0.0 | +1.0 +- 0.0* |" in table
    assert "+5.0 +- 0.0* |" in table
    assert "left out: 1 (combination, level) pairs" in table


def test_the_strongest_level_is_one_every_method_has() -> None:
    rows = _rows({"fbil": 0.0, "rbfm-light": 0.0, "rbfm-heavy": 0.0}, 1.0)
    extreme = get_perturbation("walker", "gravity").extreme
    unfinished = [
        r for r in rows if not (r.family == "gravity" and r.level == extreme and r.label == "fbil")
    ]
    kept = {r.level for r in strongest(unfinished) if r.family == "gravity"}
    assert kept == {get_perturbation("walker", "gravity").levels[4]}


def test_the_settings_table_reads_each_method_against_itself_at_the_papers_settings() -> None:
    rows = _rows({"fbil": 0.0, "rbfm-light": 0.0, "rbfm-heavy": 0.0}, spread=1.0)
    assert settings_table(rows) == ""  # nothing run both ways
    # The paper's settings of RBFM-Heavy far behind at every level, RBFM-Light's level.
    paper = [
        dataclasses.replace(
            r, variant="paper", mean=r.mean - (100.0 if r.method == "rbfm-heavy" else 0.0)
        )
        for r in rows
        if r.method != "fbil"
    ]
    table = settings_table(rows + paper, reps=200).splitlines()
    assert table[0].startswith("| expert | domain | dataset | levels | method | default settings")
    lines = [line.split(" | ") for line in table[2:]]
    assert [(c[3], c[4], c[-1]) for c in lines] == [
        ("all", "RBFM-Heavy", "default ahead |"),
        ("strongest", "RBFM-Heavy", "default ahead |"),
        ("all", "RBFM-Light", "CIs overlap |"),
        ("strongest", "RBFM-Light", "CIs overlap |"),
    ]


def test_the_baselines_table_reads_fb_against_baselines_only_where_they_ran() -> None:
    fb = {"fbil": 0.0, "rbfm-light": 0.0, "rbfm-heavy": 0.0}
    assert baselines_table(_rows(fb, 1.0)) == ""  # no baseline ran
    # The FB methods fall from 500 to 300 with the perturbation; DRBC lies 200 below them
    # everywhere, BE-DROIL stays near 299: below them at nominal, among them at the
    # strongest level.
    flip = _rows(fb, 1.0)
    flip += [dataclasses.replace(r, method="drbc", mean=r.mean - 200.0) for r in _rows(fb, 1.0)]
    flip += [
        dataclasses.replace(r, method="bedroil", mean=299.0 + (r.seed - 2) * 3.0)
        for r in _rows({"fbil": 0.0}, 1.0)
    ]
    stand = [dataclasses.replace(r, task="stand") for r in flip]
    # FB methods alone on run, and at the paper's settings: neither is compared.
    run = [dataclasses.replace(r, task="run") for r in _rows(fb, 1.0)]
    paper = [dataclasses.replace(r, variant="paper", mean=0.0) for r in _rows({"fbil": 0.0}, 1.0)]
    rows = [
        r
        for r in flip + stand + run + paper
        if r.family == "body_mass" or r.method in ("fbil", "rbfm-light", "rbfm-heavy")
    ]
    table = baselines_table(rows, reps=200).splitlines()
    assert table[0] == (
        "| expert | domain | dataset | family | task | levels | FB-IL | RBFM-Light | "
        "RBFM-Heavy | DRBC | BE-DROIL | reading |"
    )
    lines = [line.split(" | ") for line in table[2:]]
    # Only body mass, where the baselines ran: pooled over flip and stand, then each.
    assert [(c[3], c[4], c[5]) for c in lines] == [
        ("body_mass", task, levels)
        for task in ("all", "flip", "stand")
        for levels in ("all", "strongest")
    ]
    read = {(c[4], c[5]): c[-1] for c in lines}
    assert read[("flip", "strongest")].startswith("not separated: FB-IL ~ BE-DROIL")
    assert "DRBC" not in read[("flip", "strongest")]
    # Over every level the FB methods' falling lines stay above both on average.
    assert {levels: v for (_, levels), v in read.items()} == {
        "all": "every FB method > every baseline |",
        "strongest": "not separated: FB-IL ~ BE-DROIL, RBFM-Light ~ BE-DROIL, "
        "RBFM-Heavy ~ BE-DROIL |",
    }
    nominal = [r for r in rows if r.level == get_perturbation("walker", "body_mass").nominal]
    assert baselines_table(nominal, reps=200).count("every FB method > every baseline") == 6
