#!/usr/bin/env python3
"""Every code block of README.md and docs/*.md compiles (C++) or runs (Python): ctest lint/doc_blocks_*.

Blocks: fenced ```cpp / ```c++ and ```python blocks (indented ones inside list items too). Each C++ snippet
(a block and the blocks that continue it) becomes one function body; the snippets of all Markdown files are
one translation unit per required component (--tu-per-file: per file too), their `#include` lines hoisted
to the top, `#line` directives pointing every line back at the Markdown file, so a compiler error reads
`README.md:125:5: error: ...` and the test names the failing block by its fence line.

Why -fsyntax-only: it runs parsing, name lookup, overload resolution, template instantiation and constant
evaluation, which is every way a snippet goes wrong; only code generation and linking are left out (a
snippet is never run: its inputs are declared, not real). One TU per compiler parses the heavy headers
(jit_loader.hpp, server.hpp) once: about a minute per compiler instead of several. Each compiler given
(GCC and Clang) gets the include directories, compile definitions and options of the umbrella target
jitembed::jitembed (written by CMake into a flags file, tests/lint/CMakeLists.txt) and -Werror=narrowing.

A Python block runs with the Python that runs this script (.venv's: the installed jitembed module), in a
fresh namespace per snippet and a fresh temporary directory per file; line numbers of tracebacks are the
Markdown file's. No module: skipped (exit 77), as the bindings tests do.

Markers: an HTML comment right before the fence (blank lines between are allowed), invisible when rendered:

    <!-- doc-block: OPTION; OPTION; ...
    hidden setup code (optional): the inputs a snippet takes as given (`jpeg_bytes`, `latent`, ...)
    -->

OPTIONs:
  continues            the block continues the previous snippet of the file (same function / namespace)
  top-level            the block is declarations at namespace scope (functions, types), not statements
  requires NAME        needs the component NAME (torch, cuda): its flags file must exist, else skipped
                       with a message; `cuda` blocks are compiled by nvcc (the flags file names it)
  no-compile REASON    deliberately not compilable C++ (only pseudo-code); must give a reason; rare
  no-run REASON        a Python block that needs what a test cannot have (a Ray cluster, a server on a
                       fixed port): compiled to bytecode only (syntax), not run; must give a reason

The setup code is placed before the block inside the snippet's function (C++: `#include` lines in it are
hoisted like the block's; Python: run first in the snippet's namespace).
A C++ snippet that is not `top-level` and not a continuation must include a jitembed header itself, so a
reader who copies it knows what to include.

Usage:
  doc_blocks.py cxx ROOT --compiler CXX [--compiler CXX ...] --flags FILE [--flags NAME=FILE ...]
                [--without NAME=REASON ...] [--keep DIR] [--tu-per-file]
  doc_blocks.py python ROOT
  doc_blocks.py list ROOT
Exit: 0 all good, 1 a block failed (its file:line printed), 2 usage, 77 Python blocks skipped (no module).
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import traceback

FENCE_OPEN = re.compile(r"^(\s*)```(cpp|c\+\+|python)\s*$")  # indented: inside a list item
FENCE_ANY = re.compile(r"^\s*```")
MARKER = re.compile(r"^\s*<!--\s*doc-block:(.*)$")
INCLUDE = re.compile(r"^\s*#\s*include\b")
KNOWN = {"continues", "top-level", "requires", "no-compile", "no-run"}


class Block:
    def __init__(self, path, lang, line, code, opts, given, given_line):
        self.path, self.lang, self.line = path, lang, line  # line: 1-based line of the first code line
        self.code, self.opts, self.given, self.given_line = code, opts, given, given_line

    @property
    def where(self):
        return "%s:%d" % (self.path, self.line - 1)  # the fence line


def parse_opts(text, where):
    opts = {}
    for item in [i.strip() for i in text.split(";") if i.strip()]:
        word, _, rest = item.partition(" ")
        if word not in KNOWN:
            raise SystemExit("%s: unknown doc-block option '%s' (known: %s)" % (where, word, ", ".join(sorted(KNOWN))))
        if word in ("no-compile", "no-run", "requires") and not rest.strip():
            raise SystemExit("%s: doc-block option '%s' needs %s" % (where, word, "a name" if word == "requires" else "a reason"))
        opts[word] = rest.strip() or True
    return opts


def extract(root, rel):
    """The code blocks of one Markdown file, with their markers."""
    lines = open(os.path.join(root, rel), encoding="utf-8").read().split("\n")
    blocks, i, pending = [], 0, None  # pending: (opts, given lines, given first line, marker line)
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            start = i
            head = m.group(1)
            given = []
            if "-->" in head:
                head = head[: head.index("-->")]
            else:
                i += 1
                while i < len(lines) and "-->" not in lines[i]:
                    given.append(lines[i])
                    i += 1
                if i == len(lines):
                    raise SystemExit("%s:%d: unterminated doc-block comment" % (rel, start + 1))
                if lines[i].strip() != "-->":
                    raise SystemExit("%s:%d: put the closing --> of a doc-block comment on its own line" % (rel, i + 1))
            pending = (parse_opts(head, "%s:%d" % (rel, start + 1)), given, start + 2, start + 1)
            i += 1
            continue
        fm = FENCE_OPEN.match(line)
        if fm:
            lang = "python" if fm.group(2) == "python" else "cpp"
            indent = len(fm.group(1))
            j = i + 1
            while j < len(lines) and not FENCE_ANY.match(lines[j]):
                j += 1
            opts, given, given_line = (pending[0], pending[1], pending[2]) if pending else ({}, [], 0)
            code = [l[indent:] if l[:indent].strip() == "" else l for l in lines[i + 1 : j]]
            given = [l[indent:] if l[:indent].strip() == "" else l for l in given]
            blocks.append(Block(rel, lang, i + 2, code, opts, given, given_line))
            pending = None
            i = j + 1
            continue
        if FENCE_ANY.match(line):  # another language: skip its body
            j = i + 1
            while j < len(lines) and not FENCE_ANY.match(lines[j]):
                j += 1
            i = j + 1
            if pending:
                raise SystemExit("%s:%d: a doc-block marker before a block that is not C++ or Python" % (rel, pending[3]))
            continue
        if pending and line.strip():
            raise SystemExit("%s:%d: a doc-block marker must come right before its code block" % (rel, pending[3]))
        i += 1
    return blocks


def markdown_files(root):
    out = ["README.md"]
    out += sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    return out


def snippets(blocks):
    """Blocks grouped into snippets: a block and the `continues` blocks after it (same language)."""
    out = []
    for b in blocks:
        if b.opts.get("continues"):
            prev = [s for s in out if s[0].lang == b.lang]
            if not prev:
                raise SystemExit("%s: 'continues' but no earlier %s block in the file" % (b.where, b.lang))
            prev[-1].append(b)
        else:
            out.append([b])
    return out


# ---- C++ ------------------------------------------------------------------------------------------------

def read_flags(path):
    """A flags file written by CMake: `key value` lines (compiler, include, system_include, define, option)."""
    flags = {"include": [], "system_include": [], "define": [], "option": [], "compiler": []}
    for raw in open(path, encoding="utf-8"):
        key, _, value = raw.rstrip("\n").partition(" ")
        if key in flags and value:
            flags[key].append(value)
    return flags


def flag_args(flags, root):
    """Compiler arguments, each directory once; the project's as -I, others as -isystem (their warnings are
    not ours), the compilers' own default directories left out (-isystem /usr/include breaks #include_next)."""
    args, seen = [], {"/usr/include", "/usr/local/include"}
    for d in flags["include"] + flags["system_include"]:
        d = os.path.normpath(d)
        if d in seen:
            continue
        seen.add(d)
        inside = d.startswith(os.path.abspath(root) + os.sep)
        args += ["-I" + d] if inside else ["-isystem", d]
    for d in flags["define"] + flags["option"]:
        a = d if d.startswith("-") else "-D" + d
        if a not in args:
            args.append(a)
    return args


def line_directive(n, path):
    return '#line %d "%s"' % (n, path)


def translation_unit(snips, root):
    """(source, number of snippets) of one TU: hoisted includes, then one function per snippet."""
    head = ["// generated by scripts/lint/doc_blocks.py: the C++ blocks of one Markdown file", "#include <cstddef>",
            "#include <cstdint>", "#include <iostream>", "#include <string>", "#include <string_view>",
            "#include <utility>", "#include <vector>"]
    body = []
    for k, snip in enumerate(snips):
        top = snip[0].opts.get("top-level")
        if not top:
            body.append("[[maybe_unused]] static void doc_snippet_%d() {" % k)
        for b in snip:
            for first, code in ((b.given_line, b.given), (b.line, b.code)):
                if not code:
                    continue
                kept = []
                for n, text in enumerate(code):
                    if INCLUDE.match(text):
                        head += [line_directive(first + n, b.path), text]
                        kept.append("")
                    else:
                        kept.append(text)
                body += [line_directive(first, b.path)] + kept
        if not top:
            body.append("}")
    return "\n".join(head + body) + "\n"


def check_includes(snip):
    first = snip[0]
    if first.opts.get("top-level") or first.opts.get("continues"):
        return None
    if any(INCLUDE.match(t) and "jitembed/" in t for b in snip for t in b.code):
        return None
    return "%s: the snippet includes no jitembed header (add the #include a reader needs)" % first.where


def run_cxx(args):
    flags = {"": read_flags(args.flags[0])}
    for extra in args.flags[1:]:
        name, _, path = extra.partition("=")
        if not name or not path:
            raise SystemExit("--flags NAME=FILE expected after the first --flags, got '%s'" % extra)
        if os.path.exists(path):
            flags[name] = read_flags(path)
    without = dict(w.partition("=")[::2] for w in args.without)
    failures, skipped, deliberate, compiled, tus = [], [], [], 0, 0
    started = time.monotonic()
    keep = args.keep
    if keep:
        os.makedirs(keep, exist_ok=True)
    groups = {}  # requirement -> snippets of every file: one TU per requirement (or per file, --tu-per-file)
    for rel in markdown_files(args.root):
        for snip in snippets(extract(args.root, rel)):
            if snip[0].lang != "cpp":
                continue
            bad = check_includes(snip)
            if bad:
                failures.append(bad)
                continue
            if snip[0].opts.get("no-compile"):
                deliberate.append("%s: not compiled: %s" % (snip[0].where, snip[0].opts["no-compile"]))
                continue
            need = snip[0].opts.get("requires", "")
            if need in without:
                skipped.append("%s: skipped for this compiler: %s" % (snip[0].where, without[need]))
                continue
            if need not in flags:
                skipped.append("%s: skipped: needs jitembed::%s, not configured in this build" % (snip[0].where, need))
                continue
            groups.setdefault((need, rel if args.tu_per_file else ""), []).append(snip)
    for (need, rel), group in groups.items():
        src = translation_unit(group, args.root)
        tus += 1
        name = "doc_blocks%s%s%s" % ("_" + need if need else "", "_" + re.sub(r"\W", "_", rel) if rel else "",
                                     ".cu" if need == "cuda" else ".cpp")
        files = sorted({s[0].path for s in group})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(keep or tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(src)
            compilers = flags[need]["compiler"] if need == "cuda" else args.compiler
            for cxx in compilers:
                label = os.path.basename(shlex.split(cxx)[0])
                if need == "cuda":  # nvcc has no syntax-only mode that covers device code: compile, keep nothing
                    cmd = shlex.split(cxx) + ["-std=c++20", "-x", "cu", "-c", "-o", os.devnull]
                else:
                    cmd = shlex.split(cxx) + ["-std=c++20", "-fsyntax-only", "-Werror=narrowing"]
                    if "clang" in label:
                        cmd.append("-ferror-limit=200")  # default 20: report every failing block
                cmd += flag_args(flags[need], args.root) + [path]
                t0 = time.monotonic()
                p = subprocess.run(cmd, cwd=args.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                compiled += 1
                print("%-7s %-10s %2d snippet(s) from %d file(s)%s %6.1f s" % (
                    "ok" if p.returncode == 0 else "FAILED", label, len(group), len(files),
                    " [requires " + need + "]" if need else "", time.monotonic() - t0), flush=True)
                if p.returncode != 0:
                    at = {(m.group(1), int(m.group(2))) for m in re.finditer(r"^(\S+\.md):(\d+):(?:\d+:)? (?:fatal )?error", p.stdout, re.M)}
                    where = sorted({blk.where for snip in group for blk in snip for f, n in at if f == blk.path and (
                        blk.line <= n < blk.line + len(blk.code) or blk.given_line <= n < blk.given_line + len(blk.given))})
                    failures.append("%s: %s\n%s" % (label, ", ".join(where) or "errors outside the blocks (see below)",
                                                     tail(p.stdout, 80)))
    for line in deliberate + skipped:
        print(line)
    print("%d translation unit(s), %d compile(s) in %.1f s; %d not compiled on purpose, %d skipped" %
          (tus, compiled, time.monotonic() - started, len(deliberate), len(skipped)))
    if failures:
        print("\nFAILED blocks (the fence line of each; compiler output follows):")
        for f in failures:
            print(f)
        return 1
    return 0


def tail(text, n):
    lines = text.rstrip("\n").split("\n")
    return "\n".join(("  " + l) for l in (lines if len(lines) <= n else lines[:n] + ["  ... (%d more lines)" % (len(lines) - n)]))


# ---- Python ---------------------------------------------------------------------------------------------

def run_python(args):
    try:
        import jitembed  # noqa: F401
    except ImportError as e:
        print("skipped: the jitembed module is not installed for %s (%s); scripts/install-deps.sh python installs it" % (sys.executable, e))
        return 77
    failures, norun, ran = [], [], 0
    root = os.path.abspath(args.root)
    here = os.getcwd()
    for rel in markdown_files(root):
        snips = [s for s in snippets(extract(root, rel)) if s[0].lang == "python"]
        if not snips:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            try:
                for snip in snips:
                    reason = snip[0].opts.get("no-run")
                    ns = {"__name__": "__doc_block__"}
                    try:
                        for b in snip:
                            for first, code in ((b.given_line, b.given), (b.line, b.code)):
                                if not code:
                                    continue
                                obj = compile("\n" * (first - 1) + "\n".join(code) + "\n", os.path.join(root, rel), "exec")
                                if not reason:
                                    exec(obj, ns)
                        if reason:
                            norun.append("%s: compiled, not run: %s" % (snip[0].where, reason))
                        else:
                            ran += 1
                            print("ok      %s" % snip[0].where, flush=True)
                    except BaseException:  # noqa: B902 -- SystemExit from a block is a failure too
                        failures.append("%s:\n%s" % (snip[0].where, tail(traceback.format_exc(), 40)))
                        print("FAILED  %s" % snip[0].where, flush=True)
            finally:
                os.chdir(here)
    for line in norun:
        print(line)
    print("%d Python snippet(s) run, %d compiled only" % (ran, len(norun)))
    if failures:
        print("\nFAILED blocks:")
        for f in failures:
            print(f)
        return 1
    return 0


def run_list(args):
    for rel in markdown_files(args.root):
        for b in extract(args.root, rel):
            print("%s %s %s" % (b.where, b.lang, " ".join("%s=%s" % kv for kv in b.opts.items())))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["cxx", "python", "list"])
    ap.add_argument("root")
    ap.add_argument("--compiler", action="append", default=[])
    ap.add_argument("--flags", action="append", default=[])
    ap.add_argument("--keep", help="write the generated translation units here (debugging)")
    ap.add_argument("--without", action="append", default=[], metavar="NAME=REASON",
                    help="skip the blocks that require NAME with these compilers, for REASON (printed)")
    ap.add_argument("--tu-per-file", action="store_true",
                    help="one TU per Markdown file (default: one for all files, the headers parsed once)")
    args = ap.parse_args()
    if args.mode == "cxx":
        if not args.compiler or not args.flags:
            ap.error("cxx needs --compiler and --flags")
        return run_cxx(args)
    if args.mode == "python":
        return run_python(args)
    return run_list(args)


if __name__ == "__main__":
    sys.exit(main())
