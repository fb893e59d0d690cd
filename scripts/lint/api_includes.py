#!/usr/bin/env python3
"""API headers stay light (issue 33): a component's API headers, preprocessed, include none of the headers its
rule forbids (Boost.Beast / Asio, gRPC, another component's internals).

  api_includes.py ROOT --compiler CXX --flags FILE

FILE lists the component's usage requirements as tests/lint/CMakeLists.txt writes them (`include DIR`,
`system_include DIR`, `define NAME[=VALUE]`, `option FLAG`, one a line). Each rule preprocesses every header
of its glob on its own (g++ -E -H), in the build modes it names (separate: JITEMBED_SEPARATE_COMPILATION,
core/config.hpp; header-only: the default), and fails on any included file whose path matches a forbidden
pattern, naming the header, the mode and the chain of includes that brought it in. A control header per rule
must match its pattern, so a rule that can no longer see what it forbids fails instead of passing.
Python standard library only.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

# The loader's API headers: what a trainer includes. jit_loader.hpp and the umbrella include the engine (and the
# client's, with Beast) in header-only mode by design, so they are checked in separate compilation; the others
# never include the client's implementation.
# What format/src.hpp and the cache's own headers compile: the data set's index and readers, the record parser,
# zstd, the cache tiers and value codec (issue 33: a trainer's TU parses only what its API needs).
LIGHT = "the data set's readers, zstd or the cache's internals"
FORBIDDEN = {
    "Boost.Beast / Asio": r"/boost/(beast|asio)\b",
    "gRPC": r"/grpc(pp)?/",
    "the client's internals": r"/jitembed/client/detail/",
    "the loader's internals": r"/jitembed/loader/detail/",
    "the HTTP layer": r"/jitembed/net/http/",
    LIGHT:
        r"/jitembed/format/(detail/(dataset_|record_view_impl|tar|npy)|shard_reader|webdataset|record_builder)"
        r"|/zstd\.h$|/jitembed/cache/(tiered_cache|value)\.hpp$",
}
RULES = [
    {"headers": ["jitembed/loader.hpp", "jitembed/loader/*.hpp"], "skip": ["jitembed/loader/src.hpp"],
     "modes": ["separate"], "forbid": list(FORBIDDEN)},
    # step.hpp includes its own collate() (loader/detail/step_impl.hpp) header-only: not the loader's engine
    {"headers": ["jitembed/loader/options.hpp", "jitembed/loader/stats.hpp", "jitembed/loader/step.hpp",
                 "jitembed/loader/epoch_plan.hpp"],
     "modes": ["header-only"], "forbid": list(FORBIDDEN), "allow": [r"/loader/detail/step_impl\.hpp$"]},
    {"headers": ["jitembed/format/dataset.hpp", "jitembed/client/jit_client.hpp"], "modes": ["separate"],
     "forbid": [LIGHT]},
]
# (header, mode, forbidden kind) that must be found: the patterns still see what they are meant to.
CONTROLS = [
    ("jitembed/loader/src.hpp", "separate", "the loader's internals"),
    ("jitembed/client/src.hpp", "separate", "Boost.Beast / Asio"),
    ("jitembed/format/src.hpp", "separate", LIGHT),
]


def read_flags(path):
    """The flags, each once; the compiler's own directories are left out (-I/usr/include breaks #include_next)."""
    prefix = {"include": ["-I"], "system_include": ["-isystem", ""], "define": ["-D"], "option": [""]}
    seen = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition(" ")
            if key in prefix and value and value not in ("/usr/include", "/usr/local/include") and (key, value) not in seen:
                seen.append((key, value))
    args = []
    for key, value in seen:
        p = prefix[key]
        args += [p[0] + value] if len(p) == 1 else [p[0], value]
    return args


def included(compiler, flags, root, header, mode):
    """The files `header` includes, each with the chain that reached it: [(path, [outer, ..., path])]."""
    defs = ["-DJITEMBED_SEPARATE_COMPILATION"] if mode == "separate" else []
    cmd = [compiler, "-std=c++20", "-x", "c++", "-E", "-H", "-o", os.devnull, "-I" + os.path.join(root, "include")] + flags + defs
    cmd.append(os.path.join(root, "include", header))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"api_includes: {header} ({mode}) does not preprocess:\n{r.stderr[-2000:]}")
    out, stack = [], [header]
    for line in r.stderr.splitlines():
        m = re.match(r"^(\.+) (.*)$", line)
        if not m:
            continue
        depth, path = len(m.group(1)), os.path.normpath(m.group(2))
        del stack[depth:]
        stack.append(path)
        out.append((path, list(stack)))
    return out


def short(p, root):
    inc = os.path.join(root, "include") + os.sep
    return p[len(inc):] if p.startswith(inc) else p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--flags", required=True)
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    flags = read_flags(a.flags)
    inc = os.path.join(root, "include")
    errors, checked = [], 0
    for rule in RULES:
        headers = []
        for g in rule["headers"]:
            headers += sorted(os.path.relpath(p, inc).replace(os.sep, "/") for p in glob.glob(os.path.join(inc, g)))
        if not headers:
            errors.append(f"no header matches {rule['headers']}")
        for h in dict.fromkeys(headers):
            if h in rule.get("skip", []):
                continue
            for mode in rule["modes"]:
                checked += 1
                for path, chain in included(a.compiler, flags, root, h, mode):
                    if any(re.search(p, path) for p in rule.get("allow", [])):
                        continue
                    for kind in rule["forbid"]:
                        if re.search(FORBIDDEN[kind], path):
                            errors.append(f"{h} ({mode}) includes {kind}: " + " -> ".join(short(p, root) for p in chain))
                            break
    for h, mode, kind in CONTROLS:
        if not any(re.search(FORBIDDEN[kind], p) for p, _ in included(a.compiler, flags, root, h, mode)):
            errors.append(f"control: {h} ({mode}) should include {kind} and the pattern finds none: is the rule stale?")
    # one line per header: the first chain is enough to act on
    seen = set()
    for e in errors:
        key = e.split(":")[0]
        if key not in seen:
            seen.add(key)
            print("api_includes: " + e)
    if errors:
        return 1
    print(f"api_includes: {checked} header builds include no forbidden header; {len(CONTROLS)} controls see theirs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
