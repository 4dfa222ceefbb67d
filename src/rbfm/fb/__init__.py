"""Forward-backward Behavior Foundation Models: networks, losses, training, checkpoints."""

from rbfm.fb.config import FB_PRESETS, FBConfig, fb_config
from rbfm.fb.losses import actor_loss, fb_loss, orthonormality_loss, reward_z
from rbfm.fb.model import FBModel, FBTrainer

__all__ = [
    "FB_PRESETS",
    "FBConfig",
    "FBModel",
    "FBTrainer",
    "actor_loss",
    "fb_config",
    "fb_loss",
    "orthonormality_loss",
    "reward_z",
]
