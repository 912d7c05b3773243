#!/usr/bin/env python3
"""Every relative link of the documentation resolves, and README.md stays the front door.

Checks README.md, bindings/README.md and docs/*.md: each relative link (inline `[text](target)`,
images, and reference definitions `[name]: target`) names a file or directory that exists, and a
`#anchor` on a Markdown file (or on the page itself) names one of its headings, slugged as GitHub
slugs them. Links inside code (fenced blocks and `inline spans`) are not links and are skipped;
links with a scheme (https:, mailto:, ...) are not checked. README.md must be at most
README_MAX_LINES lines.

Usage: check_links.py [REPOSITORY_ROOT]   (default: two directories above this file)
Prints each broken link as file:line: message and exits 1; else prints the count and exits 0.
Python 3 standard library only.
"""
import glob
import os
import re
import sys

README_MAX_LINES = 480

INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def prose_lines(text):
    """(line number, the line with code removed) for each line outside fenced code blocks.

    Inline code spans are blanked; a span may go on over a line break within a paragraph (a
    blank line ends it, as in CommonMark)."""
    fence = None
    open_ticks = 0  # length of the backtick run that opened a span still open, 0 when none
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if fence is None and match and open_ticks == 0:
            fence = match.group(1)[0] * len(match.group(1))
            continue
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence) and set(stripped) <= {fence[0]}:
                fence = None
            continue
        if not line.strip():
            open_ticks = 0
            yield number, line
            continue
        out = []
        i = 0
        while i < len(line):
            if line[i] == "`":
                j = i
                while j < len(line) and line[j] == "`":
                    j += 1
                run = j - i
                if open_ticks == 0:
                    open_ticks = run
                elif run == open_ticks:
                    open_ticks = 0
                out.append(" " * run)
                i = j
                continue
            out.append(" " if open_ticks else line[i])
            i += 1
        yield number, "".join(out)


def slug(heading):
    """GitHub's anchor for a heading's text: links and emphasis reduced to their text, lower case,
    punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        fence = None
        with open(path, encoding="utf-8") as f:
            for line in f.read().split("\n"):
                match = FENCE.match(line)
                if fence is None and match:
                    fence = match.group(1)[0] * len(match.group(1))
                    continue
                if fence is not None:
                    stripped = line.strip()
                    if stripped.startswith(fence) and set(stripped) <= {fence[0]}:
                        fence = None
                    continue
                heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not heading:
                    continue
                base = slug(heading.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else "%s-%d" % (base, n))
        cache[path] = found
    return cache[path]


def check_file(root, path, problems):
    count = 0
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(path, root)
    for number, line in prose_lines(text):
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        definition = REFERENCE_DEF.match(line)
        if definition:
            targets.append(definition.group(1))
        for target in targets:
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            count += 1
            where = "%s:%d" % (rel, number)
            file_part, _, anchor = target.partition("#")
            if file_part:
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(resolved):
                    problems.append("%s: %s: no such file or directory (%s)"
                                    % (where, target, os.path.relpath(resolved, root)))
                    continue
            else:
                resolved = path
            if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
                if anchor not in anchors(resolved):
                    problems.append("%s: %s: %s has no heading whose anchor is #%s"
                                    % (where, target, os.path.relpath(resolved, root), anchor))
    return count


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                           else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    files = [os.path.join(root, "README.md"), os.path.join(root, "bindings", "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    problems = []
    count = 0
    for path in files:
        if not os.path.isfile(path):
            problems.append("%s: missing" % os.path.relpath(path, root))
            continue
        count += check_file(root, path, problems)
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme_lines = len(f.read().splitlines())
    if readme_lines > README_MAX_LINES:
        problems.append("README.md:%d: README.md has %d lines, more than %d: move a topic to docs/"
                        % (readme_lines, readme_lines, README_MAX_LINES))
    for problem in problems:
        print(problem)
    if problems:
        print("%d problem(s) in %d file(s)" % (len(problems), len(files)))
        return 1
    print("%d relative links in %d files resolve; README.md has %d lines (at most %d)"
          % (count, len(files), readme_lines, README_MAX_LINES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
