"""Ties a resumable output directory to the settings that decide its contents.

Collections, pretraining runs and benchmarks resume when rerun with the same command.
The first run writes what it is (a JSON identity); every later one must match it, so
that a rerun with, say, another seed is refused before any compute instead of silently
mixing two runs' results in one directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rbfm.atomic import atomic_write
from rbfm.errors import ConfigError


def bind_identity(
    path: Path,
    identity: dict[str, Any],
    what: str,
    upgrade: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
) -> None:
    """Writes `identity` to `path` the first time; afterwards raises ConfigError on any
    difference. `upgrade(stored, identity)` maps a stored identity to this version's form
    (e.g. gives the config fields it lacks their defaults), so that a run keeps its
    identity across versions of rbfm."""
    ident = json.loads(json.dumps(identity))  # tuples -> lists, as they come back from disk
    if not path.exists():
        atomic_write(path, lambda tmp: tmp.write_text(json.dumps(ident, indent=2)))
        return
    before = json.loads(path.read_text())
    if upgrade is not None:
        before = upgrade(before, ident)
    # Only the keys this version writes decide: a stored key outside them is ignored.
    diff = sorted(k for k in ident if before.get(k) != ident[k])
    if diff:
        listing = ", ".join(_describe(k, before.get(k), ident.get(k)) for k in diff)
        raise ConfigError(
            f"{path.parent} holds a {what} made with other settings ({listing}); rerun the "
            "same command to resume, or choose another --out"
        )


def _describe(key: str, was: Any, now: Any) -> str:
    if isinstance(was, dict) and isinstance(now, dict):  # name the nested fields only
        inner = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
        return ", ".join(_describe(f"{key}.{k}", was.get(k), now.get(k)) for k in inner)
    return f"{key}: was {was!r}, now {now!r}"
