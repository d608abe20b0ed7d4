//! An exported model's checksum: `export onnx` records the sha256 of `FILE.onnx` in its sidecar
//! (`FILE.vocab/model.sha256`, a `sha256sum` line), and every reader checks the bytes it read
//! against it with [`verify_model`] before it uses them.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use corrflow_io::error::{Error, Result};

use super::vocab_sidecar;

/// The file in an exported model's sidecar that records the model file's sha256.
pub const MODEL_SHA256_FILE: &str = "model.sha256";

/// Where the checksum of exported model `model` is recorded.
pub fn checksum_path(model: &Path) -> PathBuf {
    vocab_sidecar(model).join(MODEL_SHA256_FILE)
}

/// Writes the checksum record of `bytes`, the content of exported model `model`, into `dir`
/// (the sidecar, or its staging directory): `sha256sum`'s line, so that `sha256sum -c
/// FILE.vocab/model.sha256` run in the model's directory checks it too.
pub fn write_model_checksum(dir: &Path, model: &Path, bytes: &[u8]) -> Result<()> {
    let name = model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let line = format!("{}  {name}\n", hex::encode(Sha256::digest(bytes)));
    Ok(corrflow_fs::atomic::write_atomic(&dir.join(MODEL_SHA256_FILE), line.as_bytes())?)
}

/// The one check of an exported model: `bytes`, read from `model`, against the sha256 its
/// sidecar records. A model without a record (exported by an older corrflow) is refused too.
pub fn verify_model(model: &Path, bytes: &[u8]) -> Result<()> {
    let record = checksum_path(model);
    let text = match std::fs::read(&record) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::format(
                model,
                format!(
                    "has no recorded checksum ({} is missing): it was exported by an older corrflow; \
                     export it again with `corrflow export onnx`",
                    record.display()
                ),
            ))
        }
        Err(e) => return Err(Error::io(&record, e)),
    };
    let recorded = text.split(|b| b.is_ascii_whitespace()).next().unwrap_or_default();
    if recorded.len() != 64 || !recorded.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)) {
        return Err(Error::format(
            &record,
            format!("is not a sha256 record of {} (damaged or edited): export the model again", model.display()),
        ));
    }
    let (actual, recorded) = (hex::encode(Sha256::digest(bytes)), String::from_utf8_lossy(recorded));
    if actual != recorded {
        return Err(Error::format(
            model,
            format!(
                "does not match the checksum recorded at export (damaged or modified, or another export's \
                 sidecar): its sha256 is {actual}, {} records {recorded}; export it again",
                record.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_checksum_accepts_the_model_and_refuses_any_other_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.onnx");
        let bytes = b"not really a model, but bytes".to_vec();
        std::fs::create_dir_all(vocab_sidecar(&model)).unwrap();
        let e = verify_model(&model, &bytes).unwrap_err().to_string();
        assert!(e.contains("m.onnx: has no recorded checksum") && e.contains("m.vocab/model.sha256"), "{e}");
        write_model_checksum(&vocab_sidecar(&model), &model, &bytes).unwrap();
        let line = std::fs::read_to_string(checksum_path(&model)).unwrap();
        assert!(line.ends_with("  m.onnx\n") && line.len() == 64 + 2 + 6 + 1, "{line}");
        verify_model(&model, &bytes).unwrap();
        let mut flipped = bytes.clone();
        flipped[3] ^= 0x10;
        let e = verify_model(&model, &flipped).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: does not match", model.display())), "{e}");
        let hashes: Vec<&str> = e.split(|c: char| !c.is_ascii_hexdigit()).filter(|w| w.len() == 64).collect();
        assert_eq!(hashes.len(), 2, "both hashes in full: {e}");
        std::fs::write(checksum_path(&model), "xyz  m.onnx\n").unwrap();
        let e = verify_model(&model, &bytes).unwrap_err().to_string();
        assert!(e.contains("model.sha256: is not a sha256 record"), "{e}");
    }
}
