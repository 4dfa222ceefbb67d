"""Which models the wheel carries, and how names find the others: the package's assets
folder, then RBFM_MODELS; a model that neither holds stops with how to get it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

import rbfm
from rbfm.cli import main
from rbfm.errors import ConfigError
from rbfm.fb import checkpoint
from rbfm.fb.checkpoint import (
    ASSETS,
    MODELS,
    WHEEL,
    ModelNotInstalled,
    listed_models,
    load_checkpoint,
    model_name,
    models_table,
    read_meta,
    recorded_name,
    resolve,
    verify_weights,
)
from rbfm.quickstart import QuickstartConfig, _model_path

ROOT = Path(__file__).resolve().parent.parent
STEMS = sorted(p.stem for p in ASSETS.glob("*.json"))


@pytest.fixture(autouse=True)
def _no_models_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RBFM_MODELS", raising=False)


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package's assets folder emptied, as in a wheel without the model asked for."""
    empty = tmp_path / "assets"
    empty.mkdir()
    monkeypatch.setattr(checkpoint, "ASSETS", empty)
    return empty


def test_the_list_is_the_clones_models_with_their_sizes() -> None:
    assert len(STEMS) == len(MODELS) == 26
    assert sorted(MODELS) == STEMS
    for stem, (size_mb, _) in MODELS.items():
        files = (ASSETS / f"{stem}.json", ASSETS / f"{stem}.safetensors")
        assert round(sum(f.stat().st_size for f in files) / 1e6, 1) == size_mb, stem


def test_the_docs_table_has_every_model_with_the_listings_numbers() -> None:
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(
            r"^\| `([a-z:0-9-]+)` \|.*$", (ROOT / "docs/models.md").read_text(), re.M
        )
    }
    assert sorted(rows) == sorted(model_name(s) for s in MODELS)
    for stem, (size_mb, zero_shot) in MODELS.items():
        cells = [c.strip() for c in rows[model_name(stem)].strip("|").split("|")]
        assert cells[3] == f"{size_mb:.1f}", stem
        assert cells[4].startswith(zero_shot.split()[0]), stem
        assert cells[5] == ("wheel and clone" if stem in WHEEL else "clone"), stem


def test_the_wheel_carries_the_models_the_quickstart_and_the_readme_load() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert package_data["include-package-data"] is False
    wanted = sorted(f"assets/{s}{ext}" for s in WHEEL for ext in (".json", ".safetensors"))
    assert sorted(package_data["package-data"]["rbfm"]) == wanted
    loaded = re.findall(r"load_model\(\"([^\"]+)\"\)", (ROOT / "README.md").read_text())
    assert loaded
    quickstart = _model_path(QuickstartConfig(), time.perf_counter(), progress=False)
    assert {resolve(name).name for name in loaded} | {quickstart.name} == set(WHEEL)


def _copy_tree(dst: Path) -> None:
    """The project's build inputs under dst: files as links (nothing is read but what
    goes into the wheel), and an egg-info whose SOURCES.txt lists every file, as an
    editable install leaves one."""
    for name in ("pyproject.toml", "README.md"):
        os.symlink(ROOT / name, dst / name)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", dst / "src", ignore=skip, copy_function=os.symlink)
    egg = dst / "src" / "rbfm.egg-info"
    egg.mkdir()
    listed = sorted(p.relative_to(dst) for p in (dst / "src").rglob("*") if p.is_symlink())
    (egg / "SOURCES.txt").write_text("".join(f"{p}\n" for p in listed))


def test_a_built_wheel_holds_only_the_wheels_models(tmp_path: Path) -> None:
    """`pip wheel` on the project (about 10 s): the quickstart's model in, the 25 others
    out, although a stale SOURCES.txt lists them."""
    tree, out = tmp_path / "tree", tmp_path / "wheel"
    tree.mkdir()
    _copy_tree(tree)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run([*pip, str(tree), "-w", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("rbfm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assets = sorted(n for n in names if n.startswith("rbfm/assets/"))
    assert assets == sorted(f"rbfm/assets/{s}{e}" for s in WHEEL for e in (".json", ".safetensors"))
    assert wheel.stat().st_size < 10e6


@pytest.mark.parametrize("row", listed_models(), ids=lambda r: r.name)
def test_every_listed_name_loads_from_the_clone(row: checkpoint.ListedModel) -> None:
    stem = resolve(row.name)
    assert stem == ASSETS / row.file and row.installed
    meta = read_meta(row.name)
    assert meta["domain"] == row.domain == row.file.partition("_")[0]
    verify_weights(stem, meta)  # the weights are the ones the description names
    assert recorded_name(row.name) == row.name


def test_the_wheels_model_loads() -> None:
    for stem in WHEEL:
        model, meta = load_checkpoint(model_name(stem))
        assert meta["domain"] == stem.partition("_")[0] and model.cfg.z_dim > 0


def test_names_resolve_from_rbfm_models_after_the_package(
    bare: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RBFM_MODELS", str(ASSETS))
    assert resolve("walker:aps") == ASSETS / "walker_aps"
    assert resolve("quadruped") == ASSETS / "quadruped_rnd"
    _, meta = load_checkpoint("cheetah:rnd-v1")
    assert meta["domain"] == "cheetah"
    assert recorded_name("walker:aps") == "walker:aps"  # a name, portable between installs
    table = models_table().splitlines()
    assert table[-1] == "26 of 26 installed"
    assert all(" RBFM_MODELS " in line for line in table[1:27])
    (bare / "walker_aps.json").write_text("{}")  # the package's folder comes first
    assert resolve("walker:aps") == bare / "walker_aps"


def test_a_model_not_installed_says_in_one_line_how_to_get_it(
    bare: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        rbfm.load_model("walker:aps")
    assert isinstance(caught.value, ModelNotInstalled)
    message = str(caught.value)
    assert "\n" not in message
    assert "`pip install -e .`" in message
    assert "RBFM_MODELS=/path/to/clone/src/rbfm/assets" in message
    with pytest.raises(ModelNotInstalled, match=r"^walker \(walker_rnd, 3.4 MB\) is not"):
        resolve("walker")  # not replaced by another walker model
    assert models_table().splitlines()[-1] == "0 of 26 installed"
    # The command line prints it as one line; docs/models.md shows that line.
    assert main(["zero-shot", "--checkpoint", "walker:aps", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.strip() in (ROOT / "docs/models.md").read_text()


def test_rbfm_models_lists_every_model_installed_in_a_clone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "26 of 26 installed"
    rows = {line.split()[0]: line.split() for line in lines[1:27]}
    assert sorted(rows) == sorted(model_name(s) for s in STEMS)
    assert rows["cheetah:rnd-v1"][-4:] == ["package", "in", "the", "wheel"]
    assert rows["walker"][1:4] == ["walker", "3.4", "487.9"]
    assert rows["walker"][-2:] == ["package", "clone"]
    rbfm.list_models()
    assert capsys.readouterr().out.splitlines() == lines
