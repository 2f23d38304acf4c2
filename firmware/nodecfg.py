# nodecfg.py: the node's settings (/node.json): defaults, the rule of every key, parsing and checking.
"""/node.json keys (defaults): seed 1, machines 4, sample_every 5 (the simulator's: its seed, machine count and
seconds between sample lines; unused with a plant description), tick_ms 1000 (one simulated second), queue 16
(lines), report_ms 2000, model (the profile's model file, or a path; null: no drafting), k (profile draft_k),
temperature 0, top_k 4, max_len 16 (annotation tokens per episode), prompt_max 48 (tokens of the log lines in a
prompt), offline_ms 4000, run_s 0 (0: forever), window 8, window_bytes 2048 (the link's retransmit window),
stream false (the memory plan's layout: false / "resident" holds the layers in RAM, "layer" / "phase" /
"matrix" read them from flash at every step, true means "phase"; deploy writes the mode `edgetwin plan`
chose), out_rows 64 (classifier rows per streamed block, from the same plan), tokenizer false (true: prompts
are shared/episode.py text encoded with the tokenizer the model file carries, read lazily from flash),
stop_ids [] (token ids that end a note), spill_bytes -1 (the flash spill ring's size: -1 the profile's
spill_bytes, 0 none), spill_path "/spill" (the ring's folder), write_ahead true (every line goes to the spill ring, flushed,
before it is sent, so a power cut loses none: a flash write per loop that logs; false: lines spill only when
the RAM queue is full), uid_path "/node.uid" (where a board without
machine.unique_id() keeps its generated id), episodes 4 (episodes waiting for the annotator), summary_s 600
(seconds between summary episodes, 0: none), faults [] ("MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND]" strings:
faults the simulator develops, the demo's early events), plant "/plant.json" (the compiled plant description
`edgetwin deploy --plant` writes: with it the node logs that plant's inputs, without it the simulator),
key_path "/link.key" (the link key `edgetwin deploy --node` provisions: with it every frame is signed; without
it the node runs unsigned, which a gateway refuses unless started with --insecure), counter_path "/link.ctr"
(where the signed-frame counter is reserved ahead, so it grows across reboots), code_trial_s 600 (a code update's
trial boot that has not reached the gateway this many seconds after boot is rolled back: firmware/codeslot.py).

Every value is checked (RULES; docs/NODE.md): a bad /node.json is a ConfigError naming the file and the key,
and the node then runs logs-only with the defaults and says why (firmware/node.py main). Boot time only:
everything here allocates.
"""
import json

from shared.compat import const

CONFIG = "/node.json"
DEFAULTS = {"seed": 1, "machines": 4, "sample_every": 5, "tick_ms": 1000, "queue": 16, "report_ms": 2000,
            "model": "", "k": 0, "temperature": 0, "top_k": 4, "max_len": 16, "prompt_max": 48,
            "offline_ms": 4000, "run_s": 0, "window": 8, "window_bytes": 2048, "stream": False, "out_rows": 64,
            "tokenizer": False, "stop_ids": [], "episodes": 4, "summary_s": 600, "faults": []}
DEFAULTS.update({"spill_bytes": -1, "spill_path": "/spill", "write_ahead": True,  # logging
                 "uid_path": "/node.uid"})  # identity
DEFAULTS["plant"] = "/plant.json"  # the compiled plant description (docs/PLANT.md); absent: the simulator
DEFAULTS.update({"key_path": "/link.key", "counter_path": "/link.ctr"})  # the link's key, its frame counter
DEFAULTS["code_trial_s"] = 600  # a code update's trial: its time to reach the gateway



class ConfigError(ValueError):
    """A bad /node.json: one line naming the file and the key."""


# key -> (kind, low, high): "int" (not bool), "num" (int or float, finite), "bool", "model" (str or null),
# "pow2" (an int power of two), "ids" (a list of at most `high` ints in 0..0xFFFFFF). Keys of DEFAULTS
# without a rule are checked against the type of their default (an int or a number >= 0, a bool, a str or null).
RULES = {"seed": ("int", 0, 0xFFFFFFFF), "machines": ("int", 1, 16), "sample_every": ("int", 1, 3600),
         "tick_ms": ("int", 1, 3600000), "queue": ("int", 1, 256), "report_ms": ("int", 1, 86400000),
         "model": ("model", 0, 0), "k": ("int", 0, 32), "temperature": ("num", 0, 10), "top_k": ("int", 1, 16),
         "max_len": ("int", 1, 4096), "prompt_max": ("int", 1, 4096), "offline_ms": ("int", 0, 86400000),
         "run_s": ("int", 0, 500000), "window": ("pow2", 1, 64), "window_bytes": ("int", 64, 0xFFFF),
         "stream": ("stream", 0, 0), "out_rows": ("int", 1, 4096), "spill_bytes": ("int", -1, 0x3FFFFFFF),
         "spill_path": ("path", 0, 0), "uid_path": ("path", 0, 0), "tokenizer": ("bool", 0, 0),
         "stop_ids": ("ids", 0, 16),
         "episodes": ("int", 1, 64), "summary_s": ("int", 0, 86400), "faults": ("faults", 0, 8),
         "plant": ("path", 0, 0), "key_path": ("path", 0, 0), "counter_path": ("path", 0, 0),
         "code_trial_s": ("int", 10, 86400)}
STREAM_MODES = ("resident", "layer", "phase", "matrix")  # shared/memplan.MODES, without importing the planner
CONFIG_MAX = const(4096)  # bytes: a longer /node.json is refused before it is parsed


def _show(v):
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _is_int(v):
    return type(v) is int  # bool is not an int here


def check_value(path, key, v):
    """v if it is a valid value of /node.json key `key`, else ConfigError naming the file and the key."""
    rule = RULES.get(key)
    if rule is None:
        d = DEFAULTS[key]
        rule = ("bool", 0, 0) if d is True or d is False else ("model", 0, 0) if d is None or type(d) is str \
            else ("num", 0, 0x3FFFFFFF) if type(d) is float else ("int", 0, 0x3FFFFFFF)
    kind, lo, hi = rule
    if kind == "int" or kind == "pow2":
        if _is_int(v) and lo <= v <= hi and (kind == "int" or not v & (v - 1)):
            return v
        want = "an int in %d..%d" % (lo, hi) if kind == "int" else "a power of two in %d..%d" % (lo, hi)
    elif kind == "num":
        if (_is_int(v) or type(v) is float) and v == v and lo <= v <= hi:
            return v
        want = "a number in %d..%d" % (lo, hi)
    elif kind == "bool":
        if v is True or v is False:
            return v
        want = "true or false"
    elif kind == "stream":  # the memory plan's layout (shared/memplan.MODES), or true ("phase") / false
        if v is True or v is False or v in STREAM_MODES:
            return v
        want = "true, false or one of %s" % ", ".join(STREAM_MODES)
    elif kind == "path":
        if type(v) is str and 0 < len(v) <= 128:
            return v
        want = "a file path of 1..128 characters"
    elif kind == "model":
        if v is None or (type(v) is str and len(v) <= 128):
            return v
        want = "a file path (at most 128 characters) or null"
    elif kind == "faults":  # a list of "MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND]" (gen_logs --inject's form)
        if type(v) is list and len(v) <= hi:
            for t in v:
                try:
                    parse_fault(t)
                except ValueError:
                    break
            else:
                return v
        want = "a list of at most %d faults like \"MACHINE:FAULT:3@600\"" % hi
    else:  # ids
        if type(v) is list and len(v) <= hi:
            for t in v:
                if not _is_int(t) or t < 0 or t > 0xFFFFFF:
                    break
            else:
                return v
        want = "a list of at most %d token ids (ints in 0..16777215)" % hi
    raise ConfigError("%s: key '%s' must be %s, got %s" % (path, key, want, _show(v)))


def parse_fault(text):
    """"MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND]" -> (second, machine, fault, severity, signal), or
    ValueError. Names are checked by the plant when the sampler starts (shared/plant.py inject)."""
    if type(text) is not str or not 0 < len(text) <= 64:
        raise ValueError("a fault must be a string of 1..64 characters")
    at = 0
    spec = text
    k = text.find("@")
    if k >= 0:
        spec = text[:k]
        when = text[k + 1:]
        if not when.isdigit() or len(when) > 6:
            raise ValueError("fault %s: the second after @ must be a whole number" % text)
        at = int(when)
    parts = spec.split(":")
    if not 2 <= len(parts) <= 4 or not all(parts):
        raise ValueError("fault %s: expected MACHINE:FAULT[:SEVERITY[:SIGNAL]][@SECOND]" % text)
    sev = 3
    if len(parts) >= 3:
        if not parts[2].isdigit() or not 1 <= int(parts[2]) <= 5:
            raise ValueError("fault %s: severity must be 1..5" % text)
        sev = int(parts[2])
    return at, parts[0], parts[1], sev, parts[3] if len(parts) == 4 else None


def parse_config(text, path=CONFIG):
    """The checked settings of a /node.json text (a dict of the keys it gives), or ConfigError."""
    if len(text) > CONFIG_MAX:
        raise ConfigError("%s: %d bytes, at most %d" % (path, len(text), CONFIG_MAX))
    try:
        cfg = json.loads(text)
    except Exception:  # ValueError; MicroPython: also RuntimeError (nesting), MemoryError
        raise ConfigError("%s is not valid JSON" % path)
    if not isinstance(cfg, dict):
        raise ConfigError("%s must hold a JSON object" % path)
    for key in cfg:
        if key not in DEFAULTS:
            raise ConfigError("%s: unknown key %s (known: %s)" % (path, _show(key), ", ".join(sorted(DEFAULTS))))
        check_value(path, key, cfg[key])
    return cfg


def load_config(path=CONFIG):
    """parse_config of the file at path; {} when there is none (every key at its default)."""
    try:
        with open(path) as f:
            text = f.read(CONFIG_MAX + 1)
    except OSError:
        return {}
    except Exception:  # UnicodeError (CPython), bytes that are not UTF-8
        raise ConfigError("%s is not UTF-8 text" % path)
    return parse_config(text, path)
