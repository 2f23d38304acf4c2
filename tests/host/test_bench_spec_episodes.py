"""tools/bench/spec.py's episodic loop (the node's stream: first PROMPT, then per episode a PROMPT and a note
decoded until a stop id or MAX_NOTE), on the tiny matched models: speculative greedy commits exactly the
baseline's notes, every note ends at a stop id or at MAX_NOTE, both modes run the same episodes, and the
geometry is the board profile's."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from shared import episode  # noqa: E402
from tools.bench import spec as bench_spec  # noqa: E402
from tools.demo import spec_models as sm  # noqa: E402

EPISODES = 3


def _args(**kw):
    base = dict(json=True, quick=True, plants="builtin", target=None, draft=None, k=4, max_pending=2, tokens=12,
                integer_max_mb=0, nodes=[1, 2], temps=[0.0, 0.7], sink=None, window=None, seed=1, format="episode",
                episodes=EPISODES, board="rp2040_pico", draft_top_k=8)
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.fixture(scope="module")
def env():
    return bench_spec.setup(_args())


def _check_notes(notes, stop, episodes, max_note=episode.MAX_NOTE):
    ends = {"stop": 0, "cap": 0}
    for per in notes:
        assert len(per) == episodes
        for nt in per:
            assert 1 <= len(nt) <= max_note
            assert not any(stop[t] for t in nt[:-1]), nt  # a stop id ends the note at once
            if stop[nt[-1]]:
                ends["stop"] += 1
            else:
                assert len(nt) == max_note, nt  # no stop: cut at MAX_NOTE exactly
                ends["cap"] += 1
    return ends


def test_quick_geometry_is_the_profile_and_stops_are_the_quick_ids(env):
    assert (env["geo"]["sink"], env["geo"]["window"]) == (4, 28)  # boards/rp2040_pico.json kv, not 252
    assert env["geo"]["node_staged"] == 8 and env["geo"]["gateway_staged"] == 17
    assert env["stop_list"] == list(bench_spec.QUICK_STOPS) and env["max_note"] == episode.MAX_NOTE
    assert np.flatnonzero(env["stop"]).tolist() == sorted(bench_spec.QUICK_STOPS)
    s = env["sources"][0]
    assert s.prompt(1, True)[0] == bench_spec.QUICK_STOPS[0] and s.prompt(1, True)[1:] == s.prompt(1, False)
    with pytest.raises(ValueError):
        s.prompt(EPISODES, False)


@pytest.mark.parametrize("n", [1, 2])
def test_greedy_episodes_equal_the_baseline(env, n):
    args = _args()
    m = bench_spec.measure(env, n, 0.0, args)
    notes = m["_notes"]
    sp, b = m["speculative"], m["baseline_batched_ar"]
    assert sp["equals_baseline_greedy"] is True and notes["speculative"] == notes["baseline"]
    ends = _check_notes(notes["speculative"], env["stop"], EPISODES)
    assert sp["episodes"] == b["episodes"] == n * EPISODES
    assert sp["committed"] == b["committed"] == sum(len(nt) for per in notes["baseline"] for nt in per)
    assert (sp["ended_at_stop"], sp["ended_at_max_note"]) == (ends["stop"], ends["cap"])
    if n == 2:
        assert ends["stop"] and ends["cap"]  # both endings are exercised
    # prompts are prefilled apart from decoding, in both modes
    assert sp["prefill_passes"] >= 1 + EPISODES and b["prefill_passes"] >= 1 + EPISODES
    if n == 1:  # the same PROMPTs, the long ones (first, third episode) in two steps, in both modes
        assert sp["prefill_passes"] == b["prefill_passes"] >= 3 + EPISODES
    assert sp["prefill_cpu_s"] > 0 and b["prefill_cpu_s"] > 0
    assert 0 < sp["acceptance_rate"] <= sp["acceptance_per_test"] <= 1
    # a speculative pass commits at least one token per stream; the baseline exactly one per decode pass
    assert sp["target_passes"] <= b["target_passes"]
    assert m["speedup_with_prefill"] > 0 and m["speedup"] > 0


def test_sampled_episodes_end_at_stop_or_max_note(env):
    m = bench_spec.measure(env, 2, 0.7, _args())
    for mode in ("speculative", "baseline"):
        _check_notes(m["_notes"][mode], env["stop"], EPISODES)
    assert m["speculative"]["episodes"] == m["baseline_batched_ar"]["episodes"] == 2 * EPISODES
    assert "equals_baseline_greedy" not in m["speculative"]


def test_baseline_feeds_a_notes_last_token_with_the_next_prompt():
    """The baseline's streams: decoding the notes alone, with the target's own greedy, gives the same notes."""
    pair = sm.make_pair(1, vocab=64)
    t = pair.target
    srcs = bench_spec.quick_sources(1, 2, 64)
    stop = np.zeros(64, bool)
    stop[list(bench_spec.QUICK_STOPS)] = True
    geo = {"sink": 4, "window": 28, "gateway_staged": 17}
    got = bench_spec.baseline(t, srcs, 0.0, geo, stop, episode.MAX_NOTE, 1)["notes"][0]
    cache = t.new_cache(4, 28, 17)
    unfed, cap, want = list(srcs[0].first), False, []
    for e in range(2):
        row = t.feed(cache, unfed + srcs[0].prompt(e, cap), last_only=True)[-1]
        note = []
        while True:
            tok = int(np.argmax(row))
            note.append(tok)
            if stop[tok] or len(note) == episode.MAX_NOTE:
                break
            row = t.forward(cache, [tok])[0]
            cache.commit(1)
        want.append(note)
        unfed, cap = [note[-1]], not stop[note[-1]]
    assert got == want


def test_run_quick_episode_keys():
    out = bench_spec.run(_args(nodes=[1], temps=[0.0], episodes=2))
    for key in ("speedup_n1", "speedup_with_prefill_n1", "greedy_speedup_with_prefill_n1", "acceptance_rate",
                "wire_bytes_per_draft_token", "target_passes_per_committed_token"):
        assert key in out, key
    r = out["results"]["greedy"]["n1"]
    assert r["speculative"]["equals_baseline_greedy"] and r["episodes"] == 2 and "_notes" not in r
    assert out["kv"]["window"] == 28 and out["format"] == "episode"
    with pytest.raises(SystemExit):
        bench_spec.main(["--quick", "--episodes", "0"])


def test_feed_batched_equals_feeding_each_cache_alone():
    """host/verifier.feed_batched (the verifier's and the baseline's prompt heads): every cache gets all its
    ids committed, with the rows target.feed gives it alone (float32: to rounding)."""
    from host.verifier import VerifierError, feed_batched

    t = sm.make_pair(1, vocab=64).target
    ids = [[1, 2, 3], list(range(5, 45)), [], list(range(10, 27))]
    caches = [t.new_cache(4, 28, 17) for _ in ids]
    last, passes = feed_batched(t, list(zip(caches, ids)))
    assert passes == 3  # 40 ids in chunks of 17: three passes, the other caches ride along
    for c, x, row in zip(caches, ids, last):
        assert c.pending == 0 and c.live == min(len(x), 32)
        if not x:
            assert row is None
            continue
        alone = t.feed(t.new_cache(4, 28, 17), x, last_only=True)[-1]
        assert np.allclose(row, alone, atol=1e-4)
    t.forward(caches[0], [7])
    with pytest.raises(VerifierError):
        feed_batched(t, [(caches[0], [1])])


def test_plant_sources_stream_generated_plants_of_the_split():
    """--plants unseen: node i streams generated plant 2000 + i of held-out kinds: its own machine ids in the
    PROMPTs (not the node simulator's), the system prompt first, the episode count asked for."""
    from tools.plants import generate
    from tools.train import corpus

    tok = corpus.tokenizer()
    srcs = bench_spec.plant_sources(2, 4, tok, "unseen")
    assert [s.episodes for s in srcs] == [4, 4]
    assert srcs[0].first == list(tok.encode(episode.system_prompt(), special=True))
    for i, s in enumerate(srcs):
        desc = generate.plant(2000 + i, "unseen")
        text = "".join(tok.decode(s.prompt(e, False)) for e in range(s.episodes))
        assert any(m["id"] in text for m in desc["machines"]), text
        assert not any(x in text for x in ("P-101", "M-201", "C-301", "CV-401")), text
    with pytest.raises(ValueError):
        srcs[0].prompt(4, False)
