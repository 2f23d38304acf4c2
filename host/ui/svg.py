"""svg.py: one machine's signals as an SVG drawn on the server: a row per signal, alarms and trips marked.

The signals are the ones the machine's description names (host/plantdesc.py), in its order: each row is
labelled with the signal's key, what operators call it and its unit, scaled to its readings and the alarm
limits near them, which are dashed lines across the row (amber HI/LO, red HIHI/LOLO); a limit far from the
readings (it would flatten them: _scale) is named in the row's range text instead. Keys the description does not
name (or every key, without a description) follow, labelled as the lines give them. The x axis is the plant's
own time (the lines' timestamps) over the samples kept (host/ui/feed.SERIES), shown in the site's time zone
(the description's; UTC for the simulator) and labelled with it. An alarm raise is an amber line across all
rows, a trip a red one, each with its text as a tooltip (<title>); a missing reading breaks its line. The
root element carries data-points (the samples drawn), data-events and data-tz, which the tests read.
"""

from __future__ import annotations

import datetime
from html import escape

WIDTH = 560
ROW = 46
LEFT = 6
RIGHT = 150  # the label column
LABEL = 24  # characters of a signal's label the column holds
ZOOM = 4  # a row's scale spans at most this many times its readings' span (limits beyond it are named, not drawn)
TOP = 16
UTC = datetime.timezone.utc


def _clock(t: float, tz: datetime.tzinfo) -> str:
    return datetime.datetime.fromtimestamp(t, tz).strftime("%H:%M:%S")


def _rows(samples, machine_desc) -> list[tuple[str, str, str, tuple]]:
    """(key, label, unit, ((level, limit), ...)) per row: the description's signals, then keys it lacks."""
    rows = []
    known = set()
    for s in machine_desc.signals if machine_desc is not None else ():
        label = s.words[0] if s.words else s.tag.replace("_", " ")
        rows.append((s.key, label, s.unit, tuple((a.level, a.limit) for a in s.alarms)))
        known.add(s.key)
    for _t, _s, vals in samples:
        for k in vals:
            if k not in known:
                known.add(k)
                unit = next((vals[k][1] for _t2, _s2, v2 in reversed(samples) if k in v2), "")
                rows.append((k, "", unit, ()))
    return rows


def _scale(readings: list[float], limits: tuple) -> tuple[float, float, list, list]:
    """(lo, hi, limits drawn, limits off the scale) of one row. The scale covers the readings and the limits near
    them: a limit joins while the row stays at most ZOOM times the readings' own span, so a far HIHI does not
    flatten the signal to a line (it is named in the row's range text, with the way it lies)."""
    if not readings:
        values = [lim for _lv, lim in limits]
        return min(values), max(values), list(limits), []
    lo, hi = min(readings), max(readings)
    span = max(hi - lo, 0.05 * max(abs(lo), abs(hi)), 1e-9)
    shown, off = [], []
    for level, lim in sorted(limits, key=lambda p: max(p[1] - hi, lo - p[1], 0.0)):  # the nearest first
        if max(hi, lim) - min(lo, lim) <= ZOOM * span:
            lo, hi = min(lo, lim), max(hi, lim)
            shown.append((level, lim))
        else:
            off.append((level, lim))
    return lo, hi, sorted(shown, key=limits.index), sorted(off, key=limits.index)


def machine_plot(machine: str, samples, events, machine_desc=None, tz: datetime.tzinfo = UTC,
                 tz_name: str = "UTC") -> str:
    """The SVG of one machine; samples: (t, state, {key: (value, unit)}), events: (t, kind, label);
    machine_desc: its host.plantdesc.Machine or None; tz/tz_name: the site's time zone."""
    rows = _rows(samples, machine_desc)
    h = TOP + ROW * max(1, len(rows)) + 14
    ts = [s[0] for s in samples] + [e[0] for e in events]
    t0, t1 = (min(ts), max(ts)) if ts else (0.0, 1.0)
    span = max(1.0, t1 - t0)
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    state = samples[-1][1] if samples else ""
    kind = " (%s)" % machine_desc.kind if machine_desc is not None else ""
    out = ['<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 %d %d" width="%d" height="%d" '
           'data-machine="%s" data-points="%d" data-events="%d" data-tz="%s">'
           % (WIDTH, h, WIDTH, h, escape(machine), len(samples), len(events), escape(tz_name)),
           '<text x="%d" y="11" class="title">%s%s <tspan class="state-%s">%s</tspan></text>'
           % (LEFT, escape(machine), escape(kind), escape(state.lower()), escape(state))]
    lx = WIDTH - RIGHT + 6
    for i, (k, label, unit, limits) in enumerate(rows):
        y0 = TOP + i * ROW
        pts = [(t, vals[k][0]) for t, _s, vals in samples if k in vals]
        out.append('<rect x="%d" y="%d" width="%d" height="%d" class="row"/>' % (LEFT, y0 + 2, plot_w, ROW - 6))
        full = ("%s %s" % (k, label)).strip()
        shown = full if len(full) <= LABEL else full[:LABEL - 1] + "\u2026"  # the column's width; all of it on hover
        out.append('<text x="%d" y="%d" class="label" data-key="%s" data-unit="%s"><title>%s (%s)</title>%s</text>'
                   % (lx, y0 + 11, escape(k), escape(unit), escape(full), escape(unit), escape(shown)))
        if not pts and not limits:
            continue
        lo, hi, shown, off = _scale([v for _t, v in pts], limits)
        rng = hi - lo

        def y(v: float) -> float:  # a flat signal runs along the middle of its row
            return y0 + ROW - 6 - ((v - lo) / rng if rng else 0.5) * (ROW - 10)

        for level, lim in shown:
            out.append('<line class="limit limit-%s" x1="%d" x2="%d" y1="%.1f" y2="%.1f" data-level="%s" '
                       'data-limit="%g"><title>%s %s %g %s</title></line>'
                       % (level.lower(), LEFT, LEFT + plot_w, y(lim), y(lim), level, lim, escape(k), level, lim,
                          escape(unit)))
        seg: list[str] = []
        for t, _s, vals in list(samples) + [(None, "", {})]:  # a sample without the reading ("V=?") breaks the line
            if k in vals:
                seg.append("%.1f,%.1f" % (x(t), y(vals[k][0])))
                continue
            if seg:
                out.append('<polyline class="sig sig-%s" points="%s"/>' % (escape(k), " ".join(seg)))
            seg = []
        if pts:
            out.append('<text x="%d" y="%d" class="value">%g %s</text>' % (lx, y0 + 24, pts[-1][1], escape(unit)))
        beyond = "".join(" %s %g%s" % (lv, lim, "\u2191" if lim > hi else "\u2193") for lv, lim in off)
        out.append('<text x="%d" y="%d" class="range">%g..%g %s%s</text>'
                   % (lx, y0 + 35, lo, hi, escape(unit), escape(beyond)))
    for t, ev, label in events:
        out.append('<line class="ev ev-%s" x1="%.1f" x2="%.1f" y1="%d" y2="%d"><title>%s %s</title></line>'
                   % (ev, x(t), x(t), TOP, h - 14, _clock(t, tz), escape(label)))
    if ts:
        out.append('<text x="%d" y="%d" class="axis">%s</text>' % (LEFT, h - 2, _clock(t0, tz)))
        out.append('<text x="%d" y="%d" class="axis" text-anchor="end">%s %s (site time)</text>'
                   % (LEFT + plot_w, h - 2, _clock(t1, tz), escape(tz_name)))
    out.append("</svg>")
    return "".join(out)
