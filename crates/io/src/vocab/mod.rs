//! Gene vocabularies: token ids, per-gene normalization medians and symbol → Ensembl mapping.
//!
//! A vocabulary is a directory of three TSV files in Geneformer's layout
//! (`token_dictionary.tsv`, `gene_median_dictionary.tsv`, optional `gene_name_id.tsv`); the
//! built-in `geneformer-v1` is compiled into the binary. `vocab build` writes new ones.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};
use corrflow_fs::atomic::write_atomic;

pub const TOKEN_FILE: &str = "token_dictionary.tsv";
pub const MEDIAN_FILE: &str = "gene_median_dictionary.tsv";
pub const SYMBOL_FILE: &str = "gene_name_id.tsv";

pub const PAD: &str = "<pad>";
pub const MASK: &str = "<mask>";
pub const CLS: &str = "<cls>";
pub const EOS: &str = "<eos>";

/// Name of the vocabulary compiled into the binary.
pub const BUILTIN: &str = "geneformer-v1";

mod pickles;

mod builtin {
    pub const TOKENS: &str = include_str!("../../../../vocab/geneformer-v1/token_dictionary.tsv");
    pub const MEDIANS: &str = include_str!("../../../../vocab/geneformer-v1/gene_median_dictionary.tsv");
    pub const SYMBOLS: &str = include_str!("../../../../vocab/geneformer-v1/gene_name_id.tsv");
    /// `compute_hash` of the tables above, known in advance: formatting and hashing them took a
    /// third of every command's start-up (a test checks it against the tables).
    pub const HASH: &str = "3b450eb1fd239b8c3bfd32fe90ce4913ab2940aa5c0fa042d18258e850e54a02";
}

/// A gene vocabulary: tokens, medians and special tokens.
#[derive(Clone, Debug)]
pub struct Vocabulary {
    name: String,
    // Names borrow the tables compiled into the binary for the built-in vocabulary: building
    // and freeing ~130,000 strings was most of its load time.
    tokens: Vec<Name>,
    token_of: FxHashMap<Name, u32>,
    /// Median per token id; `None` for special tokens and genes without a median.
    medians: Vec<Option<f64>>,
    symbols: FxHashMap<Name, Name>,
    pub pad: u32,
    pub mask: u32,
    pub cls: Option<u32>,
    pub eos: Option<u32>,
    hash: String,
}

/// A token, gene or symbol name: borrowed from the built-in tables or owned.
type Name = Cow<'static, str>;
/// Token names by id, token ids by name, and medians by token id.
type TokenTables = (Vec<Name>, FxHashMap<Name, u32>, Vec<Option<f64>>);

/// How a file's gene id was matched to the vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeneMatch {
    Exact(u32),
    /// Matched after removing an Ensembl version suffix (`ENSG…​.5`).
    Unversioned(u32),
    /// Matched through the symbol table.
    Symbol(u32),
}

impl GeneMatch {
    pub fn token(self) -> u32 {
        match self {
            Self::Exact(t) | Self::Unversioned(t) | Self::Symbol(t) => t,
        }
    }
}

impl Vocabulary {
    /// Resolves `spec`: the name of a built-in vocabulary or a vocabulary directory.
    pub fn resolve(spec: &str) -> Result<Self> {
        if spec == BUILTIN {
            let mut vocab =
                Self::parse(BUILTIN, builtin::TOKENS, builtin::MEDIANS, Some(builtin::SYMBOLS), Cow::Borrowed, false)?;
            vocab.hash = builtin::HASH.to_string();
            return Ok(vocab);
        }
        let dir = Path::new(spec);
        if dir.is_dir() && !dir.join(TOKEN_FILE).exists() && pickles::has_pickles(dir) {
            let (tokens, medians, names) = pickles::tables_from_pickles(dir)?;
            let name = dir.file_name().map_or_else(|| spec.to_string(), |n| n.to_string_lossy().into_owned());
            return Self::from_tables(&name, &tokens, &medians, names.as_deref());
        }
        if dir.is_dir() {
            return Self::load_dir(dir);
        }
        Err(Error::Vocab {
            name: spec.to_string(),
            msg: format!(
                "not a built-in vocabulary ({BUILTIN}) nor a vocabulary directory (TSV tables, or Geneformer's pickled dictionaries)"
            ),
        })
    }

    /// Loads a vocabulary directory written by `vocab build` (or Geneformer's TSV layout).
    pub fn load_dir(dir: &Path) -> Result<Self> {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).at(dir.join(f));
        let tokens = read(TOKEN_FILE)?;
        let medians = read(MEDIAN_FILE)?;
        let symbols = if dir.join(SYMBOL_FILE).exists() { Some(read(SYMBOL_FILE)?) } else { None };
        let name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        Self::from_tables(&name, &tokens, &medians, symbols.as_deref())
    }

    /// Builds a vocabulary from the text of its three tables.
    pub fn from_tables(name: &str, tokens: &str, medians: &str, symbols: Option<&str>) -> Result<Self> {
        Self::parse(name, tokens, medians, symbols, |s| Cow::Owned(s.to_string()), true)
    }

    /// [`Self::from_tables`], with `name_of` turning a slice of the tables into a stored name;
    /// the content hash is left empty unless `hash`.
    fn parse<'a>(
        name: &str,
        tokens: &'a str,
        medians: &'a str,
        symbols: Option<&'a str>,
        name_of: impl Fn(&'a str) -> Name + Sync,
        hash: bool,
    ) -> Result<Self> {
        let err = |msg: String| Error::Vocab { name: name.to_string(), msg };
        // The symbol table is independent of the other two and about a third of the work: it is
        // parsed on a second thread meanwhile.
        let (symbol_map, tables) = std::thread::scope(|s| {
            let symbols = s.spawn(|| symbols.map_or_else(|| Ok(FxHashMap::default()), |t| parse_symbols(t, &name_of)));
            let tables = Self::parse_tokens_and_medians(tokens, medians, &name_of).map_err(err);
            // ok: parse_symbols has no panicking path.
            (symbols.join().expect("symbol parser panicked").map_err(err), tables)
        });
        let ((tokens, token_of, med), symbol_map) = (tables?, symbol_map?);

        let special = |t: &str| token_of.get(t).copied();
        let pad = special(PAD).ok_or_else(|| err(format!("{TOKEN_FILE} has no {PAD} token")))?;
        let mask = special(MASK).ok_or_else(|| err(format!("{TOKEN_FILE} has no {MASK} token")))?;
        let (cls, eos) = (special(CLS), special(EOS));
        let mut vocab = Self {
            name: name.to_string(),
            tokens,
            token_of,
            medians: med,
            symbols: symbol_map,
            pad,
            mask,
            cls,
            eos,
            hash: String::new(),
        };
        if vocab.n_genes() == 0 {
            return Err(err("no gene has both a token and a median".into()));
        }
        if hash {
            vocab.hash = vocab.compute_hash();
        }
        Ok(vocab)
    }

    /// The token table (names by id, ids by name) and the medians by token id.
    fn parse_tokens_and_medians<'a>(
        tokens: &'a str,
        medians: &'a str,
        name_of: &impl Fn(&'a str) -> Name,
    ) -> Result<TokenTables, String> {
        let token_rows = parse_tsv(tokens, TOKEN_FILE)?;
        let n_rows = token_rows.len();
        let mut by_id: Vec<Option<Name>> = Vec::new();
        let mut token_of = FxHashMap::with_capacity_and_hasher(token_rows.len(), Default::default());
        for (line, (token, id)) in token_rows {
            if token.is_empty() {
                return Err(format!("{TOKEN_FILE} line {line}: empty token"));
            }
            let id: u32 = id.parse().map_err(|_| format!("{TOKEN_FILE} line {line}: id '{id}' is not an integer"))?;
            // Ids are 0..rows, so a larger one is refused before it sizes the table.
            if id as usize >= n_rows {
                return Err(format!(
                    "{TOKEN_FILE} line {line}: id {id} is out of range: {n_rows} tokens take the ids 0..{}",
                    n_rows - 1
                ));
            }
            if by_id.len() <= id as usize {
                by_id.resize(id as usize + 1, None);
            }
            if by_id[id as usize].is_some() || token_of.insert(name_of(token), id).is_some() {
                return Err(format!("{TOKEN_FILE} line {line}: duplicate token '{token}' or id {id}"));
            }
            by_id[id as usize] = Some(name_of(token));
        }
        let tokens: Vec<Name> = by_id
            .into_iter()
            .enumerate()
            .map(|(id, t)| t.ok_or_else(|| format!("{TOKEN_FILE}: token ids are not contiguous (no id {id})")))
            .collect::<Result<_, String>>()?;

        let mut med = vec![None; tokens.len()];
        for (line, (gene, value)) in parse_tsv(medians, MEDIAN_FILE)? {
            let value: f64 =
                value.parse().map_err(|_| format!("{MEDIAN_FILE} line {line}: median '{value}' is not a number"))?;
            if !(value.is_finite() && value > 0.0) {
                return Err(format!("{MEDIAN_FILE} line {line}: median of {gene} must be finite and > 0, got {value}"));
            }
            // Medians of genes missing from the token dictionary cannot be used; skip them.
            if let Some(&id) = token_of.get(gene) {
                med[id as usize] = Some(value);
            }
        }
        Ok((tokens, token_of, med))
    }

    /// The same vocabulary with `<cls>` and `<eos>` appended when missing (Geneformer V2 layout).
    pub fn with_v2_specials(mut self) -> Self {
        for special in [CLS, EOS] {
            if !self.token_of.contains_key(special) {
                let id = self.tokens.len() as u32;
                self.tokens.push(Cow::Borrowed(special));
                self.token_of.insert(Cow::Borrowed(special), id);
                self.medians.push(None);
            }
        }
        self.cls = self.token_of.get(CLS).copied();
        self.eos = self.token_of.get(EOS).copied();
        self.hash = self.compute_hash();
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of tokens, special tokens included (the model's vocabulary size).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Number of genes that can be tokenized (have a median).
    pub fn n_genes(&self) -> usize {
        self.medians.iter().filter(|m| m.is_some()).count()
    }

    /// Content hash (sha256 of the canonical token and median tables).
    pub fn hash(&self) -> &str {
        &self.hash
    }

    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(|t| t.as_ref())
    }

    /// Median of a gene token; `None` for special tokens.
    #[inline]
    pub fn median(&self, id: u32) -> Option<f64> {
        self.medians.get(id as usize).copied().flatten()
    }

    /// Per-token medians, indexed by token id (`None` for specials).
    pub fn medians(&self) -> &[Option<f64>] {
        &self.medians
    }

    /// Whether `id` is a gene token (not a special token).
    pub fn is_gene(&self, id: u32) -> bool {
        self.median(id).is_some()
    }

    /// Finds a gene by Ensembl id (with or without version suffix) or by symbol.
    pub fn lookup(&self, gene: &str) -> Option<GeneMatch> {
        let gene = gene.trim();
        if let Some(&t) = self.token_of.get(gene) {
            return self.is_gene(t).then_some(GeneMatch::Exact(t));
        }
        if gene.starts_with("ENS") {
            if let Some((base, version)) = gene.rsplit_once('.') {
                if version.bytes().all(|b| b.is_ascii_digit()) {
                    if let Some(&t) = self.token_of.get(base) {
                        return self.is_gene(t).then_some(GeneMatch::Unversioned(t));
                    }
                }
            }
        }
        let ensembl = self.symbols.get(gene)?;
        let &t = self.token_of.get(ensembl)?;
        self.is_gene(t).then_some(GeneMatch::Symbol(t))
    }

    /// A display name per gene token: its symbol where the symbol table has one.
    pub fn symbols_by_token(&self) -> HashMap<u32, String> {
        let mut pairs: Vec<(&Name, &Name)> = self.symbols.iter().collect();
        pairs.sort();
        pairs.into_iter().filter_map(|(s, g)| self.lookup(g).map(|m| (m.token(), s.to_string()))).collect()
    }

    /// The token table in its TSV layout.
    fn token_table(&self) -> String {
        let mut out = String::from("token\tid\n");
        for (id, t) in self.tokens.iter().enumerate() {
            out.push_str(t);
            let _ = writeln!(out, "\t{id}");
        }
        out
    }

    /// The median table in its TSV layout (gene tokens only).
    fn median_table(&self) -> String {
        let mut out = String::from("ensembl_id\tmedian\n");
        for (id, m) in self.medians.iter().enumerate() {
            if let Some(m) = m {
                out.push_str(&self.tokens[id]);
                let _ = writeln!(out, "\t{m:?}");
            }
        }
        out
    }

    /// The symbol table in its TSV layout, sorted.
    fn symbol_table(&self) -> String {
        let mut out = String::from("symbol\tensembl_id\n");
        let mut pairs: Vec<(&str, &str)> = self.symbols.iter().map(|(s, g)| (s.as_ref(), g.as_ref())).collect();
        // Symbols are unique keys: ordering by them alone is a total order.
        pairs.sort_unstable_by_key(|p| p.0);
        for (s, g) in pairs {
            out.extend([s, "\t", g, "\n"]);
        }
        out
    }

    /// Writes the vocabulary as a whole directory: staged and renamed into place, so `dir`
    /// never holds some of its files (a full disk leaves the old directory or none).
    pub fn publish_dir(&self, dir: &Path) -> Result<PathBuf> {
        corrflow_fs::atomic::publish_dir(dir, |stage| self.write_dir(stage))?;
        Ok(dir.to_path_buf())
    }

    /// Writes the vocabulary as a directory that [`Vocabulary::load_dir`] reads back: each file
    /// atomically, the set not (for staging directories; see [`Self::publish_dir`]).
    pub fn write_dir(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).at(dir)?;
        write_atomic(&dir.join(TOKEN_FILE), self.token_table().as_bytes())?;
        write_atomic(&dir.join(MEDIAN_FILE), self.median_table().as_bytes())?;
        if !self.symbols.is_empty() {
            write_atomic(&dir.join(SYMBOL_FILE), self.symbol_table().as_bytes())?;
        }
        Ok(dir.to_path_buf())
    }

    /// Writes the vocabulary as Geneformer's pickled dictionaries into `dir` (which
    /// [`Vocabulary::resolve`] reads back); returns the files written.
    pub fn write_pickles(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        pickles::write_pickles(self, dir)
    }

    fn compute_hash(&self) -> String {
        // The symbol table is not part of the identity (it only widens lookups).
        let mut h = Sha256::new();
        h.update(self.token_table().as_bytes());
        h.update(self.median_table().as_bytes());
        hex::encode(h.finalize())
    }
}

/// The symbol → gene table.
fn parse_symbols<'a>(text: &'a str, name_of: &impl Fn(&'a str) -> Name) -> Result<FxHashMap<Name, Name>, String> {
    // About 24 bytes per row.
    let mut map = FxHashMap::with_capacity_and_hasher(text.len() / 24, Default::default());
    // Geneformer's table has a row with an empty symbol; such rows map nothing.
    for (_, (symbol, gene)) in parse_tsv(text, SYMBOL_FILE)?.into_iter().filter(|r| !r.1 .0.is_empty()) {
        map.entry(name_of(symbol)).or_insert_with(|| name_of(gene));
    }
    Ok(map)
}

/// Parses a two-column TSV with a header line into (1-based line number, (col0, col1)).
fn parse_tsv<'a>(text: &'a str, file: &str) -> Result<Vec<(usize, (&'a str, &'a str))>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.is_empty() {
            continue;
        }
        let mut cols = line.split('\t');
        match (cols.next(), cols.next()) {
            (Some(a), Some(b)) => rows.push((i + 1, (a, b.trim_end_matches('\r')))),
            _ => return Err(format!("{file} line {}: expected two tab-separated columns", i + 1)),
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_geneformer_v1_has_the_published_sizes() {
        let v = Vocabulary::resolve(BUILTIN).unwrap();
        assert_eq!(v.len(), 25_426);
        assert_eq!(v.n_genes(), 25_424);
        assert_eq!((v.pad, v.mask), (0, 1));
        assert_eq!((v.cls, v.eos), (None, None));
    }

    #[test]
    fn builtin_hash_is_the_hash_of_its_tables() {
        let v = Vocabulary::resolve(BUILTIN).unwrap();
        assert_eq!(v.hash(), v.compute_hash());
        let parsed = Vocabulary::from_tables("x", builtin::TOKENS, builtin::MEDIANS, None).unwrap();
        assert_eq!(parsed.hash(), builtin::HASH);
    }

    #[test]
    fn lookup_by_ensembl_version_and_symbol() {
        let v = Vocabulary::resolve(BUILTIN).unwrap();
        let t = v.lookup("ENSG00000000003").unwrap();
        assert_eq!(t, GeneMatch::Exact(2));
        assert_eq!(v.lookup("ENSG00000000003.15"), Some(GeneMatch::Unversioned(2)));
        let cd3e = v.lookup("CD3E").expect("CD3E is in gene_name_id.tsv");
        assert!(matches!(cd3e, GeneMatch::Symbol(_)));
        assert_eq!(v.lookup("<pad>"), None, "special tokens are not genes");
        assert_eq!(v.lookup("not-a-gene"), None);
    }

    #[test]
    fn v2_specials_are_appended_and_change_the_hash() {
        let v1 = Vocabulary::resolve(BUILTIN).unwrap();
        let v2 = v1.clone().with_v2_specials();
        assert_eq!(v2.cls, Some(25_426));
        assert_eq!(v2.eos, Some(25_427));
        assert_ne!(v1.hash(), v2.hash());
    }

    #[test]
    fn written_directory_round_trips_with_the_same_hash() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vocabulary::resolve(BUILTIN).unwrap();
        v.write_dir(dir.path()).unwrap();
        let back = Vocabulary::load_dir(dir.path()).unwrap();
        assert_eq!(back.hash(), v.hash());
        assert_eq!(back.lookup("CD3E"), v.lookup("CD3E"));
    }

    #[test]
    fn rejects_non_positive_medians() {
        let e =
            Vocabulary::from_tables("t", "token\tid\n<pad>\t0\n<mask>\t1\nG\t2\n", "g\tm\nG\t0\n", None).unwrap_err();
        assert!(e.to_string().contains("must be finite and > 0"), "{e}");
    }

    #[test]
    fn rejects_token_ids_past_the_table_before_sizing_it() {
        // An id of 2^32 - 1 once asked for a table of 2^32 entries (~100 GB) and aborted.
        for id in ["3", "4294967295"] {
            let tokens = format!("token\tid\n<pad>\t0\n<mask>\t1\nG\t{id}\n");
            let e = Vocabulary::from_tables("t", &tokens, "g\tm\nG\t1\n", None).unwrap_err().to_string();
            assert!(e.contains(&format!("line 4: id {id} is out of range: 3 tokens take the ids 0..2")), "{e}");
        }
    }
}
