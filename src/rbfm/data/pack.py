"""Chosen episodes of an ExORL buffer in one compact file, to carry them to a machine with
a transfer limit and write them back there as the same episode files.

Made for lent GPUs, whose calls carry 64 MiB: quadruped's 1M transitions are ~740 MB,
200 of its episodes ~150 MB as episode files. Each key's rows are stored column-major and
byte-shuffled before xz, so that the slowly varying high bytes of one feature sit
together (on quadruped's float16 observations, ~20% smaller than the episode files' own
deflate). Observation and physics may be stored in float16 (`half`): relative error at
most 2**-11, recorded in the file's header; actions, rewards and discounts stay exact.
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from rbfm.atomic import atomic_write
from rbfm.data.dataset import find_buffer, infer_domain, read_episodes
from rbfm.data.exorl import (
    DTYPES,
    KEYS,
    episode_files,
    parse_name,
    save_episode,
    validate_episode,
)
from rbfm.envs import get_domain
from rbfm.errors import ConfigError, DatasetError

FORMAT = "rbfm-episodes"
VERSION = 1
HALF_KEYS = ("observation", "physics")
_FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class PackSummary:
    path: Path
    domain: str
    algo: str
    episodes: int
    steps: int
    bytes: int


def select_episodes(files: Sequence[Path], first: int | None, every: int) -> list[Path]:
    """In the order of the indices in their names: the first `first` episodes (all if
    None), then every `every`-th of those from the first."""
    if every < 1:
        raise ConfigError(f"every: {every} is out of range (valid: >= 1)")
    if first is not None and first < 1:
        raise ConfigError(f"first: {first} is out of range (valid: >= 1, or all)")
    indexed = []
    for f in files:
        parsed = parse_name(f.name)
        if parsed is None:
            raise DatasetError(f"{f}: not named <timestamp>_<index>_<length>.npz")
        indexed.append((parsed[0], f))
    indexed.sort()
    kept = indexed[:first] if first is not None else indexed
    return [f for _, f in kept[::every]]


def _shuffled(a: np.ndarray) -> bytes:
    cols = np.ascontiguousarray(a.T)
    return cols.view(np.uint8).reshape(cols.shape[0], -1, a.itemsize).transpose(2, 0, 1).tobytes()


def _unshuffled(raw: bytes, dtype: np.dtype[Any], rows: int, cols: int) -> np.ndarray:
    planes = np.frombuffer(raw, np.uint8).reshape(dtype.itemsize, cols, rows)
    return planes.transpose(1, 2, 0).copy().view(dtype).reshape(cols, rows).T.copy()


def pack_episodes(
    path: str | Path,
    out: str | Path,
    first: int | None = None,
    every: int = 1,
    half: Sequence[str] = (),
) -> PackSummary:
    """Writes the chosen episodes of the buffer at or below `path` to `out` (atomically)."""
    unknown = sorted(set(half) - set(HALF_KEYS))
    if unknown:
        raise ConfigError(f"half: {unknown} cannot be stored in float16 (valid: {HALF_KEYS})")
    buffer = find_buffer(Path(path))
    domain = infer_domain(buffer, None)
    chosen = select_episodes(episode_files(buffer), first, every)
    if not chosen:
        raise DatasetError(f"{buffer}: no episode files (*.npz)")
    episodes = read_episodes(chosen, domain)
    dtypes = {k: np.dtype(np.float16) if k in half else np.dtype(DTYPES[k]) for k in KEYS}
    arrays = {k: np.concatenate([ep[k] for ep in episodes]) for k in KEYS}
    rows = [len(ep["observation"]) for ep in episodes]
    for k in half:
        peak = float(np.abs(arrays[k]).max())
        if peak > _FLOAT16_MAX:
            raise DatasetError(
                f"{buffer}: {k} reaches {peak:g}, beyond float16's range ({_FLOAT16_MAX:g}); "
                f"pack it without half={k}"
            )
    header = {
        "format": FORMAT,
        "version": VERSION,
        "domain": domain.name,
        "algo": buffer.parent.name,
        "source": str(buffer),
        "names": [f.name for f in chosen],
        "rows": rows,
        "keys": {k: [dtypes[k].name, arrays[k].shape[1]] for k in KEYS},
        "float16": list(half),
    }
    text = json.dumps(header).encode()

    def write(tmp: Path) -> None:
        with lzma.open(tmp, "wb", preset=6) as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for k in KEYS:
                f.write(_shuffled(arrays[k].astype(dtypes[k])))

    out = Path(out)
    atomic_write(out, write)
    steps = sum(rows) - len(rows)
    return PackSummary(out, domain.name, buffer.parent.name, len(rows), steps, out.stat().st_size)


def _read_exact(f: IO[bytes], n: int, path: Path) -> bytes:
    raw = f.read(n)
    if len(raw) != n:
        raise DatasetError(f"{path}: truncated ({len(raw)} of {n} bytes in a block)")
    return raw


def _read_header(f: IO[bytes], path: Path) -> dict[str, Any]:
    size = int.from_bytes(_read_exact(f, 8, path), "little")
    if size > 1 << 26:
        raise DatasetError(f"{path}: not an {FORMAT} file (header of {size} bytes)")
    try:
        header: dict[str, Any] = json.loads(_read_exact(f, size, path))
    except ValueError as e:
        raise DatasetError(f"{path}: not an {FORMAT} file ({e})") from e
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise DatasetError(
            f"{path}: format {header.get('format')!r} version {header.get('version')!r}; "
            f"this rbfm reads {FORMAT!r} version {VERSION}"
        )
    return header


def unpack_episodes(path: str | Path, root: str | Path) -> PackSummary:
    """Writes a packed file's episodes to `root/<domain>/<algo>/buffer`, under their
    original names; the buffer must not hold episodes already. Every episode is read and
    validated before the first is written."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    try:
        with lzma.open(path, "rb") as f:
            header = _read_header(f, path)
            names: list[str] = list(header["names"])
            rows: list[int] = [int(n) for n in header["rows"]]
            domain = get_domain(str(header["domain"]))
            arrays = {}
            for k in KEYS:
                dtype_name, cols = header["keys"][k]
                dtype = np.dtype(dtype_name)
                if dtype.kind != "f":
                    raise DatasetError(f"{path}: {k} stored as {dtype}, not a float type")
                raw = _read_exact(f, dtype.itemsize * int(cols) * sum(rows), path)
                arrays[k] = _unshuffled(raw, dtype, sum(rows), int(cols))
    except (lzma.LZMAError, EOFError) as e:
        raise DatasetError(f"{path}: not a readable xz stream ({e})") from e
    except (KeyError, TypeError, ValueError) as e:
        raise DatasetError(f"{path}: malformed header ({type(e).__name__}: {e})") from e
    if len(names) != len(rows):
        raise DatasetError(f"{path}: {len(names)} episode names for {len(rows)} row counts")
    buffer = Path(root) / domain.name / str(header["algo"]) / "buffer"
    if buffer.is_dir() and episode_files(buffer):
        raise DatasetError(f"{buffer}: already holds episodes; unpack into an empty root")
    episodes = []
    start = 0
    for name, n in zip(names, rows, strict=True):
        if Path(name).name != name or parse_name(name) is None:
            raise DatasetError(f"{path}: episode name {name!r} is not an ExORL file name")
        episode = {k: v[start : start + n] for k, v in arrays.items()}
        validate_episode(episode, domain, str(buffer / name))
        episodes.append((name, episode))
        start += n
    buffer.mkdir(parents=True, exist_ok=True)
    for name, episode in episodes:
        save_episode(buffer / name, episode)
    steps = sum(rows) - len(rows)
    size = path.stat().st_size
    return PackSummary(buffer, domain.name, buffer.parent.name, len(rows), steps, size)
