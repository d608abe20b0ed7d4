//! The Cell Ontology on disk, and maps from a dataset's cell-type labels to its terms.
//!
//! [`load`] reads the ontology file shipped inside the `cellxgene-ontology-guide` wheel (a zstd
//! JSON of `id → {label, synonyms, ancestors: {id: distance}, deprecated}`, fetched by
//! `datasets/fetch.sh`) into the DAG of `corrflow_algorithms::ontology`. [`map`] proposes and
//! reads label → term maps (`ontology map`, `ingest --cell-type-map`).

pub mod map;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use corrflow_algorithms::ontology::{Ontology, Term};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};

/// Decompressed ontologies larger than this are refused (the Cell Ontology is ~10 MB).
const MAX_JSON_BYTES: u64 = 1 << 30;

/// An ontology read from a file, with what identifies it.
#[derive(Clone, Debug)]
pub struct LoadedOntology {
    pub path: PathBuf,
    pub ontology: Ontology,
    /// The release, from the file name (`CL-ontology-v2026-03-26.json.zst` → `v2026-03-26`),
    /// or `sha256:<12 hex digits>` of the file when the name carries none.
    pub version: String,
    pub sha256: String,
    /// Deprecated terms left out.
    pub deprecated: usize,
}

#[derive(Deserialize)]
struct RawTerm {
    label: String,
    #[serde(default)]
    synonyms: Vec<String>,
    #[serde(default)]
    ancestors: BTreeMap<String, u32>,
    #[serde(default)]
    deprecated: bool,
}

/// Reads an ontology file (`.json.zst` or `.json`): deprecated terms are left out, and a term's
/// parents are its ancestors at distance 1.
pub fn load(path: &Path) -> Result<LoadedOntology> {
    let bytes = std::fs::read(path).at(path)?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let json = if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let decoder = zstd::stream::read::Decoder::new(bytes.as_slice())
            .map_err(|e| Error::format(path, format!("not a zstd stream: {e}")))?;
        let mut out = Vec::new();
        decoder
            .take(MAX_JSON_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| Error::format(path, format!("zstd decompression failed: {e}")))?;
        if out.len() as u64 > MAX_JSON_BYTES {
            return Err(Error::format(path, format!("decompresses to more than {MAX_JSON_BYTES} bytes")));
        }
        out
    } else {
        bytes
    };
    let RawTerms(listed) = serde_json::from_slice(&json).map_err(|e| {
        Error::format(path, format!("not an ontology JSON (an object of term id → {{label, ancestors, ...}}): {e}"))
    })?;
    let raw = checked_terms(path, listed)?;
    let deprecated = raw.values().filter(|t| t.deprecated).count();
    let live = |id: &String| raw.get(id).is_some_and(|t| !t.deprecated);
    let terms: Vec<Term> = raw
        .iter()
        .filter(|(_, t)| !t.deprecated)
        .map(|(id, t)| Term {
            id: id.clone(),
            label: t.label.clone(),
            synonyms: t.synonyms.clone(),
            // Some releases list a term as its own parent (CL v2025-02-13: CL:4047034); that
            // edge says nothing and is dropped.
            parents: t
                .ancestors
                .iter()
                .filter(|(a, &d)| d == 1 && live(a) && *a != id)
                .map(|(a, _)| a.clone())
                .collect(),
        })
        .collect();
    let ontology = Ontology::new(terms).map_err(|e| Error::format(path, e.to_string()))?;
    Ok(LoadedOntology { path: path.to_path_buf(), ontology, version: version_of(path, &sha256), sha256, deprecated })
}

/// The terms in file order, duplicates kept (a JSON object may repeat a key, which a map would
/// silently collapse to its last value).
struct RawTerms(Vec<(String, RawTerm)>);

impl<'de> Deserialize<'de> for RawTerms {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawTerms;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of term id → term")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> std::result::Result<RawTerms, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = m.next_entry::<String, RawTerm>()? {
                    out.push(entry);
                }
                Ok(RawTerms(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// The terms by id: an id listed twice, or a parent (an ancestor at distance 1) that is not a
/// term of the file, is an error naming it.
fn checked_terms(path: &Path, listed: Vec<(String, RawTerm)>) -> Result<BTreeMap<String, RawTerm>> {
    let mut raw = BTreeMap::new();
    for (id, term) in listed {
        if raw.contains_key(&id) {
            return Err(Error::format(path, format!("term id '{id}' appears twice")));
        }
        raw.insert(id, term);
    }
    for (id, t) in raw.iter().filter(|(_, t)| !t.deprecated) {
        if let Some(p) = t.ancestors.iter().find(|(a, &d)| d == 1 && !raw.contains_key(*a)).map(|(a, _)| a) {
            return Err(Error::format(
                path,
                format!("term '{id}' has the parent '{p}', which is not a term of this file"),
            ));
        }
    }
    Ok(raw)
}

fn version_of(path: &Path, sha256: &str) -> String {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let stem = name.trim_end_matches(".zst").trim_end_matches(".json");
    match stem.split_once("-ontology-") {
        Some((_, v)) if !v.is_empty() => v.to_string(),
        _ => format!("sha256:{}", &sha256[..12]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOY: &str = r#"{
      "CL:0000000": {"label": "cell", "ancestors": {}, "deprecated": false},
      "CL:0000084": {"label": "T cell", "synonyms": ["T lymphocyte"], "ancestors": {"CL:0000000": 1}, "deprecated": false},
      "CL:0000625": {"label": "CD8-positive, alpha-beta T cell", "ancestors": {"CL:0000084": 1, "CL:0000000": 2, "CL:9999999": 1}, "deprecated": false},
      "CL:9999999": {"label": "obsolete thing", "ancestors": {}, "deprecated": true}
    }"#;

    #[test]
    fn a_zstd_ontology_loads_without_deprecated_terms_and_with_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("CL-ontology-v2026-03-26.json.zst");
        std::fs::write(&path, zstd::encode_all(TOY.as_bytes(), 3).unwrap()).unwrap();
        let o = load(&path).unwrap();
        assert_eq!(o.version, "v2026-03-26");
        assert_eq!(o.deprecated, 1);
        assert_eq!(o.ontology.len(), 3);
        let cd8 = o.ontology.find("CL:0000625").unwrap();
        assert_eq!(o.ontology.parents(cd8), [o.ontology.find("CL:0000084").unwrap()]);
        let plain = dir.path().join("custom.json");
        std::fs::write(&plain, TOY).unwrap();
        assert!(load(&plain).unwrap().version.starts_with("sha256:"));
    }

    #[test]
    fn a_file_that_does_not_parse_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in [
            ("broken.json", b"{\"CL:1\": {\"label\": 3}}".to_vec()),
            ("bad.json.zst", vec![0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3]),
            ("twice.json", br#"{"a": {"label": "a"}, "a": {"label": "b"}}"#.to_vec()),
            ("orphan.json", br#"{"a": {"label": "a", "ancestors": {"zz": 1}}}"#.to_vec()),
            (
                "dangling.json",
                br#"{"a": {"label": "a", "ancestors": {"b": 1}}, "b": {"label": "b", "ancestors": {"a": 1}}}"#.to_vec(),
            ),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let e = load(&path).unwrap_err().to_string();
            assert!(e.contains(name), "{e}");
            match name {
                "twice.json" => assert!(e.contains("term id 'a' appears twice"), "{e}"),
                "orphan.json" => assert!(e.contains("parent 'zz', which is not a term of this file"), "{e}"),
                _ => {}
            }
        }
    }
}
