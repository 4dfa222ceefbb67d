"""Chosen episodes of an ExORL buffer in one compact file, to carry them to a machine with
a transfer limit and write them back there as the same episode files.

Made for lent GPUs, whose calls carry 64 MiB: quadruped's 1M transitions are ~740 MB,
200 of its episodes ~150 MB as episode files. Each key's rows are stored column-major and
byte-shuffled before xz, so that the slowly varying high bytes of one feature sit
together (on quadruped's float16 observations, ~20% smaller than the episode files' own
deflate). Observation and physics may be stored in float16 (`half`): relative error at
most 2**-11, recorded in the file's header; actions, rewards and discounts stay exact.

With `replay`, only the actions travel (exact), with each episode's digest and final
physics state: `unpack` regenerates the rest in the simulator (`rbfm.data.resimulate`),
on worker processes, and reports how many episodes came back bitwise and how far the
others' final states lie from the originals. Quadruped's whole 1M transitions pack to
~36 MB this way, against ~220 MB for every key at float16.
"""

from __future__ import annotations

import json
import lzma
import multiprocessing
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from tqdm import tqdm

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
from rbfm.data.resimulate import Collection, digest, initial_physics, regenerate
from rbfm.envs import get_domain
from rbfm.errors import ConfigError, DatasetError

FORMAT = "rbfm-episodes"
VERSION = 2  # 2 added mode "replay"; version-1 files are mode "episodes"
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
    # replay files, after unpacking: episodes regenerated bitwise, and the largest
    # |difference| between another episode's final physics state and the stored one
    reproduced: int | None = None
    deviation: float | None = None
    # and the mean episode return of the stored task's reward: packed, regenerated
    returns: tuple[float, float] | None = None


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


def _check_replay(
    collection: Collection, chosen: Sequence[Path], episodes: Sequence[dict[str, np.ndarray]]
) -> None:
    """Before anything is written: every episode's reset state is the collector's, and the
    first episode regenerates bitwise here (else its file name is not its index, or the
    buffer was not collected by this MuJoCo)."""
    env = collection.env()
    indices = [int(f.name.split("_")[1]) for f in chosen]  # names checked on selection
    for f, ep, index in zip(chosen, episodes, indices, strict=True):
        start = initial_physics(collection, env, index)
        if not np.array_equal(start, ep["physics"][0]):
            raise DatasetError(
                f"{f}: its reset state is not the one collection seed {collection.seed} draws "
                f"for episode {index}; pack it without --replay"
            )
    got = regenerate(collection, env, indices[0], episodes[0]["action"])
    if digest(got) != digest(episodes[0]):
        gap = float(np.abs(got["physics"] - episodes[0]["physics"]).max())
        raise DatasetError(
            f"{chosen[0]}: its actions do not regenerate it bitwise on this machine (physics "
            f"differs by up to {gap:g}); pack it without --replay"
        )


def pack_episodes(
    path: str | Path,
    out: str | Path,
    first: int | None = None,
    every: int = 1,
    half: Sequence[str] = (),
    replay: bool = False,
) -> PackSummary:
    """Writes the chosen episodes of the buffer at or below `path` to `out` (atomically);
    with `replay`, only what regenerates them (module docstring)."""
    unknown = sorted(set(half) - set(HALF_KEYS))
    if unknown:
        raise ConfigError(f"half: {unknown} cannot be stored in float16 (valid: {HALF_KEYS})")
    if replay and half:
        raise ConfigError("half: a replay file stores only actions, exactly; drop --half")
    buffer = find_buffer(Path(path))
    domain = infer_domain(buffer, None)
    collection = Collection.of_buffer(buffer) if replay else None
    if collection is not None and collection.domain != domain.name:
        raise DatasetError(f"{buffer}: collected as {collection.domain}, read as {domain.name}")
    chosen = select_episodes(episode_files(buffer), first, every)
    if not chosen:
        raise DatasetError(f"{buffer}: no episode files (*.npz)")
    episodes = read_episodes(chosen, domain)
    rows = [len(ep["observation"]) for ep in episodes]
    header: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "mode": "episodes" if collection is None else "replay",
        "domain": domain.name,
        "algo": buffer.parent.name,
        "source": str(buffer),
        "names": [f.name for f in chosen],
        "rows": rows,
    }
    keys: tuple[str, ...] = KEYS
    if collection is None:
        dtypes = {k: np.dtype(np.float16) if k in half else np.dtype(DTYPES[k]) for k in KEYS}
        arrays = {k: np.concatenate([ep[k] for ep in episodes]) for k in KEYS}
        for k in half:
            peak = float(np.abs(arrays[k]).max())
            if peak > _FLOAT16_MAX:
                raise DatasetError(
                    f"{buffer}: {k} reaches {peak:g}, beyond float16's range "
                    f"({_FLOAT16_MAX:g}); pack it without half={k}"
                )
        header["float16"] = list(half)
    else:
        _check_replay(collection, chosen, episodes)
        keys = ("action", "final")
        dtypes = {"action": np.dtype(np.float32), "final": np.dtype(np.float64)}
        arrays = {
            "action": np.concatenate([ep["action"] for ep in episodes]),
            "final": np.stack([ep["physics"][-1] for ep in episodes]),
        }
        header["collection"] = {"task": collection.task, "seed": collection.seed}
        header["digests"] = [digest(ep) for ep in episodes]
        header["returns"] = [float(ep["reward"].sum()) for ep in episodes]
    header["keys"] = {k: [dtypes[k].name, arrays[k].shape[1]] for k in keys}
    text = json.dumps(header).encode()

    def write(tmp: Path) -> None:
        with lzma.open(tmp, "wb", preset=6) as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for k in keys:
                f.write(_shuffled(arrays[k].astype(dtypes[k])))

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
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
    if header.get("format") != FORMAT or header.get("version") not in (1, VERSION):
        raise DatasetError(
            f"{path}: format {header.get('format')!r} version {header.get('version')!r}; "
            f"this rbfm reads {FORMAT!r} versions 1 to {VERSION}"
        )
    header.setdefault("mode", "episodes")
    if header["mode"] not in ("episodes", "replay"):
        raise DatasetError(f"{path}: unknown mode {header['mode']!r} (valid: episodes, replay)")
    return header


Job = tuple[str, int, np.ndarray, str]  # file name, index, actions, digest


Regenerated = tuple[bool, np.ndarray, float]  # bitwise?, final physics state, return


def _regenerate_into(
    collection: Collection, directory: Path, jobs: Sequence[Job]
) -> list[Regenerated]:
    """Regenerates and writes `jobs`' episodes; per episode, whether it came back bitwise,
    its final physics state and its return."""
    env = collection.env()
    results = []
    for name, index, actions, want in jobs:
        episode = regenerate(collection, env, index, actions)
        save_episode(directory / name, episode)
        same = digest(episode) == want
        results.append((same, episode["physics"][-1], float(episode["reward"].sum())))
    return results


def _regenerate_all(
    collection: Collection, directory: Path, jobs: list[Job], workers: int
) -> list[Regenerated]:
    bar = tqdm(total=len(jobs), desc="regenerating episodes", unit="ep", disable=None)
    if workers == 0:
        results = []
        for job in jobs:
            results += _regenerate_into(collection, directory, [job])
            bar.update()
        bar.close()
        return results
    size = max(1, -(-len(jobs) // (4 * workers)))  # ~4 chunks per worker balance the load
    chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
    # spawn: the parent has torch loaded, whose threads do not survive a fork safely
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(workers, len(chunks)), mp_context=context) as pool:
        futures = [pool.submit(_regenerate_into, collection, directory, c) for c in chunks]
        done: list[list[Regenerated]] = []
        for future, chunk in zip(futures, chunks, strict=True):
            done.append(future.result())
            bar.update(len(chunk))
    bar.close()
    return [r for part in done for r in part]


def unpack_episodes(path: str | Path, root: str | Path, workers: int = 0) -> PackSummary:
    """Writes a packed file's episodes to `root/<domain>/<algo>/buffer`, under their
    original names; the buffer must not hold episodes already. Every episode is read and
    validated before the first is written; a replay file's episodes are regenerated on
    `workers` processes (0: in this one) into a hidden folder and moved in at the end."""
    path = Path(path)
    if workers < 0:
        raise ConfigError(f"workers: {workers} is out of range (valid: >= 0)")
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    try:
        with lzma.open(path, "rb") as f:
            header = _read_header(f, path)
            replay = header["mode"] == "replay"
            names: list[str] = list(header["names"])
            rows: list[int] = [int(n) for n in header["rows"]]
            domain = get_domain(str(header["domain"]))
            arrays = {}
            for k in ("action", "final") if replay else KEYS:
                dtype_name, cols = header["keys"][k]
                dtype = np.dtype(dtype_name)
                if dtype.kind != "f":
                    raise DatasetError(f"{path}: {k} stored as {dtype}, not a float type")
                n_rows = len(rows) if k == "final" else sum(rows)
                raw = _read_exact(f, dtype.itemsize * int(cols) * n_rows, path)
                arrays[k] = _unshuffled(raw, dtype, n_rows, int(cols))
            if replay:
                meta = header["collection"]
                collection = Collection(domain.name, str(meta["task"]), int(meta["seed"]))
                digests = [str(d) for d in header["digests"]]
                header_returns = [float(r) for r in header["returns"]]
    except (lzma.LZMAError, EOFError) as e:
        raise DatasetError(f"{path}: not a readable xz stream ({e})") from e
    except (KeyError, TypeError, ValueError) as e:
        raise DatasetError(f"{path}: malformed header ({type(e).__name__}: {e})") from e
    if len(names) != len(rows) or (replay and {len(digests), len(header_returns)} != {len(rows)}):
        raise DatasetError(f"{path}: {len(names)} episode names for {len(rows)} row counts")
    buffer = Path(root) / domain.name / str(header["algo"]) / "buffer"
    if buffer.is_dir() and episode_files(buffer):
        raise DatasetError(f"{buffer}: already holds episodes; unpack into an empty root")
    parsed = []
    for name in names:
        index = parse_name(name) if Path(name).name == name else None
        if index is None:
            raise DatasetError(f"{path}: episode name {name!r} is not an ExORL file name")
        parsed.append(index[0])
    starts = np.cumsum([0, *rows])
    if replay:
        actions = arrays["action"]
        if not np.isfinite(actions).all():
            raise DatasetError(f"{path}: non-finite actions (NaN or inf)")
        jobs = [
            (name, index, actions[a:b], want)
            for name, index, a, b, want in zip(
                names, parsed, starts[:-1], starts[1:], digests, strict=True
            )
        ]
        hidden = buffer.parent / ".buffer.unpacking"
        shutil.rmtree(hidden, ignore_errors=True)  # a killed unpack's
        hidden.mkdir(parents=True)
        try:
            results = _regenerate_all(collection, hidden, jobs, workers)
            buffer.mkdir(exist_ok=True)
            for name in names:
                os.replace(hidden / name, buffer / name)
        finally:
            shutil.rmtree(hidden, ignore_errors=True)
        gaps = [
            float(np.abs(final - want).max())
            for (same, final, _), want in zip(results, arrays["final"], strict=True)
            if not same
        ]
        reproduced, deviation = len(results) - len(gaps), max(gaps, default=0.0)
        returns = (float(np.mean(header_returns)), float(np.mean([r[2] for r in results])))
    else:
        episodes = []
        for name, a, b in zip(names, starts[:-1], starts[1:], strict=True):
            episode = {k: v[a:b] for k, v in arrays.items()}
            validate_episode(episode, domain, str(buffer / name))
            episodes.append((name, episode))
        buffer.mkdir(parents=True, exist_ok=True)
        for name, episode in episodes:
            save_episode(buffer / name, episode)
        reproduced, deviation, returns = None, None, None
    steps = sum(rows) - len(rows)
    size = path.stat().st_size
    return PackSummary(
        buffer,
        domain.name,
        buffer.parent.name,
        len(rows),
        steps,
        size,
        reproduced,
        deviation,
        returns,
    )
