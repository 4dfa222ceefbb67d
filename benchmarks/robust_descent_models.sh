#!/bin/bash
# docs/inference.md, "Measured 2026-11-25 (exact objectives)": the default solvers on the
# five shipped models, then the long reference runs; resumable (a finished run leaves
# runs/robust_exact/NAME.done). Rows in docs/inference/exact/, table by
# `python benchmarks/robust_descent_table.py`.
cd "$(dirname "$0")/.."
M="expert/- fbil/default rbfm-light/default rbfm-heavy/default"
run() { # ck task noise seed name methods
  out=docs/inference/exact/$5_s$4.csv
  done_mark=runs/robust_exact/$5_s$4.done  # finished runs are skipped when rerun
  [ -f "$done_mark" ] && return
  mkdir -p runs/robust_exact
  OMP_NUM_THREADS=1 python benchmarks/robust_descent.py --checkpoint $1 --task $2 --noise $3 \
    --seeds $4 --methods $6 --out $out && touch "$done_mark"
}
# Walker RND and quadruped RND are the models measured (the defaults until issue 20's,
# now walker:rnd-v1 and quadruped:rnd-v1).
every_model() { # noise seed source methods: one run per shipped model
  run cheetah run $1 $2 cheetah_$3 "$4"
  run walker:rnd-v1 flip $1 $2 walker_$3 "$4"
  run walker:aps flip $1 $2 walker_aps_$3 "$4"
  run walker:proto flip $1 $2 walker_proto_$3 "$4"
  run quadruped:rnd-v1 jump $1 $2 quadruped_$3 "$4"
}
# Seed 0 of the noisy expert first, then the own expert, then the other seeds; last, the
# two references (noisy expert, seed 0): Adam run long, and the continuation's own
# 500-iteration stages.
every_model 0.3 0 noisy "$M"
every_model 0 0 own "$M"
for seed in 1 2; do every_model 0.3 $seed noisy "$M"; done
every_model 0.3 0 long "fbil/default rbfm-light/long rbfm-heavy/long"
every_model 0.3 0 stages "fbil/default rbfm-light/stages500 rbfm-heavy/stages500"
