//! `eval cells`' options and method names, checked before any work.

use corrflow_io::error::{Error, Result};

use super::{CellEvalOptions, CellEvalRequest};
use crate::probe::check_alpha;

/// Options, names and embeddings files of a request (before anything is read).
pub(super) fn validate(req: &CellEvalRequest) -> Result<()> {
    validate_options(&req.options)?;
    let o = &req.options;
    let bad = |m: String| Err(Error::Usage(m));
    if req.embeddings.is_empty() && !o.baselines {
        return bad("nothing to score: give embeddings or keep the baselines".into());
    }
    // The same file under two names would only be scored twice; said before the name clash
    // that it also causes when the names come from the file names.
    let same = |a: &std::path::Path, b: &std::path::Path| {
        a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    };
    for (i, e) in req.embeddings.iter().enumerate() {
        if let Some(first) = req.embeddings[..i].iter().find(|f| same(&f.path, &e.path)) {
            return bad(format!(
                "--embeddings {} is given twice (as '{}' and '{}'); give each file once",
                e.path.display(),
                first.name,
                e.name
            ));
        }
    }
    let mut names = std::collections::HashMap::new();
    for e in &req.embeddings {
        if ["pca", "hvg", "random"].contains(&e.name.as_str()) && o.baselines {
            return bad(format!("--name '{}' is taken by a baseline (pca, hvg and random are)", e.name));
        }
        if let Some(other) = names.insert(e.name.as_str(), &e.path) {
            return bad(format!(
                "--name '{}' names two files ({} and {}); give them different names with --name A,B",
                e.name,
                other.display(),
                e.path.display()
            ));
        }
    }
    Ok(())
}

/// Every option within its documented range.
pub fn validate_options(o: &CellEvalOptions) -> Result<()> {
    let bad = |m: String| Err(Error::Usage(m));
    if !(2..=1000).contains(&o.neighbours) {
        return bad(format!("--neighbours must be in 2..=1000 (got {})", o.neighbours));
    }
    if !(2..=1000).contains(&o.lisi_neighbours) {
        return bad(format!("--lisi-neighbours must be in 2..=1000 (got {})", o.lisi_neighbours));
    }
    if o.resolutions.is_empty() || o.resolutions.iter().any(|r| !(r.is_finite() && *r > 0.0 && *r <= 100.0)) {
        return bad(format!("--resolutions must be numbers in (0, 100] (got {:?})", o.resolutions));
    }
    if !(1..=100_000).contains(&o.n_top_genes) || !(1..=1000).contains(&o.n_comps) {
        return bad(format!(
            "--n-top-genes must be in 1..=100000 and --n-comps in 1..=1000 (got {} and {})",
            o.n_top_genes, o.n_comps
        ));
    }
    if !(2..=100).contains(&o.folds) {
        return bad(format!("--folds must be in 2..=100 (got {})", o.folds));
    }
    check_alpha(o.alpha)?;
    if !(1..=1000).contains(&o.probe_neighbours) {
        return bad(format!("--probe-neighbours must be in 1..=1000 (got {})", o.probe_neighbours));
    }
    Ok(())
}
