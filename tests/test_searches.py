"""The adaptation searches' summary read from adaptations.csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rbfm.errors import ConfigError
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


def test_summary_counts_moves_and_means(tmp_path: Path) -> None:
    # Two FB-IL searches, one kept its start; one RBFM-Light search with no rank
    # correlation (its candidates tied).
    path = _write(
        tmp_path / "adaptations.csv",
        [
            _row("a", "fbil", 0.8, 0.8, "0.5"),
            _row("b", "fbil", 0.6, 0.2, "0.7"),
            _row("c", "rbfm-light", 0.9, 0.3, ""),
        ],
    )
    fbil, light = summary(read_searches([path]))
    assert len(fbil) == len(HEADER)
    assert fbil[3:6] == ["fbil", "adapt", "2"]
    assert fbil[8] == "0.70 -> 0.50"
    assert fbil[9] == "50%"
    assert fbil[10] == "0.60"
    assert fbil[11] == "-"
    assert fbil[12] == "100.0 -> 120.0"
    assert light[9] == "100%" and light[10] == "-"


def test_summary_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.csv", [_row("a", "fbil", 0.8, 0.4, "0.5")])
    with pytest.raises(ConfigError, match="is 2 times"):
        read_searches([good, good])
    with pytest.raises(ConfigError, match="no such file"):
        read_searches([tmp_path / "missing.csv"])
    nan = _write(tmp_path / "nan.csv", [_row("a", "fbil", float("nan"), 0.4, "0.5")])
    with pytest.raises(ConfigError, match=r"nan.csv:2: distance_start is 'nan'"):
        read_searches([nan])
    short = tmp_path / "short.csv"
    short.write_text("domain,cell\ncheetah,a\n")
    with pytest.raises(ConfigError, match="no column dataset"):
        read_searches([short])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.csv")])
