"""Reward-free exploration agents (random, RND, APS, ProtoRL) and resumable data collection."""

from rbfm.exploration.aps import APS_PRESETS, APSAgent, APSConfig, aps_config
from rbfm.exploration.collect import AGENTS, CollectConfig, RandomAgent, collect, collect_info
from rbfm.exploration.proto import PROTO_PRESETS, ProtoAgent, ProtoConfig, proto_config
from rbfm.exploration.rnd import RND_PRESETS, RNDAgent, RNDConfig, rnd_config

__all__ = [
    "AGENTS",
    "APS_PRESETS",
    "PROTO_PRESETS",
    "RND_PRESETS",
    "APSAgent",
    "APSConfig",
    "CollectConfig",
    "ProtoAgent",
    "ProtoConfig",
    "RNDAgent",
    "RNDConfig",
    "RandomAgent",
    "aps_config",
    "collect",
    "collect_info",
    "proto_config",
    "rnd_config",
]
