"""``corrflow.pretrain`` with a value objective (txfm, wced) under torchrun: 2 processes on CPU
(gloo) on the trainer's value batches, exact resume with the held-out loss, and RUN/values/ into
``corrflow import values`` -> ``export onnx``, whose outputs equal the PyTorch model's on the same
batch. Skipped where torch is not installed."""

import json
import shutil
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("safetensors")

import corrflow  # noqa: E402
from conftest import ROOT, cli_path, corrflow as cli  # noqa: E402
from test_pretrain import finish, metrics, pretrain  # noqa: E402

TXFM = ROOT / "configs" / "txfm-tiny.toml"
WCED = ROOT / "configs" / "wced-tiny.toml"


@pytest.fixture(scope="module")
def value_runs(work, pbmc_corpus, pbmc_graph):
    """txfm stopped at 4 steps and continued to 6, an uninterrupted 6-step run, and a 3-step wced
    run (made side by side, 2 processes each)."""
    resumed, whole, wced = work / "values-resumed", work / "values-whole", work / "values-wced"
    a = pretrain(pbmc_corpus, pbmc_graph, resumed, 4, config=TXFM, background=True)
    b = pretrain(pbmc_corpus, pbmc_graph, whole, 6, config=TXFM, background=True)
    first, _ = finish(a)
    finish(b)
    second, err = pretrain(pbmc_corpus, pbmc_graph, resumed, 6, config=TXFM)
    wced_summary, _ = pretrain(pbmc_corpus, pbmc_graph, wced, 3, config=WCED)
    return {"resumed": resumed, "whole": whole, "wced": wced, "first": first, "second": second, "err": err,
            "wced_summary": wced_summary}


@pytest.mark.slow
def test_a_resumed_value_run_equals_an_uninterrupted_one(value_runs):
    r = value_runs
    assert r["first"]["steps"] == 4 and r["second"]["steps"] == 6 and r["second"]["resumed_from"] == 4
    assert r["second"]["values"].endswith("values") and "hf" not in r["second"]
    a, b = metrics(r["resumed"]), metrics(r["whole"])
    assert [m["step"] for m in a] == [m["step"] for m in b] == list(range(1, 7))
    for x, y in zip(a, b):
        assert x["loss"] == y["loss"] and x["lr"] == y["lr"], (x, y)
    # corrflow train's value schema: the visible genes per step (2 ranks x 8 cells x 256), and the
    # held-out loss at the end.
    assert a[0]["visible"] == 2 * 8 * 256 and a[0]["tokens"] == 2 * 8 * 257
    evals = [m for m in a if "eval_loss" in m]
    assert [m["step"] for m in evals] == [4, 6] or [m["step"] for m in evals] == [6]
    assert evals[-1]["eval_loss"] == [m for m in b if m["step"] == 6][0]["eval_loss"]
    assert np.isfinite(evals[-1]["eval_loss"])


def summary(out):
    return out if isinstance(out, dict) else json.loads(out.strip().splitlines()[-1])


def fails(*args):
    """Runs the CLI expecting it to fail; its stderr."""
    out = subprocess.run([str(cli_path()), *map(str, args)], capture_output=True, text=True)
    assert out.returncode != 0, out.stdout
    return out.stderr


def held_out(corpus, **kw):
    args = {"batch_size": 4, "visible_genes": 256, "decode": "hvg:1024", "eval_cells": 8, **kw}
    return corrflow._native.held_out_value_batches(str(corpus), **args)


def test_the_held_out_value_batches_are_fixed_and_held_out(pbmc_corpus):
    first, again = held_out(pbmc_corpus), held_out(pbmc_corpus)
    assert sum(b["input_ids"].shape[0] for b in first) == 8
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])
        np.testing.assert_array_equal(x["values"], y["values"])
    # No held-out cell's totals among the training batches' (the plan keeps them apart).
    train = {float(t) for b in corrflow.ValueBatches(str(pbmc_corpus), batch_size=64, visible_genes=256)
             for t in b["totals"]}
    assert not {float(t) for b in first for t in b["totals"]} <= train
    with pytest.raises(ValueError, match="mask_params: unknown parameter 'k'"):
        held_out(pbmc_corpus, mask_params=json.dumps({"k": 1}))


def load_values(directory):
    """The PyTorch model of a RUN/values/ directory, from its config and weights."""
    from safetensors.torch import load_file

    from corrflow.values import ValueModel

    cfg = json.loads((directory / "config.json").read_text())
    m, v = cfg["model"], cfg["model"]["values"]
    vocab = len((directory / "vocab" / "token_dictionary.tsv").read_text().splitlines()) - 1
    model = ValueModel(vocab, m["hidden"], m["ffn"], m["heads"], m["layers"], len(v["decode_genes"]),
                       outputs=2 if m["objective"] == "wced" else 1, input=m["input"], bins=v["bins"],
                       target_sum=v["target_sum"], positions=v["positions"], max_positions=m["max_positions"],
                       decoder_layers=v["decoder_layers"], decoder_width=v["decoder_width"],
                       layer_norm_eps=m["layer_norm_eps"])
    weights = load_file(str(directory / "model.safetensors"))
    with torch.no_grad():
        for name, param, _ in model._corrflow_slots():
            param.copy_(weights[name])
    return model.eval(), weights, cfg


@pytest.mark.slow
@pytest.mark.parametrize("run", ["resumed", "wced"])
def test_the_values_directory_imports_into_corrflow_and_runs_as_pytorch_does(value_runs, run, work, pbmc_corpus):
    from corrflow.values import ValueModel, batch_tensors

    values = value_runs[run] / "values"
    model, weights, cfg = load_values(values)
    imported = work / f"values-imported-{run}"
    s = summary(cli("import", "values", "--model", values, "--out", imported))
    assert s["objective"] == cfg["model"]["objective"] and s["step"] == cfg["step"]
    assert s["sha256_checked"] == len((values / "corrflow_sha256.txt").read_text().splitlines()) > 3
    assert s["parameters"] == sum(w.numel() for w in weights.values())
    onnx = work / f"values-{run}.onnx"
    cli("export", "onnx", "--checkpoint", imported, "--out", onnx)
    # The weights come back bit for bit through burn and the ONNX export.
    back = ValueModel.from_onnx(str(onnx)).corrflow_state()
    assert set(back) == set(weights)
    for name, w in weights.items():
        assert torch.equal(back[name], w), name
    # ONNX Runtime on a held-out batch = the PyTorch model.
    batch = held_out(pbmc_corpus, decode=cfg["model"]["values"]["decode"])[0]
    t = batch_tensors(batch)
    with torch.no_grad():
        cls, decoded = model(t["input_ids"], t["values"], t["attention_mask"])
    session = ort.InferenceSession(str(onnx))
    feeds = {k: batch[k] for k in ("input_ids", "values", "attention_mask")}
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert np.abs(cls.numpy() - want["cell_embedding"]).max() <= 1e-4
    assert np.abs(decoded.numpy() - want["decoded"]).max() <= 1e-4
    # And `embed` takes it like a model `corrflow train` wrote.
    import anndata

    adata = anndata.read_h5ad(ROOT / "datasets" / "default" / "pbmc1k.h5ad")[:6].copy()
    got = corrflow.embed(adata, model=onnx, key=None, gene_column="gene_ids")
    assert np.asarray(got).shape == (6, cfg["model"]["hidden"]) and np.isfinite(got).all()


@pytest.mark.slow
def test_a_damaged_or_foreign_values_directory_is_refused_naming_the_file(value_runs, tmp_path):
    source = value_runs["whole"] / "values"
    damaged = tmp_path / "damaged"
    shutil.copytree(source, damaged)
    data = bytearray((damaged / "model.safetensors").read_bytes())
    data[-3] ^= 0x01
    (damaged / "model.safetensors").write_bytes(bytes(data))
    err = fails("import", "values", "--model", damaged, "--out", tmp_path / "a")
    assert "model.safetensors" in err and "sha256" in err
    # No record, and a tensor the model has no place for.
    from safetensors.torch import load_file, save_file

    foreign = tmp_path / "foreign"
    shutil.copytree(source, foreign)
    (foreign / "corrflow_sha256.txt").unlink()
    weights = load_file(str(foreign / "model.safetensors"))
    save_file({**weights, "pooler.dense.weight": torch.zeros(2, 2)}, str(foreign / "model.safetensors"))
    err = fails("import", "values", "--model", foreign, "--out", tmp_path / "b")
    assert "pooler.dense.weight" in err and "no place" in err
    # A rank model's config.
    cfg = json.loads((foreign / "config.json").read_text())
    cfg["model"]["input"] = "rank"
    (foreign / "config.json").write_text(json.dumps(cfg))
    err = fails("import", "values", "--model", foreign, "--out", tmp_path / "c")
    assert "config.json" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_bad_value_settings_are_refused_with_the_file_and_key(tmp_path, pbmc_corpus, pbmc_graph, capsys):
    from corrflow.pretrain.cli import main

    args = ["--corpus", str(pbmc_corpus), "--graph", str(pbmc_graph), "--out", str(tmp_path / "run")]
    bad = tmp_path / "bad.toml"
    cases = [
        (TXFM.read_text().replace('input = "value"', 'input = "rank"'), "needs model.input = 'value' or 'bins'"),
        (TXFM.read_text().replace('decode = "hvg:1024"', 'decode = "hvg:0"'), "model.values.decode must be"),
        (TXFM.read_text().replace('strategy = "random"', 'strategy = "pmi"'), "use 'random' or 'corrmask'"),
        (TXFM.read_text().replace("[model.values]", "[model.values]\nwidth = 3"),
         "unknown key(s) ['width'] in [model.values]"),
        (TXFM.read_text().replace("gene_embedding_std = 0.02", "gene_embedding_std = 0"),
         "model.values.gene_embedding_std must be in (0, 100]"),
        (TXFM.read_text().replace('visible = "measured"', 'visible = "hvg"'), "model.values.visible must be one of"),
    ]
    for text, message in cases:
        assert text != TXFM.read_text(), message
        bad.write_text(text)
        assert main(["--config", str(bad), *args]) == 2
        assert message in capsys.readouterr().err
    assert main(["--config", str(TXFM), *args, "--init-from", str(pbmc_corpus)]) == 2
    assert "value model starts fresh" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_value_model_starts_with_its_gene_embeddings_at_the_configured_scale():
    from corrflow.values import ValueModel

    torch.manual_seed(0)
    m = ValueModel(500, 64, 128, 4, 2, 100).bert_init(gene_std=1.0)
    assert abs(float(m.tokens.weight.detach().std()) - 1.0) < 0.02
    assert abs(float(m.encoder.layers[0].linear1.weight.detach().std()) - 0.02) < 0.002
    assert abs(float(ValueModel(500, 64, 128, 4, 2, 100).bert_init().tokens.weight.detach().std()) - 0.02) < 0.002
