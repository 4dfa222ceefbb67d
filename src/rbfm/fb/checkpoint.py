"""FB checkpoints: safetensors weights plus a JSON description, written atomically.

`<name>.safetensors` holds every tensor of the model (F, B, actor, targets);
`<name>.json` holds the format, domain, dimensions, preset, full config, training
step, dataset identity and the weights' SHA-256, so a model loads without the
training code and a torn or swapped pair of files is detected.

Models by name. `walker`, `walker:aps`, `cheetah:rnd-v1`... name the file pair
`<domain>_<label>.json/.safetensors` (a bare domain, or `domain:rnd`, names the domain's
default, `DEFAULTS`), looked up in the package's `assets` folder, then in the folder that the
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

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rbfm.atomic import (
    PAIR,
    atomic_write,
    beside,
    file_sha256,
    standard_json,
    stem_of,
)
from rbfm.device import pick_device
from rbfm.envs import DOMAINS, TASKS, get_domain
from rbfm.errors import ConfigError, RbfmError
from rbfm.fb.config import FBConfig
from rbfm.fb.model import FBModel
from rbfm.fb.moment import read_moment

FORMAT = "rbfm-fb"
VERSION = 1


class CheckpointError(RbfmError):
    """A checkpoint is missing, corrupt, or does not fit what it is loaded for."""


ASSETS = Path(__file__).resolve().parent.parent / "assets"
MODELS_ENV = "RBFM_MODELS"
_TARGETS = ("target_forward_map.", "target_backward_map.")

# Every model of this version of rbfm, by file stem: its size (both files, MB of 1e6
# bytes), its zero-shot IQM over all tasks' episodes, or for a model without that record
# the one it has: the mean of its task means ("mean") or their range ("range"). Apart, so
# that no column of the listing mixes two kinds of figure (docs/models.md).
# tests/test_models_install.py checks them against a clone's files and docs/models.md.
MODELS: dict[str, tuple[float, str | None, str | None]] = {
    "cheetah_rnd": (32.6, "656.1", None),
    "cheetah_cpu": (3.4, None, "41.1-412.4 range"),
    "cheetah_rnd-nominal-paper": (32.6, "266.4", None),
    "cheetah_rnd-rand": (3.4, None, "269.4 mean"),
    "cheetah_rnd-rand-ctx": (4.6, None, "533.3 mean"),
    "cheetah_rnd-rand-ctx-paper": (35.0, "605.5", None),
    "cheetah_rnd-rand-paper": (32.6, "410.1", None),
    "cheetah_rnd-v1": (3.5, "285.8", None),
    "quadruped_rnd": (33.4, "651.9", None),
    "quadruped_rnd-rand": (3.8, None, "121.8 mean"),
    "quadruped_rnd-rand-ctx": (8.3, None, "149.6 mean"),
    "quadruped_rnd-v1": (3.8, "268.2", None),
    "quadruped_rnd-v2": (3.8, "442.3", None),
    "walker_aps": (3.4, "88.2", None),
    "walker_proto": (3.4, "75.4", None),
    "walker_rnd-100k": (3.4, "147.3", None),
    "walker_rnd-1m": (3.4, "154.0", None),
    "walker_rnd-500k": (3.4, "115.6", None),
    "walker_rnd-nominal-paper": (32.7, "644.0", None),
    "walker_rnd-rand": (3.4, "391.1", None),
    "walker_rnd-rand-ctx": (5.0, "246.0", None),
    "walker_rnd-rand-ctx-paper": (35.7, "490.6", None),
    "walker_rnd-rand-paper": (32.7, "563.3", None),
    "walker_rnd-v1": (3.4, "155.1", None),
    "walker_rnd-v4": (3.4, "456.8", None),
    "walker_rnd-v5": (3.4, "487.9", None),
}
# Each domain's default model, the one its bare name loads: the label of its files. The
# rule: the model of Table 4's size (`paper` preset) with the highest zero-shot IQM over
# the domain's four tasks at nominal physics (docs/models.md's column). Walker's
# candidates were its three shipped `paper` models (644.0, 563.3, 490.6); the `cpu`
# walker it replaced (487.9) loads as `walker:rnd-v5`.
DEFAULTS = {"cheetah": "rnd", "quadruped": "rnd", "walker": "rnd-nominal-paper"}
# The models the wheel carries (pyproject.toml's package-data names their files).
WHEEL = ("cheetah_rnd-v1",)
GET = f"clone rbfm and `pip install -e .` there, or set {MODELS_ENV}=/path/to/clone/src/rbfm/assets"


class ModelNotInstalled(CheckpointError, ConfigError):
    """A model of rbfm's (`MODELS`) that no model folder holds: a wheel carries few."""


def _env_folder() -> tuple[Path | None, str]:
    """The folder RBFM_MODELS names (None if unset or not a readable folder), and what is
    wrong with it ("" if nothing)."""
    extra = os.environ.get(MODELS_ENV, "").strip()
    if not extra:
        return None, ""
    folder = Path(extra).expanduser()
    if not folder.is_dir():
        why = "a file" if folder.exists() else "no such path"
        return None, f"{MODELS_ENV}={extra} is not a folder ({why})"
    if not os.access(folder, os.R_OK | os.X_OK):
        return None, f"{MODELS_ENV}={extra} is not readable"
    return folder, ""


def model_folders() -> list[Path]:
    """Where model names are looked up, in order: the package's assets, then the folder
    named by RBFM_MODELS (if set, and a folder: `_folder_note` says why not)."""
    folder, _ = _env_folder()
    return [ASSETS, *([folder] if folder is not None else [])]


def _folder_note() -> str:
    """For every error about a model that no folder holds: why RBFM_MODELS adds none."""
    _, wrong = _env_folder()
    return f"; {wrong}" if wrong else ""


def _is_default(domain: str, label: str) -> bool:
    return DEFAULTS.get(domain) == label


def _shadowed(stem: str) -> bool:
    """`<domain>_rnd` where the domain's default is another file: its name, `domain:rnd`,
    loads the default (`shipped_model`), so only its path reaches it (a model folder from
    before walker's default moved holds `walker_rnd`, the `cpu` walker)."""
    domain, _, label = stem.partition("_")
    return label == "rnd" and DEFAULTS.get(domain, "rnd") != "rnd"


def _name_of(stem: str, where: Path) -> str:
    """The name that loads the model installed at `where`: its path if shadowed."""
    return str(where) if _shadowed(stem) else model_name(stem)


def model_name(stem: str) -> str:
    """`walker_rnd-nominal-paper` -> `walker` (a domain's default), `walker_aps` ->
    `walker:aps`."""
    domain, _, label = stem.partition("_")
    return domain if _is_default(domain, label) else f"{domain}:{label}"


def _order(stem: str) -> tuple[str, bool, str]:
    """Domains in name order, each domain's default first, then labels in name order."""
    domain, _, label = stem.partition("_")
    return domain, not _is_default(domain, label), label


def installed_models() -> dict[str, Path]:
    """Every model the folders hold (its description is there), by file stem; where two
    folders hold one, the first's."""
    found: dict[str, Path] = {}
    for folder in model_folders():
        for description in sorted(folder.glob("*_*.json")):
            if description.stem.partition("_")[0] in DOMAINS:
                found.setdefault(description.stem, description.with_suffix(""))
    return found


def _hidden() -> list[str]:
    """The RBFM_MODELS folder's models that the package's of the same file name hide (a
    copy of the package's own hides nothing)."""
    folder, _ = _env_folder()
    if folder is None or folder.resolve() == ASSETS.resolve():
        return []
    return [
        d.stem
        for d in sorted(folder.glob("*_*.json"))
        if (ASSETS / d.name).is_file() and (ASSETS / d.name).read_bytes() != d.read_bytes()
    ]


def named_for_weights(sha256: str) -> str | None:
    """The name of the installed model whose weights have this hash: what a file made
    with a model finds it by after its name moved on (`walker` was `walker:rnd-v5`)."""
    for stem, where in installed_models().items():
        try:
            if read_meta(where).get("sha256") == sha256:
                return _name_of(stem, where)
        except RbfmError:  # a broken description is the listing's to report
            continue
    return None


def _not_installed(stem: str) -> str:
    wheel = ", ".join(model_name(s) for s in WHEEL)
    return (
        f"{model_name(stem)} ({stem}, {MODELS[stem][0]} MB) is not installed (the wheel "
        f"carries {wheel}; `rbfm models` lists all): {GET}{_folder_note()}"
    )


def resolve(path: str | os.PathLike[str]) -> Path:
    """`RUN` (its best model), `RUN/best`, `RUN/best.json` or `RUN/best.safetensors` -> stem.

    A domain name (`walker`), or `domain:label` (`walker:aps`), that is not a file here
    names one of rbfm's models (`shipped_model`).
    """
    p = Path(path)
    name = str(path)
    if not name.strip():
        raise CheckpointError(
            "an empty model name; pass a model's name (`rbfm models`), a run directory or a "
            "checkpoint file"
        )
    domain, colon, label = name.partition(":")
    if domain in DOMAINS and not p.exists() and not beside(p, ".json").exists():
        # `walker:` is not `walker`: a label was meant and left out.
        stem = shipped_model(domain, label or None) if label or not colon else None
        if stem is None:
            have = ", ".join(n for n in _shipped_names() if n.partition(":")[0] == domain)
            raise CheckpointError(
                f"no {name} model is shipped with rbfm ({domain}'s models: {have}); pass a "
                f"run directory or checkpoint file{_folder_note()}"
            )
        return stem
    if p.is_dir():
        p = p / "best"
    return stem_of(p)


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

    Files are named `<domain>_<label>.json`; with no label, or `rnd` (the paper's main
    data, every default's), the domain's default (`DEFAULTS`). None where no model has
    that label; a model of `MODELS` that no folder holds raises ModelNotInstalled, which
    says how to get it (a domain's default is never replaced by another of its models).
    """
    label = DEFAULTS.get(domain, "rnd") if dataset in (None, "rnd") else dataset
    stem = f"{domain}_{label}"
    found = installed_models().get(stem)
    if found is None and stem in MODELS:
        raise ModelNotInstalled(_not_installed(stem))
    return found


@dataclass(frozen=True)
class ListedModel:
    """A row of `models_table`; `stem` is where the model is installed, or None; `problem`
    why its description does not load (the row is `broken`)."""

    name: str
    file: str
    domain: str
    size_mb: float
    zero_shot: str | None  # its IQM over all tasks' episodes
    task_means: str | None  # a model without an IQM: its task means' mean or range
    stem: Path | None
    problem: str | None = None

    @property
    def where(self) -> str:
        """In one word: `package` or `RBFM_MODELS` (the folder that holds it), `missing`,
        `no-weights` (its description alone) or `broken` (`problem`)."""
        if self.stem is None:
            return "missing"
        if self.problem is not None:
            return "broken"
        if not beside(self.stem, ".safetensors").is_file():
            return "no-weights"
        return "package" if self.stem.parent == ASSETS else MODELS_ENV

    @property
    def installed(self) -> bool:
        """Its description loads and its weights are beside it, in a model folder."""
        return self.where in ("package", MODELS_ENV)

    @property
    def get(self) -> str:
        """How to get it: in the wheel, from a clone, or `-` for a model of the folders'
        own that rbfm does not list."""
        if self.file in WHEEL:
            return "in the wheel"
        return "clone" if self.file in MODELS else "-"


def listed_models() -> list[ListedModel]:
    """Every model of rbfm's and any other that the model folders hold; reads the
    descriptions and file sizes, not the weights. A description that does not load is
    listed with why (`problem`), and keeps none of the others out."""
    installed = installed_models()
    rows = []
    for stem in sorted(MODELS.keys() | installed.keys(), key=_order):
        where = installed.get(stem)
        size, zero_shot, task_means = MODELS.get(stem, (0.0, None, None))
        domain, problem = stem.partition("_")[0], None
        if where is not None:
            try:
                domain = read_meta(where)["domain"]
            except CheckpointError as e:
                problem = str(e)
            files = [beside(where, s) for s in PAIR]
            size = round(sum(f.stat().st_size for f in files if f.is_file()) / 1e6, 1)
        name = model_name(stem) if where is None else _name_of(stem, where)
        rows.append(ListedModel(name, stem, domain, size, zero_shot, task_means, where, problem))
    return rows


def models_table() -> str:
    """The listing that `rbfm models` and `rbfm.list_models` print: a row per model, notes
    (a broken model's problem, an RBFM_MODELS that names no folder), then the last line
    "N of M installed"."""
    rows = listed_models()
    wide = max([27, *(len(r.name) for r in rows)])  # a path (a shadowed file) widens it
    head = f"{'model':<{wide}} {'domain':<9} {'MB':>5}  {'zero-shot':<9} {'task means':<17}"
    lines = [f"{head} {'where':<11} get it"]
    for r in rows:
        figures = f"{r.zero_shot or '-':<9} {r.task_means or '-':<17}"
        lines.append(
            f"{r.name:<{wide}} {r.domain:<9} {r.size_mb:>5.1f}  {figures} {r.where:<11} {r.get}"
        )
    _, wrong = _env_folder()
    notes = [f"{r.name} is broken: {r.problem}" for r in rows if r.problem is not None]
    notes += [
        f"{r.name}: its name, {model_name(r.file)}, loads {r.domain}'s default "
        f"({r.domain}), so it loads by its path"
        for r in rows
        if r.stem is not None and _shadowed(r.file)
    ]
    notes += [
        f"{MODELS_ENV}'s {stem} is not loaded: the package's model of that name is (rename "
        "the file to load it)"
        for stem in _hidden()
    ]
    installed = sum(r.installed for r in rows)
    return "\n".join(
        [
            *lines,
            "zero-shot: IQM over all tasks' episodes; task means: their mean or their range, "
            "where no IQM was recorded (docs/models.md)",
            f"clone: {GET}",
            *notes,
            *([f"{wrong}: its models are not listed"] if wrong else []),
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
    standard_json(beside(stem, ".json"), meta)
    weights = beside(stem, ".safetensors")
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
        "sha256": file_sha256(weights),
        **meta,
    }
    text = json.dumps(info, indent=2, allow_nan=False)
    atomic_write(beside(stem, ".json"), lambda p: p.write_text(text))


def _stored(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return t.to(dtype) if dtype is not None and t.is_floating_point() else t


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    stem = resolve(path)
    meta_path = beside(stem, ".json")
    if not meta_path.exists():
        have = ", ".join(_shipped_names()) or "none"
        # Name what the user gave; the description's path only where that exists.
        where = meta_path if Path(path).exists() else path
        raise CheckpointError(
            f"{where}: no such checkpoint (give a run directory, a checkpoint's .json or "
            f".safetensors, or a shipped model: {have}){_folder_note()}"
        )
    try:
        # Python's json, NaN taken: the fields read are checked each (task_z for NaN),
        # which names the defect better than the parser would.
        meta = json.loads(meta_path.read_text())
    except OSError as e:  # a folder named as a description, or one not readable
        raise CheckpointError(f"{meta_path}: cannot read it ({e.strerror})") from e
    except ValueError as e:  # JSON's or UTF-8's defects
        raise CheckpointError(f"{meta_path}: not valid JSON ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path}: not an rbfm FB checkpoint (format {FORMAT!r})")
    domain = meta.get("domain")
    if not isinstance(domain, str) or domain not in DOMAINS:
        what = "records no domain" if domain is None else f"records domain {domain!r}"
        raise CheckpointError(f"{meta_path}: {what} (valid: {', '.join(DOMAINS)})")
    # In a model folder the file's name is the model's (`cheetah_x` loads as cheetah:x).
    named = stem.name.partition("_")[0]
    if named != domain and stem.resolve().parent in {f.resolve() for f in model_folders()}:
        raise CheckpointError(
            f"{meta_path}: a {domain} model named as {named}'s; a model folder's files are "
            f"named <domain>_<label> (rename it {domain}_{stem.name.partition('_')[2]})"
        )
    return meta


def verify_weights(stem: Path, meta: dict[str, Any]) -> None:
    """The weights file exists and is the one its description names (its SHA-256)."""
    weights = beside(stem, ".safetensors")
    if not weights.exists():
        raise CheckpointError(f"{weights}: missing weights file")
    if file_sha256(weights) != meta.get("sha256"):
        raise CheckpointError(f"{weights}: contents do not match {stem.name}.json (corrupt?)")


def load_checkpoint(
    path: str | os.PathLike[str], domain: str | None = None, device: str | None = None
) -> tuple[FBModel, dict[str, Any]]:
    """Loads a model; checks its file, its shapes and (if given) its domain."""
    stem = resolve(path)
    meta = read_meta(stem)
    weights = beside(stem, ".safetensors")
    if domain is not None and meta.get("domain") != domain:
        raise CheckpointError(
            f"{path}: a {meta.get('domain')} model, not {domain} (the domain of the "
            "demonstrations or task given with it)"
        )
    spec = get_domain(meta["domain"])
    described = beside(stem, ".json")
    for key in ("obs_dim", "action_dim"):
        if isinstance(meta.get(key), bool) or not isinstance(meta.get(key), int):
            raise CheckpointError(f"{described}: {key} is {meta.get(key)!r}, not an integer")
    if not isinstance(meta.get("config"), dict):
        raise CheckpointError(f"{described}: config is {meta.get('config')!r}, not a table")
    try:
        cfg = FBConfig.from_json(meta["config"])
    except ConfigError as e:
        raise CheckpointError(f"{described}: {e}") from None
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
    # The hash names the file, not sound weights: a run that diverged saves NaN ones.
    if broken := [k for k, v in state.items() if v.is_floating_point() and not v.isfinite().all()]:
        raise CheckpointError(f"{weights}: non-finite weights in {', '.join(broken[:3])}")
    _check_task_z(described, meta, spec.name, cfg.z_dim)
    model = FBModel(meta["obs_dim"], meta["action_dim"], cfg)
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
    if "b_moment" in meta:
        try:
            model.b_moment = read_moment(meta["b_moment"], model.cfg.z_dim)
        except ValueError as e:
            raise CheckpointError(f"{beside(stem, '.json')}: {e}") from None
    return model.to(pick_device(device)).eval(), meta


def _check_task_z(described: Path, meta: dict[str, Any], domain: str, z_dim: int) -> None:
    """The stored task vectors, which experts and zero-shot read without a dataset: one
    finite z of the model's size per task of its domain."""
    stored = meta.get("task_z", {})
    if not isinstance(stored, dict):
        raise CheckpointError(f"{described}: task_z is not a table of task vectors")
    for task, z in stored.items():
        if task not in TASKS[domain]:
            raise CheckpointError(
                f"{described}: task_z names {task!r}, not a {domain} task "
                f"(valid: {', '.join(TASKS[domain])})"
            )
        ok = isinstance(z, list) and len(z) == z_dim
        if not ok or not all(isinstance(x, int | float) and math.isfinite(x) for x in z):
            raise CheckpointError(
                f"{described}: task_z[{task!r}] is not {z_dim} finite numbers (the model's z)"
            )


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
    stem = stem_of(out)
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
    # Nothing written that load_checkpoint would refuse.
    _check_task_z(beside(stem, ".json"), {**keep, **extra}, meta["domain"], model.cfg.z_dim)
    stem.parent.mkdir(parents=True, exist_ok=True)
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
