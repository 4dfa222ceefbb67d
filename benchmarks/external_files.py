"""What the external (planner) benchmarks share: the planner's demonstrations files and the
tables they extend run by run. Imported by external_ceiling.py, external_nominal.py and
planner_size.py; nothing to run."""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rbfm.atomic import atomic_write
from rbfm.envs import DOMAINS

# `rbfm demos --expert mpc`'s files, DOMAIN_TASK.npz (docs/results/external/make_demos.sh).
DEMOS = Path("runs/demos/mpc")


def demonstrated(tasks: list[str]) -> Iterator[tuple[str, str, Path]]:
    """(domain, task, demonstrations file) of each DOMAIN:TASK the planner has
    demonstrated; the others are named and skipped."""
    for item in tasks:
        domain, task = item.split(":")
        path = DEMOS / f"{domain}_{task}.npz"
        if path.exists():
            yield domain, task, path
        else:
            print(f"{item}: no planner demonstrations yet ({path}); skipped")


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, before any work, a --tasks item that is not one of the twelve and a
    --seeds below 1; then one torch thread (a run is one core's)."""
    import torch

    if getattr(args, "seeds", 1) < 1:
        parser.error(f"--seeds {args.seeds}: at least 1")
    for item in args.tasks:
        domain, _, task = item.partition(":")
        if domain not in DOMAINS or task not in DOMAINS[domain].tasks:
            parser.error(f"--tasks {item}: a DOMAIN:TASK of rbfm's twelve (e.g. walker:walk)")
    torch.set_num_threads(1)


@contextmanager
def appending(path: Path, header: list[str]) -> Iterator[Callable[[list[Any]], None]]:
    """A function that appends a row to a table and flushes it (a run stopped at any moment
    keeps every row it printed), the header written when the file is new; a file with other
    columns is refused, and a last row a stopped run left part-written is dropped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = path.read_text() if path.exists() else ""
    if text and text.partition("\n")[0] != ",".join(header):
        raise SystemExit(f"{path}: written with other columns; move it aside")
    if text and not text.endswith("\n"):
        print(f"{path}: its last row is part-written; dropped")
        atomic_write(path, lambda tmp: tmp.write_text(text[: text.rfind("\n") + 1]))
    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.writer(f)

        def add(row: list[Any]) -> None:
            writer.writerow(row)
            f.flush()

        if new:
            add(header)
        yield add


def read_rows(path: Path) -> list[dict[str, str]]:
    """A table's rows so far (none before its first run), to extend and write back whole; a
    last row a stopped run left part-written is not one (`appending` drops it)."""
    if not path.exists():
        return []
    text = path.read_text()
    return list(csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1])))


def model_rows(path: Path) -> list[dict[str, str]]:
    """`external_nominal`'s rows, each `model` the file stem of the model it ran on. Rows
    written before the column named the file hold the domain: its default of then, the
    same file but for walker's (the `cpu` walker, `walker_rnd-v5`, until 2026-12-05)."""
    legacy = {"walker": "walker_rnd-v5", "cheetah": "cheetah_rnd", "quadruped": "quadruped_rnd"}
    rows = read_rows(path)
    for r in rows:
        r["model"] = legacy.get(r["model"], r["model"])
    return rows


def write_page(page: Path, title: str, rows: Path, about: str, text: str) -> None:
    """A benchmark's table as a page: its title, the command that made it (this process's),
    the rows it was read from, what it measures, then the table."""
    page.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", *sys.argv])
    body = f"# {title}\n\nMade by `{command}` from `{rows}`. {about}\n\n{text}\n"
    atomic_write(page, lambda tmp: tmp.write_text(body))
