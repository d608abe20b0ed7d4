//! The one check every writer makes before any work: no output is one of its inputs or another
//! of its outputs. Files are compared by what they are, not by how they are spelled: an existing
//! path by device and inode (so symlinks, `./x` and hard links all count), one that does not
//! exist yet by its canonical directory and file name. An output directory that a command
//! replaces whole must not hold one of its inputs either.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What a path is on disk, for comparing spellings.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Identity {
    /// An existing file or directory: device and inode.
    Inode(u64, u64),
    /// A path that does not exist yet: its canonical parent joined with its file name (its
    /// spelling when even the parent is missing).
    Planned(PathBuf),
}

fn identity(path: &Path) -> Identity {
    if let Ok(m) = std::fs::metadata(path) {
        return Identity::Inode(m.dev(), m.ino());
    }
    Identity::Planned(canonical(path))
}

/// `path` with symlinks resolved: itself when it exists, else its parent's canonical form joined
/// with its name (a parent that does not exist either: the path as spelled, made absolute).
fn canonical(path: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(path) {
        return c;
    }
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => (if p.as_os_str().is_empty() { Path::new(".") } else { p }, n),
        _ => return std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    };
    match std::fs::canonicalize(parent) {
        Ok(p) => p.join(name),
        Err(_) => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

struct Named {
    flag: String,
    path: PathBuf,
}

fn named(flag: impl Into<String>, path: impl AsRef<Path>) -> Named {
    Named { flag: flag.into(), path: path.as_ref().to_path_buf() }
}

/// The inputs and outputs of one command, checked by [`Overlap::check`] before it does any work.
///
/// ```no_run
/// # use std::path::Path;
/// # use corrflow_fs::paths::Overlap;
/// Overlap::new()
///     .input("--input", Path::new("cells.h5ad"))
///     .output("--out", Path::new("cells.parquet"))
///     .check()?;
/// # Ok::<(), corrflow_io::Error>(())
/// ```
#[derive(Default)]
pub struct Overlap {
    inputs: Vec<Named>,
    outputs: Vec<Named>,
    /// Outputs replaced whole (a directory set aside and published anew): none of the inputs
    /// may lie inside them.
    replaced: Vec<Named>,
    /// Outputs that must be directories (or not exist yet).
    dirs: Vec<Named>,
}

impl Overlap {
    pub fn new() -> Self {
        Self::default()
    }

    /// A file or directory the command reads.
    pub fn input(mut self, flag: impl Into<String>, path: impl AsRef<Path>) -> Self {
        self.inputs.push(named(flag, path));
        self
    }

    /// Each of `paths` is an input of `flag`.
    pub fn inputs(mut self, flag: &str, paths: &[PathBuf]) -> Self {
        self.inputs.extend(paths.iter().map(|p| named(flag, p)));
        self
    }

    /// An input that may be absent (an optional flag).
    pub fn input_opt(self, flag: &str, path: Option<&Path>) -> Self {
        match path {
            Some(p) => self.input(flag, p),
            None => self,
        }
    }

    /// A file the command writes.
    pub fn output(mut self, flag: impl Into<String>, path: impl AsRef<Path>) -> Self {
        self.outputs.push(named(flag, path));
        self
    }

    /// An output that may be absent (an optional flag).
    pub fn output_opt(self, flag: &str, path: Option<&Path>) -> Self {
        match path {
            Some(p) => self.output(flag, p),
            None => self,
        }
    }

    /// A directory the command writes into (created when missing): an existing file there is
    /// refused.
    pub fn output_dir(mut self, flag: &str, path: impl AsRef<Path>) -> Self {
        self.dirs.push(named(flag, &path));
        self.output(flag, path)
    }

    /// A directory the command replaces whole: it must not hold any of the inputs.
    pub fn replaced_dir(mut self, flag: &str, path: impl AsRef<Path>) -> Self {
        self.replaced.push(named(flag, &path));
        self.output_dir(flag, path)
    }

    /// `Err(Usage)` naming both flags and the path when an output is an input or another
    /// output, an output is an existing file inside an input directory, an input lies inside a
    /// directory that is replaced whole, or an output directory is a file.
    pub fn check(&self) -> Result<()> {
        let ins: Vec<Identity> = self.inputs.iter().map(|n| identity(&n.path)).collect();
        let outs: Vec<Identity> = self.outputs.iter().map(|n| identity(&n.path)).collect();
        for (o, oid) in self.outputs.iter().zip(&outs) {
            if let Some((i, _)) = self.inputs.iter().zip(&ins).find(|(_, iid)| *iid == oid) {
                return Err(same_file(o, i, "refusing to write over an input"));
            }
        }
        // An existing file inside an input directory is part of that input (a shard, a
        // checkpoint's model.bin): writing it would change the input.
        for (o, oid) in self.outputs.iter().zip(&outs) {
            if !matches!(oid, Identity::Inode(..)) || o.path.is_dir() {
                continue;
            }
            let file = canonical(&o.path);
            if let Some(i) = self.inputs.iter().find(|i| i.path.is_dir() && file.starts_with(canonical(&i.path))) {
                return Err(Error::Usage(format!(
                    "{} {} is a file inside the directory of {} {}: refusing to write over part of an input; choose a path outside it",
                    o.flag,
                    o.path.display(),
                    i.flag,
                    i.path.display()
                )));
            }
        }
        for (a, (o, oid)) in self.outputs.iter().zip(&outs).enumerate() {
            if let Some((p, _)) = self.outputs.iter().zip(&outs).skip(a + 1).find(|(_, pid)| *pid == oid) {
                return Err(same_file(p, o, "each output needs a path of its own"));
            }
        }
        for d in &self.dirs {
            if d.path.exists() && !d.path.is_dir() {
                return Err(Error::Usage(format!(
                    "{} {}: this is an existing file, and {} is a directory to write into; choose a new path or an existing directory",
                    d.flag,
                    d.path.display(),
                    d.flag
                )));
            }
        }
        for r in &self.replaced {
            let dir = canonical(&r.path);
            for i in &self.inputs {
                if i.path.exists() && canonical(&i.path).starts_with(&dir) {
                    return Err(Error::Usage(format!(
                        "{} {} would replace the directory that holds {} {}: refusing to remove an input; choose another {}",
                        r.flag,
                        r.path.display(),
                        i.flag,
                        i.path.display(),
                        r.flag
                    )));
                }
            }
        }
        Ok(())
    }
}

fn same_file(out: &Named, other: &Named, why: &str) -> Error {
    let spelled = if out.path == other.path {
        format!("both {}", out.path.display())
    } else {
        format!("{} and {}", out.path.display(), other.path.display())
    };
    let what = if other.path.is_dir() { "directory" } else { "file" };
    Error::Usage(format!(
        "{} and {} are the same {what} ({spelled}): {why}; choose another {}",
        out.flag, other.flag, out.flag
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(o: &Overlap) -> String {
        o.check().unwrap_err().to_string()
    }

    #[test]
    fn the_same_file_by_any_spelling_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("cells.h5ad");
        std::fs::write(&input, b"x").unwrap();
        let link = dir.path().join("link.h5ad");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = dir.path().join("hard.h5ad");
        std::fs::hard_link(&input, &hard).unwrap();
        let dotted = dir.path().join(".").join("cells.h5ad");
        for out in [&input, &link, &hard, &dotted] {
            let o = Overlap::new().input("--input", &input).output("--out", out);
            let e = err(&o);
            assert!(e.contains("--out and --input are the same file"), "{e}");
            assert!(e.contains("cells.h5ad"), "{e}");
        }
        let fresh = dir.path().join("cells.parquet");
        Overlap::new().input("--input", &input).output("--out", &fresh).check().unwrap();
    }

    #[test]
    fn two_outputs_that_do_not_exist_yet_are_compared_by_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("s.parquet");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let b = sub.join("..").join("s.parquet");
        let e = err(&Overlap::new().output("--out", &a).output("--genes-out", &b));
        assert!(e.contains("--genes-out and --out are the same file"), "{e}");
        let c = dir.path().join("g.parquet");
        Overlap::new().output("--out", &a).output("--genes-out", &c).check().unwrap();
    }

    #[test]
    fn a_replaced_directory_holding_an_input_and_a_file_for_a_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("cells.h5ad");
        std::fs::write(&input, b"x").unwrap();
        let e = err(&Overlap::new().inputs("FILE", std::slice::from_ref(&input)).replaced_dir("--out", dir.path()));
        assert!(e.contains("would replace the directory that holds FILE"), "{e}");
        let e = err(&Overlap::new().output_dir("--out", &input));
        assert!(e.contains("existing file"), "{e}");
        Overlap::new().input("--corpus", dir.path()).output_dir("--out", dir.path().join("run")).check().unwrap();
    }

    #[test]
    fn an_existing_file_inside_an_input_directory_is_refused_a_new_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("ckpt");
        std::fs::create_dir(&ckpt).unwrap();
        std::fs::write(ckpt.join("model.bin"), b"x").unwrap();
        let e = err(&Overlap::new().input("--checkpoint", &ckpt).output("--out", ckpt.join(".").join("model.bin")));
        assert!(e.contains("--out") && e.contains("inside the directory of --checkpoint"), "{e}");
        Overlap::new().input("--checkpoint", &ckpt).output("--out", ckpt.join("emb.parquet")).check().unwrap();
        Overlap::new().input("--checkpoint", &ckpt).output("--out", dir.path().join("model.bin")).check().unwrap();
    }
}
