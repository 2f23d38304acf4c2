"""The commands share their argument checks through host/cliargs.py: no host/cmd_*.py imports another, so
each command reads on its own and one can change without the others (read from the source, as test_layers)."""

from __future__ import annotations

from test_layers import ROOT, imports_of, module_name


def test_no_command_imports_another():
    cmds = sorted((ROOT / "host").glob("cmd_*.py"))
    assert len(cmds) >= 5
    names = {module_name(p) for p in cmds}
    bad = []
    for path in cmds:
        me = module_name(path)
        for line, imported, exact in imports_of(path, me):
            hit = [n for n in names if n != me and (
                imported == n or imported.startswith(n + ".")
                or (not exact and imported.startswith("host.cmd_") and n.startswith(imported)))]
            bad += ["%s:%d imports %s" % (path.relative_to(ROOT), line, h) for h in hit]
    assert not bad, "a command imports another; move what they share to host/cliargs.py:\n" + "\n".join(bad)


def test_the_shared_checks_live_in_cliargs():
    from host import cliargs

    for name in ("check_out_path", "check_store", "check_target", "add_ask_arguments"):
        assert callable(getattr(cliargs, name))
