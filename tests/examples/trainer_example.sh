#!/usr/bin/env bash
# The Trainer's Fashion-MNIST example on 2 processes, then resumed (examples/c/
# train_fashion_mnist_trainer.c, and its Go and Julia twins). Usage:
#   trainer_example.sh ACCEL_CLI PROGRAM STEPS ACCURACY_REGEX [PROGRAM_ARGS...]
# PROGRAM_ARGS go between PROGRAM and the options (julia --project=DIR SCRIPT.jl).
# Run 1 trains STEPS steps: it must print a test accuracy matching ACCURACY_REGEX and leave
# checkpoint-STEPS with trainer_state.json at that step (its epoch's end, cut by max_steps: an
# evaluation and a save). Run 2, --resume with the same options, must resume from that checkpoint
# (latest), train nothing more, load the best model back and print the same accuracy.
set -uo pipefail
cli=$1 program=$2 steps=$3 bar=$4
shift 4
command=("$program" "$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
args=(--max-steps "$steps" --batch-size 64 --output-dir "$dir/out")
first=$("$cli" launch -n 2 "${command[@]}" "${args[@]}" 2>&1) || { printf '%s\n' "$first"; fail "run 1 failed"; }
printf '%s\n' "$first"
line=$(printf '%s\n' "$first" | grep -E "^test accuracy" | head -1)
printf '%s\n' "$line" | grep -Eq "^test accuracy $bar" || fail "run 1: no 'test accuracy $bar'"
state="$dir/out/checkpoint-$steps/trainer_state.json"
[ -f "$state" ] || fail "no $state"
grep -q "\"global_step\": $steps," "$state" || fail "$state is not at step $steps"
grep -q '"eval_accuracy"' "$state" || fail "$state has no evaluation"
second=$("$cli" launch -n 2 "${command[@]}" "${args[@]}" --resume 2>&1) || { printf '%s\n' "$second"; fail "run 2 (--resume) failed"; }
printf '%s\n' "$second"
printf '%s\n' "$second" | grep -q "resumed from '$dir/out/checkpoint-$steps' at step $steps" ||
  fail "run 2 did not resume from checkpoint-$steps"
printf '%s\n' "$second" | grep -qF "$line" || fail "run 2's accuracy is not run 1's: $line"
echo "PASS"
