//! Inputs already in the corpus under another atlas name, found by content (sha256): the same
//! cells in two atlases count twice in the graph's statistics and in training, which nobody
//! means to do and nothing else would show.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::corpus::{atlas_dir, list_atlases, AtlasManifest, InputFile};
use crate::error::{IoContext, Result};

/// The sha256 of an input: a file's bytes, or a directory's files (sorted by name; a
/// MatrixMarket folder) with their names.
pub(super) fn content_sha256(path: &Path) -> Result<String> {
    let mut h = Sha256::new();
    if path.is_dir() {
        let mut files: Vec<_> =
            std::fs::read_dir(path).at(path)?.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        for f in files {
            h.update(f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default().as_bytes());
            hash_file(&f, &mut h)?;
        }
    } else {
        hash_file(path, &mut h)?;
    }
    Ok(hex::encode(h.finalize()))
}

fn hash_file(path: &Path, h: &mut Sha256) -> Result<()> {
    let mut f = std::fs::File::open(path).at(path)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).at(path)?;
        if n == 0 {
            return Ok(());
        }
        h.update(&buf[..n]);
    }
}

/// One warning per input of `inputs` whose content another atlas of `corpus` already holds.
/// Atlases written before inputs were hashed are compared by hashing their input where it still
/// exists with the same size.
pub(super) fn duplicate_inputs(corpus: &Path, atlas: &str, inputs: &[InputFile]) -> Vec<String> {
    let mut warnings = Vec::new();
    for other in list_atlases(corpus).into_iter().filter(|a| a != atlas) {
        let Ok(manifest) = AtlasManifest::load(&atlas_dir(corpus, &other)) else { continue };
        for theirs in &manifest.inputs {
            for ours in inputs {
                let Some(sha) = &ours.sha256 else { continue };
                // The same store read with different selections (SOMA value filters) is not
                // the same cells.
                if theirs.selection != ours.selection {
                    continue;
                }
                let same = match &theirs.sha256 {
                    Some(s) => s == sha,
                    None => {
                        theirs.bytes == ours.bytes && content_sha256(Path::new(&theirs.path)).is_ok_and(|s| s == *sha)
                    }
                };
                if same {
                    warnings.push(format!(
                        "{} has the same content (sha256 {}) as {}, already in atlas '{other}': its cells are now in \
                         the corpus twice and weigh double in `graph build` and `train` (if that is not meant, remove \
                         one of the atlases: rm -r {})",
                        ours.path,
                        &sha[..12],
                        theirs.path,
                        atlas_dir(corpus, atlas).display()
                    ));
                }
            }
        }
    }
    warnings
}
