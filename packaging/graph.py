#!/usr/bin/env python3
"""jitembed's component graph (cmake/components.json) against everything derived from it.

  python3 packaging/graph.py --check [--cmake-graph BUILD/jitembed-cmake-graph.json]
  python3 packaging/graph.py --write      # regenerate the generated parts after editing the graph

Checked (ctest packaging/graph):
  - the graph itself: known names, no cycles, every option-gated component's options cover its requirements';
  - CMake: each component target built by this configure links exactly the jitembed components and the
    external targets the graph says (the dump JitembedInstall.cmake writes);
  - Conan: the generated tables of packaging/conan/conanfile.py, and packaging/conan/system.profile has a
    platform requirement for every Conan reference;
  - vcpkg: packaging/vcpkg/ports/jitembed/vcpkg.json (a feature per optional component), the
    vcpkg_check_features block of its portfile.cmake, and the developer manifest vcpkg.json;
  - scripts/install-deps.sh: its per-component Debian packages and requirements;
  - the component table of docs/packaging.md.
Python standard library only.
"""
import argparse
import json
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GRAPH = os.path.join(ROOT, "cmake", "components.json")
CONANFILE = os.path.join(ROOT, "packaging", "conan", "conanfile.py")
CONAN_PROFILE = os.path.join(ROOT, "packaging", "conan", "system.profile")
PORT_DIR = os.path.join(ROOT, "packaging", "vcpkg", "ports", "jitembed")
PORT_JSON = os.path.join(PORT_DIR, "vcpkg.json")
PORTFILE = os.path.join(PORT_DIR, "portfile.cmake")
MANIFEST = os.path.join(ROOT, "vcpkg.json")
INSTALL_DEPS = os.path.join(ROOT, "scripts", "install-deps.sh")
DOCS = os.path.join(ROOT, "docs", "packaging.md")
CMAKELISTS = os.path.join(ROOT, "CMakeLists.txt")

errors = []


def error(msg):
    errors.append(msg)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def load_graph():
    g = json.loads(read(GRAPH))
    comps, ext = g["components"], g["external"]
    for c, d in comps.items():
        for r in d["requires"]:
            if r not in comps:
                error(f"components.json: {c} requires unknown component {r}")
        for e in d["external"]:
            if e not in ext:
                error(f"components.json: {c} uses unknown external dependency {e}")
    # acyclic, and a component's options include those of what it requires
    state = {}

    def visit(c, path):
        if state.get(c) == 1:
            error(f"components.json: cycle {' -> '.join(path + [c])}")
            return
        if state.get(c) == 2:
            return
        state[c] = 1
        for r in comps[c]["requires"]:
            if r in comps:
                visit(r, path + [c])
                missing = set(comps[r]["options"]) - set(comps[c]["options"])
                if missing:
                    error(f"components.json: {c} requires {r} but lacks its options {sorted(missing)}")
        state[c] = 2

    for c in comps:
        visit(c, [])
    return g


def closure(g, names):
    comps = g["components"]
    out, todo = [], list(names)
    while todo:
        c = todo.pop(0)
        if c not in out:
            out.append(c)
            todo.extend(comps[c]["requires"])
    return out


def base_components(g):
    return [c for c, d in g["components"].items() if not d["options"]]


def offered(g, c, manager):
    return g["components"][c].get(manager, True) is not False


def as_list(v):
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


# --- CMake ---------------------------------------------------------------------------------------------------
def check_cmake(g, dump_path):
    dump = json.loads(read(dump_path))
    comps, ext = g["components"], g["external"]
    for c, links in dump.items():
        if c not in comps:
            error(f"CMake builds component {c}, which cmake/components.json does not have")
            continue
        got = {l[len("jitembed::"):] for l in links if l.startswith("jitembed::")}
        want = set(comps[c]["requires"])
        if got != want:
            error(f"CMake: jitembed::{c} links components {sorted(got)}, components.json says {sorted(want)}")
        # every external dependency is linked through at least one of its targets, and every other link is
        # a target of one of them (a variable such as ${TORCH_LIBRARIES} expands to items not checked)
        # ($<BUILD_INTERFACE:...> links stay in the build tree, out of the installed package: not the graph's)
        got_ext = {l for l in links if not l.startswith("jitembed::") and not l.startswith("$<BUILD_INTERFACE:")}
        allowed, expanded = set(), False
        for e in comps[c]["external"]:
            ts = [t for t in ext[e]["targets"] if not t.startswith("${")]
            expanded |= len(ts) < len(ext[e]["targets"])
            allowed |= set(ts)
            if ts and not set(ts) & got_ext:
                error(f"CMake: jitembed::{c} links none of {ts} ({e}, components.json)")
        if not expanded and got_ext - allowed:
            error(f"CMake: jitembed::{c} links {sorted(got_ext - allowed)}, which components.json does not list")
    for c, d in comps.items():
        if not d["options"] and c not in dump:
            error(f"CMake: component {c} has no options in components.json (always built) but this configure did not build it")


# --- Conan ---------------------------------------------------------------------------------------------------
def conan_components(g):
    return sorted(c for c in g["components"] if offered(g, c, "conan"))


def conan_block(g):
    comps, ext = g["components"], g["external"]
    names = conan_components(g)
    lines = ["# --- generated from cmake/components.json (packaging/graph.py --write) ---",
             "# component -> jitembed components it links", "COMPONENT_REQUIRES = {"]
    for c in names:
        lines.append(f"    {json.dumps(c)}: {json.dumps(comps[c]['requires'])},")
    lines += ["}", "# component -> Conan references of its external dependencies", "COMPONENT_CONAN_DEPS = {"]
    for c in names:
        refs = [ext[e]["conan"] for e in comps[c]["external"] if ext[e]["conan"]]
        lines.append(f"    {json.dumps(c)}: {json.dumps(refs)},")
    lines += ["}", "# components always installed and always required (no CMake option turns them off)",
              f"BASE_COMPONENTS = {json.dumps(sorted(base_components(g)))}", "# --- end generated ---"]
    return "\n".join(lines)


GEN_RE = re.compile(r"# --- generated from cmake/components\.json.*?# --- end generated ---", re.S)


def check_conan(g, write_mode):
    text = read(CONANFILE)
    block = conan_block(g)
    m = GEN_RE.search(text)
    if not m:
        error(f"{CONANFILE}: no generated block")
        return
    if m.group(0) != block:
        if write_mode:
            write(CONANFILE, text[:m.start()] + block + text[m.end():])
        else:
            error("packaging/conan/conanfile.py: the generated tables differ from cmake/components.json "
                  "(python3 packaging/graph.py --write)")
    # every requirement the recipe can declare is a platform requirement of the system profile
    prof = read(CONAN_PROFILE)
    sect = re.search(r"\[platform_requires\]\n(.*?)(?:\n\[|\Z)", prof, re.S)
    have = set()
    if sect:
        for line in sect.group(1).splitlines():
            line = line.split("#")[0].strip()
            if line:
                have.add(line.split("/")[0])
    for c in conan_components(g):
        for e in g["components"][c]["external"]:
            ref = g["external"][e]["conan"]
            if ref and ref.split("/")[0] not in have:
                error(f"packaging/conan/system.profile: no platform requirement for {ref} ({c})")
    # components the recipe cannot offer are explained
    for c in g["components"]:
        if not offered(g, c, "conan") and c not in g.get("packages_note", {}):
            error(f"components.json: {c} is not offered by Conan; packages_note must say why")


# --- vcpkg ---------------------------------------------------------------------------------------------------
def feature(c):
    return c.replace("_", "-")


def vcpkg_deps(names):
    out = []
    for n in names:
        m = re.match(r"^([a-z0-9-]+)(?:\[(.*)\])?$", n)
        if m.group(2):
            out.append({"name": m.group(1), "features": m.group(2).split(",")})
        else:
            out.append(m.group(1))
    return out


def option_owners(g):
    """CMake option -> the component (feature) that turns it on: the one that introduces it with the fewest options."""
    comps = g["components"]
    owners = {}
    for c, d in comps.items():
        inherited = set()
        for r in closure(g, d["requires"]):
            inherited |= set(comps[r]["options"])
        for o in set(d["options"]) - inherited:
            if o not in owners or len(comps[c]["options"]) < len(comps[owners[o]]["options"]):
                owners[o] = c
    return owners


def vcpkg_port(g, version):
    comps, ext = g["components"], g["external"]
    base = base_components(g)
    owners = option_owners(g)
    base_deps = []
    for c in base:
        for e in comps[c]["external"]:
            base_deps += [n for n in as_list(ext[e]["vcpkg"]) if n not in base_deps]
    port = {
        "name": "jitembed",
        "version": version,
        "description": "Just-in-time embedding for generative-model training (header-only, C++20)",
        "license": "Apache-2.0",
        "supports": "linux",
        "dependencies": vcpkg_deps(base_deps) + [
            {"name": "vcpkg-cmake", "host": True}, {"name": "vcpkg-cmake-config", "host": True}],
        "features": {},
    }
    for c in sorted(comps):
        d = comps[c]
        if c in base or not offered(g, c, "vcpkg"):
            continue
        deps = []
        feats = [feature(r) for r in d["requires"] if r not in base]
        # options this component needs that its requirements do not bring: the owner's feature
        inherited = set()
        for r in closure(g, d["requires"]):
            inherited |= set(comps[r]["options"])
        for o in d["options"]:
            if o not in inherited and owners[o] != c:
                feats.append(feature(owners[o]))
        if feats:
            deps.append({"name": "jitembed", "default-features": False, "features": sorted(set(feats))})
        names = []
        for e in d["external"]:
            names += [n for n in as_list(ext[e]["vcpkg"]) if n not in names]
        deps += vcpkg_deps(names)
        port["features"][feature(c)] = {"description": f"the {c} component (jitembed::{c})", **({"dependencies": deps} if deps else {})}
    return port


def portfile_block(g):
    owners = option_owners(g)
    lines = ["# --- generated from cmake/components.json (packaging/graph.py --write) ---",
             "vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS", "  FEATURES"]
    for o in sorted(owners):
        c = owners[o]
        if offered(g, c, "vcpkg"):
            lines.append(f"    {feature(c)} {o}")
    lines += [")", "# --- end generated ---"]
    return "\n".join(lines)


def dev_manifest(g, version):
    """The developer manifest: what the default configure of this repository needs (every component that is
    on by default, so not cuda or what needs it), plus the tools, tests and benchmarks."""
    comps, ext = g["components"], g["external"]
    names = []
    for c, d in comps.items():
        if "JITEMBED_WITH_CUDA" in d["options"]:
            continue
        for e in d["external"]:
            names += [n for n in as_list(ext[e]["vcpkg"]) if n not in names]
    for k in ("tools", "tests", "benchmarks"):
        names += [n for n in g["development"][k]["vcpkg"] if n not in names]
    return {
        "name": "jitembed-dev",
        "version": version,
        "description": "Dependencies for developing jitembed (build, tests, tools, benchmarks); users take the port in packaging/vcpkg",
        "dependencies": vcpkg_deps(sorted(names)),
        "features": {"cuda": {"description": "the CUDA and NCCL components (the toolkit and NCCL come from NVIDIA)",
                              "dependencies": ["cuda"]}},
    }


def check_json_file(path, want, write_mode):
    rel = os.path.relpath(path, ROOT)
    text = json.dumps(want, indent=2) + "\n"
    try:
        have = json.loads(read(path))
    except FileNotFoundError:
        have = None
    if have != want:
        if write_mode:
            write(path, text)
        else:
            error(f"{rel} differs from what cmake/components.json gives (python3 packaging/graph.py --write)")


def check_vcpkg(g, version, write_mode):
    check_json_file(PORT_JSON, vcpkg_port(g, version), write_mode)
    check_json_file(MANIFEST, dev_manifest(g, version), write_mode)
    text = read(PORTFILE)
    m = GEN_RE.search(text)
    block = portfile_block(g)
    if not m:
        error("packaging/vcpkg/ports/jitembed/portfile.cmake: no generated block")
    elif m.group(0) != block:
        if write_mode:
            write(PORTFILE, text[:m.start()] + block + text[m.end():])
        else:
            error("packaging/vcpkg/ports/jitembed/portfile.cmake: vcpkg_check_features differs from cmake/components.json "
                  "(python3 packaging/graph.py --write)")
    for c in g["components"]:
        if not offered(g, c, "vcpkg") and c not in g.get("packages_note", {}):
            error(f"components.json: {c} is not offered by vcpkg; packages_note must say why")


# --- scripts/install-deps.sh ---------------------------------------------------------------------------------
def bash_assoc(text, name):
    m = re.search(r"declare -A " + name + r"=\((.*?)\n\)", text, re.S)
    if not m:
        error(f"scripts/install-deps.sh: no 'declare -A {name}=(' block")
        return {}
    return {k: v.split() for k, v in re.findall(r'\[(\w+)\]="([^"]*)"', m.group(1))}


def check_install_deps(g):
    text = read(INSTALL_DEPS)
    debs = bash_assoc(text, "component_debs")
    reqs = bash_assoc(text, "component_requires")
    comps, ext = g["components"], g["external"]
    for c, d in comps.items():
        want = []
        for e in d["external"]:
            want += [p for p in (ext[e]["debian"] or []) if p not in want]
        debian_less = [e for e in d["external"] if ext[e]["debian"] is None]
        if debian_less:
            if c in debs:
                error(f"scripts/install-deps.sh: {c} needs {debian_less}, which Debian does not package; it must not be a set")
            continue
        if sorted(debs.get(c, [])) != sorted(want):
            error(f"scripts/install-deps.sh: component_debs[{c}] is {debs.get(c)}, components.json gives {want}")
        if sorted(reqs.get(c, [])) != sorted(d["requires"]):
            error(f"scripts/install-deps.sh: component_requires[{c}] is {reqs.get(c)}, components.json gives {d['requires']}")
    for c in set(debs) - set(comps):
        error(f"scripts/install-deps.sh: component_debs has {c}, which components.json does not")
    # wheels that provide an external dependency instead of a Debian package: pinned the same in install-deps.sh
    pins = [p for m in re.finditer(r'^[a-z_]+_pins="([^"]*)"', text, re.M) for p in m.group(1).split()]
    for e, d in ext.items():
        for pin in d.get("pypi") or []:
            if pin not in pins:
                error(f"scripts/install-deps.sh: no *_pins line pins {pin} ({e}, components.json)")
    dev = bash_assoc(text, "development_debs")
    for k in ("tools", "tests", "benchmarks"):
        if sorted(dev.get(k, [])) != sorted(g["development"][k]["debian"]):
            error(f"scripts/install-deps.sh: development_debs[{k}] is {dev.get(k)}, components.json gives {g['development'][k]['debian']}")


# --- docs/packaging.md --------------------------------------------------------------------------------------
DOC_RE = re.compile(r"<!-- components table: generated by packaging/graph.py --write -->\n.*?<!-- end components table -->", re.S)


def docs_table(g):
    comps, ext = g["components"], g["external"]
    lines = ["<!-- components table: generated by packaging/graph.py --write -->",
             "| component | needs components | external | Debian | Conan option | vcpkg feature |",
             "|---|---|---|---|---|---|"]
    for c, d in comps.items():
        names = [e for e in d["external"] if e != "Threads"]
        deb = sorted({p for e in d["external"] for p in (ext[e]["debian"] or [])})
        if any(ext[e]["debian"] is None for e in d["external"]):
            deb.append("(NVIDIA's repository)")
        deb += [f"(PyPI `{p}`)" for e in d["external"] for p in ext[e].get("pypi") or []]
        conan = "always" if not d["options"] else ("—" if not offered(g, c, "conan") else f"`with_{c}`")
        vcpkg = "base" if not d["options"] else ("—" if not offered(g, c, "vcpkg") else f"`{feature(c)}`")
        umbrella = "" if d["umbrella"] else " (not in umbrella)"
        lines.append(f"| `{c}`{umbrella} | {', '.join(d['requires']) or '—'} | {', '.join(names) or '—'} | "
                     f"{' '.join(deb) or '—'} | {conan} | {vcpkg} |")
    lines.append("<!-- end components table -->")
    return "\n".join(lines)


def check_docs(g, write_mode):
    text = read(DOCS)
    m = DOC_RE.search(text)
    block = docs_table(g)
    if not m:
        error("docs/packaging.md: no generated components table")
    elif m.group(0) != block:
        if write_mode:
            write(DOCS, text[:m.start()] + block + text[m.end():])
        else:
            error("docs/packaging.md: the components table differs from cmake/components.json (python3 packaging/graph.py --write)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail when anything disagrees with the graph (default)")
    ap.add_argument("--write", action="store_true", help="regenerate the generated parts")
    ap.add_argument("--cmake-graph", help="jitembed-cmake-graph.json of a configured build tree")
    args = ap.parse_args()
    g = load_graph()
    version = re.search(r"project\(jitembed VERSION ([0-9.]+)", read(CMAKELISTS)).group(1)
    if args.cmake_graph:
        check_cmake(g, args.cmake_graph)
    check_conan(g, args.write)
    check_vcpkg(g, version, args.write)
    check_install_deps(g)
    check_docs(g, args.write)
    if errors:
        print("packaging/graph: the component graph and its users disagree:", file=sys.stderr)
        for e in errors:
            print("  - " + e, file=sys.stderr)
        return 1
    print(f"packaging/graph: {len(g['components'])} components agree across CMake"
          f"{'' if args.cmake_graph else ' (not checked: no --cmake-graph)'}, Conan, vcpkg and install-deps.sh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
