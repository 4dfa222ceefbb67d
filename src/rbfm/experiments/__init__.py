"""Experiments: the paper's grid (models x tasks x perturbations x methods x seeds) as
resumable cells, run locally or on Ray, into a results table (`rbfm.reporting` reads it).

    from rbfm.experiments import load_spec, run_experiment, LocalExecutor
    summary = run_experiment(load_spec("smoke"), "runs/experiments/smoke", LocalExecutor(2))
"""

from rbfm.experiments.executors import LocalExecutor, RayExecutor, make_executor
from rbfm.experiments.plan import Plan, plan
from rbfm.experiments.runner import RunSummary, Store, run_experiment
from rbfm.experiments.spec import (
    PRESETS,
    ExperimentSpec,
    MethodEntry,
    ModelEntry,
    from_dict,
    load_spec,
)
from rbfm.experiments.table import ResultRow, read_table, write_table

__all__ = [
    "PRESETS",
    "ExperimentSpec",
    "LocalExecutor",
    "MethodEntry",
    "ModelEntry",
    "Plan",
    "RayExecutor",
    "ResultRow",
    "RunSummary",
    "Store",
    "from_dict",
    "load_spec",
    "make_executor",
    "plan",
    "read_table",
    "run_experiment",
    "write_table",
]
