//! Finding and loading ONNX Runtime's shared library (ort's `load-dynamic`): `ORT_DYLIB_PATH`,
//! then corrflow's cache folder (filled by `scripts/fetch-onnxruntime.sh` from the pinned PyPI
//! wheel), then an installed Python `onnxruntime` package. The environment is created once per
//! process; a failure says every place that was tried.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use corrflow_io::error::{Error, Result};

/// The onnxruntime release the fetch script pins (ort 2.0.0-rc.15 speaks its API 31).
pub const ORT_VERSION: &str = "1.31.1";

/// Candidate library paths, in the order they are tried, with where each came from. Lazy: the
/// Python interpreter is only asked when the earlier candidates did not load.
pub fn candidates() -> impl Iterator<Item = (String, PathBuf)> {
    let env = std::env::var_os("ORT_DYLIB_PATH")
        .filter(|p| !p.is_empty())
        .map(|p| ("ORT_DYLIB_PATH".to_string(), PathBuf::from(p)));
    let cache = std::env::var_os("CORRFLOW_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/corrflow")))
        .map(|c| ("corrflow cache".to_string(), c.join("onnxruntime").join(ORT_VERSION).join("libonnxruntime.so")));
    let python = std::iter::once_with(|| {
        // Inside the Python package the process is the interpreter itself (a venv's python run by
        // path need not be the `python3` on PATH): its onnxruntime is the one `pip install` put
        // beside corrflow.
        let this = std::env::current_exe()
            .ok()
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python")))
            .map(|p| p.display().to_string());
        this.into_iter().chain(["python3".to_string(), "python".to_string()]).find_map(|python| {
            let lib = capi_library(&python_package_dir(&python)?.join("capi"))?;
            Some((format!("{python} onnxruntime package"), lib))
        })
    })
    .flatten();
    env.into_iter().chain(cache).chain(python)
}

fn python_package_dir(python: &str) -> Option<PathBuf> {
    let out = std::process::Command::new(python)
        .args(["-c", "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// `libonnxruntime.so*` in a wheel's `capi/` folder.
fn capi_library(dir: &Path) -> Option<PathBuf> {
    let mut libs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libonnxruntime.so")))
        .collect();
    libs.sort();
    libs.into_iter().next()
}

static ENVIRONMENT: OnceLock<std::result::Result<(PathBuf, ort::environment::Environment), String>> = OnceLock::new();

/// The process' ONNX Runtime environment, loading the library on first use; returns the
/// library's path.
pub fn environment() -> Result<(&'static Path, &'static ort::environment::Environment)> {
    let loaded =
        ENVIRONMENT.get_or_init(|| {
            let mut report = Vec::new();
            let mut env_var_tried = false;
            for (source, path) in candidates() {
                env_var_tried |= source == "ORT_DYLIB_PATH";
                if !path.exists() {
                    report.push(format!("  {source}: {} (no such file)", path.display()));
                    continue;
                }
                match ort::init_from(&path) {
                    Ok(builder) => {
                        return builder.with_name("corrflow").build().map(|env| (path.clone(), env)).map_err(|e| {
                            format!("{}: creating the ONNX Runtime environment failed: {e}", path.display())
                        });
                    }
                    Err(e) => report.push(format!("  {source}: {} ({e})", path.display())),
                }
            }
            if !env_var_tried {
                report.push("  ORT_DYLIB_PATH: not set".into());
            }
            Err(format!(
                "cannot load ONNX Runtime (libonnxruntime.so); tried:\n{}\ninstall it with `pip install \
             onnxruntime=={ORT_VERSION}` (into the Python environment that runs corrflow), or in a corrflow clone run \
             scripts/fetch-onnxruntime.sh (or `make deps`), or set ORT_DYLIB_PATH to a libonnxruntime.so {ORT_VERSION}",
                report.join("\n")
            ))
        });
    match loaded {
        Ok((path, env)) => Ok((path.as_path(), env)),
        Err(msg) => Err(Error::backend(super::BACKEND, msg.clone())),
    }
}
