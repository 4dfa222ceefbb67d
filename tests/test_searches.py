"""The adaptation searches' summary read from adaptations.csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rbfm.errors import ConfigError
from rbfm.experiments.table import read_adaptations, write_adaptation_table
from rbfm.reporting.searches import HEADER, main, read_searches, summary

BASE = {
    "domain": "cheetah",
    "dataset": "rnd",
    "task": "run",
    "expert": "noisy",
    "adaptation": "adapt",
    "seed": "0",
    "family": "joint_friction",
    "level": "25.0",
    "episodes": "10",
    "seconds": "2.0",
    "unstable": "0",
    "return_start": "100.0",
    "return_chosen": "120.0",
    "return_best": "130.0",
    "spearman_implied": "",
}
COLUMNS = [*BASE, "method", "distance_start", "distance_chosen", "spearman_distance", "cell"]


def _row(cell: str, method: str, start: float, chosen: float, rho: str) -> dict[str, str]:
    return {
        **BASE,
        "method": method,
        "distance_start": str(start),
        "distance_chosen": str(chosen),
        "spearman_distance": rho,
        "cell": cell,
    }


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path


def test_summary_counts_moves_and_means(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Out of alphabetical order: rows keep the files' order. Two FB-IL searches, one kept
    # its start; one RBFM-Light search with no rank correlation (its candidates tied), in
    # a second file; a file of the header alone (no search finished) adds nothing.
    first = _write(
        tmp_path / "a.csv",
        [_row("c", "rbfm-light", 0.9, 0.3, ""), _row("a", "fbil", 0.8, 0.8, "0.5")],
    )
    second = _write(tmp_path / "b.csv", [{**_row("b", "fbil", 0.6, 0.2, "0.7"), "seconds": "4"}])
    empty = tmp_path / "empty.csv"
    empty.write_text(",".join(COLUMNS) + "\n")
    light, fbil = summary(read_searches([first, empty, second]))
    assert len(fbil) == len(HEADER)
    assert fbil[3:8] == ["fbil", "adapt", "2", "10.0", "3.00"]
    assert fbil[8] == "0.70 -> 0.50"
    assert fbil[9] == "50%"
    assert fbil[10] == "0.60"
    assert fbil[11] == "-"
    assert fbil[12] == "100.0 -> 120.0"
    assert light[3] == "rbfm-light" and light[9] == "100%" and light[10] == "-"
    main([str(first), str(second)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| cheetah | rnd | run | rbfm-light |")
    assert summary(read_searches([empty])) == []


@pytest.mark.parametrize(
    ("column", "value", "kind"),
    [
        ("distance_start", "nan", "a finite number"),
        ("distance_chosen", "", "a number"),
        ("seconds", "inf", "a finite number"),
        ("episodes", "2.5", "an integer"),
    ],
)
def test_a_missing_number_is_refused_with_its_line(
    tmp_path: Path, column: str, value: str, kind: str
) -> None:
    rows = [
        _row("a", "fbil", 0.8, 0.4, "0.5"),
        {**_row("b", "fbil", 0.8, 0.4, "0.5"), column: value},
    ]
    bad = _write(tmp_path / "bad.csv", rows)
    message = rf"bad\.csv, line 3: .*{column} is '{value}', not {kind}"
    with pytest.raises(ConfigError, match=message):
        read_searches([bad])


def test_summary_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.csv", [_row("a", "fbil", 0.8, 0.4, "0.5")])
    other = _write(tmp_path / "other.csv", [_row("a", "fbil", 0.8, 0.4, "0.5")])
    with pytest.raises(ConfigError, match=r"other\.csv: its run cell a is also in .*good\.csv"):
        read_searches([good, other])
    with pytest.raises(ConfigError, match="no such file"):
        read_searches([tmp_path / "missing.csv"])
    with pytest.raises(ConfigError, match="no file given"):
        read_searches([])
    with pytest.raises(ConfigError, match="a list of files"):
        read_searches(str(good))
    blank = tmp_path / "blank.csv"
    blank.write_text("")
    with pytest.raises(ConfigError, match=r"blank\.csv: empty, not an adaptations table"):
        read_searches([blank])
    short = tmp_path / "short.csv"
    short.write_text("domain,cell\ncheetah,a\n")
    with pytest.raises(ConfigError, match=r"not an adaptations table \(no column dataset\)"):
        read_searches([short])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.csv")])


def test_the_typed_rows_write_back_the_committed_bytes(tmp_path: Path) -> None:
    # The runner writes AdaptationRow and this report reads it: one schema. A stage's
    # committed file read and written again is the same file, so a rerun changes nothing.
    committed = Path(__file__).parents[1] / "docs/results/adapt-cheetah/walk/adaptations.csv"
    rows = read_adaptations(committed)
    assert len(rows) == 270 and {r.adaptation for r in rows} == {"adapt", "oracle"}
    again = write_adaptation_table(tmp_path / "adaptations.csv", rows)
    assert again.read_bytes() == committed.read_bytes()
