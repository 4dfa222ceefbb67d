"""Single-task robust offline imitation baselines: DRBC and BE-DROIL."""

from rbfm.baselines import bedroil, drbc
from rbfm.baselines.common import BaselineResult, load_weights, read_policy_meta, save_policy

__all__ = ["BaselineResult", "bedroil", "drbc", "load_weights", "read_policy_meta", "save_policy"]
