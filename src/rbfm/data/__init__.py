"""Offline data: the ExORL format, datasets of transitions, reward relabelling, and
expert demonstrations (type and file format)."""

from rbfm.data.dataset import Dataset, Transitions, load_dataset
from rbfm.data.demos import Demos, load_demos, save_demos
from rbfm.data.exorl import read_episode, write_episode
from rbfm.data.relabel import describe_with_tasks, physics_features, relabel, relabel_all

__all__ = [
    "Dataset",
    "Demos",
    "Transitions",
    "describe_with_tasks",
    "load_dataset",
    "load_demos",
    "physics_features",
    "read_episode",
    "relabel",
    "relabel_all",
    "save_demos",
    "write_episode",
]
