"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_readme_python_api_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no Python example"
    monkeypatch.chdir(tmp_path)  # the example writes datasets/readme
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})
    assert (tmp_path / "datasets" / "readme" / "cheetah" / "random" / "buffer").is_dir()


def test_the_demonstrations_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = README.parent / "docs" / "demonstrations.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, str(page), "exec"), {})
    assert (tmp_path / "mine.npz").exists()


def test_the_spec_page_plans_what_it_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/spec.md's TOML example is a valid spec whose plan is the one the page prints."""
    from rbfm.cli import main

    page = (README.parent / "docs" / "spec.md").read_text()
    (toml,) = re.findall(r"```toml\n(.*?)```", page, flags=re.S)
    (printed,) = re.findall(r"```\n(experiment mine: .*?)\n```", page, flags=re.S)
    (tmp_path / "mine.toml").write_text(toml)
    args = ["experiment", str(tmp_path / "mine.toml"), "--dry-run", "--out", str(tmp_path)]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[0] == printed


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


RESULTS = README.parent / "docs" / "results.md"


def test_every_interval_the_results_page_cites_is_in_a_generated_table() -> None:
    """docs/results.md copies its numbers by hand from the tables each stage writes
    (docs/results/STAGE/expert-*/tables.md, and goals.md where a stage has one): every
    "IQM [low, high]" it cites must be found there, so that a reader can trace it and a
    redraw that moved it is noticed."""
    generated = [*(RESULTS.parent / "results").rglob("tables.md")]
    generated += (RESULTS.parent / "results").rglob("goals.md")
    tables = "\n".join(p.read_text() for p in generated)
    tables = tables.replace(" | [", " [")  # the IQM tables put the CI in its own column
    interval = r"-?\d+\.\d \[-?\d+\.\d, -?\d+\.\d\]"
    cited = re.findall(interval, RESULTS.read_text().replace("\n", " "))
    assert len(cited) > 200
    missing = sorted({c for c in cited if c not in tables})
    assert not missing, f"docs/results.md cites intervals no tables.md has: {missing}"


def test_every_figure_the_results_page_shows_exists() -> None:
    shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", RESULTS.read_text())
    assert shown
    assert [p for p in shown if not (RESULTS.parent / p).is_file()] == []


def test_the_project_speaks_of_itself_not_of_its_development() -> None:
    """No issue numbers or work-session narration in the README, the docs or the package
    (dates or commits where time matters)."""
    pattern = re.compile(r"\bissue \d+|\b\w+(th|st|nd|rd) session\b|\bsession\b", re.I)
    root = README.parent
    docs = [p for p in (root / "docs").rglob("*") if p.suffix in (".md", ".toml", ".sh")]
    paths = [README, *docs, *(root / "src" / "rbfm").rglob("*.py")]
    found = [
        f"{path.relative_to(README.parent)}:{i}"
        for path in sorted(paths)
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


@pytest.mark.parametrize("script", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda p: p.name)
def test_every_benchmark_script_imports(script: Path) -> None:
    """docs/benchmarks.md tells readers to run these: each must at least import against
    today's package (a renamed function once broke one unnoticed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
