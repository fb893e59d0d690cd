#!/usr/bin/env python3
"""Construction rule of docs/api.md (2.1, 2.3): a static factory in a public header is named create / open /
parse and returns result<T>, T the type itself (not shared_ptr / unique_ptr).

A fallible static factory is a static member function of a class whose return type names that class inside a
result<...> or a smart pointer (result<T>, shared_ptr<T>, result<unique_ptr<T>>, ...). Named constructors
that cannot fail and return the value (tensor::zeros, placement::shard, device::cpu) are not factories in
this sense (docs/api.md 2.2). Public headers: include/jitembed/**.hpp outside detail/.
Factories not yet migrated are listed in scripts/lint/factories_allowlist.txt as `<Class>::<name>` (the rows
of docs/api.md's migration table); the list only shrinks: a line that matches nothing is reported (a warning:
several migrations land at once in this tree) so it is removed.
Usage: factories.py [repo root]
"""
import os
import re
import sys

VERBS = {"create", "open", "parse"}
SMART = re.compile(r"\b(shared_ptr|unique_ptr)\s*<")
CLASS = re.compile(r"\b(class|struct)\s+(?:\[\[[^\]]*\]\]\s*)?(\w+)\s*(?:final\s*)?(?::[^{;]*)?\{")
STATIC = re.compile(r"\bstatic\s+(?:inline\s+|constexpr\s+)*([\w:<>,\s\*&]+?)\s+(\w+)\s*\(")


def strip(text):
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def factories(text):
    """(class, function, return type, line) of every static member function whose return type names its class."""
    text = strip(text)
    events = []  # (pos, kind, data)
    for m in CLASS.finditer(text):
        events.append((m.end() - 1, "open_class", m.group(2)))
    out = []
    stack = []  # (depth at which the class body opened, name)
    depth = 0
    class_at = {p: n for p, k, n in events}
    statics = {m.start(): m for m in STATIC.finditer(text)}
    for i, ch in enumerate(text):
        if i in statics and stack and stack[-1][0] == depth:
            m = statics[i]
            cls, rtype, name = stack[-1][1], " ".join(m.group(1).split()), m.group(2)
            if re.search(r"\b%s\b" % re.escape(cls), rtype):
                out.append((cls, name, rtype, text.count("\n", 0, i) + 1))
        if ch == "{":
            depth += 1
            if i in class_at:
                stack.append((depth, class_at[i]))
        elif ch == "}":
            if stack and stack[-1][0] == depth:
                stack.pop()
            depth -= 1
    return out


def self_test():
    """The parser on a known input, so a regression in it cannot make the lint pass by finding nothing."""
    sample = """
    namespace x {
    class widget {
     public:
      static result<std::shared_ptr<widget>> make(int n) { return {}; }  // not a verb, smart pointer
      static result<widget> create(const options& o);
      static widget zeros();  // named constructor
      struct inner { static std::unique_ptr<inner> open(); };
     private:
      void helper() { static int calls = 0; }
    };
    }"""
    got = [(c, f, r) for c, f, r, _ in factories(sample)]
    want = [("widget", "make", "result<std::shared_ptr<widget>>"), ("widget", "create", "result<widget>"),
            ("widget", "zeros", "widget"), ("inner", "open", "std::unique_ptr<inner>")]
    if got != want:
        print(f"factories.py self-test failed: got {got}, want {want}")
        return False
    return True


def main():
    if not self_test():
        return 1
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    inc = os.path.join(root, "include")
    allowed = {}
    with open(os.path.join(root, "scripts", "lint", "factories_allowlist.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                allowed[line] = False
    errors = []
    count = 0
    for d, dirs, files in os.walk(os.path.join(inc, "jitembed")):
        dirs[:] = sorted(x for x in dirs if x != "detail")
        for name in sorted(files):
            if not name.endswith(".hpp"):
                continue
            path = os.path.join(d, name)
            rel = os.path.relpath(path, inc).replace(os.sep, "/")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for cls, fn, rtype, line in factories(text):
                if "result<" not in rtype and not SMART.search(rtype):
                    continue  # a named constructor that cannot fail
                count += 1
                problems = []
                if fn not in VERBS:
                    problems.append(f"named {fn!r}, not create / open / parse")
                if not rtype.startswith("result<") and not rtype.startswith("jitembed::result<"):
                    problems.append(f"returns {rtype}, not result<{cls}>")
                elif SMART.search(rtype):
                    problems.append(f"returns {rtype}: T in result<T> is the object itself, not a smart pointer")
                if not problems:
                    continue
                key = f"{cls}::{fn}"
                if key in allowed:
                    allowed[key] = True
                    continue
                errors.append(f"include/{rel}:{line}: static factory {key} {'; '.join(problems)} (docs/api.md 2.1, 2.3)")
    stale = [f"warning: scripts/lint/factories_allowlist.txt: {key} is no longer a non-conforming factory: "
             f"remove its line" for key, used in sorted(allowed.items()) if not used]
    for e in errors + stale:
        print(e)
    print(f"factories: {count} fallible static factories in public headers, {len(allowed)} allowed exceptions, "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
