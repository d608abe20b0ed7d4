//! Writes that are either complete or absent: data goes to a temporary file in the target's
//! directory, is synced, and is renamed over the target.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// The temporary path a file is written under before being renamed into place: a hidden
/// sibling `.NAME.PID.tmp`. The temporary files of `NAME` left by writers that died (killed
/// before they could remove theirs) are removed first, so a killed run leaves its file only
/// until the next write of the same target.
pub fn temp_path(target: &Path) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    remove_stale_temps(target, &name);
    target.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Removes `.NAME.PID.tmp` siblings of `target` whose process no longer runs.
fn remove_stale_temps(target: &Path, name: &str) {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = format!(".{name}.");
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = file.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tmp")) else { continue };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = pid != std::process::id() as i32
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Renames a finished temporary file into place and syncs the directory entry.
pub fn commit(tmp: &Path, target: &Path) -> Result<()> {
    std::fs::rename(tmp, target).at(target)?;
    if let Some(dir) = target.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Checks, before any work, that `target` can be written: its directory exists and a file can be
/// created there (the temporary file, created and removed). A command that would fail only when
/// it writes its result fails at once instead.
pub fn check_writable(target: &Path) -> Result<()> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::Usage(format!(
            "cannot write {}: the directory {} does not exist",
            target.display(),
            dir.display()
        )));
    }
    let tmp = temp_path(target);
    File::create(&tmp).at(target)?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

/// `dir/.NAME.suffix` for `dir/NAME`: where a directory is staged (or set aside) before it is
/// published by rename.
pub fn hidden_sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{suffix}"))
}

/// Publishes a directory as a whole: `fill` writes it into a fresh staging sibling
/// (`.NAME.partial`), which then replaces `target` by rename (an existing target is set aside as
/// `.NAME.old` first and removed after), so `target` is always either the old or the complete
/// new directory. A failed `fill` leaves `target` untouched and removes the staging directory.
/// `fill` returns the caller's own error type, which takes this crate's over.
pub fn publish_dir<T, E: From<Error>>(target: &Path, fill: impl FnOnce(&Path) -> Result<T, E>) -> Result<T, E> {
    let stage = hidden_sibling(target, "partial");
    if stage.exists() {
        std::fs::remove_dir_all(&stage).at(&stage)?;
    }
    std::fs::create_dir_all(&stage).at(&stage)?;
    let value = match fill(&stage) {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&stage);
            return Err(e);
        }
    };
    let old = hidden_sibling(target, "old");
    if old.exists() {
        std::fs::remove_dir_all(&old).at(&old)?;
    }
    if target.exists() {
        std::fs::rename(target, &old).at(target)?;
    }
    std::fs::rename(&stage, target).at(target)?;
    if old.exists() {
        std::fs::remove_dir_all(&old).at(&old)?;
    }
    Ok(value)
}

/// Writes `bytes` to `target` atomically.
pub fn write_atomic(target: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(target);
    let result = (|| {
        let mut f = File::create(&tmp).at(&tmp)?;
        f.write_all(bytes).at(&tmp)?;
        f.sync_all().at(&tmp)?;
        commit(&tmp, target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Serializes `value` as pretty JSON and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize>(target: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::io(target, e.into()))?;
    bytes.push(b'\n');
    write_atomic(target, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_published_directory_replaces_the_old_one_whole_and_a_failed_fill_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        publish_dir(&target, |d| std::fs::write(d.join("a"), "1").at(d)).unwrap();
        publish_dir(&target, |d| std::fs::write(d.join("b"), "2").at(d)).unwrap();
        assert!(!target.join("a").exists() && target.join("b").exists(), "the new directory, not a mix");
        let failed = publish_dir(&target, |d| {
            std::fs::write(d.join("c"), "3").at(d)?;
            Err::<(), Error>(Error::Usage("interrupted".into()))
        });
        assert!(failed.is_err());
        assert!(target.join("b").exists() && !target.join("c").exists());
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert!(!names.iter().any(|n| n.ends_with(".old")), "{names:?}");
    }

    /// A caller's own error type (the crates above have theirs) comes back from `publish_dir`
    /// as the caller returned it, and the staging directory is gone.
    #[test]
    fn a_fill_failing_with_the_callers_error_returns_it_unchanged() {
        #[derive(Debug, PartialEq)]
        enum Caller {
            Fs(String),
            Own(u32),
        }
        impl From<Error> for Caller {
            fn from(e: Error) -> Self {
                Caller::Fs(e.to_string())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        assert_eq!(publish_dir(&target, |_| Err::<(), Caller>(Caller::Own(7))), Err(Caller::Own(7)));
        assert!(!target.exists() && !hidden_sibling(&target, "partial").exists());
        let missing = dir.path().join("no-such-dir");
        let stage_fails = publish_dir(&target, |_| std::fs::read(&missing).at(&missing).map_err(Caller::from));
        assert!(matches!(&stage_fails, Err(Caller::Fs(m)) if m.contains("no-such-dir")), "{stage_fails:?}");
    }
}
