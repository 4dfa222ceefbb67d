"""Offline data: the ExORL format, datasets of transitions and reward relabelling."""

from rbfm.data.dataset import Dataset, Transitions, load_dataset
from rbfm.data.exorl import read_episode, write_episode
from rbfm.data.relabel import physics_features, relabel, relabel_all

__all__ = [
    "Dataset",
    "Transitions",
    "load_dataset",
    "physics_features",
    "read_episode",
    "relabel",
    "relabel_all",
    "write_episode",
]
