# test_node_config.py: the node's /node.json loader (firmware/nodecfg.py) against mutated files, on both interpreters.
# Every case either loads to values a node can run with (checked here against the documented ranges,
# restated independently of nodecfg.RULES) or raises nodecfg.ConfigError naming /node.json (and the key, where
# one value is bad); any other exception fails the test with the case's text.
import json

import testkit
from firmware import nodecfg

CASES = 1200
PATH = "/node.json"


def _pow2(v):
    return v >= 1 and not v & (v - 1)


def _int_in(lo, hi):
    return lambda v: type(v) is int and lo <= v <= hi


# the ranges docs/NODE.md states for each key
ORACLE = {
    "seed": _int_in(0, 0xFFFFFFFF), "machines": _int_in(1, 16), "sample_every": _int_in(1, 3600),
    "tick_ms": _int_in(1, 3600000), "queue": _int_in(1, 256), "report_ms": _int_in(1, 86400000),
    "model": lambda v: v is None or (type(v) is str and len(v) <= 128), "k": _int_in(0, 32),
    "temperature": lambda v: type(v) in (int, float) and 0 <= v <= 10, "top_k": _int_in(1, 16),
    "max_len": _int_in(1, 4096), "prompt_max": _int_in(1, 4096), "offline_ms": _int_in(0, 86400000),
    "run_s": _int_in(0, 500000), "window": lambda v: type(v) is int and v <= 64 and _pow2(v),
    "window_bytes": _int_in(64, 0xFFFF), "stream": lambda v: v is True or v is False or v in ("resident", "layer", "phase", "matrix"),
    "out_rows": _int_in(1, 4096), "spill_bytes": _int_in(-1, 0x3FFFFFFF),
    "spill_path": lambda v: type(v) is str and 0 < len(v) <= 128, "uid_path": lambda v: type(v) is str and 0 < len(v) <= 128,
    "tokenizer": lambda v: v is True or v is False,
    "stop_ids": lambda v: type(v) is list and len(v) <= 16 and all(type(t) is int and 0 <= t <= 0xFFFFFF for t in v),
}

GOOD = {
    "seed": (0, 1, 7, 0xFFFFFFFF), "machines": (1, 4, 16), "sample_every": (1, 5, 3600), "tick_ms": (1, 50, 1000),
    "queue": (1, 16, 256), "report_ms": (1, 2000), "model": (None, "", "/draft.mbf"), "k": (0, 1, 4, 32),
    "temperature": (0, 0.7, 10), "top_k": (1, 4, 16), "max_len": (1, 16, 4096), "prompt_max": (1, 48),
    "offline_ms": (0, 4000), "run_s": (0, 5), "window": (1, 8, 64), "window_bytes": (64, 2048, 65535),
    "stream": (True, False, "matrix", "phase"), "out_rows": (1, 16, 64),
    "spill_bytes": (-1, 0, 65536), "spill_path": ("/spill.bin", "/s"), "uid_path": ("/node.uid",), "tokenizer": (True, False), "stop_ids": ([], [10], [0, 198, 0xFFFFFF]),
}

HOSTILE = (-1, 0, 1, 3, 17, 65, 65536, 2 ** 31, 2 ** 64, -2 ** 40, 0.5, -0.0, 1e308, 11, "", "1", "x" * 200,
           None, True, False, [], [1, "a"], [-1], [2 ** 24], list(range(17)), {}, {"a": 1}, [[1]])


def _pick(rng, seq):
    return seq[rng.below(len(seq))]


def _valid_cfg(rng):
    keys = sorted(GOOD)
    cfg = {}
    for _ in range(rng.below(6)):
        key = _pick(rng, keys)
        cfg[key] = _pick(rng, GOOD[key])
    return cfg


def _case(rng):
    """(json text, what was done, key mutated or None)."""
    cfg = _valid_cfg(rng)
    kind = rng.below(9)
    if kind <= 2:  # one value replaced by a hostile one
        key = _pick(rng, sorted(GOOD))
        cfg[key] = _pick(rng, HOSTILE)
        return json.dumps(cfg), "value", key
    if kind == 3:  # an unknown key
        cfg[_pick(rng, ("sampel_every", "Tick_ms", "", "model ", "\u00e9"))] = 1
        return json.dumps(cfg), "key", None
    text = json.dumps(cfg)
    if kind == 4:  # bytes of the text changed
        chars = list(text)
        for _ in range(1 + rng.below(3)):
            i = rng.below(len(chars) + 1)
            op = rng.below(3)
            c = _pick(rng, '{}[]":,0-9.eE ntfa\\\x00\u00ff')
            if op == 0 or not chars:
                chars.insert(i, c)
            elif op == 1:
                del chars[min(i, len(chars) - 1)]
            else:
                chars[min(i, len(chars) - 1)] = c
        return "".join(chars), "text", None
    if kind == 5:  # cut short
        return text[:rng.below(len(text) + 1)], "cut", None
    if kind == 6:  # not an object, nested, or too long
        return _pick(rng, ("[]", "1", '"x"', "null", "true", "[" * 300, '{"a":' * 200, " " * 5000 + "{}",
                           '{"model": "' + "m" * 5000 + '"}')), "shape", None
    return text, "valid", None


def _ok(cfg):
    for key in cfg:
        if key not in ORACLE or not ORACLE[key](cfg[key]):
            return key
    return None


def test_mutated_node_json_load_or_fail_clearly():
    rng = testkit.Rng(20261201)
    loaded = failed = 0
    for n in range(CASES):
        text, what, key = _case(rng)
        try:
            cfg = nodecfg.parse_config(text, PATH)
        except nodecfg.ConfigError as e:
            msg = str(e)
            assert msg.startswith(PATH), "case %d (%s): %s" % (n, what, msg)
            assert "\n" not in msg, msg
            if key is not None:
                assert "'%s'" % key in msg, "case %d: %r does not name %s" % (n, msg, key)
            assert what != "valid", "case %d: a valid file was refused: %s (%r)" % (n, msg, text)
            failed += 1
            continue
        except Exception as e:  # noqa: BLE001 - the point of the test
            raise AssertionError("case %d (%s) %r raised %s: %s" % (n, what, text[:200], type(e).__name__, e))
        assert type(cfg) is dict
        bad = _ok(cfg)
        assert bad is None, "case %d (%s) %r loaded a bad %s: %r" % (n, what, text[:200], bad, cfg.get(bad))
        if what == "valid":
            assert cfg == json.loads(text)
        loaded += 1
    assert loaded + failed == CASES
    assert loaded >= CASES // 5 and failed >= CASES // 3, (loaded, failed)  # both outcomes exercised
    print("%s: %d mutated /node.json files: %d loaded, %d refused" % (testkit.INTERPRETER, CASES, loaded, failed))


def test_every_default_passes_its_own_check():
    # the defaults are values the loader accepts (a default outside its range would be refused from a file)
    for key in nodecfg.DEFAULTS:
        assert nodecfg.check_value(PATH, key, nodecfg.DEFAULTS[key]) == nodecfg.DEFAULTS[key]
    cfg = nodecfg.parse_config(json.dumps(nodecfg.DEFAULTS), PATH)
    assert cfg == nodecfg.DEFAULTS


def test_a_missing_file_means_the_defaults():
    assert nodecfg.load_config("/no/such/dir/node.json") == {}
