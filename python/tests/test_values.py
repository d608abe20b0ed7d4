"""Value models from Python: corrflow.ValueBatches gives the trainer's batches, and the PyTorch
module corrflow.values computes what corrflow's model computes (the exported model's weights,
the same batch: the CLS state and the decoder's outputs within 1e-4 of ONNX Runtime's, which
tests/value_models.rs checks against burn); progress events reach a Python receiver."""

import numpy as np
import pytest

import corrflow
from conftest import ROOT, corrflow as cli

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

TXFM = ROOT / "configs" / "txfm-tiny.toml"


@pytest.fixture(scope="module")
def value_model(work, pbmc_corpus):
    """txfm-tiny trained for a few steps on the bundled cells (their corpus keeps expression)."""
    run = work / "txfm"
    cli("train", "--corpus", pbmc_corpus, "--out", run, "--max-steps", 3, config=TXFM)
    model = work / "txfm.onnx"
    cli("export", "onnx", "--checkpoint", run, "--out", model, config=TXFM)
    return model


def batches(corpus, **kw):
    return corrflow.ValueBatches(str(corpus), batch_size=4, visible_genes=256, decode="hvg:1024", seed=0, **kw)


def test_value_batches_have_cls_first_the_visible_genes_and_targets_over_the_decoding_set(pbmc_corpus):
    b = batches(pbmc_corpus)
    first = next(iter(b))
    rows, length = first["input_ids"].shape
    assert rows == 4 and length == 257
    assert (first["input_ids"][:, 0] == b.cls).all() and (first["values"][:, 0] == 0).all()
    assert first["attention_mask"].all()
    assert first["counts"].shape == first["measured"].shape == (4, len(b.decode_genes))
    assert len(b.decode_genes) == 1024 and first["totals"].shape == (4,)
    # The same seed and epoch give the same batch.
    again = next(iter(batches(pbmc_corpus)))
    for key in ("input_ids", "values", "counts"):
        np.testing.assert_array_equal(first[key], again[key])
    with pytest.raises(ValueError, match="strategy must be 'random' or 'corrmask'"):
        batches(pbmc_corpus, strategy="pmi")


@pytest.mark.parametrize("visible", ["detected", "decoded-detected"])
def test_a_detected_pool_shows_the_encoder_no_zero_while_the_targets_keep_them(pbmc_corpus, visible):
    b = batches(pbmc_corpus, visible=visible)
    first = next(iter(b))
    shown = first["attention_mask"].astype(bool)
    shown[:, 0] = False  # <cls>
    assert shown.sum() > 0 and (first["values"][shown] > 0).all()
    if visible == "decoded-detected":
        assert np.isin(first["input_ids"][shown], b.decode_genes).all()
    # The decoder is still asked for every decoding gene, undetected ones included.
    assert (first["counts"] == 0).any() and (first["counts"] > 0).any()
    # The measured pool shows zeros among the same cells' genes.
    measured = next(iter(batches(pbmc_corpus)))
    assert (measured["values"][:, 1:] == 0).any()
    with pytest.raises(ValueError, match="visible must be one of"):
        batches(pbmc_corpus, visible="hvg")


def test_the_pytorch_value_model_with_the_exported_weights_equals_onnx_runtime_on_a_batch(value_model, pbmc_corpus):
    from corrflow.values import ValueModel, batch_tensors

    session = ort.InferenceSession(str(value_model))
    assert {i.name for i in session.get_inputs()} == {"input_ids", "values", "attention_mask"}
    model = ValueModel.from_onnx(str(value_model))
    assert session.get_outputs()[-1].shape[1] == len(batches(pbmc_corpus).decode_genes)
    batch = next(iter(batches(pbmc_corpus)))
    t = batch_tensors(batch)
    with torch.no_grad():
        cls, decoded = model(t["input_ids"], t["values"], t["attention_mask"])
    feeds = {"input_ids": batch["input_ids"], "values": batch["values"], "attention_mask": batch["attention_mask"]}
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert np.abs(cls.numpy() - want["cell_embedding"]).max() <= 1e-4
    assert np.abs(decoded.numpy() - want["decoded"]).max() <= 1e-4


def test_txfm_and_wced_losses_in_pytorch_equal_numpy():
    from corrflow.values import txfm_loss, wced_loss

    rng = np.random.default_rng(0)
    z = rng.normal(0, 10, (3, 20))
    out = rng.normal(0, 2, (3, 40))
    counts = np.where(rng.random((3, 20)) < 0.4, 0, rng.integers(1, 20, (3, 20))).astype(float)
    totals = counts.sum(1) + 50
    measured = (rng.random((3, 20)) > 0.1).astype(float)
    L = 1e5
    xhat = np.log(L + 1) * np.maximum(np.tanh(z / (4 * np.e)), 0)
    per = np.exp(xhat) - xhat * (1 + counts / totals[:, None] * L)
    want_txfm = np.mean([per[r][measured[r] > 0].mean() for r in range(3)])
    tt = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    got = txfm_loss(tt(z), tt(counts), tt(totals), tt(measured), L).item()
    assert abs(got - want_txfm) <= 1e-9 * max(1.0, abs(want_txfm))
    y = (counts > 0).astype(float)
    logits, level = out[:, :20], out[:, 20:]
    bce = np.logaddexp(0, logits) - y * logits
    want_bce = np.mean([bce[r][measured[r] > 0].mean() for r in range(3)])
    on = (y * measured) > 0
    want_mse = ((level - np.log1p(counts / totals[:, None] * 1e4)) ** 2)[on].mean()
    b, m = wced_loss(tt(out), tt(counts), tt(totals), tt(measured))
    assert abs(b.item() - want_bce) <= 1e-9 and abs(m.item() - want_mse) <= 1e-9


def test_progress_events_reach_a_python_receiver(work):
    from conftest import BUNDLED

    events = []
    corrflow.set_progress(lambda kind, task, name, unit, position, total, message: events.append((kind, name, position)))
    try:
        corrflow.ingest([str(BUNDLED)], corpus=str(work / "progress"), atlas="p", gene_column="gene_ids")
    finally:
        corrflow.set_progress(None)
    kinds = [e[0] for e in events if e[1] == "ingest"]
    assert kinds[0] == "start" and kinds[-1] == "finish" and "advance" in kinds
    assert events[-1][2] == 1000
    with pytest.raises(TypeError, match="set_progress takes"):
        corrflow.set_progress(42)
