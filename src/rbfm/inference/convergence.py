"""When a task-vector descent has converged, and its step size meanwhile.

Every method tracks one number: its objective on every demonstration transition,
deterministic (no smoothing noise), at each check. Progress means lowering the best
value seen by more than `tol` relative (or `atol` absolute, for objectives near 0, as
on demonstrations the model reproduces exactly).

- `plateau` (the default settings): after `patience` steps without progress the step
  size of every parameter group halves; the descent has converged when `halvings`
  halvings brought no progress. RBFM-Light's objective is a maximum over transitions,
  not differentiable where the worst transition changes: a fixed step keeps jumping
  across those kinks, and only a vanishing step settles.
- `constant` (the paper's settings): the step size never changes and every step of
  the cap is taken; the result says whether its last `patience` steps still made
  progress, so a reader sees a descent stopped short.
"""

from __future__ import annotations

import math

import torch

SCHEDULES = ("plateau", "constant")


class Plateau:
    def __init__(
        self,
        opt: torch.optim.Optimizer,
        schedule: str,
        tol: float,
        atol: float,
        patience: int,
        halvings: int,
    ) -> None:
        self.opt, self.schedule = opt, schedule
        self.tol, self.atol, self.patience, self.halvings = tol, atol, patience, halvings
        self.best = math.inf  # the lowest value seen
        self.ref = math.inf  # the value at the last progress
        self.best_step = 0  # the step of the last progress
        self.halved = 0
        self.converged = False

    def update(self, step: int, value: float) -> tuple[bool, bool]:
        """(is `value` a new best, should the descent stop) after the check at `step`.

        Progress is measured from the value at the last progress, so that many small
        improvements add up. A non-finite value is never a best and never progress."""
        finite = math.isfinite(value)
        improved = finite and value < self.best
        if improved:
            self.best = value
        if finite and (
            not math.isfinite(self.ref)
            or value < self.ref - max(self.tol * abs(self.ref), self.atol)
        ):
            self.ref, self.best_step = value, step
        stalled = step - self.best_step >= self.patience
        if self.schedule == "constant":
            self.converged = stalled
            return improved, False
        if stalled:
            if self.halved == self.halvings:
                self.converged = True
                return improved, True
            self.halved += 1
            self.best_step = step
            for group in self.opt.param_groups:
                group["lr"] *= 0.5
        return improved, False
