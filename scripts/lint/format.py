#!/usr/bin/env python3
"""The files in scripts/lint/format_files.txt are formatted as .clang-format says (clang-format-14 --dry-run).

Not the whole tree: most files predate .clang-format, and reformatting them all at once would collide with every
change in flight. The list holds the files that were clean when the style was set; a file joins it once
formatted. Exit 77 (skipped) when clang-format-14 is not installed (it is in the development set).
Usage: format.py [repo root] [--clang-format PATH]
"""
import os
import shutil
import subprocess
import sys


def main():
    args = sys.argv[1:]
    exe = None
    if "--clang-format" in args:
        i = args.index("--clang-format")
        exe = args[i + 1]
        del args[i:i + 2]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    exe = exe or shutil.which("clang-format-14")
    if not exe:
        print("format: clang-format-14 not found: skipped")
        return 77
    files, errors = [], []
    with open(os.path.join(root, "scripts", "lint", "format_files.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if not os.path.exists(os.path.join(root, line)):
                errors.append(f"scripts/lint/format_files.txt: {line} does not exist: remove its line")
            else:
                files.append(line)
    if files:
        r = subprocess.run([exe, "--dry-run", "-Werror", "--style=file"] + files, cwd=root, capture_output=True, text=True)
        if r.returncode != 0:
            bad = sorted({l.split(":", 1)[0] for l in r.stderr.splitlines() if "-Wclang-format-violations" in l})
            errors += [f"{p}: not formatted: clang-format-14 -i {p}" for p in bad] or [r.stderr.strip()]
    for e in errors:
        print(e)
    print(f"format: {len(files)} files checked, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
