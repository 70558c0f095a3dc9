#!/usr/bin/env bash
# The import structure of a Rust source folder, read from its `crate::`/`super::`/`self::` paths
# (in `use` lines and in code), tests modules left out:
#   scripts/imports.sh src/coord          circles and climb-backs inside src/coord
#   scripts/imports.sh clients/rust/src   the same for the Rust client
#   scripts/imports.sh src --edges        every file -> file import with the names taken
# A circle is a set of files that import each other in a loop (a strongly connected component of
# more than one file). A climb-back is a file that imports, through a folder's `mod.rs` facade,
# something of the folder it stands in (`use super::CoordError` in coord/lock.rs): the facade
# should import its rooms, not be imported by them.
# Prints counts first, then the circles and the climb-backs with the names that tie them.
set -euo pipefail
exec python3 - "$@" <<'PY'
import os, re, sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
edges_wanted = "--edges" in sys.argv
if not args:
    sys.exit("usage: scripts/imports.sh DIR [--edges]")
folder = os.path.normpath(args[0])

# The crate root: the nearest folder above (or at) `folder` holding lib.rs or main.rs whose parent
# has a Cargo.toml.
root = os.path.abspath(folder)
while True:
    if (os.path.exists(os.path.join(root, "lib.rs")) or os.path.exists(os.path.join(root, "main.rs"))) \
            and os.path.exists(os.path.join(os.path.dirname(root), "Cargo.toml")):
        break
    parent = os.path.dirname(root)
    if parent == root:
        sys.exit(f"{folder}: no crate root (src/lib.rs) above it")
    root = parent

def module_of(path):
    """src/coord/lock.rs -> ['coord', 'lock']; src/coord/mod.rs -> ['coord']; lib.rs -> []."""
    rel = os.path.relpath(os.path.abspath(path), root)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel

def file_of(mod):
    base = os.path.join(root, *mod) if mod else root
    if not mod:
        return os.path.join(root, "lib.rs")
    for cand in (base + ".rs", os.path.join(base, "mod.rs")):
        if os.path.exists(cand):
            return cand
    return None

def strip(text):
    # Drop the tests module (everything from `#[cfg(test)]` followed by `mod`), comments and strings.
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
    if m:
        text = text[: m.start()]
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return text

def expand(prefix, body):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    out, depth, cur = [], 0, ""
    for ch in body + ",":
        if ch == "," and depth == 0:
            item = cur.strip()
            cur = ""
            if not item:
                continue
            m = re.match(r"^([\w:]*?)(::)?\{(.*)\}$", item, re.S)
            if m:
                out += expand(prefix + (m.group(1) + "::" if m.group(1) else ""), m.group(3))
            else:
                out.append(prefix + re.sub(r"\s+as\s+\w+$", "", item))
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    return out

def paths_in(text):
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        found += expand("", re.sub(r"\s+", " ", m.group(1)))
    body = re.sub(r"\buse\s+[^;]+;", "", text)
    found += re.findall(r"\b(?:crate|super|self)(?:::\w+)+", body)
    return found

def resolve(src_mod, is_facade, path):
    parts = path.split("::")
    # The module the file itself is: for foo.rs `self` is foo, `super` its parent.
    here = list(src_mod)
    if parts[0] == "crate":
        mod, parts = [], parts[1:]
    elif parts[0] in ("self", "super"):
        mod = here
        while parts and parts[0] in ("self", "super"):
            if parts[0] == "super":
                mod = mod[:-1]
            parts = parts[1:]
    else:
        return None
    # Walk down as far as files exist.
    while parts and parts[0] != "*" and file_of(mod + [parts[0]]):
        mod, parts = mod + [parts[0]], parts[1:]
    target = file_of(mod)
    name = parts[0] if parts else (mod[-1] if mod else "crate")
    return target, name

files = []
for dirpath, _, names in os.walk(folder):
    for n in sorted(names):
        if n.endswith(".rs"):
            files.append(os.path.normpath(os.path.join(dirpath, n)))
files.sort()
inside = {os.path.abspath(f) for f in files}
edges = {}
for f in files:
    text = strip(open(f, encoding="utf-8").read())
    src_mod = module_of(f)
    for p in paths_in(text):
        r = resolve(src_mod, f.endswith("mod.rs"), p)
        if not r or not r[0]:
            continue
        target = os.path.abspath(r[0])
        if target == os.path.abspath(f) or target not in inside:
            continue
        edges.setdefault((os.path.abspath(f), target), set()).add(r[1])

def rel(p):
    return os.path.relpath(p)

# Circles: strongly connected components (Tarjan).
graph = {}
for (a, b) in edges:
    graph.setdefault(a, set()).add(b)
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in graph.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
for v in sorted(inside):
    if v not in index:
        visit(v)

# Climb-backs: a file importing the mod.rs of a folder it stands inside (its own or an ancestor's).
climbs = []
for (a, b), names in sorted(edges.items()):
    if os.path.basename(b) == "mod.rs" and a != b and a.startswith(os.path.dirname(b) + os.sep):
        climbs.append((a, b, names))

print(f"{folder}: {len(files)} files, {len(edges)} imports, {len(sccs)} circles "
      f"({sum(len(c) for c in sccs)} files in them), {len(climbs)} climb-backs")
for i, comp in enumerate(sccs, 1):
    print(f"circle {i}: {len(comp)} files: " + ", ".join(rel(c) for c in comp))
    members = set(comp)
    for (a, b), names in sorted(edges.items()):
        if a in members and b in members:
            print(f"  {rel(a)} -> {rel(b)}: {', '.join(sorted(names))}")
for a, b, names in climbs:
    print(f"climb-back: {rel(a)} -> {rel(b)}: {', '.join(sorted(names))}")
if edges_wanted:
    for (a, b), names in sorted(edges.items()):
        print(f"import: {rel(a)} -> {rel(b)}: {', '.join(sorted(names))}")
PY
