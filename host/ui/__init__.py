"""The gateway's dashboard (`edgetwin gateway --ui`, `edgetwin ui --db plant.db`): a Starlette app under uvicorn.

- feed.py: follows the log store's committed rows from its own read-only connection (as host/mqtt.py does)
  into per-node health, per-machine signal series with their alarms and trips, and the annotations;
- svg.py: the plots, drawn on the server as SVG (no JavaScript plotting library, nothing from a CDN);
- asking.py: the question box: host/qa.ask (retrieval, PRISM, the target's streamed answer) in a worker thread;
- app.py: the pages, the server-sent-event feeds, the access token; static/ its own small JS and CSS;
- serve.py: the options the commands take, the loopback-only default, and the server thread;
- fleet_page.py: `edgetwin fleet --ui`, every gateway's nodes and notes from the broker (host/fleet.py), on the
  same server, bind rules and token.

docs/DASHBOARD.md says how to run it, what it exposes and how to secure it.
"""
