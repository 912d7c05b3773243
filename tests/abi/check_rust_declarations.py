#!/usr/bin/env python3
"""libaccel-sys's declarations against accel.h, by a C compiler, as git2-rs's systest does.

Reads every item of bindings/rust/libaccel-sys/src/generated.rs (functions, callback types,
enumeration types, constants), turns each back into C on its own (Rust types to C types, not the
generator's mapping in reverse), and compiles one C file against the installed-style header with
-Werror: a function is assigned to a pointer of the type Rust declares (a parameter's type, its
constness or a return type that differs is an incompatible pointer), a callback type and an
enumeration type must be the same type as the header's, a constant must have the header's value.
Exit 0 when all agree; otherwise the compiler's messages name the item.

  check_rust_declarations.py <repo root> <work dir> [cc]
"""
import re
import subprocess
import sys
from pathlib import Path

C_BASE = {
    "c_void": "void", "c_char": "char", "c_int": "int", "bool": "bool", "f32": "float",
    "f64": "double", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t", "usize": "size_t",
}


def c_type(rust):
    """`*const *mut c_void` -> `void* const*`: pointers read outermost first in Rust."""
    tokens = re.findall(r"\*const|\*mut|[A-Za-z_][A-Za-z0-9_]*", rust)
    pointers, base = tokens[:-1], tokens[-1]
    if any(t not in ("*const", "*mut") for t in pointers):
        raise ValueError(f"unexpected Rust type {rust!r}")
    out = C_BASE.get(base, base)
    for i, tok in enumerate(reversed(pointers)):
        const = tok == "*const"
        out = (f"const {out}*" if const else f"{out}*") if i == 0 else \
              (f"{out} const*" if const else f"{out}*")
    return out


def split_params(text):
    text = " ".join(text.split()).strip().rstrip(",")
    if not text:
        return []
    return [c_type(p.split(":", 1)[1].strip()) for p in text.split(",")]


def c_return(ret):
    return c_type(ret.strip()) if ret else "void"


def main():
    root, work = Path(sys.argv[1]), Path(sys.argv[2])
    cc = sys.argv[3] if len(sys.argv) > 3 else "cc"
    rust = (root / "bindings/rust/libaccel-sys/src/generated.rs").read_text()
    rust = re.sub(r"^\s*//.*$", "", rust, flags=re.M)
    lines = ["#include <stdbool.h>", "#include <stddef.h>", "#include <stdint.h>",
             "#include <accel/accel.h>", ""]
    counts = {"function": 0, "callback": 0, "type": 0, "constant": 0}
    for m in re.finditer(r"pub fn (\w+)\((.*?)\)\s*(?:->\s*([^;]+))?;", rust, re.S):
        name, params, ret = m.group(1), split_params(m.group(2)), m.group(3)
        args = ", ".join(params) or "void"
        lines.append(f"static {c_return(ret)} (*const check_{name})({args}) = {name};")
        counts["function"] += 1
    cb = r"pub type (\w+) =\s*Option<\s*unsafe extern \"C\" fn\((.*?)\)\s*(?:->\s*([^,>]+?))?,?\s*>;"
    for m in re.finditer(cb, rust, re.S):
        name, params, ret = m.group(1), split_params(m.group(2)), m.group(3)
        args = ", ".join(params) or "void"
        lines.append(f"typedef {c_return(ret)} (*rust_{name})({args});")
        lines.append(f"_Static_assert(__builtin_types_compatible_p(rust_{name}, {name}), "
                     f"\"{name}: Rust's callback type is not the header's\");")
        counts["callback"] += 1
    for m in re.finditer(r"pub type (\w+) = (\w+);", rust):
        name, base = m.groups()
        lines.append(f"_Static_assert(__builtin_types_compatible_p({name}, {C_BASE[base]}), "
                     f"\"{name}: Rust says {base}\");")
        counts["type"] += 1
    for m in re.finditer(r"pub const (ACCEL_\w+): \w+ =\s*(\d+);", rust):
        name, value = m.groups()
        lines.append(f"_Static_assert({name} == {value}, \"{name}: Rust says {value}\");")
        counts["constant"] += 1
    source = work / "rust_declarations_check.c"
    work.mkdir(parents=True, exist_ok=True)
    source.write_text("\n".join(lines) + "\n")
    done = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic-errors",
                           "-Wno-unused-const-variable", "-I", str(root / "include"), "-c",
                           str(source), "-o", str(work / "rust_declarations_check.o")],
                          capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout + done.stderr)
        print(f"libaccel-sys disagrees with accel.h (the C file: {source})")
        return 1
    # Nothing left out: the header's names of each kind, read from the header itself.
    header = (root / "include/accel/accel.h").read_text()
    kinds = {
        "functions": (re.findall(r"ACCEL_API[^;(]*?\b(accel_\w+)\(", header),
                      re.findall(r"pub fn (accel_\w+)\(", rust)),
        "constants": (re.findall(r"^\s*(ACCEL_[A-Z0-9_]+)\s*=", header, re.M)
                      + re.findall(r"#define (ACCEL_(?:MAX_\w+|RAGGED|VERSION_(?:MAJOR|MINOR|PATCH|NUMBER)))\b", header),
                      re.findall(r"pub const (ACCEL_\w+):", rust)),
        "callback and enumeration types": (
            re.findall(r"typedef [^;(]*\(\*(accel_\w+)\)", header)
            + re.findall(r"typedef u?int32_t (accel_\w+);", header),
            re.findall(r"pub type (accel_\w+) =", rust)),
        "handle types": (re.findall(r"typedef struct \w+ (accel_\w+);", header),
                         re.findall(r"pub struct (accel_\w+)", rust)),
    }
    missing = False
    for kind, (in_header, in_rust) in kinds.items():
        only_header, only_rust = set(in_header) - set(in_rust), set(in_rust) - set(in_header)
        if only_header or only_rust:
            print(f"{kind} only in the header: {sorted(only_header)}; only in Rust: {sorted(only_rust)}")
            missing = True
    if missing:
        return 1
    print("libaccel-sys agrees with accel.h: " +
          ", ".join(f"{n} {k}s" for k, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
