//! Loom files (loompy 3): an HDF5 file whose `/matrix` holds genes × cells, with gene
//! attributes in `/row_attrs`, cell attributes in `/col_attrs` and other matrices of the same
//! shape in `/layers`. Geneformer's tokenizer reads loom first: genes by the row attribute
//! `ensembl_id`, cells filtered by the column attribute `filter_pass`. Cells are columns here,
//! so a chunk of cells is a column slab, read in blocks of genes to keep memory bounded.

mod attrs;

use std::ops::Range;
use std::path::Path;

use hdf5::Dataset;

use crate::error::{Error, Result};
use crate::h5;
use crate::{CellChunk, CellSource, CountsSource, ObsField, ObsValues, ReadOptions, SourceMeta};
use attrs::{names, Attr};

/// Matrix entries read per HDF5 call (genes × cells of a slab).
const SLAB_ENTRIES: usize = 1 << 22;

/// Whether `file` is a loom file: a `/matrix` dataset beside `row_attrs` and `col_attrs` groups
/// (of any dimensionality: the reader then says the matrix must be 2-d).
pub fn is_loom(file: &hdf5::File) -> bool {
    file.link_exists("row_attrs") && file.link_exists("col_attrs") && file.dataset("matrix").is_ok()
}

pub struct LoomSource {
    meta: SourceMeta,
    _file: hdf5::File,
    matrix: Dataset,
    n_genes: usize,
    cell_ids: Option<Attr>,
    /// The gene row attribute read (for messages).
    gene_attr: String,
    obs: Vec<Attr>,
    layer: String,
    /// What to log about the cell names at the first read (not at open: opening is first done
    /// in a forked child, which would log it too).
    note: Option<(tracing::Level, String)>,
}

impl LoomSource {
    pub fn open(path: &Path, file: hdf5::File, opts: &ReadOptions) -> Result<Self> {
        let (n_genes, n_cells) = genes_by_cells(path, &file, "matrix")?;
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
        if file.dataset(&layer).is_err() {
            let name = layer.trim_start_matches("layers/");
            return Err(Error::format(path, format!("no layer '{name}' in this loom file ({})", layers(&file))));
        }
        if layer != "matrix" && genes_by_cells(path, &file, &layer)? != (n_genes, n_cells) {
            let shape = file.dataset(&layer).map(|d| d.shape()).unwrap_or_default();
            return Err(Error::format(
                path,
                format!(
                    "{layer} has shape {shape:?} but matrix has [{n_genes}, {n_cells}]: a loom file's layers have the \
                     shape of its matrix (genes × cells)"
                ),
            ));
        }
        let matrix = file.dataset(&layer).map_err(|e| Error::hdf5(path, format!("opening {layer}"), e))?;
        h5::num_kind(path, &matrix, &layer)?;
        let gene_attr = attrs::gene_attr(path, &file, n_genes, opts.gene_column.as_deref())?;
        let genes = gene_attr.read(None)?.into_strings();
        let (cell_ids, note) = attrs::cell_attr(path, &file, n_cells, opts.cell_names.as_deref())?;
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
            gene_attr: format!("row attribute '{}'", gene_attr.name()),
            obs,
            layer,
            note,
        })
    }
}

/// The (genes, cells) shape of the 2-d dataset `at`.
fn genes_by_cells(path: &Path, file: &hdf5::File, at: &str) -> Result<(usize, usize)> {
    let ds = file.dataset(at).map_err(|e| Error::hdf5(path, format!("opening {at}"), e))?;
    match ds.shape().as_slice() {
        &[g, c] => Ok((g, c)),
        other => Err(Error::format(
            path,
            format!("{at} has {} dimensions (shape {other:?}); a loom file's {at} has 2: genes × cells", other.len()),
        )),
    }
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
        match self.note.take() {
            Some((tracing::Level::WARN, msg)) => tracing::warn!("{msg}"),
            Some((_, msg)) => tracing::info!("{msg}"),
            None => {}
        }
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

    fn gene_column(&self) -> Option<&str> {
        Some(&self.gene_attr)
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
