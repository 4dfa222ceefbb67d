"""rbfm's layers point down only: a module imports from its own package or from a
layer below its own, never from a sibling package of its layer or from above."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "rbfm"

# Bottom to top. The data's path: environments, data, the algorithms (exploration,
# FB, the robust objectives, the planner that demonstrates), evaluation by rollouts,
# task inference and the baselines, their registry, then the runs that combine them,
# the reports drawn from their results, then the command line.
LAYERS: list[set[str]] = [
    {"errors"},
    {"atomic"},  # files written whole, below the checks that name them
    {"checks", "device", "locks", "seeding", "progress", "threads"},
    {"run_identity"},
    {"envs"},
    {"data"},
    {"exploration", "fb", "robust", "planning"},
    {"evaluation"},
    {"inference", "baselines"},
    {"methods"},
    {"policy_files"},
    {"training", "experiments", "api"},
    {"reporting"},
    {"quickstart"},
    {"cli"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _unit(path: Path) -> str:
    """The package (or top-level module) a source file belongs to."""
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    units = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        units |= {n.split(".")[1] for n in names if n.startswith("rbfm.")}
    return units


def test_every_unit_has_a_layer() -> None:
    units = {_unit(p) for p in SRC.rglob("*.py")} - {"__init__", "__main__"}
    assert units <= set(LEVEL), f"no layer for {sorted(units - set(LEVEL))}"


def test_imports_point_down() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        unit = _unit(path)
        if unit in ("__init__", "__main__"):
            continue
        for target in _imports(path) - {unit}:
            if LEVEL[target] >= LEVEL[unit]:
                wrong.append(f"{path.relative_to(SRC)} imports rbfm.{target}")
    assert not wrong, "imports that do not point down:\n" + "\n".join(wrong)
