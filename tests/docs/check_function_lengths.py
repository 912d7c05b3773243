#!/usr/bin/env python3
"""Fails when a function defined in src/**/*.cpp or src/**/*.hpp is longer than MAX_LINES.

Length is the number of lines from the body's opening brace to its closing brace, both counted
(issue 49's measure), found by brace matching on the source with comments, string and
character literals (raw strings too) and preprocessor lines blanked out. Functions are the brace
blocks that open at namespace or class scope after a parameter list, so member functions defined
in class bodies count too; lambdas count as part of the function that holds them.

Usage: check_function_lengths.py <source root>. Python's standard library only.
"""

import os
import re
import sys

MAX_LINES = 80

# (path under the source root, function name): why it may be longer. Remove an entry when the
# function is split. Empty since issue 49.
ALLOWED = {}

IDENT = re.compile(r"[A-Za-z_]\w*")
RAW_PREFIX = re.compile(r"(?:u8|u|U|L)?R$")


def blank(text):
    """`text` with comments, literals' contents and preprocessor lines replaced by spaces; the
    newlines stay, so offsets and line numbers are those of the file."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # nothing but whitespace since the last newline

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its backslash continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == '"':
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
                k -= 1
            if RAW_PREFIX.search(text[k:i]):  # R"delim( ... )delim"
                paren = text.find("(", i)
                delim = text[i + 1 : paren]
                j = text.find(")" + delim + '"', paren)
                j = n if j < 0 else j + len(delim) + 1
                wipe(i + 1, j)
                i = j + 1
            else:
                i = skip_quoted(text, i, '"', wipe)
        elif c == "'":
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
                k -= 1
            if k < i and text[k].isdigit():  # a digit separator: 1'000'000
                i += 1
            else:
                i = skip_quoted(text, i, "'", wipe)
        else:
            i += 1
    return "".join(out)


def skip_quoted(text, i, quote, wipe):
    """Wipes the literal opening at `i` (its quotes stay); returns the offset after it."""
    j = i + 1
    while j < len(text) and text[j] != quote and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    wipe(i + 1, min(j, len(text)))
    return j + 1


def match(code, i):
    """Offset of the brace that closes the one at `i`."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced braces")


def top_level_paren(header):
    """Offset of the first '(' of `header` outside angle brackets, or -1."""
    angle = 0
    for k, ch in enumerate(header):
        if ch == "<" and not header.startswith("<<", k):
            angle += 1
        elif ch == ">" and angle > 0 and not header.startswith(">>", k):
            angle -= 1
        elif ch == "(" and angle == 0:
            return k
    return -1


def close_paren(header, k):
    depth = 0
    for j in range(k, len(header)):
        if header[j] == "(":
            depth += 1
        elif header[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def function_name(header):
    """The function's name when `header` (the text before a '{' at namespace or class scope)
    declares a function, else None."""
    paren = top_level_paren(header)
    if paren < 0 or "=" in header[:paren].replace("operator=", "operator"):
        return None  # no parameter list, or an initializer (a lambda, a table)
    end = close_paren(header, paren)
    if end < 0:
        return None
    before = header[:paren].rstrip()
    names = list(re.finditer(r"(?:operator\s*\S+|~?[A-Za-z_]\w*)$", before))
    if not names:
        return None
    name = names[-1].group(0)
    if name in {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"}:
        return None
    qualified = re.search(r"((?:[A-Za-z_]\w*(?:<[^<>]*>)?::)*)" + re.escape(name) + "$", before)
    return (qualified.group(1) if qualified else "") + name


def in_init_list(header):
    """True when the '{' that ends `header` is a member's brace initializer in a constructor's
    initializer list (`: a_{1}, b_{2} {`), not the body."""
    paren = top_level_paren(header)
    end = close_paren(header, paren) if paren >= 0 else -1
    if end < 0:
        return False
    rest = header[end + 1 :]
    return re.match(r"\s*[^{;]*?(?<!:):(?!:)", rest) is not None and re.search(
        r"[\w>]\s*$", rest
    ) is not None


def functions(code):
    """(name, line of the name, body length) of every function in the blanked source `code`."""
    found = []
    header_start = 0
    i = 0
    while i < len(code):
        c = code[i]
        if c in ";}":
            header_start = i + 1
        elif c == "{":
            header = code[header_start:i]
            if in_init_list(header):
                i = match(code, i) + 1
                continue
            name = function_name(header)
            if name is not None:
                close = match(code, i)
                name_at = header_start + top_level_paren(header)
                length = code.count("\n", i, close) + 1
                found.append((name, code.count("\n", 0, name_at) + 1, length))
                i = close + 1
                header_start = i
                continue
            if re.search(r"\b(namespace|class|struct|union|enum)\b", header) or re.match(
                r'\s*extern\s*"', header
            ):
                header_start = i + 1  # a scope whose members are looked at in turn
            else:
                i = match(code, i) + 1  # an initializer
                header_start = i
                continue
        i += 1
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    src = os.path.join(root, "src")
    all_functions = []
    for dirpath, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith((".cpp", ".hpp")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                code = blank(f.read())
            try:
                for fn, line, length in functions(code):
                    all_functions.append((rel, line, fn, length))
            except ValueError as e:
                print(f"{rel}: cannot read its functions: {e}")
                return 1
    if not all_functions:
        print(f"no functions found under {src}")
        return 1
    failures = []
    allowed_seen = set()
    for rel, line, fn, length in all_functions:
        if length <= MAX_LINES:
            continue
        key = (rel, fn.split("::")[-1])
        if key in ALLOWED:
            allowed_seen.add(key)
            continue
        failures.append(f"{rel}:{line}: {fn}() is {length} lines long (at most {MAX_LINES})")
    for key in sorted(set(ALLOWED) - allowed_seen):
        print(f"note: {key[0]}: {key[1]}() is allowed to be long but is not: remove its entry")
    if failures:
        print("\n".join(failures))
        print(
            f"{len(failures)} function(s) longer than {MAX_LINES} lines: split them into named "
            "steps, or list them in ALLOWED with a reason"
        )
        return 1
    rel, line, fn, length = max(all_functions, key=lambda f: f[3])
    print(
        f"{len(all_functions)} functions in src/, each at most {MAX_LINES} lines or allowed; "
        f"the longest: {fn}() at {rel}:{line}, {length} lines"
    )
    rel, line, fn, length = max(
        (f for f in all_functions if (f[0], f[2].split("::")[-1]) not in ALLOWED),
        key=lambda f: f[3],
    )
    print(f"the longest not allowed: {fn}() at {rel}:{line}, {length} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
