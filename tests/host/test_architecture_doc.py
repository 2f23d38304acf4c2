"""docs/ARCHITECTURE.md names real code: every file in its data-path tables exists, and every function
or Class.method a row names is defined in one of that row's files (so a rename that forgets the doc fails)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"


def rows() -> list[tuple[list[str], list[str]]]:
    out = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.match(r"\d+[a-z]?\.", cells[0]):  # 7b., 23b.: a branch off a step
            continue
        files = re.findall(r"`([\w/]+\.py)`", cells[1])
        names = [n for n in re.findall(r"`([\w.]+)`", cells[2]) if not n.endswith(".py")]
        out.append((files, names))
    return out


def definitions(path: Path) -> set[str]:
    """Every def and class in the file (nested ones too), and Class.method for methods."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.add(node.name + "." + item.name)
    return found


def test_the_tables_are_there() -> None:
    r = rows()
    assert len(r) >= 27, "the data path has 27 steps; found %d rows" % len(r)
    assert all(files and names for files, names in r), [x for x in r if not (x[0] and x[1])]


def test_every_named_function_is_defined_in_its_row_files() -> None:
    missing = []
    for files, names in rows():
        defined: set[str] = set()
        for f in files:
            assert (ROOT / f).is_file(), "docs/ARCHITECTURE.md names %s, which does not exist" % f
            defined |= definitions(ROOT / f)
        missing += ["%s (in %s)" % (n, ", ".join(files)) for n in names if n not in defined]
    assert not missing, "docs/ARCHITECTURE.md names functions its files do not define: " + "; ".join(missing)


def test_a_wrong_name_is_caught(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("class A:\n    def b(self):\n        def inner():\n            pass\n\ndef f():\n    pass\n")
    d = definitions(src)
    assert {"A", "A.b", "inner", "f"} <= d and "A.c" not in d and "g" not in d


def test_references_point_inside_the_repository() -> None:
    """Every docs/NAME.md a source file or a document names exists, and nothing cites the design brief
    that lives outside the repository (it was cited as "DESIGN 3.1", "DESIGN.md", "docs/spec_contract")."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "*.py", "*.md", "Makefile"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    bad = []
    for f in files:
        if f == "tests/host/test_architecture_doc.py":
            continue
        text = (ROOT / f).read_text(errors="replace")
        for m in re.finditer(r"\bdocs/([\w-]+)(\.md)?\b", text):
            other = re.match(r"\.(?!md\b)[A-Za-z]\w*", text[m.end():m.end() + 8])
            if other:  # another kind of file under docs/ (the README's docs/dashboard.png): it must exist too
                if not (ROOT / "docs" / (m.group(1) + other.group(0))).is_file():
                    bad.append("%s names docs/%s%s, which does not exist" % (f, m.group(1), other.group(0)))
                continue
            if not (ROOT / "docs" / (m.group(1) + ".md")).is_file():
                bad.append("%s names docs/%s, which does not exist" % (f, m.group(1)))
        for m in re.finditer(r"\bDESIGN(\.md)?\s+\d|\bDESIGN\.md\b|/work contract", text):
            bad.append("%s cites %r, a document outside the repository" % (f, m.group(0)))
    assert not bad, "\n".join(bad)
