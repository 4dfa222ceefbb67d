"""FB checkpoints: safetensors weights plus a JSON description, written atomically.

`<name>.safetensors` holds every tensor of the model (F, B, actor, targets);
`<name>.json` holds the format, domain, dimensions, preset, full config, training
step, dataset identity and the weights' SHA-256, so a model loads without the
training code and a torn or swapped pair of files is detected.

Models by name. `walker`, `walker:aps`, `cheetah:rnd-v1`... name the file pair
`<domain>_<label>.json/.safetensors` (a bare domain names label `rnd`, the paper's main
data), looked up in the package's `assets` folder, then in the folder that the
environment variable RBFM_MODELS names. A clone of rbfm holds every model in
`src/rbfm/assets`, which an editable install (`pip install -e .`) maps into the package,
so a clone finds them all with no further step. The wheel carries only the models in
`WHEEL` (the quickstart's and the README's example's, 3.4 MB against 323 MB for all
26; pyproject.toml's package-data); a wheel's user sets RBFM_MODELS to a clone's
`src/rbfm/assets` for the others. A folder rather than a distribution per model (entry
points, or packages of data): a model is one file pair, which `export` writes and any
folder holds as it is, with no packaging, version or index per model to keep, and
nothing to install in a clone. `MODELS` lists every model of this version of rbfm with
its size and zero-shot IQM, so that the listing (`list_models`, `rbfm models`) and the
errors can name a model that is not installed and say how to get it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rbfm.atomic import atomic_write
from rbfm.device import pick_device
from rbfm.envs import DOMAINS, get_domain
from rbfm.errors import ConfigError, RbfmError
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
MODELS_ENV = "RBFM_MODELS"
_TARGETS = ("target_forward_map.", "target_backward_map.")

# Every model of this version of rbfm, by file stem: its size (both files, MB of 1e6
# bytes) and its zero-shot IQM over all tasks (docs/models.md; `mean` marks a mean over
# tasks, the dynamics-diverse `cpu` models' only record). tests/test_models_install.py
# checks both against a clone's files and docs/models.md.
MODELS: dict[str, tuple[float, str]] = {
    "cheetah_rnd": (32.6, "656.1"),
    "cheetah_cpu": (3.4, "41.1-412.4 per task"),
    "cheetah_rnd-nominal-paper": (32.6, "266.4"),
    "cheetah_rnd-rand": (3.4, "269.4 mean"),
    "cheetah_rnd-rand-ctx": (4.6, "533.3 mean"),
    "cheetah_rnd-rand-ctx-paper": (35.0, "605.5"),
    "cheetah_rnd-rand-paper": (32.6, "410.1"),
    "cheetah_rnd-v1": (3.4, "285.8"),
    "quadruped_rnd": (33.4, "651.9"),
    "quadruped_rnd-rand": (3.8, "121.8 mean"),
    "quadruped_rnd-rand-ctx": (8.3, "149.6 mean"),
    "quadruped_rnd-v1": (3.8, "268.2"),
    "quadruped_rnd-v2": (3.8, "442.3"),
    "walker_rnd": (3.4, "487.9"),
    "walker_aps": (3.4, "88.2"),
    "walker_proto": (3.4, "75.4"),
    "walker_rnd-100k": (3.4, "147.3"),
    "walker_rnd-1m": (3.4, "154.0"),
    "walker_rnd-500k": (3.4, "115.6"),
    "walker_rnd-nominal-paper": (32.7, "644.0"),
    "walker_rnd-rand": (3.4, "391.1"),
    "walker_rnd-rand-ctx": (5.0, "246.0"),
    "walker_rnd-rand-ctx-paper": (35.7, "490.6"),
    "walker_rnd-rand-paper": (32.7, "563.3"),
    "walker_rnd-v1": (3.4, "155.1"),
    "walker_rnd-v4": (3.4, "456.8"),
}
# The models the wheel carries (pyproject.toml's package-data names their files).
WHEEL = ("cheetah_rnd-v1",)
GET = f"clone rbfm and `pip install -e .` there, or set {MODELS_ENV}=/path/to/clone/src/rbfm/assets"


class ModelNotInstalled(CheckpointError, ConfigError):
    """A model of rbfm's (`MODELS`) that no model folder holds: a wheel carries few."""


def model_folders() -> list[Path]:
    """Where model names are looked up, in order: the package's assets, then the folder
    named by RBFM_MODELS (if set)."""
    extra = os.environ.get(MODELS_ENV, "").strip()
    return [ASSETS, *([Path(extra).expanduser()] if extra else [])]


def model_name(stem: str) -> str:
    """`walker_rnd` -> `walker` (a domain's default), `walker_aps` -> `walker:aps`."""
    domain, _, label = stem.partition("_")
    return domain if label == "rnd" else f"{domain}:{label}"


def _order(stem: str) -> tuple[str, bool, str]:
    """Domains in name order, each domain's default first, then labels in name order."""
    domain, _, label = stem.partition("_")
    return domain, label != "rnd", label


def installed_models() -> dict[str, Path]:
    """Every model the folders hold (its description is there), by file stem; where two
    folders hold one, the first's."""
    found: dict[str, Path] = {}
    for folder in model_folders():
        for description in sorted(folder.glob("*_*.json")):
            if description.stem.partition("_")[0] in DOMAINS:
                found.setdefault(description.stem, description.with_suffix(""))
    return found


def _not_installed(stem: str) -> str:
    wheel = ", ".join(model_name(s) for s in WHEEL)
    return (
        f"{model_name(stem)} ({stem}, {MODELS[stem][0]} MB) is not installed (the wheel "
        f"carries {wheel}; `rbfm models` lists all): {GET}"
    )


def resolve(path: str | os.PathLike[str]) -> Path:
    """`RUN` (its best model), `RUN/best`, `RUN/best.json` or `RUN/best.safetensors` -> stem.

    A domain name (`walker`), or `domain:label` (`walker:aps`), that is not a file here
    names one of rbfm's models (`shipped_model`).
    """
    p = Path(path)
    name = str(path)
    domain, _, label = name.partition(":")
    if domain in DOMAINS and not p.exists() and not p.with_suffix(".json").exists():
        stem = shipped_model(domain, label or None)
        if stem is None:
            have = ", ".join(_shipped_names()) or "none"
            raise CheckpointError(
                f"no {name} model is shipped with rbfm (its models: {have}); pass a run "
                "directory or checkpoint file"
            )
        return stem
    if p.is_dir():
        p = p / "best"
    if p.suffix in (".json", ".safetensors"):
        p = p.with_suffix("")
    return p


def recorded_name(path: str | os.PathLike[str]) -> str:
    """How a file records the model it was made with: one of rbfm's models (in a model
    folder) by its name as given, any other as its absolute stem, found again from
    whatever directory reads the file."""
    stem = resolve(path)
    folders = {folder.resolve() for folder in model_folders()}
    return str(path) if stem.resolve().parent in folders else str(stem.resolve())


def _shipped_names() -> list[str]:
    """The names `resolve` accepts for rbfm's models, installed or not, each domain's
    default first: `walker`, `walker:aps`..."""
    return [model_name(s) for s in sorted(MODELS.keys() | installed_models().keys(), key=_order)]


def shipped_model(domain: str, dataset: str | None = None) -> Path | None:
    """The stem of rbfm's model for a domain and data label, from the model folders.

    Files are named `<domain>_<label>.json`; with no label, RND's (`<domain>_rnd`, the
    paper's main data). None where no model has that label; a model of `MODELS` that no
    folder holds raises ModelNotInstalled, which says how to get it (a domain's default is
    never replaced by another of its models).
    """
    stem = f"{domain}_{dataset or 'rnd'}"
    found = installed_models().get(stem)
    if found is None and stem in MODELS:
        raise ModelNotInstalled(_not_installed(stem))
    return found


@dataclass(frozen=True)
class ListedModel:
    """A row of `models_table`; `stem` is where the model is installed, or None."""

    name: str
    file: str
    domain: str
    size_mb: float
    zero_shot: str | None
    stem: Path | None

    @property
    def installed(self) -> bool:
        """Both of its files are in a model folder."""
        return self.stem is not None and self.stem.with_suffix(".safetensors").exists()

    @property
    def get(self) -> str:
        """How to get it: in the wheel, from a clone, or `-` for a model of the folders'
        own that rbfm does not list."""
        if self.file in WHEEL:
            return "in the wheel"
        return "clone" if self.file in MODELS else "-"


def listed_models() -> list[ListedModel]:
    """Every model of rbfm's and any other that the model folders hold; reads the
    descriptions and file sizes, not the weights."""
    installed = installed_models()
    rows = []
    for stem in sorted(MODELS.keys() | installed.keys(), key=_order):
        where = installed.get(stem)
        size, zero_shot = MODELS.get(stem, (0.0, None))
        domain = stem.partition("_")[0]
        if where is not None:
            domain = str(read_meta(where).get("domain", domain))
            files = [where.with_suffix(s) for s in (".json", ".safetensors")]
            size = round(sum(f.stat().st_size for f in files if f.exists()) / 1e6, 1)
        rows.append(ListedModel(model_name(stem), stem, domain, size, zero_shot, where))
    return rows


def models_table() -> str:
    """The listing that `rbfm models` and `rbfm.list_models` print: a row per model,
    then the last line "N of M installed"."""
    rows = listed_models()
    labels = {f.resolve(): MODELS_ENV for f in model_folders()[1:]} | {ASSETS.resolve(): "package"}
    lines = [f"{'model':<27} {'domain':<9} {'MB':>5}  {'zero-shot':<21} {'installed':<11} get it"]
    for r in rows:
        where = "no" if r.stem is None else labels.get(r.stem.resolve().parent, "yes")
        if r.stem is not None and not r.installed:
            where = "no weights"
        zero_shot = r.zero_shot or "-"
        lines.append(
            f"{r.name:<27} {r.domain:<9} {r.size_mb:>5.1f}  {zero_shot:<21} {where:<11} {r.get}"
        )
    installed = sum(r.installed for r in rows)
    return "\n".join(
        [
            *lines,
            "zero-shot: IQM over all tasks' episodes (mean: of the task means; per task: their "
            "range), from docs/models.md",
            f"clone: {GET}",
            f"{installed} of {len(rows)} installed",
        ]
    )


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
