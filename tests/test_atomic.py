"""rbfm.atomic: whole files or none."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rbfm.atomic import atomic_csv, atomic_write


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    target.write_text("old")

    def fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, fail)
    assert target.read_text() == "old"
    atomic_write(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # the rewrite reused the name
    (tmp_path / "folder").mkdir()
    with pytest.raises(OSError):  # the rename fails: the temporary is removed all the same
        atomic_write(tmp_path / "folder", lambda tmp: tmp.write_text("new"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "x.json"]


def test_csv_header_from_columns_even_without_rows(tmp_path: Path) -> None:
    atomic_csv(tmp_path / "empty.csv", [], ("a", "b"))
    assert (tmp_path / "empty.csv").read_text() == "a,b\n"
    atomic_csv(tmp_path / "rows.csv", [{"b": 2, "a": 1}], ("a", "b"))
    with open(tmp_path / "rows.csv", newline="") as f:
        assert list(csv.reader(f)) == [["a", "b"], ["1", "2"]]
    atomic_csv(tmp_path / "keys.csv", [{"b": 2, "a": 1}])  # the first row's key order
    assert (tmp_path / "keys.csv").read_text().splitlines()[0] == "b,a"


def test_files_get_the_permissions_of_a_plain_file(tmp_path: Path) -> None:
    """safetensors creates its files 0600: a model saved on a shared machine was unreadable
    to others beside its 0644 description."""
    import os

    import torch

    from rbfm.atomic import write_pair

    write_pair(tmp_path / "x", {"a": torch.zeros(2)}, {"k": 1})
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"x.safetensors": 0o666 & ~umask, "x.json": 0o666 & ~umask}
