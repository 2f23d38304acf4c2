# profile.py: load and validate a board profile (JSON); every error names the file and the field.
import json

# Each field: (dotted name, type, minimum, maximum or allowed values). Integers are bounded so that a
# typo (heap of 190 instead of 190K) is caught before it reaches the interpreter's command line.
_FLAVOURS = ("micropython", "circuitpython")
_ARCHES = ("armv6m", "xtensawin", "x64")

FIELDS = (
    ("name", str, 1, 40),
    ("description", str, 1, 200),
    ("flavour", str, _FLAVOURS, None),
    ("mpy_arch", str, _ARCHES, None),
    ("native", bool, None, None),
    ("threads", bool, None, None),
    ("heap_bytes", int, 32 * 1024, 64 * 1024 * 1024),
    ("flash_bytes", int, 256 * 1024, 256 * 1024 * 1024),
    ("fs_bytes", int, 64 * 1024, 256 * 1024 * 1024),
    ("psram_bytes", int, 0, 64 * 1024 * 1024),
    ("uart.id", int, 0, 8),
    ("uart.tx", int, -1, 64),
    ("uart.rx", int, -1, 64),
    ("uart.baud", int, 9600, 4000000),
    ("uart.rxbuf", int, 64, 65536),
    ("kv.sink", int, 0, 64),
    ("kv.window", int, 4, 65536),
    ("kv.staged", int, 1, 256),
    ("draft_k", int, 1, 32),
    ("model", str, 1, 80),
)
OPTIONAL = (("spill_bytes", int, 0, 256 * 1024 * 1024),  # the node's flash spill ring (docs/NODE.md); 0: none
            # our firmware's ROMFS partition (the model, read in place; docs/BOARDS.md); 0: none. Firmware without
            # it (a stock download) has a filesystem of fs_bytes + romfs_bytes there instead
            ("romfs_bytes", int, 0, 256 * 1024 * 1024),
            # the hardware watchdog the node feeds (firmware/watchdog.py, docs/BOARDS.md); 0 or absent: none
            ("watchdog_ms", int, 0, 3600 * 1000))
WATCHDOG_MIN_MS = 1000  # shorter, and a legitimate pause (a flash block erased, a prompt's token) resets the board
# the RP2040's counter (24 bits at 2 ticks a us): rp2's machine.WDT takes 8388 ms, CircuitPython's watchdog 8 s
WATCHDOG_MAX_MS = {("micropython", "armv6m"): 8388, ("circuitpython", "armv6m"): 8000}
# "io" (the pins a plant description may use): checked by shared/profile_io.py, the host's only (the
# build leaves it out of the board's /board.json, so a board never holds that code)


class ProfileError(ValueError):
    pass


# A profile's name and model file name become file names (build/boards/<name>/, /<model> on the board):
# plain names only, so no profile can point a path outside its folder ("../x", "a/b", ".hidden").
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"


def _plain(src, field, value, suffix=""):
    """value must be a plain file name: letters, digits, '_', '-' (and '.' inside when a suffix is asked)."""
    chars = _NAME_CHARS + "." if suffix else _NAME_CHARS
    ok = value.endswith(suffix) and len(value) > len(suffix) and value[0] in _NAME_CHARS and ".." not in value
    for ch in value:
        if ch not in chars:
            ok = False
    if not ok:
        raise ProfileError("%s: field '%s' is %s; expected a plain name of letters, digits, '_' and '-'%s, no path"
                           % (src, field, _short(value), (" ending in " + suffix) if suffix else ""))


_NESTED = {}
for _f in FIELDS:
    if "." in _f[0]:
        _NESTED[_f[0]] = 1


def _short(value):
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def _get(doc, dotted):
    node = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True


def _check(src, doc, name, typ, lo, hi):
    value, found = _get(doc, name)
    if not found:
        raise ProfileError("%s: missing field '%s'" % (src, name))
    # bool is a subclass of int in Python: never accept True for a byte count.
    if type(value) is not typ:
        raise ProfileError("%s: field '%s' must be %s, got %s" % (src, name, typ.__name__, _short(value)))
    if isinstance(lo, tuple):
        if value not in lo:
            raise ProfileError("%s: field '%s' is %s; expected one of %s" % (src, name, _short(value), ", ".join(lo)))
    elif typ is int:
        if value < lo or value > hi:
            raise ProfileError("%s: field '%s' is %d; expected %d..%d" % (src, name, value, lo, hi))
    elif typ is str:
        if len(value) < lo or len(value) > hi:
            raise ProfileError("%s: field '%s' must be %d..%d characters" % (src, name, lo, hi))


def validate(doc, src="<profile>"):
    """Check a decoded profile dict; return it unchanged or raise ProfileError naming src and the field."""
    if not isinstance(doc, dict):
        raise ProfileError("%s: a profile must be a JSON object" % src)
    for name, typ, lo, hi in FIELDS:
        _check(src, doc, name, typ, lo, hi)
    known = {}
    for name, typ, lo, hi in OPTIONAL:
        if name in doc:
            _check(src, doc, name, typ, lo, hi)
        known[name] = 1
    for name, _t, _l, _h in FIELDS:
        known[name.split(".")[0]] = 1
    known["io"] = 1
    for key in doc:
        if key not in known:
            raise ProfileError("%s: unknown field '%s'" % (src, key))
    for table in ("uart", "kv"):  # the nested tables take no unknown keys either
        for key in doc[table]:
            if table + "." + key not in _NESTED:
                raise ProfileError("%s: unknown field %s" % (src, _short(table + "." + key)))
    if doc["flavour"] == "circuitpython" and (doc["native"] or doc["threads"]):
        raise ProfileError("%s: field 'native'/'threads': CircuitPython has no viper and no threads" % src)
    if doc["kv"]["staged"] < doc["draft_k"]:
        raise ProfileError("%s: field 'kv.staged' (%d) must hold at least one draft block (draft_k=%d)"
                           % (src, doc["kv"]["staged"], doc["draft_k"]))
    _plain(src, "name", doc["name"])
    _plain(src, "model", doc["model"], ".mbf")
    for ch in doc["description"]:
        if ch < " ":
            raise ProfileError("%s: field 'description' holds a control character" % src)
    if doc["fs_bytes"] + doc.get("romfs_bytes", 0) > doc["flash_bytes"]:
        raise ProfileError("%s: field 'fs_bytes' (with 'romfs_bytes') exceeds 'flash_bytes'" % src)
    wd = doc.get("watchdog_ms", 0)
    top = WATCHDOG_MAX_MS.get((doc["flavour"], doc["mpy_arch"]), 3600 * 1000)
    if wd and not WATCHDOG_MIN_MS <= wd <= top:
        raise ProfileError("%s: field 'watchdog_ms' is %d; expected 0 (none) or %d..%d for %s on %s"
                           % (src, wd, WATCHDOG_MIN_MS, top, doc["flavour"], doc["mpy_arch"]))
    if doc.get("spill_bytes", 0) > doc["fs_bytes"]:
        raise ProfileError("%s: field 'spill_bytes' exceeds 'fs_bytes'" % src)
    if "io" in doc:
        from shared import profile_io

        try:
            profile_io.check(src, doc["io"])
        except ValueError as e:
            raise ProfileError(str(e))
    return doc


def load(path):
    """Read and validate the profile at path."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        raise ProfileError("%s: cannot read board profile" % path)
    except ValueError:  # UnicodeError: not text
        raise ProfileError("%s: not valid JSON (not UTF-8 text)" % path)
    try:
        doc = json.loads(text)
    except (ValueError, RuntimeError) as e:  # RuntimeError: nested too deep for the parser
        raise ProfileError("%s: not valid JSON (%s)" % (path, str(e).split("\n")[0][:80]))
    return validate(doc, path)
