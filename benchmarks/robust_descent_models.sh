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
for seed in 0; do
  run cheetah run 0.3 $seed cheetah_noisy
  run walker flip 0.3 $seed walker_noisy
  run walker:aps flip 0.3 $seed walker_aps_noisy
  run walker:proto flip 0.3 $seed walker_proto_noisy
  run quadruped jump 0.3 $seed quadruped_noisy
done
run cheetah run 0 0 cheetah_own
run walker flip 0 0 walker_own
run walker:aps flip 0 0 walker_aps_own
run walker:proto flip 0 0 walker_proto_own
run quadruped jump 0 0 quadruped_own
for seed in 1 2; do
  run cheetah run 0.3 $seed cheetah_noisy
  run walker flip 0.3 $seed walker_noisy
  run walker:aps flip 0.3 $seed walker_aps_noisy
  run walker:proto flip 0.3 $seed walker_proto_noisy
  run quadruped jump 0.3 $seed quadruped_noisy
done
