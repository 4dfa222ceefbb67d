"""Which models the wheel carries, and how names find the others: the package's assets
folder, then RBFM_MODELS; a model that neither holds stops with how to get it."""

from __future__ import annotations

import json
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
    for stem, (size_mb, *_) in MODELS.items():
        files = (ASSETS / f"{stem}.json", ASSETS / f"{stem}.safetensors")
        assert round(sum(f.stat().st_size for f in files) / 1e6, 1) == size_mb, stem


def test_the_docs_table_has_every_model_with_the_listings_numbers() -> None:
    rows: dict[str, str] = {}
    for m in re.finditer(r"^\| `([a-z:0-9-]+)` \|.*$", (ROOT / "docs/models.md").read_text(), re.M):
        rows.setdefault(m.group(1), m.group(0))  # the first table's: later ones name models too
    assert sorted(rows) == sorted(model_name(s) for s in MODELS)
    for stem, (size_mb, zero_shot, task_means) in MODELS.items():
        cells = [c.strip() for c in rows[model_name(stem)].strip("|").split("|")]
        assert cells[3] == f"{size_mb:.1f}", stem
        # The IQM alone; else the figure and its kind, "(mean)" or "(task means)": a range.
        if zero_shot is not None:
            assert cells[4] == zero_shot and task_means is None, stem
        else:
            assert task_means is not None, stem
            figure, kind = task_means.split()
            assert cells[4] == f"{figure} ({ {'mean': 'mean', 'range': 'task means'}[kind] })", stem
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
    with pytest.raises(
        ModelNotInstalled, match=r"^walker \(walker_rnd-nominal-paper, 32.7 MB\) is"
    ):
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
    assert rows["walker"][1:4] == ["walker", "32.7", "644.0"]
    assert rows["walker:rnd-v5"][1:4] == ["walker", "3.4", "487.9"]  # the replaced default
    assert rows["walker"][-2:] == ["package", "clone"]
    rbfm.list_models()
    assert capsys.readouterr().out.splitlines() == lines


def test_rbfm_models_naming_no_folder_is_said_in_the_listing_and_every_no_such_model_error(
    bare: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    for path, why in [(tmp_path / "nowhere", "no such path"), (tmp_path / "a-file", "a file")]:
        said = f"RBFM_MODELS={path} is not a folder ({why})"
        monkeypatch.setenv("RBFM_MODELS", str(path))
        assert said in models_table().splitlines()[-2]
        with pytest.raises(ModelNotInstalled, match=re.escape(said)):
            resolve("walker:aps")  # a model of rbfm's that no folder holds
        with pytest.raises(checkpoint.CheckpointError, match=re.escape(said)):
            resolve("walker:xyz")  # a name no model has
        with pytest.raises(checkpoint.CheckpointError, match=re.escape(said)):
            read_meta("cheeta")  # no domain's name either
        assert main(["zero-shot", "--checkpoint", "walker:aps"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err


def _own_folder(tmp_path: Path) -> Path:
    """A model folder with a good model of the user's and five bad ones: a folder named as a
    description, a description without a domain, one that is not JSON, one without weights,
    a walker named as a cheetah."""
    own = tmp_path / "own"
    own.mkdir()
    for ext in (".json", ".safetensors"):
        shutil.copy(ASSETS / f"walker_aps{ext}", own / f"walker_mine{ext}")
        shutil.copy(ASSETS / f"walker_aps{ext}", own / f"walker_nodomain{ext}")
        shutil.copy(ASSETS / f"walker_aps{ext}", own / f"cheetah_misnamed{ext}")
    (own / "walker_folder.json").mkdir()
    meta = read_meta("walker:aps")
    del meta["domain"]
    (own / "walker_nodomain.json").write_text(json.dumps(meta))
    (own / "walker_garbled.json").write_text("{not json")
    shutil.copy(ASSETS / "walker_aps.json", own / "walker_noweights.json")
    return own


def test_one_bad_description_does_not_break_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RBFM_MODELS", str(_own_folder(tmp_path)))
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = _cells(lines)
    assert len(rows) == 32
    assert (rows["walker:mine"]["where"], rows["walker:mine"]["get it"]) == ("RBFM_MODELS", "-")
    assert (rows["walker:aps"]["where"], rows["walker:aps"]["get it"]) == ("package", "clone")
    assert rows["walker:noweights"]["where"] == "no-weights"
    for name in ("walker:folder", "walker:nodomain", "walker:garbled", "cheetah:misnamed"):
        assert rows[name]["where"] == "broken", name
    notes = "\n".join(lines[33:])
    assert re.search(r"cheetah:misnamed is broken: .*a walker model named as cheetah's", notes)
    assert re.search(
        r"walker:folder is broken: .*walker_folder\.json: cannot read it \(Is a directory\)", notes
    )
    assert re.search(
        r"walker:nodomain is broken: .*walker_nodomain\.json: records no domain \(valid: ", notes
    )
    assert re.search(r"walker:garbled is broken: .*walker_garbled\.json: not valid JSON", notes)
    assert lines[-1] == "27 of 32 installed"
    rbfm.list_models()
    assert capsys.readouterr().out.splitlines() == lines
    # Loading a broken one is refused in one line, naming its file.
    for name, why in [("walker:folder", "cannot read it"), ("walker:nodomain", "no domain")]:
        with pytest.raises(checkpoint.CheckpointError, match=why):
            load_checkpoint(name)
    assert load_checkpoint("walker:mine")[1]["domain"] == "walker"


def _cells(table: list[str]) -> dict[str, dict[str, str]]:
    """The listing's rows (those above its footnote) by model name, each cell by its
    header, cut where the header's column starts (MB's, right-aligned, after domain's)."""
    names = ["model", "domain", "MB", "zero-shot", "task means", "where", "get it"]
    starts = [0 if n == "MB" else table[0].index(n) for n in names]
    starts[2] = starts[1] + len("domain")
    rows = table[1 : next(i for i, t in enumerate(table) if t.startswith("zero-shot: "))]
    cuts = list(zip(names, starts, [*starts[1:], None], strict=True))
    return {r.split()[0]: {n: r[a:b].strip() for n, a, b in cuts} for r in rows}


def test_rbfm_models_says_where_in_one_word_and_puts_one_kind_of_figure_in_a_column(
    bare: Path,
) -> None:
    shutil.copy(ASSETS / "walker_aps.json", bare / "walker_aps.json")  # its weights missing
    lines = models_table().splitlines()
    rows = _cells(lines)
    assert len(rows) == 26
    for name, row in rows.items():
        assert row["zero-shot"] == "-" or re.fullmatch(r"\d+\.\d", row["zero-shot"]), name
        assert (row["zero-shot"] == "-") != (row["task means"] == "-"), name  # one or other
        assert row["where"] == ("no-weights" if name == "walker:aps" else "missing"), name
    assert rows["cheetah:cpu"]["task means"] == "41.1-412.4 range"
    assert rows["quadruped:rnd-rand"]["task means"] == "121.8 mean"
    assert rows["walker"]["zero-shot"] == "644.0"
    footnote = next(line for line in lines[27:] if line.startswith("zero-shot: IQM over all"))
    assert "; task means: their mean or their range, where no IQM was recorded" in footnote
    assert lines[-1] == "0 of 26 installed"


def test_a_folder_from_before_walkers_default_moved_lists_its_walker_rnd_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`walker_rnd` (the `cpu` walker's old files) in RBFM_MODELS: `walker:rnd` loads the
    default now, so the listing and the weights' lookup name the file by its path, which
    loads it; the name goes on loading the default."""
    old = tmp_path / "old"
    old.mkdir()
    for suffix in (".json", ".safetensors"):
        shutil.copy(ASSETS / f"walker_rnd-v4{suffix}", old / f"walker_rnd{suffix}")
    monkeypatch.setenv("RBFM_MODELS", str(old))
    row = next(r for r in listed_models() if r.file == "walker_rnd")
    assert row.name == str(old / "walker_rnd") and row.where == "RBFM_MODELS"
    sha = read_meta(old / "walker_rnd")["sha256"]
    assert load_checkpoint(row.name)[1]["sha256"] == sha
    assert resolve("walker:rnd") == resolve("walker")
    # walker_rnd-v4's own file comes first (the package's folder): the same weights.
    assert checkpoint.named_for_weights(sha) == "walker:rnd-v4"
    # Weights of its own are found by the path, never by the name that loads another.
    meta = json.loads((old / "walker_rnd.json").read_text()) | {"sha256": "ab" * 32}
    (old / "walker_rnd.json").write_text(json.dumps(meta))
    assert checkpoint.named_for_weights("ab" * 32) == str(old / "walker_rnd")
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert f"{old / 'walker_rnd'}: its name, walker:rnd, loads walker's default" in out
    header, row_line = (
        out.splitlines()[0],
        next(line for line in out.splitlines() if line.startswith(str(old))),
    )
    assert row_line.index("walker ") == header.index("domain")  # the columns stay aligned


def test_a_model_hidden_by_the_packages_of_its_name_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names are looked up in the package first: a user's own walker_aps never loads."""
    own = tmp_path / "own"
    own.mkdir()
    meta = read_meta("walker:aps")
    (own / "walker_aps.json").write_text(json.dumps({**meta, "iqm": 1.0}))
    shutil.copy(ASSETS / "walker_proto.json", own / "walker_proto.json")  # a copy hides nothing
    monkeypatch.setenv("RBFM_MODELS", str(own))
    assert main(["models"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "is not loaded" in line]
    assert notes == [
        "RBFM_MODELS's walker_aps is not loaded: the package's model of that name is (rename "
        "the file to load it)"
    ]
