//! 10x Genomics HDF5 matrices (`filtered_feature_bc_matrix.h5`): v3 (`matrix/features/…`) and
//! v2 (`<genome>/genes`). Stored genes × cells, compressed by cell, so cells read as slices.
//! Only "Gene Expression" features are kept (antibody or CRISPR features are not genes).

use std::ops::Range;
use std::path::Path;

use super::h5;
use super::matrix::SparseRows;
use super::{CellChunk, CellSource, ReadOptions, SourceMeta};
use crate::error::{Error, Result};

/// Whether `file` looks like a 10x matrix rather than an AnnData file.
pub fn is_tenx(file: &hdf5::File) -> bool {
    !file.link_exists("X") && !tenx_groups(file).is_empty()
}

/// What a 10x matrix group holds.
const TENX_MEMBERS: [&str; 5] = ["barcodes", "data", "indices", "indptr", "shape"];

/// The matrix groups of a 10x file: `matrix` (v3), or one per genome (v2). A group counts when it
/// holds most of a 10x matrix, so that one missing dataset is reported as such, not as "not an
/// AnnData file".
fn tenx_groups(file: &hdf5::File) -> Vec<String> {
    let names = file.member_names().unwrap_or_default();
    names
        .into_iter()
        .filter(|n| file.group(n).is_ok_and(|g| TENX_MEMBERS.iter().filter(|m| g.link_exists(m)).count() >= 3))
        .collect()
}

/// Refuses a 10x group that lacks one of the datasets every 10x matrix has.
fn check_members(path: &Path, name: &str, g: &hdf5::Group) -> Result<()> {
    let missing: Vec<&str> = TENX_MEMBERS.iter().copied().filter(|m| !g.link_exists(m)).collect();
    let features = g.link_exists("features") || g.link_exists("genes");
    if missing.is_empty() && features {
        return Ok(());
    }
    let mut missing: Vec<String> = missing.iter().map(|m| format!("{name}/{m}")).collect();
    if !features {
        missing.push(format!("{name}/features (v3) or {name}/genes (v2)"));
    }
    Err(Error::format(
        path,
        format!(
            "10x HDF5 matrix without {}: a Cell Ranger .h5 holds barcodes, data, indices, indptr, shape and the              feature table (is the file truncated or rewritten by another tool?)",
            missing.join(", ")
        ),
    ))
}

/// The group to read: the only one, or the v2 genome `--genome` names.
fn choose_group(path: &Path, groups: Vec<String>, genome: Option<&str>) -> Result<String> {
    let v3 = groups.iter().any(|g| g == "matrix");
    match (genome, &groups[..]) {
        (_, []) => Err(Error::format(path, "no 10x matrix group")),
        // v3 keeps every genome in `matrix`; --genome then filters the features.
        (_, [only]) if v3 || genome.is_none_or(|g| g == only) => Ok(only.clone()),
        (Some(g), _) if groups.iter().any(|n| n == g) => Ok(g.to_string()),
        (Some(g), _) => Err(Error::format(path, format!("has no genome '{g}' (genomes: {})", groups.join(", ")))),
        (None, _) => Err(Error::format(
            path,
            format!("holds the matrices of {} genomes ({}): choose one with --genome", groups.len(), groups.join(", ")),
        )),
    }
}

pub struct TenxSource {
    meta: SourceMeta,
    _file: hdf5::File,
    matrix: SparseRows,
    barcodes: hdf5::Dataset,
    /// New column index of each stored feature; `None` for non-gene features.
    remap: Vec<Option<u32>>,
}

impl TenxSource {
    pub fn open(path: &Path, file: hdf5::File, opts: &ReadOptions) -> Result<Self> {
        let name = choose_group(path, tenx_groups(&file), opts.genome.as_deref())?;
        let g = file.group(&name).map_err(|e| Error::hdf5(path, &name, e))?;
        check_members(path, &name, &g)?;
        let shape_ds = g.dataset("shape").map_err(|e| Error::hdf5(path, format!("{name}/shape"), e))?;
        let shape = h5::read_i64(path, &shape_ds, &format!("{name}/shape"), None)?;
        let (n_features, n_cells) = match shape.as_slice() {
            &[f, c] if f >= 0 && c >= 0 => (f as usize, c as usize),
            other => return Err(Error::format(path, format!("{name}/shape must hold 2 integers, found {other:?}"))),
        };
        let matrix = SparseRows::open(path, &name, &g, n_cells, n_features)?;
        let (genes, remap) = gene_table(path, &name, &g, n_features, opts)?;
        let barcodes = g.dataset("barcodes").map_err(|e| Error::hdf5(path, format!("{name}/barcodes"), e))?;
        if barcodes.size() != n_cells {
            return Err(Error::format(
                path,
                format!("shape mismatch: {name}/shape says {n_cells} cells, barcodes has {}", barcodes.size()),
            ));
        }
        if !opts.obs_columns.is_empty() {
            return Err(Error::format(path, "10x matrices have no obs columns to pass through"));
        }
        let meta = SourceMeta { path: path.to_path_buf(), n_cells, genes, obs_fields: Vec::new() };
        Ok(Self { meta, _file: file, matrix, barcodes, remap })
    }
}

/// The kept genes' identifiers (the chosen gene column, Gene Expression features of the chosen
/// genome) and each feature's index among them.
fn gene_table(
    path: &Path,
    name: &str,
    g: &hdf5::Group,
    n_features: usize,
    opts: &ReadOptions,
) -> Result<(Vec<String>, Vec<Option<u32>>)> {
    let table = FeatureTable { path, name, g, n_features };
    let ids = table.gene_ids(opts.gene_column.as_deref().unwrap_or("id"))?;
    if ids.len() != n_features {
        return Err(Error::format(
            path,
            format!("shape mismatch: {name}/shape says {n_features} features, gene table has {}", ids.len()),
        ));
    }
    let is_gene = table.kept(opts.genome.as_deref())?;
    let mut genes = Vec::new();
    let remap = ids
        .into_iter()
        .zip(is_gene)
        .map(|(id, keep)| {
            keep.then(|| {
                genes.push(id);
                (genes.len() - 1) as u32
            })
        })
        .collect();
    Ok((genes, remap))
}

/// The per-feature columns of a 10x matrix group (v3: `features/*`; v2: `genes`, `gene_names`).
struct FeatureTable<'a> {
    path: &'a Path,
    name: &'a str,
    g: &'a hdf5::Group,
    n_features: usize,
}

impl FeatureTable<'_> {
    fn v3(&self) -> bool {
        self.g.link_exists("features")
    }

    fn strings(&self, p: &str) -> Result<Vec<String>> {
        let (path, name) = (self.path, self.name);
        let ds = self.g.dataset(p).map_err(|_| Error::format(path, format!("10x matrix has no {name}/{p}")))?;
        h5::read_strings(path, &ds, &format!("{name}/{p}"), None)
    }

    /// The identifiers of `column` (`id`/`gene_ids`, `name`/`gene_symbols`, or any other
    /// per-feature column of a v3 file).
    fn gene_ids(&self, column: &str) -> Result<Vec<String>> {
        let v3 = self.v3();
        match (v3, column) {
            (true, "id" | "gene_ids") => self.strings("features/id"),
            (true, "name" | "gene_symbols") => self.strings("features/name"),
            (false, "id" | "gene_ids") => self.strings("genes"),
            (false, "name" | "gene_symbols") => self.strings("gene_names"),
            // Any other per-feature column (Space Ranger ≥ 2.1 writes features/gene_id, for one).
            (true, other) if !other.contains('/') && self.g.link_exists(&format!("features/{other}")) => {
                self.strings(&format!("features/{other}"))
            }
            (_, other) => {
                let mut have = vec!["id".to_string(), "name".to_string()];
                if v3 {
                    let more = self.g.group("features").and_then(|f| f.member_names()).unwrap_or_default();
                    have.extend(more.into_iter().filter(|c| !c.starts_with('_') && c != "id" && c != "name"));
                }
                let msg = format!("--gene-column '{other}': this 10x file's gene columns are {}", have.join(", "));
                Err(Error::format(self.path, msg))
            }
        }
    }

    /// A per-feature column that must cover every feature (a shorter one would leave features
    /// without a decision: found by the fuzzer as an out-of-bounds index).
    fn per_feature(&self, column: &str) -> Result<Vec<String>> {
        let values = self.strings(column)?;
        if values.len() == self.n_features {
            return Ok(values);
        }
        let (name, n) = (self.name, self.n_features);
        let msg = format!("shape mismatch: {name}/shape says {n} features, {name}/{column} has {}", values.len());
        Err(Error::format(self.path, msg))
    }

    /// Which features are kept: Gene Expression features (v3), of `genome` when one is asked.
    fn kept(&self, genome: Option<&str>) -> Result<Vec<bool>> {
        let v3 = self.v3();
        let mut is_gene: Vec<bool> = if v3 && self.g.link_exists("features/feature_type") {
            self.per_feature("features/feature_type")?.into_iter().map(|t| t == "Gene Expression").collect()
        } else {
            vec![true; self.n_features]
        };
        if let (true, Some(want)) = (v3, genome) {
            let genomes =
                if self.g.link_exists("features/genome") { self.per_feature("features/genome")? } else { Vec::new() };
            if !genomes.iter().any(|x| x == want) {
                let mut known = genomes.clone();
                known.sort();
                known.dedup();
                let msg = format!("has no genome '{want}' (genomes: {})", known.join(", "));
                return Err(Error::format(self.path, msg));
            }
            is_gene.iter_mut().zip(&genomes).for_each(|(keep, x)| *keep &= x == want);
        }
        Ok(is_gene)
    }
}

impl CellSource for TenxSource {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        let m = self.matrix.read(rows.clone())?;
        let mut chunk = CellChunk { first_cell: rows.start, indptr: vec![0], ..Default::default() };
        for w in m.indptr.windows(2) {
            for k in w[0]..w[1] {
                if let Some(c) = self.remap[m.cols[k] as usize] {
                    chunk.genes.push(c);
                    chunk.values.push(m.values.get(k));
                }
            }
            chunk.indptr.push(chunk.genes.len());
        }
        chunk.cell_ids = h5::read_strings(&self.meta.path, &self.barcodes, "barcodes", Some(rows))?;
        Ok(chunk)
    }

    fn format(&self) -> &'static str {
        "10x h5"
    }
}

/// The 10x HDF5 format's entry in the registry.
pub struct Tenx;

impl crate::CellFormat for Tenx {
    fn name(&self) -> &'static str {
        "10x HDF5"
    }

    fn looks_like(&self) -> &'static str {
        "an HDF5 file with matrix/ (barcodes, data, indices, indptr, shape)"
    }

    fn detect(&self, input: &crate::Input) -> bool {
        input.hdf5.as_ref().is_some_and(is_tenx)
    }

    fn open(&self, input: &crate::Input, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
        Ok(Box::new(TenxSource::open(&input.path, input.hdf5_file()?, opts)?))
    }
}
