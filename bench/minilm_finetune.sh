#!/usr/bin/env bash
# The MiniLM example's three runs side by side (docs/pretrained.md keeps the figures): the
# pretrained encoder fine-tuned with a new head, a linear probe on the frozen encoder, and the same
# network from a random initialisation, each for the same steps on 2 processes; then the held-out
# accuracy and the time of each. About 20 minutes on 2 cores.
# Usage: bench/minilm_finetune.sh [--build DIR] [--steps N] [extra minilm_cpp options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
steps=300
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) break ;;
  esac
done
model=build/minilm/model
[ -f "$model/model.safetensors" ] || { echo "no $model: run tools/fetch_minilm.sh" >&2; exit 1; }
printf '| mode | held-out accuracy | seconds |\n|---|---|---|\n'
for mode in finetune probe scratch; do
  start=$(date +%s.%N)
  line=$("$build/bin/accel" launch -n 2 "$build/bin/minilm_cpp" finetune "$model" --mode "$mode" \
    --steps "$steps" --batch-size 8 "$@" 2>&1 | grep '^held-out accuracy')
  end=$(date +%s.%N)
  printf '| %s | %s | %.0f |\n' "$mode" "$(echo "$line" | awk '{print $3}')" \
    "$(echo "$end - $start" | bc)"
done
