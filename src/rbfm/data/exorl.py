"""Reading and writing episodes in the ExORL layout.

On disk: `<root>/<domain>/<algo>/buffer/<timestamp>_<index>_<length>.npz`, one
compressed archive per episode with keys observation, action, reward, discount
and physics, each with T+1 rows; row 0 is the reset (zero action, reward 0,
discount 1) and row t holds the action taken at step t, the reward and discount
it returned, and the observation and physics state after it. An episode of
dynamics-diverse data also has `dynamics`: its perturbation levels, one per family of
the domain (`rbfm.envs.families` order), repeated on every row.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import zipfile
from collections.abc import Container, Mapping
from pathlib import Path

import numpy as np

from rbfm.atomic import atomic_write
from rbfm.envs import DomainSpec, families
from rbfm.errors import DatasetError

KEYS = ("observation", "action", "reward", "discount", "physics")
DTYPES = {
    "observation": np.float32,
    "action": np.float32,
    "reward": np.float32,
    "discount": np.float32,
    "physics": np.float64,
    "dynamics": np.float64,
}
OPTIONAL_KEYS = ("dynamics",)


def is_real(dtype: np.dtype) -> bool:
    """Integers or floats: what an array of observations, actions or rewards may hold (a
    bool, complex, text or object array is refused, never cast)."""
    return bool(np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating))


def episode_keys(keys: Container[str]) -> list[str]:
    """The required keys and the optional ones among `keys` (an episode's or a file's)."""
    return [*KEYS, *(k for k in OPTIONAL_KEYS if k in keys)]


_NAME = re.compile(r"^(?P<stamp>[^_]+)_(?P<index>\d+)_(?P<length>\d+)\.npz$")

Episode = dict[str, np.ndarray]


def episode_name(index: int, length: int, when: dt.datetime | None = None) -> str:
    """ExORL's name `<timestamp>_<index>_<length>.npz`."""
    stamp = (when or dt.datetime.now()).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}_{index}_{length}.npz"


def parse_name(name: str) -> tuple[int, int] | None:
    """(index, length) from an ExORL episode name, or None if it does not follow the pattern."""
    m = _NAME.match(name)
    return (int(m["index"]), int(m["length"])) if m else None


def episode_files(directory: Path) -> list[Path]:
    """The complete episode files of a buffer directory, in file-name order."""
    return sorted(p for p in directory.glob("*.npz") if p.is_file())


def write_episode(directory: Path, index: int, episode: Mapping[str, np.ndarray]) -> Path:
    """Writes one episode atomically: to a temporary file first, then renamed."""
    length = len(episode["observation"]) - 1
    return save_episode(directory / episode_name(index, length), episode)


def save_episode(final: Path, episode: Mapping[str, np.ndarray]) -> Path:
    """Writes one episode atomically under the given file name."""
    buf = io.BytesIO()
    arrays = {k: np.asarray(episode[k], DTYPES[k]) for k in episode_keys(episode)}
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(buf.getbuffer())
            f.flush()
            os.fsync(f.fileno())

    # `.<name>.part` until complete: never read as an episode (`*.npz`), removed on resume.
    atomic_write(final, write)
    return final


def read_episode(path: Path, domain: DomainSpec) -> Episode:
    """Reads and validates one episode; any defect raises a DatasetError naming the file."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in KEYS if k not in npz.files]
            if missing:
                raise DatasetError(f"{path}: missing keys {missing} (has {sorted(npz.files)})")
            episode = {k: np.asarray(npz[k]) for k in episode_keys(npz.files)}
    except DatasetError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise DatasetError(f"{path}: not a readable npz archive ({type(e).__name__}: {e})") from e
    validate_episode(episode, domain, str(path))
    return {k: v.reshape(len(v), -1).astype(DTYPES[k], copy=False) for k, v in episode.items()}


def key_widths(domain: DomainSpec) -> dict[str, int]:
    """Each key's numbers per row in the domain's episodes."""
    return {
        "observation": domain.obs_dim,
        "action": domain.action_dim,
        "reward": 1,
        "discount": 1,
        "physics": domain.physics_dim,
        "dynamics": len(families(domain.name)),
    }


def validate_episode(episode: Mapping[str, np.ndarray], domain: DomainSpec, where: str) -> None:
    """Checks row counts, widths against the domain, and finiteness."""
    present = episode_keys(episode)
    for key in present:
        kind = episode[key].dtype
        if episode[key].ndim == 0:
            raise DatasetError(f"{where}: {key} holds one value, not one row per step")
        if not is_real(kind):
            raise DatasetError(f"{where}: {key} holds {kind} values; expected real numbers")
    rows = {k: len(episode[k]) for k in present}
    if len(set(rows.values())) != 1:
        raise DatasetError(f"{where}: keys have different row counts {rows}")
    n = rows["observation"]
    if n < 2:
        raise DatasetError(f"{where}: {n} rows; an episode needs the reset row and at least 1 step")
    for key in present:
        width = key_widths(domain)[key]
        actual = int(np.prod(episode[key].shape[1:], dtype=np.int64))
        if actual != width:
            raise DatasetError(
                f"{where}: {key} has width {actual} but the {domain.name} domain needs {width} "
                f"(shape {episode[key].shape}); is this episode from another domain?"
            )
    for key in present:
        bad = ~np.isfinite(episode[key].reshape(n, -1)).all(axis=1)
        if bad.any():
            raise DatasetError(
                f"{where}: {key} has non-finite values (NaN or inf) in rows "
                f"{np.flatnonzero(bad)[:5].tolist()}"
            )
    # The environments' bounds: an action beyond them was never taken, and a discount
    # outside [0, 1] is no discount (row 0, the reset's, holds action 0 and discount 1).
    if (size := float(np.abs(episode["action"]).max())) > 1 + 1e-5:
        raise DatasetError(f"{where}: action holds {size:g} in magnitude (valid: [-1, 1])")
    discount = episode["discount"].ravel()
    if (outside := discount[(discount < 0) | (discount > 1)]).size:
        raise DatasetError(f"{where}: discount holds {outside[0]:g} (valid: [0, 1])")
    if "dynamics" in episode and (episode["dynamics"] != episode["dynamics"][:1]).any():
        raise DatasetError(f"{where}: dynamics differ between rows; an episode has one physics")
    parsed = parse_name(Path(where).name)
    if parsed is not None and parsed[1] != n - 1:
        raise DatasetError(
            f"{where}: the file name says {parsed[1]} steps but it holds {n - 1}; truncated?"
        )
