"""The results table of an experiment: one row per (model, task, method variant, inference
seed, perturbation family, level), written as CSV.

Columns (in order):
    domain, dataset        the model's domain and its data label ("rnd", "rnd-100k", "aps", ...)
    task                   the imitated task
    method                 fbil | rbfm-light | rbfm-heavy | drbc | bedroil
    variant                the method's overrides in short form ("" for the defaults,
                           e.g. "eps=0.4"); method + variant name a line in a figure
    eps                    the robustness radius used (empty for fbil)
    seed                   inference seed (the demonstrations drawn and the optimiser's)
    family, level          perturbation family ("none" for nominal) and its level
                           (empty for nominal)
    episodes, mean, std    evaluation episodes and their mean and std return
    unstable               episodes ended early by a physics failure
    inference_seconds      wall time of the task inference / baseline training
    policy                 the task vector (.json) or policy stem, relative to the run dir
    cell                   the evaluation cell's stable id
    expert                 who demonstrated: own | noisy | model:NAME
                           (rbfm.experiments.spec.EXPERT_KINDS; "own" in tables
                           written before the column existed)
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TypeVar

from rbfm.atomic import atomic_csv
from rbfm.errors import ConfigError


def method_label(method: str, variant: str) -> str:
    """The line a figure draws: the method, with its variant when it has one."""
    return f"{method} ({variant})" if variant else method


@dataclass(frozen=True)
class ResultRow:
    domain: str
    dataset: str
    task: str
    method: str
    variant: str
    eps: float | None
    seed: int
    family: str
    level: float | None
    episodes: int
    mean: float
    std: float
    unstable: int
    inference_seconds: float
    policy: str
    cell: str
    expert: str = "own"

    @property
    def label(self) -> str:
        return method_label(self.method, self.variant)


COLUMNS = tuple(f.name for f in fields(ResultRow))
_FLOATS = {"eps", "level", "mean", "std", "inference_seconds", "demonstrations_mean", "radius"}
_FLOATS |= {"nominal_loss", "worst_case_loss", "seconds", "distance_start", "distance_chosen"}
_FLOATS |= {"return_start", "return_chosen", "return_best", "spearman_distance", "spearman_implied"}
_INTS = {"seed", "episodes", "unstable"}
# Empty for nominal (level), FB-IL (eps), and a search whose candidates all tie (spearman_*).
_OPTIONAL = {"eps", "level", "spearman_distance", "spearman_implied"}
# A NaN return or loss is a result (a policy that broke), shown as such, never dropped; an
# infinite worst-case loss means no bound was found. Every other number is finite.
_NAN_ALLOWED = {"mean", "nominal_loss", "worst_case_loss"}
_ADDED_LATER = {"expert"}  # columns older tables lack (read with their defaults)


def write_table(path: str | os.PathLike[str], rows: list[ResultRow]) -> Path:
    """Writes the rows atomically (a temporary file renamed over the target)."""
    return _write_rows(path, rows, COLUMNS)


def _write_rows(
    path: str | os.PathLike[str],
    rows: Sequence[ResultRow | CeilingRow | CertificateRow | AdaptationRow],
    columns: Sequence[str],
) -> Path:
    """The rows as CSV, None as an empty field, written atomically (a temporary file
    renamed over the target)."""
    records = [{k: "" if v is None else v for k, v in asdict(r).items()} for r in rows]
    atomic_csv(Path(path), records, columns)
    return Path(path)


def _parse(name: str, value: str) -> object:
    if name in _OPTIONAL and value == "":
        return None
    if name in _FLOATS:
        try:
            x = float(value)
        except ValueError:
            raise ValueError(f"{name} is {value!r}, not a number") from None
        if not math.isfinite(x) and name not in _NAN_ALLOWED:
            raise ValueError(f"{name} is {value!r}, not a finite number")
        return x
    if name in _INTS:
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{name} is {value!r}, not an integer") from None
    return value


def read_table(path: str | os.PathLike[str]) -> list[ResultRow]:
    """The rows of a results table; errors name the file, the line and the column."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            have = reader.fieldnames or []
            missing = [c for c in COLUMNS if c not in have and c not in _ADDED_LATER]
            if missing:
                raise ConfigError(f"{path}: not an rbfm results table (missing columns {missing})")
            rows = []
            for line, rec in enumerate(reader, start=2):
                try:
                    values = {c: _parse(c, rec[c]) for c in COLUMNS if c in have}
                    rows.append(ResultRow(**values))  # type: ignore[arg-type]
                except (TypeError, ValueError) as e:
                    raise ConfigError(f"{path}, line {line}: {e}") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the results table ({e})") from e
    if not rows:
        raise ConfigError(f"{path}: the results table has no rows")
    return rows


@dataclass(frozen=True)
class CeilingRow:
    """A row of an experiment's experts.csv: the expert itself at one level (`episodes`
    evaluation episodes on the imitators' initial states, its action noise included),
    and the mean return of its demonstrations (nominal, their own initial states)."""

    domain: str
    dataset: str
    task: str
    expert: str
    family: str
    level: float | None
    episodes: int
    mean: float
    std: float
    unstable: int
    demonstrations_mean: float
    cell: str


CEILING_COLUMNS = tuple(f.name for f in fields(CeilingRow))


def write_ceiling_table(path: str | os.PathLike[str], rows: list[CeilingRow]) -> Path:
    """Writes experts.csv atomically."""
    return _write_rows(path, rows, CEILING_COLUMNS)


def read_ceilings(path: str | os.PathLike[str]) -> list[CeilingRow]:
    """The rows of an experts.csv (`write_ceiling_table`); errors name file and line."""
    return _read_rows(path, CeilingRow, "experts")


@dataclass(frozen=True)
class CertificateRow:
    """A row of an experiment's certificates.csv: one inferred policy's imitation loss on
    its demonstrations, nominal and in the worst case over an uncertainty set ("tv": the
    exact worst case; "heavy": an upper bound on it) of the given radius
    (`rbfm.experiments.certificate`). `worst_case_loss` is inf where no bound was found."""

    domain: str
    dataset: str
    task: str
    expert: str
    method: str
    variant: str
    eps: float | None
    seed: int
    set: str
    radius: float
    nominal_loss: float
    worst_case_loss: float
    policy: str

    @property
    def label(self) -> str:
        return method_label(self.method, self.variant)


CERTIFICATE_COLUMNS = tuple(f.name for f in fields(CertificateRow))


def write_certificate_table(path: str | os.PathLike[str], rows: list[CertificateRow]) -> Path:
    """Writes certificates.csv atomically (the header alone when there are no rows)."""
    return _write_rows(path, rows, CERTIFICATE_COLUMNS)


def read_certificates(path: str | os.PathLike[str]) -> list[CertificateRow]:
    """The rows of a certificates.csv (`write_certificate_table`); errors name file and
    line."""
    return _read_rows(path, CertificateRow, "certificates")


@dataclass(frozen=True)
class AdaptationRow:
    """A row of an experiment's adaptations.csv: one finished adaptation search (its
    start's inference, its family and level) after its whole budget: the episodes and
    seconds it cost (seconds per search in its batch), the distance to the demonstrations
    in B's space at its start z and at its answer, its start's, answer's and best
    candidate's return on its own episodes, and how well each reward-free criterion
    ranked its candidates by that return (Spearman; empty where undefined or not
    recorded). `rbfm.reporting.searches` summarises it."""

    domain: str
    dataset: str
    task: str
    expert: str
    method: str
    adaptation: str
    seed: int
    family: str
    level: float | None
    episodes: int
    seconds: float
    unstable: int
    distance_start: float
    distance_chosen: float
    return_start: float
    return_chosen: float
    return_best: float
    spearman_distance: float | None
    spearman_implied: float | None
    cell: str


ADAPTATION_COLUMNS = tuple(f.name for f in fields(AdaptationRow))


def write_adaptation_table(path: str | os.PathLike[str], rows: list[AdaptationRow]) -> Path:
    """Writes adaptations.csv atomically (the header alone when there are no rows)."""
    return _write_rows(path, rows, ADAPTATION_COLUMNS)


def read_adaptations(path: str | os.PathLike[str]) -> list[AdaptationRow]:
    """The rows of an adaptations.csv (`write_adaptation_table`); errors name file, line
    and column."""
    return _read_rows(path, AdaptationRow, "adaptations")


R = TypeVar("R", CeilingRow, CertificateRow, AdaptationRow)


def _read_rows(path: str | os.PathLike[str], row: type[R], what: str) -> list[R]:
    """Every line of a CSV written from `row` dataclasses, parsed by column name; a file
    of the header alone has no rows, one without a header is refused."""
    columns = [f.name for f in fields(row)]
    article = "an" if what[0] in "aeiou" else "a"
    rows = []
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise ConfigError(f"{path}: empty, not {article} {what} table")
            missing = [c for c in columns if c not in reader.fieldnames]
            if missing:
                raise ConfigError(f"{path}: not {article} {what} table (no column {missing[0]})")
            for line, rec in enumerate(reader, start=2):
                try:
                    values = {c: _parse(c, rec[c]) for c in columns}
                    rows.append(row(**values))  # type: ignore[arg-type]
                except (TypeError, ValueError) as e:
                    message = f"{path}, line {line}: not {article} {what} table ({e})"
                    raise ConfigError(message) from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what} table ({e})") from e
    return rows


def once(tables: Sequence[tuple[str, Sequence[ResultRow | AdaptationRow]]]) -> None:
    """Refuses a cell that is in two of the (path, rows) tables: pooling a stage whose
    tasks ran apart would count it twice."""
    seen: dict[str, str] = {}
    for path, rows in tables:
        for r in rows:
            if seen.setdefault(r.cell, path) != path:
                raise ConfigError(f"{path}: its {r.task} cell {r.cell} is also in {seen[r.cell]}")
