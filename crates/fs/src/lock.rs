//! Single-writer locks on the directories commands change (an atlas being ingested, a graph
//! and its state, a training run). The lock is an advisory exclusive lock (`flock`) on a small
//! file that records its holder's pid and command; a second writer fails at once, naming the
//! holder, instead of racing the first. The operating system releases the lock when its
//! process ends however it ends, so the lock of a killed writer is simply taken over. The lock
//! file is removed when the lock is released, so finished commands leave nothing behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

use std::sync::atomic::{AtomicI32, Ordering};

/// The descriptors of the lock files this process holds, in slots readable without a lock, so
/// that a forked child (the HDF5 crash guard of `corrflow-formats`) can close its copies first
/// thing: a flock belongs to the open file, so a child's copy would keep the directory locked
/// after this process is killed, and a rerun would be refused until the child ended.
static HELD: [AtomicI32; 64] = [const { AtomicI32::new(-1) }; 64];

fn register(fd: i32) {
    let _ = HELD.iter().any(|slot| slot.compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst).is_ok());
}

fn unregister(fd: i32) {
    for slot in &HELD {
        let _ = slot.compare_exchange(fd, -1, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Closes, in a freshly forked child, its copies of the lock descriptors this process holds
/// (only atomic loads and `close`: safe between fork and exit).
pub fn close_inherited_locks() {
    for slot in &HELD {
        let fd = slot.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: closes the child's copy of a descriptor the parent registered.
            unsafe { libc::close(fd) };
        }
    }
}

/// Held while a directory is being changed; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
}

impl DirLock {
    /// Locks `dir` for `command` (e.g. `graph update --add kang_stim`), as the lock file
    /// `.NAME.lock` beside it: beside, not inside, because publishing replaces the directory.
    pub fn beside(dir: &Path, command: &str) -> Result<Self> {
        Self::at(&crate::atomic::hidden_sibling(dir, "lock"), dir, command)
    }

    /// Locks `dir` through a lock file inside it (for directories that are never replaced whole,
    /// such as a corpus or a training run), creating `dir` if needed.
    pub fn inside(dir: &Path, command: &str) -> Result<Self> {
        Self::at(&dir.join(".corrflow.lock"), dir, command)
    }

    fn at(path: &Path, dir: &Path, command: &str) -> Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).at(parent)?;
        }
        let mut file = Self::lock_file(path, dir)?;
        // The holder's description, for the message a second writer gets.
        let me = format!("pid {} (corrflow {command})", std::process::id());
        file.set_len(0).at(path)?;
        file.rewind().at(path)?;
        file.write_all(me.as_bytes()).at(path)?;
        file.flush().at(path)?;
        register(file.as_raw_fd());
        Ok(Self { file, path: path.to_path_buf() })
    }

    /// Opens and locks the lock file. A holder removes the file when it finishes, so a file
    /// locked here may already be unlinked: then it is opened anew (the lock counts only on
    /// the file the path names).
    fn lock_file(path: &Path, dir: &Path) -> Result<File> {
        for _ in 0..100 {
            let mut file =
                OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).at(path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    let holder = read_holder(&mut file);
                    let holder = if holder.is_empty() { "another process".to_string() } else { holder };
                    return Err(Error::conflict(
                        dir,
                        format!("is being changed by {holder}; try again when it has finished"),
                    ));
                }
                Err(TryLockError::Error(e)) => return Err(Error::io(path, e)),
            }
            if same_file(&file, path) {
                return Ok(file);
            }
        }
        Err(Error::conflict(dir, "its lock file keeps being replaced; is another corrflow process running?"))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The holder's description in a locked lock file. The holder writes it just after taking the
/// lock, so a file read in between is empty: read again for up to ~200 ms before giving up.
fn read_holder(file: &mut File) -> String {
    for _ in 0..20 {
        let mut holder = String::new();
        let _ = file.rewind().and_then(|()| file.read_to_string(&mut holder));
        if !holder.trim().is_empty() {
            return holder.trim().to_string();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    String::new()
}

/// Whether the open `file` is the file `path` names now (not an unlinked former one).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Unlinked while still locked: a waiting writer that locks this file next finds it
        // unlinked and opens the path anew.
        let _ = std::fs::remove_file(&self.path);
        unregister(self.file.as_raw_fd());
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_naming_the_holder_and_gets_the_lock_once_it_is_released() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("graph");
        let first = DirLock::beside(&dir, "graph update --add a").unwrap();
        let e = DirLock::beside(&dir, "graph update --add b").unwrap_err().to_string();
        assert!(e.contains("is being changed by pid") && e.contains("graph update --add a"), "{e}");
        assert!(e.contains("graph"), "the message names the directory: {e}");
        drop(first);
        assert!(!tmp.path().join(".graph.lock").exists(), "a released lock leaves no file");
        let again = DirLock::beside(&dir, "graph rebase").unwrap();
        assert_eq!(
            std::fs::read_to_string(again.path()).unwrap(),
            format!("pid {} (corrflow graph rebase)", std::process::id())
        );
    }

    #[test]
    fn a_lock_file_unlinked_by_its_holder_is_not_mistaken_for_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("atlas");
        let path = tmp.path().join(".atlas.lock");
        let held = DirLock::beside(&dir, "ingest").unwrap();
        // A writer that opened the file while it was held, and locks it after the holder let go.
        let stale = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        drop(held);
        stale.try_lock().unwrap();
        assert!(!same_file(&stale, &path), "the stale handle's file is gone");
        let fresh = DirLock::beside(&dir, "ingest").unwrap();
        assert!(same_file(&fresh.file, &path));
    }

    #[test]
    fn locks_inside_a_directory_create_it_and_exclude_each_other() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let held = DirLock::inside(&run, "train").unwrap();
        assert!(run.is_dir());
        assert!(DirLock::inside(&run, "train").is_err());
        drop(held);
        assert!(DirLock::inside(&run, "train").is_ok());
    }
}
