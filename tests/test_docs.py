"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_api_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no Python example"
    monkeypatch.chdir(tmp_path)  # the example writes datasets/readme
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})
    assert (tmp_path / "datasets" / "readme" / "cheetah" / "random" / "buffer").is_dir()
