//! The side-by-side table `eval cells` prints: a row per metric, a column per method, the best
//! of each row marked with `*`.

use super::{metric, CellEvalReport, METRICS};

pub fn table(r: &CellEvalReport) -> String {
    let mut out = format!(
        "eval cells: {} cells, {} classes of '{}'{} ({} left out); seed {}\n",
        r.cells,
        r.classes,
        r.label,
        r.batch.as_ref().map(|b| format!(", {} batches of '{b}'", r.batches.unwrap_or(0))).unwrap_or_default(),
        r.dropped_cells,
        r.seed
    );
    let width = r.order.iter().map(|n| n.len()).max().unwrap_or(0).max(9) + 2;
    out += &format!("{:<20}", "metric");
    for name in &r.order {
        out += &format!("{name:>width$}");
    }
    out.push('\n');
    for m in METRICS {
        let values: Vec<Option<f64>> = r.order.iter().map(|n| metric(&r.methods[n], m)).collect();
        if values.iter().all(Option::is_none) {
            continue;
        }
        out += &format!("{m:<20}");
        for (name, v) in r.order.iter().zip(values) {
            let mark = if r.best.get(m) == Some(name) { "*" } else { " " };
            let cell = v.map_or("—".to_string(), |v| format!("{v:.4}{mark}"));
            out += &format!("{cell:>width$}");
        }
        out.push('\n');
    }
    out += &format!("{:<20}", "dim");
    for name in &r.order {
        out += &format!("{:>width$}", r.methods[name].dim);
    }
    out.push('\n');
    out += &format!(
        "* best of the row. ari/nmi: Leiden at the resolution of the best NMI (scib-metrics); probes: {}-fold mean.\n",
        r.folds
    );
    if let Some(why) = &r.probes_not_computed {
        out += &format!("probes: not computed: {why}\n");
    }
    if !r.probe_skipped_classes.is_empty() {
        out += &format!(
            "probes: {} class(es) with fewer than {} cells left out (every fold must train and test each class): {}\n",
            r.probe_skipped_classes.len(),
            crate::min_class_cells(r.folds),
            crate::probe::describe_classes(&r.probe_skipped_classes)
        );
    }
    for name in &r.order {
        let m = &r.methods[name];
        if m.probe_alpha > r.probe_alpha {
            out += &format!(
                "{name}: the logistic probe needed the L2 penalty raised to {} (it did not converge at {})\n",
                m.probe_alpha, r.probe_alpha
            );
        }
    }
    for s in &r.skipped {
        out += &format!("{}: not computed: {}\n", s.method, s.reason);
    }
    for n in &r.baseline_notes {
        out += &format!("baselines: {n}\n");
    }
    out
}
