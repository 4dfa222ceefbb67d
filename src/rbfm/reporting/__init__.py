"""Reporting: what an experiment's results table and a pretraining run say. The paper's
figures and markdown tables, the statistics behind them (means with CIs, IQMs), the
verdicts of robust methods against FB-IL, goal ratios against a reference configuration,
and plots of pretraining runs and perturbation sweeps.

    from rbfm.reporting import draw_run_figures
    draw_run_figures("runs/experiments/smoke", "runs/experiments/smoke/results.csv")

Entry points are imported on first use: figures and plots import matplotlib, which the
statistics and `python -m rbfm.reporting.goals` do without.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rbfm.reporting.figures import draw_all, draw_run_figures
    from rbfm.reporting.goals import goal_table
    from rbfm.reporting.plots import plot_nominal, plot_pretraining, plot_sweep, plot_sweeps
    from rbfm.reporting.stats import aggregate, iqm_estimates
    from rbfm.reporting.verdicts import readings_table

_ENTRY_POINTS = {
    "draw_all": "figures",
    "draw_run_figures": "figures",
    "goal_table": "goals",
    "plot_nominal": "plots",
    "plot_pretraining": "plots",
    "plot_sweep": "plots",
    "plot_sweeps": "plots",
    "aggregate": "stats",
    "iqm_estimates": "stats",
    "readings_table": "verdicts",
}


def __getattr__(name: str) -> object:
    if name not in _ENTRY_POINTS:
        raise AttributeError(f"module 'rbfm.reporting' has no attribute {name!r}")
    module = importlib.import_module(f"rbfm.reporting.{_ENTRY_POINTS[name]}")
    return getattr(module, name)


__all__ = [
    "aggregate",
    "draw_all",
    "draw_run_figures",
    "goal_table",
    "iqm_estimates",
    "plot_nominal",
    "plot_pretraining",
    "plot_sweep",
    "plot_sweeps",
    "readings_table",
]
