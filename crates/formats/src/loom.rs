//! Loom files (loompy 3): an HDF5 file whose `/matrix` holds genes × cells, with gene
//! attributes in `/row_attrs`, cell attributes in `/col_attrs` and other matrices of the same
//! shape in `/layers`. Geneformer's tokenizer reads loom first: genes by the row attribute
//! `ensembl_id`, cells filtered by the column attribute `filter_pass`. Cells are columns here,
//! so a chunk of cells is a column slab, read in blocks of genes to keep memory bounded.

use std::ops::Range;
use std::path::{Path, PathBuf};

use hdf5::Dataset;

use crate::error::{Error, Result};
use crate::h5::{self, NumKind};
use crate::{CellChunk, CellSource, CountsSource, ObsField, ObsKind, ObsValues, ReadOptions, SourceMeta};

/// Gene attributes tried, in order, when no `--gene-column` is given: Geneformer's, then the
/// Ensembl ids velocyto and loompy's 10x import write, then the symbols.
const GENE_ATTRS: [&str; 3] = ["ensembl_id", "Accession", "Gene"];
/// Cell id attributes: loompy's default, then anndata's `write_loom`.
const CELL_ATTRS: [&str; 3] = ["CellID", "obs_names", "cell_id"];
/// Matrix entries read per HDF5 call (genes × cells of a slab).
const SLAB_ENTRIES: usize = 1 << 22;

/// Whether `file` is a loom file: a 2-d `/matrix` beside `row_attrs` and `col_attrs` groups.
pub fn is_loom(file: &hdf5::File) -> bool {
    file.link_exists("row_attrs")
        && file.link_exists("col_attrs")
        && file.dataset("matrix").is_ok_and(|d| d.ndim() == 2)
}

/// One attribute (1-d dataset) of `row_attrs` or `col_attrs`.
struct Attr {
    path: PathBuf,
    what: String,
    ds: Dataset,
    kind: Option<NumKind>,
}

impl Attr {
    fn open(path: &Path, file: &hdf5::File, group: &str, name: &str, len: usize) -> Result<Option<Self>> {
        let what = format!("{group}/{name}");
        let Ok(ds) = file.dataset(&what) else { return Ok(None) };
        if ds.shape() != [len] {
            let msg = format!("{what} has shape {:?}, expected [{len}] (one value per {})", ds.shape(), unit(group));
            return Err(Error::format(path, msg));
        }
        let kind = NumKind::of(&h5::descriptor(path, &ds, &what)?);
        Ok(Some(Self { path: path.to_path_buf(), what, ds, kind }))
    }

    fn obs_kind(&self) -> ObsKind {
        match self.kind {
            None => ObsKind::Utf8,
            Some(NumKind::F32 | NumKind::F64) => ObsKind::Float64,
            Some(NumKind::Bool) => ObsKind::Boolean,
            Some(_) => ObsKind::Int64,
        }
    }

    fn read(&self, rows: Option<Range<usize>>) -> Result<ObsValues> {
        let (p, w) = (self.path.as_path(), self.what.as_str());
        Ok(match (self.obs_kind(), self.kind) {
            (ObsKind::Utf8, _) => ObsValues::Utf8(
                h5::read_strings(p, &self.ds, w, rows)?.into_iter().map(|s| Some(unescape(&s))).collect(),
            ),
            (kind, Some(k)) => {
                let v = h5::read_f64(p, &self.ds, w, k, rows)?;
                match kind {
                    ObsKind::Float64 => ObsValues::Float64(v.into_iter().map(Some).collect()),
                    ObsKind::Boolean => ObsValues::Boolean(v.into_iter().map(|x| Some(x != 0.0)).collect()),
                    _ => ObsValues::Int64(v.into_iter().map(|x| Some(x as i64)).collect()),
                }
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

pub struct LoomSource {
    meta: SourceMeta,
    _file: hdf5::File,
    matrix: Dataset,
    n_genes: usize,
    cell_ids: Option<Attr>,
    obs: Vec<Attr>,
    layer: String,
}

impl LoomSource {
    pub fn open(path: &Path, file: hdf5::File, opts: &ReadOptions) -> Result<Self> {
        let layer = match &opts.counts {
            CountsSource::X => "matrix".to_string(),
            CountsSource::Layer(name) => format!("layers/{name}"),
            CountsSource::Raw => {
                return Err(Error::format(
                    path,
                    format!("--counts raw: a loom file has no raw matrix ({})", layers(&file)),
                ))
            }
        };
        let matrix = file.dataset(&layer).map_err(|_| {
            Error::format(
                path,
                format!("no layer '{}' in this loom file ({})", layer.trim_start_matches("layers/"), layers(&file)),
            )
        })?;
        let (n_genes, n_cells) = match matrix.shape().as_slice() {
            &[g, c] => (g, c),
            other => {
                return Err(Error::format(path, format!("{layer}: must be 2-d (genes × cells), found shape {other:?}")))
            }
        };
        h5::num_kind(path, &matrix, &layer)?;
        let row_names = names(&file, "row_attrs");
        let gene_attr = match &opts.gene_column {
            Some(name) => Attr::open(path, &file, "row_attrs", name, n_genes)?.ok_or_else(|| {
                Error::format(
                    path,
                    format!("--gene-column {name}: no such row attribute (row_attrs: {})", row_names.join(", ")),
                )
            })?,
            None => GENE_ATTRS
                .iter()
                .find_map(|n| Attr::open(path, &file, "row_attrs", n, n_genes).transpose())
                .transpose()?
                .ok_or_else(|| {
                    Error::format(
                        path,
                        format!(
                            "no gene id row attribute ({}); choose one with --gene-column (row_attrs: {})",
                            GENE_ATTRS.join(", "),
                            row_names.join(", ")
                        ),
                    )
                })?,
        };
        let genes = gene_attr.read(None)?.into_strings();
        let cell_ids =
            CELL_ATTRS.iter().find_map(|n| Attr::open(path, &file, "col_attrs", n, n_cells).transpose()).transpose()?;
        let col_names = names(&file, "col_attrs");
        let obs = opts
            .obs_columns
            .iter()
            .map(|c| {
                Attr::open(path, &file, "col_attrs", c, n_cells)?.ok_or_else(|| {
                    Error::format(path, format!("no column attribute '{c}' (col_attrs: {})", col_names.join(", ")))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let obs_fields =
            opts.obs_columns.iter().zip(&obs).map(|(n, a)| ObsField { name: n.clone(), kind: a.obs_kind() }).collect();
        Ok(Self {
            meta: SourceMeta { path: path.to_path_buf(), n_cells, genes, obs_fields },
            _file: file,
            matrix,
            n_genes,
            cell_ids,
            obs,
            layer,
        })
    }
}

fn names(file: &hdf5::File, group: &str) -> Vec<String> {
    file.group(group).and_then(|g| g.member_names()).unwrap_or_default()
}

fn layers(file: &hdf5::File) -> String {
    let l = names(file, "layers");
    if l.is_empty() {
        "it has no layers".to_string()
    } else {
        format!("layers: {}", l.join(", "))
    }
}

impl CellSource for LoomSource {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        if rows.end > self.meta.n_cells {
            return Err(Error::Usage(format!("rows {rows:?} beyond {} cells", self.meta.n_cells)));
        }
        let width = rows.len();
        // Each cell's (gene, value) pairs, in gene order: gene blocks are read in order.
        let mut cells: Vec<Vec<(u32, f64)>> = vec![Vec::new(); width];
        let step = (SLAB_ENTRIES / width.max(1)).max(1);
        let mut g = 0;
        while g < self.n_genes {
            let g1 = (g + step).min(self.n_genes);
            let slab = self
                .matrix
                .read_slice_2d::<f64, _>(ndarray::s![g..g1, rows.clone()])
                .map_err(|e| Error::hdf5(&self.meta.path, format!("reading genes {g}..{g1} of {}", self.layer), e))?;
            for (gi, row) in slab.rows().into_iter().enumerate() {
                for (c, &v) in row.iter().enumerate() {
                    if v != 0.0 {
                        cells[c].push(((g + gi) as u32, v));
                    }
                }
            }
            g = g1;
        }
        let mut chunk = CellChunk { first_cell: rows.start, indptr: vec![0], ..Default::default() };
        for cell in cells {
            for (gene, v) in cell {
                chunk.genes.push(gene);
                chunk.values.push(v);
            }
            chunk.indptr.push(chunk.genes.len());
        }
        chunk.cell_ids = match &self.cell_ids {
            Some(a) => a.read(Some(rows.clone()))?.into_strings(),
            None => rows.clone().map(|i| i.to_string()).collect(),
        };
        chunk.obs = self.obs.iter().map(|a| a.read(Some(rows.clone()))).collect::<Result<_>>()?;
        Ok(chunk)
    }

    fn read_obs_column(&mut self, name: &str) -> Result<Option<ObsValues>> {
        match Attr::open(&self.meta.path, &self._file, "col_attrs", name, self.meta.n_cells)? {
            Some(a) => a.read(None).map(Some),
            None => Ok(None),
        }
    }

    fn format(&self) -> &'static str {
        "loom"
    }
}

/// The loom format's entry in the registry.
pub struct Loom;

impl crate::CellFormat for Loom {
    fn name(&self) -> &'static str {
        "loom"
    }

    fn looks_like(&self) -> &'static str {
        "an HDF5 file with matrix, row_attrs and col_attrs (loompy 3)"
    }

    fn detect(&self, input: &crate::Input) -> bool {
        input.hdf5.as_ref().is_some_and(is_loom)
    }

    fn open(&self, input: &crate::Input, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
        Ok(Box::new(LoomSource::open(&input.path, input.hdf5_file()?, opts)?))
    }
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
