"""FB model and training configuration, with named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from rbfm.checks import check_flag, in_range, positive_ints
from rbfm.errors import ConfigError, unknown


@dataclass(frozen=True)
class FBConfig:
    """Architecture and training hyperparameters; `paper` is Table 4 exactly."""

    z_dim: int = 50
    forward_hidden: tuple[int, ...] = (1024, 1024)
    backward_hidden: tuple[int, ...] = (256, 256, 256)
    actor_hidden: tuple[int, ...] = (1024, 1024)
    preprocessor_hidden: tuple[int, ...] = (1024, 1024)
    embed_dim: int = 512
    batch_size: int = 512
    lr: float = 1e-4
    gamma: float = 0.98
    tau: float = 0.01  # Polyak coefficient of the target networks
    steps: int = 1_000_000
    z_mix_ratio: float = 0.5  # probability of z = B(s) instead of a uniform sphere sample
    ortho_coef: float = 1.0
    # Penalty p in mean - p * |X_1 - X_2| over F's two heads (0.5 = their min, the
    # paper's; 0 = their mean, metamotivo's DMC TD target): TD target and actor.
    target_pessimism: float = 0.5
    actor_pessimism: float = 0.5
    # Value conservatism (VC-FB, Jeen et al. 2024; not in the paper, 0 = off): weight of
    # `conservative_penalty` in F's loss, over `conservative_actions` sampled actions per
    # state (half uniform in [-1, 1], half the actor's noisy ones). Offline FB on small,
    # narrow data overvalues actions the data lacks (docs/pretraining.md).
    conservative_coef: float = 0.0
    conservative_actions: int = 4
    # Behaviour cloning in the actor (TD3+BC, Fujimoto & Gu 2021; not in the paper,
    # 0 = off): the actor minimises -Q / mean|Q| + actor_bc * mean (pi(s, z) - a)^2,
    # i.e. TD3+BC with alpha = 1 / actor_bc (its default alpha 2.5 is 0.4). Offline FB
    # on this project's data lets Q grow while F's fit of the data decays
    # (docs/pretraining.md, "Q grows while the fit decays"): the actor leaves the data.
    actor_bc: float = 0.0
    actor_noise: float = 0.2
    actor_noise_clip: float = 0.3
    reward_samples: int = 10_000  # labelled states for zero-shot reward inference
    eval_every: int = 20_000
    eval_episodes: int = 10  # per task
    checkpoint_every: int = 5_000
    bf16: bool = False  # bfloat16 autocast for the networks; the FB loss stays fp32
    # Two departures for short runs, off in `paper` (docs/pretraining.md, "Why the IQM
    # falls"): at a constant lr the policy keeps drifting between evaluations, so a run's
    # returns swing by half and its last checkpoint is often far below its best.
    # Cosine decay of every learning rate from lr to lr * lr_end over `steps` (1: constant).
    lr_end: float = 1.0
    # Polyak coefficient of averaged copies of F, B and the actor, which evaluation,
    # checkpoints and export then use (0: the online networks). Until 1 / average_tau
    # updates the average is the plain mean of all weights so far, so early evaluations
    # are not pulled toward the initialisation.
    average_tau: float = 0.0
    # Standardise every network's observation input by the training data's mean and std
    # (stored with the weights; the paper and ExORL feed raw observations). Quadruped's
    # accelerometer reads up to ~650 where most features stay within 1-20.
    obs_norm: bool = False
    # F and the actor also read the last `context` (state, action) pairs of the episode
    # (`rbfm.fb.context`): what lets a model pretrained across dynamics tell which
    # physics it is in. 0: the paper's F(s, a, z) and pi(s, z).
    context: int = 0

    def __post_init__(self) -> None:
        # Every field, before a network is built: a NaN rate or tau trains to NaN weights
        # that a run would otherwise save as its best model.
        own = "FB config"
        for name in ("forward_hidden", "backward_hidden", "actor_hidden", "preprocessor_hidden"):
            positive_ints(own, name, getattr(self, name))
        counts = {
            "z_dim": 1, "embed_dim": 1, "batch_size": 2, "steps": 1, "reward_samples": 1,
            "eval_every": 1, "eval_episodes": 1, "checkpoint_every": 1,
            "conservative_actions": 2, "context": 0,
        }  # fmt: skip
        for name, low in counts.items():
            in_range(own, name, getattr(self, name), low, 64 if name == "context" else None,
                     integer=True)  # fmt: skip
        in_range(own, "lr", self.lr, 0, open_low=True)
        in_range(own, "gamma", self.gamma, 0, 1, open_high=True)
        in_range(own, "tau", self.tau, 0, 1, open_low=True)
        in_range(own, "average_tau", self.average_tau, 0, 1, open_high=True)
        for name in ("z_mix_ratio", "target_pessimism", "actor_pessimism", "lr_end"):
            in_range(own, name, getattr(self, name), 0, 1)
        for name in ("ortho_coef", "conservative_coef", "actor_bc", "actor_noise",
                     "actor_noise_clip"):  # fmt: skip
            in_range(own, name, getattr(self, name), 0)
        for name in ("bf16", "obs_norm"):
            check_flag(own, name, getattr(self, name))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FBConfig:
        names = {f.name for f in fields(cls)}
        extra = set(data) - names
        if extra:
            raise ConfigError(f"unknown FB config keys {sorted(extra)}")
        tuples = {k: tuple(v) for k, v in data.items() if isinstance(v, list)}
        return cls(**{**data, **tuples})


FB_PRESETS: dict[str, FBConfig] = {
    "paper": FBConfig(),
    # 2 CPU cores: 35-60 ms per update on one thread, so 100k updates in 1-2 hours.
    # Departures from Table 4 besides sizes: the learning rate decays to 0 by a cosine
    # (at a constant one the last checkpoint falls to a third of the best; with the decay
    # it ends at its best: docs/pretraining.md, "Why the IQM falls").
    "cpu": FBConfig(
        forward_hidden=(256, 256),
        backward_hidden=(256, 256, 256),
        actor_hidden=(256, 256),
        preprocessor_hidden=(256,),
        embed_dim=128,
        batch_size=256,
        steps=100_000,
        eval_every=5_000,
        lr_end=0.0,
    ),
    "tiny": FBConfig(
        z_dim=8,
        forward_hidden=(32,),
        backward_hidden=(32,),
        actor_hidden=(32,),
        preprocessor_hidden=(32,),
        embed_dim=16,
        batch_size=32,
        steps=200,
        reward_samples=500,
        eval_every=100,
        eval_episodes=2,
        checkpoint_every=50,
    ),
}


def fb_config(preset: str, **overrides: Any) -> FBConfig:
    if preset not in FB_PRESETS:
        raise unknown("FB preset", preset, FB_PRESETS)
    cfg = asdict(FB_PRESETS[preset])
    unknown_keys = sorted(set(overrides) - set(cfg))
    if unknown_keys:
        raise ConfigError(
            f"unknown FB config field {unknown_keys[0]!r}; valid fields: {', '.join(sorted(cfg))}"
        )
    for k, v in overrides.items():
        if v is None:
            continue
        if isinstance(cfg[k], tuple):
            v = tuple(v) if isinstance(v, list | tuple) else (v,)
        if type(v) is not type(cfg[k]) and not (isinstance(cfg[k], float) and type(v) is int):
            raise ConfigError(f"FB config {k}: expected {type(cfg[k]).__name__}, got {v!r}")
        cfg[k] = float(v) if isinstance(cfg[k], float) else v
    return FBConfig(**cfg)
