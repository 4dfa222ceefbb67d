"""Files written whole or not at all: a killed process never leaves half a file behind."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rbfm.errors import ConfigError

# Temporaries are named `.<name>.<pid>.part`: hidden, never matching a reader's glob
# (`*.npz`, `*.json`), and one per process, so two processes writing the same file (a
# shared planner folder) never rename each other's; a killed run's leftovers are found
# by `.*.part`.
TMP_SUFFIX = ".part"

# The process's umask, read once (os.umask can only be read by setting it).
_UMASK = os.umask(0o022)
os.umask(_UMASK)

# A model, policy or goal sequences is a pair of files named by one stem.
PAIR = (".json", ".safetensors")


def beside(stem: Path, suffix: str) -> Path:
    """`stem` with `suffix` appended (`x.v2` -> `x.v2.json`): `with_suffix` would put it in
    place of a dotted stem's last part (`x.json`), another file, perhaps someone's."""
    return stem.with_name(stem.name + suffix)


def stem_of(path: str | os.PathLike[str], suffixes: tuple[str, ...] = PAIR) -> Path:
    """`path` less one of `suffixes` (`x.v2.json` -> `x.v2`), else as given (`x.v2`)."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in suffixes else path


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Calls `write` on a hidden temporary path beside `path`, then renames it into place."""
    if not path.parent.is_dir():
        raise ConfigError(f"{path}: its folder {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        write(tmp)
        # A plain file's permissions: some writers (safetensors) create theirs 0600.
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)  # fails where `path` is a folder: the temporary goes too
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written is left behind
        raise


def atomic_csv(
    path: Path, rows: list[dict[str, Any]], columns: Sequence[str] | None = None
) -> None:
    """Rows of dicts as a CSV, atomically. The header is `columns` (written even with no
    rows), else the first row's keys."""
    header = list(columns) if columns is not None else list(rows[0])

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, header)
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def standard_json(where: Path, data: dict[str, Any]) -> None:
    """Refuses NaN or infinity anywhere in `data`, by its first such key: Python's json
    writes and reads them, standard JSON has neither, so other readers refuse the file.
    Writers call it before anything is written; readers, before the values are copied."""
    for key, value in data.items():
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            raise ConfigError(
                f"{where}: {key} holds NaN or infinity, which standard JSON cannot"
            ) from None


def parse_json(text: str) -> Any:
    """`text` as standard JSON: NaN and Infinity, which Python's json takes, raise
    ValueError like any other defect."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not standard JSON")

    return json.loads(text, parse_constant=refuse)


def write_pair(stem: Path, tensors: dict[str, Any], meta: dict[str, Any]) -> Path:
    """`stem.safetensors` and then `stem.json`, the description naming the weights' SHA-256:
    a pair torn by a killed write (the weights of one save beside the description of
    another) is refused by `check_pair` instead of loading the wrong contents. Returns the
    `.json` path."""
    from safetensors.torch import save_file

    standard_json(beside(stem, ".json"), meta)
    weights = beside(stem, ".safetensors")
    atomic_write(weights, lambda tmp: save_file(tensors, str(tmp)))
    text = json.dumps({**meta, "weights_sha256": file_sha256(weights)}, indent=2, allow_nan=False)
    atomic_write(beside(stem, ".json"), lambda tmp: tmp.write_text(text))
    return beside(stem, ".json")


def check_pair(stem: Path, meta: dict[str, Any]) -> None:
    """Refuses weights that are not the ones the description `meta` was written beside
    (pairs written before the hash was recorded are taken as they are)."""
    weights = beside(stem, ".safetensors")
    wanted = meta.get("weights_sha256")
    if wanted is not None and weights.is_file() and file_sha256(weights) != wanted:
        raise ConfigError(
            f"{weights}: not the weights {beside(stem, '.json')} was written with (its "
            "SHA-256 differs: a write interrupted between the two files?); save it again"
        )
