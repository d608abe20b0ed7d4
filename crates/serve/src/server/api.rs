//! The HTTP API's bodies and their validation (docs/DESIGN.md §9.3), as plain functions: a request
//! body becomes token sequences or a client error with a status and a message.

use serde::{Deserialize, Serialize};

use corrflow_algorithms::SequenceLayout;
use corrflow_infer::encode::ModelCells;
use corrflow_infer::inputs::{value_input, CellExpression};
use corrflow_infer::model_meta::ValueModel;
use corrflow_io::tokenize::{named_cell_expression, tokenize_named_cell};
use corrflow_io::vocab::Vocabulary;

/// `POST /v1/embed`: raw counts per cell, or token ids.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedBody {
    #[serde(default)]
    pub cells: Option<Vec<CellInput>>,
    #[serde(default)]
    pub input_ids: Option<Vec<Vec<i64>>>,
    /// A value model's token values beside `input_ids` (same shape; genes only, the server puts
    /// `<cls>` first).
    #[serde(default)]
    pub values: Option<Vec<Vec<f64>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellInput {
    pub genes: Vec<String>,
    pub counts: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct EmbedResponse {
    pub model: String,
    pub dim: usize,
    /// One row of `dim` values per cell (serialized as nested arrays from the flat buffer).
    pub embeddings: Rows,
    /// Tokens each cell was encoded with.
    pub tokens: Vec<usize>,
    /// Genes per cell not in the model's vocabulary (ignored).
    pub unknown_genes: Vec<usize>,
    /// A fine-tuned cell classifier's calls (absent for an embedding-only model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictions: Option<Predictions>,
}

/// `POST /v1/annotate`'s answer: each cell's Cell Ontology calls (leaf, lineage, greedy path,
/// reliable call at the threshold), in request order.
#[derive(Debug, Serialize)]
pub struct AnnotateResponse {
    pub model: String,
    pub ontology_version: String,
    pub threshold: f64,
    pub calls: Vec<corrflow_infer::annotate::calls::CellCall>,
    pub tokens: Vec<usize>,
    pub unknown_genes: Vec<usize>,
}

/// Each cell's most probable class, its probability, and every class's probability.
#[derive(Debug, Serialize)]
pub struct Predictions {
    pub classes: Vec<String>,
    pub labels: Vec<String>,
    pub probability: Vec<f32>,
    /// One row of `classes.len()` values per cell.
    pub probabilities: Rows,
}

impl Predictions {
    /// The calls of row-major probabilities `[cells, classes]`.
    pub fn of(classes: &[String], probabilities: Vec<f32>) -> Self {
        let k = classes.len().max(1);
        let best: Vec<usize> = probabilities.chunks(k).map(corrflow_algorithms::classes::argmax).collect();
        Predictions {
            classes: classes.to_vec(),
            labels: best.iter().map(|&c| classes[c].clone()).collect(),
            probability: best.iter().enumerate().map(|(i, &c)| probabilities[i * k + c]).collect(),
            probabilities: Rows { flat: probabilities, width: k },
        }
    }
}

/// Row-major `f32` rows, serialized as an array of arrays without copying them into one vector
/// per row.
#[derive(Debug)]
pub struct Rows {
    pub flat: Vec<f32>,
    pub width: usize,
}

impl Serialize for Rows {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.flat.chunks(self.width.max(1)))
    }
}

/// A client error: HTTP status and message.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, message)
    }
}

/// What the model accepts.
#[derive(Clone, Debug)]
pub struct InputRules {
    pub layout: SequenceLayout,
    pub vocab_size: usize,
    /// Longest `input_ids` row (the model's positions).
    pub max_positions: usize,
    /// Most cells per request.
    pub max_cells: usize,
    /// Accept non-integer counts (`serve --allow-normalized`), as `ingest --allow-normalized`
    /// does; by default they are refused as ingest refuses them.
    pub allow_normalized: bool,
    /// A value model's settings and `<cls>` token (`None` for rank models).
    pub values: Option<(ValueModel, u32)>,
}

/// A validated request: one token sequence per cell (with values for a value model).
#[derive(Debug, Default, PartialEq)]
pub struct ParsedRequest {
    pub cells: ModelCells,
    pub unknown_genes: Vec<usize>,
}

pub fn parse_embed_request(body: &[u8], vocab: &Vocabulary, rules: &InputRules) -> Result<ParsedRequest, ApiError> {
    let body: EmbedBody =
        serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?;
    let n = match (&body.cells, &body.input_ids) {
        (Some(c), None) => c.len(),
        (None, Some(i)) => i.len(),
        _ => return Err(ApiError::invalid("give exactly one of \"cells\" and \"input_ids\"")),
    };
    if n == 0 {
        return Err(ApiError::invalid("no cells in the request"));
    }
    if n > rules.max_cells {
        return Err(ApiError::new(413, format!("{n} cells in one request; the limit is {}", rules.max_cells)));
    }
    let mut parsed = ParsedRequest::default();
    if let Some((settings, cls)) = &rules.values {
        return parse_value_cells(body, vocab, rules, (settings, *cls));
    }
    if body.values.is_some() {
        return Err(ApiError::invalid("\"values\" are for value models; this model takes input_ids alone"));
    }
    if let Some(cells) = body.cells {
        for (i, c) in cells.iter().enumerate() {
            if !rules.allow_normalized {
                check_integer_counts(i, c)?;
            }
            let t = tokenize_named_cell(vocab, &rules.layout, &c.genes, &c.counts)
                .map_err(|e| ApiError::invalid(format!("cell {i}: {e}")))?;
            if t.tokens.is_empty() {
                return Err(ApiError::invalid(no_tokens(i, c, t.unknown_genes)));
            }
            parsed.cells.tokens.push(t.tokens);
            parsed.unknown_genes.push(t.unknown_genes);
        }
    } else {
        for (i, row) in body.input_ids.unwrap_or_default().into_iter().enumerate() {
            if row.is_empty() || row.len() > rules.max_positions {
                return Err(ApiError::invalid(format!(
                    "input_ids[{i}] has {} tokens; 1..={} allowed",
                    row.len(),
                    rules.max_positions
                )));
            }
            let mut tokens = Vec::with_capacity(row.len());
            for t in row {
                if !(0..rules.vocab_size as i64).contains(&t) {
                    return Err(ApiError::invalid(format!(
                        "input_ids[{i}]: token {t} is outside the vocabulary (0..{})",
                        rules.vocab_size
                    )));
                }
                tokens.push(t as u32);
            }
            // Only special tokens: the mean over gene positions would be a zero vector.
            if !tokens.iter().any(|&t| vocab.is_gene(t)) {
                return Err(ApiError::invalid(format!(
                    "input_ids[{i}] has no gene token, only special tokens (<pad>, <mask>, <cls>, <eos>): it has no cell embedding"
                )));
            }
            parsed.cells.tokens.push(tokens);
            parsed.unknown_genes.push(0);
        }
    }
    Ok(parsed)
}

/// A value model's request: named cells become `<cls>` and the genes the cell measured (the
/// genes it sends, zeros included) with their values, as `embed` builds them from files
/// (`corrflow_infer::inputs::value_input`); `input_ids` come with `values` (genes only).
fn parse_value_cells(
    body: EmbedBody,
    vocab: &Vocabulary,
    rules: &InputRules,
    (settings, cls): (&ValueModel, u32),
) -> Result<ParsedRequest, ApiError> {
    let mut parsed =
        ParsedRequest { cells: ModelCells { tokens: Vec::new(), values: Some(Vec::new()) }, ..Default::default() };
    let values = parsed.cells.values.as_mut().expect("set above"); // ok: invariant
    if let Some(cells) = body.cells {
        for (i, c) in cells.iter().enumerate() {
            if !rules.allow_normalized {
                check_integer_counts(i, c)?;
            }
            let e = named_cell_expression(vocab, &c.genes, &c.counts)
                .map_err(|e| ApiError::invalid(format!("cell {i}: {e}")))?;
            if e.genes.is_empty() {
                return Err(ApiError::invalid(no_tokens(i, c, e.unknown_genes)));
            }
            let cell = CellExpression { genes: &e.genes, counts: &e.counts, total: e.total };
            let (t, x) = value_input(cls, settings, &settings.visible_pool(&e.measured), cell);
            parsed.cells.tokens.push(t);
            values.push(x);
            parsed.unknown_genes.push(e.unknown_genes);
        }
        return Ok(parsed);
    }
    let ids = body.input_ids.unwrap_or_default();
    let given = body.values.ok_or_else(|| {
        ApiError::invalid("this is a value model: send \"cells\" (genes and counts), or \"input_ids\" with \"values\"")
    })?;
    if given.len() != ids.len() {
        return Err(ApiError::invalid(format!("{} rows of input_ids but {} of values", ids.len(), given.len())));
    }
    for (i, (row, vals)) in ids.into_iter().zip(given).enumerate() {
        if row.is_empty() || row.len() + 1 > rules.max_positions || row.len() != vals.len() {
            return Err(ApiError::invalid(format!(
                "input_ids[{i}] has {} genes and values[{i}] {}: the same number, 1..={} allowed",
                row.len(),
                vals.len(),
                rules.max_positions.saturating_sub(1)
            )));
        }
        let mut tokens = vec![cls];
        let mut x = vec![0.0f32];
        for (t, v) in row.into_iter().zip(vals) {
            if !(0..rules.vocab_size as i64).contains(&t) || !vocab.is_gene(t as u32) {
                return Err(ApiError::invalid(format!("input_ids[{i}]: {t} is not a gene token of the vocabulary")));
            }
            if !(v.is_finite() && v >= 0.0) {
                return Err(ApiError::invalid(format!("values[{i}]: {v}; values must be finite and ≥ 0")));
            }
            tokens.push(t as u32);
            x.push(v as f32);
        }
        parsed.cells.tokens.push(tokens);
        values.push(x);
        parsed.unknown_genes.push(0);
    }
    Ok(parsed)
}

/// Counts must be whole numbers unless the server was started with `--allow-normalized`:
/// requests are tokenized as `ingest` tokenizes files, and ingest refuses normalized values.
fn check_integer_counts(i: usize, c: &CellInput) -> Result<(), ApiError> {
    match c.genes.iter().zip(&c.counts).find(|(_, v)| v.is_finite() && v.fract() != 0.0) {
        Some((g, v)) => Err(ApiError::invalid(format!(
            "cell {i}, gene '{g}': a non-integer count ({v}); send raw counts (ingest refuses normalized values too), \
             or start the server with --allow-normalized"
        ))),
        None => Ok(()),
    }
}

/// Why a cell has no token: none of its genes is in the vocabulary, or none of its vocabulary
/// genes has a count above 0.
fn no_tokens(i: usize, c: &CellInput, unknown: usize) -> String {
    let known = c.genes.len() - unknown;
    if known == 0 {
        format!("cell {i}: none of its {} genes is in the model's vocabulary", c.genes.len())
    } else {
        format!(
            "cell {i}: no gene has a count above 0 ({known} of its genes are in the model's vocabulary, all with \
             count 0; {unknown} unknown genes)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corrflow_io::vocab::BUILTIN;

    fn rules() -> InputRules {
        InputRules {
            layout: SequenceLayout::v1(),
            vocab_size: 100,
            max_positions: 8,
            max_cells: 3,
            allow_normalized: false,
            values: None,
        }
    }

    fn parse(body: &str) -> Result<ParsedRequest, ApiError> {
        let vocab = Vocabulary::resolve(BUILTIN).unwrap();
        parse_embed_request(body.as_bytes(), &vocab, &rules())
    }

    #[test]
    fn counts_are_tokenized_and_unknown_genes_only_counted() {
        let p = parse(r#"{"cells":[{"genes":["TSPAN6","nope","ENSG00000000419"],"counts":[3,5,1]}]}"#).unwrap();
        assert_eq!(p.cells.len(), 1);
        assert_eq!(p.cells.tokens[0].len(), 2);
        assert_eq!(p.unknown_genes, vec![1]);
    }

    #[test]
    fn normalized_counts_are_accepted_only_when_the_server_allows_them() {
        let vocab = Vocabulary::resolve(BUILTIN).unwrap();
        let body = br#"{"cells":[{"genes":["TSPAN6","CD74"],"counts":[1.5,2]}]}"#;
        assert!(parse_embed_request(body, &vocab, &rules()).unwrap_err().message.contains("--allow-normalized"));
        let lenient = InputRules { allow_normalized: true, ..rules() };
        assert_eq!(parse_embed_request(body, &vocab, &lenient).unwrap().cells.len(), 1);
    }

    #[test]
    fn input_ids_pass_through_when_in_range() {
        let p = parse(r#"{"input_ids":[[5,6,7],[9]]}"#).unwrap();
        assert_eq!(p.cells.tokens, vec![vec![5, 6, 7], vec![9]]);
    }

    #[test]
    fn invalid_requests_are_422_or_413_with_a_message() {
        for (body, status, needle) in [
            ("not json", 422, "invalid request body"),
            (r#"{"cells":[],"input_ids":[[1]]}"#, 422, "exactly one"),
            (r#"{}"#, 422, "exactly one"),
            (r#"{"input_ids":[]}"#, 422, "no cells"),
            (r#"{"input_ids":[[1],[2],[3],[4]]}"#, 413, "limit is 3"),
            (r#"{"input_ids":[[1,2,3,4,5,6,7,8,9]]}"#, 422, "1..=8"),
            (r#"{"input_ids":[[100]]}"#, 422, "outside the vocabulary"),
            (r#"{"input_ids":[[-1]]}"#, 422, "outside the vocabulary"),
            (r#"{"input_ids":[[]]}"#, 422, "0 tokens"),
            (r#"{"cells":[{"genes":["TSPAN6"],"counts":[1,2]}]}"#, 422, "cell 0: 1 genes but 2 counts"),
            (r#"{"cells":[{"genes":["TSPAN6"],"counts":[-2]}]}"#, 422, "finite"),
            (r#"{"cells":[{"genes":["nope"],"counts":[2]}]}"#, 422, "none of its 1 genes is in the model's vocabulary"),
            (r#"{"cells":[{"genes":["TSPAN6","CD74"],"counts":[0,0]}]}"#, 422, "no gene has a count above 0"),
            (
                r#"{"cells":[{"genes":["TSPAN6","CD74"],"counts":[1.5,2]}]}"#,
                422,
                "gene 'TSPAN6': a non-integer count (1.5)",
            ),
            (r#"{"cells":[{"genes":["TSPAN6"],"counts":[2],"extra":1}]}"#, 422, "unknown field"),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, status, "{body}: {e:?}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }
}
