//! The encoder as an ONNX graph, written from the burn module's weights op by op in the order
//! burn computes them (burn's own exporter cannot express Embedding and the attention reshapes):
//!
//! ```text
//! x = LayerNorm(tokens[input_ids] + positions[0..seq])
//! per layer (post-LN):  x = LN1(x + MHA(x, pad));  x = LN2(x + W2·relu(W1·x))
//! MHA: softmax(QKᵀ/√d_k + pad·min_float)·V, heads split/merged by Reshape+Transpose
//! last_hidden_state = x;  cell_embedding = Σ w·x / max(Σ w, 1),  w = pooling_flag[input_ids]·mask
//! with a fine-tuned classifier: logits = W2·relu(W1·cell_embedding) (cells) or of each token's
//! state (genes); probabilities = softmax(logits)
//! ```

use burn::module::Param;
use burn::nn::transformer::TransformerEncoderLayer;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::graph::{attr_float, attr_int, attr_ints, value_info, GraphBuilder};
use super::proto::ValueInfoProto;
use super::proto::{dtype, GraphProto};
use crate::encoder::{CellEncoder, WholeCellHead};
use crate::value::ValueParts;
use corrflow_infer::model_meta::DECODED;
use corrflow_infer::model_meta::{
    ClassifierTask, ModelInput, ValueModel, ATTENTION_MASK, CELL_EMBEDDING, INPUT_IDS, LAST_HIDDEN_STATE, LOGITS,
    PROBABILITIES, VALUES,
};

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().iter::<f32>().collect()
}

fn param<B: Backend, const D: usize>(p: &Param<Tensor<B, D>>) -> (Vec<usize>, Vec<f32>) {
    let t = p.val();
    (t.dims().to_vec(), values(t))
}

fn add_linear<B: Backend>(g: &mut GraphBuilder, x: &str, l: &Linear<B>, name: &str) -> String {
    let (dims, w) = param(&l.weight);
    let w = g.weight(&format!("{name}.weight"), &dims, &w);
    let b = l.bias.as_ref().map(|b| {
        let (dims, v) = param(b);
        g.weight(&format!("{name}.bias"), &dims, &v)
    });
    g.linear(x, &w, b.as_deref())
}

fn add_layer_norm<B: Backend>(g: &mut GraphBuilder, x: &str, n: &LayerNorm<B>, eps: f64, name: &str) -> String {
    let (dims, gamma) = param(&n.gamma);
    let gamma = g.weight(&format!("{name}.gamma"), &dims, &gamma);
    let beta = match &n.beta {
        Some(b) => param(b).1,
        None => vec![0.0; dims[0]],
    };
    let beta = g.weight(&format!("{name}.beta"), &dims, &beta);
    g.op("LayerNormalization", &[x, &gamma, &beta], vec![attr_int("axis", -1), attr_float("epsilon", eps as f32)])
}

/// The encoder graph of the model's first `layers` layers. `pool_flags[token]` is 1 for tokens the cell embedding averages over
/// (gene tokens for mean pooling, `<cls>` for CLS pooling) and 0 otherwise. With `classifier`,
/// the model's label head adds the `logits` and `probabilities` outputs.
pub fn encoder_graph<B: Backend>(
    model: &CellEncoder<B>,
    layers: usize,
    layer_norm_eps: f64,
    pool_flags: &[f32],
    classifier: Option<ClassifierTask>,
) -> GraphProto {
    let mut g = GraphBuilder::default();
    let (tok_dims, tok) = param(&model.tokens.weight);
    let (pos_dims, pos) = param(&model.positions.weight);
    let hidden = tok_dims[1];
    let tok = g.weight("embeddings.tokens", &tok_dims, &tok);
    let pos = g.weight("embeddings.positions", &pos_dims, &pos);

    // Positions 0..seq from the input's shape, so the sequence axis stays dynamic.
    let shape = g.op("Shape", &[INPUT_IDS], vec![]);
    let one = g.ints("const.one", &[], &[1]);
    let zero = g.ints("const.zero", &[], &[0]);
    let seq = g.op("Gather", &[&shape, &one], vec![attr_int("axis", 0)]);
    let range = g.op("Range", &[&zero, &seq, &one], vec![]);
    let mut tok_emb = g.op("Gather", &[&tok, INPUT_IDS], vec![attr_int("axis", 0)]);
    if let (Some(parts), Some(config)) = (&model.value, &model.value_config) {
        tok_emb = add_value_embedding(&mut g, &tok_emb, hidden, model.input, parts, config);
    }
    let positions = model.value_config.as_ref().is_none_or(|v| v.positions);
    let sum = if positions {
        let pos_emb = g.op("Gather", &[&pos, &range], vec![attr_int("axis", 0)]);
        g.op("Add", &[&tok_emb, &pos_emb], vec![])
    } else {
        tok_emb
    };
    let mut x = add_layer_norm(&mut g, &sum, &model.embed_norm, layer_norm_eps, "embeddings.norm");

    // burn's mask_pad *replaces* the scores at padded keys by min_float (-1e4). Adding it instead
    // gives the same softmax whenever a row has a real key (exp(-1e4 + s) is 0 in f32 either way)
    // and costs about a quarter as much in ONNX Runtime, whose broadcasting `Where` over
    // [batch, heads, seq, seq] took 9% of the paper model's forward. Only an all-padding row,
    // which carries no cell, differs.
    let pad = g.op("Equal", &[ATTENTION_MASK, &zero], vec![]);
    let pad = g.op("Cast", &[&pad], vec![attr_int("to", i64::from(dtype::FLOAT))]);
    let axes12 = g.ints("const.axes12", &[2], &[1, 2]);
    let pad4 = g.op("Unsqueeze", &[&pad, &axes12], vec![]);
    for (i, layer) in model.encoder.layers.iter().take(layers).enumerate() {
        x = add_encoder_layer(&mut g, &x, layer, &format!("layer{i}"), &pad4, layer_norm_eps);
    }
    let last = g.op_named("Identity", &[&x], vec![], LAST_HIDDEN_STATE);

    add_pooling(&mut g, &last, pool_flags);
    if let Some(parts) = &model.value {
        add_decoder(&mut g, &last, parts);
    }

    let h = hidden as i64;
    let mut outputs = vec![
        value_info(LAST_HIDDEN_STATE, dtype::FLOAT, &[Err("batch"), Err("sequence"), Ok(h)]),
        value_info(CELL_EMBEDDING, dtype::FLOAT, &[Err("batch"), Ok(h)]),
    ];
    if let (Some(task), Some(head)) = (classifier, &model.label_head) {
        outputs.extend(add_classifier(&mut g, task, head));
    }
    if let Some(parts) = &model.value {
        let width = parts.decoder_out.weight.val().dims()[1] as i64;
        outputs.push(value_info(DECODED, dtype::FLOAT, &[Err("batch"), Ok(width)]));
    }
    let mut inputs = vec![value_info(INPUT_IDS, dtype::INT64, &[Err("batch"), Err("sequence")])];
    if model.value.is_some() {
        inputs.push(value_info(VALUES, dtype::FLOAT, &[Err("batch"), Err("sequence")]));
    }
    inputs.push(value_info(ATTENTION_MASK, dtype::INT64, &[Err("batch"), Err("sequence")]));
    g.finish("corrflow_cell_encoder", inputs, outputs)
}

/// The fine-tuned label head on the cell embedding (cells) or on each token's state (genes): its
/// `logits` and `probabilities` nodes, and their output descriptions.
fn add_classifier<B: Backend>(
    g: &mut GraphBuilder,
    task: ClassifierTask,
    head: &WholeCellHead<B>,
) -> [ValueInfoProto; 2] {
    let (input, shape): (&str, Vec<Result<i64, &str>>) = match task {
        ClassifierTask::Cell => (CELL_EMBEDDING, vec![Err("batch")]),
        ClassifierTask::Gene => (LAST_HIDDEN_STATE, vec![Err("batch"), Err("sequence")]),
    };
    let inner = add_linear(g, input, &head.dense, "classifier.dense");
    let inner = g.op("Relu", &[&inner], vec![]);
    let logits = add_linear(g, &inner, &head.out, "classifier.out");
    let logits = g.op_named("Identity", &[&logits], vec![], LOGITS);
    g.op_named("Softmax", &[&logits], vec![attr_int("axis", -1)], PROBABILITIES);
    let classes = head.out.weight.val().dims()[1] as i64;
    let dims: Vec<Result<i64, &str>> = shape.into_iter().chain([Ok(classes)]).collect();
    [value_info(LOGITS, dtype::FLOAT, &dims), value_info(PROBABILITIES, dtype::FLOAT, &dims)]
}

/// A value model's decoder on the CLS state (position 0 of `last`): its raw outputs `[batch,
/// genes × outputs per gene]` as `crate::value::ValueParts::decode` computes them (txfm: the
/// logits `z` before `φ`; wced: detection logits, then levels).
fn add_decoder<B: Backend>(g: &mut GraphBuilder, last: &str, parts: &ValueParts<B>) {
    let first = g.ints("decoder.cls_index", &[], &[0]);
    let mut x = g.op("Gather", &[last, &first], vec![attr_int("axis", 1)]);
    let mut width = parts.decoder.first().map(|l| l.weight.val().dims()[0]);
    for (i, layer) in parts.decoder.iter().enumerate() {
        let y = add_linear(g, &x, layer, &format!("decoder.{i}"));
        let y = g.op("Relu", &[&y], vec![]);
        let out = layer.weight.val().dims()[1];
        x = if width == Some(out) { g.op("Add", &[&x, &y], vec![]) } else { y };
        width = Some(out);
    }
    let z = add_linear(g, &x, &parts.decoder_out, "decoder.out");
    g.op_named("Identity", &[&z], vec![], DECODED);
}

/// A value model's tokens from the gene embeddings `tok_emb` `[batch, seq, hidden]` and the
/// `values` input, as `crate::value::embed_values` computes them: TxFM's `[E (hidden − 1); x]`,
/// or `E + E_bin(x)` with the same bins (`ceil(x / ln(1 + L) · (bins − 1))` in `1..bins`, 0 for 0).
fn add_value_embedding<B: Backend>(
    g: &mut GraphBuilder,
    tok_emb: &str,
    hidden: usize,
    input: ModelInput,
    parts: &ValueParts<B>,
    config: &ValueModel,
) -> String {
    match (input, &parts.bins) {
        (ModelInput::Bins, Some(bins)) => {
            let (dims, w) = param(&bins.weight);
            let table = g.weight("embeddings.value_bins", &dims, &w);
            let steps = (config.bins - 1) as f32;
            let max = g.scalar("values.max", config.max_value() as f32);
            let steps_c = g.scalar("values.steps", steps);
            let one = g.scalar("values.one", 1.0);
            let zero_f = g.scalar("values.zero", 0.0);
            let scaled = g.op("Div", &[VALUES, &max], vec![]);
            let scaled = g.op("Mul", &[&scaled, &steps_c], vec![]);
            let scaled = g.op("Ceil", &[&scaled], vec![]);
            let scaled = g.op("Clip", &[&scaled, &one, &steps_c], vec![]);
            let is_zero = g.op("LessOrEqual", &[VALUES, &zero_f], vec![]);
            let bin = g.op("Where", &[&is_zero, &zero_f, &scaled], vec![]);
            let bin = g.op("Cast", &[&bin], vec![attr_int("to", i64::from(dtype::INT64))]);
            let bin_emb = g.op("Gather", &[&table, &bin], vec![attr_int("axis", 0)]);
            g.op("Add", &[tok_emb, &bin_emb], vec![])
        }
        _ => {
            let starts = g.ints("values.slice_start", &[1], &[0]);
            let ends = g.ints("values.slice_end", &[1], &[hidden as i64 - 1]);
            let axes = g.ints("values.slice_axis", &[1], &[2]);
            let genes = g.op("Slice", &[tok_emb, &starts, &ends, &axes], vec![]);
            let x = g.op("Unsqueeze", &[VALUES, &axes], vec![]);
            g.op("Concat", &[&genes, &x], vec![attr_int("axis", 2)])
        }
    }
}

/// One encoder layer on `x`: multi-head attention (scores plus the padding bias `pad4`,
/// `[batch, 1, 1, seq]`), residual and LayerNorm, feed-forward, residual and LayerNorm.
fn add_encoder_layer<B: Backend>(
    g: &mut GraphBuilder,
    x: &str,
    layer: &TransformerEncoderLayer<B>,
    name: &str,
    pad4: &str,
    layer_norm_eps: f64,
) -> String {
    let mha = &layer.mha;
    let hidden = mha.n_heads * mha.d_k;
    let (heads, d_k) = (mha.n_heads as i64, mha.d_k as i64);
    let split = g.ints(&format!("{name}.split_shape"), &[4], &[0, 0, heads, d_k]);
    let merge = g.ints(&format!("{name}.merge_shape"), &[3], &[0, 0, hidden as i64]);
    let min_float = g.scalar(&format!("{name}.min_float"), mha.min_float as f32);
    let pad_bias = g.op("Mul", &[pad4, &min_float], vec![]);
    let scale = g.scalar(&format!("{name}.sqrt_dk"), (mha.d_k as f32).sqrt());
    let heads_of = |g: &mut GraphBuilder, l: &Linear<B>, part: &str, perm: &[i64]| {
        let y = add_linear(g, x, l, &format!("{name}.attention.{part}"));
        let y = g.op("Reshape", &[&y, &split], vec![]);
        g.op("Transpose", &[&y], vec![attr_ints("perm", perm)])
    };
    let q = heads_of(g, &mha.query, "query", &[0, 2, 1, 3]);
    let k = heads_of(g, &mha.key, "key", &[0, 2, 3, 1]);
    let v = heads_of(g, &mha.value, "value", &[0, 2, 1, 3]);
    let scores = g.op("MatMul", &[&q, &k], vec![]);
    let scores = g.op("Div", &[&scores, &scale], vec![]);
    let scores = g.op("Add", &[&scores, &pad_bias], vec![]);
    let weights = g.op("Softmax", &[&scores], vec![attr_int("axis", -1)]);
    let context = g.op("MatMul", &[&weights, &v], vec![]);
    let context = g.op("Transpose", &[&context], vec![attr_ints("perm", &[0, 2, 1, 3])]);
    let context = g.op("Reshape", &[&context, &merge], vec![]);
    let attended = add_linear(g, &context, &mha.output, &format!("{name}.attention.output"));
    let residual = g.op("Add", &[x, &attended], vec![]);
    let x = add_layer_norm(g, &residual, &layer.norm_1, layer_norm_eps, &format!("{name}.norm_1"));
    let inner = add_linear(g, &x, &layer.pwff.linear_inner, &format!("{name}.ffn.inner"));
    let inner = g.op("Relu", &[&inner], vec![]);
    let outer = add_linear(g, &inner, &layer.pwff.linear_outer, &format!("{name}.ffn.outer"));
    let residual = g.op("Add", &[&x, &outer], vec![]);
    add_layer_norm(g, &residual, &layer.norm_2, layer_norm_eps, &format!("{name}.norm_2"))
}

/// The cell embedding: the mean of the last hidden states weighted by the tokens' pooling flags,
/// zero on padding.
fn add_pooling(g: &mut GraphBuilder, last: &str, pool_flags: &[f32]) {
    let flags = g.weight("pooling.token_flags", &[pool_flags.len()], pool_flags);
    let w = g.op("Gather", &[&flags, INPUT_IDS], vec![attr_int("axis", 0)]);
    let mask = g.op("Cast", &[ATTENTION_MASK], vec![attr_int("to", i64::from(dtype::FLOAT))]);
    let w = g.op("Mul", &[&w, &mask], vec![]);
    let axis1 = g.ints("const.axis1", &[1], &[1]);
    let axis2 = g.ints("const.axis2", &[1], &[2]);
    let w3 = g.op("Unsqueeze", &[&w, &axis2], vec![]);
    let weighted = g.op("Mul", &[last, &w3], vec![]);
    let total = g.op("ReduceSum", &[&weighted, &axis1], vec![attr_int("keepdims", 0)]);
    let count = g.op("ReduceSum", &[&w, &axis1], vec![attr_int("keepdims", 1)]);
    let one_f = g.scalar("const.one_f", 1.0);
    let count = g.op("Max", &[&count, &one_f], vec![]);
    g.op_named("Div", &[&total, &count], vec![], CELL_EMBEDDING);
}
