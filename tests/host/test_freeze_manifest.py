"""boards/manifest_logs.py and boards/manifest.py (tools/board/freeze_manifest.py): current, valid for
MicroPython's manifest functions; the logs-only one freezes the logs-only package (no model runtime), the
drafting one includes it and adds the rest of every module the node imports, but no host-only backend."""

from __future__ import annotations

import ast
from pathlib import Path

from tools.board import build, firmware_build, freeze_manifest

ROOT = Path(__file__).resolve().parents[2]


def _frozen(manifest: Path = ROOT / "boards" / "manifest.py") -> tuple[list[str], set[str]]:
    """Run a manifest with stand-ins for MicroPython's include()/package(): (includes, frozen paths);
    an include of a plain path (relative to the including manifest, as MicroPython resolves it) is run too."""
    includes: list[str] = []
    frozen: set[str] = set()

    def include(path: str) -> None:
        includes.append(path)
        if "$(" not in path:
            inc, got = _frozen(manifest.parent / path)
            includes.extend(inc)
            assert not got & frozen, got & frozen  # a file frozen twice would be a build error
            frozen.update(got)

    def package(name: str, files: tuple[str, ...] = (), base_path: str = ".", opt: int | None = None) -> None:
        base = (manifest.parent / base_path).resolve()
        for f in files:
            p = base / name / f
            assert p.is_file(), p
            assert str(p.relative_to(ROOT)) not in frozen, p
            frozen.add(str(p.relative_to(ROOT)))

    exec(compile(manifest.read_text(), str(manifest), "exec"), {"include": include, "package": package})
    return includes, frozen


def _imports(path: Path) -> set[str]:
    """Project modules a file imports anywhere (shared.x / firmware.x), as repository paths."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in ("shared", "firmware"):
            out |= {"%s/%s.py" % (node.module, a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("shared", "firmware"):
            out.add(node.module.replace(".", "/") + ".py")
        elif isinstance(node, ast.Import):
            out |= {a.name.replace(".", "/") + ".py" for a in node.names if a.name.split(".")[0] in ("shared", "firmware")}
    return {p for p in out if (ROOT / p).is_file()}


def test_manifest_is_current() -> None:
    assert freeze_manifest.main(["--check"]) == 0, "run python -m tools.board.freeze_manifest"


def test_manifest_freezes_the_node_closure_and_no_host_backend() -> None:
    includes, frozen = _frozen()
    assert includes == ["manifest_logs.py", "$(PORT_DIR)/boards/manifest.py"]  # the port's own frozen modules stay
    assert frozen == {str(p.relative_to(ROOT)) for p in build.sources("micropython")}
    assert "shared/q4_numpy.py" not in frozen and "shared/q4_ulab.py" not in frozen
    todo, seen = ["firmware/node.py"], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo += sorted(_imports(ROOT / p))
    assert {"shared/llama.py", "shared/link.py", "shared/drafter.py", "firmware/annotator.py"} <= seen
    missing = {p for p in seen if p not in frozen and p not in build.EXCLUDED["micropython"]}
    assert not missing, missing


MODEL_RUNTIME = {"shared/llama.py", "shared/bpe.py", "shared/q4.py", "shared/q4a_q8.py", "shared/q4_viper.py",
                 "shared/drafter.py", "shared/mbf.py", "firmware/annotator.py"}


def test_the_logs_only_manifest_freezes_the_logs_only_package() -> None:
    includes, frozen = _frozen(ROOT / "boards" / "manifest_logs.py")
    assert includes == ["$(PORT_DIR)/boards/manifest.py"]  # a firmware on its own: the port's modules and the node
    assert frozen == {str(p.relative_to(ROOT)) for p in build.sources("micropython", drafting=False)}
    assert not frozen & MODEL_RUNTIME
    assert {"firmware/node.py", "firmware/sampler.py", "shared/link.py", "shared/plant.py"} <= frozen
    _, drafting = _frozen()
    assert frozen < drafting and MODEL_RUNTIME <= drafting  # the drafting manifest requires the logs-only one


def test_the_firmware_cache_key_covers_both_manifests() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in firmware_build.frozen_files(ROOT / "boards" / "manifest.py")}
    _, frozen = _frozen()
    assert names == frozen | {"boards/manifest.py", "boards/manifest_logs.py"}
