//! The configuration of models that see expression (DESIGN.md §11): what a token carries
//! ([`ModelInput`]) and, for value models, how values are normalized, whether tokens have
//! positions, the decoder from the CLS state and the genes it decodes ([`ValueModel`]).
//! Plain data: the runtimes read it to build a value model's inputs without burn.

use serde::{Deserialize, Serialize};

/// What a model's tokens carry (`model.input`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelInput {
    /// Geneformer's rank-value tokens: a gene's embedding plus its position's; no value.
    #[default]
    Rank,
    /// TxFM's token: `[E_gene (hidden − 1); x]`, the gene's learned embedding with its value
    /// as the last coordinate.
    Value,
    /// scGPT-style: `E_gene + E_bin(x)`, the value cut into `values.bins` equal-width bins over
    /// `(0, ln(1 + L)]` (bin 0 holds the zeros).
    Bins,
}

impl ModelInput {
    pub fn is_rank(&self) -> bool {
        *self == Self::Rank
    }

    /// Whether tokens carry values (`input_ids` come with `values`).
    pub fn sees_values(&self) -> bool {
        !self.is_rank()
    }
}

/// A value model's settings (`[model.values]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ValueModel {
    /// The library size L values are normalized to: `x = ln(1 + c / n_counts · L)` (TxFM 1e5).
    pub target_sum: f64,
    /// Learned absolute positions over the rank order (TxFM: none, a cell is a set).
    pub positions: bool,
    /// Value bins of `input = "bins"` (bin 0 is zero expression).
    pub bins: usize,
    /// Hidden layers of the decoder MLP from the CLS state (TxFM's default decoder has 4 layers
    /// in all: 3 hidden and the output).
    pub decoder_layers: usize,
    /// Width of the decoder's hidden layers (0: the model's hidden size).
    pub decoder_width: usize,
    /// How the decoding set is chosen: `measured` (every gene the corpus' atlases measured),
    /// `graph` (the dependency graph's genes) or `hvg:N` (the N most variable genes).
    pub decode: String,
    /// The decoding set, resolved by the trainer: vocabulary tokens in the decoder's output order.
    pub decode_genes: Vec<u32>,
    /// Most genes an inference sees per cell: every measured gene up to it; past it a seeded
    /// uniform sample of that many measured genes, detected or not.
    pub inference_genes: usize,
    /// Which genes the encoder's input is drawn from, in training and at inference.
    pub visible: VisiblePool,
    /// The standard deviation of the gene embeddings' initialisation (`E_gene`, N(0, σ)). BERT's
    /// 0.02, the default, puts `E_gene` (norm ≈ 0.02·√hidden) far below a detected gene's value
    /// (x ≈ 2–11), so `input = "value"`'s embedding LayerNorm maps every detected gene at every
    /// level to nearly one vector (`experiments/token_norm.py`); 1.0 (PyTorch's `nn.Embedding`
    /// default) keeps the genes apart but leaves the value one coordinate of `hidden`. Only a
    /// new model's start: not read at inference (docs/values.md).
    pub gene_embedding_std: f64,
}

/// The genes a value model's encoder sees are drawn from (`model.values.visible`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VisiblePool {
    /// Every gene the cell's source measured, zeros included (TxFM §3).
    #[default]
    Measured,
    /// Only the measured genes of the decoding set (e.g. its HVGs): a sparse cell's uniform
    /// draw from thousands of measured genes is mostly zeros, whose count tells the encoder the
    /// cell's depth more than its type (REPORT §10).
    Decoded,
    /// Only the genes the cell detected (count > 0), among every measured gene. The encoder
    /// never sees a zero, so the share of zeros among its genes cannot tell it the depth; the
    /// decoder still predicts every decoding gene, zeros included. A cell that detected fewer
    /// than K shows all of them.
    Detected,
    /// The detected genes of the decoding set (`decoded` and `detected` together).
    DecodedDetected,
}

impl VisiblePool {
    /// The names `model.values.visible` takes.
    pub const NAMES: [&'static str; 4] = ["measured", "decoded", "detected", "decoded-detected"];

    /// The pool named `name` (one of [`Self::NAMES`]).
    pub fn parse(name: &str) -> Option<Self> {
        let all = [Self::Measured, Self::Decoded, Self::Detected, Self::DecodedDetected];
        Self::NAMES.iter().position(|&n| n == name).map(|i| all[i])
    }

    /// Whether only the decoding set's genes are drawn from.
    pub fn decoded_only(self) -> bool {
        matches!(self, Self::Decoded | Self::DecodedDetected)
    }

    /// Whether only each cell's detected genes are drawn from.
    pub fn detected_only(self) -> bool {
        matches!(self, Self::Detected | Self::DecodedDetected)
    }
}

impl Default for ValueModel {
    fn default() -> Self {
        Self {
            target_sum: 1e5,
            positions: false,
            bins: 51,
            decoder_layers: 3,
            decoder_width: 0,
            decode: "measured".into(),
            decode_genes: Vec::new(),
            inference_genes: 2048,
            visible: VisiblePool::Measured,
            gene_embedding_std: 0.02,
        }
    }
}

impl ValueModel {
    /// The value of a count: `ln(1 + c / n_counts · L)` (0 for a cell without counts).
    pub fn value(&self, count: f64, n_counts: f64) -> f32 {
        if n_counts > 0.0 {
            (count / n_counts * self.target_sum).ln_1p() as f32
        } else {
            0.0
        }
    }

    /// The genes the encoder's input is drawn from, given a source's measured genes (ascending):
    /// all of them, or those the model decodes (`visible = "decoded"`, `"decoded-detected"`).
    /// Ascending. `detected` pools narrow this to each cell's detected genes
    /// (`crate::inputs::value_input`).
    pub fn visible_pool(&self, measured: &[u32]) -> Vec<u32> {
        if self.visible.decoded_only() {
            let mut decoded = self.decode_genes.clone();
            decoded.sort_unstable();
            measured.iter().copied().filter(|g| decoded.binary_search(g).is_ok()).collect()
        } else {
            measured.to_vec()
        }
    }

    /// The largest value a count can have: `ln(1 + L)`.
    pub fn max_value(&self) -> f64 {
        self.target_sum.ln_1p()
    }

    pub fn validate(&self, input: ModelInput) -> Result<(), String> {
        if !(self.target_sum > 0.0 && self.target_sum.is_finite()) {
            return Err(format!("model.values.target_sum must be a finite number > 0, got {}", self.target_sum));
        }
        if input == ModelInput::Bins && !(2..=4096).contains(&self.bins) {
            return Err(format!("model.values.bins must be in 2..=4096, got {}", self.bins));
        }
        if self.decoder_layers > 64 || self.decoder_width > 1 << 16 {
            return Err("model.values.decoder_layers must be at most 64 and decoder_width at most 65,536".into());
        }
        if !(self.gene_embedding_std > 0.0 && self.gene_embedding_std <= 100.0) {
            return Err(format!(
                "model.values.gene_embedding_std must be in (0, 100], got {}",
                self.gene_embedding_std
            ));
        }
        if !(1..=1 << 16).contains(&self.inference_genes) {
            return Err(format!("model.values.inference_genes must be in 1..=65,536, got {}", self.inference_genes));
        }
        DecodeSet::parse(&self.decode)?;
        Ok(())
    }
}

/// `values.decode` parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeSet {
    Measured,
    Graph,
    Hvg(usize),
}

impl DecodeSet {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "measured" => Ok(Self::Measured),
            "graph" => Ok(Self::Graph),
            _ => match s.strip_prefix("hvg:").map(str::parse::<usize>) {
                Some(Ok(n)) if n >= 1 => Ok(Self::Hvg(n)),
                _ => Err(format!("model.values.decode must be 'measured', 'graph' or 'hvg:N' (N ≥ 1), got '{s}'")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_log1p_of_counts_normalized_to_the_library_size() {
        let v = ValueModel::default();
        assert!((v.value(3.0, 1000.0) - (1.0f64 + 300.0).ln() as f32).abs() < 1e-6);
        assert_eq!(v.value(0.0, 1000.0), 0.0);
        assert_eq!(v.value(5.0, 0.0), 0.0);
        assert!((v.max_value() - 100_001f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn the_inference_pool_follows_the_training_pool_and_old_metadata_reads_as_measured() {
        let v = ValueModel { decode_genes: vec![9, 4, 1], ..ValueModel::default() };
        assert_eq!(v.visible_pool(&[1, 2, 4, 7]), [1, 2, 4, 7]);
        let d = ValueModel { visible: VisiblePool::Decoded, ..v };
        assert_eq!(d.visible_pool(&[1, 2, 4, 7]), [1, 4]);
        // Metadata written before `visible` existed.
        let old: ValueModel = serde_json::from_str(r#"{"target_sum": 1e4, "decode": "measured"}"#).unwrap();
        assert_eq!(old.visible, VisiblePool::Measured);
        let new: ValueModel = serde_json::from_str(r#"{"visible": "decoded"}"#).unwrap();
        assert_eq!(new.visible, VisiblePool::Decoded);
        assert!(serde_json::from_str::<ValueModel>(r#"{"visible": "hvg"}"#).is_err());
        for (i, name) in VisiblePool::NAMES.iter().enumerate() {
            let pool = VisiblePool::parse(name).unwrap();
            let read: ValueModel = serde_json::from_str(&format!(r#"{{"visible": "{name}"}}"#)).unwrap();
            assert_eq!(read.visible, pool);
            assert_eq!(serde_json::to_value(pool).unwrap(), *name);
            assert_eq!((pool.decoded_only(), pool.detected_only()), (i % 2 == 1, i >= 2));
        }
        let dd = ValueModel { visible: VisiblePool::DecodedDetected, ..d };
        assert_eq!(dd.visible_pool(&[1, 2, 4, 7]), [1, 4]);
        assert_eq!(VisiblePool::parse("hvg"), None);
    }

    #[test]
    fn decoding_sets_parse_and_bad_ones_are_named() {
        assert_eq!(DecodeSet::parse("measured"), Ok(DecodeSet::Measured));
        assert_eq!(DecodeSet::parse("hvg:2000"), Ok(DecodeSet::Hvg(2000)));
        for bad in ["hvg:0", "hvg:x", "all"] {
            assert!(DecodeSet::parse(bad).unwrap_err().contains(bad));
        }
    }
}
