"""E_rho[B(s) B(s)^T], B's second moment under the model's training states, stored with a
model so that inference can use it without the data.

FB's zero-shot z for a reward r is E_rho[r(s) B(s)]: the least-squares z of B(s)^T z ~ r(s)
under rho when E_rho[B B^T] = I, which the orthonormality loss asks for and trained models
only approach (`cheetah:rnd-v1`'s eigenvalues span 0.54-1.88). Without that assumption the
least-squares z is E_rho[B B^T]^{-1} E_rho[r B]; ER-FB's whitened form (`rbfm.inference.er`,
`whiten=True`) needs the moment. It is 50 x 50 numbers, stored in the model's description
(not its weights, whose hash names the model everywhere) by `rbfm export` when the model's
data is on the machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rbfm.data import Dataset
from rbfm.fb.model import FBModel

# States drawn uniformly (seed 0) from the data; 100,000 puts the estimate's relative
# error near 1% on every eigenvalue of a 50 x 50 moment.
MOMENT_STATES = 100_000
# A solve against the moment adds this share of its mean eigenvalue to the diagonal.
RIDGE = 1e-6
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


def moment_record(model: FBModel, data: Dataset, seed: int = 0) -> dict[str, Any]:
    """What a model's description stores: the moment over min(MOMENT_STATES, len(data))
    next states of `data` drawn uniformly from `seed`."""
    n = min(MOMENT_STATES, len(data))
    obs = torch.as_tensor(data.subsample(n, seed).next_observation, dtype=torch.float32)
    moment = b_moment(model, obs)
    if not torch.isfinite(moment).all():
        raise FloatingPointError("E_rho[B B^T] is not finite: B is not finite on the data")
    return {"states": n, "seed": seed, "matrix": moment.float().tolist()}


def read_moment(record: Any, z_dim: int) -> torch.Tensor:
    """The moment a description stores, checked: a finite, symmetric, positive-definite
    z_dim x z_dim matrix (float64). ValueError says what is wrong."""
    if not isinstance(record, dict) or "matrix" not in record:
        raise ValueError("b_moment: expected an object with a 'matrix'")
    try:
        m = torch.as_tensor(np.asarray(record["matrix"], dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError("b_moment.matrix: not a matrix of numbers") from None
    if m.shape != (z_dim, z_dim):
        raise ValueError(f"b_moment.matrix: shape {tuple(m.shape)}, the model's z is {z_dim} wide")
    if not torch.isfinite(m).all():
        raise ValueError("b_moment.matrix: holds a value that is not finite")
    # Stored in float32: symmetric to its rounding.
    if not torch.allclose(m, m.T, rtol=1e-5, atol=1e-6 * float(m.abs().max())):
        raise ValueError("b_moment.matrix: not symmetric")
    if torch.linalg.cholesky_ex(m).info != 0:
        raise ValueError("b_moment.matrix: not positive definite")
    return m


def whiten(moment: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    """moment^{-1} embedding (float64, with RIDGE's diagonal), in embedding's dtype and device:
    the least-squares z for a reward whose E_rho[r B] is `embedding`."""
    m = moment.to(torch.float64).cpu()
    m = m + RIDGE * torch.trace(m) / len(m) * torch.eye(len(m), dtype=m.dtype)
    w = torch.linalg.solve(m, embedding.detach().to(torch.float64).cpu())
    return w.to(embedding.dtype).to(embedding.device)
