"""Deterministic test corpus for the tokenizer: plant-floor logs and prose, with the awkward parts of text.

lines(n) returns n strings (the same on every run and Python version: a private xorshift32 drives every
choice). They mix: ISO timestamps, levels, tags, numbers with units (°C, µm, ±0.5, kΩ, m³/h, %), hex ids,
paths, key=value pairs, JSON and code fragments, contractions ('s 're 'll, also in capitals), mixed case,
runs of spaces, tabs, CR/LF and blank-line runs, NBSP / thin / ideographic spaces, and non-ASCII prose
(French, German, Spanish, Polish, Russian, Ukrainian, Greek, Chinese, Japanese, Korean, Arabic, Hebrew,
Hindi, Thai), emoji with ZWJ and skin tones, combining accents, superscript / fraction / Roman / fullwidth /
Arabic-Indic digits, and ~20 % fuzz lines of random characters drawn from all of these classes.

    python tests/host/corpus_lines.py [N] > corpus.jsonl   # one JSON string per line (texts hold newlines)
"""

from __future__ import annotations

import json
import sys

SEED = 20240611


class _Rng:
    def __init__(self, seed: int):
        self.s = seed & 0xFFFFFFFF or 1

    def next(self) -> int:
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        self.s = s
        return s

    def below(self, n: int) -> int:
        return self.next() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def chance(self, percent: int) -> bool:
        return self.below(100) < percent


LEVELS = ["INFO", "WARN", "ERROR", "DEBUG", "info", "Warn", "CRIT", "TRACE", "notice"]
UNITS = ["°C", "°F", "K", "µm", "mm", "mm/s", "bar", "kPa", "psi", "rpm", "Hz", "kHz", "A", "mA", "V", "kV", "kΩ",
         "Ω", "W", "kW", "kWh", "m³/h", "l/min", "%", "‰", "g", "kg", "t", "s", "ms", "µs", "h", "dB", "N·m", "m/s²",
         "ppm", "°", "lux", "C/min"]
ASSETS = ["pump", "Pump", "PUMP", "motor", "compressor", "valve", "conveyor", "boiler", "chiller", "fan", "press",
          "spindle", "bearing", "gearbox", "heat-exchanger", "tank", "extruder", "robot_arm", "kiln", "mixer"]
SIGNALS = ["temp", "temperature", "vibration", "pressure", "current", "flow", "level", "speed", "torque", "humidity",
           "voltage", "rms", "peak", "oil_temp", "dP", "setpoint", "SP", "PV", "CV", "duty"]
WORDS = ["the", "bearing", "is", "running", "hot", "check", "lubrication", "after", "shift", "change", "operator",
         "reported", "noise", "near", "line", "seal", "leak", "replaced", "filter", "alarm", "cleared", "again",
         "trend", "rising", "falling", "steady", "maintenance", "scheduled", "overdue", "Because", "However", "It",
         "We", "They", "should", "could", "would", "not", "be", "at", "on", "with", "and", "or", "but", "STOP",
         "OK", "NOK", "readings", "sensor", "drifted", "calibration", "tripped", "breaker", "restart", "unexpected"]
CONTRACTIONS = ["don't", "it's", "they'll", "we've", "I'm", "you're", "he'd", "can't", "won't", "IT'S", "DON'T",
                "pump's", "o'clock", "rock'n'roll", "'quoted'", "''", "'s", "'ll", "'re", "'S", "'Ve"]
PROSE = [
    "Le capteur de pression a détecté une surchauffe à 85 °C près de l'échangeur.",
    "Die Pumpe läuft seit 3 Stunden über dem Grenzwert; bitte Öl prüfen (Größe: 12 µm).",
    "La válvula número 7 está abierta; la presión bajó a 2,5 bar. ¿Revisamos el sensor?",
    "Łożysko pompy nr 3 grzeje się — temperatura rośnie o 2 °C/min.",
    "Температура подшипника насоса 3 растёт: 78,4 °C, проверьте смазку!",
    "Температура підшипника зростає; перевірте мастило, будь ласка.",
    "Η θερμοκρασία του ρουλεμάν αυξάνεται γρήγορα (ΔT = 4 K).",
    "3号泵轴承温度升高，请检查润滑。振动值为 4.2 mm/s。",
    "ポンプ３の軸受温度が上昇しています。潤滑を確認してください。",
    "3번 펌프 베어링 온도가 상승 중입니다. 윤활을 점검하세요.",
    "درجة حرارة المضخة ٣ ترتفع بسرعة، يرجى فحص التزييت.",
    "הטמפרטורה של המשאבה עולה, נא לבדוק את השימון.",
    "पंप ३ का तापमान बढ़ रहा है, कृपया स्नेहन जाँचें।",
    "อุณหภูมิของปั๊มกำลังเพิ่มขึ้น โปรดตรวจสอบการหล่อลื่น",
    "Ångström-level drift in the naïve café's résumé façade: coöperate, Zürich, São Paulo, Kraków.",
    "Combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323 and precomposed é ä ñ ộ.",
    "Emoji: ⚠️ alarm 🔥 pump 3 ✅ ok 👍🏽 👨‍🔧 🇩🇪 ❤️ 🛠 ⏱",
    "Symbols: ± × ÷ ≤ ≥ ≠ ≈ → ← ↑ ↓ ∑ √ ∞ ° µ Ω ‰ § © ® ™ € £ ¥ • … – — “quoted” «guillemets» ‘single’",
    "Digits of other kinds: ² ³ ¹ ½ ¼ ¾ Ⅻ ⅷ ① ⑳ １２３ ٣٤٥ ३४५ ๓๔ 〇",
    "Spaces:\u00a0nbsp,\u2009thin,\u202fnarrow,\u3000ideographic,\u2003em, end.",
]
CODE = [
    "if (temp >= 80.0) { alarm(\"HIGH\"); return -1; }",
    "for i in range(10):\n    total += x[i] ** 2  # sum of squares",
    "{\"id\": 42, \"pump\": \"P-03\", \"t\": 78.4, \"ok\": false, \"tags\": [\"a\", \"b\"]}",
    "SELECT avg(v) FROM samples WHERE asset='pump3' AND ts > now() - interval '1 hour';",
    "/var/log/edgetwin/pump-03_2024-06-11.log:1287: E1043 overcurrent",
    "https://plant.example.com/api/v2/assets/PUMP-003?from=2024-06-01T00:00:00Z&limit=500",
    "C:\\Plant\\Line2\\PLC\\alarms.csv;;;",
    "0x3FA2 0xdeadBEEF 0b1011_0010 1e-3 -2.5E+4 3.14159 1,000,000 12:34:56 v1.2.3-rc4",
    "<tag attr=\"v\">text</tag> &amp; &lt;br/&gt;",
    "a=1;b=2;c=3\td=4\t\te=5",
]
FUZZ_POOL = (
    "abcxyzABCXYZ" "0123456789" "  \t\n\r" ".,;:!?-_/\\()[]{}<>'\"`~@#$%^&*+=|" "éèüößñçÅØ" "абвгдЖЩЯ" "αβγΩ"
    "中文字符漢字" "ひらがなカタカナ" "한국어" "٠١٢٣" "०१२" "²³½⅓Ⅻ" "°µ±×÷≈→" "\u00a0\u2009\u3000\u2028\u0085"
    "\u0301\u0308\u200d\ufe0f" "😀🔥👍🏽🇺🇸" "\x0b\x0c"
)


def _number(r: _Rng) -> str:
    kind = r.below(7)
    if kind == 0:
        return str(r.below(10))
    if kind == 1:
        return str(r.below(100000))
    if kind == 2:
        return "%d.%d" % (r.below(1000), r.below(100))
    if kind == 3:
        return "-%d.%02d" % (r.below(50), r.below(100))
    if kind == 4:
        return "%d,%03d" % (r.below(99), r.below(1000))
    if kind == 5:
        return "%de-%d" % (r.below(9) + 1, r.below(9))
    return "0x%X" % r.next()


def _ts(r: _Rng) -> str:
    return "2024-%02d-%02dT%02d:%02d:%02d.%03dZ" % (r.below(12) + 1, r.below(28) + 1, r.below(24), r.below(60),
                                                     r.below(60), r.below(1000))


def _case(r: _Rng, s: str) -> str:
    k = r.below(10)
    if k == 0:
        return s.upper()
    if k == 1:
        return s.title()
    if k == 2:
        return s.lower()
    return s


def _ws(r: _Rng) -> str:
    return r.pick([" ", " ", " ", "  ", "   ", "\t", " \t", "\t\t", "    ", "\u00a0", " \n", "\n"])


def _log(r: _Rng) -> str:
    parts = [_ts(r) if r.chance(70) else "%d" % r.below(10 ** 9), "[%s]" % r.pick(LEVELS)]
    parts.append("%s%d.%s" % (r.pick(ASSETS), r.below(20), r.pick(SIGNALS)))
    for _ in range(r.below(4) + 1):
        k = r.below(6)
        if k == 0:
            parts.append("%s=%s%s" % (r.pick(SIGNALS), _number(r), r.pick(UNITS)))
        elif k == 1:
            parts.append("%s %s" % (_number(r), r.pick(UNITS)))
        elif k == 2:
            parts.append("(±%s %s)" % (_number(r), r.pick(UNITS)))
        elif k == 3:
            parts.append(_case(r, " ".join(r.pick(WORDS) for _ in range(r.below(6) + 1))))
        elif k == 4:
            parts.append(r.pick(CONTRACTIONS))
        else:
            parts.append("thr>%s%s, Δ=%s/min" % (_number(r), r.pick(UNITS), _number(r)))
    out = parts[0]
    for p in parts[1:]:
        out += (_ws(r) if r.chance(25) else " ") + p
    if r.chance(15):
        out += r.pick(["", " ", "  ", "\n", "\r\n", "\n\n", "\t", " \n\n  "])
    return out


def _prose(r: _Rng) -> str:
    words = [r.pick(WORDS) for _ in range(r.below(12) + 3)]
    if r.chance(40):
        words.insert(r.below(len(words)), r.pick(CONTRACTIONS))
    if r.chance(40):
        words.insert(r.below(len(words)), "%s%s" % (_number(r), r.pick(UNITS)))
    s = _case(r, " ".join(words))
    s = s[:1].upper() + s[1:] + r.pick([".", "!", "?", "...", "", ":", " —", ";"])
    if r.chance(50):
        s += " " + r.pick(PROSE)
    if r.chance(20):
        s = r.pick(PROSE) + _ws(r) + s
    return s


def _fuzz(r: _Rng) -> str:
    n = r.below(40) + 1
    return "".join(r.pick(FUZZ_POOL) for _ in range(n))


def lines(n: int = 2400, seed: int = SEED) -> list[str]:
    """n deterministic corpus lines (see the module docstring)."""
    r = _Rng(seed)
    out: list[str] = []
    out.extend(PROSE)
    out.extend(CODE)
    while len(out) < n:
        k = r.below(100)
        if k < 40:
            s = _log(r)
        elif k < 65:
            s = _prose(r)
        elif k < 72:
            s = r.pick(CODE)
            if r.chance(50):
                s = _ws(r) + s + _ws(r)
        elif k < 92:
            s = _fuzz(r)
        else:
            s = r.pick(PROSE) + "\n" + _log(r) + r.pick(["\n", "\n\n", "\r\n", "  \n", "\t\n"]) + _prose(r)
        out.append(s)
    return out[:n]


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8")
    for line in lines(int(sys.argv[1]) if len(sys.argv) > 1 else 2400):
        print(json.dumps(line, ensure_ascii=False))
