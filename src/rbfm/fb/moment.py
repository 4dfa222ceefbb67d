"""E_rho[B(s) B(s)^T], B's second moment under the model's training states, stored with a
model so that inference can use it without the data.

FB's zero-shot z for a reward r is E_rho[r(s) B(s)], and the least-squares w of
B(s)^T w ~ r(s) under rho is E_rho[B B^T]^{-1} E_rho[r B]: the two coincide where
E_rho[B B^T] = I, which the orthonormality loss asks for and trained models only approach
(`cheetah:rnd-v1`'s eigenvalues span 0.54-1.88). ER-FB's whitened variant
(`rbfm.inference.er`, `whiten=True`) takes w as the task vector and needs the moment. It
is 50 x 50 numbers, stored in the model's description
(not its weights, whose hash names the model everywhere) by `rbfm export` when the model's
data is on the machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rbfm.data import Dataset
from rbfm.errors import DatasetError
from rbfm.fb.model import FBModel

# States drawn uniformly (seed 0) from the data; 100,000 puts the estimate's relative
# error near 1% on every eigenvalue of a 50 x 50 moment.
MOMENT_STATES = 100_000
# A solve against the moment adds this share of its mean eigenvalue to the diagonal.
RIDGE = 1e-6
# The fewest states per dimension of z a moment is computed from.
MIN_STATES_PER_DIM = 10
_CHUNK = 8192


def b_moment(model: FBModel, obs: torch.Tensor) -> torch.Tensor:
    """The mean of B(s) B(s)^T over the rows of `obs`, in float64."""
    device = next(model.parameters()).device
    d = model.cfg.z_dim
    total = torch.zeros(d, d, dtype=torch.float64)
    with torch.no_grad():
        for chunk in obs.split(_CHUNK):
            b = model.backward_map(chunk.to(device, torch.float32)).double().cpu()
            total += b.T @ b
    return total / len(obs)


def check_states(available: int, z_dim: int, where: str) -> None:
    """Refuses data too small for the moment: below MIN_STATES_PER_DIM x z_dim states its
    smallest eigenvalues are mostly sampling noise, and below z_dim it is singular."""
    needed = MIN_STATES_PER_DIM * z_dim
    if available < needed:
        raise DatasetError(
            f"{where}: {available} transitions; E_rho[B B^T] needs at least {needed} "
            f"({MIN_STATES_PER_DIM} x the model's z_dim {z_dim})"
        )


def moment_record(model: FBModel, data: Dataset, seed: int = 0) -> dict[str, Any]:
    """What a model's description stores: the moment over min(MOMENT_STATES, len(data))
    next states of `data` drawn uniformly from `seed`, checked as `read_moment` reads it."""
    check_states(len(data), model.cfg.z_dim, str(data.directory))
    n = min(MOMENT_STATES, len(data))
    obs = torch.as_tensor(data.subsample(n, seed).next_observation, dtype=torch.float32)
    moment = b_moment(model, obs)
    if not torch.isfinite(moment).all():
        raise FloatingPointError("E_rho[B B^T] is not finite: B is not finite on the data")
    record = {"states": n, "seed": seed, "matrix": moment.float().tolist()}
    try:
        read_moment(record, model.cfg.z_dim)
    except ValueError as e:
        raise DatasetError(f"E_rho[B B^T] over {n} states of the data: {e}") from None
    return record


def read_moment(record: Any, z_dim: int) -> torch.Tensor:
    """The moment a description stores, checked: a finite, symmetric, positive-definite
    z_dim x z_dim matrix (float64). ValueError says what is wrong."""
    if not isinstance(record, dict) or "matrix" not in record:
        raise ValueError("b_moment: expected an object with a 'matrix'")
    try:
        raw = np.asarray(record["matrix"])
    except (TypeError, ValueError):
        raise ValueError("b_moment.matrix: not a matrix of numbers") from None
    if raw.dtype.kind not in "iuf":  # strings, booleans, ragged rows (objects)
        raise ValueError("b_moment.matrix: not a matrix of numbers")
    m = torch.as_tensor(raw.astype(np.float64))
    if m.shape != (z_dim, z_dim):
        raise ValueError(f"b_moment.matrix: shape {tuple(m.shape)}, the model's z is {z_dim} wide")
    if not torch.isfinite(m).all():
        raise ValueError("b_moment.matrix: holds a value that is not finite")
    if float(m.abs().max()) > float(np.finfo(np.float32).max):  # export stores float32
        raise ValueError("b_moment.matrix: holds a value beyond float32's range")
    # Stored in float32: symmetric to its rounding.
    if not torch.allclose(m, m.T, rtol=1e-5, atol=1e-6 * float(m.abs().max())):
        raise ValueError("b_moment.matrix: not symmetric")
    if torch.linalg.cholesky_ex(m).info != 0:
        raise ValueError("b_moment.matrix: not positive definite")
    return m


def whiten(moment: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    """moment^{-1} embedding (float64, with RIDGE's diagonal), in embedding's dtype and device:
    the least-squares w of B^T w ~ r for a reward whose E_rho[r B] is `embedding`."""
    m = moment.to(torch.float64).cpu()
    m = m + RIDGE * torch.trace(m) / len(m) * torch.eye(len(m), dtype=m.dtype)
    w = torch.linalg.solve(m, embedding.detach().to(torch.float64).cpu())
    return w.to(embedding.dtype).to(embedding.device)
