#!/usr/bin/env bash
# The planner's demonstrations of every task, 8 episodes each at nominal physics, into
# runs/demos/mpc/DOMAIN_TASK.npz (deterministic; a rerun resumes where it stopped). Each
# episode is kept in the grid's planner/ folder, whose `external-*` stages then reuse it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p runs/demos/mpc
for dt in cheetah:run cheetah:walk cheetah:walk_backward cheetah:run_backward walker:walk \
  quadruped:walk quadruped:stand walker:stand walker:run quadruped:run walker:flip quadruped:jump; do
  d=${dt%%:*} t=${dt##*:}
  out=runs/demos/mpc/${d}_${t}.npz
  [ -f "$out" ] || rbfm demos --expert mpc --domain "$d" --task "$t" --episodes 8 \
    --parts "${RBFM_GRID_OUT:-runs/experiments/grid}/planner" --out "$out"
done
