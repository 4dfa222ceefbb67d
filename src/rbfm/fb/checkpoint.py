"""FB checkpoints: safetensors weights plus a JSON description, written atomically.

`<name>.safetensors` holds every tensor of the model (F, B, actor, targets);
`<name>.json` holds the format, domain, dimensions, preset, full config, training
step, dataset identity and the weights' SHA-256, so a model loads without the
training code and a torn or swapped pair of files is detected.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rbfm.atomic import atomic_write
from rbfm.device import pick_device
from rbfm.envs import DOMAINS, get_domain
from rbfm.errors import RbfmError
from rbfm.fb.config import FBConfig
from rbfm.fb.model import FBModel

FORMAT = "rbfm-fb"
VERSION = 1


class CheckpointError(RbfmError):
    """A checkpoint is missing, corrupt, or does not fit what it is loaded for."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


ASSETS = Path(__file__).resolve().parent.parent / "assets"
_TARGETS = ("target_forward_map.", "target_backward_map.")


def resolve(path: str | os.PathLike[str]) -> Path:
    """`RUN` (its best model), `RUN/best`, `RUN/best.json` or `RUN/best.safetensors` -> stem.

    A domain name (`walker`), or `domain:label` (`walker:aps`), that is not a file here
    names the model shipped with rbfm (`shipped_model`).
    """
    p = Path(path)
    name = str(path)
    domain, _, label = name.partition(":")
    if domain in DOMAINS and not p.exists() and not p.with_suffix(".json").exists():
        stem = shipped_model(domain, label or None)
        if stem is None:
            have = ", ".join(_shipped_names()) or "none"
            raise CheckpointError(
                f"no {name} model is shipped with rbfm (shipped: {have}); pass a run "
                "directory or checkpoint file"
            )
        return stem
    if p.is_dir():
        p = p / "best"
    if p.suffix in (".json", ".safetensors"):
        p = p.with_suffix("")
    return p


def recorded_name(path: str | os.PathLike[str]) -> str:
    """How a file records the model it was made with: a shipped model's name as given,
    any other as its absolute stem, found again from whatever directory reads the file."""
    stem = resolve(path)
    return str(path) if stem.resolve().parent == ASSETS else str(stem.resolve())


def _shipped_names() -> list[str]:
    """The names `resolve` accepts for the shipped models, each domain's default first:
    `walker`, `walker:aps`..."""
    pairs = sorted(f.stem.partition("_")[::2] for f in ASSETS.glob("*.json"))
    pairs.sort(key=lambda p: (p[0], p[1] != "rnd"))  # stable: labels stay in name order
    return [d if label == "rnd" else f"{d}:{label}" for d, label in pairs]


def shipped_model(domain: str, dataset: str | None = None) -> Path | None:
    """The stem of the model shipped in the package for a domain (and data label), if any.

    Files are named `<domain>_<label>.json`; a label naming the dataset (`walker_aps`)
    is preferred, RND's (the paper's main data) when none is asked for, else the
    domain's first model in name order.
    """
    found = sorted(ASSETS.glob(f"{domain}_*.json"))
    preferred = [p for p in found if p.stem == f"{domain}_{dataset or 'rnd'}"]
    if dataset and dataset != "rnd" and not preferred:
        return None  # a labelled dataset (aps, rnd-100k...) needs its own model
    chosen = preferred or found
    return chosen[0].with_suffix("") if chosen else None


def save_checkpoint(
    stem: Path,
    model: FBModel,
    meta: dict[str, Any],
    targets: bool = True,
    dtype: torch.dtype | None = None,
) -> None:
    """Writes `stem.safetensors` then `stem.json` (which names the weights' hash).

    targets=False leaves out the target networks (40% of the file): nothing but
    training reads them, and a model loaded without them gets copies of F and B.
    dtype stores the floating-point tensors in another precision (float16 halves the
    file); `load_checkpoint` copies them back into the model's float32.
    """
    weights = stem.with_suffix(".safetensors")
    state = {
        k: _stored(v.detach().cpu(), dtype).contiguous()
        for k, v in model.state_dict().items()
        if targets or not k.startswith(_TARGETS)
    }
    atomic_write(weights, lambda p: save_file(state, str(p)))
    info = {
        "format": FORMAT,
        "version": VERSION,
        "obs_dim": model.obs_dim,
        "action_dim": model.action_dim,
        "config": model.cfg.to_json(),
        "sha256": _sha256(weights),
        **meta,
    }
    atomic_write(stem.with_suffix(".json"), lambda p: p.write_text(json.dumps(info, indent=2)))


def _stored(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return t.to(dtype) if dtype is not None and t.is_floating_point() else t


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    stem = resolve(path)
    meta_path = stem.with_suffix(".json")
    if not meta_path.exists():
        have = ", ".join(_shipped_names()) or "none"
        # Name what the user gave; the description's path only where that exists.
        where = meta_path if Path(path).exists() else path
        raise CheckpointError(
            f"{where}: no such checkpoint (give a run directory, a checkpoint's .json or "
            f".safetensors, or a shipped model: {have})"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{meta_path}: not valid JSON ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path}: not an rbfm FB checkpoint (format {FORMAT!r})")
    return meta


def verify_weights(stem: Path, meta: dict[str, Any]) -> None:
    """The weights file exists and is the one its description names (its SHA-256)."""
    weights = stem.with_suffix(".safetensors")
    if not weights.exists():
        raise CheckpointError(f"{weights}: missing weights file")
    if _sha256(weights) != meta.get("sha256"):
        raise CheckpointError(f"{weights}: contents do not match {stem.name}.json (corrupt?)")


def load_checkpoint(
    path: str | os.PathLike[str], domain: str | None = None, device: str | None = None
) -> tuple[FBModel, dict[str, Any]]:
    """Loads a model; checks its file, its shapes and (if given) its domain."""
    stem = resolve(path)
    meta = read_meta(stem)
    weights = stem.with_suffix(".safetensors")
    if domain is not None and meta.get("domain") != domain:
        raise CheckpointError(
            f"{path}: a {meta.get('domain')} model, not {domain} (the domain of the "
            "demonstrations or task given with it)"
        )
    spec = get_domain(meta["domain"])
    if (meta["obs_dim"], meta["action_dim"]) != (spec.obs_dim, spec.action_dim):
        raise CheckpointError(
            f"{stem}: dimensions {meta['obs_dim']}/{meta['action_dim']} do not match the "
            f"{spec.name} domain ({spec.obs_dim}/{spec.action_dim})"
        )
    verify_weights(stem, meta)
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights}: unreadable safetensors file ({e})") from e
    model = FBModel(meta["obs_dim"], meta["action_dim"], FBConfig.from_json(meta["config"]))
    if not any(k.startswith(_TARGETS) for k in state):  # an export: targets = online nets
        state |= {
            f"target_{k}": v
            for k, v in state.items()
            if k.startswith(("forward_map.", "backward_map."))
        }
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    if expected != found:
        wrong = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
        raise CheckpointError(
            f"{weights}: tensors do not fit the configured model: "
            + ", ".join(f"{k} {found.get(k)} vs expected {expected.get(k)}" for k in wrong[:5])
        )
    model.load_state_dict(state)
    return model.to(pick_device(device)).eval(), meta


def export_checkpoint(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    extra: dict[str, Any],
    dtype: torch.dtype | None = None,
) -> Path:
    """Copies a checkpoint to `out` (a stem), its description extended with `extra`
    (a `dataset` there updates the recorded one's fields), its weights stored in
    `dtype` if given."""
    model, meta = load_checkpoint(path)
    stem = Path(out).with_suffix("") if Path(out).suffix in (".json", ".safetensors") else Path(out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    keep = {
        k: v
        for k, v in meta.items()
        if k not in ("format", "version", "obs_dim", "action_dim", "config", "sha256")
    }
    if "dataset" in keep:
        # The data's path is the making machine's: an exported model names its data only.
        data = dict(keep["dataset"])
        path = data.pop("path", None)
        if path is not None:
            data.setdefault("name", dataset_name(Path(path)))
        keep["dataset"] = data
    if "dataset" in extra:
        extra = {**extra, "dataset": {**keep.get("dataset", {}), **extra["dataset"]}}
    save_checkpoint(stem, model, {**keep, **extra}, targets=False, dtype=dtype)
    return stem


def dataset_name(buffer: Path) -> str:
    """`.../<name>/<domain>/<algo>/buffer` -> `<name>` (the ExORL layout's root folder)."""
    parts = buffer.parts
    return parts[-4] if len(parts) >= 4 and parts[-1] == "buffer" else buffer.name


def training_data(meta: dict[str, Any], given: str | None, checkpoint: str) -> str:
    """The dataset for reward labelling: `given`, else the path the run recorded if it
    is on this machine; exported (shipped) models carry no path and need `given`."""
    if given is not None:
        return given
    data = meta.get("dataset", {})
    path = data.get("path")
    if path is not None and Path(path).exists():
        return str(path)
    what = f"{data.get('algo', '?')} data '{data.get('name', path)}'"
    raise CheckpointError(
        f"{checkpoint}: this command labels states of the model's training data with rewards "
        f"({what}, {data.get('transitions', '?')} transitions), which is not on this machine: "
        "pass --dataset DIR (an ExORL buffer of that domain)"
    )
