"""The goal tables: pooled IQM ratios to a reference, by range of levels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes

from rbfm.envs import get_perturbation
from rbfm.errors import ConfigError
from rbfm.experiments.table import ResultRow
from rbfm.reporting.goals import RANGES, estimates, gaps, goal_figure, goal_table, scores


def _rows() -> list[ResultRow]:
    """A nominal model whose return falls with the level, and a diverse one that loses 5%
    at nominal and holds 1.5x as much at the strongest levels."""
    rows = []
    levels = get_perturbation("cheetah", "joint_friction").levels
    rng = np.random.default_rng(0)
    for dataset, gain in (("rnd-v1", 0.0), ("rnd-rand", 1.0)):
        for i, level in enumerate(levels):
            base = 400.0 * (1 - i / 7)
            ret = base * (0.95 + gain * 0.55 * i / 5) if gain else base
            for seed in range(5):
                rows.append(
                    ResultRow(
                        "cheetah",
                        dataset,
                        "run",
                        "fbil",
                        "",
                        None,
                        seed,
                        "joint_friction",
                        level,
                        20,
                        ret + rng.normal(0, 2),
                        1.0,
                        0,
                        1.0,
                        "p",
                        f"{dataset}{i}{seed}",
                    )
                )
    return rows


def test_ratios_by_range_against_the_reference() -> None:
    rows = _rows()
    table = goal_table(rows, "rnd-v1:fbil", reps=200)
    line = next(x for x in table.splitlines() if x.startswith("| rnd-rand:fbil"))
    nominal, _, strongest = line.split("|")[2:5]
    assert "(0.95x*)" in nominal
    assert "(1.4" in strongest and "x*)" in strongest  # 1.39x and 1.5x pooled, disjoint
    assert "(1.00x)" in next(x for x in table.splitlines() if x.startswith("| rnd-v1:fbil"))
    # Each range pools its levels: two strongest = levels 5 and 6, 5 seeds x 2 columns.
    assert scores(rows, (4, 5))["rnd-v1:fbil"].shape == (5, 2)
    with pytest.raises(ConfigError, match=r"reference: .rnd:fbil. is not one of"):
        goal_table(rows, "rnd:fbil")


def test_paired_gaps_difference_seed_by_seed() -> None:
    """A configuration 3 points above the reference on every seed has a gap of exactly 3
    with a CI of width 0, however far apart the seeds' returns are; one whose seeds are not
    the reference's is left out rather than paired with the wrong ones."""
    from dataclasses import replace

    from rbfm.reporting.goals import _gap_table

    ref = [r for r in _rows() if r.dataset == "rnd-v1"]
    spread = [replace(r, mean=r.mean + 100.0 * r.seed) for r in ref]
    above = [replace(r, dataset="up", mean=r.mean + 3.0, cell=r.cell + "u") for r in spread]
    shifted = [replace(r, dataset="other", seed=r.seed + 1, cell=r.cell + "o") for r in spread]
    found = gaps(spread + above + shifted, "rnd-v1:fbil", reps=200)
    for per in found.values():
        assert per["up:fbil"] == pytest.approx((3.0, 3.0, 3.0))
        assert "other:fbil" not in per
    # Side by side the two intervals overlap (the seeds spread 400 points); paired, 3 > 0.
    pooled = estimates(spread + above, "rnd-v1:fbil", reps=200)["nominal"]
    assert pooled["up:fbil"][1] < pooled["rnd-v1:fbil"][2]
    table = _gap_table(found, ["rnd-v1:fbil", "up:fbil", "other:fbil"], "rnd-v1:fbil")
    assert "| up:fbil | +3.0 [+3.0, +3.0]* |" in table and "| other:fbil | - | - | - |" in table
    with pytest.raises(ConfigError, match="reference: 'rnd:fbil'"):
        gaps(spread, "rnd:fbil")


def test_the_figure_draws_each_range_with_the_goal_thresholds() -> None:
    rows = _rows()
    fig = goal_figure(rows, "rnd-v1:fbil", reps=200)
    nominal, inside, strongest = fig.axes
    found = estimates(rows, "rnd-v1:fbil", reps=200)
    ref = {title: per["rnd-v1:fbil"][0] for title, per in found.items()}

    def lines(ax: Axes, style: str) -> list[float]:
        return [
            float(np.asarray(ln.get_xdata())[0]) for ln in ax.lines if ln.get_linestyle() == style
        ]

    # The reference's IQM solid in every panel; the thresholds dashed where the goal reads.
    for ax, title in zip(fig.axes, RANGES, strict=True):
        assert lines(ax, "-") == pytest.approx([ref[title]])
    assert lines(nominal, "--") == pytest.approx([0.95 * ref["nominal"]])
    assert lines(inside, "--") == []
    assert lines(strongest, "--") == pytest.approx([1.15 * ref["two strongest (levels 5-6)"]])
    # Beside the diverse model's bar, its ratio as the table states it.
    table = goal_table(rows, "rnd-v1:fbil", reps=200)
    line = next(x for x in table.splitlines() if x.startswith("| rnd-rand:fbil"))
    stated = line.split("|")[4].split("(")[1].rstrip(") ")
    assert [t.get_text().strip() for t in strongest.texts] == [stated]


def test_levels_2_4_are_a_training_range_only_beside_a_diverse_model() -> None:
    rows = _rows()
    nominal_only = [r for r in rows if r.dataset == "rnd-v1"]
    assert "| inside the training range (levels 2-4) |" in goal_table(rows, "rnd-v1:fbil", 200)
    table = goal_table(nominal_only, "rnd-v1:fbil", reps=200)
    assert table.splitlines()[0].split("|")[3].strip() == "levels 2-4"
    fig = goal_figure(nominal_only, "rnd-v1:fbil", reps=200)
    assert fig.axes[1].get_title() == "cheetah: levels 2-4"
    assert "training range" not in fig.get_supxlabel()
    fig = goal_figure(rows, "rnd-v1:fbil", reps=200)
    assert fig.axes[1].get_title() == "cheetah: inside the training range (levels 2-4)"
    assert "training range" in fig.get_supxlabel()


def test_two_experts_are_never_pooled() -> None:
    import dataclasses

    rows = _rows()
    # The same configurations imitating a second expert, at half the return.
    other = [
        dataclasses.replace(r, expert="model:cheetah:cpu", mean=r.mean / 2, cell=r.cell + "b")
        for r in rows
    ]
    with pytest.raises(ConfigError, match="2 experts"):
        scores(rows + other, (0,))
    fig = goal_figure(rows + other, "rnd-v1:fbil", reps=200)
    assert len(fig.axes) == 2 * len(RANGES)  # one row of panels per expert
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "cheetah (own)\nnominal"
    assert titles[len(RANGES)] == "cheetah (model:cheetah:cpu)\nnominal"
    # Each expert's row reads its own reference: the second's at half the first's.
    ref = [float(np.asarray(ax.lines[0].get_xdata())[0]) for ax in fig.axes[:: len(RANGES)]]
    assert ref[1] == pytest.approx(ref[0] / 2, rel=0.05)


def test_the_report_reads_each_family_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rbfm.experiments.table import write_table
    from rbfm.reporting.goals import main

    write_table(tmp_path / "results.csv", _rows())  # one family: joint friction
    main([str(tmp_path / "results.csv"), "--reference", "rnd-v1:fbil"])
    sections = capsys.readouterr().out.split("### ")
    pooled = next(x for x in sections if x.startswith("cheetah, pooled over its tasks"))
    family = next(x for x in sections if x.startswith("cheetah joint_friction, pooled"))
    assert pooled.split("\n", 1)[1] == family.split("\n", 1)[1]  # the same rows, read apart


def test_a_stage_run_a_task_at_a_time_reads_as_the_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run.sh's STAGE@TASK parts: the report over the parts' results.csv equals the report
    over one file of all their rows, and a cell in two files is refused."""
    from dataclasses import replace

    from rbfm.experiments.table import write_table
    from rbfm.reporting.goals import main

    run = _rows()
    walk = [replace(r, task="walk", cell=r.cell + "w") for r in run]
    write_table(tmp_path / "all.csv", run + walk)
    write_table(tmp_path / "run.csv", run)
    write_table(tmp_path / "walk.csv", walk)
    main([str(tmp_path / "all.csv"), "--reference", "rnd-v1:fbil"])
    whole = capsys.readouterr().out
    main([str(tmp_path / "run.csv"), str(tmp_path / "walk.csv"), "--reference", "rnd-v1:fbil"])
    assert capsys.readouterr().out == whole and "### cheetah walk" in whole
    with pytest.raises(ConfigError, match=r"run cell rnd-v100 is also in .*all.csv"):
        main([str(tmp_path / "all.csv"), str(tmp_path / "run.csv"), "--reference", "rnd-v1:fbil"])


def test_shares_pool_tasks_of_different_scales_on_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task at ten times another's scale, with demonstrations ten times as good, pools
    as shares exactly as the one task does; rows without their demonstrations' return in
    the experts tables are refused before any bootstrap."""
    from dataclasses import replace

    from rbfm.experiments.table import CeilingRow, write_ceiling_table, write_table
    from rbfm.reporting.goals import as_shares, main

    run = _rows()
    walk = [replace(r, task="walk", mean=10 * r.mean, cell=r.cell + "w") for r in run]
    demos = [
        # The planner's own return (mean) differs from its demonstrations' (the divisor).
        CeilingRow("cheetah", d, t, run[0].expert, "none", None, 2, 7.0, 0.0, 0, m, f"{d}{t}")
        for d in ("rnd-v1", "rnd-rand")
        for t, m in (("run", 400.0), ("walk", 4000.0))
    ]
    both = as_shares(run + walk, demos)
    assert both[0].mean == pytest.approx(100 * run[0].mean / 400.0)
    # Raw, walk's columns are ten times run's; as shares they are run's own.
    raw, shared = scores(run + walk, (4, 5))["rnd-v1:fbil"], scores(both, (4, 5))["rnd-v1:fbil"]
    np.testing.assert_allclose(raw[:, 2:], 10 * raw[:, :2])
    np.testing.assert_allclose(shared[:, 2:], shared[:, :2])
    write_table(tmp_path / "results.csv", run + walk)
    write_ceiling_table(tmp_path / "experts.csv", demos)
    main([str(tmp_path / "results.csv"), "--reference", "rnd-v1:fbil",
          "--shares", str(tmp_path / "experts.csv")])  # fmt: skip
    assert "### cheetah, pooled over its tasks as shares (%) of the demonstrations" in (
        capsys.readouterr().out
    )
    write_ceiling_table(tmp_path / "experts.csv", demos[:3])
    with pytest.raises(ConfigError, match="no positive demonstrations' return for cheetah/rnd-r"):
        main([str(tmp_path / "results.csv"), "--reference", "rnd-v1:fbil",
              "--shares", str(tmp_path / "experts.csv")])  # fmt: skip


def test_ceiling_shares_read_each_cell_against_the_expert_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A planner's ceiling at twice the reference's return in every cell it was evaluated
    in reads as 50% there; the cells it was not evaluated in are left out (no levels 2-4
    column), and a cell where it returned nothing positive is refused."""
    from dataclasses import replace

    from rbfm.experiments.table import CeilingRow, write_ceiling_table, write_table
    from rbfm.reporting.goals import as_ceiling_shares, main

    rows = _rows()
    levels = get_perturbation("cheetah", "joint_friction").levels
    base = {i: 400.0 * (1 - i / 7) for i in range(len(levels))}
    ceilings = [
        CeilingRow(
            "cheetah",
            d,
            "run",
            rows[0].expert,
            "joint_friction",
            levels[i],
            2,
            2 * base[i],
            0.0,
            0,
            400.0,
            f"{d}{i}",
        )
        for d in ("rnd-v1", "rnd-rand")
        for i in (0, 4, 5)
    ]
    shared = as_ceiling_shares(rows, ceilings)
    assert len(shared) == 3 * len(rows) // len(levels)
    assert scores(shared, (4, 5))["rnd-v1:fbil"] == pytest.approx(50.0, abs=1.0)
    write_table(tmp_path / "results.csv", rows)
    write_ceiling_table(tmp_path / "experts.csv", ceilings)
    main([str(tmp_path / "results.csv"), "--reference", "rnd-v1:fbil",
          "--shares", str(tmp_path / "experts.csv")])  # fmt: skip
    block = capsys.readouterr().out.split("as shares (%) of the expert in each cell\n")[1]
    header = block.strip().splitlines()[0]
    assert header == "| configuration | nominal | two strongest (levels 5-6) |"
    assert "| rnd-v1:fbil | 50." in block
    write_ceiling_table(tmp_path / "experts.csv", [*ceilings[:-1], replace(ceilings[-1], mean=0.0)])
    with pytest.raises(ConfigError, match=r"returned 0\.0 at cheetah/rnd-rand/run joint_friction"):
        main([str(tmp_path / "results.csv"), "--reference", "rnd-v1:fbil",
              "--shares", str(tmp_path / "experts.csv")])  # fmt: skip
