//! Pre-flight memory estimates: what a model of a configuration needs to train or to run on a
//! batch, checked against the memory available before anything is allocated, so that an absurd
//! size is a clear error with the estimate instead of an allocation failure (SIGABRT) minutes in.

use super::ModelConfig;
use corrflow_io::error::{Error, Result};

/// Parameters of a model of `m` over a vocabulary of `vocab` tokens (encoder, MLM head, and the
/// pooled heads of its objective or classifier, counted as a whole-cell head of `vocab` × 2
/// outputs at most).
pub fn parameters(m: &ModelConfig, vocab: usize) -> u128 {
    let (h, f, v, l) = (m.hidden as u128, m.ffn as u128, vocab as u128, m.layers as u128);
    let embeddings = v * h + m.max_positions as u128 * h + 2 * h;
    // Q, K, V, O with biases; the feed-forward pair with biases; two LayerNorms.
    let layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 4 * h;
    let mlm = h * h + h + 2 * h + v;
    let heads =
        match &m.objective[..] {
            "wced" | "poisson" => h * h + h + h * 2 * v + 2 * v,
            _ => 0,
        } + m.classifier.as_ref().map_or(0, |c| h * h + h + h * c.classes.len() as u128 + c.classes.len() as u128)
            + m.hce.as_ref().map_or(0, |c| h * h + h + h * c.leaves.len() as u128 + c.leaves.len() as u128);
    embeddings + l * layer + mlm + heads
}

/// Bytes of a training run: weights, gradients and AdamW's two moments (f32, plus a copy of the
/// weights while a checkpoint is written), and one batch's activations kept for the backward
/// pass (the fused attention keeps no `[L, L]` scores; about 12 hidden-wide and 2 ffn-wide values
/// per token per layer).
pub fn training_bytes(m: &ModelConfig, vocab: usize, batch_size: usize, max_len: usize) -> u128 {
    let tokens = batch_size as u128 * max_len as u128;
    let per_token_layer = 12 * m.hidden as u128 + 2 * m.ffn as u128;
    let activations = tokens * (m.layers as u128 * per_token_layer + 4 * m.hidden as u128) * 4;
    parameters(m, vocab) * 4 * 5 + activations
}

/// Refuses an inference batch plan (`token_budget` padded tokens per batch, sequences up to
/// `max_len`) whose forward pass would need more memory than is available.
pub fn check_inference(m: &ModelConfig, vocab: usize, token_budget: usize, max_len: usize) -> Result<()> {
    let tokens = token_budget.max(max_len);
    check("a model batch", inference_bytes(m, vocab, tokens, max_len), "--token-budget (or --max-batch-cells)")
}

/// Bytes of a forward pass over `tokens` padded tokens of sequences up to `max_len` long (the
/// weights once; per layer the hidden and ffn activations and, in the exported graph, the
/// attention scores of each head).
pub fn inference_bytes(m: &ModelConfig, vocab: usize, tokens: usize, max_len: usize) -> u128 {
    let t = tokens as u128;
    let scores = t * m.heads as u128 * max_len as u128;
    parameters(m, vocab) * 4 + (t * (6 * m.hidden as u128 + 2 * m.ffn as u128) + scores) * 4
}

/// Refuses `what` when its estimate `bytes` is more than the memory available (`MemAvailable`;
/// no check where the kernel does not say), naming the estimate and the settings to lower.
pub fn check(what: &str, bytes: u128, lower: &str) -> Result<()> {
    let Some(available) = corrflow_io::util::available_memory() else { return Ok(()) };
    if bytes > u128::from(available) {
        return Err(Error::Usage(format!(
            "{what} needs about {} of memory, more than the {} available; lower {lower}",
            human(bytes),
            human(u128::from(available))
        )));
    }
    Ok(())
}

fn human(bytes: u128) -> String {
    let b = bytes as f64;
    if b >= 1e12 {
        format!("{:.1} TB", b / 1e12)
    } else if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else {
        format!("{:.0} MB", b / 1e6)
    }
}
