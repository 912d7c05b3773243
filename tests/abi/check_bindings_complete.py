#!/usr/bin/env python3
"""Every C function of accel.h is bound by every binding, or left out on purpose, with the reason.

For each function of include/accel/accel.h (as tools/gen_raw.py reads it) this looks for a use in
the code (comments and docstrings stripped) of:

  rust   bindings/rust/libaccel/src/*.rs             the safe crate (libaccel-sys declares all)
  go     bindings/go/accel/*.go (not tests), shim.c   cgo's C.accel_x, or the C shim's call
  julia  bindings/julia/Accel/src/*.jl but generated.jl   a call of the generated accel_x(...)
  cpp    include/accel/accel.hpp                      the C++ wrapper

A function a binding does not use is listed in bindings/left_out.txt, one line each:
`language function reason`. The check fails on a function neither used nor listed, and on a
stale line: a function the binding does use, one the header does not have, a language it does
not know, a line without a reason, or a line twice.

  tests/abi/check_bindings_complete.py           (ctest abi.bindings_complete)
  tests/abi/check_bindings_complete.py --list    what each binding leaves out, from the code
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gen_raw  # noqa: E402  (the header's one reader)

LEFT_OUT = ROOT / "bindings/left_out.txt"


def strip_c_like(text):
    """C, C++, Go and Rust code without its comments (string literals are kept as they are)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text[i] in "\"`":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote:
                j += 2 if text[j] == "\\" and quote == '"' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def strip_julia(text):
    """Julia code without comments and docstrings ("\"\"...\"\"\"" blocks)."""
    text = re.sub(r'"""(?:.|\n)*?"""', '""', text)
    text = re.sub(r"#=(?:.|\n)*?=#", "", text)
    return "\n".join(re.sub(r'#(?=[^"]*$).*', "", line) for line in text.splitlines())


def sources():
    """The code of each binding, as one text per language."""
    rust = ROOT / "bindings/rust/libaccel/src"
    go = ROOT / "bindings/go/accel"
    julia = ROOT / "bindings/julia/Accel/src"
    return {
        "rust": "\n".join(strip_c_like(p.read_text()) for p in sorted(rust.glob("*.rs"))),
        "go": "\n".join(strip_c_like(p.read_text()) for p in sorted(go.glob("*.go")) + [go / "shim.c"]
                        if not p.name.endswith("_test.go")),
        "julia": "\n".join(strip_julia(p.read_text()) for p in sorted(julia.glob("*.jl"))
                           if p.name != "generated.jl"),
        "cpp": strip_c_like((ROOT / "include/accel/accel.hpp").read_text()),
    }


# What counts as a use, per language: Julia's is a call of the generated function (the SYMBOLS
# tuple and the fp_ pointers are in generated.jl, not read).
USE = {
    "rust": r"\b{name}\b",
    "go": r"\b(?:C\.)?{name}\b",
    "julia": r"\b{name}\(",
    "cpp": r"\b{name}\b",
}


def used(functions):
    code = sources()
    return {lang: {f for f in functions if re.search(USE[lang].format(name=f), text)}
            for lang, text in code.items()}


def read_left_out(functions, problems):
    entries = {}
    for number, line in enumerate(LEFT_OUT.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{LEFT_OUT.relative_to(ROOT)}:{number}"
        parts = line.split(None, 2)
        if len(parts) < 3:
            problems.append(f"{where}: `language function reason` wanted, got {line!r}")
            continue
        lang, name, reason = parts
        if lang not in USE:
            problems.append(f"{where}: unknown language {lang!r} (one of {', '.join(USE)})")
        elif name not in functions:
            problems.append(f"{where}: {name} is no function of accel.h")
        elif (lang, name) in entries:
            problems.append(f"{where}: {lang} {name} is listed twice")
        else:
            entries[(lang, name)] = reason.strip()
    return entries


def main():
    header = gen_raw.parse_header(gen_raw.HEADER.read_text())
    functions = [f.name for f in header.functions]
    uses = used(functions)
    if "--list" in sys.argv:
        for lang in USE:
            for f in functions:
                if f not in uses[lang]:
                    print(lang, f)
        return 0
    problems = []
    entries = read_left_out(set(functions), problems)
    for lang in USE:
        for f in functions:
            if f in uses[lang] and (lang, f) in entries:
                problems.append(f"{lang} {f} is listed in bindings/left_out.txt but the binding "
                                "uses it: remove the line")
            elif f not in uses[lang] and (lang, f) not in entries:
                problems.append(f"{lang} {f}: the binding does not use it; bind it, or list it in "
                                "bindings/left_out.txt with the reason")
    for p in problems:
        print(p)
    counts = {lang: sum(1 for (l, _) in entries if l == lang) for lang in USE}
    print(f"{len(functions)} functions; left out: "
          + ", ".join(f"{lang} {counts[lang]}" for lang in USE))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
