# plantcfg.py: the board's plant description (/plant.json, the compiled form), read once at boot and checked.
"""The host compiles the user's description (docs/PLANT.md) into a compact JSON of lists and ints
(host/plantcompile.py); the node reads it here. The file may be corrupt, truncated or hostile, so every
value is checked again (type, range, every index into another table) before anything is sized from it:
a bad file is a PlantConfigError naming the file and the entry (`/plant.json: signals[3][9]: ...`), and
the node then runs logs-only and says why (firmware/node.py). Nothing here is a hot path: it allocates.

    cfg = plantcfg.load("/plant.json", prof)   # prof: the board profile (its link UART is off limits)
    cfg.hash                                   # 16 hex digits of SHA-256 over the file's bytes
    cfg.n_signals, cfg.ids[m], cfg.keys[s], cfg.alarms ...
"""
import json
from array import array

from shared.compat import const, sha256

FORMAT = const(1)
FILE_MAX = const(32768)  # bytes: a longer /plant.json is refused before it is parsed
MAX_MACHINES = const(16)
MAX_SIGNALS = const(128)
MAX_PER_MACHINE = const(12)
MAX_ALARMS = const(4)  # per signal, besides its BAD point
MAX_UNITS = const(16)
MAX_BATCHES = const(8)  # per unit
MAX_PIN = const(48)
_LIM = const(0x20000000)

# source types (the compiled form's first item after a signal's range)
MODBUS = const(1)
ADC = const(2)
ADS1115 = const(3)
MCP9600 = const(4)
PULSE = const(5)
DI = const(6)
SOURCES = (b"", b"modbus", b"adc", b"ads1115", b"mcp9600", b"pulse", b"di")
_SRC_LEN = (0, 10, 8, 10, 6, 7, 5)  # ints after the type
_SIG_HEAD = const(10)  # machine, key, tag, unit, decimals, period_ms, deadband, lo, hi, type
_ID_WORDS = (b"ALARM", b"ACK", b"CLEAR", b"SHELVE", b"UNSHELVE", b"STATE", b"LOST", b"PLANT", b"NODE")


class PlantConfigError(ValueError):
    """A /plant.json that cannot be used; the message names the file and the entry."""


def _alnum(c):
    return 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95


class _Check:
    def __init__(self, path):
        self.path = path

    def fail(self, where, what):
        raise PlantConfigError("%s: %s: %s" % (self.path, where, what))

    def int(self, v, lo, hi, where):
        if type(v) is not int or not lo <= v <= hi:
            self.fail(where, "must be an int in %d..%d" % (lo, hi))
        return v

    def list(self, v, lo, hi, where):
        if type(v) is not list or not lo <= len(v) <= hi:
            self.fail(where, "must be a list of %d..%d items" % (lo, hi))
        return v

    def word(self, v, hi, where, kind):
        # kind "id": a letter, then letters, digits, '_' and '-' between parts; "tag": lower case, digits, '_';
        # "key": a letter then letters, digits, '_'; "unit": printable ASCII without space, not a digit first;
        # "name": letters, digits, '_', '.', '-'; "upper": A-Z, 0-9, '_'
        if type(v) is not str or not 0 < len(v) <= hi:
            self.fail(where, "must be a string of 1..%d characters" % hi)
        try:
            b = v.encode()
        except Exception:
            self.fail(where, "must be ASCII")
        if len(b) != len(v):
            self.fail(where, "must be ASCII")
        ok = True
        c0 = b[0]
        if kind == "id":
            ok = (65 <= c0 <= 90 or 97 <= c0 <= 122) and b[-1] != 45 and b not in _ID_WORDS
            for i in range(len(b)):
                c = b[i]
                if not (_alnum(c) or (c == 45 and b[i - 1] != 45)):
                    ok = False
        elif kind == "tag":
            ok = 97 <= c0 <= 122
            for c in b:
                if not (97 <= c <= 122 or 48 <= c <= 57 or c == 95):
                    ok = False
        elif kind == "key":
            ok = 65 <= c0 <= 90 or 97 <= c0 <= 122
            for c in b:
                if not _alnum(c):
                    ok = False
        elif kind == "unit":
            ok = not (48 <= c0 <= 57 or c0 == 46 or c0 == 45)
            for c in b:
                if not 33 <= c <= 126:
                    ok = False
        elif kind == "name":
            for c in b:
                if not (_alnum(c) or c == 46 or c == 45):
                    ok = False
        else:  # upper
            for c in b:
                if not (65 <= c <= 90 or 48 <= c <= 57 or c == 95):
                    ok = False
        if not ok:
            self.fail(where, "%r is not a valid %s" % (v[:24], kind))
        return b


class PlantConfig:
    """A checked compiled description: tables the engine and the sources are built from."""

    def __init__(self, d, path="/plant.json", prof=None, digest=""):
        ck = _Check(path)
        if type(d) is not dict:
            ck.fail("the file", "must hold a JSON object")
        if d.get("f") != FORMAT:
            ck.fail("f", "this node reads compiled form %d; recompile the description with this release's "
                         "`edgetwin deploy --plant`" % FORMAT)
        self.hash = digest
        self.name = ck.word(d.get("name"), 32, "name", "name")
        tz = d.get("tz", "UTC")
        self.tz = tz if type(tz) is str and len(tz) <= 64 else ck.fail("tz", "must be a time zone name")
        link = (prof or {}).get("uart") or {}
        self._link_pins = (link.get("tx", -1), link.get("rx", -1))
        self._link_uart = link.get("id", -1)
        self._pins = {}
        self._buses(ck, d)
        self._machines(ck, d)
        self._contacts(ck, d)
        self._signals(ck, d)
        self._alarms(ck, d)
        for m in range(self.n_machines):  # state references, now that contacts and signals are known
            w = "machines[%d]" % m
            for name, arr, n in (("run contact", self.m_run, self.n_contacts),
                                 ("trip contact", self.m_trip, self.n_contacts),
                                 ("current signal", self.m_cur, self.n_signals)):
                if arr[m] >= n:
                    ck.fail(w, "its %s %d does not exist" % (name, arr[m]))
            if self.m_run[m] < 0 and self.m_cur[m] < 0:
                ck.fail(w, "needs a run contact or a current signal to know its state")
            if self.m_cur[m] >= 0 and self.s_machine[self.m_cur[m]] != m:
                ck.fail(w, "its current signal belongs to another machine")
        del self._pins

    # ---- pins: each GPIO has one job (the I2C pins of one bus are shared by its devices) ----

    def _pin(self, ck, v, where, job, shared=False):
        if v == -1 and job == "de":
            return v
        ck.int(v, 0, MAX_PIN, where)
        if v in self._link_pins:
            ck.fail(where, "GPIO %d carries the link to the gateway (the board profile's UART)" % v)
        other = self._pins.get(v)
        if other is not None and not (shared and other == job):
            ck.fail(where, "GPIO %d is already used (%s)" % (v, other))
        self._pins[v] = job
        return v

    def _buses(self, ck, d):
        self.rs485 = ck.list(d.get("rs485", []), 0, 2, "rs485")
        for i, b in enumerate(self.rs485):
            w = "rs485[%d]" % i
            ck.list(b, 9, 9, w)
            ck.int(b[0], 0, 2, w + "[0]")
            if b[0] == self._link_uart:
                ck.fail(w + "[0]", "UART%d is the link to the gateway" % b[0])
            self._pin(ck, b[1], w + "[1]", "rs485 tx")
            self._pin(ck, b[2], w + "[2]", "rs485 rx")
            self._pin(ck, b[3], w + "[3]", "de")
            ck.int(b[4], 1200, 1000000, w + "[4]")
            ck.int(b[5], 0, 2, w + "[5]")
            ck.int(b[6], 1, 2, w + "[6]")
            ck.int(b[7], 10, 10000, w + "[7]")
            ck.int(b[8], 0, 100000, w + "[8]")
        self.i2c = ck.list(d.get("i2c", []), 0, 2, "i2c")
        for i, b in enumerate(self.i2c):
            w = "i2c[%d]" % i
            ck.list(b, 4, 4, w)
            ck.int(b[0], 0, 1, w + "[0]")
            self._pin(ck, b[1], w + "[1]", "i2c%d" % i, True)
            self._pin(ck, b[2], w + "[2]", "i2c%d" % i, True)
            ck.int(b[3], 10000, 1000000, w + "[3]")
        self.units = ck.list(d.get("units", []), 0, MAX_UNITS, "units")
        for i, u in enumerate(self.units):
            w = "units[%d]" % i
            ck.list(u, 4, 4, w)
            ck.int(u[0], 0, len(self.rs485) - 1, w + "[0]")
            ck.int(u[1], 1, 247, w + "[1]")
            ck.int(u[2], 50, 3600000, w + "[2]")
            ck.list(u[3], 1, MAX_BATCHES, w + "[3]")
            for j, bt in enumerate(u[3]):
                wb = "%s[3][%d]" % (w, j)
                ck.list(bt, 3, 3, wb)
                fc = ck.int(bt[0], 1, 4, wb + "[0]")
                ck.int(bt[1], 0, 65535, wb + "[1]")
                ck.int(bt[2], 1, 2000 if fc <= 2 else 125, wb + "[2]")
                if bt[1] + bt[2] > 65536:
                    ck.fail(wb, "reads past address 65535")

    def _machines(self, ck, d):
        ms = ck.list(d.get("machines"), 1, MAX_MACHINES, "machines")
        n = self.n_machines = len(ms)
        self.ids = []
        self.kinds = []
        self.m_sample = array("i", bytearray(4 * n))  # ms between sample lines (0: on change only)
        self.m_settle = array("i", bytearray(4 * n))  # ms
        self.m_run = array("h", bytearray(2 * n))
        self.m_trip = array("h", bytearray(2 * n))
        self.m_cur = array("h", bytearray(2 * n))
        self.m_cur_lim = array("i", bytearray(4 * n))
        for i, m in enumerate(ms):
            w = "machines[%d]" % i
            ck.list(m, 8, 8, w)
            mid = ck.word(m[0], 16, w + "[0]", "id")
            if mid in self.ids:
                ck.fail(w + "[0]", "machine id %s twice" % m[0])
            self.ids.append(mid)
            if type(m[1]) is not str or not 0 < len(m[1]) <= 24:
                ck.fail(w + "[1]", "must be a kind of 1..24 characters")
            self.kinds.append(m[1])
            self.m_sample[i] = ck.int(m[2], 0, 86400, w + "[2]") * 1000
            self.m_settle[i] = ck.int(m[3], 0, 3600, w + "[3]") * 1000
            self.m_run[i] = ck.int(m[4], -1, 255, w + "[4]")
            self.m_trip[i] = ck.int(m[5], -1, 255, w + "[5]")
            self.m_cur[i] = ck.int(m[6], -1, MAX_SIGNALS - 1, w + "[6]")
            self.m_cur_lim[i] = ck.int(m[7], -_LIM + 1, _LIM - 1, w + "[7]")

    def _contacts(self, ck, d):
        cs = ck.list(d.get("contacts", []), 0, 2 * MAX_MACHINES, "contacts")
        self.n_contacts = len(cs)
        self.di_contacts = []  # [contact, pin, active, pull, debounce_ms] (firmware/contacts.py)
        self.modbus_contacts = []  # [contact, unit, batch, offset, bit, invert] (firmware/modbus.py)
        self.c_invert = bytearray(len(cs) or 1)
        for i, c in enumerate(cs):
            w = "contacts[%d]" % i
            ck.list(c, 6, 6, w)
            kind = ck.int(c[0], 1, 2, w + "[0]")
            if kind == 1:
                self._pin(ck, c[1], w + "[1]", "contact")
                ck.int(c[2], 0, 1, w + "[2]")
                ck.int(c[3], 0, 2, w + "[3]")
                ck.int(c[4], 0, 10000, w + "[4]")
                self.c_invert[i] = ck.int(c[5], 0, 1, w + "[5]")
                # the invert flag folds into the active level for a pin
                self.di_contacts.append([i, c[1], c[2] ^ c[5], c[3], c[4]])
            else:
                self._modbus_ref(ck, c[1], c[2], c[3], c[4], w, True)
                ck.int(c[5], 0, 1, w + "[5]")
                self.modbus_contacts.append([i, c[1], c[2], c[3], c[4], c[5]])

    def _modbus_ref(self, ck, unit, batch, offset, bit, w, is_bool, width=1):
        ck.int(unit, 0, len(self.units) - 1, w + " unit")
        bts = self.units[unit][3]
        ck.int(batch, 0, len(bts) - 1, w + " batch")
        fc, _start, count = bts[batch]
        ck.int(offset, 0, count - width, w + " offset")
        ck.int(bit, -1, 15, w + " bit")
        if fc <= 2 and (bit != -1 or not is_bool):
            ck.fail(w, "coils and discrete inputs hold bools: no bit, no other type")

    def _signals(self, ck, d):
        ss = ck.list(d.get("signals"), 1, MAX_SIGNALS, "signals")
        n = self.n_signals = len(ss)
        self.keys = []
        self.tags = []
        self.units_of = []
        self.s_machine = bytearray(n)
        self.s_dec = bytearray(n)
        self.s_period = array("i", bytearray(4 * n))
        self.s_deadband = array("i", bytearray(4 * n))
        self.s_lo = array("i", bytearray(4 * n))
        self.s_hi = array("i", bytearray(4 * n))
        self.s_src = bytearray(n)
        self.sources = {}  # source type -> entries for its firmware class: [signal, params...]
        per = bytearray(self.n_machines)
        for i, s in enumerate(ss):
            w = "signals[%d]" % i
            ck.list(s, _SIG_HEAD, _SIG_HEAD + 10, w)
            m = ck.int(s[0], 0, self.n_machines - 1, w + "[0]")
            per[m] += 1
            if per[m] > MAX_PER_MACHINE:
                ck.fail(w, "machine %s has more than %d signals" % (self.ids[m].decode(), MAX_PER_MACHINE))
            key = ck.word(s[1], 8, w + "[1]", "key")
            tag = ck.word(s[2], 32, w + "[2]", "tag")
            for j in range(i):
                if self.s_machine[j] == m and (self.keys[j] == key or self.tags[j] == tag):
                    ck.fail(w, "key or tag twice on machine %s" % self.ids[m].decode())
            self.keys.append(key)
            self.tags.append(tag)
            self.units_of.append(ck.word(s[3], 8, w + "[3]", "unit"))
            self.s_machine[i] = m
            self.s_dec[i] = ck.int(s[4], 0, 3, w + "[4]")
            self.s_period[i] = ck.int(s[5], 10, 3600000, w + "[5]")
            self.s_deadband[i] = ck.int(s[6], 0, _LIM - 1, w + "[6]")
            self.s_lo[i] = ck.int(s[7], -_LIM + 1, _LIM - 1, w + "[7]")
            self.s_hi[i] = ck.int(s[8], -_LIM + 1, _LIM - 1, w + "[8]")
            t = ck.int(s[9], MODBUS, DI, w + "[9]")
            self.s_src[i] = t
            p = s[_SIG_HEAD:]
            if len(p) != _SRC_LEN[t]:
                ck.fail(w, "a %s source takes %d values, got %d" % (SOURCES[t].decode(), _SRC_LEN[t], len(p)))
            for j in range(len(p)):
                ck.int(p[j], -_LIM + 1, _LIM - 1, "%s[%d]" % (w, _SIG_HEAD + j))
            self._source(ck, t, p, w)
            self.sources.setdefault(t, []).append([i] + p)

    def _mul(self, ck, mul, shift, add, w, mul_max=1 << 14):
        if not -mul_max < mul < mul_max or not 0 <= shift <= 30 or not -_LIM < add < _LIM:
            ck.fail(w, "a scaling out of the board's integer range (mul %d, shift %d, add %d)" % (mul, shift, add))

    def _source(self, ck, t, p, w):
        if t == MODBUS:
            unit, batch, offset, typ, wo, bo, bit, mul, shift, add = p
            ck.int(typ, 0, 5, w + " type")
            ck.int(wo, 0, 1, w + " word order")
            ck.int(bo, 0, 1, w + " byte order")
            self._modbus_ref(ck, unit, batch, offset, bit, w, typ == 5, 2 if 2 <= typ <= 4 else 1)
            self._mul(ck, mul, shift, add, w, 1 << 16 if typ == 4 else 1 << 14)
        elif t == ADC or t == ADS1115:
            if t == ADC:
                self._pin(ck, p[0], w + " pin", "adc")
                ck.int(p[1], 1, 16, w + " samples")
                q = p[2:]
            else:
                ck.int(p[0], 0, len(self.i2c) - 1, w + " i2c bus")
                ck.int(p[1], 0x48, 0x4B, w + " address")
                ck.int(p[2], 0, 3, w + " channel")
                ck.int(p[3], 0, 5, w + " pga")
                q = p[4:]
            ck.int(q[0], 0, 1, w + " mode")
            self._mul(ck, q[1], q[2], 0, w)
            self._mul(ck, q[3], q[4], q[5], w, 1 << 15)
        elif t == MCP9600:
            ck.int(p[0], 0, len(self.i2c) - 1, w + " i2c bus")
            ck.int(p[1], 0x60, 0x67, w + " address")
            ck.int(p[2], 0, 7, w + " thermocouple")
            self._mul(ck, p[3], p[4], p[5], w, 1 << 15)
        elif t == PULSE:
            self._pin(ck, p[0], w + " pin", "pulse")
            ck.int(p[1], 0, 1, w + " measure")
            self._mul(ck, p[2], p[3], p[4], w, 1 << 15)
            ck.int(p[5], 1, 3, w + " edge")
            ck.int(p[6], 0, 2, w + " pull")
        else:  # DI
            self._pin(ck, p[0], w + " pin", "di")
            ck.int(p[1], 0, 1, w + " active")
            ck.int(p[2], 0, 2, w + " pull")
            ck.int(p[3], 0, 10000, w + " debounce")

    def _alarms(self, ck, d):
        self.interlocks = [ck.word(x, 24, "interlocks[%d]" % i, "upper")
                           for i, x in enumerate(ck.list(d.get("interlocks", []), 0, 64, "interlocks"))]
        al = ck.list(d.get("alarms", []), 0, MAX_ALARMS * self.n_signals, "alarms")
        per = bytearray(self.n_signals * 4)
        self.alarms = []  # [signal, level, limit, hysteresis, on, off, priority, running, interlock]
        for i, a in enumerate(al):
            w = "alarms[%d]" % i
            ck.list(a, 9, 9, w)
            s = ck.int(a[0], 0, self.n_signals - 1, w + "[0]")
            lv = ck.int(a[1], 0, 3, w + "[1]")
            if per[s * 4 + lv]:
                ck.fail(w, "two points of one level on signal %d" % s)
            per[s * 4 + lv] = 1
            ck.int(a[2], -_LIM + 1, _LIM - 1, w + "[2]")
            ck.int(a[3], 0, _LIM - 1, w + "[3]")
            ck.int(a[4], 0, 255, w + "[4]")
            ck.int(a[5], 0, 255, w + "[5]")
            ck.int(a[6], 1, 4, w + "[6]")
            ck.int(a[7], 0, 1, w + "[7]")
            ck.int(a[8], -1, len(self.interlocks) - 1, w + "[8]")
            if a[8] >= 0 and lv != 1 and lv != 3:
                ck.fail(w + "[8]", "only HIHI and LOLO points stand for an interlock")
            self.alarms.append(a)
        bd = ck.list(d.get("bad", []), 0, self.n_signals, "bad")
        seen = bytearray(self.n_signals)
        self.bad = []  # [signal, on, off, priority]
        for i, b in enumerate(bd):
            w = "bad[%d]" % i
            ck.list(b, 4, 4, w)
            s = ck.int(b[0], 0, self.n_signals - 1, w + "[0]")
            if seen[s]:
                ck.fail(w, "two BAD points on signal %d" % s)
            seen[s] = 1
            ck.int(b[1], 0, 255, w + "[1]")
            ck.int(b[2], 0, 255, w + "[2]")
            ck.int(b[3], 1, 4, w + "[3]")
            self.bad.append(b)


def digest(data):
    """The description's hash: the first 16 hex digits of SHA-256 over the file's bytes ("" where this
    firmware has no SHA-256)."""
    try:
        h = sha256(data).digest()
    except (ImportError, AttributeError, ValueError):  # no hashlib, or one without SHA-256
        return ""
    out = ""
    for i in range(8):
        out += "%02x" % h[i]
    return out


def parse(data, path="/plant.json", prof=None):
    """A PlantConfig from the compiled form's bytes, or PlantConfigError."""
    if len(data) > FILE_MAX:
        raise PlantConfigError("%s: %d bytes, at most %d" % (path, len(data), FILE_MAX))
    try:
        d = json.loads(data)
    except Exception:  # ValueError; MicroPython: also RuntimeError (nesting), MemoryError, UnicodeError
        raise PlantConfigError("%s is not valid JSON (truncated? recompile and deploy it again)" % path)
    return PlantConfig(d, path, prof, digest(data))


def load(path="/plant.json", prof=None):
    """parse() of the file at path; None when there is none (the node runs the built-in simulator). The file is
    read at its own size: a read of FILE_MAX bytes would ask a heap the model has fragmented for 32 KB at once."""
    import os

    try:
        size = os.stat(path)[6]
    except OSError:
        return None
    if size > FILE_MAX:
        raise PlantConfigError("%s: %d bytes, at most %d" % (path, size, FILE_MAX))
    with open(path, "rb") as f:
        data = f.read(size)
    return parse(data, path, prof)
