"""Range checks for hyperparameters: a value the code cannot use is rejected when a config
is built, before any compute, with the field and its valid range in the message."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rbfm.atomic import PAIR, beside, stem_of
from rbfm.errors import ConfigError


def mujoco_gl() -> str | None:
    """Why the OpenGL backend that MUJOCO_GL names does not load, or None: MuJoCo loads
    it when first imported, and every command imports MuJoCo."""
    try:
        import mujoco  # noqa: F401
    except (RuntimeError, AttributeError, ImportError, OSError) as e:
        backend = os.environ.get("MUJOCO_GL", "")
        if backend == "disable":  # rbfm's default loads no backend: another failure
            raise
        return (
            f"MuJoCo's OpenGL backend MUJOCO_GL={backend} did not load ({e}): install its "
            "library (egl: libegl1, osmesa: libosmesa6) or name another; only `rbfm render` "
            "draws, and picks egl where MUJOCO_GL is unset"
        )
    return None


def known_fields(cls: type, given: Mapping[str, Any], owner: str) -> None:
    """Refuses fields the dataclass `cls` does not have, naming the valid ones (a bare
    TypeError from its constructor names neither the method nor what it takes)."""
    valid = sorted(f.name for f in dataclasses.fields(cls))
    if unknown := sorted(set(given) - set(valid)):
        raise ConfigError(
            f"{owner}: no field {', '.join(unknown)} (valid: {', '.join(valid) or 'none'})"
        )


def in_range(
    owner: str,
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    integer: bool = False,
) -> None:
    """Raises ConfigError unless `value` is a finite number (an integer if asked) in range.
    Compared as given: Python compares an int with a float exactly, where float(value)
    would round a large integer (or overflow)."""
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if ok and not (isinstance(value, float) and not math.isfinite(value)):
        x: float = value  # type: ignore[assignment]
        ok = (low is None or (x > low if open_low else x >= low)) and (
            high is None or (x < high if open_high else x <= high)
        )
    else:
        ok = False
    if not ok:
        lo = "-inf" if low is None else _bound(low)
        hi = "inf" if high is None else _bound(high)
        left = "(" if open_low or low is None else "["
        right = ")" if open_high or high is None else "]"
        bounds = f"{left}{lo}, {hi}{right}"
        what = "an integer" if integer else "a number"
        # A value of another type (a string, a bool) is not out of range: it is no number.
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        problem = "is out of range" if number else "is not a number"
        if type(value).__module__ == "numpy":  # np.int64(3): a number, of another type
            problem = f"is a numpy {type(value).__name__}; pass a Python number (value.item())"
        if integer and isinstance(value, float) and math.isfinite(value):
            problem = "is not an integer"
        raise ConfigError(f"{owner}.{name}: {value!r} {problem} (valid: {what} in {bounds})")


def check_fields(
    config: object,
    ranges: Mapping[str, tuple[float, float | None]],
    integer: bool = True,
    open_low: bool = False,
) -> None:
    """`in_range` on each named field of a config: (low, high) each, high None for none;
    errors name the config's class and the field."""
    for name, (low, high) in ranges.items():
        value = getattr(config, name)
        in_range(type(config).__name__, name, value, low, high, integer=integer, open_low=open_low)


def check_flag(owner: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{owner}.{name}: {value!r} is not true or false")


def _bound(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


# The largest seed taken: numpy's legacy generators' limit, far below torch's (2**64 - 1),
# so that offsets added to a seed (per episode, per shard) stay within both.
SEED_MAX = 2**32 - 1


def seed(owner: str, value: object) -> None:
    """A seed: an integer in [0, SEED_MAX] (numpy's generators take no negatives)."""
    in_range(owner, "seed", value, 0, SEED_MAX, integer=True)


def seed_option(option: str, value: int) -> None:
    """`--seed` on the command line: `seed`'s rule, its message naming the option."""
    if not 0 <= value <= SEED_MAX:
        raise ConfigError(f"{option}: {value} is out of range (valid: 0 to {SEED_MAX})")


def positive_ints(owner: str, name: str, values: tuple[int, ...]) -> None:
    if not isinstance(values, tuple | list):
        raise ConfigError(f"{owner}.{name}: {values!r} is not a list of layer widths")
    if not values:
        raise ConfigError(f"{owner}.{name}: needs at least one layer width")
    for v in values:
        in_range(owner, name, v, 1, integer=True)


# Command-line values, checked before any compute is spent on them.


def assignments(items: list[str], option: str = "--set") -> tuple[tuple[str, Any], ...]:
    """`option`'s KEY=VALUE pairs; VALUE is read as JSON (numbers, lists, true), else a
    string. A key given twice is refused rather than its last value silently winning."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{option}: expected KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        pairs.append((key, value))
    keys = [k for k, _ in pairs]
    if again := sorted({k for k in keys if keys.count(k) > 1}):
        raise ConfigError(f"{option} {', '.join(again)}: given more than once")
    return tuple(pairs)


def overrides(named: Mapping[str, Any], items: list[str]) -> dict[str, Any]:
    """Options given by name (None: not given) with `--set` KEY=VALUE pairs on top; a key
    given both ways is refused rather than one of them silently winning."""
    given = {k: v for k, v in named.items() if v is not None}
    pairs = dict(assignments(items))
    if twice := sorted(given.keys() & pairs.keys()):
        raise ConfigError(f"--set {', '.join(twice)}: given again as --{' --'.join(twice)}")
    return given | pairs


def count(option: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{option}: {value} is out of range (valid: >= 1)")


def out_file(
    path: str | os.PathLike[str] | None, made: bool = False, option: str = "--out"
) -> None:
    """An output file must not be a folder, nor the halves of the pair its stem names
    (policies and goal sequences are written as one), and its folder must exist (with
    `made`: be creatable, as for `out_dir`) and take new files, before any compute is
    spent on it; errors name `option`."""
    if path is None:
        return
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"{option}: {path!r} is not a file name")
    stem = stem_of(path)
    if folders := [p for p in (Path(path), *(beside(stem, s) for s in PAIR)) if p.is_dir()]:
        raise ConfigError(f"{option}: {folders[0]} is a folder; give a file name")
    folder = Path(path).resolve().parent
    if made:
        return out_dir(folder, option)
    if not folder.is_dir():
        raise ConfigError(f"{option}: the folder of {path} does not exist")
    _takes_files(folder, option)


# The command-line options that name files a command reads.
INPUT_OPTIONS = ("checkpoint", "z", "demos", "dataset", "path")


def _pair(path: Path) -> set[Path]:
    """A file and, for a model's or policy's pair, its other half: what writing it replaces."""
    p = path.resolve()
    return {p, p.with_suffix(".json"), p.with_suffix(".safetensors")} if p.suffix else {p}


def out_is_no_input(out: object, inputs: Mapping[str, object]) -> None:
    """`--out` naming a file the command reads (or the other half of its pair) would
    overwrite it with the result: refused before anything is read. `inputs`: each
    option's value, a path or a list of them."""
    if not isinstance(out, str) or Path(out).is_dir():
        return
    written = _pair(Path(out))
    for option, given in inputs.items():
        for value in given if isinstance(given, list) else [given]:
            if isinstance(value, str) and Path(value).is_file() and _pair(Path(value)) & written:
                raise ConfigError(
                    f"--out: {out} would overwrite --{option}'s {value}; give another name"
                )


def out_dir(path: str | os.PathLike[str], option: str = "--out") -> None:
    """An output folder (made if missing) must not be a file, nor lie under one, and the
    nearest folder of it that exists must take new files; errors name `option`."""
    for p in (Path(path), *Path(path).parents):
        if p.exists():
            if not p.is_dir():
                raise ConfigError(f"{option}: {p} is a file; give a folder")
            return _takes_files(p, option)


def _takes_files(folder: Path, option: str = "--out") -> None:
    """Creates and drops a nameless file in `folder`: permission bits do not tell (root
    writes through them; /proc and read-only mounts refuse new files all the same)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ConfigError(f"{option}: cannot write into {folder} ({e.strerror})") from None
