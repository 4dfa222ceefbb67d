"""Reward-based imitation (ER-FB of Pirotta et al., "Fast Imitation via Behavior
Foundation Models", ICLR 2024): the demonstrator's reward is the density ratio
r = d_E / rho of its state distribution to the data's, and FB's zero-shot inference for a
reward, z = E_rho[r(s) B(s)], turns it into z = E_{d_E}[B(s)]: the mean of B over the
demonstrated states, projected onto the sqrt(d) sphere.

It reads no action, so a demonstrator whose actions no pi_z takes (a planner, a person)
costs it nothing that behavioural cloning pays. Over uniform-length episodes it is FB-IL's
warm start z_w.

This z is exact under FB's model of the successor measure, M = F^T B rho, whatever
E_rho[B B^T]: the ratio's least-squares fit in B's span, B^T w with w = E_rho[B B^T]^{-1}
E_{d_E}[B], is a reward whose zero-shot z E_rho[B B^T w] is E_{d_E}[B] again.
`whiten=True` takes w itself as the task vector: z = E_rho[B B^T]^{-1} E_{d_E}[B],
projected, with the moment the model's description stores (`rbfm.fb.moment`; `rbfm export
--dataset` records it). The two agree where E_rho[B B^T] = I; elsewhere the whitened z is
FB's z for the reward B^T E_rho[B B^T]^{-2} E_{d_E}[B], an empirical variant, not a
correction (docs/inference.md gives its measured returns).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rbfm.checks import check_flag
from rbfm.data.demos import Demos
from rbfm.errors import ConfigError
from rbfm.fb.checkpoint import CheckpointError, installed_models, model_name, read_meta
from rbfm.fb.model import FBModel
from rbfm.fb.moment import read_moment, whiten
from rbfm.fb.networks import project
from rbfm.inference.common import InferenceResult
from rbfm.inference.expert_demos import demo_embedding, warm_start


@dataclass(frozen=True)
class ERConfig:
    """Closed form. whiten: solve against the model's stored E_rho[B B^T]."""

    whiten: bool = False

    def __post_init__(self) -> None:
        check_flag("er", "whiten", self.whiten)


def infer(
    model: FBModel, demos: Demos, cfg: ERConfig, seed: int = 0, progress: bool = False
) -> InferenceResult:
    """z from the demonstrated states alone (episodes weighted equally)."""
    del seed, progress  # closed form, deterministic
    if cfg.whiten and model.b_moment is None:
        raise ConfigError(
            "er: whiten=True needs E_rho[B B^T] of the model's training states, which its "
            "description does not store; `rbfm export --checkpoint MODEL --dataset ITS_DATA "
            f"--out STEM` records it. Models that store it: {', '.join(moment_models()) or 'none'}"
        )
    started = time.perf_counter()
    if cfg.whiten:
        assert model.b_moment is not None
        try:  # a moment set on the model by hand is checked as a description's is
            read_moment({"matrix": model.b_moment.detach().cpu().numpy()}, model.cfg.z_dim)
        except ValueError as e:
            raise ConfigError(f"er: the model's E_rho[B B^T] cannot whiten: {e}") from None
        z = project(whiten(model.b_moment, demo_embedding(model, demos)), model.radius)
    else:
        z = warm_start(model, demos)
    if not torch.isfinite(z).all():
        raise FloatingPointError("er: the task vector is not finite; nothing written")
    if not bool(z.any()):  # a mean B of 0, or one the solve rounded to 0 in float32
        raise FloatingPointError("er: the task vector is 0 (no direction); nothing written")
    result = InferenceResult("er", z, objective=0.0, converged=True)
    result.seconds = result.setup_seconds = time.perf_counter() - started
    return result


def moment_models() -> list[str]:
    """The installed models whose description stores E_rho[B B^T] (a broken one does not)."""
    found = []
    for stem, path in installed_models().items():
        try:
            if "b_moment" in read_meta(path):
                found.append(model_name(stem))
        except CheckpointError:
            continue
    return found
