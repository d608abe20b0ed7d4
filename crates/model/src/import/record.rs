//! The sha256 record `export hf-model` writes into a model directory (`corrflow_sha256.txt`, in
//! `sha256sum`'s format, so `sha256sum -c corrflow_sha256.txt` run in the directory checks it
//! too; transformers ignores the file), and its check by `import hf`: a weight damaged or edited
//! after the export, even one that stays a finite number, is refused. A directory without the
//! record (a Hugging Face download) is imported unchecked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use corrflow_fs::hash::sha256_file;
use corrflow_io::error::{Error, IoContext, Result};
use sha2::{Digest, Sha256};

/// The record's file name, in the model directory.
pub const RECORD_FILE: &str = "corrflow_sha256.txt";

/// Hashes every file under `dir` (its subdirectories included) and writes the record into it;
/// returns the number of files recorded.
pub fn write(dir: &Path) -> Result<usize> {
    let mut files = Vec::new();
    walk(dir, "", &mut files)?;
    files.sort();
    let mut text = String::new();
    for name in &files {
        text.push_str(&format!("{}  {name}\n", sha256_file(&dir.join(name))?));
    }
    let path = dir.join(RECORD_FILE);
    std::fs::write(&path, text).at(&path)?;
    Ok(files.len())
}

/// The files under `dir`, as `/`-separated paths relative to the top, the record excepted.
fn walk(dir: &Path, prefix: &str, files: &mut Vec<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type().at(entry.path())?.is_dir() {
            walk(&entry.path(), &format!("{name}/"), files)?;
        } else if name != RECORD_FILE {
            files.push(name);
        }
    }
    Ok(())
}

/// A model directory's record, and which of its files have been checked.
pub struct Record {
    dir: PathBuf,
    sums: BTreeMap<String, String>,
    checked: BTreeSet<String>,
}

impl Record {
    /// The record of `dir`; `None` when it has none.
    pub fn open(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(RECORD_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let mut sums = BTreeMap::new();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let bad = |what: &str| {
                Error::format(
                    &path,
                    format!("line {}: {what}; each line must be `<sha256>  <file>` (delete the record to import the directory unchecked)", i + 1),
                )
            };
            let (sum, name) = line.split_once(' ').ok_or_else(|| bad("no file name"))?;
            // sha256sum writes "  name" (text mode) or " *name" (binary mode).
            let name = name.strip_prefix(' ').or_else(|| name.strip_prefix('*')).unwrap_or(name);
            if sum.len() != 64 || !sum.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
                return Err(bad(&format!("'{sum}' is not a sha256 (64 lowercase hex digits)")));
            }
            let inside = Path::new(name).components().all(|c| matches!(c, Component::Normal(_)));
            if name.is_empty() || !inside {
                return Err(bad(&format!("'{name}' is not a path inside the model directory")));
            }
            if sums.insert(name.to_string(), sum.to_string()).is_some() {
                return Err(bad(&format!("'{name}' is listed twice")));
            }
        }
        Ok(Some(Self { dir: dir.to_path_buf(), sums, checked: BTreeSet::new() }))
    }

    /// Checks `bytes`, read from the directory's file `name`, against the record, which must
    /// list it.
    pub fn check_bytes(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.compare(name, &hex::encode(Sha256::digest(bytes)))
    }

    /// Checks every listed file not checked yet, from disk; returns how many files were checked
    /// in all.
    pub fn check_rest(&mut self) -> Result<usize> {
        let rest: Vec<String> = self.sums.keys().filter(|n| !self.checked.contains(*n)).cloned().collect();
        for name in rest {
            let path = self.dir.join(&name);
            if !path.exists() {
                return Err(Error::format(
                    &path,
                    format!(
                        "is listed in {RECORD_FILE} but missing: the export is incomplete; export it again, or \
                         delete {RECORD_FILE} to import the directory unchecked"
                    ),
                ));
            }
            let sum = sha256_file(&path)?;
            self.compare(&name, &sum)?;
        }
        Ok(self.checked.len())
    }

    fn compare(&mut self, name: &str, actual: &str) -> Result<()> {
        let path = self.dir.join(name);
        let Some(recorded) = self.sums.get(name) else {
            return Err(Error::format(
                &path,
                format!(
                    "is not listed in {RECORD_FILE}, which lists the files export hf-model wrote: the directory was \
                     changed after the export; export it again, or delete {RECORD_FILE} to import it unchecked"
                ),
            ));
        };
        if actual != recorded.as_str() {
            return Err(Error::format(
                &path,
                format!(
                    "does not match the sha256 export hf-model recorded (damaged or modified since): its sha256 is \
                     {actual}, {RECORD_FILE} records {recorded}; export the model again, or delete {RECORD_FILE} to \
                     import a directory changed on purpose"
                ),
            ));
        }
        self.checked.insert(name.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_directory_checks_and_any_changed_or_missing_file_is_refused_by_name() {
        let d = &std::env::temp_dir().join(format!("corrflow-record-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d.join("vocab")).unwrap();
        std::fs::write(d.join("config.json"), b"{}").unwrap();
        std::fs::write(d.join("vocab/t.tsv"), b"a\t0\n").unwrap();
        assert!(Record::open(d).unwrap().is_none(), "no record: unchecked");
        assert_eq!(write(d).unwrap(), 2);
        let mut r = Record::open(d).unwrap().unwrap();
        r.check_bytes("config.json", b"{}").unwrap();
        assert_eq!(r.check_rest().unwrap(), 2);
        let e = Record::open(d).unwrap().unwrap().check_bytes("config.json", b"{ }").unwrap_err().to_string();
        assert!(
            e.contains("config.json: does not match the sha256") && e.contains(&hex::encode(Sha256::digest(b"{}"))),
            "{e}"
        );
        let e = Record::open(d).unwrap().unwrap().check_bytes("other.bin", b"").unwrap_err().to_string();
        assert!(e.contains("other.bin: is not listed in corrflow_sha256.txt"), "{e}");
        std::fs::remove_file(d.join("vocab/t.tsv")).unwrap();
        let e = Record::open(d).unwrap().unwrap().check_rest().unwrap_err().to_string();
        assert!(e.contains("vocab/t.tsv: is listed in corrflow_sha256.txt but missing"), "{e}");
        let zeros = "0".repeat(64);
        for bad in ["zz  config.json\n".to_string(), format!("{zeros}  ../x\n"), format!("{zeros}  /etc/passwd\n")] {
            std::fs::write(d.join(RECORD_FILE), bad).unwrap();
            let e = Record::open(d).err().unwrap().to_string();
            assert!(e.contains("corrflow_sha256.txt: line 1:"), "{e}");
        }
        std::fs::remove_dir_all(d).unwrap();
    }
}
