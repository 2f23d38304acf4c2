"""fleet_page.py: the fleet view in a browser (`edgetwin fleet --mqtt URL --ui`), from host/fleet.py's model.

    GET /             every gateway (online, or why not), its nodes (link, board, health), alarms and trips,
                      the latest notes
    GET /events       server-sent events: "fleet" {html} whenever the rendering changed (looked at every TICK_S)
    GET /api/fleet    the same as JSON: the totals and each gateway's nodes
    /static/...       the page's CSS and its one small script (shipped in the package)

The HTML is rendered here, every text from the broker escaped (anyone who may publish under the prefix writes
it); the script only swaps it into place. The bind rules, the token and the Host check are the dashboard's
(host/ui/serve.py, app.guard).
"""

from __future__ import annotations

import asyncio
import json
from html import escape
from typing import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from host.fleet import Fleet
from host.ui.app import STATIC, guard

TICK_S = 1.0


def _t(iso: object) -> str:
    return escape(str(iso or "")[11:19])  # HH:MM:SS of an ISO time


def fleet_html(fleet: Fleet, broker: str, connected: bool) -> str:
    """The page's live part: a summary line, then one table per gateway."""
    tot = fleet.totals()
    out = ['<p class="legend"><span class="%s">%s %s</span>: %d gateways (%d online), %d nodes (%d online), '
           '%d events, %d duplicates dropped</p>'
           % ("up" if connected else "down", escape(broker), "connected" if connected else "reconnecting",
              tot["gateways"], tot["gateways_online"], tot["nodes"], tot["nodes_online"], tot["events"],
              tot["duplicates"])]
    with fleet.lock:
        if not fleet.gateways:
            out.append('<p class="empty">No gateway has published yet.</p>')
        for g in sorted(fleet.gateways.values(), key=lambda g: g.name):
            state = ("no status yet", "na") if g.online is None else ("online", "up") if g.online else (
                "offline: " + (g.reason or "?"), "down")
            out.append('<section class="gateway" data-gateway="%s"><h2>%s <span class="%s">%s</span></h2>'
                       '<table class="plant"><tr><th>node</th><th>link</th><th>health</th><th>alarms / trips</th>'
                       '<th>latest notes</th></tr>' % (escape(g.name), escape(g.name), state[1], escape(state[0])))
            for n in sorted(g.nodes.values(), key=lambda n: n.name):
                up = g.node_online(n)
                # a node's state is its gateway's view: unknown while the gateway is offline
                link = ("up", "up") if up else ("down", "down") if g.online else ("?", "na")
                health = " ".join("%s=%s" % (k, n.health[k]) for k in ("heap", "dropped", "backlog", "committed")
                                  if k in n.health)
                alarm = ""
                if n.last_alarm is not None:
                    a = n.last_alarm
                    limit = " (limit %s%s)" % (a["limit"], a.get("unit") or "") if a.get("limit") is not None else ""
                    alarm = '<div class="who">%s %s%s</div>' % (_t(a.get("time")), escape(" ".join(
                        str(a.get(k, "")) for k in ("machine", "tag", "value", "state"))), escape(limit))
                notes = "".join('<div class="note%s"><span class="meta">%s</span> %s</div>'
                                % ("" if note.get("verified") else " unverified", _t(note.get("time")),
                                   escape(str(note.get("text", "")))) for note in reversed(n.notes))
                out.append('<tr data-node="%s"><td>%s<div class="who">%s</div></td><td class="%s">%s%s</td>'
                           '<td>%s%s</td><td>%d / %d%s</td><td class="notes">%s</td></tr>' % (
                               escape(n.name), escape(n.name), escape(n.board), link[1], link[0],
                               '<div class="who">%s</div>' % escape(n.why) if n.why and not up else "",
                               escape(health), '<div class="notice">%s</div>' % escape(n.notice) if n.notice else "",
                               n.events["alarm"], n.events["trip"], alarm, notes))
            out.append("</table></section>")
    return "".join(out)


def fleet_json(fleet: Fleet) -> dict:
    tot = fleet.totals()
    with fleet.lock:
        gateways = {g.name: {"online": g.online, "reason": g.reason, "since_ms": g.since_ms, "nodes": {
            n.name: {"online": g.node_online(n), "board": n.board, "why": n.why, "health": n.health,
                     "notice": n.notice, "alarms": n.events["alarm"], "trips": n.events["trip"],
                     "annotations": n.events["annotation"], "notes": list(n.notes), "last_alarm": n.last_alarm}
            for n in g.nodes.values()}} for g in fleet.gateways.values()}
    return {"totals": tot, "gateways": gateways}


class FleetPage:
    """The app's state: the fleet, the broker's name and whether the listener is connected (a callable)."""

    def __init__(self, fleet: Fleet, broker: str, connected: Callable[[], bool], token: str | None = None,
                 hosts: tuple = ()) -> None:
        self.fleet = fleet
        self.broker = broker
        self.connected = connected
        self.token = token
        self.hosts = hosts
        self.closing = False

    def close(self) -> None:
        self.closing = True  # the event streams end at their next tick

    def html(self) -> str:
        return fleet_html(self.fleet, self.broker, self.connected())

    def page(self) -> str:
        return ("<!doctype html><html><head><meta charset='utf-8'><title>edgetwin fleet</title>"
                "<link rel='stylesheet' href='/static/dashboard.css'></head><body>"
                "<header><h1>edgetwin fleet</h1><span id='live' class='down'>connecting</span></header>"
                "<div id='fleet'>%s</div><script src='/static/fleet.js'></script></body></html>" % self.html())


def make_fleet_app(page: FleetPage):
    """The ASGI app: Starlette's routes inside the dashboard's access rules (app.guard)."""
    async def index(request: Request):
        return HTMLResponse(page.page())

    async def api(request: Request):
        return JSONResponse(fleet_json(page.fleet))

    async def events(request: Request):
        async def stream():
            last = None
            while not page.closing:
                if await request.is_disconnected():
                    return
                html = page.html()
                if html != last:
                    last = html
                    yield ("event: fleet\ndata: %s\n\n" % json.dumps({"html": html})).encode()
                else:
                    yield b": idle\n\n"  # keeps proxies and the browser's connection awake
                await asyncio.sleep(TICK_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    routes = [Route("/", index), Route("/events", events), Route("/api/fleet", api),
              Mount("/static", StaticFiles(directory=str(STATIC)), name="static")]
    return guard(Starlette(routes=routes), page.hosts, page.token)
