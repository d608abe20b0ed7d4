//! [`Corpus`]: an existing corpus directory, opened and checked once — its info, vocabulary
//! and atlases — so no other module parses `corpus.json` or finds the vocabulary by itself.

use std::path::{Path, PathBuf};

use super::{atlas_dir, list_atlases, CorpusIndex, CorpusInfo, CORPUS_INFO};
use crate::error::{Error, IoContext, Result};
use crate::vocab::Vocabulary;

/// Name of the corpus' vocabulary directory.
pub const VOCAB_DIR: &str = "vocab";

/// A corpus on disk: where it is, what its cells are tokenized with.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub dir: PathBuf,
    pub info: CorpusInfo,
    /// The vocabulary (with the V2 specials when the layout has them), checked against the info.
    pub vocab: Vocabulary,
}

impl Corpus {
    /// Opens `dir`: reads `corpus.json` and the vocabulary, and checks they belong together.
    pub fn open(dir: &Path) -> Result<Self> {
        let info =
            read_info(dir)?.ok_or_else(|| Error::io(dir.join(CORPUS_INFO), std::io::ErrorKind::NotFound.into()))?;
        let vocab_dir = dir.join(VOCAB_DIR);
        let vocab = Vocabulary::load_dir(&vocab_dir)?;
        let vocab = if info.layout.cls.is_some() { vocab.with_v2_specials() } else { vocab };
        if vocab.hash() != info.vocab_hash {
            return Err(Error::format(vocab_dir, "vocabulary does not match corpus.json (hash differs)"));
        }
        Ok(Self { dir: dir.to_path_buf(), info, vocab })
    }

    /// Names of the finished atlases, sorted.
    pub fn atlases(&self) -> Vec<String> {
        list_atlases(&self.dir)
    }

    pub fn atlas_dir(&self, atlas: &str) -> PathBuf {
        atlas_dir(&self.dir, atlas)
    }

    /// The atlases a command works on (all finished ones when `atlases` is empty), sorted and
    /// deduplicated, with their directories.
    pub fn resolve_atlases(&self, atlases: &[String]) -> Result<(Vec<String>, Vec<PathBuf>)> {
        let mut names = if atlases.is_empty() { self.atlases() } else { atlases.to_vec() };
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Err(Error::format(&self.dir, "no finished atlas in this corpus"));
        }
        let dirs = names.iter().map(|n| self.atlas_dir(n)).collect();
        Ok((names, dirs))
    }

    /// The shards of `atlases` (empty: all) in cell-key order.
    pub fn index(&self, atlases: &[String]) -> Result<CorpusIndex> {
        CorpusIndex::open(&self.dir, atlases)
    }
}

/// `corpus.json` of `dir`, if the corpus exists yet.
pub fn read_info(dir: &Path) -> Result<Option<CorpusInfo>> {
    let path = dir.join(CORPUS_INFO);
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).at(&path)?;
    let info = serde_json::from_str(&text).map_err(|e| Error::format(&path, format!("invalid corpus info: {e}")))?;
    Ok(Some(info))
}

/// The corpus an atlas directory (`CORPUS/atlases/NAME`) belongs to.
pub fn corpus_of_atlas(atlas_dir: &Path) -> Result<PathBuf> {
    atlas_dir
        .parent()
        .and_then(Path::parent)
        .filter(|c| c.join(CORPUS_INFO).is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| Error::format(atlas_dir, "not an atlas of a corpus (no corpus.json two levels up)"))
}
