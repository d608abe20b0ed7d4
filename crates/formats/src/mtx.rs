//! MatrixMarket directories (`matrix.mtx[.gz]` + `features.tsv[.gz]`/`genes.tsv[.gz]` +
//! `barcodes.tsv[.gz]`), as Cell Ranger writes them. Entries are parsed in one streaming pass
//! into row buckets (out-of-core transpose), so the entry order in the file does not matter.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::transpose::{BucketWriter, RowBuckets};
use super::{CellChunk, CellSource, ReadOptions, SourceMeta};
use crate::error::{Error, IoContext, Result};

pub struct MtxSource {
    meta: SourceMeta,
    matrix: PathBuf,
    /// New column index per feature row; `None` for non-gene features.
    remap: Vec<Option<u32>>,
    barcodes: Vec<String>,
    /// Whether the matrix is stored genes × cells (Cell Ranger) rather than cells × genes.
    genes_by_cells: bool,
    chunk_cells: usize,
    scratch: PathBuf,
    buckets: Option<RowBuckets>,
}

fn find(dir: &Path, stems: &[&str]) -> Option<PathBuf> {
    stems.iter().flat_map(|s| [dir.join(s), dir.join(format!("{s}.gz"))]).find(|p| p.is_file())
}

fn open_text(path: &Path) -> Result<Box<dyn BufRead>> {
    let f = File::open(path).at(path)?;
    let is_gz = path.extension().is_some_and(|e| e == "gz");
    Ok(if is_gz {
        Box::new(BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(f)))
    } else {
        Box::new(BufReader::with_capacity(1 << 20, f))
    })
}

fn read_lines(path: &Path) -> Result<Vec<String>> {
    let mut text = String::new();
    open_text(path)?.read_to_string(&mut text).map_err(|e| Error::format(path, format!("not readable text: {e}")))?;
    Ok(text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
}

/// The header of a coordinate MatrixMarket file: (rows, cols, entries).
fn read_header(path: &Path, reader: &mut dyn BufRead) -> Result<(usize, usize, usize)> {
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| Error::format(path, format!("unreadable header: {e}")))?;
    let banner: Vec<String> = line.split_whitespace().map(str::to_lowercase).collect();
    let ok = banner.len() >= 4 && banner[0] == "%%matrixmarket" && banner[1] == "matrix" && banner[2] == "coordinate";
    if !ok {
        return Err(Error::format(
            path,
            "not a coordinate MatrixMarket file (expected '%%MatrixMarket matrix coordinate ...')",
        ));
    }
    if !matches!(banner[3].as_str(), "integer" | "real" | "double") {
        return Err(Error::format(path, format!("MatrixMarket field '{}' is not integer or real counts", banner[3])));
    }
    if banner.get(4).is_some_and(|s| s != "general") {
        return Err(Error::format(
            path,
            format!("MatrixMarket symmetry '{}' is not supported (expected general)", banner[4]),
        ));
    }
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|e| Error::format(path, e.to_string()))? == 0 {
            return Err(Error::format(path, "truncated: no size line after the header"));
        }
        if !line.starts_with('%') {
            break;
        }
    }
    let dims: Vec<usize> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| Error::format(path, format!("size line '{}' is not three integers", line.trim())))?;
    match dims.as_slice() {
        &[r, c, n] => Ok((r, c, n)),
        _ => Err(Error::format(path, format!("size line '{}' is not three integers", line.trim()))),
    }
}

impl MtxSource {
    pub fn open(path: &Path, opts: &ReadOptions) -> Result<Self> {
        let (dir, matrix) = if path.is_dir() {
            let m =
                find(path, &["matrix.mtx"]).ok_or_else(|| Error::format(path, "directory has no matrix.mtx[.gz]"))?;
            (path.to_path_buf(), m)
        } else {
            (path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf), path.to_path_buf())
        };
        let features = find(&dir, &["features.tsv", "genes.tsv"])
            .ok_or_else(|| Error::format(&dir, "no features.tsv[.gz] or genes.tsv[.gz] beside the matrix"))?;
        let barcodes_path = find(&dir, &["barcodes.tsv"])
            .ok_or_else(|| Error::format(&dir, "no barcodes.tsv[.gz] beside the matrix"))?;
        let col = match opts.gene_column.as_deref().unwrap_or("id") {
            "id" | "gene_ids" => 0,
            "name" | "gene_symbols" => 1,
            other => return Err(Error::format(&features, format!("gene column '{other}' is not 'id' or 'name'"))),
        };
        let mut genes = Vec::new();
        let mut remap = Vec::new();
        for (i, line) in read_lines(&features)?.iter().enumerate() {
            let fields: Vec<&str> = line.split('\t').collect();
            let id = fields
                .get(col)
                .ok_or_else(|| Error::format(&features, format!("line {}: no column {}", i + 1, col + 1)))?;
            let keep = fields.get(2).is_none_or(|t| *t == "Gene Expression");
            remap.push(keep.then(|| {
                genes.push((*id).to_string());
                (genes.len() - 1) as u32
            }));
        }
        let barcodes: Vec<String> =
            read_lines(&barcodes_path)?.into_iter().map(|l| l.split('\t').next().unwrap_or("").to_string()).collect();
        let (rows, cols, _) = read_header(&matrix, &mut *open_text(&matrix)?)?;
        let genes_by_cells = if rows == remap.len() && cols == barcodes.len() {
            if rows == cols {
                // As many features as barcodes: the shape cannot tell the layouts apart.
                tracing::warn!(
                    file = %matrix.display(),
                    "the matrix is square ({rows} × {cols}), so its orientation is ambiguous; it is read as features × \
                     barcodes (Cell Ranger's layout): transpose a cells × genes export, or drop a feature"
                );
            }
            true
        } else if rows == barcodes.len() && cols == remap.len() {
            false
        } else {
            return Err(Error::format(
                &matrix,
                format!(
                    "shape mismatch: matrix is {rows} × {cols} but there are {} features and {} barcodes",
                    remap.len(),
                    barcodes.len()
                ),
            ));
        };
        if !opts.obs_columns.is_empty() {
            return Err(Error::format(&dir, "MatrixMarket directories have no obs columns to pass through"));
        }
        let meta = SourceMeta { path: dir, n_cells: barcodes.len(), genes, obs_fields: Vec::new() };
        Ok(Self {
            meta,
            matrix,
            remap,
            barcodes,
            genes_by_cells,
            chunk_cells: opts.chunk_cells,
            scratch: opts.scratch_dir.clone(),
            buckets: None,
        })
    }

    fn transpose(&self) -> Result<RowBuckets> {
        let path = &self.matrix;
        let mut reader = open_text(path)?;
        let header = read_header(path, &mut *reader)?;
        let mut writer = BucketWriter::new(&self.scratch, self.barcodes.len(), self.chunk_cells)?;
        if let Err(e) = self.scan_entries(&mut *reader, header, &mut writer) {
            // Damaged compressed data often decodes to garbage before the decoder notices: the
            // real cause is then the gzip stream, not the entry that failed to parse.
            return Err(gzip_damage(path, &mut *reader).unwrap_or(e));
        }
        writer.finish()
    }

    /// Streams the entries after the header into `writer`, checking positions and the count.
    fn scan_entries(
        &self,
        reader: &mut dyn BufRead,
        (rows, cols, entries): (usize, usize, usize),
        writer: &mut BucketWriter,
    ) -> Result<()> {
        let path = &self.matrix;
        let mut line = Vec::new();
        let mut seen = 0usize;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(|e| Error::format(path, format!("read error: {e}")))?;
            if n == 0 {
                break;
            }
            let text = std::str::from_utf8(&line)
                .map_err(|_| Error::format(path, format!("entry {} is not text", seen + 1)))?;
            let mut it = text.split_ascii_whitespace();
            let (Some(i), Some(j), Some(v)) = (it.next(), it.next(), it.next()) else {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(Error::format(
                    path,
                    format!("entry {}: expected 'row col value', got '{}'", seen + 1, text.trim()),
                ));
            };
            if seen == entries {
                return Err(Error::format(
                    path,
                    format!(
                        "more entries than the header announces ({entries}): line '{}' follows the last one",
                        text.trim()
                    ),
                ));
            }
            let bad = || Error::format(path, format!("entry {}: cannot parse '{}'", seen + 1, text.trim()));
            let (i, j): (usize, usize) = (i.parse().map_err(|_| bad())?, j.parse().map_err(|_| bad())?);
            let v: f64 = v.parse().map_err(|_| bad())?;
            if i == 0 || j == 0 || i > rows || j > cols {
                return Err(Error::format(
                    path,
                    format!("entry {}: position ({i}, {j}) outside {rows} × {cols}", seen + 1),
                ));
            }
            let (feature, cell) = if self.genes_by_cells { (i - 1, j - 1) } else { (j - 1, i - 1) };
            if let Some(g) = self.remap[feature] {
                writer.push(cell as u32, g, v)?;
            }
            seen += 1;
        }
        if seen != entries {
            return Err(Error::format(path, format!("truncated: header announces {entries} entries, file has {seen}")));
        }
        Ok(())
    }
}

/// For a `.gz` file: the decoder's error when the rest of the stream does not decompress (corrupt
/// or cut), read after another error to find its cause.
fn gzip_damage(path: &Path, reader: &mut dyn BufRead) -> Option<Error> {
    if path.extension().is_none_or(|e| e != "gz") {
        return None;
    }
    let e = std::io::copy(reader, &mut std::io::sink()).err()?;
    Some(Error::format(path, format!("damaged gzip stream ({e}): the file is corrupt or cut short")))
}

impl CellSource for MtxSource {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        if self.buckets.is_none() {
            self.buckets = Some(self.transpose()?);
        }
        let m = self.buckets.as_mut().expect("transposed above").read(rows.clone())?; // ok: invariant
        let cell_ids = self.barcodes[rows.clone()].to_vec();
        Ok(CellChunk {
            first_cell: rows.start,
            indptr: m.indptr,
            genes: m.cols,
            values: m.values,
            cell_ids,
            obs: Vec::new(),
        })
    }

    fn format(&self) -> &'static str {
        "MatrixMarket"
    }
}

/// The MatrixMarket format's entry in the registry.
pub struct Mtx;

impl crate::CellFormat for Mtx {
    fn name(&self) -> &'static str {
        "MatrixMarket"
    }

    fn looks_like(&self) -> &'static str {
        "a directory with matrix.mtx[.gz], features.tsv[.gz] and barcodes.tsv[.gz], or the .mtx[.gz] file"
    }

    fn detect(&self, input: &crate::Input) -> bool {
        if input.is_dir {
            find(&input.path, &["matrix.mtx"]).is_some()
        } else {
            let name = input.name();
            name.ends_with(".mtx") || name.ends_with(".mtx.gz")
        }
    }

    fn open(&self, input: &crate::Input, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
        Ok(Box::new(MtxSource::open(&input.path, opts)?))
    }
}
