"""The layer rule and the import graph, read from the source (every module's AST, so imports inside
functions count as much as the ones at the top):

    shared  <-  firmware        shared imports nothing of the project; firmware and host import shared,
    shared  <-  host            never each other; tools sit on top (any of them); nothing imports tests.
    tools on top

An import is any `import` / `from ... import` statement, `importlib.import_module(...)`, `__import__(...)`,
`importlib.util.find_spec(...)`, `runpy.run_module(...)` / `run_path(...)`, and a list or tuple literal
holding "-m", MODULE (a subprocess argv such as [sys.executable, "-m", "tools.x"]). A name built at run
time counts by its constant prefix (f"tools.{x}", "tools.bench." + name). The graph of those imports
between project modules has no cycle; a package's __init__ importing its own submodules is not one.
And the development commands tools/ registers still reach `edgetwin` when it runs from this checkout.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "firmware", "host", "tools")
PROJECT = PACKAGES + ("tests",)
# What each package may import from the project (its own modules included).
ALLOWED = {
    "shared": {"shared"},
    "firmware": {"shared", "firmware"},
    "host": {"shared", "host"},
    "tools": {"shared", "firmware", "host", "tools"},
}
KNOWN_CYCLES: set = set()  # none: every cycle found fails
IMPORT_CALLS = {"import_module", "__import__", "find_spec", "run_module", "run_path"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
            if "node_modules" not in p.parts}


def _prefix(node: ast.AST) -> tuple[str, bool] | None:
    """(the constant text a string expression starts with, whether that is all of it), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.JoinedStr):
        text = ""
        for v in node.values:
            if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
                return text, False
            text += v.value
        return text, True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left = _prefix(node.left)
        return None if left is None else (left[0], False)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        left = _prefix(node.func.value)
        return None if left is None else (left[0], False)
    return None


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def imports_of(path: Path, name: str) -> list[tuple[int, str, bool]]:
    """(line, imported name, exact) for every import in the file: exact False for a name known only by its
    constant prefix (a dynamic import). A path (run_path) is turned into a dotted name."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, True) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            out.append((node.lineno, base, True))
            out += [(node.lineno, base + "." + a.name, True) for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and node.args and _call_name(node.func) in IMPORT_CALLS:
            got = _prefix(node.args[0])
            if got is not None and got[0]:
                text, exact = got
                if _call_name(node.func) == "run_path":
                    text = text.replace("\\", "/").lstrip("./").removesuffix(".py").replace("/", ".")
                out.append((node.lineno, text, exact))
        elif isinstance(node, (ast.List, ast.Tuple)):
            elts = node.elts
            for a, b in zip(elts, elts[1:]):
                if isinstance(a, ast.Constant) and a.value == "-m":
                    got = _prefix(b)
                    if got is not None and got[0]:
                        out.append((node.lineno, got[0], got[1]))
    return out


def _top(imported: str) -> str:
    return imported.split(".")[0]


def _names_project(imported: str) -> str | None:
    """The project package an import names (a dynamic one by its constant prefix), or None (the standard
    library, numpy, ...)."""
    top = _top(imported)
    return top if top in PROJECT else None


def graph(mods: dict[str, Path]) -> tuple[dict[str, set[str]], dict[tuple[str, str], int]]:
    """Edges between project modules, and the line of each edge's first import."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    where: dict[tuple[str, str], int] = {}
    for m, path in mods.items():
        for line, imported, exact in imports_of(path, m):
            if exact:
                targets = [imported] if imported in mods else []
            else:  # every module the prefix can name
                targets = [t for t in mods if t.startswith(imported)]
            for t in targets:
                own_submodule = path.name == "__init__.py" and t.startswith(m + ".")
                if t == m or own_submodule:
                    continue
                edges[m].add(t)
                where.setdefault((m, t), line)
    return edges, where


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as one cycle path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_cycle_path(set(c), edges) for c in comps]


def _cycle_path(comp: set[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle through the component's first module: a -> b -> ... -> a (breadth first, so shortest)."""
    start = min(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)


def test_imports_point_down_the_layers():
    mods = project_modules()
    assert {"shared.frame", "firmware.node", "host.cli", "tools.board.build"} <= set(mods)
    bad: dict[tuple[str, int, str], set[str]] = {}
    for m, path in mods.items():
        layer = _top(m)
        for line, imported, exact in imports_of(path, m):
            named = _names_project(imported)
            if named is not None and named not in ALLOWED[layer]:
                bad.setdefault((str(path.relative_to(ROOT)), line, layer), set()).add(imported + ("" if exact else "... (built at run time)"))
    lines = []
    for where, names in sorted(bad.items()):  # `from tools.board import build`: tools.board.build, not both
        names = {n for n in names if not any(o != n and o.startswith(n + ".") for o in names)}
        lines.append("%s:%d: %s imports %s" % (*where, ", ".join(sorted(names))))
    assert not lines, "upward imports (shared <- firmware, shared <- host, tools on top):\n" + "\n".join(lines)


def test_no_import_cycles():
    mods = project_modules()
    edges, where = graph(mods)
    found = [c for c in cycles(edges) if frozenset(c) not in KNOWN_CYCLES]
    lines = [" -> ".join(c) + "  (" + ", ".join("%s:%d" % (mods[a].relative_to(ROOT), where[(a, b)])
                                                for a, b in zip(c, c[1:])) + ")" for c in found]
    assert not found, "import cycles:\n" + "\n".join(lines)


def test_the_walker_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The checks above prove nothing if the walker misses a form: each one below is found, with its line."""
    src = '''
import host.gateway
from tools.board import build
from . import sibling
def lazy(name):
    from tests.host import gwkit
    import importlib, runpy, subprocess, sys
    importlib.import_module("tools.demo.demo")
    importlib.import_module(f"tools.bench.{name}")
    importlib.import_module("tools.bench." + name)
    __import__("tests.x")
    runpy.run_module("tools.formats.convert")
    runpy.run_path("tools/board/vboard.py")
    subprocess.run([sys.executable, "-m", "tools.train.gen_logs"])
    importlib.import_module(name)
'''
    path = tmp_path / "shared" / "probe.py"
    path.parent.mkdir()
    path.write_text(src)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    got = [(line, name, exact) for line, name, exact in imports_of(path, module_name(path))]
    names = {(line, name) for line, name, _ in got}
    want = {(2, "host.gateway"), (3, "tools.board"), (3, "tools.board.build"), (4, "shared.sibling"),
            (6, "tests.host.gwkit"), (8, "tools.demo.demo"), (9, "tools.bench."), (10, "tools.bench."),
            (11, "tests.x"), (12, "tools.formats.convert"), (13, "tools.board.vboard"), (14, "tools.train.gen_logs")}
    assert want <= names, sorted(want - names)
    assert not any(line == 15 for line, _ in names)  # a fully dynamic name names nothing
    assert {e for line, n, e in got if line in (9, 10)} == {False}
    assert all(_names_project(n) in ("host", "tools", "tests") for line, n, e in got if line not in (4, 7))
    assert {_names_project(n) for line, n, e in got if line == 7} == {None}  # the standard library


def test_the_cycle_finder_reports_the_path():
    edges = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}, "a": {"a.w"}}
    assert cycles(edges) == [["a.x", "a.y", "a.z", "a.x"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "host.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_the_cli_from_the_checkout_offers_every_command():
    res = _cli("--help")
    assert res.returncode == 0, res.stderr
    listed = res.stdout.split("{", 1)[-1]
    for name in ("build", "deploy", "vboard", "convert", "bench", "demo", "selftest", "gateway", "ask", "plan",
                 "doctor", "import"):
        assert "\n    %s " % name in res.stdout, (name, res.stdout)
    assert "unavailable" not in listed


@pytest.mark.parametrize("argv,want", [
    (("bench", "lruk", "--help"), "usage: edgetwin bench lruk"),
    (("convert", "--help"), "usage: edgetwin convert"),
    (("build", "--help"), "--board BOARD"),
    (("selftest", "--help"), "--json"),
])
def test_development_commands_keep_their_arguments(argv, want):
    res = _cli(*argv)
    assert res.returncode == 0 and want in res.stdout, (res.returncode, res.stdout, res.stderr)


def test_the_commands_are_declared_as_entry_points():
    """pyproject.toml names every development command: an installed edgetwin finds them by the group."""
    import tomllib

    from host import cli

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][cli.GROUP]
    assert set(eps) == {"build", "deploy", "vboard", "convert", "bench", "demo", "selftest"}
    for name, spec in eps.items():
        assert spec.startswith("tools."), spec
        assert not cli.load_plugin(name, spec).help.startswith("unavailable"), spec
    broken = cli.load_plugin("nosuch", "tools.no_such_module:X")
    assert broken.help.startswith("unavailable: nosuch") and "No module named" in broken.help


def test_an_installed_distribution_registers_commands(tmp_path, monkeypatch):
    """The entry-point path an installed edgetwin takes (its dist-info's entry_points.txt), beside the
    checkout's pyproject.toml: a command registered only there is offered too."""
    from host import cli

    info = tmp_path / "edgetwin_probe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: edgetwin-probe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[%s]\nprobe = tools.demo.commands:SELFTEST\n" % cli.GROUP)
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = cli.plugin_specs()
    assert specs["probe"] == "tools.demo.commands:SELFTEST"
    assert specs["bench"] == "tools.bench.commands:BENCH"  # the checkout's own, still there
    assert cli.load_plugin("probe", specs["probe"]).help.startswith("start a virtual board")
