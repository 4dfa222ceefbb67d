"""The identity that ties a resumable directory to its settings."""

import json

import pytest

from rbfm.errors import ConfigError
from rbfm.run_identity import bind_identity


def test_first_run_writes_later_runs_must_match(tmp_path):
    path = tmp_path / "run.json"
    ident = {"seed": 0, "config": {"lr": 1e-4, "hidden": (8, 8)}}
    bind_identity(path, ident, "run")
    assert json.loads(path.read_text()) == {"seed": 0, "config": {"lr": 1e-4, "hidden": [8, 8]}}
    bind_identity(path, ident, "run")  # tuples stored as lists still match
    with pytest.raises(ConfigError, match=r"config\.lr: was 0\.0001, now 0\.001") as err:
        bind_identity(path, {"seed": 0, "config": {"lr": 1e-3, "hidden": (8, 8)}}, "run")
    assert "hidden" not in str(err.value)  # only what differs is named
    with pytest.raises(ConfigError, match="seed: was 0, now 1"):
        bind_identity(path, {**ident, "seed": 1}, "run")
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary left


def test_upgrade_fills_what_older_files_lack(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"seed": 0, "retired": 3}))  # stored by an older version
    ident = {"seed": 0, "added": False}
    with pytest.raises(ConfigError, match="added: was None, now False"):
        bind_identity(path, ident, "run")
    bind_identity(path, ident, "run", lambda before, now: {"added": False} | before)
