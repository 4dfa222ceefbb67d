"""Figures and tables drawn from a synthetic experiment results table."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import same_color
from matplotlib.figure import Figure
from PIL import Image
from scipy import stats

from rbfm.errors import ConfigError
from rbfm.experiments.table import (
    CEILING_COLUMNS,
    CeilingRow,
    CertificateRow,
    ResultRow,
    read_ceilings,
    read_certificates,
    read_table,
    write_ceiling_table,
    write_certificate_table,
    write_table,
)
from rbfm.methods import display_label
from rbfm.reporting import figures
from rbfm.reporting.figures import (
    baselines_figure,
    datasets_figure,
    draw_all,
    eps_figure,
    grid_figure,
    save_figure,
)
from rbfm.reporting.report import (
    ceilings_table,
    certificates_table,
    format_seconds,
    iqm_summary,
    returns_table,
    shares_table,
    timing_table,
)
from rbfm.reporting.stats import aggregate, iqm_estimates, iqm_scores

LEVELS = {"body_mass": (0.0, 50.0, 100.0), "joint_friction": (0.0, 30.0)}
TASKS = ("walk", "run")
SEEDS = (0, 1, 2)
# (method, variant, eps, base return, base inference seconds)
LABELS = (
    ("fbil", "", None, 500.0, 10.0),
    ("rbfm-heavy", "eps=0.4", 0.4, 600.0, 30.0),
    ("rbfm-heavy", "eps=0.8", 0.8, 650.0, 50.0),
    ("drbc", "", None, 300.0, 2000.0),
)


def _row(
    dataset: str,
    task: str,
    label: tuple[str, str, float | None, float, float],
    seed: int,
    family: str,
    level: float | None,
    noise: float,
) -> ResultRow:
    method, variant, eps, ret, secs = label
    slope = {"body_mass": 2.0, "joint_friction": 5.0, "none": 0.0}[family]
    return ResultRow(
        domain="walker",
        dataset=dataset,
        task=task,
        method=method,
        variant=variant,
        eps=eps,
        seed=seed,
        family=family,
        level=level,
        episodes=10,
        mean=ret + (100.0 if task == "run" else 0.0) - slope * (level or 0.0) + noise,
        std=5.0,
        unstable=seed % 2,
        inference_seconds=secs * (1 + seed) * (2 if task == "run" else 1),
        policy=f"{task}-{method}-{seed}.json",
        cell=f"{dataset}-{task}-{method}{variant}-{seed}-{family}-{level}",
    )


@pytest.fixture(scope="module")
def rows() -> list[ResultRow]:
    """walker on "rnd" (every label, both families) and "rnd-100k" (fbil and eps=0.4, body
    mass only), 2 tasks, 3 seeds, noisy per-seed returns."""
    rng = np.random.default_rng(0)
    out = []
    for dataset, labels, fams in (
        ("rnd", LABELS, ("body_mass", "joint_friction")),
        ("rnd-100k", LABELS[:2], ("body_mass",)),
    ):
        for task in TASKS:
            for label in labels:
                for seed in SEEDS:
                    for family in fams:
                        for level in LEVELS[family]:
                            noise = float(rng.normal(0, 20))
                            out.append(_row(dataset, task, label, seed, family, level, noise))
    return out


def _ci(x: list[float]) -> float:
    return float(stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x)))


# --- aggregation ------------------------------------------------------------------------------


def test_aggregate_means_and_cis_by_hand(rows: list[ResultRow]) -> None:
    aggs = aggregate(rows)
    # 2 tasks x (4 labels x 5 levels on rnd + 2 labels x 3 levels on rnd-100k)
    assert len(aggs) == 2 * (4 * 5 + 2 * 3)
    pick = [
        r
        for r in rows
        if r.dataset == "rnd"
        and r.task == "run"
        and r.label == "rbfm-heavy (eps=0.8)"
        and r.family == "body_mass"
        and r.level == 50.0
    ]
    assert len(pick) == 3
    (a,) = [
        a
        for a in aggs
        if (a.dataset, a.task, a.label, a.family, a.level)
        == ("rnd", "run", "rbfm-heavy (eps=0.8)", "body_mass", 50.0)
    ]
    xs = [r.mean for r in pick]
    assert a.mean == pytest.approx(sum(xs) / 3)
    assert a.ci95 == pytest.approx(_ci(xs))
    assert a.ci95 > 0
    assert (a.method, a.seeds, a.episodes, a.unstable) == ("rbfm-heavy", 3, 30, 1)
    # Sorted: dataset, task, family, label in paper order, level.
    first = [(a.label, a.level) for a in aggs[:6]]
    assert first == [
        ("fbil", 0.0),
        ("fbil", 50.0),
        ("fbil", 100.0),
        ("rbfm-heavy (eps=0.4)", 0.0),
        ("rbfm-heavy (eps=0.4)", 50.0),
        ("rbfm-heavy (eps=0.4)", 100.0),
    ]
    assert aggs[0].task == "walk" and aggs[0].family == "body_mass"


def test_aggregate_rejects_duplicate_seeds_and_empty(rows: list[ResultRow]) -> None:
    with pytest.raises(ConfigError, match="more than once"):
        aggregate([rows[0], rows[0]])
    with pytest.raises(ConfigError, match="no result rows"):
        aggregate([])


# --- figures ----------------------------------------------------------------------------------


def _lines(ax: object) -> list[str]:
    return [ln.get_label() for ln in ax.lines if not ln.get_label().startswith("_")]  # type: ignore[attr-defined]


def _xy(data: object) -> np.ndarray:
    return np.asarray(data, dtype=np.float64)


def test_grid_figure_panels_lines_and_styles(rows: list[ResultRow]) -> None:
    fig = grid_figure(rows, "walker")  # dataset: the first found, "rnd"
    assert len(fig.axes) == 4
    assert [ax.get_title() for ax in fig.axes] == [
        "walk / body mass",
        "walk / joint friction",
        "run / body mass",
        "run / joint friction",
    ]
    assert "(rnd)" in fig.get_suptitle()
    labels = ["FB-IL", "RBFM-Heavy (eps=0.4)", "RBFM-Heavy (eps=0.8)", "DRBC"]  # display names
    for ax in fig.axes:
        assert _lines(ax) == labels
        assert len(ax.collections) == 4  # a CI band per line
    assert fig.axes[0].get_xlabel() == "body mass (% increase)"
    assert fig.axes[1].get_xlabel() == "joint friction (Nm)"
    # One shared legend, paper order.
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == labels
    # The fbil line of (run, body_mass) is the aggregate, in the paper's style.
    fbil = fig.axes[2].lines[0]
    want = [
        a.mean
        for a in aggregate(rows)
        if (a.dataset, a.task, a.label, a.family) == ("rnd", "run", "fbil", "body_mass")
    ]
    np.testing.assert_allclose(_xy(fbil.get_ydata()), want)
    np.testing.assert_allclose(_xy(fbil.get_xdata()), LEVELS["body_mass"])
    assert fbil.get_marker() == "^" and same_color(fbil.get_color(), "C0")
    heavy4, heavy8, drbc = fig.axes[2].lines[1:4]
    assert heavy4.get_marker() == heavy8.get_marker() == "o"
    assert same_color(heavy4.get_color(), "C2") and same_color(heavy8.get_color(), "C2")
    assert heavy4.get_linestyle() != heavy8.get_linestyle()
    assert drbc.get_marker() == "D" and same_color(drbc.get_color(), "C3")


def test_grid_other_dataset_and_nominal_only(rows: list[ResultRow]) -> None:
    fig = grid_figure(rows, "walker", dataset="rnd-100k")
    assert [ax.get_title() for ax in fig.axes] == ["walk / body mass", "run / body mass"]
    assert _lines(fig.axes[0]) == ["FB-IL", "RBFM-Heavy (eps=0.4)"]
    nominal = [
        _row("rnd", t, lab, s, "none", None, float(s))
        for t in TASKS
        for lab in LABELS
        for s in SEEDS
    ]
    fig = grid_figure(nominal, "walker")
    assert [ax.get_title() for ax in fig.axes] == ["walk / none", "run / none"]
    for ax in fig.axes:
        assert len(ax.containers) == 4  # a point with error bars per label
        assert ax.get_xlabel() == "nominal"


def test_families_that_grow_downwards_are_drawn_with_x_inverted() -> None:
    from dataclasses import replace

    base = _row("rnd", "run", LABELS[0], 0, "body_mass", 0.0, 0.0)
    rows = [
        replace(base, domain="cheetah", family=fam, level=lvl, seed=s)
        for fam, levels in (("range_of_motion", (100.0, 60.0)), ("joint_friction", (0.0, 25.0)))
        for lvl in levels
        for s in SEEDS
    ]
    fig = grid_figure(rows, "cheetah")
    assert [ax.get_xlabel() for ax in fig.axes] == [
        "joint friction (Nm)",
        "range of motion (% retained)",
    ]
    assert [ax.xaxis_inverted() for ax in fig.axes] == [False, True]


def test_a_figure_is_saved_as_one_png(rows: list[ResultRow], tmp_path: Path) -> None:
    rows = [r for r in rows if r.task == "walk" and r.family == "body_mass"]  # 1 panel: quick
    png = save_figure(grid_figure(rows, "walker"), tmp_path / "sub" / "grid.png")
    assert png == tmp_path / "sub" / "grid.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Image.open(png).mode == "P"  # 256 palette colours: a fraction of full colour's size
    # Without a suffix, .png is added; no other format is written.
    assert save_figure(grid_figure(rows, "walker"), tmp_path / "g2") == tmp_path / "g2.png"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["g2.png", "grid.png"]


def test_baselines_datasets_and_eps_figures(rows: list[ResultRow]) -> None:
    fig = baselines_figure(rows, "walker", "joint_friction")
    assert [ax.get_title() for ax in fig.axes] == ["walk", "run"]
    assert all("DRBC" in _lines(ax) for ax in fig.axes)
    np.testing.assert_allclose(_xy(fig.axes[0].lines[0].get_xdata()), LEVELS["joint_friction"])

    fig = datasets_figure(rows, "walker", "walk", "body_mass")
    assert [ax.get_title() for ax in fig.axes] == ["rnd", "rnd-100k"]
    assert [len(_lines(ax)) for ax in fig.axes] == [4, 2]

    fig = eps_figure(rows, "walker", "run", "body_mass")
    (ax,) = fig.axes
    (legend,) = fig.legends  # under the panel, titled by the band caption
    assert [t.get_text() for t in legend.get_texts()] == ["eps=0.4", "eps=0.8"]
    assert "Band: 95% Student-t" in legend.get_title().get_text()
    assert len(ax.lines) == 2 and len(ax.collections) == 2
    with pytest.raises(ConfigError, match="no radius"):
        eps_figure(rows, "walker", "run", "body_mass", method="fbil")

    # Titles write families as words and name an expert other than the model's own.
    noisy = [dataclasses.replace(r, expert="noisy") for r in rows]
    titles = [
        baselines_figure(rows, "walker", "joint_friction").get_suptitle(),
        baselines_figure(noisy, "walker", "joint_friction").get_suptitle(),
        datasets_figure(noisy, "walker", "walk", "body_mass").get_suptitle(),
        eps_figure(noisy, "walker", "run", "body_mass").axes[0].get_title(),
    ]
    assert titles[0] == "walker (rnd): FB methods and baselines under joint friction"
    assert titles[1] == "walker (rnd, noisy expert): FB methods and baselines under joint friction"
    assert titles[2] == "walker walk under body mass: by dataset, noisy expert"
    assert titles[3] == "walker run (rnd, noisy expert):\nRBFM-Heavy by radius under body mass"


def test_unknown_names_raise_config_errors(rows: list[ResultRow]) -> None:
    with pytest.raises(ConfigError, match=r"domain 'cheetah'.*present: walker"):
        grid_figure(rows, "cheetah")
    with pytest.raises(ConfigError, match=r"dataset 'aps'.*rnd, rnd-100k"):
        grid_figure(rows, "walker", dataset="aps")
    with pytest.raises(ConfigError, match=r"family 'gravity'.*body_mass, joint_friction"):
        baselines_figure(rows, "walker", "gravity")
    with pytest.raises(ConfigError, match=r"task 'stand'.*walk, run"):
        datasets_figure(rows, "walker", "stand", "body_mass")
    with pytest.raises(ConfigError, match=r"method 'rbfm-light'"):
        eps_figure(rows, "walker", "walk", "body_mass", method="rbfm-light")
    with pytest.raises(ConfigError, match="no result rows"):
        grid_figure([], "walker")


# --- tables -----------------------------------------------------------------------------------


def test_format_seconds() -> None:
    assert format_seconds(12.34) == "12.3 s"
    assert format_seconds(83) == "1m 23s"
    assert format_seconds(5 * 3600 + 23 * 60 + 10) == "5h 23m"


def test_timing_table_counts_each_seed_once(rows: list[ResultRow]) -> None:
    # Seed 0 loses its joint_friction rows: a mean over rows would weight the seeds unevenly.
    mine = [r for r in rows if r.dataset == "rnd" and not (r.seed == 0 and r.family != "body_mass")]
    lines = timing_table(mine).splitlines()
    # Display names, variants kept: tables are read next to the figures' legends.
    assert lines[0] == "| task | FB-IL | RBFM-Heavy (eps=0.4) | RBFM-Heavy (eps=0.8) | DRBC |"
    # seconds = base x (1 + seed) x (2 on run): walk fbil = mean(10, 20, 30) = 20 s, ...
    assert lines[2] == "| walker/walk | 20.0 s | 1m 0s | 1m 40s | 1h 7m |"
    assert lines[3] == "| walker/run | 40.0 s | 2m 0s | 3m 20s | 2h 13m |"
    assert lines[4] == "| mean | 30.0 s | 1m 30s | 2m 30s | 1h 40m |"
    assert lines[5] == "| ratio to FB-IL | x1.0 | x3.0 | x5.0 | x200.0 |"
    # Several datasets: each (task, dataset) is a row.
    both = timing_table(rows)
    assert "| walker/walk (rnd-100k) | 20.0 s | 1m 0s | - | - |" in both
    # A label that ran on some tasks only is compared with FB-IL on those tasks: DRBC is
    # still x200 though FB-IL's mean now includes rnd-100k's walk.
    assert both.splitlines()[-1] == "| ratio to FB-IL | x1.0 | x3.0 | x5.0 | x200.0 |"


def test_returns_table(rows: list[ResultRow]) -> None:
    text = returns_table(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| domain | dataset | task | family | level | FB-IL |")
    assert len(lines) == 2 + 2 * 5 + 2 * 3
    (a,) = [
        a
        for a in aggregate(rows)
        if (a.dataset, a.task, a.label, a.family, a.level)
        == ("rnd", "walk", "drbc", "joint_friction", 30.0)
    ]
    row = next(ln for ln in lines if ln.startswith("| walker | rnd | walk | joint_friction | 30 |"))
    assert row.endswith(f"| {a.mean:.1f} +- {a.ci95:.1f} |")
    assert "| walker | rnd-100k | walk | body_mass | 0 |" in text
    assert text.count(" - |") == 2 * 3 * 2  # rnd-100k lacks eps=0.8 and drbc


# --- IQM --------------------------------------------------------------------------------------


def test_iqm_scores_matrix_and_drops(rows: list[ResultRow]) -> None:
    scores, notes = iqm_scores(rows)
    # Tasks pool both datasets: rnd-100k has only fbil and eps=0.4.
    assert list(scores) == ["fbil", "rbfm-heavy (eps=0.4)"]
    assert scores["fbil"].shape == (3, 2 * 5 + 2 * 3)
    assert any(n.startswith("drbc: dropped") for n in notes)
    rnd = [r for r in rows if r.dataset == "rnd"]
    scores, notes = iqm_scores(rnd, family="body_mass", level=50.0)
    assert len(scores) == 4 and notes == []
    assert scores["drbc"].shape == (3, 2)
    want = sorted(
        r.mean
        for r in rnd
        if (r.label, r.task, r.family, r.level) == ("drbc", "walk", "body_mass", 50.0)
    )
    np.testing.assert_allclose(sorted(scores["drbc"][:, 1]), want)  # tasks sorted: run, walk
    uneven = [r for r in rnd if not (r.label == "drbc" and r.seed == 2 and r.task == "walk")]
    scores, notes = iqm_scores(uneven)
    assert "drbc" not in scores and any("uneven seeds" in n for n in notes)


def test_iqm_summary_point_estimate_is_trimmed_mean(rows: list[ResultRow]) -> None:
    rnd = [r for r in rows if r.dataset == "rnd"]
    text = iqm_summary(rnd, family="joint_friction", reps=100)
    scores, _ = iqm_scores(rnd, family="joint_friction")
    assert "4 (task, family, level) combinations" in text
    for label, s in scores.items():
        point = stats.trim_mean(s.ravel(), 0.25)
        row = f"| {display_label(label)} |"  # the table names methods as the figures do
        line = next(ln for ln in text.splitlines() if ln.startswith(row))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == f"{point:.1f}"
        low, high = (float(x) for x in cells[2].strip("[]").split(","))
        assert low <= point <= high
        assert cells[3:] == ["3", "4"]
    # Deterministic, and the global RNG is left as it was.
    np.random.seed(123)
    assert iqm_summary(rnd, family="joint_friction", reps=100) == text
    after = np.random.random()
    np.random.seed(123)
    assert after == np.random.random()
    assert "drbc: dropped" in iqm_summary(rows, reps=50)


def test_iqm_intervals_match_rliable_called_directly(rows: list[ResultRow]) -> None:
    from rliable import library as rly
    from rliable import metrics

    rnd = [r for r in rows if r.dataset == "rnd"]
    result = iqm_estimates(rnd, family="body_mass", reps=100, seed=3)
    scores, _ = iqm_scores(rnd, family="body_mass")
    np.random.seed(3)
    points, intervals = rly.get_interval_estimates(
        scores, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=100
    )
    assert [e.label for e in result.estimates] == list(scores)
    for e in result.estimates:
        assert e.iqm == pytest.approx(points[e.label][0])
        assert (e.low, e.high) == pytest.approx(tuple(intervals[e.label][:, 0]))
        assert e.low < e.iqm < e.high


# --- everything -------------------------------------------------------------------------------


def test_draw_all_files(
    rows: list[ResultRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: dict[str, Figure] = {}

    def save(fig: Figure, out: Path) -> Path:  # rendering is slow; a test of its own does it
        png = Path(out).with_suffix(".png")
        png.write_bytes(b"")
        drawn[png.stem] = fig
        return png

    monkeypatch.setattr(figures, "save_figure", save)
    table = write_table(tmp_path / "results.csv", rows)
    written = draw_all(table, tmp_path / "figs", iqm_reps=100)
    names = [p.name for p in written]
    stems = sorted({p.stem for p in written if p.suffix == ".png"})
    assert stems == sorted(
        [
            "grid-walker-rnd",
            "grid-walker-rnd-100k",
            "baselines-walker-body_mass",
            "baselines-walker-joint_friction",
            "datasets-walker-walk-body_mass",
            "datasets-walker-run-body_mass",
            "eps-walker-walk-body_mass",
            "eps-walker-walk-joint_friction",
            "eps-walker-run-body_mass",
            "eps-walker-run-joint_friction",
            "iqm",
        ]
    )
    assert names.count("tables.md") == 1
    assert len(written) == len(stems) + 1  # a PNG per figure, and tables.md
    assert all(p.exists() and p.parent == tmp_path / "figs" for p in written)
    assert [ax.get_title() for ax in drawn["datasets-walker-run-body_mass"].axes] == [
        "rnd",
        "rnd-100k",
    ]
    assert len(drawn["grid-walker-rnd-100k"].axes) == 2
    md = (tmp_path / "figs" / "tables.md").read_text()
    assert "ratio to FB-IL" in md and "+-" in md and "IQM" in md


def test_run_figures_replace_an_earlier_drawing(
    rows: list[ResultRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec drawn into another's run directory keeps none of the other's figures."""

    def save(fig: Figure, out: Path) -> Path:
        png = Path(out).with_suffix(".png")
        png.write_bytes(b"")
        return png

    monkeypatch.setattr(figures, "save_figure", save)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "grid-cheetah-rnd.png").write_bytes(b"stale")
    walker = [r for r in rows if r.dataset == "rnd" and r.method == "fbil"]
    written = figures.draw_run_figures(tmp_path, write_table(tmp_path / "r.csv", walker))
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        p.name for p in written
    )
    assert "grid-walker-rnd.png" in {p.name for p in written}
    assert not (tmp_path / ".figures.part").exists()


def test_bands_stay_in_the_return_range_and_figures_say_what_they_show(
    rows: list[ResultRow],
) -> None:
    """Two seeds far apart give a Student-t interval reaching below 0 and above 1000: the
    band is clipped to the range returns can take, and the caption says what it is."""
    from dataclasses import replace

    wide = [
        replace(r, mean=(0.0 if r.seed == SEEDS[0] else 1000.0))
        for r in rows
        if r.task == "walk" and r.family == "body_mass"
    ]
    fig = grid_figure(wide, "walker")
    for band in fig.axes[0].collections:
        ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
        assert ys.min() >= 0.0 and ys.max() <= 1000.0
    (legend,) = fig.legends  # its title is the caption: one box, kept clear of the panels
    caption = " ".join(legend.get_title().get_text().split())
    assert "95% Student-t CI across seeds, clipped to the return range [0, 1000]" in caption


def test_each_expert_source_gets_its_own_figures_and_tables(
    rows: list[ResultRow], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: dict[Path, Figure] = {}

    def save(fig: Figure, out: Path) -> Path:
        png = Path(out).with_suffix(".png")
        png.write_bytes(b"")
        drawn[png] = fig
        return png

    monkeypatch.setattr(figures, "save_figure", save)
    walker = [r for r in rows if r.dataset == "rnd" and r.method == "fbil"]
    noisy = [dataclasses.replace(r, expert="noisy", mean=r.mean - 50) for r in walker]
    written = figures.draw_run_figures(tmp_path, write_table(tmp_path / "r.csv", walker + noisy))
    figs = tmp_path / "figures"
    assert {p.parent for p in written} == {figs / "expert-own", figs / "expert-noisy"}
    assert all(p.exists() for p in written)
    own_md = (figs / "expert-own" / "tables.md").read_text()
    noisy_md = (figs / "expert-noisy" / "tables.md").read_text()
    assert own_md.startswith("# Results: r.csv, expert own")
    # Each table holds its own expert's returns only.
    assert own_md != noisy_md.replace("expert noisy", "expert own")
    # Figures name a source other than the paper's own expert, and the IQM bars fit.
    figs_of = {p.parent.name + "/" + p.stem: f for p, f in drawn.items()}
    assert figs_of["expert-noisy/iqm"].axes[0].get_title().endswith("(noisy expert)")
    assert figs_of["expert-own/iqm"].axes[0].get_title().endswith("per method")
    assert "noisy expert" in figs_of["expert-noisy/grid-walker-rnd"].get_suptitle()
    ax = figs_of["expert-noisy/iqm"].axes[0]
    lows = [patch.get_x() for patch in ax.patches]
    assert ax.get_xlim()[0] < min(lows)


def test_a_table_written_before_the_expert_column_reads_as_own(
    rows: list[ResultRow], tmp_path: Path
) -> None:
    path = write_table(tmp_path / "r.csv", rows[:3])
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    k = header.index("expert")
    old = [",".join(c for i, c in enumerate(line.split(",")) if i != k) for line in lines]
    path.write_text("\n".join(old) + "\n")
    assert read_table(path) == rows[:3]


def test_the_expert_itself_is_a_dashed_line_in_its_panels_and_a_table(
    rows: list[ResultRow], tmp_path: Path
) -> None:
    levels = LEVELS["body_mass"]
    ceilings = [
        CeilingRow(
            "walker", "rnd", "walk", "own", "body_mass", lv, 10, 500.0 - k, 3.0, 0, 480.0, "c"
        )
        for k, lv in enumerate(levels)
    ] + [
        CeilingRow(
            "walker", "rnd", "walk", "noisy", "body_mass", levels[0], 10, 1.0, 1.0, 2, 9.0, "n"
        )
    ]
    fig = grid_figure(rows, "walker", ceilings=ceilings)
    walk_mass, walk_friction = fig.axes[0], fig.axes[1]
    assert _lines(walk_mass)[-1] == "expert itself" and "expert itself" not in _lines(walk_friction)
    line = walk_mass.lines[-1]
    # Only the own expert's: the table's rows are own (the noisy row is not drawn).
    np.testing.assert_allclose(_xy(line.get_ydata()), [500.0 - k for k in range(len(levels))])
    assert line.get_linestyle() == "--"
    assert line.get_marker() == "x"  # a cross at each level it was measured at
    caption = fig.legends[0].get_title().get_text()
    assert "dashed between adjacent levels measured (with its action" in caption.replace("\n", " ")
    # A planner's ceiling is said to be one, with its episodes (fewer than the imitators').
    planned = [dataclasses.replace(c, expert="mpc", episodes=2) for c in ceilings[:3]]
    assert figures._ceiling_caption(planned).endswith("inside each shifted simulator (2 episodes).")
    # Planned at the ends only: no line across the level between them, two crosses,
    # labelled once.
    fig = grid_figure(rows, "walker", ceilings=[ceilings[0], ceilings[2]])
    drawn = [ln for ln in fig.axes[0].lines if ln.get_color() == "black"]
    assert [list(_xy(ln.get_xdata())) for ln in drawn] == [[levels[0]], [levels[2]]]
    assert next(ln.get_label() for ln in drawn) == "expert itself"
    assert _lines(fig.axes[0]).count("expert itself") == 1
    path = tmp_path / "experts.csv"
    header = ",".join(CEILING_COLUMNS)
    path.write_text(header + "\nwalker,rnd,walk,own,body_mass,0.0,10,500,3,0,510,x\n")
    assert read_ceilings(write_ceiling_table(path, ceilings)) == ceilings
    path.write_text(header + "\nwalker,rnd,walk,own,body_mass,0.0,10,500,3,0,510,x\n")
    assert read_ceilings(path) == [
        CeilingRow("walker", "rnd", "walk", "own", "body_mass", 0.0, 10, 500.0, 3.0, 0, 510.0, "x")
    ]
    assert "| walker | rnd | walk | own | body_mass | 0 | 500.0 +- 3.0 | 10 |" in ceilings_table(
        read_ceilings(path)
    )
    path.write_text("domain,task\nwalker,walk\n")
    with pytest.raises(ConfigError, match=r"not an experts table \(no column dataset\)"):
        read_ceilings(path)


def test_the_shares_table_reads_each_method_against_the_expert_at_the_same_cell(
    rows: list[ResultRow],
) -> None:
    """A share is the mean over seeds of a method's return over the expert's at that cell,
    its CI the seeds' scaled alike; cells without the expert, or where its return is not
    positive, show no share."""
    walk = [r for r in rows if (r.dataset, r.task) == ("rnd", "walk")]
    lv0, lv1, lv2 = LEVELS["body_mass"][:3]
    ceilings = [
        CeilingRow("walker", "rnd", "walk", "own", "body_mass", lv0, 10, 400.0, 1.0, 0, 9.0, "a"),
        CeilingRow("walker", "rnd", "walk", "own", "body_mass", lv1, 10, 0.0, 1.0, 0, 9.0, "b"),
        # Another expert's ceiling at the same cell is not these rows' expert.
        CeilingRow("walker", "rnd", "walk", "mpc", "body_mass", lv0, 2, 800.0, 1.0, 0, 9.0, "c"),
        CeilingRow("walker", "rnd", "walk", "own", "body_mass", lv2, 10, math.nan, 0, 0, 9.0, "d"),
    ]
    text = shares_table(walk, ceilings)
    fbil = [r.mean for r in walk if (r.label, r.family, r.level) == ("fbil", "body_mass", lv0)]
    mean, ci = 100 * np.mean(fbil) / 400, 100 * _ci(fbil) / 400
    line = next(x for x in text.splitlines() if f"| body_mass | {lv0:g} | 400.0 |" in x)
    assert line.split(" | ")[6] == f"{mean:.0f} +- {ci:.0f}"
    line = next(x for x in text.splitlines() if f"| body_mass | {lv1:g} | 0.0 |" in x)
    assert set(line.strip("| ").split(" | ")[6:]) == {"-"}
    line = next(x for x in text.splitlines() if f"| body_mass | {lv2:g} | nan |" in x)
    assert set(line.strip("| ").split(" | ")[6:]) == {"-"}  # no share of a NaN return
    assert "| joint_friction |" not in text  # no ceiling there
    assert shares_table(walk, []) == ""


def test_certificates_round_trip_and_their_table_says_mean_and_ci_per_method(
    rows: list[ResultRow], tmp_path: Path
) -> None:
    def cert(method: str, seed: int, kind: str, radius: float, worst: float) -> CertificateRow:
        eps = None if method == "fbil" else 0.8
        return CertificateRow(
            "walker", "rnd", "walk", "own", method, "", eps, seed, kind, radius, 0.1, worst, "p"
        )

    certs = [
        cert(m, seed, kind, r, base + seed * 0.01 + r)
        for m, base in (("rbfm-heavy", 0.2), ("fbil", 0.3))
        for seed in (0, 1, 2)
        for kind in ("tv", "heavy")
        for r in (0.2, 0.4, 0.8)
    ]
    certs[0] = dataclasses.replace(certs[0], worst_case_loss=math.inf)
    path = write_certificate_table(tmp_path / "certificates.csv", certs)
    assert read_certificates(path) == certs  # inf survives the round trip
    table = certificates_table(certs).splitlines()
    columns = "nominal | TV 0.2 | TV 0.8 | Heavy 0.2 | Heavy 0.8"
    assert table[0] == f"| domain | dataset | task | expert | method | {columns} |"
    # FB-IL first (the paper's order), whatever the order of the rows; means over seeds.
    first = "| walker | rnd | walk | own"
    assert table[2].startswith(f"{first} | FB-IL | 0.1 +- 0 | 0.51 +- 0.025 |")
    assert table[3].startswith(f"{first} | RBFM-Heavy | 0.1 +- 0 | not finite (1 of 3 seeds) |")
    # Another expert's certificates are other rows, never pooled with these.
    noisy = [dataclasses.replace(c, expert="noisy", nominal_loss=0.5) for c in certs]
    table = certificates_table(certs + noisy).splitlines()
    assert len(table) == 6 and table[4].startswith(
        "| walker | rnd | walk | noisy | FB-IL | 0.5 +- 0"
    )
    # A NaN loss (a broken policy) is read back and shown, not rejected or dropped.
    nan = [dataclasses.replace(c, worst_case_loss=math.nan) for c in certs]
    assert "not finite (3 of 3" in certificates_table(
        read_certificates(write_certificate_table(tmp_path / "nan.csv", nan))
    )
    # tables.md gets the section only when the run has certificates, per expert.
    written = draw_all(write_table(tmp_path / "r.csv", rows), tmp_path / "a", 50, None, path)
    md = next(p for p in written if p.name == "tables.md").read_text()
    assert "## Robustness certificates" in md and "| RBFM-Heavy | 0.1 +- 0 | not finite" in md
    written = draw_all(tmp_path / "r.csv", tmp_path / "b", 50)
    md = next(p for p in written if p.name == "tables.md").read_text()
    assert "Robustness certificates" not in md
    (tmp_path / "bad.csv").write_text("domain,task\nwalker,walk\n")
    with pytest.raises(ConfigError, match=r"not a certificates table \(no column dataset\)"):
        read_certificates(tmp_path / "bad.csv")


def test_a_redrawing_writes_the_same_bytes(rows: list[ResultRow], tmp_path: Path) -> None:
    """Rerunning a finished grid redraws its figures: the same files, byte for byte (no
    software versions in the PNGs, a seeded bootstrap), so a rerun
    leaves docs/results unchanged."""
    walker = [r for r in rows if r.dataset == "rnd" and r.family == "body_mass"]
    table = write_table(tmp_path / "r.csv", walker)
    first = draw_all(table, tmp_path / "a", iqm_reps=50)
    again = draw_all(table, tmp_path / "b", iqm_reps=50)
    assert [p.relative_to(tmp_path / "a") for p in first] == [
        p.relative_to(tmp_path / "b") for p in again
    ]
    assert {p.suffix for p in first} == {".png", ".md"}
    for a, b in zip(first, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_figures_a_reader_can_judge(rows: list[ResultRow]) -> None:
    """The IQM figure gives each method's paired gap to FB-IL beside its interval; curves
    that coincide say so in their panel; dashed means the expert and nothing else."""
    rnd = [r for r in rows if r.dataset == "rnd" and r.method != "drbc"]
    fig = figures.iqm_figure(rnd, reps=50)
    assert [ax.get_title() for ax in fig.axes][1] == "Paired gap, IQM and 95% CI"
    scores, _ = iqm_scores(rnd)
    labels = list(scores)
    # The gap panel's ticks are the IQMs of the paired differences, not differences of IQMs.
    ticks = [c.get_segments()[0][0][0] for c in fig.axes[1].collections if c.get_segments()]
    gaps = [stats.trim_mean((scores[k] - scores[labels[0]]).ravel(), 0.25) for k in labels[1:]]
    np.testing.assert_allclose(sorted(ticks), sorted(gaps))
    fbil = [r for r in rnd if r.method == "fbil"]
    both = fbil + [dataclasses.replace(r, method="rbfm-light") for r in fbil]  # equal returns
    panel = grid_figure(both, "walker").axes[0]
    assert any("FB-IL and RBFM-Light coincide" in t.get_text() for t in panel.texts)
    styles = figures._styles(rnd)
    assert all(s.linestyle != "--" for s in styles.values())
