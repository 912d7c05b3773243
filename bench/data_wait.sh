#!/usr/bin/env bash
# How long a training step of the Fashion-MNIST CNN example waits for its batch, with the batch
# prefetched on a worker thread and without (made in the training thread when asked for).
# Run on demand, never as a test:  bench/data_wait.sh [steps (300)] [processes (1)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
procs=${2:-1}
[ -x build/bin/train_fashion_mnist ] || cmake --build build --target train_fashion_mnist accel_cli
for workers in 1 0 1 0; do
  line=$(build/bin/accel launch -n "$procs" build/bin/train_fashion_mnist --max-steps "$steps" \
    --workers "$workers" | grep "step $steps/")
  echo "workers=$workers processes=$procs: ${line#*loss }"
done
