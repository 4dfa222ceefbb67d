"""Reward-free exploration agents (random, RND, APS) and resumable data collection."""

from rbfm.exploration.aps import APS_PRESETS, APSAgent, APSConfig, aps_config
from rbfm.exploration.collect import AGENTS, CollectConfig, RandomAgent, collect, collect_info
from rbfm.exploration.rnd import RND_PRESETS, RNDAgent, RNDConfig, rnd_config

__all__ = [
    "AGENTS",
    "APS_PRESETS",
    "RND_PRESETS",
    "APSAgent",
    "APSConfig",
    "CollectConfig",
    "RNDAgent",
    "RNDConfig",
    "RandomAgent",
    "aps_config",
    "collect",
    "collect_info",
    "rnd_config",
]
