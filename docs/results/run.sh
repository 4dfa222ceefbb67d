#!/usr/bin/env bash
# The results grid, stage by stage, into one run directory (docs/results.md; each
# stage's page is docs/results/STAGE/README.md, which a refresh keeps).
#
#   bash docs/results/run.sh                 # every stage, in this order
#   bash docs/results/run.sh q1 eps          # some of them
#   bash docs/results/run.sh shift-quadruped@walk   # one task of a stage
#
# Each stage is a preset of `rbfm experiment` (rbfm.experiments.spec). Cells are
# content-addressed, so a stage reuses every cell an earlier one computed, and a run
# killed at any moment continues where it stopped when this script is run again; a
# stage whose cells are all done only redraws its figures. After each stage its figures,
# tables and rows are copied to docs/results/STAGE/.
set -euo pipefail
# The whole script is one function, read before any of it runs: a file edited while a
# stage runs changes the next run, never the one in progress.
# A stage's committed experts tables, one per line: the whole stage's or one per task.
committed_experts() {
    local found=() f
    for f in "$1"/experts.csv "$1"/*/experts.csv; do
        if [ -f "$f" ]; then found+=("$f"); fi
    done
    if [ ${#found[@]} -eq 0 ]; then
        echo "run.sh: no experts.csv in $1 or its task folders: run that stage first" >&2
        return 1
    fi
    printf '%s\n' "${found[@]}"
}

main() {
    cd "$(dirname "$0")/../.."
    out=${RBFM_GRID_OUT:-runs/experiments/grid}
    workers=${RBFM_GRID_WORKERS:-2}
    # RBFM_GRID_FORGET_STALE=1: compute again the finished cells whose demonstrations the
    # run regenerated with other bits (`rbfm experiment --forget-stale`; else refused).
    forget=()
    if [ "${RBFM_GRID_FORGET_STALE:-0}" = 1 ]; then forget=(--forget-stale); fi
    stages=("$@")
    if [ ${#stages[@]} -eq 0 ]; then
        stages=(q1 eps datasize q2 sources certify grid-walker grid-quadruped grid-cheetah independent grid
            adapt-fbil-cheetah adapt-fbil-walker adapt-fbil-quadruped adapt-cone-cheetah
            shift-fbil-cheetah shift-own-fbil-cheetah adapt-cone-cheetah-rand-ctx adapt-cone-walker
            adapt-cone-quadruped shift-paper-fbil-walker adapt-cone-s2-walker shift-fbil-quadruped
            shift-fbil-walker shift-own-fbil-walker shift-paper-walker shift-paper-cheetah
            shift-own-paper-cheetah shift-cheetah shift-walker shift-quadruped@stand
            shift-quadruped@walk shift-quadruped@run shift-quadruped@jump adapt-walker@stand
            adapt-walker@walk adapt-walker@run adapt-walker@flip adapt-cheetah@walk adapt-cheetah@run
            adapt-cheetah@walk_backward adapt-cheetah@run_backward adapt-quadruped@stand
            adapt-quadruped@walk adapt-quadruped@run adapt-quadruped@jump adapt-independent
            adapt-cone-walker-rand-ctx external q1-walker external-walker-default@walk
            external-walker-default@stand external-walker-default@run external-walker-default@flip
            adapt-walker-default@walk adapt-walker-default@stand adapt-walker-default@run
            adapt-walker-default@flip grid-walker-default@walk grid-walker-default@stand
            grid-walker-default@run)
    fi
    # `external` is its three domains' stages (a planner ceiling costs minutes an episode).
    expanded=()
    for item in "${stages[@]}"; do
        if [ "$item" = external ]; then expanded+=(external-cheetah external-walker external-quadruped)
        else expanded+=("$item"); fi
    done
    stages=("${expanded[@]}")
    # Stages read as ratios to one reference configuration (python -m rbfm.reporting.goals).
    declare -A reference=([adapt-fbil-cheetah]=rnd-v1:fbil [adapt-fbil-walker]=rnd:fbil
        [adapt-fbil-quadruped]=rnd-v2:fbil [adapt-cone-cheetah]=rnd-v1:fbil [adapt-cone-walker]=rnd:fbil
        [adapt-cone-quadruped]=rnd-v2:fbil [shift-fbil-cheetah]=rnd-v1:fbil
        [shift-own-fbil-cheetah]=rnd-v1:fbil [shift-own-fbil-quadruped]=rnd-v2:fbil
        [shift-fbil-quadruped]=rnd-v2:fbil [adapt-cone-cheetah-rand-ctx]=rnd-rand-ctx:fbil
        [shift-paper-fbil-walker]=rnd:fbil [adapt-cone-s2-walker]=rnd:fbil [shift-fbil-walker]=rnd:fbil
        [shift-own-fbil-walker]=rnd:fbil [shift-paper-walker]=rnd-nominal-paper:fbil
        [shift-paper-cheetah]=rnd-nominal-paper:fbil [shift-own-paper-cheetah]=rnd-nominal-paper:fbil
        [shift-cheetah]=rnd-v1:fbil [shift-quadruped]=rnd-v2:fbil [shift-walker]=rnd:fbil
        [adapt-walker]=rnd:fbil [adapt-quadruped]=rnd:fbil [adapt-cheetah]=rnd:fbil
        [adapt-independent]=rnd:fbil [adapt-cone-walker-rand-ctx]=rnd-rand-ctx:fbil
        [adapt-cone-quadruped-rand-ctx]=rnd-rand-ctx:fbil [external-cheetah]=rnd:fbil
        [external-walker]=rnd:fbil [external-quadruped]=rnd:fbil [q1-walker]=rnd:fbil
        [external-walker-default]=rnd:fbil [adapt-walker-default]=rnd:fbil
        [grid-walker-default]=rnd:fbil)
    # A stage that plans no ceiling reads the planner's from the stage that did, in the same
    # cells (the planner inside the simulator does not depend on the imitating model).
    declare -A ceilings=([external-walker-default]=external-walker)
    # STAGE@TASK runs one task of a stage (`rbfm experiment STAGE --tasks TASK`, whose cells are
    # the stage's) into docs/results/STAGE/TASK/: a stage too long to finish at one sitting
    # completes a task at a time, and docs/results/STAGE/goals.md pools the tasks done so far.
    for item in "${stages[@]}"; do
        stage=${item%@*}
        task=""
        if [ "$item" != "$stage" ]; then task=${item#*@}; fi
        rbfm experiment "$stage" ${task:+--tasks "$task"} --out "$out" --workers "$workers" \
            --figures "${forget[@]}"
        dest="docs/results/$stage${task:+/$task}"
        # A refreshed stage replaces its files and keeps its page (README.md, written by hand).
        mkdir -p "$dest"
        find "$dest" -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
        cp -r "$out/figures/." "$dest/"
        cp "$out/results.csv" "$dest/"
        if [ -f "$out/experts.csv" ] && [ "$(wc -l < "$out/experts.csv")" -gt 1 ]; then
            cp "$out/experts.csv" "$dest/"
        fi
        if [ -n "${reference[$stage]:-}" ]; then
            # A demonstrator from outside the model is read as shares of its return too: its
            # tasks' returns differ in scale (rbfm.reporting.goals --shares).
            shares=()
            if [[ $stage == external-* ]]; then
                if [ -n "${ceilings[$stage]:-}" ]; then
                    found=$(committed_experts "docs/results/${ceilings[$stage]}")
                    mapfile -t found <<< "$found"
                    shares=(--shares "${found[@]}")
                else shares=(--shares "$out/experts.csv"); fi
            fi
            python -m rbfm.reporting.goals "$out/results.csv" --reference "${reference[$stage]}" \
                --figure "$dest/goals.png" "${shares[@]}" > "$dest/goals.md"
            # The adaptation searches, where the stage has any: what each cost and moved.
            if [ -f "$out/adaptations.csv" ]; then
                cp "$out/adaptations.csv" "$dest/"
                python -m rbfm.reporting.searches "$dest/adaptations.csv" > "$dest/searches.md"
            fi
            if [ -n "$task" ]; then
                if [ ${#shares[@]} -gt 0 ]; then
                    found=$(committed_experts "docs/results/${ceilings[$stage]:-$stage}")
                    mapfile -t found <<< "$found"
                    shares=(--shares "${found[@]}")
                fi
                python -m rbfm.reporting.goals docs/results/"$stage"/*/results.csv \
                    --reference "${reference[$stage]}" --figure "docs/results/$stage/goals.png" \
                    "${shares[@]}" > "docs/results/$stage/goals.md"
                if [ -f "$dest/adaptations.csv" ]; then
                    python -m rbfm.reporting.searches docs/results/"$stage"/*/adaptations.csv \
                        > "docs/results/$stage/searches.md"
                fi
            fi
        fi
        # One copy per figure: `grid` keeps only the figures its per-domain stages do not have
        # (byte-identical ones are drawn from the same rows).
        if [ "$stage" = grid ]; then
            for f in $(cd "$dest" && find . -name '*.png'); do
                for part in grid-walker grid-quadruped grid-cheetah; do
                    if cmp -s "$dest/$f" "docs/results/$part/$f"; then rm "$dest/$f"; break; fi
                done
            done
        fi
        # A stage's certificates.csv holds its own plan's certificates: only `certify` has any.
        if [ "$(wc -l < "$out/certificates.csv")" -gt 1 ]; then
            cp "$out/certificates.csv" "$dest/"
        fi
    done
}
main "$@"; exit
