#!/usr/bin/env python3
"""Writes the Go binding as a module proxy directory that `go` reads with GOPROXY=file://DIR.

The module github.com/libaccel/libaccel/bindings/go is not published, so without this a program
needs a `replace` line pointing at a checkout. The install puts the module here at the library's
own version (share/libaccel/goproxy), laid out as the module proxy protocol says
(<module>/@v/list, vX.Y.Z.info, .mod, .zip), so a program requires that tagged version like any
other module:

  GOPROXY=file:///opt/accel/share/libaccel/goproxy GONOSUMDB=github.com/libaccel GOFLAGS=-mod=mod

The zip holds the module's tracked files (git ls-files) under <module>@vX.Y.Z/, as `go mod
download` would make them from a tag bindings/go/vX.Y.Z; the files of this checkout, so go.sum
records this install's hash.

  tools/go_module_proxy.py OUTDIR VERSION   (VERSION as 0.2.4)
"""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_DIR = ROOT / "bindings/go"
# The commit's time is the version's time (stable across installs of one commit).
EPOCH = "1980-01-01T00:00:00Z"


def module_path():
    for line in (MODULE_DIR / "go.mod").read_text().splitlines():
        if line.startswith("module "):
            return line.split()[1]
    sys.exit("go_module_proxy: bindings/go/go.mod names no module")


def module_files():
    """The module's files: tracked ones when this is a git checkout, else every file."""
    try:
        out = subprocess.run(["git", "-C", str(MODULE_DIR), "ls-files", "-z", "."],
                             check=True, capture_output=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(MODULE_DIR)) for p in MODULE_DIR.rglob("*") if p.is_file()]
    # A directory with its own go.mod is another module; vendor/ is never part of one.
    nested = {str(Path(n).parent) for n in names if Path(n).name == "go.mod" and Path(n).parent != Path(".")}
    keep = []
    for n in sorted(names):
        parts = Path(n).parts
        if "vendor" in parts[:-1] or any(n.startswith(d + "/") for d in nested):
            continue
        if (MODULE_DIR / n).is_file():
            keep.append(n)
    return keep


def commit_time():
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%cI"], check=True,
                             capture_output=True, text=True).stdout.strip()
        return out or EPOCH
    except (OSError, subprocess.CalledProcessError):
        return EPOCH


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, version = Path(sys.argv[1]), "v" + sys.argv[2].lstrip("v")
    module = module_path()
    at = out / module / "@v"
    at.mkdir(parents=True, exist_ok=True)
    (at / f"{version}.mod").write_bytes((MODULE_DIR / "go.mod").read_bytes())
    (at / f"{version}.info").write_text(json.dumps({"Version": version, "Time": commit_time()}) + "\n")
    with zipfile.ZipFile(at / f"{version}.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for name in module_files():
            info = zipfile.ZipInfo(f"{module}@{version}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, (MODULE_DIR / name).read_bytes())
    listed = at / "list"
    versions = set(listed.read_text().split()) if listed.exists() else set()
    listed.write_text("\n".join(sorted(versions | {version})) + "\n")
    print(f"go module {module}@{version} in {out}")


if __name__ == "__main__":
    main()
