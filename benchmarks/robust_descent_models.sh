#!/bin/bash
# docs/inference.md, "Measured 2026-11-25": the default solvers on the five shipped
# models; resumable (a finished run leaves runs/robust_descent/NAME.done).
cd "$(dirname "$0")/.."
M="expert/- fbil/default rbfm-light/default rbfm-heavy/default"
run() { # ck task noise seed name
  out=docs/inference/converged/$5_s$4.csv
  done_mark=runs/robust_descent/$5_s$4.done  # finished runs are skipped when rerun
  [ -f "$done_mark" ] && return
  mkdir -p runs/robust_descent
  OMP_NUM_THREADS=1 python benchmarks/robust_descent.py --checkpoint $1 --task $2 --noise $3 --seeds $4 --methods $M --out $out && touch "$done_mark"
}
every_model() { # noise seed source: one run per shipped model
  run cheetah run $1 $2 cheetah_$3
  run walker flip $1 $2 walker_$3
  run walker:aps flip $1 $2 walker_aps_$3
  run walker:proto flip $1 $2 walker_proto_$3
  run quadruped jump $1 $2 quadruped_$3
}
# Seed 0 of the noisy expert first, then the own expert, then the other seeds.
every_model 0.3 0 noisy
every_model 0 0 own
for seed in 1 2; do every_model 0.3 $seed noisy; done
