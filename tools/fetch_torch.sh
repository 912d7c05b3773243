#!/usr/bin/env bash
# Fetches LibTorch 2.x from PyPI's `torch` wheel and unpacks what a C++ build needs under
# build/torch/<version>/: torch/{include,lib,share} and, beside it as pip would install them, the
# NVIDIA libraries and headers that wheel's libraries need:
#   - libcudart and libcupti: in torch 2.11 (at least) libtorch_cpu.so itself needs them to load (on a
#     machine without a GPU they load and stay idle);
#   - the headers of CUDA's runtime, NCCL, cuBLAS, cuSPARSE and cuSOLVER: ProcessGroupNCCL.hpp
#     includes them, so libaccel's NCCL path compiles (only the headers of the last three are
#     unpacked; NCCL's library is kept, it is what a GPU run loads).
# PyPI has no CPU-only torch wheel for Linux; the GPU libraries a CUDA run needs in addition (cuBLAS,
# cuDNN, ...: ~2 GB) are not fetched. Versions come from the torch wheel's own requirements.
# Prints the directory to pass as -DACCEL_TORCH. Usage: tools/fetch_torch.sh [VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-2.11.0}
dest=build/torch/$version
if [ -f "$dest/.complete" ]; then
  echo "$PWD/$dest"
  exit 0
fi

# pip only downloads here (nothing is installed): any python3 with pip will do; Debian's system
# Python has none, so a virtual environment provides it (python3-venv, from tools/setup.sh).
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  [ -x build/pip-venv/bin/pip ] || /usr/bin/python3 -m venv build/pip-venv >&2
  pip=(build/pip-venv/bin/pip)
fi
# The wheels are chosen for x86-64 Linux and CPython 3.11 whatever Python runs pip; their C++
# libraries do not depend on the Python they were built for.
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_25 manylinux_2_18 manylinux_2_17 manylinux2014; do
  platforms+=(--platform "${p}_x86_64")
done
download() {
  "${pip[@]}" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp "${platforms[@]}" -d "$wheels" "$@" >&2
}

wheels=build/torch/wheels
mkdir -p "$wheels"
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
download "torch==$version"
torch_wheel=$(ls "$wheels"/torch-"$version"-*.whl | head -n1)

# Which NVIDIA packages, at which versions: torch 2.7-2.10 name them directly
# (nvidia-cuda-runtime-cu12==...); 2.11 on through the cuda-toolkit meta-package's extras.
requirements() {
  python3 - "$@" <<'PY'
import re, sys, zipfile
wanted = re.compile(r"^nvidia-(cuda-runtime|cuda-cupti|cuda-crt|cuda-cccl|nccl|cublas|cusparse|cusolver)(-cu\d+)?$")
for wheel in sys.argv[1:]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            req, _, marker = line[len("Requires-Dist:"):].partition(";")
            m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(==\s*[^\s;]+)", req)
            if not m or ("platform" in marker and "linux" not in marker.lower()):
                continue
            name, extras, pin = m.group(1).lower(), m.group(2) or "", m.group(3).replace(" ", "")
            if name == "cuda-toolkit":
                print(f"META {name}{pin} {extras}")
            elif wanted.match(name):
                print(f"PKG {name}{pin}")
PY
}
packages=()
while read -r kind spec _; do
  if [ "$kind" = META ]; then
    download "$spec"
    meta_wheel=$(ls -t "$wheels"/cuda_toolkit-*.whl | head -n1)
    while read -r k2 s2 _; do [ "$k2" = PKG ] && packages+=("$s2"); done < <(requirements "$meta_wheel")
  else
    packages+=("$spec")
  fi
done < <(requirements "$torch_wheel")
# A package named in several extras appears several times.
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "fetch_torch: torch $version with ${packages[*]}" >&2
[ ${#packages[@]} -gt 0 ] && download "${packages[@]}"

python3 - "$dest.partial" "$torch_wheel" "$wheels" "${packages[@]}" <<'PY'
import glob, os, re, sys, zipfile
dest, torch_wheel, wheels, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def unpack(wheel, keep):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if keep(info.filename):
                path = z.extract(info, dest)
                mode = info.external_attr >> 16
                if mode:
                    os.chmod(path, mode & 0o777)

unpack(torch_wheel, lambda n: n.startswith(("torch/include/", "torch/lib/", "torch/share/", "torch/version.py")))
headers_only = ("cublas", "cusparse", "cusolver")
for spec in specs:
    name, version = spec.split("==")
    stem = name.replace("-", "_")
    found = glob.glob(os.path.join(wheels, f"{stem}-{version.rstrip('.*')}*.whl"))
    if not found:
        sys.exit(f"fetch_torch: no wheel for {spec} in {wheels}")
    if any(h in name for h in headers_only):
        unpack(found[0], lambda n: "/include/" in n)
    else:
        unpack(found[0], lambda n: n.startswith("nvidia/") and "/.metadata/" not in n)
PY
rm -rf "$dest"
mv "$dest.partial" "$dest"
touch "$dest/.complete"
echo "$PWD/$dest"
