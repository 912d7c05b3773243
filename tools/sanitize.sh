#!/usr/bin/env bash
# Sanitizer runs of libaccel's own code. Usage: tools/sanitize.sh [asan|tsan|fuzz|all] (default all)
#
#   asan  build-asan/: every target built with AddressSanitizer + UndefinedBehaviorSanitizer
#         (-DACCEL_SANITIZE=address, see cmake/Sanitizers.cmake), then the ctest suite with
#         LeakSanitizer on: every test but the `slow` tier (SLOW) and those ASAN_SKIP names.
#   tsan  build-tsan/: every target built with ThreadSanitizer, then the threaded tests (TSAN_TESTS
#         below says which and why), with LLVM's OpenMP runtime and its Archer tool in place of
#         libgomp (see tsan_openmp_env).
#   fuzz  tests/fuzz/run_fuzzers.sh, FUZZ_SECONDS (default 60) per target; it installs clang-14
#         and libclang-rt-14-dev itself when absent.
#   all   the three, in that order; each runs even when an earlier one failed.
#
# Both builds are RelWithDebInfo with -O1 -g1 (SANITIZE_OPT overrides -O1): measured here, -O1
# builds faster than -O2 while the suites' time is LibTorch's own, uninstrumented code either way;
# -g1 (line tables: every report still names function, file and line) compiles ~30 % faster than -g.
#
# Reports: ASan, LSan and TSan write theirs to files (log_path) under build-*/sanitizer-logs/, so a
# report from any process counts, including a rank started by `accel launch` or a process whose
# exit code a test expects to be non-zero. UBSan's go to the test's output (see check_reports). The
# run fails (non-zero exit) when a test fails OR any report was written; the reports are printed at
# the end, with how often each suppression matched. Before each suite a planted bug
# (tests/sanitizers/canary.c) must be reported, or the run fails: options that blind a sanitizer
# do not pass unnoticed.
#
# Suppressions live in tests/sanitizers/*.supp (README.md there has the rule and the reasons). They
# may only name reports inside LibTorch, Gloo, OpenMP/OpenBLAS or the C/C++ runtime, never
# libaccel's own code (src/, tools/, tests/).
#
# Environment: JOBS (build parallelism, default 2), SANITIZE_OPT (default -O1), CTEST_ARGS (extra
# ctest arguments, e.g. "-R Data"), FUZZ_SECONDS (default 60).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
supp=$root/tests/sanitizers
jobs=${JOBS:-2}
mode=${1:-all}

# The threaded tests, as a ctest regex (anchored at the start of the test name):
#   Data.*        dataloader worker threads (prefetch, callback datasets on workers, errors)
#   ShmReduce.*   the shared-memory all-reduce's futex protocol (forked ranks; TSan checks each
#                 process's own threads only, it cannot follow another process's accesses)
#   Net*          the TCP transport's mesh (its listener thread), ring and sequencer thread, with
#                 threads as ranks
#   MultiProcess.* ranks with the sequencer's thread (and Gloo's, under collective_transport
#                 gloo), gradient hooks and bucketed all-reduces, the
#                 launcher's supervisor and signal forwarding, save/load across ranks
#   Train.*       autograd (hooks, accumulation, autocast) and LibTorch's intra-op pool
#   CApi.(FreeFromAnotherThread|ErrorMessageIsPerThread|ThreadSettings...) handles and errors
#                 crossing threads, thread-count settings
#   Lifetimes.*, Threads.*  the thread rules of accel.h: dataloaders freed or closed while their
#                 workers are inside callbacks, release callbacks, one training family called from
#                 many threads, families joined by accel_prepare, frees on finalizer threads
#   Stream.*, Ragged.*, TextData.*  a stream's reading thread (prefetch, failures, resume), ragged
#                 callbacks on workers, dispatch across ranks, a trigger raised from another thread
#                 while the main one waits in a collective, join_uneven_inputs
#   StoreServer*, security.*  the rendezvous store's thread: clients, waiters, strangers refused
#                 while the job's ranks use it (rank 0 serves it in every multi-process test too)
#   example.*     but example.cpp_*: a user's programs: every collective on two ranks; training
#                 with a prefetching worker thread on one rank (40 steps) and on two ranks with
#                 gradient synchronisation (60 steps: a sanitizer build's short course, see
#                 tests/examples/CMakeLists.txt; the two-epoch run is `slow`, see SLOW). Not
#                 the C++ example: its host-model paths (hooks on a module's own leaves, the forward
#                 scope) run on two ranks in MultiProcess.HostModule*, at a fraction of the time.
#                 Nor example.train_fashion_mnist_2proc_tensorboard: the same program, its trackers
#                 write on the main thread only, and its harness is a Python (TSan's LD_PRELOAD of
#                 libomp and Archer would reach the uninstrumented interpreter).
# Not the rest: single-threaded logic (Config, Shard, Schedule, ...), the C header and symbol
# checks, the install tests (the consumers are not instrumented) and bench.quick_smoke (a
# benchmark harness, its programs are those of the examples).
TSAN_TESTS='^(Data\.|Stream\.|StoreServer(Test)?\.|Net(Ring|Mesh|Sequencer)\.|security\.|Ragged\.|TextData\.|ShmReduce\.|MultiProcess\.|Train\.|Lifetimes\.|Threads\.|CApi\.(FreeFromAnotherThread|ErrorMessageIsPerThread|ThreadSettingsReachLibTorchAndOpenBlas)$|example\.(collectives|train_fashion_mnist_(1proc|2proc_learns)|cuda_choice|store_socket))'
# TSAN_TARGETS: what those tests run (mp_test brings the programs it starts; accel_cli brings
# accel-selftest), built alone: the rest of the project (the pure layer's own tests, the C++
# example, the benchmarks, ...) would cost build time no TSan test uses. A test whose program
# were missing fails; it is never skipped.
TSAN_TARGETS='accel accel_cli mp_test data_test threads_test train_test unit_tests capi_test collectives train_fashion_mnist guarded_program late_peer'

declare -A results=()
say() { printf '\n== %s\n' "$*"; }

# Seconds since the epoch, with fractions.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }

# Configures build dir $1 with the cmake arguments after it and builds BUILD_TARGETS (a list of
# target names; empty: every target).
configure_and_build() {  # dir, extra cmake arguments...
  local dir=$1
  shift
  local t0
  t0=$(now)
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja "$@" > "$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; return 1; }
  cmake --build "$dir" -j"$jobs" ${BUILD_TARGETS:+--target $BUILD_TARGETS} || return 1
  echo "build of $dir: $(elapsed "$t0") s"
}

# Prints every sanitizer report of a run and returns 1 when there is at least one: the report files
# in $1 (log_path), and reports that went to a test's output instead. GCC's UBSan runtime is a
# library of its own beside ASan's and ignores log_path when ASan is present, so its reports reach
# only stderr: ctest's LastTest.log (every test's output, copied into $1 as ctest-*.txt) has them.
# A file holding only suppression statistics is not a report.
check_reports() {
  local logs=$1 found=0 f
  local pattern='^SUMMARY: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|ThreadSanitizer)|^WARNING: ThreadSanitizer|runtime error:|^==[0-9]+==ERROR: '
  for f in "$logs"/*; do
    [ -s "$f" ] || continue
    case $f in
      */ctest-*.txt)
        if grep -qE "$pattern" "$f"; then
          found=$((found + 1))
          echo "---- sanitizer output inside test output ($f):"
          # Each report with the test it belongs to.
          awk -v pat="$pattern" '/^[0-9]+\/[0-9]+ Testing: / { test = $0 }
            $0 ~ pat { if (test != shown) { print "  in " test; shown = test } print; n = 30; next }
            n > 0 && /^    #[0-9]+ / { print; n--; next } { n = 0 }' "$f"
        fi
        ;;
      *)
        if grep -qE "$pattern" "$f"; then
          found=$((found + 1))
          echo "---- $f"
          cat "$f"
        fi
        ;;
    esac
  done
  summarize_suppressions "$logs"
  if [ "$found" -gt 0 ]; then
    echo "$found file(s) with sanitizer reports in $logs"
    return 1
  fi
  echo "no sanitizer reports in $logs"
}

# Totals of suppression matches over every process: LSan's "Suppressions used" tables and TSan's
# "ThreadSanitizer: Matched N suppressions" lists.
summarize_suppressions() {
  local logs=$1
  cat "$logs"/* 2>/dev/null | awk '
    /^Suppressions used:/ { lsan = 1; next }
    lsan && /^ *count/ { next }
    lsan && /^ *[0-9]+ +[0-9]+ +[^ ]+/ { n["leak " $3] += $1; next }
    lsan { lsan = 0 }
    /ThreadSanitizer: Matched [0-9]+ suppressions/ { tsan = 1; next }
    tsan && /^ *[0-9]+ [a-z_]+:/ { n[$2] += $1; next }
    tsan { tsan = 0 }
    END { for (k in n) printf "  suppression %-60s matched %d\n", k, n[k] }' | sort
}

# Runs ctest in build dir $1 with the arguments after $2; copies every test's output (LastTest.log)
# to $2/ctest-$3.txt. Returns 1 when a test failed.
ctest_step() {
  local dir=$1 logs=$2 name=$3 rc=0
  shift 3
  # The costs CI measured for this sanitizer, so ctest starts the long tests first (tools/test.sh).
  local costs=$dir/Testing/Temporary/CTestCostData.txt
  [ -f "$costs" ] || { mkdir -p "${costs%/*}" && cp "tests/ctest_costs/${dir#build-}.txt" "$costs"; }
  # As tools/test.sh: no user configuration may leak into the tests.
  HF_HOME="$root/$dir/no-hf-home" ctest --test-dir "$dir" --output-on-failure -j2 "$@" \
    ${CTEST_ARGS:-} || rc=1
  cp "$dir/Testing/Temporary/LastTest.log" "$logs/ctest-$name.txt" 2>/dev/null
  return $rc
}

# Builds tests/sanitizers/canary.c against build dir $1's libaccel with -fsanitize=$2, runs it in
# mode $3 with the sanitizer options in the environment (their log_path moved aside), and checks
# that the planted bug was reported (pattern $4). Returns 1 when it was not.
canary() {
  local dir=$1 flags=$2 what=$3 pattern=$4 out=$root/$1/canary
  rm -rf "$out" && mkdir -p "$out"
  gcc -std=c99 -O1 -g -fno-omit-frame-pointer -fsanitize="$flags" -Iinclude \
    tests/sanitizers/canary.c -L"$dir/lib" -laccel -Wl,-rpath,"$root/$dir/lib" -o "$out/canary" ||
    return 1
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:log_path=$out/report" TSAN_OPTIONS="${TSAN_OPTIONS:-}:log_path=$out/report" \
    HF_HOME="$root/$dir/no-hf-home" "$out/canary" "$what" > "$out/output.txt" 2>&1
  if cat "$out"/report* 2>/dev/null | grep -qE "$pattern"; then
    echo "canary ($what): reported, as it must be"
  else
    echo "canary ($what): NOT reported: these sanitizer options cannot see bugs in libaccel's threads"
    cat "$out/output.txt"
    return 1
  fi
}

# Tests that cannot mean anything under ASan, skipped there (and named in the output):
#   MallocTuning.FreedStepMemoryIsReused  checks glibc's mallopt and page-fault counts; ASan
#                                          replaces malloc (its mallopt refuses every setting).
#   MultiProcess.RanksAlreadyStartedAreStoppedWhenALaterRankCannotStart  runs the launcher with
#                                          its file descriptors exhausted on purpose (ulimit -n);
#                                          UBSan's vptr check probes memory through a pipe, gets
#                                          EMFILE and reports every virtual call as a bad object.
#   faults.suite                          minutes of real faults on deadlines of a few seconds;
#                                          under ASan's slowdown the deadlines, not our code, fail.
#   cluster.*                             the same library paths as the multi-process tests, run
#                                          by torchrun, mpirun, srun and in namespaces; the engines
#                                          (Python, Open MPI, SLURM daemons) are not instrumented.
#   data.accelerate_differential          its time is Python Accelerate's on real processes (not
#                                          instrumented); the rules it compares run instrumented in
#                                          unit_tests, data_test and the TextData.* runs.
#   example.text_lm_*                     a transformer's training (LibTorch's time, uninstrumented);
#                                          libaccel's paths in it (ragged callbacks on a worker,
#                                          padding, grouping, split, gather) run in Ragged.*,
#                                          Stream.*, TextInference.* and TextData.*, which ASan runs.
#   step_tools.accelerate_differential    its time is Python Accelerate's and torch.profiler's; the
#                                          batch-size search and the profiler it drives run
#                                          instrumented in FindBatchSize.*, Profiler.* and CppWraps.*.
#   cli.accelerate_roundtrip              its time is Python Accelerate's (~30 s); the config reader
#                                          and writer it drives run instrumented in Config.* and
#                                          cli.config_questionnaire.
#   bench.quick_smoke                     a smoke run of the benchmark harness (serial, ~33 s under
#                                          ASan); it measures nothing, and its programs' library
#                                          calls are the examples' and the tests'.
#   example.train_fashion_mnist_2proc_tensorboard  example.train_fashion_mnist_2proc_learns's
#                                          program again (~26 s under ASan), with every tracker
#                                          on; the trackers' writers run instrumented in
#                                          Trackers.* and MultiProcess.Logger*.
#   example.minilm_2proc_learns, example.minilm_2x8_equals_1x16  the MiniLM example's training
#                                          runs (~20 s each of LibTorch's arithmetic); its loading
#                                          and tokenising run instrumented in
#                                          example.minilm_embed_*, its stage-3 step in
#                                          example.minilm_zero3_equals_stage0.
ASAN_SKIP='^(MallocTuning\.FreedStepMemoryIsReused|MultiProcess\.RanksAlreadyStartedAreStoppedWhenALaterRankCannotStart|faults\.suite|cluster\..*|data\.accelerate_differential|step_tools\.accelerate_differential|example\.text_lm_.*|example\.train_fashion_mnist_2proc_tensorboard|example\.minilm_(2proc_learns|2x8_equals_1x16)|cli\.accelerate_roundtrip|bench\.quick_smoke)$'
# Label `slow` (the two-epoch accuracy bars, tools/test.sh --all): not repeated under either
# sanitizer. The same programs, code paths and threads run in the 300-step learning checks
# (example.train_fashion_mnist_2proc_learns); a second epoch adds minutes of the same
# interleavings under the sanitizers' slowdown (the two-epoch run alone took ~200 s under TSan).
SLOW='^slow$'
# Tests that preload a shim into the launcher or the ranks (LD_PRELOAD ahead of the ASan runtime,
# which ASan refuses unless verify_asan_link_order=0): run in a step of their own with that option.
ASAN_PRELOADING='^(MultiProcess\.ForkFailureFailsTheLaunchAndLeavesNoRankBehind|security\.strangers_at_a_running_job)$'

# -O1 -g1 for both sanitizer builds (see the header and README.md in tests/sanitizers/; the tests'
# own C++ is -O0 in every build, tests/CMakeLists.txt). The bindings' tests are left to the plain
# suite: their programs (cargo's) are not instrumented and would need the sanitizer runtime
# preloaded, and they test the binding, not libaccel's threads. Nor are the benchmark programs
# built: no sanitizer test runs them (bench.quick_smoke is skipped under ASan, not in TSAN_TESTS).
sanitizer_build() {  # dir, sanitizer
  configure_and_build "$1" -DACCEL_SANITIZE="$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DACCEL_BUILD_BINDING_TESTS=OFF -DACCEL_BUILD_BENCH=OFF \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=${SANITIZE_OPT:--O1} -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=${SANITIZE_OPT:--O1} -g1 -DNDEBUG"
}

run_asan() {
  local dir=build-asan logs=$root/build-asan/sanitizer-logs rc=0 t0
  say "AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer ($dir)"
  mkdir -p "$dir"
  sanitizer_build "$dir" address || return 1
  rm -rf "$logs" && mkdir -p "$logs"
  # halt_on_error: the first report ends the process, so its test fails; the report goes to a
  # file (ASan, LSan) or to the test's output (UBSan, see check_reports).
  # detect_stack_use_after_return: GCC builds it in as a run-time choice; on here.
  # LSan: on; the ranks' and programs' leaks at exit are reports like any other.
  export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:print_stacktrace=1:detect_leaks=1:\
check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:\
strict_string_checks=1:suppressions=$supp/asan.supp:log_path=$logs/asan"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=1:report_objects=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:report_error_type=1:\
suppressions=$supp/ubsan.supp"
  canary "$dir" address,undefined overflow 'heap-buffer-overflow.*|fill_overflow .*canary.c' || return 1
  echo "skipped under ASan: $ASAN_SKIP"
  t0=$(now)
  ctest_step "$dir" "$logs" main -E "$ASAN_SKIP|$ASAN_PRELOADING|^install\." -LE "$SLOW" || rc=1
  ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" \
    ctest_step "$dir" "$logs" preloading -R "$ASAN_PRELOADING" || rc=1
  # The install tests build their consumers as a user does, without -fsanitize, so the ASan runtime
  # is loaded as a dependency of libaccel.so instead of first (verify_asan_link_order=0 lets it).
  # malloc then stays glibc's in part of the process, and LSan, which cannot scan glibc's heap,
  # reports objects only glibc-allocated memory points to: leak checking is off for them alone.
  ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0:detect_leaks=0" \
    ctest_step "$dir" "$logs" install -R '^install\.' || rc=1
  echo "tests in $dir: $(elapsed "$t0") s"
  check_reports "$logs" || rc=1
  unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
  return $rc
}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Installs Debian packages that are missing (sudo when not root, as tools/setup.sh).
need_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "sanitize: installing ${missing[*]}"
  as_root apt-get update &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "${missing[@]}"
}

# LibTorch and OpenBLAS run their parallel regions on libgomp, which is not instrumented and
# synchronises its team with futexes TSan cannot see: every hand-off of a buffer to an OpenMP
# worker is then reported as a race (see tests/sanitizers/README.md). LLVM's OpenMP runtime
# implements libgomp's ABI (GOMP_* with the same symbol versions), and its Archer tool tells TSan
# about every OpenMP barrier, task and lock. So the TSan run preloads libomp in place of libgomp
# and loads Archer: the same programs, the same number of OpenMP threads, races visible, and no
# suppression for libgomp.
tsan_openmp_env() {
  local lib=/usr/lib/llvm-14/lib
  if [ ! -e "$lib/libomp.so.5" ] || [ ! -e "$lib/libarcher.so" ]; then
    need_packages libomp5-14 libomp-14-dev || return 1
  fi
  TSAN_LD_PRELOAD=$lib/libomp.so.5
  TSAN_OMP_TOOL=$lib/libarcher.so
}

run_tsan() {
  local dir=build-tsan logs=$root/build-tsan/sanitizer-logs rc=0 t0
  say "ThreadSanitizer ($dir), tests matching $TSAN_TESTS"
  mkdir -p "$dir"
  BUILD_TARGETS=$TSAN_TARGETS sanitizer_build "$dir" thread || return 1
  rm -rf "$logs" && mkdir -p "$logs"
  # halt_on_error: a race ends the process, so its test fails. second_deadlock_stack: both stacks
  # of a lock-order inversion. ignore_noninstrumented_modules: the accesses that interceptors
  # (free, operator delete, memcpy, pthread_cond_destroy, ...) make on behalf of code TSan did not
  # instrument (LibTorch, Gloo, libomp) are not checked; their synchronisation still is. Without it
  # every object LibTorch frees after a reference count drop in one of its own threads is a report,
  # because the count's atomics are in uninstrumented code (tests/sanitizers/README.md). Races
  # between threads running our code, inside LibTorch's threads included, are reported (canary).
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:print_suppressions=1:\
history_size=4:ignore_noninstrumented_modules=1:suppressions=$supp/tsan.supp:log_path=$logs/tsan"
  tsan_openmp_env || return 1
  LD_PRELOAD=$TSAN_LD_PRELOAD OMP_TOOL_LIBRARIES=$TSAN_OMP_TOOL \
    canary "$dir" thread race 'fill_racy .*canary.c' || return 1
  t0=$(now)
  LD_PRELOAD=$TSAN_LD_PRELOAD OMP_TOOL_LIBRARIES=$TSAN_OMP_TOOL \
    ctest_step "$dir" "$logs" main -R "$TSAN_TESTS" -LE "$SLOW" || rc=1
  echo "tests in $dir: $(elapsed "$t0") s"
  check_reports "$logs" || rc=1
  unset TSAN_OPTIONS
  return $rc
}

run_fuzz() {
  say "libFuzzer, ${FUZZ_SECONDS:-60} s per target"
  local t0 rc=0
  t0=$(now)
  tests/fuzz/run_fuzzers.sh "${FUZZ_SECONDS:-60}" || rc=1
  echo "fuzzing: $(elapsed "$t0") s"
  return $rc
}

case $mode in
  asan | tsan | fuzz) modes=("$mode") ;;
  all) modes=(asan tsan fuzz) ;;
  *)
    echo "usage: $0 [asan|tsan|fuzz|all]" >&2
    exit 2
    ;;
esac

status=0
for m in "${modes[@]}"; do
  # A subshell each: one mode's sanitizer options never leak into the next.
  if ("run_$m"); then results[$m]=passed; else results[$m]=FAILED; status=1; fi
done
say "summary"
for m in "${modes[@]}"; do echo "  $m: ${results[$m]}"; done
exit $status
