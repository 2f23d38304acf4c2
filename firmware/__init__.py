# edgetwin node firmware (MicroPython / CircuitPython).


def drop(name):
    """Drop the boot-only module firmware.<name> (bootonce, resetcause) so that its bytecode can be collected."""
    import sys

    sys.modules.pop("firmware." + name, None)
    pkg = sys.modules.get("firmware")
    if pkg is not None:
        try:
            delattr(pkg, name)
        except (AttributeError, KeyError, TypeError):  # already gone (MicroPython raises KeyError)
            pass
