#!/usr/bin/env python3
"""Construction rule 2.1 of docs/api.md: construction is a static create / open / parse, not a free function.

A free factory is a public free function (namespace scope of a public header, include/jitembed/** outside
detail/ and namespace detail) named make_* / load_* / *_from_json / from_* that returns result<T> or T for a
class type T named in docs/*.md (a documented type: the user constructs it); the rule asks for
`T::create(…)` / `T::open(…)` / `T::parse(…)` instead. Named conversions that cannot fail and helpers that
compute a value (a key, a digest) are not construction: they are listed in scripts/lint/free_factories_allowlist.txt
as `<path under include/>:<name> <reason>` with the ones not yet migrated; a line that matches nothing is
reported (a warning) so it is removed.
Usage: free_factories.py [repo root]
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cxx_scan  # noqa: E402

NAME = re.compile(r"^(?:make_\w+|load_\w+|\w+_from_json|from_\w+)$")
NOT_TYPES = {"void", "bool", "char", "int", "long", "short", "unsigned", "signed", "float", "double", "auto",
             "size_t", "int64_t", "uint64_t", "int32_t", "uint32_t", "uint8_t", "string", "string_view", "vector",
             "optional", "byte"}


def returned_type(d, name):
    """The last identifier of the return type (inside result<…> when it is one), or None."""
    head = d.text.split(name + "(", 1)[0]
    head = re.sub(r"^template\s*<.*?>\s*", "", head)
    head = re.sub(r"\b(inline|static|constexpr|consteval|\[\[[^\]]*\]\]|const|extern)\b", " ", head).strip()
    m = re.match(r"(?:jitembed::)?result\s*<\s*(.*)>\s*$", head)
    t = m.group(1) if m else head
    t = re.sub(r"<.*>", "", t)  # template arguments of the type itself
    ids = re.findall(r"[A-Za-z_]\w*", t)
    return ids[-1] if ids else None


def findings(text, documented):
    out = []
    for d in cxx_scan.declarations(text):
        if not d.public or d.cls is not None or d.opens_class or not cxx_scan.is_function(d):
            continue
        name = cxx_scan.declared_name(d)
        if not NAME.match(name):
            continue
        t = returned_type(d, name)
        tparams = re.findall(r"(?:class|typename|[\w:]+)\s+(\w+)\s*[,>=]", d.text.split(">", 1)[0] + ">") \
            if d.text.startswith("template") else []
        if not t or t in tparams or t in NOT_TYPES or (documented is not None and t not in documented):
            continue
        out.append((name, t, d.line))
    return out


def documented_types(root):
    words = set()
    for path in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for span in re.findall(r"`([^`\n]+)`", f.read()):
                    words.update(re.findall(r"[A-Za-z_]\w*", span))
    return words


def self_test():
    sample = """
    namespace x {
    inline result<model> make_model(std::string_view name) { return {}; }
    inline result<config> load_config(const std::string& path);
    inline result<policy> policy_from_json(const json& j, std::string_view where) { return {}; }
    inline result<void> load_token(config& c);
    inline int make_count();
    template <class T> inline T load_le(const std::byte* p);
    inline axis make_axis(int n);  // not documented
    struct s { static result<s> make(); };
    namespace detail { inline result<model> make_hidden(); }
    }"""
    got = findings(sample, {"model", "config", "policy"})
    want = [("make_model", "model", 3), ("load_config", "config", 4), ("policy_from_json", "policy", 5)]
    if got != want:
        print(f"free_factories.py self-test failed: got {got}, want {want}")
        return False
    return True


def main():
    if not self_test():
        return 1
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    allowed, errors = cxx_scan.read_allowlist(root, "free_factories_allowlist.txt")
    documented = documented_types(root)
    used = set()
    count = 0
    for rel, path in cxx_scan.public_headers(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name, t, line in findings(text, documented):
            count += 1
            key = f"{rel}:{name}"
            if key in allowed:
                used.add(key)
                continue
            errors.append(f"include/{rel}:{line}: free function {name} constructs {t}: spell it {t}::create / open / "
                          f"parse (docs/api.md 2.1), or an allowlist line with the reason")
    stale = [f"warning: scripts/lint/free_factories_allowlist.txt: {k} matches nothing: remove its line"
             for k in sorted(set(allowed) - used)]
    for e in errors + stale:
        print(e)
    print(f"free_factories: {count} free functions construct a documented type, {len(allowed)} allowed, "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
