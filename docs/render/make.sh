#!/bin/bash
# One GIF per domain at its strongest perturbation: FB-IL, RBFM-Light, RBFM-Heavy side by side.
# Inference with a bfloat16 actor copy (--bf16), as in docs/results/run.sh: 4-5x faster on
# CPUs with bf16 units, z within ~2% of float32 inference (docs/results.md). Only the
# quadruped GIF (remade 2026-11-26 for the paper-size quadruped) was made with it; the
# cheetah and walker GIFs predate it (float32 inference).
set -e
cd "$(dirname "$0")/../.."
go() { # checkpoint task family level name
  d=runs/render/$5; mkdir -p $d
  [ -f $d/demos.npz ] || rbfm demos --checkpoint $1 --task $2 --episodes 8 --action-noise 0.3 --out $d/demos.npz
  for m in fbil rbfm-light rbfm-heavy; do
    [ -f $d/$m.json ] || rbfm infer --checkpoint $1 --demos $d/demos.npz --method $m --num-demos 4 --bf16 --out $d/$m.json
  done
  rbfm render --checkpoint $1 --task $2 --perturbation $3 --level $4 --steps 400 --every 10 --size 150x200 \
      --z $d/fbil.json $d/rbfm-light.json $d/rbfm-heavy.json --out docs/render/$5.gif
}
mkdir -p docs/render
go cheetah run joint_friction 25 cheetah_run_joint_friction
go walker flip joint_friction 30 walker_flip_joint_friction
go quadruped jump contact_stiffness 0.25 quadruped_jump_contact_stiffness
