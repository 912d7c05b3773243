#!/usr/bin/env bash
# tools/gpu_check.sh - one short, self-limiting check of libaccel's CUDA path on a lent GPU machine
# (for a session lent a GPU, through the device tool; not part of CI, which has no GPU).
#
#   On the device machine (repository root, $OUT set, nothing reachable outside):
#     bash tools/gpu_check.sh                 with `carry: [".cache/gpucheck"]`
#   Here, before the call (no network, a few seconds):
#     tools/gpu_check.sh --bundle             makes .cache/gpucheck/ (gitignored: /.cache/) from this
#                                             machine's Debian packages: yaml-cpp 0.7 (.so, headers,
#                                             and its source as a fallback), nlohmann-json, CLI11,
#                                             gloo headers, zlib headers + libz.so.1, Fashion-MNIST,
#                                             the fortunes texts (~36 MB in all)
#     OUT=/tmp/gpucheck-dry tools/gpu_check.sh --dry
#                                             env.txt, data, dependency choice and the CMake configure
#                                             only (into /tmp), against build/torch/2.11.0
#
# Steps (each timed into $OUT/summary.txt; the script never stops early, and gives up what does not
# fit in GPUCHECK_BUDGET_S, default 495 s, so it ends inside 8.5 minutes):
#   1. $OUT/env.txt: machine, GPU, torch/CUDA/NCCL, compilers, the dev headers the build needs.
#   2. data: Fashion-MNIST and fortunes from the bundle (else generated).
#   3. background: torch's own NCCL (world of 1; two ranks on one GPU) for comparison.
#   4. configure build-gpu/ against the device's torch with ACCEL_CUDA=ON (AUTO if ON cannot be met),
#      then build the library, libaccel_cuda.so, the CLI and the examples (-j16, at most ~300 s);
#      mp_program and a tiny NCCL probe (the plugin's make_nccl_group on a world of 1) beside it.
#   5. checks, most informative first, each under `timeout`, one PASS/FAIL/SKIP line each.
# $OUT gets at most 5 files (the device tool brings back 8): summary.txt, env.txt, build.log,
# checks.txt (every check's log, appended as it ends) and logs.tar.gz (the same logs, one per file).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
MODE=${1:-run}
BUNDLE=${GPUCHECK_BUNDLE:-$ROOT/.cache/gpucheck}

# A header-only Debian package carried for the device: its headers and a CMake config that gives
# its imported target.  header_only_package BUNDLE NAME TARGET HEADER_DIR DEBIAN_PACKAGE
header_only_package() {
  local d=$1 name=$2 target=$3 headers=$4 package=$5
  mkdir -p "$d/$name/include"
  cp -rL "$headers" "$d/$name/include/"
  cat >"$d/$name/${name}Config.cmake" <<EOF
# Debian 12's $package headers (carried by tools/gpu_check.sh).
if(NOT TARGET $target)
  add_library($target INTERFACE IMPORTED)
  set_target_properties($target PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "\${CMAKE_CURRENT_LIST_DIR}/include")
endif()
EOF
}

# ------------------------------------------------------------------------------------------------
# --bundle: what the device lacks, from this (Debian 12) machine. Runs here, never there.
# ------------------------------------------------------------------------------------------------
if [ "$MODE" = --bundle ]; then
  set -e
  rm -rf "$BUNDLE"
  d=$BUNDLE/deps
  mkdir -p "$d/yaml-cpp/include" "$d/yaml-cpp/lib" "$d/nlohmann_json/include" "$d/CLI11/include" \
    "$d/gloo/include" "$d/zlib/include" "$d/zlib/lib" "$BUNDLE/data/fashion-mnist" "$BUNDLE/data/fortunes"
  cp -rL /usr/include/yaml-cpp "$d/yaml-cpp/include/"
  cp -L /usr/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7 "$d/yaml-cpp/lib/libyaml-cpp.so.0.7"
  cat >"$d/yaml-cpp/yaml-cpp-config.cmake" <<'EOF'
# Debian 12's libyaml-cpp 0.7 (carried by tools/gpu_check.sh): the target name libaccel links.
if(NOT TARGET yaml-cpp)
  add_library(yaml-cpp SHARED IMPORTED)
  set_target_properties(yaml-cpp PROPERTIES
    IMPORTED_LOCATION "${CMAKE_CURRENT_LIST_DIR}/lib/libyaml-cpp.so.0.7"
    IMPORTED_SONAME "libyaml-cpp.so.0.7"
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/include")
endif()
set(YAML_CPP_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/include")
set(YAML_CPP_LIBRARIES yaml-cpp)
EOF
  header_only_package "$d" nlohmann_json nlohmann_json::nlohmann_json /usr/include/nlohmann \
    nlohmann-json3-dev
  header_only_package "$d" CLI11 CLI11::CLI11 /usr/include/CLI libcli11-dev
  cp -rL /usr/include/gloo "$d/gloo/include/"
  cp -L /usr/include/zlib.h /usr/include/zconf.h "$d/zlib/include/"
  cp -L /usr/lib/x86_64-linux-gnu/libz.so.1 "$d/zlib/lib/libz.so.1"
  # yaml-cpp 0.7.0's source, built there only if Debian's .so does not load (an older glibc).
  ycpp=/work/.mirror/jbeder+yaml-cpp/repo
  if [ -d "$ycpp" ]; then
    git -C "$ycpp" archive --format=tar.gz --prefix=yaml-cpp-0.7.0/ yaml-cpp-0.7.0 -- \
      . ':!test' ':!docs' ':!util' >"$d/yaml-cpp-0.7.0-src.tar.gz"
  fi
  cp -L /usr/share/datasets/fashion-mnist/*.gz "$BUNDLE/data/fashion-mnist/"
  for f in /usr/share/games/fortunes/*; do
    n=${f##*/}
    case $n in *.dat | *.u8 | ascii-art) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && cp "$f" "$BUNDLE/data/fortunes/"
  done
  dpkg-query -W libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libgloo-dev zlib1g-dev \
    dataset-fashion-mnist fortunes >"$BUNDLE/MANIFEST" 2>/dev/null || true
  du -sh "$BUNDLE"
  exit 0
fi

# ------------------------------------------------------------------------------------------------
# The run (and --dry).
# ------------------------------------------------------------------------------------------------
T0=$SECONDS
BUDGET=${GPUCHECK_BUDGET_S:-495}
OUT=${OUT:-/tmp/gpucheck-out}
W=${GPUCHECK_WORK:-/tmp/gpucheck}
B=${GPUCHECK_BUILD_DIR:-$ROOT/build-gpu}
if [ "$MODE" = --dry ]; then
  B=${GPUCHECK_BUILD_DIR:-/tmp/gpucheck-dry-build}
  : "${GPUCHECK_TORCH_DIR:=$ROOT/build/torch/2.11.0/torch}"
fi
JOBS=${GPUCHECK_JOBS:-16}
MP=$W/mp_program     # tests/mp/mp_program.c, compiled by hand after the build
PROBE=$W/nccl_probe  # the NCCL probe below
mkdir -p "$OUT"
rm -rf "$W"
mkdir -p "$W/logs" "$W/data"
SUMMARY=$OUT/summary.txt
CHECKS=$OUT/checks.txt
ENVF=$OUT/env.txt
BUILDLOG=$OUT/build.log
: >"$SUMMARY"
: >"$CHECKS"
: >"$BUILDLOG"
ulimit -c 0 2>/dev/null
export HF_HOME=$W/no-hf-home # no Accelerate default config of the image leaks in (as the tests)
export PYTHONUNBUFFERED=1

left() { echo $((BUDGET - (SECONDS - T0))); }
note() { echo "$*" | tee -a "$SUMMARY"; }
have() { command -v "$1" >/dev/null 2>&1; }
finalize() {
  [ -n "$FINALIZED" ] && return
  FINALIZED=1
  note "TOTAL $((SECONDS - T0))s (budget ${BUDGET}s)"
  cp "$B/CMakeCache.txt" "$W/logs/" 2>/dev/null
  (cd "$W" && tar -czf "$OUT/logs.tar.gz" logs 2>/dev/null)
  # The device tool brings back files of at most 16 MiB.
  for f in "$BUILDLOG" "$CHECKS"; do
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ]; then
      tail -c 15000000 "$f" >"$f.tmp" && mv "$f.tmp" "$f"
    fi
  done
  echo "===== summary.txt ====="
  cat "$SUMMARY"
}
FINALIZED=
trap finalize EXIT
trap 'note "INTERRUPTED by a signal after $((SECONDS - T0))s"; exit 130' INT TERM

note "libaccel GPU check: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname 2>/dev/null), mode ${MODE}, budget ${BUDGET}s, git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git status --porcelain 2>/dev/null | grep -qv '^??' && echo ' +local changes')"

# ------------------------------------------------------------------------------------------------
# 1. Environment
# ------------------------------------------------------------------------------------------------
s=$SECONDS
PY=${GPUCHECK_PYTHON:-python3}
TORCH_DIR=${GPUCHECK_TORCH_DIR:-}
if [ -z "$TORCH_DIR" ]; then
  TORCH_DIR=$(timeout 30 "$PY" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])' 2>/dev/null)
fi
{
  sec() { printf '\n===== %s =====\n' "$*"; }
  run() { echo "\$ $*"; timeout 30 "$@" 2>&1; echo "[rc=$?]"; }
  sec uname / os / cpu / memory
  uname -a
  grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release 2>/dev/null
  echo "nproc: $(nproc)"
  ldd --version 2>&1 | head -1
  free -g 2>/dev/null | head -2
  df -h "$ROOT" /tmp 2>/dev/null
  echo "user: $(id -un 2>/dev/null) ($(id -u))"
  sec nvidia-smi
  run nvidia-smi
  run nvidia-smi -L
  run nvidia-smi topo -m
  ls -la /dev/nvidia* 2>&1 | head -20
  sec python / torch
  echo "python3: $(command -v "$PY") ($("$PY" --version 2>&1))"
  echo "torch dir (find_spec): ${TORCH_DIR:-NOT FOUND}"
  timeout 90 "$PY" - <<'PY' 2>&1
import os, sys
try:
    import torch
except Exception as e:
    print("import torch FAILED:", type(e).__name__, e); sys.exit(0)
print("torch", torch.__version__, "at", os.path.dirname(torch.__file__))
print("torch.version.cuda", torch.version.cuda, "git", getattr(torch.version, "git_version", "?"))
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
print("_GLIBCXX_USE_CXX11_ABI", torch._C._GLIBCXX_USE_CXX11_ABI)
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
try:
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"cuda:{i}", p.name, f"cc {p.major}.{p.minor}", f"{p.total_memory/2**30:.1f} GiB", f"{p.multi_processor_count} SMs")
    print("nccl version", torch.cuda.nccl.version())
except Exception as e:
    print("cuda query failed:", e)
print("cudnn", torch.backends.cudnn.version())
import torch.distributed as dist
print("distributed", dist.is_available(), "nccl", dist.is_nccl_available(), "gloo", dist.is_gloo_available())
print("tf32 matmul", torch.backends.cuda.matmul.allow_tf32, "tf32 cudnn", torch.backends.cudnn.allow_tf32)
PY
  if [ -n "$TORCH_DIR" ]; then
    sec torch layout
    for f in "$TORCH_DIR"/lib/lib{torch,c10,gloo,nccl}*; do [ -e "$f" ] && ls -la "$f"; done
    for p in share/cmake/Torch/TorchConfig.cmake include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp \
      include/torch/headeronly/version.h include/gloo include/c10/cuda/CUDAFunctions.h; do
      [ -e "$TORCH_DIR/$p" ] && echo "present: $p" || echo "ABSENT:  $p"
    done
    grep -o '_GLIBCXX_USE_CXX11_ABI=[01]' "$TORCH_DIR/share/cmake/Torch/TorchConfig.cmake" 2>/dev/null | head -1
    echo "readelf NEEDED of libtorch_cpu.so:"
    readelf -d "$TORCH_DIR/lib/libtorch_cpu.so" 2>/dev/null | grep -E 'NEEDED|RUNPATH|RPATH' | head -30
    sec nvidia python packages beside torch
    for dir in "$TORCH_DIR"/../nvidia/*; do
      echo "$dir: $(ls "$dir" 2>/dev/null | tr '\n' ' ')"
    done
    echo "headers AccelCuda.cmake looks for (torch/../nvidia/*/include, \$CUDAToolkit_ROOT/include, /usr/local/cuda/include):"
    for h in cuda_runtime_api.h nccl.h cublas_v2.h cusparse.h cusolverDn.h; do
      found=$(ls "$TORCH_DIR"/../nvidia/*/include/$h "${CUDAToolkit_ROOT:-/nonexistent}/include/$h" /usr/local/cuda/include/$h 2>/dev/null | tr '\n' ' ')
      echo "  $h: ${found:-NOT FOUND}"
    done
    ls "$TORCH_DIR"/../nvidia/*/lib/libnccl* "$TORCH_DIR"/../nvidia/*/lib/libcudart* 2>/dev/null
  fi
  sec tools
  for t in cmake ninja make g++ gcc cc c++ nvcc ccache readelf shellcheck git tar; do
    printf '%-10s %s\n' "$t" "$(command -v $t || echo ABSENT)"
  done
  run cmake --version
  run ninja --version
  run g++ --version
  run nvcc --version
  echo "CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-} CUDA_HOME=${CUDA_HOME:-} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "PATH=$PATH"
  env | grep -E '^(NCCL|TORCH|ACCELERATE|ACCEL|CUDA|OMP)_' | sort
  sec dev headers and libraries the build needs '(CMakeLists.txt:46-49, cmake/AccelTorch.cmake:132)'
  for h in yaml-cpp/yaml.h nlohmann/json.hpp CLI/CLI.hpp gloo/rendezvous/store.h zlib.h gtest/gtest.h libdeflate.h; do
    if echo "#include <$h>" | timeout 30 g++ -std=c++17 -E -x c++ - >/dev/null 2>&1; then
      echo "  <$h>: found by g++"
    else
      echo "  <$h>: NOT found by g++"
    fi
  done
  # One pass (bounded): the image's /opt holds a large Python environment.
  timeout 20 find /usr /usr/local /opt -maxdepth 6 \( -name 'yaml-cpp-config.cmake' -o -name 'yaml-cppConfig.cmake' \
    -o -name 'nlohmann_jsonConfig.cmake' -o -name 'CLI11Config.cmake' -o -name 'GTestConfig.cmake' \) 2>/dev/null |
    sed 's/^/  CMake package: /' | head -20
  echo "  ldconfig: $(ldconfig -p 2>/dev/null | grep -E 'libz\.so|libyaml-cpp|libgtest' | tr -s ' ' | tr '\n' ';')"
  have dpkg-query && dpkg-query -W libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libgloo-dev zlib1g-dev libgtest-dev 2>&1
  echo "network: not used by this script (the machine reaches nothing outside)"
  sec bundle "($BUNDLE)"
  if [ -d "$BUNDLE" ]; then
    cat "$BUNDLE/MANIFEST" 2>/dev/null
    du -sh "$BUNDLE"/* 2>/dev/null
  else
    echo "ABSENT: carry .cache/gpucheck (tools/gpu_check.sh --bundle)"
  fi
} >"$ENVF" 2>&1
note "TIME env $((SECONDS - s))s: torch dir ${TORCH_DIR:-NOT FOUND}; $(grep -m1 -E '^torch [0-9]' "$ENVF" || echo 'torch did not import'); $(grep -m1 '^nccl version' "$ENVF" || echo 'nccl ?'); GPU: $(grep -m1 '^cuda:0' "$ENVF" || echo none)"

# ------------------------------------------------------------------------------------------------
# 2. Data
# ------------------------------------------------------------------------------------------------
s=$SECONDS
FASHION=
ACC_BAR=0.60 # the 150-step one-process bar of example.train_fashion_mnist_1proc (real data)
for dir in "$BUNDLE/data/fashion-mnist" /usr/share/datasets/fashion-mnist; do
  if [ -f "$dir/train-images-idx3-ubyte.gz" ] && [ -f "$dir/t10k-labels-idx1-ubyte.gz" ]; then
    FASHION=$dir
    break
  fi
done
if [ -n "$FASHION" ]; then
  note "DATA fashion-mnist: real, $FASHION"
else
  FASHION=$W/data/fashion-mnist
  mkdir -p "$FASHION"
  # Ten learnable classes: class k is a bright bar at rows 2k..2k+4 on noise; 6000 + 1000 images.
  timeout 120 "$PY" - "$FASHION" <<'PY' >"$W/logs/data_generation.log" 2>&1
import gzip, os, random, struct, sys
out = sys.argv[1]
def write(name, count, train):
    rnd = random.Random(1 if train else 2)
    labels = bytes(rnd.randrange(10) for _ in range(count))
    img = bytearray(count * 784)
    for i, k in enumerate(labels):
        base = i * 784
        for p in range(784):
            img[base + p] = rnd.randrange(0, 90)
        for r in range(2 * k + 1, 2 * k + 5):
            for c in range(4, 24):
                img[base + r * 28 + c] = 200 + rnd.randrange(0, 55)
    with gzip.open(os.path.join(out, f"{name}-images-idx3-ubyte.gz"), "wb", compresslevel=1) as f:
        f.write(struct.pack(">IIII", 2051, count, 28, 28)); f.write(bytes(img))
    with gzip.open(os.path.join(out, f"{name}-labels-idx1-ubyte.gz"), "wb", compresslevel=1) as f:
        f.write(struct.pack(">II", 2049, count)); f.write(labels)
write("train", 6000, True)
write("t10k", 1000, False)
print("synthetic IDX written to", out)
PY
  ACC_BAR=0.90
  note "DATA fashion-mnist: SYNTHETIC (bars bands, 6000/1000 images; bar ${ACC_BAR}), $FASHION rc=$?"
fi
FORTUNES=
for dir in "$BUNDLE/data/fortunes" /usr/share/games/fortunes; do
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then FORTUNES=$dir; break; fi
done
if [ -z "$FORTUNES" ]; then
  FORTUNES=$W/data/fortunes
  mkdir -p "$FORTUNES"
  "$PY" - "$FORTUNES/synthetic" <<'PY' 2>>"$W/logs/data_generation.log"
import random, sys
rnd = random.Random(3)
words = ("the quick brown fox jumps over a lazy dog while seven wise owls read old books about "
         "stars rivers and mountains near quiet towns where people sing songs of hope").split()
with open(sys.argv[1], "w") as f:
    for i in range(3000):
        n = rnd.randrange(3, 80)
        f.write(" ".join(rnd.choice(words) for _ in range(n)).capitalize() + ".\n%\n")
PY
  note "DATA fortunes: SYNTHETIC ($FORTUNES)"
else
  note "DATA fortunes: $FORTUNES"
fi
note "TIME data $((SECONDS - s))s"

if [ "$MODE" != --dry ]; then
  # ----------------------------------------------------------------------------------------------
  # 3. Background: torch's own NCCL, for comparison with libaccel's (GPU work beside the build).
  # ----------------------------------------------------------------------------------------------
  cat >"$W/torch_nccl.py" <<'PY'
import datetime, os, sys, time
import torch, torch.distributed as dist
mode = sys.argv[1]
t0 = time.time()
if mode == "world1":
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    x = torch.full((1 << 20,), 3.0, device="cuda:0")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"torch NCCL world of 1: all_reduce gave {x[0].item()} ({time.time() - t0:.1f}s)")
    dist.destroy_process_group()
else:
    rank = int(os.environ["RANK"])
    try:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{os.environ['PORT']}",
                                rank=rank, world_size=2, device_id=torch.device("cuda:0"),
                                timeout=datetime.timedelta(seconds=40))
        x = torch.ones(4, device="cuda:0")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        print(f"rank {rank}: two ranks on one GPU WORKED: all_reduce gave {x.tolist()}")
        dist.destroy_process_group()
    except Exception as e:
        print(f"rank {rank}: {type(e).__name__} after {time.time() - t0:.1f}s: {str(e)[:1500]}")
        sys.exit(1)
PY
  (
    cd "$W" || exit
    NCCL_DEBUG=WARN timeout -k 5 90 "$PY" torch_nccl.py world1 >logs/torch_nccl_world1.log 2>&1
    echo "[rc=$?]" >>logs/torch_nccl_world1.log
    port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    for r in 0 1; do
      RANK=$r PORT=$port NCCL_DEBUG=WARN timeout -k 5 100 "$PY" torch_nccl.py dup >logs/torch_nccl_2ranks_1gpu.rank$r.log 2>&1 &
    done
    wait
  ) &
  TORCH_BG=$!
fi

# ------------------------------------------------------------------------------------------------
# 4. Dependencies, configure, build
# ------------------------------------------------------------------------------------------------
s=$SECONDS
DEPARGS=()
CXXFLAGS_EXTRA=
dep() { note "DEPS $*"; }
if [ -d "$BUNDLE/deps" ]; then
  ylib=$BUNDLE/deps/yaml-cpp/lib/libyaml-cpp.so.0.7
  if "$PY" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$ylib" >"$W/logs/yaml_cpp_load.log" 2>&1; then
    DEPARGS+=("-Dyaml-cpp_DIR=$BUNDLE/deps/yaml-cpp")
    dep "yaml-cpp: bundle (Debian 0.7 .so, loads here)"
  elif [ -f "$BUNDLE/deps/yaml-cpp-0.7.0-src.tar.gz" ]; then
    dep "yaml-cpp: Debian .so does not load here ($(tail -1 "$W/logs/yaml_cpp_load.log")); building 0.7.0 from source"
    ys=$SECONDS
    (
      cd "$W" && tar -xzf "$BUNDLE/deps/yaml-cpp-0.7.0-src.tar.gz" &&
        cmake -S yaml-cpp-0.7.0 -B yaml-build -DCMAKE_BUILD_TYPE=Release -DYAML_CPP_BUILD_TESTS=OFF \
          -DYAML_CPP_BUILD_TOOLS=OFF -DYAML_BUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
          -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_INSTALL_PREFIX="$W/yaml-install" &&
        timeout 120 cmake --build yaml-build -j "$JOBS" && cmake --install yaml-build
    ) >>"$BUILDLOG" 2>&1
    ycfg=$(find "$W/yaml-install" -name yaml-cpp-config.cmake 2>/dev/null | head -1)
    if [ -n "$ycfg" ]; then
      DEPARGS+=("-Dyaml-cpp_DIR=$(dirname "$ycfg")")
      dep "yaml-cpp: built from source in $((SECONDS - ys))s"
    else
      dep "yaml-cpp: source build FAILED (build.log); falling back to the system's"
    fi
  fi
  DEPARGS+=("-Dnlohmann_json_DIR=$BUNDLE/deps/nlohmann_json" "-DCLI11_DIR=$BUNDLE/deps/CLI11")
  dep "nlohmann_json, CLI11: bundle (Debian 3.11.2, 2.1.2 headers)"
  # cmake/AccelTorch.cmake:132 only finds gloo's headers (ACCEL_GLOO_INCLUDE_DIR) and never adds the
  # directory to a target: outside the compiler's default paths it must come in through the flags.
  G=$BUNDLE/deps/gloo/include
  DEPARGS+=("-DACCEL_GLOO_INCLUDE_DIR=$G")
  CXXFLAGS_EXTRA="-isystem $G"
  dep "gloo headers: bundle (Debian), -isystem $G"
else
  dep "no bundle at $BUNDLE: yaml-cpp, nlohmann_json, CLI11 and gloo headers must be the system's"
fi
# FindZLIB needs zlib.h and the unversioned libz.so (zlib1g-dev); a runtime-only zlib has libz.so.1.
zinc=
echo '#include <zlib.h>' | g++ -E -x c++ - >/dev/null 2>&1 && zinc=system
zdev=$(ldconfig -p 2>/dev/null | awk '/libz\.so .*x86-64/ {print $NF; exit}')
if [ -n "$zinc" ] && [ -n "$zdev" ]; then
  dep "zlib: system (headers and $zdev)"
else
  zl=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
  [ -n "$zl" ] || zl=$BUNDLE/deps/zlib/lib/libz.so.1
  if [ -z "$zinc" ] && [ -f "$BUNDLE/deps/zlib/include/zlib.h" ]; then
    DEPARGS+=("-DZLIB_INCLUDE_DIR=$BUNDLE/deps/zlib/include")
    zinc="bundle (Debian 1.2.13)"
  fi
  DEPARGS+=("-DZLIB_LIBRARY=$zl")
  dep "zlib: headers ${zinc:-NOWHERE (configure will fail)}, library $zl (no libz.so here)"
fi
if [ -z "${CUDAToolkit_ROOT:-}" ]; then
  if [ -d /usr/local/cuda/include ]; then
    export CUDAToolkit_ROOT=/usr/local/cuda
  elif have nvcc; then
    CUDAToolkit_ROOT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    export CUDAToolkit_ROOT
  fi
fi
GEN=()
have ninja && GEN=(-G Ninja)
configure() { # ACCEL_CUDA value
  echo "===== configure, ACCEL_CUDA=$1 ($(date -u +%T)) ====="
  echo "\$ cmake -S . -B $B ${GEN[*]} -DCMAKE_BUILD_TYPE=Release -DACCEL_TORCH=$TORCH_DIR -DACCEL_CUDA=$1 -DACCEL_BUILD_TESTS=OFF -DACCEL_BUILD_BENCH=OFF -DACCEL_BUILD_EXAMPLES=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_FLAGS=$CXXFLAGS_EXTRA ${DEPARGS[*]}"
  timeout 120 cmake -S . -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DACCEL_TORCH="$TORCH_DIR" \
    -DACCEL_CUDA="$1" -DACCEL_BUILD_TESTS=OFF -DACCEL_BUILD_BENCH=OFF -DACCEL_BUILD_EXAMPLES=ON \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "-DCMAKE_CXX_FLAGS=$CXXFLAGS_EXTRA" "${DEPARGS[@]}"
}
CONF_OK=
if [ -n "${GPUCHECK_SKIP_BUILD:-}" ]; then
  note "SKIP  configure and build (GPUCHECK_SKIP_BUILD): checks run on $B as it is"
elif [ -z "$TORCH_DIR" ]; then
  note "FAIL  configure: no torch found by $PY (GPUCHECK_TORCH_DIR names one)"
else
  if configure ON >>"$BUILDLOG" 2>&1; then
    CONF_OK=ON
  else
    note "FAIL  configure with ACCEL_CUDA=ON: $(grep -m1 -E 'CMake Error|FATAL|ACCEL_CUDA=ON but' -A2 "$BUILDLOG" | tr '\n' ' ' | cut -c1-400)"
    rm -f "$B/CMakeCache.txt"
    configure AUTO >>"$BUILDLOG" 2>&1 && CONF_OK=AUTO
  fi
fi
[ -z "${GPUCHECK_SKIP_BUILD:-}" ] && note "TIME configure $((SECONDS - s))s: $([ -n "$CONF_OK" ] && echo "ok with ACCEL_CUDA=$CONF_OK" || echo 'FAILED (build.log)')"
grep -E -- '-- (LibTorch|CUDA/NCCL part)' "$BUILDLOG" | tail -2 | sed 's/^/CONFIG /' | tee -a "$SUMMARY"

if [ "$MODE" = --dry ]; then
  grep -E '^(yaml-cpp_DIR|nlohmann_json_DIR|CLI11_DIR|ACCEL_GLOO_INCLUDE_DIR|ZLIB_INCLUDE_DIR|ZLIB_LIBRARY[A-Z_]*|ACCEL_HEADER_[A-Za-z0-9_]*|CMAKE_CXX_FLAGS):' "$B/CMakeCache.txt" 2>/dev/null | sed 's/^/CACHE /' | tee -a "$SUMMARY"
  note "DRY run: no build, no checks"
  exit 0
fi

# The NCCL probe: libaccel_cuda.so's own make_nccl_group on a world of one (libaccel forms an NCCL
# group only for two ranks or more, so this is the one way to run NCCL on a single GPU). Compiled
# with the very flags of src/cuda/nccl_plugin.cpp, beside the main build.
cat >"$W/nccl_probe.cpp" <<'CPP'
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "cuda/plugin.hpp"

static int failures = 0;
static void step(const char* name, const std::function<bool()>& body) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const bool ok = body();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s %s (%.3f s)\n", ok ? "ok  " : "FAIL", name, s);
    if (!ok) ++failures;
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::printf("FAIL %s threw: %s\n", name, what.substr(0, 1500).c_str());
    ++failures;
  }
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  void* handle = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    std::printf("PROBE_FAIL dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  using Entry = const accel::cuda::Plugin* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "accel_cuda_plugin"));
  const accel::cuda::Plugin* plugin = entry ? entry() : nullptr;
  if (!plugin || plugin->abi != accel::cuda::kPluginAbi) {
    std::printf("PROBE_FAIL no plugin or ABI mismatch\n");
    return 2;
  }
  const int n = plugin->device_count();
  std::printf("device_count %d\n", n);
  if (n < 1) {
    std::printf("PROBE_FAIL no device\n");
    return 3;
  }
  c10::intrusive_ptr<accel::compat::Group> group;
  step("make_nccl_group(world 1, cuda:0, eager connect)", [&] {
    auto store = c10::make_intrusive<c10d::HashStore>();
    group = plugin->make_nccl_group(store, 0, 1, std::chrono::milliseconds(60000), 0);
    std::printf("     backend %s, rank %d of %d\n", group->getBackendName().c_str(), group->getRank(),
                group->getSize());
    return group->getSize() == 1;
  });
  if (!group) {
    std::printf("PROBE_FAIL no group\n");
    return 1;
  }
  const auto cuda = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  step("allreduce sum f32 (4 MB)", [&] {
    std::vector<at::Tensor> v{at::full({1 << 20}, 3.0f, cuda)};
    group->allreduce(v)->wait();
    return v[0].eq(3.0).all().item<bool>();
  });
  step("allreduce sum bf16 + f16 + i64", [&] {
    std::vector<at::Tensor> a{at::full({1000}, 2.0f, cuda.dtype(at::kBFloat16))};
    std::vector<at::Tensor> b{at::full({1000}, 2.0f, cuda.dtype(at::kHalf))};
    std::vector<at::Tensor> c{at::full({1000}, 7, cuda.dtype(at::kLong))};
    group->allreduce(a)->wait();
    group->allreduce(b)->wait();
    group->allreduce(c)->wait();
    return a[0].eq(2).all().item<bool>() && b[0].eq(2).all().item<bool>() &&
           c[0].eq(7).all().item<bool>();
  });
  step("broadcast", [&] {
    std::vector<at::Tensor> v{at::arange(16, cuda.dtype(at::kFloat))};
    group->broadcast(v)->wait();
    return v[0].equal(at::arange(16, cuda.dtype(at::kFloat)));
  });
  step("allgather", [&] {
    std::vector<at::Tensor> in{at::full({8}, 5.0f, cuda)};
    std::vector<std::vector<at::Tensor>> out{{at::zeros({8}, cuda)}};
    group->allgather(out, in)->wait();
    return out[0][0].eq(5.0).all().item<bool>();
  });
  step("barrier", [&] {
    group->barrier()->wait();
    return true;
  });
  step("allreduce 256 MB x 5 (timing only)", [&] {
    std::vector<at::Tensor> v{at::ones({64 << 20}, cuda)};
    group->allreduce(v)->wait();  // warm-up
    (void)v[0][0].item<float>();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) group->allreduce(v)->wait();
    const double ok = v[0][0].item<float>();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("     5 x 256 MB in %.4f s, value %g\n", s, ok);
    return ok == 1.0;
  });
  // A CPU tensor handed to the NCCL group: a clear exception, not a crash.
  std::printf("(next: a CPU tensor to NCCL; an exception is the right answer)\n");
  step("CPU tensor refused", [&] {
    std::vector<at::Tensor> v{at::ones({4})};
    try {
      group->allreduce(v)->wait();
    } catch (const std::exception& e) {
      std::string what = e.what();
      std::printf("     refused: %s\n", what.substr(0, what.find('\n')).c_str());
      return true;
    }
    std::printf("     NOT refused\n");
    return false;
  });
  const auto t0 = std::chrono::steady_clock::now();
  group.reset();
  std::printf("group released in %.3f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::printf(failures ? "PROBE_FAIL %d step(s)\n" : "PROBE_OK\n", failures);
  return failures ? 1 : 0;
}
CPP

PROBE_PID=
start_probe_compile() {
  local cc_json=$B/compile_commands.json
  [ -f "$cc_json" ] || { echo "no compile_commands.json" >"$W/logs/nccl_probe_build.log"; return; }
  "$PY" - "$cc_json" "$W" >"$W/probe_compile.sh" 2>"$W/logs/nccl_probe_build.log" <<'PY'
import json, shlex, sys
cc_json, w = sys.argv[1], sys.argv[2]
for e in json.load(open(cc_json)):
    if e["file"].endswith("src/cuda/nccl_plugin.cpp"):
        args = e.get("arguments") or shlex.split(e["command"])
        out = []
        skip = False
        for i, a in enumerate(args):
            if skip:
                skip = False
                continue
            if a == "-o":
                out += ["-o", f"{w}/nccl_probe.o"]
                skip = True
            elif a.endswith("nccl_plugin.cpp"):
                out.append(f"{w}/nccl_probe.cpp")
            elif a in ("-MD", "-MT", "-MF"):
                skip = a != "-MD"
            else:
                out.append(a)
        print("cd " + shlex.quote(e["directory"]) + " && " + " ".join(shlex.quote(a) for a in out))
        break
else:
    sys.exit("nccl_plugin.cpp is not in compile_commands.json (the CUDA part is not configured)")
PY
  [ -s "$W/probe_compile.sh" ] || return
  local nv=() d
  for d in "$TORCH_DIR"/../nvidia/*/lib; do [ -d "$d" ] && nv+=("-Wl,-rpath-link,$(readlink -f "$d")"); done
  (
    s=$SECONDS
    echo "\$ $(cat "$W/probe_compile.sh")"
    timeout 240 bash "$W/probe_compile.sh" &&
      timeout 60 g++ -o "$PROBE" "$W/nccl_probe.o" "$TORCH_DIR/lib/libtorch_cpu.so" \
        "$TORCH_DIR/lib/libc10.so" -ldl -Wl,-rpath,"$TORCH_DIR/lib" "${nv[@]}" -Wl,--allow-shlib-undefined
    echo "[rc=$? after $((SECONDS - s))s]"
  ) >>"$W/logs/nccl_probe_build.log" 2>&1 &
  PROBE_PID=$!
}


if [ -n "$CONF_OK" ]; then
  start_probe_compile
  s=$SECONDS
  limit=$(($(left) - 150))
  ((limit > 300)) && limit=300
  ((limit < 60)) && limit=60
  targets=(accel accel_cli accel_selftest collectives train_fashion_mnist train_fashion_mnist_cpp train_text)
  keep=(-- -k 0)
  [ ${#GEN[@]} -eq 0 ] && keep=(-- -k)
  {
    echo "===== build (timeout ${limit}s, $(date -u +%T)) ====="
    echo "\$ cmake --build $B -j $JOBS --target ${targets[*]} ${keep[*]}"
    timeout -k 10 "$limit" cmake --build "$B" -j "$JOBS" --target "${targets[@]}" "${keep[@]}"
    echo "[build rc=$?]"
  } >>"$BUILDLOG" 2>&1
  brc=$(grep -o '\[build rc=[0-9]*\]' "$BUILDLOG" | tail -1 | tr -dc 0-9)

  note "TIME build $((SECONDS - s))s rc=$brc (limit ${limit}s; 124 = timed out)$([ "$brc" != 0 ] && echo ": $(grep -m3 -E 'error:|FAILED:|undefined reference' "$BUILDLOG" | cut -c1-300 | tr '\n' ' ')")"
  warnings=$(grep -c 'warning:' "$BUILDLOG")
  note "BUILD warnings: $warnings$( ((warnings > 0)) && echo " (first: $(grep -m1 'warning:' "$BUILDLOG" | cut -c1-250))")"
fi
bin=$B/bin
lib=$B/lib
built=""
for f in "$lib/libaccel.so" "$lib/libaccel_cuda.so" "$bin/accel" "$bin/accel-selftest" "$bin/collectives" \
  "$bin/train_fashion_mnist" "$bin/train_fashion_mnist_cpp" "$bin/train_text"; do
  [ -e "$f" ] && built+=" ${f##*/}:yes" || built+=" ${f##*/}:NO"
done
note "BUILT$built"

# mp_program (tests/mp; ACCEL_BUILD_TESTS=OFF above because the tests need GTest) by hand.
if [ -e "$lib/libaccel.so" ] && [ -z "${GPUCHECK_SKIP_BUILD:-}" ]; then
  s=$SECONDS
  {
    echo "===== mp_program by hand ====="
    timeout 60 cc -std=gnu99 -O2 -Iinclude tests/mp/mp_program.c -o "$MP" -L"$lib" -laccel \
      -Wl,-rpath,"$lib" -Wl,--allow-shlib-undefined
    echo "[rc=$?]"
  } >>"$BUILDLOG" 2>&1
  note "TIME mp_program $((SECONDS - s))s: $([ -x "$MP" ] && echo built || echo 'NOT built (build.log)')"
fi
if [ -n "$PROBE_PID" ]; then
  s=$SECONDS
  w=$(($(left) - 120))
  ((w > 200)) && w=200
  while kill -0 "$PROBE_PID" 2>/dev/null && ((SECONDS - s < w)); do sleep 1; done
  kill -- "$PROBE_PID" 2>/dev/null
  note "TIME nccl_probe build (waited $((SECONDS - s))s more): $([ -x "$PROBE" ] && echo built || echo "NOT built: $(grep -m2 -E 'error|rc=' "$W/logs/nccl_probe_build.log" | cut -c1-300 | tr '\n' ' ')")"
fi

# ------------------------------------------------------------------------------------------------
# 5. Checks
# ------------------------------------------------------------------------------------------------
# run_check NAME LIMIT_S VERDICT [ENV=VALUE...] -- COMMAND...   (VERDICT LOG RC prints "PASS|FAIL|NOTE why")
run_check() {
  local name=$1 limit=$2 verdict=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local l
  l=$(left)
  if ((l < 25)); then
    note "$(printf 'SKIP  %-30s out of time (%ss left)' "$name" "$l")"
    return
  fi
  ((limit > l - 15)) && limit=$((l - 15))
  if [ ! -x "$1" ]; then
    note "$(printf 'SKIP  %-30s %s was not built' "$name" "${1##*/}")"
    return
  fi
  local log=$W/logs/$name.log st=$SECONDS rc
  {
    echo "\$ ${envs[*]} $*"
    echo "# timeout ${limit}s, started $(date -u +%T)"
  } >"$log"
  env "${envs[@]}" timeout -k 10 "$limit" "$@" >>"$log" 2>&1 </dev/null
  rc=$?
  local secs=$((SECONDS - st))
  echo "# rc=$rc after ${secs}s" >>"$log"
  local v
  v=$("$verdict" "$log" "$rc")
  local rest=""
  [ "${v#* }" != "$v" ] && rest=${v#* }
  note "$(printf '%-5s %-30s %4ss rc=%-3s %s' "${v%% *}" "$name" "$secs" "$rc" "$rest" | cut -c1-600)"
  {
    printf '\n########## %s: %s (rc %s, %ss)\n' "$name" "${v%% *}" "$rc" "$secs"
    # A log of a hung NCCL run can be long: its head and its tail.
    if [ "$(wc -l <"$log")" -gt 400 ]; then
      head -n 150 "$log"
      echo "[... $(($(wc -l <"$log") - 350)) lines cut; logs.tar.gz has them ...]"
      tail -n 200 "$log"
    else
      cat "$log"
    fi
  } >>"$CHECKS"
}
body() { grep -v -E '^(# |\$ )' "$1"; } # a check's output without the script's own lines
last_words() {                                 # LOG [PATTERN]: the lines that say why, else the last
  local w
  w=$(body "$1" | grep -E -i "${2:-error|fail|refus|nccl|timeout|timed out|signal|abort|terminate|segmentation|fault|killed|exception}" | tail -n 2)
  [ -n "$w" ] || w=$(body "$1" | tail -n 1)
  echo "$w" | tr '\n' ' ' | cut -c1-350
}
hung() { [ "$1" = 124 ] || [ "$1" = 137 ]; }
died() { (($1 > 128 && $1 != 137)) && echo "killed by signal $(($1 - 128)): "; }
v_rc0() {
  if [ "$2" = 0 ]; then echo "PASS"; else echo "FAIL $(hung "$2" && echo 'TIMED OUT: ')$(died "$2")$(last_words "$1")"; fi
}
v_on_gpu() { # rc 0 and the debug line says cuda:0
  local d
  d=$(grep -m1 -o 'device cuda:[0-9]*\|device cpu ([^)]*)' "$1")
  if [ "$2" = 0 ] && grep -q 'device cuda:0' "$1"; then echo "PASS $d"
  else echo "FAIL ${d:-no debug line} $(hung "$2" && echo 'TIMED OUT ')$(died "$2")$(last_words "$1")"; fi
}
v_accuracy() {
  local acc rate
  acc=$(grep -o 'test accuracy [0-9.]*' "$1" | tail -1 | awk '{print $3}')
  rate=$(grep -o '[0-9]* samples/s' "$1" | tail -1)
  local d
  d=$(grep -m1 -o 'device cuda:[0-9]*\|device cpu' "$1")
  if [ "$2" = 0 ] && [ -n "$acc" ] && awk -v a="$acc" -v b="$ACC_BAR" 'BEGIN{exit !(a >= b)}'; then
    echo "PASS accuracy $acc (bar $ACC_BAR), ${rate:-? samples/s}, ${d:-device ?}; $(grep -o 'after [0-9.]*s of training' "$1" | tail -1)"
  else
    echo "FAIL accuracy ${acc:-none} (bar $ACC_BAR), ${d:-device ?} $(hung "$2" && echo 'TIMED OUT ')$(died "$2")$(last_words "$1")"
  fi
}
v_probe() {
  if [ "$2" = 0 ] && grep -q PROBE_OK "$1"; then
    echo "PASS $(grep -o '5 x 256 MB in [0-9.]* s' "$1"); $(grep -m1 'make_nccl_group' "$1" | cut -c1-80)"
  else
    echo "FAIL $(hung "$2" && echo 'TIMED OUT ')$(grep -E '^FAIL|PROBE_FAIL' "$1" | head -3 | tr '\n' ' ' | cut -c1-400)"
  fi
}
v_clear_error() { # expected to fail, quickly and saying why (two ranks on one GPU)
  if hung "$2"; then echo "FAIL HUNG until the timeout: $(last_words "$1")"
  elif [ "$2" = 0 ]; then echo "NOTE succeeded (NCCL accepted two ranks on one GPU?): $(grep -m2 -E 'gather|device' "$1" | tr '\n' ' ')"
  elif body "$1" | grep -v 'NCCL INFO' | grep -q -i -E 'NCCL|duplicate gpu|cuda' &&
    ! grep -q -E 'Segmentation fault|core dumped|SIGSEGV|SIGABRT|terminate called|by signal' "$1"; then
    echo "PASS clear error: $(body "$1" | grep -i -E 'could not form|duplicate gpu|nccl' | grep -v -i 'NCCL INFO' | head -1 | cut -c1-300)"
  else
    echo "FAIL unclear or a crash: $(died "$2")$(last_words "$1" 'error|fail|signal|abort|terminate|segmentation|nccl')"
  fi
}
v_no_hang() { # must end (either way) before the timeout
  if hung "$2"; then echo "FAIL HUNG until the timeout: $(last_words "$1")"
  elif [ "$2" = 0 ]; then echo "PASS ran to the end: $(body "$1" | grep -m1 -E 'gather_object|device' | cut -c1-200)"
  else echo "PASS ended with an error: $(last_words "$1" 'error|fail|refus|nccl|timeout|timed out|signal|exited' | cut -c1-300)"; fi
}
v_launch_cpu() {
  if [ "$2" = 0 ] && grep -q 'gather_object\[1\]' "$1"; then echo "PASS"; else v_rc0 "$1" "$2"; fi
}
v_text() {
  local p
  p=$(grep -o 'held-out perplexity [0-9.]*' "$1" | tail -1)
  if [ "$2" = 0 ] && [ -n "$p" ]; then echo "PASS $p; $(grep -m1 -o 'device cuda:[0-9]*\|device cpu' "$1")"; else v_rc0 "$1" "$2"; fi
}

# Every check: bounded rendezvous and collectives, NCCL's warnings in the log, no user config.
COMMON=(ACCEL_RENDEZVOUS_TIMEOUT=30 ACCEL_COLLECTIVE_TIMEOUT=60 NCCL_DEBUG=WARN "HF_HOME=$HF_HOME")
DBG=ACCELERATE_DEBUG_MODE=true
STEPS=${GPUCHECK_STEPS:-150}
[ -x "$MP" ] || MP=$bin/mp_program # GPUCHECK_SKIP_BUILD: whatever the build dir has
[ -x "$PROBE" ] || PROBE=$bin/nccl_probe

# Top priority first: the GPU is seen and used, NCCL works, the example trains, two ranks on one GPU.
run_check accel_env 20 v_rc0 "${COMMON[@]}" -- "$bin/accel" env
run_check collectives_1gpu 90 v_on_gpu "${COMMON[@]}" "$DBG" -- "$bin/collectives"
run_check nccl_probe_world1 90 v_probe "${COMMON[@]}" NCCL_DEBUG=INFO -- "$PROBE" "$lib/libaccel_cuda.so"
run_check fashion_1gpu_fp32 150 v_accuracy "${COMMON[@]}" "$DBG" -- "$bin/train_fashion_mnist" --max-steps "$STEPS" --data "$FASHION"
run_check launch2_same_gpu_nccl 75 v_clear_error "${COMMON[@]}" ACCEL_COLLECTIVE_TIMEOUT=30 NCCL_DEBUG=INFO -- "$bin/accel" launch -n 2 --debug "$bin/collectives"
run_check fashion_1gpu_fp16 120 v_accuracy "${COMMON[@]}" "$DBG" ACCELERATE_MIXED_PRECISION=fp16 -- "$bin/train_fashion_mnist" --max-steps "$STEPS" --data "$FASHION"
run_check fashion_1gpu_bf16 120 v_accuracy "${COMMON[@]}" "$DBG" -- "$bin/train_fashion_mnist" --bf16 --max-steps "$STEPS" --data "$FASHION"
run_check mp_check_1gpu 60 v_on_gpu "${COMMON[@]}" "$DBG" -- "$MP" check
run_check mp_equiv_1gpu 60 v_on_gpu "${COMMON[@]}" "$DBG" -- "$MP" equiv 64
run_check mp_equiv_cpu 60 v_rc0 "${COMMON[@]}" ACCELERATE_USE_CPU=true -- "$MP" equiv 64
if [ -f "$W/logs/mp_equiv_1gpu.log" ] && [ -f "$W/logs/mp_equiv_cpu.log" ]; then
  cmp=$("$PY" - "$W/logs/mp_equiv_1gpu.log" "$W/logs/mp_equiv_cpu.log" <<'PY' 2>&1
import sys
def params(path):
    out = {}
    for line in open(path, errors="replace"):
        if line.startswith("param "):
            f = line.split()
            out[f[1]] = [float(v) for v in f[2:]]
    return out
g, c = params(sys.argv[1]), params(sys.argv[2])
if not g or g.keys() != c.keys():
    print("FAIL parameters missing or named differently:", sorted(g), sorted(c)); sys.exit()
d = max(abs(a - b) for k in g for a, b in zip(g[k], c[k]))
n = sum(len(v) for v in g.values())
print(("PASS" if d < 1e-3 else "FAIL"), f"GPU vs CPU after 20 SGD steps: max |diff| {d:.3g} over {n} printed values")
PY
)
  note "$(printf '%-5s %-30s %s' "${cmp%% *}" mp_equiv_gpu_vs_cpu "${cmp#* }")"
fi
run_check mp_batchnorm_1gpu 60 v_on_gpu "${COMMON[@]}" "$DBG" -- "$MP" batchnorm
run_check accel_test_1gpu 120 v_on_gpu "${COMMON[@]}" "$DBG" -- "$bin/accel" test -n 1
run_check launch2_cpu_gloo_control 90 v_launch_cpu "${COMMON[@]}" -- "$bin/accel" launch -n 2 --cpu "$bin/collectives"
cat >"$W/hide_gpu_on_rank1.sh" <<'EOF'
#!/bin/sh
# Rank 1 sees no GPU (a mixed job: rank 0 on cuda:0, rank 1 on the CPU).
[ "${LOCAL_RANK:-0}" = 1 ] && export CUDA_VISIBLE_DEVICES=
exec "$@"
EOF
chmod +x "$W/hide_gpu_on_rank1.sh"
run_check launch2_mixed_gpu_cpu 75 v_no_hang "${COMMON[@]}" ACCEL_RENDEZVOUS_TIMEOUT=20 ACCEL_COLLECTIVE_TIMEOUT=20 -- "$bin/accel" launch -n 2 --debug "$W/hide_gpu_on_rank1.sh" "$bin/collectives"
run_check fashion_cpp_1gpu 120 v_accuracy "${COMMON[@]}" "$DBG" -- "$bin/train_fashion_mnist_cpp" --max-steps "$STEPS" --data "$FASHION"
run_check text_1gpu 120 v_text "${COMMON[@]}" "$DBG" -- "$bin/train_text" --max-steps 40 --data "$FORTUNES"
run_check launch1_gpu_ids0 60 v_on_gpu "${COMMON[@]}" -- "$bin/accel" launch -n 1 --gpu_ids 0 --debug "$bin/collectives"
run_check fashion_cpu_reference 120 v_accuracy "${COMMON[@]}" ACCELERATE_USE_CPU=true "$DBG" -- "$bin/train_fashion_mnist" --max-steps "$STEPS" --data "$FASHION"

if have nvidia-smi; then # what is left on the GPU after every check (a leaked rank shows here)
  note "INFO  gpu after the checks: $(timeout 15 nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>&1 | head -1); processes: $(timeout 15 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1 | tr '\n' ';' | cut -c1-200)"
fi
# torch's own NCCL, from the background job (started before the build).
if [ -n "${TORCH_BG:-}" ]; then
  s=$SECONDS
  while kill -0 "$TORCH_BG" 2>/dev/null && ((SECONDS - s < 20)) && (($(left) > 8)); do sleep 1; done
  note "INFO  torch_nccl_world1          $(grep -v '^\[rc' "$W/logs/torch_nccl_world1.log" 2>/dev/null | tail -1 | cut -c1-300)"
  for r in 0 1; do
    note "INFO  torch_nccl_2ranks_1gpu r$r   $(grep -E "^rank $r" "$W/logs/torch_nccl_2ranks_1gpu.rank$r.log" 2>/dev/null | tail -1 | cut -c1-300)"
  done
  for f in "$W"/logs/torch_nccl_*.log; do
    [ -f "$f" ] && { printf '\n########## %s (torch baseline)\n' "${f##*/}"; tail -n 60 "$f"; } >>"$CHECKS"
  done
fi

exit 0
