"""tools/train/corpus.py's lockstep grouping, the part of the draft's recipe that decides its streams' bits:
the same batches whether the corpus is made in one process or several (make_draft --jobs), for the built-in
plant and for generated plants; and
tools/environ.py, which gives those processes one BLAS thread each."""

from __future__ import annotations

from tools.train import corpus


def test_default_batches_are_the_recipes_grouping():
    batches = corpus.default_batches()
    train = corpus.seeds_of("train", corpus.DEFAULT_STREAMS["train"])
    assert batches[0] == train[:corpus.FIRST_TRAIN_BATCH] == list(range(26))
    middle = batches[1:-1]
    assert all(len(b) == corpus.TRAIN_BATCH for b in middle[:-1]) and 0 < len(middle[-1]) <= corpus.TRAIN_BATCH
    assert [s for b in middle for s in b] == train[corpus.FIRST_TRAIN_BATCH:]
    assert middle[0] == list(range(26, 38))
    held = corpus.seeds_of("validation", corpus.DEFAULT_STREAMS["validation"]) + \
        corpus.seeds_of("heldout", corpus.DEFAULT_STREAMS["heldout"])
    assert batches[-1] == held
    every = [s for b in batches for s in b]
    assert len(every) == len(set(every)) == sum(corpus.DEFAULT_STREAMS.values())


def test_plant_batches_are_the_generated_plants_training_and_validation_seeds():
    batches = corpus.plant_batches()
    train = [s for b in batches[:-1] for s in b]
    assert train == corpus.seeds_of("train", corpus.PLANT_STREAMS["train"])
    assert all(len(b) <= corpus.PLANT_BATCH for b in batches)
    assert batches[-1] == corpus.seeds_of("validation", corpus.PLANT_STREAMS["validation"])
    # the family has its own files beside the built-in plant's, and no held-out split: the benchmarks' plants
    assert corpus.stream_path(7, "plant").name == "plant-train-00007.npz"
    assert corpus.stream_path(7).name == "train-00007.npz"
    for bad in (lambda: corpus.stream_path(7, "other"), lambda: corpus.load_split("heldout", family="plant")):
        try:
            bad()
        except ValueError:
            continue
        raise AssertionError("accepted")


def test_generate_default_starts_no_process_when_every_stream_is_made(tmp_path, monkeypatch):
    made = []

    def path(seed, family="builtin"):
        p = tmp_path / ("%s-%d.npz" % (family, seed))
        p.write_bytes(b"")
        return p

    monkeypatch.setattr(corpus, "stream_path", path)
    monkeypatch.setattr(corpus, "_generate_batch", lambda seeds, log=None, family="builtin": made.append(seeds))
    logs = []
    corpus.generate_default(logs.append, jobs=2)
    corpus.generate_default(logs.append, jobs=1)
    assert made == [] and logs == []


def test_environ_sets_for_the_block_and_puts_back_what_was_there(monkeypatch):
    import os

    from tools.environ import ONE_BLAS_THREAD, environ

    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    try:
        with environ(ONE_BLAS_THREAD):
            assert all(os.environ[k] == "1" for k in ONE_BLAS_THREAD)
            raise RuntimeError("the block fails")
    except RuntimeError:
        pass
    assert os.environ["OMP_NUM_THREADS"] == "4" and "OPENBLAS_NUM_THREADS" not in os.environ
