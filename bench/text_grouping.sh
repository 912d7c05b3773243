#!/usr/bin/env bash
# Length grouping against random batches, in one run: examples/c/train_text (a byte-level
# transformer on Debian's fortunes, ragged samples truncated to 128 bytes) for the same number of
# steps with group_by_length on and off, alternating, `rounds` times, under `accel launch -n
# PROCESSES`. Reports the real (unpadded) bytes per second per process, the share of the batch
# that was padding, and the held-out perplexity after the steps, each run's and the medians, with
# grouped / random as a ratio.
#   bench/text_grouping.sh [steps (150)] [rounds (2)] [processes (2)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-150} rounds=${2:-2} procs=${3:-2}
if [ ! -f build/CMakeCache.txt ]; then
  echo "build/ is not configured: run tools/setup.sh first (README.md)" >&2
  exit 2
fi
cmake --build build --target accel accel_cli train_text >/dev/null
export HF_HOME=$PWD/build/no-hf-home
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for mode in grouped random; do
    flag=$([ "$mode" = random ] && echo --no-grouping || true)
    # shellcheck disable=SC2086  # an empty flag is no argument
    build/bin/accel launch -n "$procs" build/bin/train_text --max-steps "$steps" $flag |
      python3 -c '
import re, sys
for line in sys.stdin:
    m = re.match(r"held-out perplexity ([0-9.]+) .* ([0-9]+) real bytes/s per process, ([0-9]+)% of", line)
    if m:
        print(sys.argv[1], m.group(2), m.group(3), m.group(1))' "$mode" >> "$results"
  done
done
python3 - "$results" "$steps" "$procs" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print(f"train_text, {sys.argv[2]} steps, {sys.argv[3]} processes")
print(f"{'batches':10} {'bytes/s/proc':>14} {'padding %':>10} {'perplexity':>11}")
med = {}
for mode in ("grouped", "random"):
    mine = [r for r in rows if r[0] == mode]
    for r in mine:
        print(f"{mode:10} {float(r[1]):14.0f} {float(r[2]):10.0f} {float(r[3]):11.3f}")
    med[mode] = [statistics.median(float(r[i]) for r in mine) for i in (1, 2, 3)]
    print(f"{mode + ' med':10} {med[mode][0]:14.0f} {med[mode][1]:10.0f} {med[mode][2]:11.3f}")
print(f"grouped / random bytes/s: {med['grouped'][0] / med['random'][0]:.2f}")
PY
