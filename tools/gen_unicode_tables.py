#!/usr/bin/env python3
"""Writes src/text/unicode_tables.cpp: the Unicode data Hugging Face's BERT normaliser and
pre-tokeniser need (src/text/unicode.hpp says what each table is).

Usage: python3 tools/gen_unicode_tables.py [--reference PYTHON] > src/text/unicode_tables.cpp

The tables come from this Python's unicodedata. tokenizers (0.19.1) takes its general categories
(Cc/Cf/Co, Mn, P*) from the Rust crate unicode_categories 0.1.1, whose tables are Unicode 8.0's:
characters assigned or recategorised since then are not marks, punctuation or format characters
there. Python has no Unicode 8.0 tables, so with --reference (a Python with tokenizers installed)
the script asks tokenizers' own BertNormalizer and BertPreTokenizer, character by character,
where they differ from this unicodedata, and writes those characters as corrections (about 500;
the file lists them). NFD, canonical combining classes and lowercasing agree with tokenizers'
(unicode-normalization-alignments, Rust's char::to_lowercase) on every code point; the script
checks that too when given --reference.
"""
import argparse
import subprocess
import sys
import unicodedata as ud

MAX = 0x110000
SURROGATES = range(0xD800, 0xE000)


def code_points():
    return (cp for cp in range(MAX) if cp not in SURROGATES)


def is_other(cp):  # unicode_categories' is_other as tokenizers uses it (Cn is not included)
    return ud.category(chr(cp)) in ("Cc", "Cf", "Co")


def is_mn(cp):
    return ud.category(chr(cp)) == "Mn"


def is_punct(cp):
    return ud.category(chr(cp)).startswith("P")


PROBE = r"""
import sys
from tokenizers import normalizers as N, pre_tokenizers as P
clean = N.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
strip = N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
low = N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True)
pre = P.BertPreTokenizer()
for cp in range(0x110000):
    if 0xD800 <= cp < 0xE000:
        continue
    c = chr(cp)
    pieces = pre.pre_tokenize_str("a" + c + "a")
    print(cp, ascii(clean.normalize_str(c)), ascii(strip.normalize_str(c)), sep="\t", end="\t")
    print(
ascii(low.normalize_str(c)), len(pieces), sep="\t")
"""

WHITESPACE = [*range(0x9, 0xE), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
              0x202F, 0x205F, 0x3000]  # Rust's char::is_whitespace (White_Space)


def reference_corrections(python):
    """Characters whose category tokenizers sees otherwise than this unicodedata."""
    out = subprocess.run([python, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    other, mn, punct, nodecomp = set(), set(), set(), set()
    rows = []
    for line in out.splitlines():
        cp, cleaned, stripped, lowered, pieces = line.split("\t")
        rows.append((int(cp), eval(cleaned), eval(stripped), eval(lowered), int(pieces)))
    for cp, cleaned, stripped, lowered, pieces in rows:
        c = chr(cp)
        if cp in WHITESPACE:
            if cleaned not in ("", " ") or pieces != 2:
                sys.exit(f"U+{cp:04X}: whitespace differs from tokenizers'")
            continue
        if cp not in (0, 0xFFFD) and (cleaned == "") != is_other(cp):
            other.add(cp)
        if ud.normalize("NFD", c) == c and (stripped == "") != is_mn(cp):
            mn.add(cp)  # a mark of its own; decomposed characters are checked below
        if lowered != c.lower():
            sys.exit(f"U+{cp:04X}: lowercase differs from tokenizers': {lowered!r}")
        ascii_punct = cp < 128 and c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
        if (pieces == 3) != (is_punct(cp) or ascii_punct):
            punct.add(cp)
    for cp, _, stripped, _, _ in rows:
        ours = "".join(x for x in ud.normalize("NFD", chr(cp)) if not (is_mn(ord(x)) ^ (ord(x) in mn)))
        if stripped != ours and stripped == chr(cp) and not is_mn(cp):
            nodecomp.add(cp)  # decomposed since the crate's tables were made
        elif stripped != ours:
            sys.exit(f"U+{cp:04X}: NFD without marks differs from tokenizers': {stripped!r} {ours!r}")
    return other, mn, punct, nodecomp


def ranges(pred):
    out, start, prev = [], None, None
    for cp in range(MAX):
        if cp not in SURROGATES and pred(cp):
            if start is None:
                start = cp
            prev = cp
        elif start is not None and cp not in SURROGATES:
            out.append((start, prev))
            start = None
    if start is not None:
        out.append((start, prev))
    return out


def emit_ranges(name, rs):
    print(f"const Range {name}[] = {{")
    line = " "
    for lo, hi in rs:
        item = f" {{0x{lo:X}, 0x{hi:X}}},"
        if len(line) + len(item) > 100:
            print(line)
            line = " "
        line += item
    print(line)
    print("};")
    print(f"const size_t {name}_count = sizeof({name}) / sizeof({name}[0]);")
    print()


def emit_u32(name, values):
    print(f"const char32_t {name}[] = {{")
    line = " "
    for v in values:
        item = f" 0x{v:X},"
        if len(line) + len(item) > 100:
            print(line)
            line = " "
        line += item
    print(line)
    print("};")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", help="a Python with tokenizers, for Unicode 8.0's categories")
    args = ap.parse_args()
    other, mn, punct, nodecomp = (reference_corrections(args.reference) if args.reference
                                  else (set(), set(), set(), set()))

    # Hangul syllables decompose algorithmically (src/text/unicode.cpp), not from this table.
    decomp = []
    for cp in code_points():
        if 0xAC00 <= cp <= 0xD7A3 or cp in nodecomp:
            continue
        d = ud.normalize("NFD", chr(cp))
        if d != chr(cp):
            decomp.append((cp, [ord(x) for x in d]))
    lower = []
    for cp in code_points():
        low = chr(cp).lower()
        if low != chr(cp):
            lower.append((cp, [ord(x) for x in low]))

    print(f"// Generated by tools/gen_unicode_tables.py from Python {sys.version.split()[0]}'s "
          f"unicodedata (Unicode {ud.unidata_version}). Do not edit.")
    print("// General categories as tokenizers 0.19.1 sees them (its unicode_categories crate has "
          "Unicode 8.0's):")
    print(f"// {len(other)} format/control, {len(mn)} Mn, {len(punct)} punctuation and {len(nodecomp)} "
          "decomposition corrections were read from tokenizers"
          + (" itself." if args.reference else " (none: no --reference)."))
    print("// clang-format off")
    print('#include "text/unicode.hpp"')
    print()
    print("namespace accel::text::tables {")
    print()
    emit_ranges("kOther", ranges(lambda cp: is_other(cp) ^ (cp in other)))
    emit_ranges("kNonspacingMark", ranges(lambda cp: is_mn(cp) ^ (cp in mn)))
    emit_ranges("kPunctuation", ranges(lambda cp: is_punct(cp) ^ (cp in punct)))

    ccc = {}
    for cp in code_points():
        c = ud.combining(chr(cp))
        if c:
            ccc[cp] = c
    print("const CombiningClass kCombiningClass[] = {")
    items = [f" {{0x{cp:X}, {c}}}," for cp, c in sorted(ccc.items())]
    for i in range(0, len(items), 8):
        print(" " + "".join(items[i:i + 8]))
    print("};")
    print("const size_t kCombiningClass_count = sizeof(kCombiningClass) / sizeof(kCombiningClass[0]);")
    print()

    for name, table in (("kDecomposition", decomp), ("kLowercase", lower)):
        pool, entries = [], []
        for cp, seq in table:
            entries.append((cp, len(pool), len(seq)))
            pool.extend(seq)
        emit_u32(f"{name}Pool", pool)
        print(f"const Mapping {name}[] = {{")
        items = [f" {{0x{cp:X}, {off}, {n}}}," for cp, off, n in entries]
        for i in range(0, len(items), 6):
            print(" " + "".join(items[i:i + 6]))
        print("};")
        print(f"const size_t {name}_count = sizeof({name}) / sizeof({name}[0]);")
        print()
    print("}  // namespace accel::text::tables")


if __name__ == "__main__":
    main()
