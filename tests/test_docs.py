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


def _documented_commands() -> list[tuple[str, list[str]]]:
    """Every `rbfm ...` line of a ```bash block in the README and docs/, continuation
    lines joined, comments and `&& ...` tails cut, optional `[...]` parts dropped, and
    the placeholders the docs use (N, S, ${n}, $m) given values."""
    import shlex

    values = {"N": "10", "S": "0", "${n}": "100", "$m": "fbil"}
    found = []
    for path in [README, *sorted((README.parent / "docs").glob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\[[^\]]*\]", "", line.split("#")[0].split("&&")[0]).strip()
                if line.startswith("rbfm "):
                    words = [values.get(w, w) for w in shlex.split(line)[1:]]
                    found.append((path.name, [w.replace("${n}", "100") for w in words]))
    return found


def test_every_documented_command_parses_and_experiments_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rbfm.cli import build_parser, main

    commands = _documented_commands()
    assert len(commands) >= 25  # the docs' runnable commands were all found
    parser = build_parser()
    for where, args in commands:
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{where}: `rbfm {' '.join(args)}` does not parse")
        if args[0] == "experiment":  # validated end to end: the plan is made, nothing runs
            assert main([*args, "--dry-run"]) == 0, capsys.readouterr().err
