"""app.py: the dashboard's pages and live feeds (Starlette).

    GET /                 the plant: every node's health, its machines' plots, the annotations, the question box
    GET /node/{name}      one node's part of the same page
    GET /events[?node=N]  server-sent events: "update" {plant, plots, notes}, only what changed since the last
    GET /ask?q=...        server-sent events of one question: progress, windows, text, done | failed
    GET /api/status       the plant table's data as JSON
    /static/...           the page's own JS and CSS (shipped in the package: nothing from a network)

The HTML is rendered here (escaped); the page's script only swaps what an event carries into place.
Bound to loopback, a request must be addressed to it (Host 127.0.0.1, localhost or ::1: no DNS rebinding).
With a token (host/ui/serve.py: required off loopback), every request needs it: an Authorization: Bearer
header, or the cookie a first visit to /?token=... sets (then the address bar drops it).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from html import escape
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from host.ui import svg
from host.ui.feed import Feed

STATIC = Path(__file__).resolve().parent / "static"
TICK_S = 0.5  # how often an event stream looks for changes
COOKIE = "edgetwin_ui"


def _fmt_ms(ms: int, desc=None) -> str:
    """A wall time in the site's time zone of the description (UTC without one), labelled with the zone."""
    if desc is None:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
    return desc.site_time(ms).strftime("%Y-%m-%d %H:%M:%S ") + desc.timezone


def node_title(view, desc) -> str:
    """What a node is called on the page: its description's name (the name the plant gives it), not the name it
    is stored under, which may be the port it came in on; the simulator's nodes (every one runs the same
    description) by their store name."""
    if desc is not None and not desc.simulator and view.plant is not None:
        return desc.name
    return view.name


class Dashboard:
    """The app's state: the store's feed, the gateway's status (a callable), the question box."""

    def __init__(self, feed: Feed, status: Callable[[], dict | None], asker=None, title: str = "edgetwin",
                 token: str | None = None, hosts: tuple = ()) -> None:
        self.feed = feed
        self.hosts = hosts  # the Host headers accepted (loopback names); () accepts any
        self.status = status
        self.asker = asker
        self.title = title
        self.token = token
        self.closing = False
        self._rates: dict[str, tuple[float, int, float]] = {}  # node -> (when, tokens verified, rate)

    def close(self) -> None:
        """The event streams end at their next tick; the store's feed stops."""
        self.closing = True
        self.feed.close()

    # ---- the plant table ----

    def plant_rows(self) -> list[dict]:
        st = self.status() or {}
        sessions = {s.get("name"): s for s in st.get("sessions", [])}
        now = time.monotonic()
        rows = []
        with self.feed._lock:  # noqa: SLF001
            views = list(self.feed.nodes.values())
            for v in views:
                s = sessions.get(v.name)
                spec = (s or {}).get("spec") or {}
                desc = self.feed.desc(v.plant)
                row = {"node": v.name, "title": node_title(v, desc), "plant": desc.name if desc else None,
                       "timezone": desc.timezone if desc else "UTC", "board": v.board, "uid": v.uid,
                       "lines": v.lines, "spilled": v.spilled,
                       "heap": v.report.get("heap"), "dropped": v.report.get("dropped"), "notice": v.notice,
                       "link": None if s is None else bool(s.get("open") and s.get("established")),
                       "retransmits": None if s is None else s.get("link_tx_retx", 0),
                       "errors": None if s is None else (s.get("link_err_crc", 0) + s.get("link_err_cobs", 0)
                                                         + s.get("bad_frames", 0)),
                       "acceptance": (round(spec["accepted"] / spec["drafted"], 3)
                                      if spec.get("drafted") else None),
                       "tokens_s": None}
                if spec:
                    tok = int(spec.get("tokens_verified", 0))
                    was = self._rates.get(v.name)
                    rate = 0.0 if was is None else was[2]
                    if was is not None and now - was[0] >= 2.0:
                        rate = (tok - was[1]) / (now - was[0])
                        self._rates[v.name] = (now, tok, rate)
                    elif was is None:
                        self._rates[v.name] = (now, tok, 0.0)
                    row["tokens_s"] = round(rate, 2)
                rows.append(row)
        return rows

    def plant_html(self, only: str | None = None) -> str:
        rows = [r for r in self.plant_rows() if only is None or r["node"] == only]
        if not rows:
            return '<p class="empty">No node has sent a line yet.</p>'

        def cell(v, fmt="%s") -> str:
            return '<td class="na">-</td>' if v is None else "<td>%s</td>" % escape(fmt % (v,))

        out = ['<table class="plant"><tr><th>node</th><th>link</th><th>retransmits</th><th>errors</th><th>heap</th>'
               '<th>acceptance</th><th>tokens/s</th><th>lines logged</th><th>spilled</th></tr>']
        for r in rows:
            link = ('<td class="na">no gateway status</td>' if r["link"] is None else
                    '<td class="%s">%s</td>' % (("up", "up") if r["link"] else ("down", "down")))
            name = '<a href="/node/%s">%s</a>' % (quote(r["node"], safe=""), escape(r["title"]))
            who = " ".join(x for x in (r["node"] if r["title"] != r["node"] else "", r["board"], r["uid"]) if x)
            out.append('<tr data-node="%s"><td>%s<div class="who">%s%s</div></td>%s%s%s%s%s%s%s%s</tr>' % (
                escape(r["node"]), name, escape(who),
                '<div class="notice">%s</div>' % escape(r["notice"]) if r["notice"] else "",
                link, cell(r["retransmits"]), cell(r["errors"]), cell(r["heap"], "%s B"), cell(r["acceptance"]),
                cell(r["tokens_s"]), cell(r["lines"]),
                cell(r["spilled"] if r["dropped"] in (None, "0") else "%s (%s dropped)" % (r["spilled"], r["dropped"]))))
        out.append("</table>")
        return "".join(out)

    # ---- plots and notes ----

    def plots(self, only: str | None, seen: dict) -> dict:
        """{element id: svg} of the machines changed since `seen` (updated in place)."""
        out = {}
        with self.feed._lock:  # noqa: SLF001
            for nid, v in self.feed.nodes.items():
                if only is not None and v.name != only:
                    continue
                for mname, m in self._machines(v):
                    key = "plot-%d-%s" % (nid, mname)
                    if seen.get(key) == m.version:
                        continue
                    seen[key] = m.version
                    desc = self.feed.desc(m.plant)
                    mdesc = desc.machine(mname) if desc is not None else None
                    out[key] = {"node": v.name, "title": node_title(v, self.feed.desc(v.plant)),
                                "svg": svg.machine_plot(mname, list(m.samples), list(m.events), mdesc,
                                                        desc.tz if desc else svg.UTC,
                                                        desc.timezone if desc else "UTC")}
        return out

    def _machines(self, v) -> list:
        """A node's machines in its description's order (then any it does not name, by id)."""
        desc = self.feed.desc(v.plant)
        order = {mid: i for i, mid in enumerate(desc.ids)} if desc is not None else {}
        return sorted(v.machines.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))

    def notes(self, only: str | None, after: int) -> tuple[list[str], int]:
        out = []
        with self.feed._lock:  # noqa: SLF001
            notes = [n for n in self.feed.notes if n["id"] > after and (only is None or n["node"] == only)]
            top = max([after] + [n["id"] for n in self.feed.notes])
            plants = {v.name: self.feed.desc(v.plant) for v in self.feed.nodes.values()}
        for n in notes:
            spans = n["spans"] or [["draft" if n["verified"] else "unverified", n["text"]]]
            body = "".join('<span class="%s">%s</span>' % (k, escape(t)) for k, t in spans)
            out.append('<li class="note%s" data-id="%d"><span class="meta">%s %s%s</span> %s</li>' % (
                "" if n["verified"] else " unverified-note", n["id"], escape(n["node"]),
                _fmt_ms(n["t0_ms"], plants.get(n["node"])),
                "" if n["verified"] else ' <b class="badge">unverified</b>', body))
        return out, top

    # ---- pages ----

    def page(self, only: str | None) -> str:
        head = escape(self.title) + (" / " + escape(only) if only else "")
        with self.feed._lock:  # noqa: SLF001
            ids = [mid for v in self.feed.nodes.values() for mid, _m in self._machines(v)]
        example = "why did %s trip?" % ids[0] if ids else "why did it trip?"  # a machine of this plant
        ask = ('<section id="ask"><h2>Ask</h2><form id="ask-form"><input id="question" name="q" autocomplete="off" '
               'placeholder="%s" size="60"><button type="submit">Ask</button></form>'
               '<div id="ask-progress"></div><div id="answer"></div><div id="unconfirmed"></div>'
               '<ol id="windows"></ol></section>'
               % escape(example) if self.asker is not None else "")
        return ("<!doctype html><html><head><meta charset='utf-8'><title>%s</title>"
                "<link rel='stylesheet' href='/static/dashboard.css'></head><body data-node='%s'>"
                "<header><h1><a href='/'>%s</a></h1><span id='live' class='down'>connecting</span></header>"
                "<section><h2>Plant</h2><div id='plant'>%s</div></section>"
                "<section><h2>Machines</h2><p class='legend'>samples of each machine's signals from the log store; "
                "<span class='ev-alarm'>|</span> an alarm raised, <span class='ev-trip'>|</span> a trip, dashed: the "
                "alarm limits of the plant's description; times in the site's time zone</p>"
                "<div id='plots'></div></section>"
                "<section><h2>Annotations</h2><p class='legend'><span class='draft'>accepted draft tokens</span> "
                "<span class='fix'>the target's corrections</span> <span class='unverified'>unverified (drafted "
                "while the gateway was away)</span></p><ol id='notes' reversed></ol></section>%s"
                "<script src='/static/dashboard.js'></script></body></html>"
                % (head, escape(only or ""), head, self.plant_html(only), ask))


def _sse(event: str, data) -> bytes:
    return ("event: %s\ndata: %s\n\n" % (event, json.dumps(data))).encode()


def make_app(dash: Dashboard) -> Starlette:
    async def index(request: Request):
        return HTMLResponse(dash.page(None))

    async def node_page(request: Request):
        name = request.path_params["name"]
        if not any(v.name == name for v in list(dash.feed.nodes.values())):
            return PlainTextResponse("no node %s in the store" % name, status_code=404)
        return HTMLResponse(dash.page(name))

    async def api_status(request: Request):
        return JSONResponse({"nodes": dash.plant_rows(), "gateway": dash.status()})

    async def events(request: Request):
        only = request.query_params.get("node") or None

        async def stream():
            seen: dict = {}
            after = 0
            plant = None
            version = -1
            last = 0.0
            while not dash.closing:
                if await request.is_disconnected():
                    return
                now = time.monotonic()
                if dash.feed.version != version or now - last >= 2.0:  # health changes without new rows too
                    version = dash.feed.version
                    last = now
                    html = dash.plant_html(only)
                    notes, after = dash.notes(only, after)
                    plots = dash.plots(only, seen)
                    msg = {"notes": notes, "plots": plots}
                    if html != plant:
                        plant = msg["plant"] = html
                    if notes or plots or "plant" in msg:
                        yield _sse("update", msg)
                    else:
                        yield b": idle\n\n"  # a comment: keeps proxies and the browser's connection awake
                await asyncio.sleep(TICK_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def ask(request: Request):
        if dash.asker is None:
            return PlainTextResponse("this dashboard answers no questions", status_code=404)
        question = request.query_params.get("q", "")
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()

        def emit(kind: str, data) -> None:
            loop.call_soon_threadsafe(q.put_nowait, (kind, data))

        dash.asker.ask(question, emit)

        async def stream():
            while True:
                kind, data = await q.get()
                yield _sse("failed" if kind == "error" else kind, data)  # "error" is EventSource's own event
                if kind in ("done", "error"):
                    return

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    routes = [Route("/", index), Route("/node/{name}", node_page), Route("/events", events), Route("/ask", ask),
              Route("/api/status", api_status), Mount("/static", StaticFiles(directory=str(STATIC)), name="static")]
    return guard(Starlette(routes=routes), dash.hosts, dash.token)


def guard(app, hosts: tuple, token: str | None):
    """The access rules around an app (this one, and the fleet view's, host/ui/fleet_page.py): bound to loopback,
    only requests addressed to it; with a token, only requests that carry it."""
    if hosts:
        # bound to loopback: only requests addressed to it (a page elsewhere whose name resolves to 127.0.0.1,
        # DNS rebinding, gets 400 and reads nothing)
        app = TrustedHostMiddleware(app, allowed_hosts=list(hosts))
    return TokenGate(app, token) if token else app


class TokenGate:
    """ASGI middleware: every HTTP request must carry the token (Bearer header or the cookie); a visit with
    ?token=... sets the cookie and redirects to the same page without it."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def _ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        req = Request(scope)
        auth = req.headers.get("authorization", "")
        if self._ok(auth[7:] if auth.lower().startswith("bearer ") else None) or self._ok(req.cookies.get(COOKIE)):
            return await self.app(scope, receive, send)
        if self._ok(req.query_params.get("token")):
            resp = RedirectResponse(req.url.path, status_code=303)
            resp.set_cookie(COOKIE, req.query_params["token"], httponly=True, secure=True, samesite="strict")
            return await resp(scope, receive, send)
        resp = PlainTextResponse("a token is needed: open /?token=... once, or send Authorization: Bearer ...",
                                 status_code=401)
        return await resp(scope, receive, send)
