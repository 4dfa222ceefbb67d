"""Checkpoints round-trip and refuse corrupt or mismatched files with clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from rbfm.errors import ConfigError
from rbfm.fb import FBModel, fb_config
from rbfm.fb.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_meta,
    recorded_name,
    save_checkpoint,
)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = FBModel(17, 6, fb_config("tiny"))
    save_checkpoint(tmp_path / "best", model, {"domain": "cheetah", "step": 7})
    return tmp_path


def test_round_trip_from_any_path_form(saved: Path) -> None:
    torch.manual_seed(0)
    original = FBModel(17, 6, fb_config("tiny")).state_dict()
    for path in (saved, saved / "best", saved / "best.json", saved / "best.safetensors"):
        model, meta = load_checkpoint(path, domain="cheetah")
        assert meta["step"] == 7 and meta["config"]["z_dim"] == 8
        for k, v in model.state_dict().items():
            torch.testing.assert_close(v.cpu(), original[k], rtol=0, atol=0)
    assert not list(saved.glob(".*part"))  # atomic writes leave no temporaries


def test_corrupt_weights(saved: Path) -> None:
    w = saved / "best.safetensors"
    w.write_bytes(w.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"do not match best\.json"):
        load_checkpoint(saved)


def test_unreadable_weights_with_a_matching_hash(saved: Path) -> None:
    import hashlib

    w = saved / "best.safetensors"
    w.write_bytes(b"not a safetensors file")
    meta = json.loads((saved / "best.json").read_text())
    meta["sha256"] = hashlib.sha256(w.read_bytes()).hexdigest()
    (saved / "best.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="unreadable safetensors"):
        load_checkpoint(saved)


def test_nan_weights_with_a_matching_hash_are_refused(tmp_path: Path) -> None:
    # A run that diverged saves NaN weights whose hash its description records correctly.
    model = FBModel(17, 6, fb_config("tiny"))
    with torch.no_grad():
        model.backward_map.net[0].weight[0, 0] = float("nan")
    save_checkpoint(tmp_path / "best", model, {"domain": "cheetah"})
    with pytest.raises(CheckpointError, match=r"best.safetensors: non-finite weights in "):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"obs_dim": "17"}, "obs_dim is '17', not an integer"),
        ({"config": None}, "config is None, not a table"),
        ({"config": {"z_dim": "x"}}, "FB config.z_dim: 'x' is not a number"),
        ({"config": {"forward_hidden": 5}}, "FB config.forward_hidden: 5 is not a list"),
        ({"task_z": {"run": [0.5, 0.5]}}, "task_z['run'] is not 8 finite numbers"),
        ({"task_z": {"run": [float("nan")] * 8}}, "task_z['run'] is not 8 finite numbers"),
        ({"task_z": {"fly": [1.0] * 8}}, "task_z names 'fly', not a cheetah task"),
    ],
)
def test_a_description_of_wrong_fields_is_refused_by_name(
    saved: Path, change: dict[str, object], message: str
) -> None:
    path = saved / "best.json"
    meta = json.loads(path.read_text())
    for key, value in change.items():
        meta[key] = {**meta[key], **value} if key == "config" and value else value
    path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_checkpoint(saved)


def test_corrupt_or_foreign_description(saved: Path) -> None:
    (saved / "best.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(saved)
    (saved / "best.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CheckpointError, match="not an rbfm FB checkpoint"):
        load_checkpoint(saved)


def test_a_description_without_a_domain_or_that_is_a_folder_is_refused_by_name(
    saved: Path,
) -> None:
    meta = json.loads((saved / "best.json").read_text())
    for domain, message in [(None, "records no domain"), ("hopper", "records domain 'hopper'")]:
        other = {k: v for k, v in meta.items() if k != "domain"}
        (saved / "best.json").write_text(json.dumps(other | ({"domain": domain} if domain else {})))
        with pytest.raises(CheckpointError, match=rf"best\.json: {message} \(valid: walker, "):
            load_checkpoint(saved)
    (saved / "best.json").unlink()
    (saved / "best.json").mkdir()  # a folder named as the description
    with pytest.raises(CheckpointError, match=r"best\.json: cannot read it \(Is a directory\)"):
        load_checkpoint(saved)


def test_missing_files(tmp_path: Path, saved: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nothing")
    (saved / "best.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing weights"):
        load_checkpoint(saved)


def test_wrong_domain_and_shapes(saved: Path) -> None:
    with pytest.raises(CheckpointError, match="a cheetah model, not walker"):
        load_checkpoint(saved, domain="walker")
    meta = json.loads((saved / "best.json").read_text())
    meta["domain"] = "walker"  # walker observations are 24-dim, these weights 17
    (saved / "best.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="do not match the walker domain"):
        load_checkpoint(saved)
    meta["domain"], meta["config"]["embed_dim"] = "cheetah", 32
    (saved / "best.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="tensors do not fit the configured model"):
        load_checkpoint(saved)


def test_export_keeps_weights_and_description_without_the_targets(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from rbfm.fb.checkpoint import export_checkpoint

    torch.manual_seed(0)
    trained = FBModel(17, 6, fb_config("tiny"))
    with torch.no_grad():  # online weights that have moved away from their targets
        for p in [*trained.forward_map.parameters(), *trained.backward_map.parameters()]:
            p.add_(0.1)
    save_checkpoint(tmp_path / "best", trained, {"domain": "cheetah", "step": 7})
    with pytest.raises(CheckpointError, match=r"task_z\['run'\] is not 8 finite numbers"):
        export_checkpoint(tmp_path, tmp_path / "bad" / "model.json", {"task_z": {"run": [1]}})
    assert not (tmp_path / "bad").exists()
    for value in (float("nan"), {"run": float("inf")}):  # a hand-edited description's
        with pytest.raises(ConfigError, match=r"model\.json: iqm holds NaN or infinity"):
            export_checkpoint(tmp_path, tmp_path / "bad" / "model.json", {"iqm": value})
        assert not list((tmp_path / "bad").glob("*"))
    z = {"run": [1.0] * 8}
    stem = export_checkpoint(tmp_path, tmp_path / "ref" / "model.json", {"task_z": z})
    original, meta = load_checkpoint(tmp_path)
    copy, exported = load_checkpoint(stem)
    assert exported["step"] == meta["step"] == 7 and exported["task_z"] == z
    stored = load_file(str(stem.with_suffix(".safetensors")))
    assert not [k for k in stored if k.startswith("target_")]
    online = original.state_dict()
    for k, v in copy.state_dict().items():
        # A loaded export's targets are copies of its F and B.
        torch.testing.assert_close(v, online[k.removeprefix("target_")], rtol=0, atol=0)
    assert not torch.equal(
        online["target_forward_map.sa.0.weight"], online["forward_map.sa.0.weight"]
    )


def test_exported_models_carry_no_machine_paths_and_ask_for_their_data(tmp_path: Path) -> None:
    from rbfm.fb.checkpoint import export_checkpoint, training_data

    buffer = tmp_path / "cheetah-rnd-1k" / "cheetah" / "rnd" / "buffer"
    buffer.mkdir(parents=True)
    data = {"path": str(buffer), "algo": "rnd", "transitions": 999}
    model = FBModel(17, 6, fb_config("tiny"))
    (tmp_path / "run").mkdir()
    save_checkpoint(tmp_path / "run" / "best", model, {"domain": "cheetah", "dataset": data})
    _, meta = load_checkpoint(tmp_path / "run")
    assert training_data(meta, None, "run") == str(buffer)  # the run's data, still here
    assert training_data(meta, "elsewhere", "run") == "elsewhere"

    stem = export_checkpoint(tmp_path / "run", tmp_path / "ship" / "cheetah_x", {})
    text = (stem.with_suffix(".json")).read_text()
    assert str(tmp_path) not in text
    _, shipped = load_checkpoint(stem)
    assert shipped["dataset"] == {"name": "cheetah-rnd-1k", "algo": "rnd", "transitions": 999}
    with pytest.raises(CheckpointError, match=r"rnd data 'cheetah-rnd-1k'.*pass --dataset DIR"):
        training_data(shipped, None, "cheetah_x")


def test_a_float16_export_halves_the_file_and_loads_within_its_rounding(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from rbfm.fb.checkpoint import export_checkpoint

    torch.manual_seed(0)
    model = FBModel(17, 6, fb_config("tiny"))
    data = {"path": "/elsewhere/old-name/cheetah/rnd/buffer", "algo": "rnd", "transitions": 999}
    save_checkpoint(tmp_path / "best", model, {"domain": "cheetah", "dataset": data})
    full = export_checkpoint(tmp_path / "best", tmp_path / "full", {})
    half = export_checkpoint(
        tmp_path / "best", tmp_path / "half", {"dataset": {"name": "new"}}, torch.float16
    )
    stored = load_file(str(half.with_suffix(".safetensors")))
    assert {v.dtype for v in stored.values()} == {torch.float16}
    ratio = (
        half.with_suffix(".safetensors").stat().st_size
        / full.with_suffix(".safetensors").stat().st_size
    )
    assert 0.45 < ratio < 0.55
    # On the CPU whatever device is present (load_checkpoint picks CUDA when there is one):
    # the comparisons below are with the CPU model.
    loaded, meta = load_checkpoint(half, device="cpu")
    # The given name replaces the recorded one; the other fields stay.
    assert meta["dataset"] == {"name": "new", "algo": "rnd", "transitions": 999}
    for k, v in loaded.state_dict().items():
        assert v.dtype == torch.float32
        want = model.state_dict()[k]
        torch.testing.assert_close(v, want.half().float(), rtol=0, atol=0)
        assert (v - want).abs().max() <= 1e-3 * max(float(want.abs().max()), 1e-3)
    obs, z = torch.randn(5, 17), torch.randn(5, 8)
    torch.testing.assert_close(loaded.actor(obs, z), model.actor(obs, z), rtol=0, atol=1e-2)


def test_the_shipped_model_names_no_path() -> None:
    from rbfm.fb.checkpoint import ASSETS

    for description in ASSETS.glob("*.json"):
        meta = json.loads(description.read_text())
        assert "path" not in meta.get("dataset", {}), description.name
        assert not Path(meta.get("exported_from", "")).is_absolute(), description.name


def test_every_domain_ships_a_working_model() -> None:
    # What `rbfm quickstart`, `zero-shot --checkpoint DOMAIN` and `demos` rely on without
    # any dataset: a model per domain whose weights match their hash, with a z of norm
    # sqrt(d) for each of the domain's tasks.
    from rbfm.envs import TASKS
    from rbfm.fb.checkpoint import ASSETS, DEFAULTS, load_checkpoint, read_meta, shipped_model

    for domain in TASKS:
        stem = shipped_model(domain)
        assert stem is not None, f"no model shipped for {domain}"
        assert stem.name == f"{domain}_{DEFAULTS[domain]}"
        assert read_meta(stem)["preset"] == "paper"  # every default is of Table 4's size
    for description in sorted(ASSETS.glob("*.json")):
        stem = description.with_suffix("")
        model, meta = load_checkpoint(stem)
        domain = stem.name.split("_")[0]
        assert meta["domain"] == domain
        task_z = read_meta(stem)["task_z"]
        assert sorted(task_z) == sorted(TASKS[domain]), stem.name
        z = torch.tensor(list(task_z.values()))
        d = model.cfg.z_dim
        assert z.shape == (len(TASKS[domain]), d)
        assert torch.allclose(z.norm(dim=1), torch.full((len(z),), d**0.5), rtol=1e-4)


def test_a_domain_name_names_the_shipped_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rbfm.fb import checkpoint

    assets = tmp_path / "assets"
    assets.mkdir()
    for stem in ("cheetah_cpu", "walker_aps", "walker_rnd-nominal-paper", "walker_rnd-v1"):
        (assets / f"{stem}.json").write_text("{}")
    monkeypatch.setattr(checkpoint, "ASSETS", assets)
    monkeypatch.delenv("RBFM_MODELS", raising=False)
    monkeypatch.chdir(tmp_path)
    resolve = checkpoint.resolve
    assert resolve("cheetah:cpu") == assets / "cheetah_cpu"
    # A domain's default that is not installed is never replaced by another of its models.
    with pytest.raises(CheckpointError, match=r"cheetah \(cheetah_rnd, 32.6 MB\) is not installed"):
        resolve("cheetah")
    # The domain's default (DEFAULTS) although walker_aps comes first by name; `rnd`, the
    # data label of every default, names it too.
    default = assets / "walker_rnd-nominal-paper"
    assert (
        resolve("walker") == resolve("walker:rnd") == resolve("walker:rnd-nominal-paper") == default
    )
    assert resolve("walker:aps") == assets / "walker_aps"
    # A replaced model stays loadable by its label, outside the default lookup.
    assert resolve("walker:rnd-v1") == assets / "walker_rnd-v1"
    with pytest.raises(CheckpointError, match=r"quadruped \(quadruped_rnd, .*\) is not installed"):
        resolve("quadruped")
    with pytest.raises(CheckpointError, match=r"walker:proto \(walker_proto, .*\) is not inst"):
        resolve("walker:proto")
    with pytest.raises(CheckpointError, match=r"no walker:rnd-v2 model is shipped"):
        resolve("walker:rnd-v2")  # a label no model of rbfm's has
    # A guessed name is refused with the domain's real names, and only the domain's.
    with pytest.raises(CheckpointError, match=r"walker's models: walker, walker:aps, ") as e:
        resolve("walker:cpu")
    assert "walker:rnd-v5" in str(e.value) and "cheetah" not in str(e.value)
    (tmp_path / "walker").mkdir()  # a run directory of that name comes first
    assert resolve("walker") == Path("walker") / "best"


def test_files_record_a_model_that_any_directory_finds_again(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(saved.parent)
    assert recorded_name(saved.name) == str(saved / "best")  # a run directory, made absolute
    assert recorded_name("cheetah:rnd-v1") == "cheetah:rnd-v1"  # a shipped name, as given


def test_a_file_made_with_a_replaced_default_finds_its_model_by_its_weights(
    tmp_path: Path,
) -> None:
    """`walker` named the `cpu` walker until it was replaced: a task vector saved then
    records that name and those weights, and loads on them (now `walker:rnd-v5`)."""
    import rbfm
    from rbfm.errors import ConfigError
    from rbfm.policy_files import check_z, save_z

    old = read_meta("walker:rnd-v5")
    z = torch.ones(int(old["config"]["z_dim"]))
    info = {"method": "er", "domain": "walker", "task": "walk", "checkpoint": "walker"}
    path = save_z(tmp_path / "old.json", z, info | {"model_sha256": old["sha256"]})
    imitation = rbfm.load_imitation(path)
    assert imitation.model is not None and imitation.model.meta["sha256"] == old["sha256"]
    # Checked against the new default, it says which model the file is of.
    with pytest.raises(ConfigError, match=r"its model is `walker:rnd-v5` \(--checkpoint"):
        check_z(path, z, info | {"model_sha256": old["sha256"]}, read_meta("walker"))
