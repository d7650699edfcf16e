#!/usr/bin/env python3
"""Check that every relative link in the project's Markdown resolves.

Usage: python3 tools/check-links.py [FILE.md ...]
    (default: README.md, docs/*.md, deploy/README.md, k8s/README.md)

For each inline link `[text](target)` and reference definition `[id]: target`
outside code: a target with a scheme (https:, mailto:, ...) is skipped; any
other must name a file or directory inside the repository, and a `#fragment`
must name a heading of the Markdown file it points to (GitHub's anchors:
lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats).
Exits 1 and lists every broken link, else prints how many links it checked.
Standard library only; runs in well under a second.
"""

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = ["README.md", "docs/*.md", "deploy/README.md", "k8s/README.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield n, line


def slug(heading):
    s = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading)
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link in a heading: its text
    s = s.strip().lower()
    s = "".join(c for c in s if c.isalnum() or c in " -_")
    return s.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, out = {}, set()
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.add(base if k == 0 else f"{base}-{k}")
        _anchors[path] = out
    return _anchors[path]


def links(path):
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        m = REF_DEF.match(line)
        if m:
            yield n, m.group(1)
            continue
        for m in INLINE_LINK.finditer(INLINE_CODE.sub("", line)):
            yield n, m.group(1)


def check(path):
    errors, count = [], 0
    rel = path.relative_to(REPO)
    for n, target in links(path):
        if SCHEME.match(target):
            continue
        count += 1
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{rel}:{n}: {target}"
        if REPO != dest and REPO not in dest.parents:
            errors.append(f"{where}: points outside the repository")
        elif not dest.exists():
            errors.append(f"{where}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            errors.append(f"{where}: no heading with anchor #{fragment} in {dest.relative_to(REPO)}")
    return errors, count


def main(argv):
    names = argv or DEFAULT
    files = sorted({p for name in names for p in REPO.glob(name)} if not argv else {Path(a).resolve() for a in argv})
    if not files:
        print("check-links: no Markdown files found", file=sys.stderr)
        return 1
    errors, count = [], 0
    for f in files:
        e, c = check(f)
        errors += e
        count += c
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check-links: {len(errors)} broken of {count} relative links in {len(files)} files", file=sys.stderr)
        return 1
    print(f"check-links: {count} relative links in {len(files)} files, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
