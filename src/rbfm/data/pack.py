"""Chosen episodes of an ExORL buffer in one compact file, to carry them to a machine with
a transfer limit and write them back there as the same episode files.

Made for lent GPUs, whose calls carry 64 MiB: quadruped's 1M transitions are ~740 MB,
200 of its episodes ~150 MB as episode files. Each key's rows are stored column-major and
byte-shuffled before xz, so that the slowly varying high bytes of one feature sit
together (on quadruped's float16 observations, ~20% smaller than the episode files' own
deflate). Observation and physics may be stored in float16 (`half`): relative error at
most 2**-11, recorded in the file's header; actions, rewards and discounts stay exact.

With `replay`, only the actions travel (exact), with each episode's digests, return and final
physics state: `unpack` regenerates the rest in the simulator (`rbfm.data.resimulate`),
on worker processes, and reports how many episodes came back bitwise and how far the
others' final states lie from the originals. Quadruped's whole 1M transitions pack to
28.6 MiB this way, against ~220 MB for every key at float16.
"""

from __future__ import annotations

import contextlib
import json
import lzma
import multiprocessing
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import mujoco
import numpy as np
from tqdm import tqdm

from rbfm.atomic import atomic_write
from rbfm.data.dataset import find_buffer, infer_domain, read_episodes
from rbfm.data.episode import COLLECTION_FILE
from rbfm.data.exorl import (
    DTYPES,
    KEYS,
    OPTIONAL_KEYS,
    episode_files,
    episode_keys,
    key_widths,
    parse_name,
    save_episode,
    validate_episode,
)
from rbfm.data.resimulate import (
    Collection,
    collection_record,
    digests,
    initial_physics,
    regenerate,
)
from rbfm.envs import get_domain
from rbfm.errors import ConfigError, DatasetError

FORMAT = "rbfm-episodes"
# Version 2 holds mode "replay" (version-1 files are mode "episodes"); 3 also the optional
# key `dynamics`, which a version-2 reader would drop without a word
VERSION = 3
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
    differing: tuple[str, ...] = ()  # keys that differ in some episode
    version_changes: tuple[str, ...] = ()  # "numpy 2.4.6 -> 2.5.2"
    nominal: bool = False  # a dynamics-diverse replay file regenerated at nominal physics

    def packed(self, half: Sequence[str] = ()) -> str:
        """What was packed (`half`: the keys stored in float16)."""
        return f"packed {self._what()}: {self.bytes / 2**20:.1f} MiB" + (
            f"; float16: {', '.join(half)}" if half else ""
        )

    def unpacked(self) -> str:
        """What was unpacked, and how faithfully a replay file's episodes were regenerated."""
        lines = [f"unpacked {self._what()}"]
        if self.reproduced is not None and self.returns is not None:
            at = " at nominal physics (collected under physics drawn per episode)"
            lines += [
                f"regenerated from their actions{at if self.nominal else ''}: "
                f"{self.reproduced} of {self.episodes} bitwise as packed"
                + (", those collected at nominal" if self.nominal else ""),
                f"mean episode return of the stored reward: {self.returns[0]:.1f} packed, "
                f"{self.returns[1]:.1f} {'at nominal' if self.nominal else 'regenerated'}",
            ]
            # at nominal the perturbed episodes differ by design: no gap to report
            if self.reproduced < self.episodes and not self.nominal:
                lines.append(
                    f"the others differ in {', '.join(self.differing)}; their final physics "
                    f"states by up to {self.deviation:.3g} (floating point that rounds "
                    "differently here, amplified by the dynamics over the episode)"
                )
            if self.version_changes:
                lines.append(f"packed with other versions: {'; '.join(self.version_changes)}")
        return "\n".join(lines)

    def _what(self) -> str:
        steps = f"{self.steps:,} steps"
        return f"{self.episodes} {self.domain} {self.algo} episodes ({steps}) into {self.path}"


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
        listed = None if collection.levels is None else collection.levels[index]
        stored = ep["dynamics"][0] if "dynamics" in ep else None
        if listed is None or stored is None:
            same = listed is None and stored is None
        else:
            same = np.array_equal(stored, listed)
        if not same:
            raise DatasetError(
                f"{f}: its dynamics {stored} are not those the collection's record lists for "
                f"episode {index} ({listed}); pack it without --replay"
            )
    got = regenerate(collection, env, indices[0], episodes[0]["action"])
    if digests(got) != digests(episodes[0]):
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
    record = collection_record(buffer) if replay else None
    collection = None if record is None else Collection.of_record(record, buffer)
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
    if collection is None:
        keys, dtypes, arrays = _episode_arrays(buffer, chosen, episodes, half)
        header["float16"] = list(half)
    else:
        _check_replay(collection, chosen, episodes)
        keys, dtypes, arrays = _replay_arrays(episodes)
        header["collection"] = record  # whole, written back beside the unpacked buffer
        header["versions"] = _versions()
        header["digests"] = [digests(ep) for ep in episodes]
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


_Arrays = tuple[tuple[str, ...], dict[str, np.dtype[Any]], dict[str, np.ndarray]]


def _episode_arrays(
    buffer: Path, chosen: list[Path], episodes: list[dict[str, np.ndarray]], half: Sequence[str]
) -> _Arrays:
    """Every key of the episodes, concatenated, `half` ones in float16 where they fit."""
    keys = tuple(episode_keys(episodes[0]))
    mixed = next(
        (f for f, ep in zip(chosen, episodes, strict=True) if ep.keys() != set(keys)), None
    )
    if mixed is not None:
        raise DatasetError(
            f"{mixed}: its keys differ from {chosen[0].name}'s ({', '.join(keys)}); a "
            "packed file holds episodes of one kind (with or without dynamics)"
        )
    dtypes = {k: np.dtype(np.float16) if k in half else np.dtype(DTYPES[k]) for k in keys}
    arrays = {k: np.concatenate([ep[k] for ep in episodes]) for k in keys}
    for k in half:
        peak = float(np.abs(arrays[k]).max())
        if peak > _FLOAT16_MAX:
            raise DatasetError(
                f"{buffer}: {k} reaches {peak:g}, beyond float16's range "
                f"({_FLOAT16_MAX:g}); pack it without half={k}"
            )
    return keys, dtypes, arrays


def _replay_arrays(episodes: list[dict[str, np.ndarray]]) -> _Arrays:
    """What regenerates the episodes: their actions and each one's final physics state."""
    dtypes: dict[str, np.dtype[Any]] = {
        "action": np.dtype(np.float32),
        "final": np.dtype(np.float64),
    }
    arrays = {
        "action": np.concatenate([ep["action"] for ep in episodes]),
        "final": np.stack([ep["physics"][-1] for ep in episodes]),
    }
    return ("action", "final"), dtypes, arrays


def _versions() -> dict[str, str]:
    """What regeneration's bits depend on besides the processor."""
    return {"mujoco": mujoco.__version__, "numpy": np.__version__}


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
        header = json.loads(_read_exact(f, size, path))
    except ValueError as e:
        raise DatasetError(f"{path}: not an {FORMAT} file ({e})") from e
    if not isinstance(header, dict):
        raise DatasetError(f"{path}: not an {FORMAT} file (its header is not an object)")
    if header.get("format") != FORMAT or header.get("version") not in (1, VERSION):
        raise DatasetError(
            f"{path}: format {header.get('format')!r} version {header.get('version')!r}; "
            f"this rbfm reads {FORMAT!r} versions 1 to {VERSION}"
        )
    header.setdefault("mode", "episodes")
    if header["mode"] not in ("episodes", "replay"):
        raise DatasetError(f"{path}: unknown mode {header['mode']!r} (valid: episodes, replay)")
    return header


def _layout(path: Path, header: dict[str, Any]) -> dict[str, tuple[np.dtype[Any], int, int]]:
    """Checks names, row counts and keys against the domain before any block is read;
    per stored key: (dtype, rows, columns)."""
    domain = get_domain(str(header["domain"]))
    names, rows = header["names"], [int(n) for n in header["rows"]]
    if len(names) != len(rows) or not rows:
        raise DatasetError(f"{path}: {len(names)} episode names for {len(rows)} row counts")
    if len(set(names)) != len(names):
        raise DatasetError(f"{path}: episode names repeat")
    for name in names:
        if not isinstance(name, str) or Path(name).name != name or parse_name(name) is None:
            raise DatasetError(f"{path}: episode name {name!r} is not an ExORL file name")
    algo = header["algo"]
    if not isinstance(algo, str) or Path(algo).name != algo or algo in ("", ".", ".."):
        raise DatasetError(f"{path}: algo {algo!r} is not a folder name")
    width = key_widths(domain) | {"final": domain.physics_dim}
    if header["mode"] == "replay":
        length = domain.episode_length + 1
        if any(n != length for n in rows):
            raise DatasetError(f"{path}: replayed episodes have {length} rows each")
        allowed = {"action": {"float32"}, "final": {"float64"}}
    else:
        if min(rows) < 2:
            raise DatasetError(f"{path}: an episode of {min(rows)} rows (at least 2)")
        stored = episode_keys(header["keys"])
        allowed = {k: {np.dtype(DTYPES[k]).name, *(["float16"] * (k in HALF_KEYS))} for k in stored}
    layout = {}
    for k, dtypes in allowed.items():
        dtype_name, cols = header["keys"][k]
        if dtype_name not in dtypes or int(cols) != width[k]:
            raise DatasetError(
                f"{path}: {k} stored as {dtype_name} x {cols}; {domain.name} needs "
                f"{' or '.join(sorted(dtypes))} x {width[k]}"
            )
        layout[k] = (np.dtype(dtype_name), len(rows) if k == "final" else sum(rows), width[k])
    if header["mode"] == "replay":
        meta = header["collection"]
        domain.reward_fn(str(meta["task"]))
        if int(meta["seed"]) < 0 or len(header["digests"]) != len(rows):
            raise DatasetError(f"{path}: malformed collection seed or digests")
        if len(header["returns"]) != len(rows):
            raise DatasetError(f"{path}: {len(header['returns'])} returns for {len(rows)} episodes")
    return layout


def _read_pack(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    try:
        with lzma.open(path, "rb") as f:
            header = _read_header(f, path)
            arrays = {}
            for k, (dtype, rows, cols) in _layout(path, header).items():
                raw = _read_exact(f, dtype.itemsize * cols * rows, path)
                arrays[k] = _unshuffled(raw, dtype, rows, cols)
    except (lzma.LZMAError, EOFError) as e:
        raise DatasetError(f"{path}: not a readable xz stream ({e})") from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DatasetError(f"{path}: malformed header ({type(e).__name__}: {e})") from e
    return header, arrays


Job = tuple[str, int, np.ndarray, dict[str, str]]  # file name, index, actions, digests
Regenerated = tuple[list[str], np.ndarray, float]  # keys that differ, final state, return


def _regenerate_into(
    collection: Collection, directory: Path, jobs: Sequence[Job]
) -> list[Regenerated]:
    """Regenerates and writes `jobs`' episodes; per episode, the keys whose bits differ
    from the packed digests, its final physics state and its return."""
    env = collection.env()
    results = []
    for name, index, actions, want in jobs:
        episode = regenerate(collection, env, index, actions)
        save_episode(directory / name, episode)
        got = digests(episode)
        differ = [k for k in episode_keys({**got, **want}) if got.get(k) != want.get(k)]
        results.append((differ, episode["physics"][-1], float(episode["reward"].sum())))
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
        try:
            for future, chunk in zip(futures, chunks, strict=True):
                done.append(future.result())
                bar.update(len(chunk))
        except BaseException:
            pool.shutdown(cancel_futures=True)  # fail now, not after the queued chunks
            raise
    bar.close()
    return [r for part in done for r in part]


def _move_in(hidden: Path, buffer: Path) -> None:
    """The regenerated folder becomes the buffer in one rename where it can."""
    if buffer.is_dir() and not any(buffer.iterdir()):
        buffer.rmdir()
    if not buffer.exists():
        os.replace(hidden, buffer)
        return
    for f in hidden.iterdir():  # a buffer with other files in it (no episodes: checked)
        os.replace(f, buffer / f.name)
    hidden.rmdir()


def _replayed_record(header: dict[str, Any], nominal: bool) -> dict[str, Any]:
    """The packed collection's record, or with `nominal` that of its replay at nominal."""
    record: dict[str, Any] = header["collection"]
    if nominal:
        if record.get("dynamics") is None:
            raise ConfigError(
                f"nominal: the packed collection ({header['source']}) ran at nominal physics "
                "already; drop --nominal"
            )
        # The same actions from the same initial states at nominal physics: a nominal
        # dataset paired with the diverse one, differing in the physics alone. Its record
        # is a nominal collection's, so a --replay pack regenerates it in turn.
        record = {k: v for k, v in record.items() if k not in ("dynamics", "episode_dynamics")}
        record["replayed_at_nominal"] = header["source"]
    return record


def _unpack_into(
    buffer: Path, collection: Collection, jobs: list[Job], workers: int
) -> list[Regenerated]:
    """Regenerates the episodes in a hidden folder moved in whole to `buffer`; on any
    failure removes it and the folders it created."""
    created = [p for p in (buffer.parent.parent, buffer.parent) if not p.exists()]
    hidden = buffer.parent / ".buffer.unpacking"
    shutil.rmtree(hidden, ignore_errors=True)  # a killed unpack's
    hidden.mkdir(parents=True)
    try:
        results = _regenerate_all(collection, hidden, jobs, workers)
        _move_in(hidden, buffer)
    except BaseException:
        shutil.rmtree(hidden, ignore_errors=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return results


def _unpack_replay(
    header: dict[str, Any],
    arrays: dict[str, np.ndarray],
    buffer: Path,
    workers: int,
    nominal: bool,
) -> PackSummary:
    record = _replayed_record(header, nominal)
    collection = Collection.of_record(record | {"domain": header["domain"]}, buffer)
    names, rows = header["names"], header["rows"]
    actions = arrays["action"]
    if not np.isfinite(actions).all():
        raise DatasetError(f"{buffer}: the packed actions hold NaN or inf")
    starts = np.cumsum([0, *rows])
    # at nominal the regenerated episodes carry no dynamics key to compare
    wants = [
        {k: v for k, v in want.items() if not (nominal and k == "dynamics")}
        for want in header["digests"]
    ]
    jobs = [
        (name, parse_name(name)[0], actions[a:b], want)  # type: ignore[index]
        for name, a, b, want in zip(names, starts[:-1], starts[1:], wants, strict=True)
    ]
    results = _unpack_into(buffer, collection, jobs, workers)
    record_path = buffer.parent / COLLECTION_FILE
    if not record_path.exists():
        atomic_write(record_path, lambda tmp: tmp.write_text(json.dumps(record, indent=2)))
    gaps = [
        float(np.abs(final - want).max())
        for (differ, final, _), want in zip(results, arrays["final"], strict=True)
        if differ
    ]
    packed_with = header.get("versions", {})
    here = _versions()
    return PackSummary(
        buffer,
        collection.domain,
        buffer.parent.name,
        len(rows),
        sum(rows) - len(rows),
        0,
        reproduced=len(results) - len(gaps),
        deviation=max(gaps, default=0.0),
        returns=(float(np.mean(header["returns"])), float(np.mean([r[2] for r in results]))),
        differing=tuple(k for k in (*KEYS, *OPTIONAL_KEYS) if any(k in r[0] for r in results)),
        version_changes=tuple(
            f"{lib} {packed_with[lib]} -> {here[lib]}"
            for lib in sorted(packed_with)
            if lib in here and packed_with[lib] != here[lib]
        ),
        nominal=nominal,
    )


def unpack_episodes(
    path: str | Path, root: str | Path, workers: int = 0, nominal: bool = False
) -> PackSummary:
    """Writes a packed file's episodes to `root/<domain>/<algo>/buffer`, under their
    original names; the buffer must not hold episodes already. Every episode is read and
    validated before the first is written; a replay file's episodes are regenerated on
    `workers` processes (0: in this one) into a hidden folder that then becomes the
    buffer, with the collection's record beside it. `nominal`: a dynamics-diverse replay
    file's episodes are regenerated at nominal physics instead of their own."""
    path = Path(path)
    if workers < 0:
        raise ConfigError(f"workers: {workers} is out of range (valid: >= 0)")
    header, arrays = _read_pack(path)
    domain = get_domain(str(header["domain"]))
    buffer = Path(root) / domain.name / str(header["algo"]) / "buffer"
    if buffer.is_dir() and episode_files(buffer):
        raise DatasetError(f"{buffer}: already holds episodes; unpack into an empty root")
    if header["mode"] == "replay":
        summary = _unpack_replay(header, arrays, buffer, workers, nominal)
        return replace(summary, bytes=path.stat().st_size)
    if nominal:
        raise ConfigError(f"nominal: {path} holds episodes, not actions to replay; drop --nominal")
    names, rows = header["names"], header["rows"]
    starts = np.cumsum([0, *rows])
    episodes = []
    for name, a, b in zip(names, starts[:-1], starts[1:], strict=True):
        episode = {k: v[a:b] for k, v in arrays.items()}
        validate_episode(episode, domain, str(buffer / name))
        episodes.append((name, episode))
    buffer.mkdir(parents=True, exist_ok=True)
    for name, episode in episodes:
        save_episode(buffer / name, episode)
    steps = sum(rows) - len(rows)
    return PackSummary(
        buffer, domain.name, buffer.parent.name, len(rows), steps, path.stat().st_size
    )
