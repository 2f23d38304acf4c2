# profile_io.py: the checks of a board profile's "io" object (shared/profile.py loads this module for it).
"""What the plant checker (host/plantboard.py) checks a description's wiring against:

    gpio      [[first, last], ...]  the GPIO numbers the chip has
    reserved  {"25": "the on-board LED", ...}  pins the board itself uses: never a description's
    adc       [gpio, ...]  ADC channel n is on GPIO adc[n]
    uart, i2c {"1": {"tx": [...], "rx": [...]}, ...} / {"0": {"sda": [...], "scl": [...]}}: the controllers a
              description may take and the pins each function can be on (a function left out: any pin,
              through a GPIO matrix)

Host-side only in practice: the build writes /board.json without "io", so a board never imports this.
Errors are ValueError with the whole line; shared/profile.py raises them as its ProfileError (this module
imports nothing of it, so the two never import each other)."""

IO_KEYS = ("gpio", "reserved", "adc", "uart", "i2c")
IO_FUNCS = {"uart": ("tx", "rx"), "i2c": ("sda", "scl")}
MAX_GPIO = 63


def _short(value):
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def _io_fail(src, field, why, value):
    raise ValueError("%s: field '%s' %s, got %s" % (src, field, why, _short(value)))


def _pin_list(src, field, value):
    if type(value) is not list or len(value) > MAX_GPIO + 1:
        _io_fail(src, field, "must be a list of GPIO numbers", value)
    for p in value:
        if type(p) is not int or not 0 <= p <= MAX_GPIO:
            _io_fail(src, field, "must hold GPIO numbers 0..%d" % MAX_GPIO, p)


def _id_key(src, field, key):
    if not (0 < len(key) <= 2 and key.isdigit()):
        _io_fail(src, field, "must be keyed by controller numbers (\"0\", \"1\" ...)", key)


def check(src, io):
    """Check a profile's "io" object; ValueError naming src and the field."""
    if type(io) is not dict:
        _io_fail(src, "io", "must be an object", io)
    for key in io:
        if key not in IO_KEYS:
            raise ValueError("%s: unknown field %s" % (src, _short("io." + key)))
    if "gpio" not in io:
        raise ValueError("%s: missing field 'io.gpio'" % src)
    ranges = io["gpio"]
    if type(ranges) is not list or not 1 <= len(ranges) <= 8:
        _io_fail(src, "io.gpio", "must be a list of 1..8 [first, last] GPIO ranges", ranges)
    for r in ranges:
        if type(r) is not list or len(r) != 2 or type(r[0]) is not int or type(r[1]) is not int or \
                not 0 <= r[0] <= r[1] <= MAX_GPIO:
            _io_fail(src, "io.gpio", "must hold [first, last] ranges within 0..%d" % MAX_GPIO, r)
    reserved = io.get("reserved", {})
    if type(reserved) is not dict:
        _io_fail(src, "io.reserved", "must be an object of GPIO number -> what the board uses it for", reserved)
    for key in reserved:
        why = reserved[key]
        if not (0 < len(key) <= 2 and key.isdigit() and int(key) <= MAX_GPIO):
            _io_fail(src, "io.reserved", "must be keyed by GPIO numbers", key)
        if type(why) is not str or not 1 <= len(why) <= 80:
            _io_fail(src, "io.reserved." + key, "must say in 1..80 characters what the board uses it for", why)
    if "adc" in io:
        _pin_list(src, "io.adc", io["adc"])
    for table in ("uart", "i2c"):
        ctl = io.get(table, {})
        if type(ctl) is not dict:
            _io_fail(src, "io." + table, "must be an object of controller number -> its pins", ctl)
        for key in ctl:
            _id_key(src, "io." + table, key)
            funcs = ctl[key]
            field = "io.%s.%s" % (table, key)
            if type(funcs) is not dict:
                _io_fail(src, field, "must be an object of function -> the pins it can be on", funcs)
            for f in funcs:
                if f not in IO_FUNCS[table]:
                    raise ValueError("%s: unknown field %s" % (src, _short(field + "." + f)))
                _pin_list(src, field + "." + f, funcs[f])
