"""Reward-free exploration agents (random, RND) and resumable data collection."""

from rbfm.exploration.collect import AGENTS, CollectConfig, RandomAgent, collect, collect_info
from rbfm.exploration.rnd import RND_PRESETS, RNDAgent, RNDConfig, rnd_config

__all__ = [
    "AGENTS",
    "RND_PRESETS",
    "CollectConfig",
    "RNDAgent",
    "RNDConfig",
    "RandomAgent",
    "collect",
    "collect_info",
    "rnd_config",
]
