"""The FB objectives as pure functions of tensors (paper eq. 6-7, Algorithm 1).

Shapes: E ensemble heads of F, N transitions in the batch, d the embedding size.
"""

from __future__ import annotations

import torch

from rbfm.fb.networks import project


def pessimistic(heads: torch.Tensor, penalty: float) -> torch.Tensor:
    """mean_k X_k - penalty * |X_1 - X_2| over the two heads of dim 0.

    penalty 0.5 is min(X_1, X_2), the paper's choice (Algorithm 1) for both the TD target
    and the actor; 0 is the heads' mean, metamotivo's DMC TD target. The two-head form of
    metamotivo's `mean - penalty * uncertainty`; the minimum is taken exactly at 0.5 so
    that the paper's recipe stays bit-identical to a plain min.
    """
    if penalty == 0.5:
        return heads.min(0).values
    return heads.mean(0) - penalty * (heads[0] - heads[1]).abs()


def fb_loss(
    M: torch.Tensor, target_M: torch.Tensor, discount: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two terms of the FB temporal-difference loss, summed over heads.

    M[k, i, j] = F_k(s_i, a_i, z_i)^T B(s'_j); target_M[i, j] = `pessimistic` over k of
    the target networks' F_k(s'_i, a'_i, z_i)^T B(s'_j); discount[i] is the dataset's.
    Off-diagonal term: 0.5 * mean over i != j of (M - gamma * discount * target_M)^2,
    where s'_j (j != i) plays the independent sample s+ ~ rho of eq. 6. Diagonal term:
    -mean_i M[k, i, i] (the -2 E[F^T B(s')] of eq. 6, halved like the first term).
    The off-diagonal mean is the full sum minus the diagonal: no mask is built.
    """
    n = M.shape[-1]
    sq = (M - gamma * discount[:, None] * target_M).square()
    off = 0.5 * (sq.sum((-2, -1)) - sq.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
    diag = -M.diagonal(dim1=-2, dim2=-1).mean(-1)
    return off.sum(), diag.sum()


def orthonormality_loss(B: torch.Tensor) -> torch.Tensor:
    """||E[B B^T] - I||_F^2 with the batch's second moment: zero iff B is orthonormal.

    Equals mean_{i,j} (B_i . B_j)^2 - 2 mean_i |B_i|^2 + d. The reference codes
    average over i != j only; the i = j terms they leave out are |B_i|^4 = d^2,
    constants on the sqrt(d) sphere, so both give the same gradients up to a
    factor N / (N - 1). This form costs a d x d product instead of N x N.
    """
    n, d = B.shape
    cov = B.T @ B / n
    return (cov - torch.eye(d, device=B.device, dtype=B.dtype)).square().sum()


def actor_loss(F_pi: torch.Tensor, z: torch.Tensor, penalty: float = 0.5) -> torch.Tensor:
    """-mean_i of `pessimistic` over k of F_k(s_i, pi(s_i, z_i), z_i)^T z_i (eq. 7; the
    default penalty 0.5 is the minimum over the heads)."""
    return -pessimistic((F_pi * z).sum(-1), penalty).mean()


def behaviour_cloned_actor_loss(
    F_pi: torch.Tensor,
    z: torch.Tensor,
    pi: torch.Tensor,
    action: torch.Tensor,
    bc: float,
    penalty: float = 0.5,
) -> torch.Tensor:
    """TD3+BC's actor loss on FB's Q: -mean_i Q_i / mean_i |Q_i| + bc * mean (pi - a)^2.

    Q_i = `pessimistic` over k of F_k(s_i, pi_i, z_i)^T z_i, and mean |Q| is held constant
    in the gradient. This is TD3+BC's -lambda Q + (pi - a)^2 with lambda = alpha / mean|Q|,
    divided by alpha = 1 / bc: bc weighs cloning against a Q of unit scale, whatever F's
    scale. pi is the actor's action before exploration noise, `action` the data's.
    """
    q = pessimistic((F_pi * z).sum(-1), penalty)
    return -q.mean() / q.abs().mean().detach() + bc * (pi - action).square().mean()


def conservative_penalty(q_sampled: torch.Tensor, q_data: torch.Tensor) -> torch.Tensor:
    """Value-conservative penalty (CQL's, as VC-FB applies it to FB), summed over heads.

    q_sampled[k, j, i] = F_k(s_i, a_ij, z_i)^T z_i for K sampled actions a_ij;
    q_data[k, i] the same at the dataset's action. Returns sum_k mean_i
    [logsumexp over {a_i1..a_iK, a_i} of Q_k - Q_k(s_i, a_i)], which is >= 0 and
    small only when no sampled action is valued above the data's. Minimising it
    pushes Q down on actions the data does not contain and up on the data's.
    """
    q_all = torch.cat([q_sampled, q_data[:, None]], 1)
    return (torch.logsumexp(q_all, 1) - q_data).mean(-1).sum()


def reward_z(B: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
    """Zero-shot task vector: mean_i r(s_i) B(s_i), projected to radius sqrt(d)."""
    z = (reward[:, None] * B).mean(0)
    return project(z, B.shape[-1] ** 0.5)
