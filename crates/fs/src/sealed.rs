//! JSON files that carry the sha256 of their own bytes: a checkpoint's `state.json`.
//!
//! ```text
//! {
//!   "step": 100,
//!   ...
//!   "state_sha256": "<sha256 of every byte before the comma that ends the line above>"
//! }
//! ```
//! The checksum is the object's last field, so the file stays plain JSON that any tool reads; it
//! covers the exact bytes before it (the pretty-printed object up to its last value), so a
//! changed byte anywhere is caught, whitespace included. [`verify`] is the one check of such a
//! file, called by its reader before it parses the content.

use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// What closes a sealed file after the checksum's hex digits.
const END: &str = "\"\n}\n";

/// The bytes that introduce the checksum field `key`.
fn opening(key: &str) -> String {
    format!(",\n  \"{key}\": \"")
}

/// `value` (a struct, serialized as a JSON object with at least one field) as pretty JSON whose
/// last field `key` holds the sha256 of the bytes before it. `path` names the file in errors.
pub fn to_sealed_json<T: Serialize>(path: &Path, value: &T, key: &str) -> Result<Vec<u8>> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::io(path, e.into()))?;
    let body = text
        .strip_suffix("\n}")
        .filter(|b| b.starts_with('{') && b.len() > 1)
        .ok_or_else(|| Error::internal("sealed JSON", format!("{}: not a JSON object with fields", path.display())))?;
    let sum = hex::encode(Sha256::digest(body.as_bytes()));
    Ok(format!("{body}{}{sum}{END}", opening(key)).into_bytes())
}

/// Checks that `bytes` (the content of `path`) end with the checksum field `key` and that it
/// is the sha256 of the bytes before it.
pub fn verify(path: &Path, bytes: &[u8], key: &str) -> Result<()> {
    let opening = opening(key);
    let recorded = bytes
        .strip_suffix(END.as_bytes())
        .and_then(|b| b.len().checked_sub(64).map(|at| b.split_at(at)))
        .and_then(|(head, sum)| Some((head.strip_suffix(opening.as_bytes())?, sum)))
        .filter(|(_, sum)| sum.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)));
    let Some((body, sum)) = recorded else {
        return Err(Error::format(
            path,
            format!(
                "has no checksum (its last field must be \"{key}\"): it was written by an older corrflow, \
                 or damaged or edited; write it again with this version"
            ),
        ));
    };
    let (actual, sum) = (hex::encode(Sha256::digest(body)), String::from_utf8_lossy(sum));
    if actual != sum {
        return Err(Error::format(
            path,
            format!(
                "does not match the checksum recorded in it (damaged or edited): its content hashes to {actual}, \
                 recorded {key} {sum}"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct State {
        step: u64,
        name: String,
    }

    #[test]
    fn a_sealed_file_is_plain_json_that_verifies_and_any_changed_byte_is_refused() {
        let path = Path::new("ckpt/state.json");
        let state = State { step: 7, name: "a b".into() };
        let bytes = to_sealed_json(path, &state, "state_sha256").unwrap();
        verify(path, &bytes, "state_sha256").unwrap();
        assert_eq!(serde_json::from_slice::<State>(&bytes).unwrap(), state);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("{\n  \"step\": 7,\n") && text.contains("\n  \"state_sha256\": \""), "{text}");
        for i in 0..bytes.len() {
            for flip in [0x01, 0x20, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                let e = verify(path, &b, "state_sha256").unwrap_err().to_string();
                assert!(e.starts_with("ckpt/state.json: "), "{e}");
                assert!(e.contains("checksum"), "{e}");
            }
        }
        let e = verify(path, &bytes[..bytes.len() - 1], "state_sha256").unwrap_err().to_string();
        assert!(e.contains("has no checksum"), "{e}");
    }

    #[test]
    fn a_mismatch_shows_both_hashes_in_full() {
        let path = Path::new("state.json");
        let mut bytes = to_sealed_json(path, &State { step: 1, name: String::new() }, "k").unwrap();
        bytes[12] = b'2'; // the step: 1 → 2
        let e = verify(path, &bytes, "k").unwrap_err().to_string();
        let hashes: Vec<&str> = e.split(|c: char| !c.is_ascii_hexdigit()).filter(|w| w.len() == 64).collect::<Vec<_>>();
        assert_eq!(hashes.len(), 2, "{e}");
        assert_ne!(hashes[0], hashes[1]);
    }

    #[test]
    fn a_file_without_the_field_is_refused_as_unsealed() {
        let bytes = serde_json::to_vec_pretty(&State { step: 1, name: String::new() }).unwrap();
        let e = verify(Path::new("state.json"), &bytes, "state_sha256").unwrap_err().to_string();
        assert!(e.contains("has no checksum") && e.contains("older corrflow"), "{e}");
    }
}
