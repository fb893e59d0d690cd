#!/usr/bin/env python3
"""Construction rules 2.3 / 2.4 of docs/api.md: no std::shared_ptr in a public signature.

A public signature is a declaration at namespace scope, or in the public part of a class, of a public header
(include/jitembed/** outside detail/, outside namespace detail): a function's parameters and return type, or a
data member's type, spelled `std::shared_ptr<…>`. Shared ownership is a cheap-to-copy handle type whose copies
refer to one object (rule 2.4); owners kept alive on a caller's behalf are `jitembed::keep_alive`
(core/buffer.hpp). The exceptions are listed in scripts/lint/shared_ptr_allowlist.txt as
`<path under include/>:<Class>::<name> <reason>` (`<path>:<name>` at namespace scope); every line has a reason,
and a line that matches nothing is reported (a warning) so it is removed.
Usage: shared_ptr_signatures.py [repo root]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cxx_scan  # noqa: E402

SHARED = re.compile(r"\bstd::shared_ptr\s*<")


def findings(text):
    """(key without the path, line) of every public declaration spelling std::shared_ptr."""
    out = []
    for d in cxx_scan.declarations(text):
        if not d.public or d.opens_class or not SHARED.search(d.text):
            continue
        if re.match(r"(?:template\s*<.*?>\s*)?(?:using|typedef|friend|static_assert)\b", d.text):
            continue  # an alias names the type; a friend is not a member
        out.append((f"{d.cls}::{cxx_scan.declared_name(d)}" if d.cls else cxx_scan.declared_name(d), d.line))
    return out


def self_test():
    sample = """
    namespace x {
    struct owner_like { std::shared_ptr<const void> owner; int n = 0; };
    class widget {
     public:
      static result<widget> create(std::shared_ptr<store> st, int rank);
      const std::shared_ptr<ctx>& context() const noexcept { return c_; }
      widget(std::unique_ptr<int> p) : p_{std::move(p)} {}
      using handle = std::shared_ptr<int>;
     private:
      std::shared_ptr<ctx> c_;
      static std::shared_ptr<int> helper() { return {}; }
    };
    inline std::shared_ptr<std::byte> allocate(std::size_t n) { return {}; }
    namespace detail { inline std::shared_ptr<int> hidden(); }
    }"""
    got = findings(sample)
    want = [("owner_like::owner", 3), ("widget::create", 6), ("widget::context", 7), ("allocate", 14)]
    if got != want:
        print(f"shared_ptr_signatures.py self-test failed: got {got}, want {want}")
        return False
    return True


def main():
    if not self_test():
        return 1
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    allowed, errors = cxx_scan.read_allowlist(root, "shared_ptr_allowlist.txt")
    used = set()
    count = 0
    for rel, path in cxx_scan.public_headers(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name, line in findings(text):
            count += 1
            key = f"{rel}:{name}"
            if key in allowed:
                used.add(key)
                continue
            errors.append(f"include/{rel}:{line}: {name} has std::shared_ptr in a public signature: a handle type "
                          f"(rule 2.4) or jitembed::keep_alive, or an allowlist line with the reason (docs/api.md 2.3, 2.4)")
    stale = [f"warning: scripts/lint/shared_ptr_allowlist.txt: {k} matches nothing: remove its line"
             for k in sorted(set(allowed) - used)]
    for e in errors + stale:
        print(e)
    print(f"shared_ptr_signatures: {count} public declarations spell std::shared_ptr, {len(allowed)} allowed, "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
