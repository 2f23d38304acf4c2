"""svg.py: one machine's signals as an SVG drawn on the server: a row per signal, alarms and trips marked.

The x axis is the plant's own time (the lines' timestamps) over the samples kept (host/ui/feed.SERIES); each
signal gets its own row and scale, labelled with its latest value. An alarm raise is an amber line across
all rows, a trip a red one, each with its text as a tooltip (<title>); a missing reading breaks its line. The root element carries
data-points (the samples drawn) and data-events, which the browser test reads.
"""

from __future__ import annotations

import time
from html import escape

WIDTH = 560
ROW = 46
LEFT = 6
RIGHT = 120  # the label column
TOP = 16


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def machine_plot(machine: str, samples, events) -> str:
    """The SVG of one machine; samples: (t, state, {key: (value, unit)}), events: (t, kind, label)."""
    keys: list[str] = []
    for _t, _s, vals in samples:
        for k in vals:
            if k not in keys:
                keys.append(k)
    h = TOP + ROW * max(1, len(keys)) + 14
    ts = [s[0] for s in samples] + [e[0] for e in events]
    t0, t1 = (min(ts), max(ts)) if ts else (0.0, 1.0)
    span = max(1.0, t1 - t0)
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    state = samples[-1][1] if samples else ""
    out = ['<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 %d %d" width="%d" height="%d" '
           'data-machine="%s" data-points="%d" data-events="%d">' % (WIDTH, h, WIDTH, h, escape(machine),
                                                                     len(samples), len(events)),
           '<text x="%d" y="11" class="title">%s <tspan class="state-%s">%s</tspan></text>'
           % (LEFT, escape(machine), escape(state.lower()), escape(state))]
    for i, k in enumerate(keys):
        y0 = TOP + i * ROW
        pts = [(t, vals[k][0]) for t, _s, vals in samples if k in vals]
        unit = next((vals[k][1] for _t, _s, vals in reversed(samples) if k in vals), "")
        out.append('<rect x="%d" y="%d" width="%d" height="%d" class="row"/>' % (LEFT, y0 + 2, plot_w, ROW - 6))
        if pts:
            lo = min(v for _t, v in pts)
            hi = max(v for _t, v in pts)
            rng = hi - lo

            def y(v: float) -> float:  # a flat signal runs along the middle of its row
                return y0 + ROW - 6 - ((v - lo) / rng if rng else 0.5) * (ROW - 10)

            seg: list[str] = []
            for t, _s, vals in samples + [(None, "", {})]:  # a sample without the reading ("V=?") breaks the line
                if k in vals:
                    seg.append("%.1f,%.1f" % (x(t), y(vals[k][0])))
                    continue
                if seg:
                    out.append('<polyline class="sig sig-%s" points="%s"/>' % (escape(k), " ".join(seg)))
                seg = []
            out.append('<text x="%d" y="%d" class="label">%s %g%s</text>'
                       % (WIDTH - RIGHT + 6, y0 + ROW // 2, escape(k), pts[-1][1], escape(unit)))
            out.append('<text x="%d" y="%d" class="range">%g..%g</text>' % (WIDTH - RIGHT + 6, y0 + ROW // 2 + 12,
                                                                              lo, hi))
    for t, kind, label in events:
        out.append('<line class="ev ev-%s" x1="%.1f" x2="%.1f" y1="%d" y2="%d"><title>%s %s</title></line>'
                   % (kind, x(t), x(t), TOP, h - 14, _clock(t), escape(label)))
    if ts:
        out.append('<text x="%d" y="%d" class="axis">%s</text>' % (LEFT, h - 2, _clock(t0)))
        out.append('<text x="%d" y="%d" class="axis" text-anchor="end">%s UTC (plant time)</text>'
                   % (LEFT + plot_w, h - 2, _clock(t1)))
    out.append("</svg>")
    return "".join(out)
