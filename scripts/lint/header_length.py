#!/usr/bin/env python3
"""Public headers read as the API (docs/api.md, issue 10): no public header over MAX lines.

A public header is a .hpp/.cuh under include/jitembed/ outside any detail/ folder. The headers still over the
limit are listed in scripts/lint/header_length_allowlist.txt (one path a line, relative to include/, '#'
comments); the list only shrinks: an entry that is no longer over the limit, or that no longer exists, is
reported (a warning, not a failure: several changes land at once in this tree) so its line is removed.
Usage: header_length.py [repo root]   (exit 1 on a violation, each printed on its own line)
"""
import os
import sys

MAX = 400


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    inc = os.path.join(root, "include")
    allow_path = os.path.join(root, "scripts", "lint", "header_length_allowlist.txt")
    allowed = set()
    with open(allow_path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(line)
    errors = []
    over = {}
    for d, dirs, files in os.walk(os.path.join(inc, "jitembed")):
        dirs[:] = sorted(x for x in dirs if x != "detail")
        for name in sorted(files):
            if not name.endswith((".hpp", ".cuh")):
                continue
            path = os.path.join(d, name)
            rel = os.path.relpath(path, inc).replace(os.sep, "/")
            with open(path, encoding="utf-8") as f:
                n = sum(1 for _ in f)
            if n > MAX:
                over[rel] = n
    for rel, n in sorted(over.items()):
        if rel not in allowed:
            errors.append(f"{rel}: {n} lines, over {MAX}: move its internals to a detail/ header "
                          f"(or, for now, list it in scripts/lint/header_length_allowlist.txt)")
    stale = [f"warning: scripts/lint/header_length_allowlist.txt: {rel} is not over {MAX} lines (or is gone): "
             f"remove it from the list" for rel in sorted(allowed - set(over))]
    for e in errors + stale:
        print(e)
    print(f"header_length: {len(over)} public headers over {MAX} lines, {len(allowed)} allowed, "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
