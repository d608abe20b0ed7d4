//! The attributes of a loom file (`row_attrs`, `col_attrs`: one 1-d dataset per gene or cell
//! attribute), read as loompy reads them, and how the attributes naming genes and cells are
//! found.

use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

use hdf5::Dataset;

use crate::error::{Error, Result};
use crate::h5::{self, NumKind};
use crate::{ObsKind, ObsValues};

/// One attribute (1-d dataset) of `row_attrs` or `col_attrs`.
pub(super) struct Attr {
    path: PathBuf,
    what: String,
    ds: Dataset,
    kind: Option<NumKind>,
}

impl Attr {
    pub(super) fn open(path: &Path, file: &hdf5::File, group: &str, name: &str, len: usize) -> Result<Option<Self>> {
        let what = format!("{group}/{name}");
        let Ok(ds) = file.dataset(&what) else { return Ok(None) };
        if ds.shape() != [len] {
            let msg = format!("{what} has shape {:?}, expected [{len}] (one value per {})", ds.shape(), unit(group));
            return Err(Error::format(path, msg));
        }
        let kind = NumKind::of(&h5::descriptor(path, &ds, &what)?);
        Ok(Some(Self { path: path.to_path_buf(), what, ds, kind }))
    }

    /// The attribute's name within its group.
    pub(super) fn name(&self) -> &str {
        self.what.split_once('/').map_or(self.what.as_str(), |(_, n)| n)
    }

    pub(super) fn obs_kind(&self) -> ObsKind {
        match self.kind {
            None => ObsKind::Utf8,
            Some(NumKind::F32 | NumKind::F64) => ObsKind::Float64,
            Some(NumKind::Bool) => ObsKind::Boolean,
            Some(_) => ObsKind::Int64,
        }
    }

    pub(super) fn read(&self, rows: Option<Range<usize>>) -> Result<ObsValues> {
        let (p, w) = (self.path.as_path(), self.what.as_str());
        Ok(match (self.obs_kind(), self.kind) {
            (ObsKind::Utf8, _) => ObsValues::Utf8(
                h5::read_strings(p, &self.ds, w, rows)?.into_iter().map(|s| Some(unescape(&s))).collect(),
            ),
            // Integers as integers: through f64, ids past 2^53 would round.
            (ObsKind::Int64, Some(_)) => {
                ObsValues::Int64(h5::read_i64(p, &self.ds, w, rows)?.into_iter().map(Some).collect())
            }
            (ObsKind::Float64, Some(k)) => {
                ObsValues::Float64(h5::read_f64(p, &self.ds, w, k, rows)?.into_iter().map(Some).collect())
            }
            (ObsKind::Boolean, Some(k)) => {
                ObsValues::Boolean(h5::read_f64(p, &self.ds, w, k, rows)?.into_iter().map(|x| Some(x != 0.0)).collect())
            }
            (_, None) => unreachable!("a string attribute is Utf8"),
        })
    }
}

fn unit(group: &str) -> &'static str {
    if group == "row_attrs" {
        "gene"
    } else {
        "cell"
    }
}

/// loompy stores strings as ASCII with XML character references for anything else
/// (`&#233;`), and reads them back through `html.unescape`; so does this.
fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let end = tail.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|e| {
            let entity = &tail[1..e];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => entity.strip_prefix('#').and_then(|n| {
                    let code = match n.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok(),
                        None => n.parse().ok(),
                    };
                    code.and_then(char::from_u32)
                }),
            };
            c.map(|c| (c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &tail[e + 1..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Gene attributes tried, in order, when no `--gene-column` is given: Geneformer's, the Ensembl
/// ids velocyto and loompy's 10x import write, anndata's 10x var column, then symbols (loompy's
/// `Gene`; `var_names`, where anndata's `write_loom` puts an unnamed var index).
pub(super) const GENE_ATTRS: [&str; 5] = ["ensembl_id", "Accession", "gene_ids", "Gene", "var_names"];

/// Cell name attributes tried, in order, when no `--loom-cell-names` is given: loompy's (and
/// `anndata.read_loom`'s default), where anndata's `write_loom` puts an unnamed obs index, then
/// two common names.
pub(super) const CELL_ATTRS: [&str; 4] = ["CellID", "obs_names", "cell_id", "cell_ids"];

/// The member names of a group, or none.
pub(super) fn names(file: &hdf5::File, group: &str) -> Vec<String> {
    file.group(group).and_then(|g| g.member_names()).unwrap_or_default()
}

/// The member names of a group for a message: listed, or "none".
fn listed(file: &hdf5::File, group: &str) -> String {
    let n = names(file, group);
    if n.is_empty() {
        "none".to_string()
    } else {
        n.join(", ")
    }
}

/// The row attribute holding gene ids: `chosen` (`--gene-column`), else the first of
/// [`GENE_ATTRS`] the file has.
pub(super) fn gene_attr(path: &Path, file: &hdf5::File, n_genes: usize, chosen: Option<&str>) -> Result<Attr> {
    if let Some(name) = chosen {
        return Attr::open(path, file, "row_attrs", name, n_genes)?.ok_or_else(|| {
            let have = listed(file, "row_attrs");
            Error::format(path, format!("--gene-column {name}: no such row attribute (row_attrs: {have})"))
        });
    }
    for name in GENE_ATTRS {
        if let Some(a) = Attr::open(path, file, "row_attrs", name, n_genes)? {
            return Ok(a);
        }
    }
    Err(Error::format(
        path,
        format!(
            "no gene id row attribute ({}); choose one with --gene-column (row_attrs: {})",
            GENE_ATTRS.join(", "),
            listed(file, "row_attrs")
        ),
    ))
}

/// The column attribute naming the cells, and a note for the log when it had to be guessed or
/// none was found (cells are then named by their position, as `anndata.read_loom` names them).
/// `chosen` (`--loom-cell-names`) must exist; else the first of [`CELL_ATTRS`]; else the only
/// column attribute of distinct strings: anndata's `write_loom` stores a named obs index under
/// its name (`col_attrs/cell`, `col_attrs/barcode`), and no other obs column is usually unique.
pub(super) fn cell_attr(
    path: &Path,
    file: &hdf5::File,
    n_cells: usize,
    chosen: Option<&str>,
) -> Result<(Option<Attr>, Option<(tracing::Level, String)>)> {
    if let Some(name) = chosen {
        return match Attr::open(path, file, "col_attrs", name, n_cells)? {
            Some(a) => Ok((Some(a), None)),
            None => Err(Error::format(
                path,
                format!(
                    "--loom-cell-names {name}: no such column attribute (col_attrs: {})",
                    listed(file, "col_attrs")
                ),
            )),
        };
    }
    for name in CELL_ATTRS {
        if let Some(a) = Attr::open(path, file, "col_attrs", name, n_cells)? {
            return Ok((Some(a), None));
        }
    }
    let mut distinct = Vec::new();
    for name in &names(file, "col_attrs") {
        let Ok(ds) = file.dataset(&format!("col_attrs/{name}")) else { continue };
        if ds.shape() != [n_cells] || n_cells < 2 {
            continue;
        }
        let Some(a) = Attr::open(path, file, "col_attrs", name, n_cells)? else { continue };
        if a.obs_kind() != ObsKind::Utf8 {
            continue;
        }
        let values = a.read(None)?.into_strings();
        let mut seen = HashSet::with_capacity(values.len());
        if values.iter().all(|v| seen.insert(v.as_str())) {
            distinct.push(a);
        }
    }
    let flag = "choose the column attribute with --loom-cell-names";
    let note = match distinct.len() {
        1 => format!(
            "{}: cell names from column attribute '{}', the only one of distinct strings (no {}); {flag} if that \
             is wrong",
            path.display(),
            distinct[0].name(),
            CELL_ATTRS.join(", ")
        ),
        0 => format!(
            "{}: no column attribute names the cells ({}, or one of distinct strings): they are named by their \
             position, 0 to {}; {flag}",
            path.display(),
            CELL_ATTRS.join(", "),
            n_cells.saturating_sub(1)
        ),
        _ => format!(
            "{}: no {} column attribute, and several hold distinct strings ({}): cells are named by their position; \
             {flag}",
            path.display(),
            CELL_ATTRS.join(" or "),
            distinct.iter().map(Attr::name).collect::<Vec<_>>().join(", ")
        ),
    };
    Ok(if distinct.len() == 1 {
        (distinct.pop(), Some((tracing::Level::INFO, note)))
    } else {
        (None, Some((tracing::Level::WARN, note)))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn xml_character_references_are_decoded_as_loompy_does() {
        assert_eq!(super::unescape("CD4"), "CD4");
        assert_eq!(super::unescape("caf&#233; &amp; &#x4e2d;"), "café & 中");
        assert_eq!(super::unescape("a & b &#zz;"), "a & b &#zz;");
    }
}
