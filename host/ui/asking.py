"""asking.py: the dashboard's question box: `edgetwin ask`'s own path (host/qa.ask) in a worker thread.

The reranker and the target load once, at the first question (seconds), and stay; one question is answered
at a time (the models are not shared between threads), a second waits its turn. Each question runs in its
own thread and hands what happens to `emit(kind, data)`, which the app turns into server-sent events:
("progress", line), ("windows", [window, ...]) before the answer starts (each with n, node, span, relevance
and its log text), ("text", answer) once it is checked against the plant's record (host/answercheck.py; the
model's own text is never shown as it is), then ("done", {"answer", "cited": [n, ...], "unconfirmed": [claim,
...]}) or ("error", line); an unconfirmed claim is {"kind", "text", "machine", "why", ...} (Claim.as_dict).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable


class Asker:
    def __init__(self, db: str | Path, target: str = "domain", reranker: str | None = None, k: int = 3,
                 max_tokens: int = 64) -> None:
        self.db = Path(db)
        self.target = target
        self.reranker = reranker
        self.k = k
        self.max_tokens = max_tokens
        self._models: tuple | None = None
        self._lock = threading.Lock()

    def _load(self, emit: Callable[[str, object], None]) -> tuple:
        if self._models is None:
            from host import qa, target_delta, weights
            from host.prism.engine import Prism

            emit("progress", "loading the reranker and the target model (once)")
            path, domain, _label = target_delta.choose(self.target)
            answerer = qa.Answerer.from_gguf(str(path), domain)
            prism = Prism.from_pretrained(self.reranker or str(weights.reranker_dir()))
            self._models = (prism, answerer)
        return self._models

    def ask(self, question: str, emit: Callable[[str, object], None]) -> threading.Thread:
        """Answer `question` in a new thread, reporting to emit; returns the thread."""
        t = threading.Thread(target=self._run, args=(question, emit), name="dashboard-ask", daemon=True)
        t.start()
        return t

    def _run(self, question: str, emit: Callable[[str, object], None]) -> None:
        from host import qa

        question = " ".join(str(question).split())
        if not question:
            emit("error", "the question is empty")
            return
        if len(question) > 500:
            emit("error", "the question is longer than 500 characters")
            return

        def report(kind: str, data) -> None:
            if kind == "progress":
                emit("progress", data)
            elif kind == "chosen":
                _found, chosen, _ranking = data
                emit("windows", [{"n": s.n, "node": s.node, "span": s.span(), "relevance": round(s.prob, 3),
                                  "text": s.text} for s in chosen])
            elif kind == "text":
                emit("text", data)

        try:
            with self._lock:
                prism, answerer = self._load(emit)
                res = qa.ask(question, self.db, prism, answerer, k=self.k, max_tokens=self.max_tokens,
                             report=report)
        except Exception as e:  # noqa: BLE001  (any failure is the operator's one line, never a dead stream)
            emit("error", "%s: %s" % (type(e).__name__, e) if not isinstance(e, (ValueError, OSError)) else str(e))
            return
        emit("done", {"answer": res["answer"], "cited": [s.n for s in res["cited"]],
                      "unconfirmed": [c.as_dict() for c in res["unconfirmed"]], "total_s": res["times"].get("total_s")})
