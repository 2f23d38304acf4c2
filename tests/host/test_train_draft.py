"""tools/train/train_draft.py's banded attention: the node's sink + ring window computed block by block gives what
the dense form (every key scored, a mask keeping the sink and the window) gives, for streams shorter and longer
than a block, with and without a sink, and its gradients agree too. torch only in the tools' tests."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the test extra installs it; the product never imports it

from tools.train import train_draft  # noqa: E402


@pytest.mark.parametrize("sink,window", [(4, 28), (0, 28), (4, 60), (2, 5)])
def test_banded_attention_equals_the_dense_form(sink, window):
    torch.manual_seed(sink * 100 + window)
    cfg = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab=97, sink=sink, window=window)
    model = train_draft.make_model(cfg)
    for t in (1, 3, train_draft.BLOCK - 1, train_draft.BLOCK, train_draft.BLOCK + 1, 3 * train_draft.BLOCK + 7, 211):
        ids = torch.randint(0, 97, (2, t))
        band, dense = model(ids), model(ids, dense=True)
        assert band.shape == dense.shape == (2, t, 97)
        assert torch.allclose(band, dense, atol=2e-5), (t, float((band - dense).abs().max()))


def test_banded_attention_sees_the_sink_and_nothing_past_the_window():
    """A token's logits move when a sink token or a token inside its window changes, and do not when a token
    between the sink and the window changes (so the band is not merely equal on random data by luck)."""
    torch.manual_seed(1)
    sink, window, t = 4, 28, 120
    cfg = dict(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab=97, sink=sink, window=window)
    model = train_draft.make_model(cfg)
    ids = torch.randint(1, 97, (1, t))
    base = model(ids)[0, -1]
    for pos, moves in ((1, True), (t - 1 - window, True), (t - 2 - window, False), (sink + 3, False), (t - 5, True)):
        other = ids.clone()
        other[0, pos] = (other[0, pos] + 7) % 97
        changed = not torch.allclose(model(other)[0, -1], base, atol=1e-6)
        assert changed == moves, (pos, moves)


def test_banded_gradients_equal_the_dense_forms():
    torch.manual_seed(2)
    cfg = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab=97, sink=4, window=28)
    model = train_draft.make_model(cfg)
    ids = torch.randint(0, 97, (2, 150))
    grads = []
    for dense in (False, True):
        model.zero_grad()
        model(ids, dense=dense).logsumexp(-1).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
