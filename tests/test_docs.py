"""The README's examples run as written."""

from __future__ import annotations

import functools
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
    namespace: dict[str, object] = {}  # one session: a block reads what the ones above made
    for code in blocks:
        exec(compile(code, str(page), "exec"), namespace)
    assert (tmp_path / "mine.npz").exists() and (tmp_path / "states.npz").exists()


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
    recipes = README.parent / "docs" / "history" / "recipes.md"  # the models' commands
    for path in [README, *sorted((README.parent / "docs").glob("*.md")), recipes]:
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
STAGES = RESULTS.parent / "results"
# The pages that quote the stages' numbers: the summary, the pages beside the stages
# (protocol, inference time, the goals across stages), each stage's own page, the README.
STAGE_PAGES = sorted(STAGES.glob("*/README.md"))
RESULT_PAGES = [RESULTS, *sorted(STAGES.glob("*.md")), *STAGE_PAGES]
CITING_PAGES = [*RESULT_PAGES, README]


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@functools.cache
def _generated_tables() -> str:
    """What the stages write (docs/results/STAGE/.../tables.md, and goals.md where a stage
    has one), with the IQM tables' CI column joined to its IQM."""
    generated = sorted([*STAGES.rglob("tables.md"), *STAGES.rglob("goals.md")])
    return "\n".join(p.read_text() for p in generated).replace(" | [", " [")


def _cited(page: Path) -> list[str]:
    interval = r"-?\d+\.\d \[-?\d+\.\d, -?\d+\.\d\]"
    return re.findall(interval, page.read_text().replace("\n", " "))


@pytest.mark.parametrize("page", CITING_PAGES, ids=_page_id)
def test_every_interval_a_results_page_cites_is_in_a_generated_table(page: Path) -> None:
    """The results pages copy their numbers by hand from the tables each stage writes:
    every "IQM [low, high]" a page cites must be found there, so that a reader can trace
    it and a redraw that moved it is noticed."""
    missing = sorted({c for c in _cited(page) if c not in _generated_tables()})
    assert not missing, f"{_page_id(page)} cites intervals no tables.md or goals.md has: {missing}"


def test_every_stage_has_its_page_and_the_summary_links_it() -> None:
    """Each stage directory holds its page beside its files, the pages hold the intervals
    (so the check above reads real pages), and docs/results.md links every one."""
    stages = sorted(d for d in STAGES.iterdir() if d.is_dir())
    assert len(stages) >= 30
    assert [d.name for d in stages if not (d / "README.md").is_file()] == []
    assert len(_cited(RESULTS)) > 50
    assert sum(len(_cited(p)) for p in STAGE_PAGES) > 700
    targets = re.findall(r"\]\(([^)#\s]+)", RESULTS.read_text())
    linked = {(RESULTS.parent / t).resolve() for t in targets}
    unlinked = [p for p in RESULT_PAGES[1:] if p.resolve() not in linked]
    assert [_page_id(p) for p in unlinked] == []


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_figure_and_link_of_the_results_pages_resolves() -> None:
    """Images and relative links on the results pages and the README point at files that
    exist (relative to the page), and an anchor at a heading of the page it names."""
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", RESULTS.read_text())
    broken = []
    for page in CITING_PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{_page_id(page)}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", file.read_text(), flags=re.M)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{_page_id(page)}: {target} (no such heading)")
    assert broken == []


# Figures are committed by the hundred: each stays small enough for the repository to clone
# quickly (`rbfm.reporting.plots.save_png` writes palette PNGs well under it).
MAX_PNG_BYTES = 400_000


def test_every_committed_figure_is_under_400_kb() -> None:
    shown = re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", README.read_text())
    pngs = sorted({*(ROOT / "docs").rglob("*.png"), *((ROOT / p).resolve() for p in shown)})
    assert shown and pngs
    sizes = {_page_id(p): p.stat().st_size for p in pngs}
    assert {p: n for p, n in sizes.items() if n >= MAX_PNG_BYTES} == {}


def test_the_project_speaks_of_itself_not_of_its_development() -> None:
    """No issue numbers or work-session narration in the README, the docs, the package, its
    tests or benchmarks (dates or commits where time matters)."""
    pattern = re.compile(r"\bissue \d+|\b\w+(th|st|nd|rd) session\b|\bsession\b", re.I)
    root = README.parent
    docs = [p for p in (root / "docs").rglob("*") if p.suffix in (".md", ".toml", ".sh")]
    code = [p for d in ("src/rbfm", "tests", "benchmarks") for p in (root / d).rglob("*.py")]
    # This file names the patterns it looks for.
    paths = [README, *docs, *(p for p in code if p.resolve() != Path(__file__).resolve())]
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
