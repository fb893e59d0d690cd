"""A small C++ declaration scanner for the API lints (Python standard library only).

Not a parser: it strips comments, string and character literals and preprocessor lines, then walks the braces
of a header and yields every declaration at namespace or class scope with the class it is in, that class's
current access (public / protected / private) and, for a function defined in place, its body. Enough for the
shapes the public headers use (the lints' self-tests pin them); a construct it misreads shows up as a false
report, which an allowlist line (with its reason) or a clearer spelling settles.
"""
import os
import re

_CLASS_HEAD = re.compile(r"(?:^|[\s>])(class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?(?:alignas\s*\([^)]*\)\s*)?"
                         r"([A-Za-z_]\w*)\s*(?:final\s*)?(?::(?!:)[^{;]*)?$", re.S)
_NAMESPACE_HEAD = re.compile(r"(?:^|\s)namespace(\s+[\w:]+)?\s*$")
_ENUM_HEAD = re.compile(r"(?:^|\s)enum\b")


def strip(text):
    """Comments, literals and preprocessor lines blanked (newlines kept, so offsets map to the same lines);
    a literal keeps its quotes (\"\" or '')."""
    pat = re.compile(r'/\*.*?\*/|//[^\n]*|R"([^(\s]*)\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)

    def blank(m):
        s = re.sub(r"[^\n]", " ", m.group(0))
        q = m.group(0).lstrip("R")[:1]
        return s if q == "/" else q + q + s[2:]

    text = pat.sub(blank, text)
    return re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


class decl:
    """One declaration: text (whitespace collapsed), line, cls (None at namespace scope), access, body (or None),
    kind of the scope ('namespace' or 'class')."""

    def __init__(self, text, line, cls, access, body, exposed=True):
        self.text, self.line, self.cls, self.access, self.body = text, line, cls, access, body
        self.exposed = exposed  # not inside a detail namespace nor a non-public nested class
        self.opens_class = None

    @property
    def public(self):
        return self.exposed and (self.cls is None or self.access == "public")

    def __repr__(self):
        return f"decl({self.text!r}, line={self.line}, cls={self.cls!r}, access={self.access!r}, body={self.body!r})"


def _match_brace(text, i):
    """Index just past the '}' that closes the '{' at i."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def declarations(text, stripped=False):
    """Every declaration at namespace or class scope of a header (see the module comment). A class head is
    yielded too (its decl has opens_class set)."""
    if not stripped:
        text = strip(text)
    out = []
    stack = [["namespace", None, None, True]]  # [kind, class name, access, exposed]; the file is a namespace scope
    start = 0  # where the current declaration began
    paren = 0
    i, n = 0, len(text)

    def emit(end, body=None, opens=None):
        raw = text[start:end]
        t = " ".join(raw.split())
        if not t:
            return
        lead = len(raw) - len(raw.lstrip())
        kind, cls, access, exposed = stack[-1] if opens is None else stack[-2]
        d = decl(t, text.count("\n", 0, start + lead) + 1, cls if kind == "class" else None, access, body, exposed)
        d.opens_class = opens
        out.append(d)

    while i < n:
        c = text[i]
        if c == "(":
            paren += 1
        elif c == ")":
            paren = max(paren - 1, 0)
        elif paren:
            pass
        elif c == ";":
            emit(i)
            start = i + 1
        elif c == ":" and stack[-1][0] == "class" and text[i + 1:i + 2] != ":" and text[i - 1:i] != ":" \
                and text[start:i].strip() in ("public", "protected", "private"):
            stack[-1][2] = text[start:i].strip()
            start = i + 1
        elif c == "{":
            flat = " ".join(text[start:i].split())
            ns = _NAMESPACE_HEAD.search(flat)
            if ns or flat.startswith('extern ""'):
                name = (ns.group(1) or "").strip() if ns else ""
                stack.append(["namespace", None, None, stack[-1][3] and "detail" not in name.split("::")])
                start = i + 1
            elif _CLASS_HEAD.search(flat) and not _ENUM_HEAD.search(flat):
                m = _CLASS_HEAD.search(flat)
                top = stack[-1]
                exposed = top[3] and (top[0] == "namespace" or top[2] == "public")
                stack.append(["class", m.group(2), "private" if m.group(1) == "class" else "public", exposed])
                emit(i, opens=m.group(2))
                start = i + 1
            else:
                end = _match_brace(text, i)
                after = text[end:end + 200].lstrip()[:1]
                ctor_init = re.search(r"\)\s*(?:noexcept\s*)?:(?!:)", flat)
                pre = re.sub(r"\boperator\s*(?:\(\)|[^\s(]+)", "operator", flat).split("(")[0]
                if (_ENUM_HEAD.search(flat) or "(" not in flat or "=" in pre
                        or (ctor_init and after in (",", "{"))):
                    # an enum body, a brace or aggregate initializer, a lambda initializer, a brace member
                    # initializer of a constructor: part of the declaration
                    i = end
                    continue
                emit(i, text[i + 1:end - 1])
                i = end
                start = i  # a function definition ends the declaration; a `;` after it is empty
                continue
        elif c == "}":
            emit(i)
            if len(stack) > 1:
                stack.pop()
            start = i + 1
        i += 1
    emit(n)
    return out


def public_headers(root, exts=(".hpp", ".cuh")):
    """(path relative to include/, absolute path) of every public header: include/jitembed/** outside detail/."""
    inc = os.path.join(root, "include")
    for d, dirs, files in os.walk(os.path.join(inc, "jitembed")):
        dirs[:] = sorted(x for x in dirs if x != "detail")
        for name in sorted(files):
            if name.endswith(exts):
                path = os.path.join(d, name)
                yield os.path.relpath(path, inc).replace(os.sep, "/"), path


def read_allowlist(root, name):
    """{key: reason} from scripts/lint/<name>: `<key> <reason>` a line, '#' comments. A line without a reason
    is an error (every exception says why it is one)."""
    allowed, errors = {}, []
    path = os.path.join(root, "scripts", "lint", name)
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, _, reason = line.partition(" ")
            if not reason.strip():
                errors.append(f"scripts/lint/{name}:{no}: {key} has no reason")
            allowed[key] = reason.strip()
    return allowed, errors


def declared_name(d):
    """The name a declaration declares: the function's (the identifier before its parameter list, `operator…`
    kept whole) or the variable's (the last identifier before an initializer)."""
    t = re.sub(r"^template\s*<.*?>\s*(?=[A-Za-z_\[])", "", d.text)
    t = re.sub(r"\[\[.*?\]\]", "", t)
    m = re.search(r"\boperator\s*(\(\)|[^\s(]+)\s*\(", t)
    if m:
        return "operator" + m.group(1)
    depth = 0
    for i, ch in enumerate(t):  # the first '(' outside template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0:
            m = re.search(r"(~?[A-Za-z_]\w*)\s*$", t[:i])
            if m and m.group(1) not in ("alignas", "decltype", "noexcept", "requires", "sizeof"):
                return m.group(1)
            break
    m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=.*|\{.*)?$", t)
    return m.group(1) if m else ""


def is_function(d):
    name = declared_name(d)
    return bool(re.search(r"\b%s\s*\(" % re.escape(name), d.text)) if name else False
