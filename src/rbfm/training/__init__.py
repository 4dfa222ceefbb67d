"""Training runs: FB pretraining with periodic zero-shot evaluation, checkpoints and
exact resume (`pretrain`). Above `rbfm.fb` (the algorithm) and `rbfm.evaluation`
(the rollouts that select its checkpoints)."""

from rbfm.training.pretrain import PretrainConfig, pretrain

__all__ = ["PretrainConfig", "pretrain"]
