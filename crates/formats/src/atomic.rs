//! The temporary names of atomic writes: a result is written under a hidden sibling name and
//! renamed into place, so a target is either absent or complete. `corrflow_io::util::atomic`
//! builds its writers on these two functions.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

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
