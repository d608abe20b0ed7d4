//! Cell-type maps: which ontology term each label of an obs column means, as a TSV a user can
//! edit (`ontology map` proposes one; `ingest --cell-type-map` stores the mapped ids).
//!
//! Tab-separated, after optional `#` comment lines (shown here with `→` for the tabs):
//!
//! ```text
//! column→label→cl_id→cl_label→match→cells
//! bulk_labels→CD14+ Monocyte→CL:0001054→CD14-positive monocyte→curated→129
//! cell_type→Mouse→→→unmapped→607
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use corrflow_algorithms::ontology::MatchKind;

use super::LoadedOntology;
use crate::error::{Error, IoContext, Result};
use crate::formats::{open, ObsValues, ReadOptions};

pub const HEADER: &str = "column\tlabel\tcl_id\tcl_label\tmatch\tcells";

/// One label of one column and its term (none: unmapped).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MapRow {
    pub column: String,
    pub label: String,
    pub cl_id: Option<String>,
    pub cl_label: String,
    /// `id`, `exact`, `synonym`, `curated` (chosen by hand), `ambiguous` (several terms share
    /// the text; `cl_label` lists them) or `unmapped`.
    pub matched: String,
    pub cells: u64,
}

/// A text field of a map: a backslash, TAB, newline or carriage return in a label is written as
/// `\\`, `\t`, `\n` or `\r`, so every label survives the round trip through the TSV.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// The text of an [`escape`]d field (a backslash before any other character stays as it is).
pub fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let decoded = match (c, chars.peek()) {
            ('\\', Some('\\')) => Some('\\'),
            ('\\', Some('t')) => Some('\t'),
            ('\\', Some('n')) => Some('\n'),
            ('\\', Some('r')) => Some('\r'),
            _ => None,
        };
        match decoded {
            Some(d) => {
                chars.next();
                out.push(d);
            }
            None => out.push(c),
        }
    }
    out
}

/// A label → term map (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellTypeMap {
    pub rows: Vec<MapRow>,
}

impl CellTypeMap {
    /// Reads and checks a map: the header, six fields per row, no label twice for a column,
    /// an id wherever the match is not `unmapped` or `ambiguous`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).at(path)?;
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty());
        match lines.next() {
            Some((_, h)) if h.trim_end_matches('\r') == HEADER => {}
            _ => {
                return Err(Error::format(
                    path,
                    format!("the first line that is not a comment must be the header '{HEADER}'"),
                ))
            }
        }
        let mut rows = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (i, line) in lines {
            let at = |msg: String| Error::format(path, format!("line {}: {msg}", i + 1));
            let f: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
            if f.len() != 6 {
                return Err(at(format!("{} tab-separated fields, expected 6 ({HEADER})", f.len())));
            }
            let cells = f[5].trim().parse::<u64>().map_err(|_| at(format!("cells '{}' is not a count", f[5])))?;
            let id = f[2].trim();
            let matched = f[4].trim().to_string();
            if !["id", "exact", "synonym", "curated", "ambiguous", "unmapped"].contains(&matched.as_str()) {
                return Err(at(format!(
                    "match '{matched}' is not one of id, exact, synonym, curated, ambiguous, unmapped"
                )));
            }
            if id.is_empty() != matches!(matched.as_str(), "unmapped" | "ambiguous") {
                return Err(at(format!(
                    "a '{matched}' row {} a cl_id (set one and a match such as curated, or leave both empty and say unmapped)",
                    if id.is_empty() { "needs" } else { "cannot have" }
                )));
            }
            if !seen.insert((unescape(f[0]), unescape(f[1]))) {
                return Err(at(format!("label '{}' of column '{}' appears twice", f[1], f[0])));
            }
            rows.push(MapRow {
                column: unescape(f[0]),
                label: unescape(f[1]),
                cl_id: (!id.is_empty()).then(|| id.to_string()),
                cl_label: unescape(f[3]),
                matched,
                cells,
            });
        }
        Ok(Self { rows })
    }

    /// The map as TSV text, `comment` lines first.
    pub fn to_tsv(&self, comment: &[String]) -> String {
        let mut out = String::new();
        for c in comment {
            let _ = writeln!(out, "# {c}");
        }
        let _ = writeln!(out, "{HEADER}");
        for r in &self.rows {
            let clean = escape;
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}",
                clean(&r.column),
                clean(&r.label),
                r.cl_id.as_deref().unwrap_or(""),
                clean(&r.cl_label),
                r.matched,
                r.cells
            );
        }
        out
    }

    /// Label → id (`None`: unmapped) of one column.
    pub fn for_column(&self, column: &str) -> BTreeMap<String, Option<String>> {
        self.rows.iter().filter(|r| r.column == column).map(|r| (r.label.clone(), r.cl_id.clone())).collect()
    }

    /// Ids the map names that `ontology` does not have (each with its label).
    pub fn unknown_ids(&self, ontology: &LoadedOntology) -> Vec<(String, String)> {
        self.rows
            .iter()
            .filter_map(|r| {
                r.cl_id
                    .as_ref()
                    .filter(|id| ontology.ontology.find(id).is_none())
                    .map(|id| (r.label.clone(), id.clone()))
            })
            .collect()
    }
}

/// Proposes a term for each label of `column` (with its cell count): the id itself, else the
/// label, else a synonym, ignoring case and punctuation; several matches are `ambiguous`.
pub fn propose(ontology: &LoadedOntology, column: &str, counts: &BTreeMap<String, u64>) -> CellTypeMap {
    let o = &ontology.ontology;
    let rows = counts
        .iter()
        .map(|(label, &cells)| {
            let found = o.lookup(label);
            let (cl_id, cl_label, matched) = match found.as_slice() {
                [] => (None, String::new(), "unmapped".to_string()),
                [(t, kind)] => {
                    let kind = match kind {
                        MatchKind::Id => "id",
                        MatchKind::Exact => "exact",
                        MatchKind::Synonym => "synonym",
                    };
                    (Some(o.term(*t).id.clone()), o.term(*t).label.clone(), kind.to_string())
                }
                many => {
                    let names: Vec<String> =
                        many.iter().map(|(t, _)| format!("{} {}", o.term(*t).id, o.term(*t).label)).collect();
                    (None, names.join(" | "), "ambiguous".to_string())
                }
            };
            MapRow { column: column.to_string(), label: label.clone(), cl_id, cl_label, matched, cells }
        })
        .collect();
    CellTypeMap { rows }
}

/// The distinct values of obs column `column` of a cell file and their cell counts (missing
/// values left out).
pub fn count_labels(path: &Path, read: &ReadOptions, column: &str) -> Result<BTreeMap<String, u64>> {
    let mut opts = read.clone();
    opts.obs_columns = vec![column.to_string()];
    let mut source = open(path, &opts)?;
    let (n, step) = (source.n_cells(), opts.chunk_cells.max(1));
    let mut counts = BTreeMap::new();
    for start in (0..n).step_by(step) {
        let chunk = source.read_chunk(start..(start + step).min(n))?;
        for value in obs_strings(&chunk.obs[0]).into_iter().flatten() {
            *counts.entry(value).or_insert(0u64) += 1;
        }
    }
    Ok(counts)
}

/// Obs values as optional text (what a label is compared by).
pub fn obs_strings(values: &ObsValues) -> Vec<Option<String>> {
    fn s<T: ToString>(v: &[Option<T>]) -> Vec<Option<String>> {
        v.iter().map(|x| x.as_ref().map(T::to_string)).collect()
    }
    match values {
        ObsValues::Utf8(v) => v.clone(),
        ObsValues::Float64(v) => s(v),
        ObsValues::Int64(v) => s(v),
        ObsValues::Boolean(v) => s(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_round_trips_and_bad_rows_name_their_line() {
        let map = CellTypeMap {
            rows: vec![
                MapRow {
                    column: "c".into(),
                    label: "T".into(),
                    cl_id: Some("CL:0000084".into()),
                    cl_label: "T cell".into(),
                    matched: "exact".into(),
                    cells: 3,
                },
                MapRow {
                    column: "c".into(),
                    label: "Mouse".into(),
                    cl_id: None,
                    cl_label: String::new(),
                    matched: "unmapped".into(),
                    cells: 1,
                },
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.tsv");
        std::fs::write(&p, map.to_tsv(&["note".into()])).unwrap();
        assert_eq!(CellTypeMap::read(&p).unwrap(), map);
        assert_eq!(map.for_column("c")["Mouse"], None);
        // Issue 43: TAB, newline and backslash inside a label survive the round trip, so ingest
        // accepts the map `ontology map` wrote.
        let mut odd = map.clone();
        odd.rows[0].label = "B\tcell\nnew \\ line\\t".into();
        odd.rows[0].cl_label = "T\tcell".into();
        std::fs::write(&p, odd.to_tsv(&[])).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert_eq!(CellTypeMap::read(&p).unwrap(), odd);
        assert_eq!(unescape("a\\qb\\"), "a\\qb\\");
        for (body, needle) in [
            ("c\tT\tCL:1\tT\texact\n", "header"),
            (&format!("{HEADER}\nc\tT\tCL:1\n") as &str, "line 2: 3 tab-separated fields"),
            (&format!("{HEADER}\nc\tT\t\t\tcurated\t4\n"), "needs a cl_id"),
            (&format!("{HEADER}\nc\tT\tCL:1\tT\tguess\t4\n"), "match 'guess'"),
            (&format!("{HEADER}\nc\tT\tCL:1\tT\texact\t4\nc\tT\tCL:2\tT\texact\t4\n"), "appears twice"),
        ] {
            std::fs::write(&p, body).unwrap();
            let e = CellTypeMap::read(&p).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("m.tsv"), "{e}");
        }
    }
}

/// The obs column ingest stores mapped term ids in.
pub const CL_ID_COLUMN: &str = "cl_id";

/// What `ingest --cell-type-map` applies: the labels of one obs column and their ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellTypeMapping {
    pub path: std::path::PathBuf,
    /// The obs column whose labels are mapped (one of `--obs-columns`).
    pub column: String,
    pub labels: BTreeMap<String, Option<String>>,
    pub sha256: String,
}

impl CellTypeMapping {
    /// Reads the map at `path` and picks the one of `obs_columns` it has rows for.
    pub fn open(path: &Path, obs_columns: &[String]) -> Result<Self> {
        use sha2::Digest;
        let map = CellTypeMap::read(path)?;
        if obs_columns.iter().any(|c| c == CL_ID_COLUMN) {
            return Err(Error::Usage(format!(
                "--obs-columns has '{CL_ID_COLUMN}', the column --cell-type-map writes; store it under another name"
            )));
        }
        let columns: Vec<&String> = obs_columns.iter().filter(|c| map.rows.iter().any(|r| &r.column == *c)).collect();
        let column = match columns.as_slice() {
            [one] => (*one).clone(),
            [] => {
                return Err(Error::format(
                    path,
                    format!(
                        "has no rows for any of --obs-columns ({}); its column field names the obs column it maps",
                        obs_columns.join(", ")
                    ),
                ))
            }
            many => {
                return Err(Error::format(
                    path,
                    format!(
                        "has rows for several of --obs-columns ({}); keep one column's rows",
                        many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ))
            }
        };
        let sha256 = hex::encode(sha2::Sha256::digest(std::fs::read(path).at(path)?));
        Ok(Self { path: path.to_path_buf(), labels: map.for_column(&column), column, sha256 })
    }

    /// The ids of one chunk's labels (`None` for missing and unmapped labels); a label the map
    /// does not list is an error naming it, the input and the map.
    pub fn apply(&self, input: &Path, labels: &ObsValues) -> Result<ObsValues> {
        let mut out = Vec::with_capacity(labels.len());
        for value in obs_strings(labels) {
            out.push(match value {
                None => None,
                Some(v) => self.labels.get(&v).cloned().ok_or_else(|| {
                    Error::format(
                        input,
                        format!(
                            "label '{v}' of obs column '{}' is not in the cell-type map {} (add a row for it; an empty cl_id with match 'unmapped' leaves it unmapped)",
                            self.column,
                            self.path.display()
                        ),
                    )
                })?,
            });
        }
        Ok(ObsValues::Utf8(out))
    }
}
