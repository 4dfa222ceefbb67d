#!/usr/bin/env bash
# The paper's imitation protocol on the shipped cpu-preset cheetah model (issues 4-5):
# 200 expert demonstrations per task, 4 drawn per inference seed, 5 seeds, 100
# evaluation episodes per seed; FB-IL, RBFM-Light and RBFM-Heavy on all four tasks,
# DRBC and BE-DROIL (cpu presets) on walk; then the three cheetah perturbation sweeps
# on walk (20 episodes per seed and level).
#
#   bash experiments/cheetah_cpu.sh            # everything (about 2 h on 2 cores)
#   STAGES="demos infer" bash experiments/cheetah_cpu.sh
#
# Every step skips outputs that already exist, so an interrupted run resumes by
# running the same command again. Two jobs run at once with one thread each.
set -euo pipefail

CKPT=${CKPT:-src/rbfm/assets/cheetah_cpu}
OUT=${OUT:-runs/cheetah-cpu-imitation}
SEEDS=${SEEDS:-5}
EPISODES=${EPISODES:-100}
SWEEP_EPISODES=${SWEEP_EPISODES:-20}  # per seed and level: 5 x 20 = 100 per method
JOBS=${JOBS:-2}
STAGES=${STAGES:-demos infer baselines nominal sweeps}
TASKS=(walk run walk_backward run_backward)
BASELINE_TASK=walk
FAMILIES=(joint_friction actuator_strength range_of_motion)
export OMP_NUM_THREADS=1

mkdir -p "$OUT"/{demos,z,logs}

run_jobs() {  # one shell command per line on stdin, $JOBS at a time
    xargs -P "$JOBS" -I{} bash -c {}
}

has() { [[ " $STAGES " == *" $1 "* ]]; }

if has demos; then
    for task in "${TASKS[@]}"; do
        f="$OUT/demos/$task.npz"
        [[ -f $f ]] || echo "rbfm demos --checkpoint $CKPT --task $task --episodes 200 --out $f > $OUT/logs/demos-$task.log 2>&1"
    done | run_jobs
fi

if has infer; then
    for seed in $(seq 0 $((SEEDS - 1))); do
        for task in "${TASKS[@]}"; do
            mkdir -p "$OUT/z/$task"
            for method in fbil rbfm-light rbfm-heavy; do
                f="$OUT/z/$task/$method-$seed.json"
                [[ -f $f ]] || echo "rbfm infer --checkpoint $CKPT --demos $OUT/demos/$task.npz --method $method --seed $seed --out $f > $OUT/logs/infer-$task-$method-$seed.log 2>&1"
            done
        done
    done | run_jobs
fi

if has baselines; then
    for seed in $(seq 0 $((SEEDS - 1))); do
        for method in drbc bedroil; do
            f="$OUT/z/$BASELINE_TASK/$method-$seed"
            [[ -f $f.json ]] || echo "rbfm infer --demos $OUT/demos/$BASELINE_TASK.npz --method $method --preset cpu --seed $seed --out $f > $OUT/logs/infer-$BASELINE_TASK-$method-$seed.log 2>&1"
        done
    done | run_jobs
fi

if has nominal; then
    for task in "${TASKS[@]}"; do
        f="$OUT/nominal-$task.csv"
        [[ -f $f ]] || echo "rbfm evaluate --checkpoint $CKPT --z $OUT/z/$task/*.json --task $task --episodes $EPISODES --out $f > $OUT/logs/nominal-$task.log 2>&1"
    done | run_jobs
fi

if has sweeps; then
    for family in "${FAMILIES[@]}"; do
        f="$OUT/sweep-$BASELINE_TASK-$family.csv"
        [[ -f $f ]] || echo "rbfm evaluate --checkpoint $CKPT --z $OUT/z/$BASELINE_TASK/*.json --task $BASELINE_TASK --perturbation $family --episodes $SWEEP_EPISODES --out $f > $OUT/logs/sweep-$family.log 2>&1"
    done | run_jobs
fi
echo "done: $OUT"
