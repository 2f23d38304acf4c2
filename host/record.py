"""What the plant's record in the gateway's store says, for the Q&A (host/qa.py) and the answer check
(host/answercheck.py): the descriptions of the store's lines, the words of their plants, and the record's
own sentence when a machine logged nothing of the kind."""

from __future__ import annotations

import time


def fmt_ms(ms: int, time_only: bool = False) -> str:
    t = time.gmtime(ms // 1000)
    return time.strftime("%H:%M:%S" if time_only else "%Y-%m-%d %H:%M:%S", t)


def descriptions(store) -> list:
    """The descriptions of the lines the store holds (host/plantdesc.PlantDesc): every one it keeps, and those
    each node's first and latest lines name (LogStore.plant: a line that names none, as every line of a node
    without a description and of a store made before descriptions, is the built-in simulator's)."""
    kept = store.plants()
    named: list = []
    with store._lock:  # noqa: SLF001 (a read of the store's own connection)
        db = store._db  # noqa: SLF001
        if "plant" not in {r[1] for r in db.execute("PRAGMA table_info(logs)").fetchall()}:
            named.append(None)
        else:
            for (nid,) in db.execute("SELECT id FROM nodes").fetchall():
                for o in ("ASC", "DESC"):  # one index seek each (logs_node_time), not a scan of the lines
                    row = db.execute("SELECT plant FROM logs WHERE node=? ORDER BY wall_ms %s, id %s LIMIT 1"
                                     % (o, o), (nid,)).fetchone()
                    if row is not None and row[0] not in named and row[0] not in kept:
                        named.append(row[0])
    if not kept and not named:
        named.append(None)  # no line yet: the simulator's words
    out = [store.plant(h) for h in sorted(named, key=lambda h: h or "")] + list(kept.values())
    return list({d.hash: d for d in out if d is not None}.values())


def vocabulary(store):
    """What the words of a question mean in the plants of the store's lines (host/logwords.Vocabulary)."""
    from host import logwords

    return logwords.Vocabulary.of(descriptions(store))


def nothing(store, machine: str, what: str) -> str:
    """The record's answer when `machine` logged nothing of the kind: since when the log says so."""
    since = store.since_ms(machine)
    if since is None:
        return "Nothing of the kind in the log: no line names %s." % machine
    return "Nothing of the kind in the log since %s UTC on %s: %s." % (
        fmt_ms(since, time_only=True)[:5], fmt_ms(since)[:10], what)
