#!/usr/bin/env python3
"""Construction rule 2.2 of docs/api.md: constructors do not throw (other than std::bad_alloc).

A public constructor of a class in a public header (include/jitembed/** outside detail/ and namespace detail)
whose member initializers or body, as written in the header, contain `throw` or call `.value()` (which throws
on a failed result) breaks it: fallible construction is a static create / open / parse returning result<T>
(rule 2.1), the constructor private. What the scan cannot see (a call into a function that throws) is the
reviewer's. The exceptions are listed in scripts/lint/throwing_constructors_allowlist.txt as
`<path under include/>:<Class> <reason>`; a line that matches nothing is reported (a warning) so it is removed.
Usage: throwing_constructors.py [repo root]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cxx_scan  # noqa: E402

THROWS = re.compile(r"\bthrow\b(?!\s+std::bad_alloc\b)|\.\s*value\s*\(\s*\)|\bJITEMBED_\w*_CHECK\s*\(")


def findings(text):
    """(class, line, what) of every public constructor that throws as written."""
    out = []
    for d in cxx_scan.declarations(text):
        if not d.public or d.cls is None or d.opens_class or cxx_scan.declared_name(d) != d.cls:
            continue
        if not cxx_scan.is_function(d):
            continue
        init = d.text.split(")", 1)[1] if ")" in d.text else ""  # the member initializers, after the parameters
        m = THROWS.search(init) or THROWS.search(d.body or "")
        if m:
            out.append((d.cls, d.line, " ".join(m.group(0).split())))
    return out


def self_test():
    sample = """
    namespace x {
    class a { public: explicit a(int n) { if (n < 0) throw error(errc::invalid_argument, "n"); } };
    class b { public: b(const opts& o) : v_(check(o).value()) {} int v_; };
    class c { public: c() = default; c(int n) : n_{n} { helper(); } static result<c> create(int n) { return c(n).value(); } };
    class d { d(int n) { throw 1; } public: d() noexcept {} };
    struct e { e(int n) try : n_(n) {} catch (...) {} int n_; };
    class g { public: explicit g(int n) { if (!p) throw std::bad_alloc(); } };
    struct f { f() { JITEMBED_CUDA_CHECK(cudaMalloc(&p, 4)); } };
    }"""
    got = findings(sample)
    want = [("a", 3, "throw"), ("b", 4, ".value()"), ("f", 9, "JITEMBED_CUDA_CHECK(")]
    if got != want:
        print(f"throwing_constructors.py self-test failed: got {got}, want {want}")
        return False
    return True


def main():
    if not self_test():
        return 1
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    allowed, errors = cxx_scan.read_allowlist(root, "throwing_constructors_allowlist.txt")
    used = set()
    count = 0
    for rel, path in cxx_scan.public_headers(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for cls, line, what in findings(text):
            count += 1
            key = f"{rel}:{cls}"
            if key in allowed:
                used.add(key)
                continue
            errors.append(f"include/{rel}:{line}: a public constructor of {cls} throws ({what}): make it private "
                          f"behind {cls}::create / open / parse returning result<{cls}> (docs/api.md 2.1, 2.2), or an "
                          f"allowlist line with the reason")
    stale = [f"warning: scripts/lint/throwing_constructors_allowlist.txt: {k} matches nothing: remove its line"
             for k in sorted(set(allowed) - used)]
    for e in errors + stale:
        print(e)
    print(f"throwing_constructors: {count} public constructors throw as written, {len(allowed)} allowed, "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
