//! `ontology map`, `ontology show` and `annotate`: the Cell Ontology, label maps, and
//! hierarchical calls from a model with an HCE head.

use anyhow::Result;
use corrflow::config::Config;
use corrflow::ontology::{self, map};

use super::print_summary;
use crate::cli::ontology::{AnnotateArgs, OntologyCommand};

pub(crate) fn ontology(cfg: &Config, cmd: OntologyCommand, json: bool) -> Result<()> {
    match cmd {
        OntologyCommand::Map { ontology: path, labels, column, out, read } => {
            super::overlap().input("--ontology", &path).input("--labels", &labels).output("--out", &out).check()?;
            let loaded = ontology::load(&path)?;
            let counts = map::count_labels(&labels, &read.read_options(cfg, Vec::new()), &column)?;
            let proposed = map::propose(&loaded, &column, &counts);
            let comment = vec![format!(
                "corrflow cell-type map · ontology {} {} · proposed by `corrflow ontology map` for column '{column}' of {}; check every row (match: id, exact, synonym; edit to curated), fill in unmapped ones where a term fits",
                path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
                loaded.version,
                labels.display()
            )];
            corrflow::fs::atomic::write_atomic(&out, proposed.to_tsv(&comment).as_bytes())?;
            let unmapped: Vec<&map::MapRow> = proposed.rows.iter().filter(|r| r.cl_id.is_none()).collect();
            let mut human = format!(
                "ontology map: {} labels of '{column}' ({} cells), {} matched, {} not -> {}",
                proposed.rows.len(),
                counts.values().sum::<u64>(),
                proposed.rows.len() - unmapped.len(),
                unmapped.len(),
                out.display()
            );
            for r in &unmapped {
                human.push_str(&format!(
                    "\n  {} '{}' ({} cells){}",
                    r.matched,
                    r.label,
                    r.cells,
                    if r.cl_label.is_empty() { String::new() } else { format!(": {}", r.cl_label) }
                ));
            }
            let summary = serde_json::json!({
                "command": "ontology map", "out": out, "ontology_version": loaded.version,
                "labels": proposed.rows.len(), "unmapped": unmapped.iter().map(|r| &r.label).collect::<Vec<_>>(),
                "rows": proposed.rows,
            });
            print_summary(json, &human, &summary)
        }
        OntologyCommand::Show { ontology: path, terms } => {
            let loaded = ontology::load(&path)?;
            let o = &loaded.ontology;
            let mut human = format!("ontology {} ({} terms, {} leaves)", loaded.version, o.len(), o.leaves().len());
            let mut found = Vec::new();
            for text in &terms {
                let hits = o.lookup(text);
                if hits.is_empty() {
                    human.push_str(&format!("\n'{text}': no term with this id, label or synonym"));
                }
                for (t, kind) in hits {
                    let term = o.term(t);
                    let parents: Vec<String> =
                        o.parents(t).iter().map(|&p| format!("{} {}", o.term(p).id, o.term(p).label)).collect();
                    let leaves = o.descendant_leaves(t).len();
                    human.push_str(&format!(
                        "\n{} {} ({kind:?} match of '{text}'): depth {}, {leaves} leaves under it; parents: {}",
                        term.id,
                        term.label,
                        o.depth(t),
                        parents.join("; ")
                    ));
                    found.push(serde_json::json!({"query": text, "id": term.id, "label": term.label, "depth": o.depth(t), "leaves": leaves, "parents": parents}));
                }
            }
            print_summary(
                json,
                &human,
                &serde_json::json!({"command": "ontology show", "version": loaded.version, "terms": found}),
            )
        }
    }
}

pub(crate) fn annotate(cfg: &Config, a: AnnotateArgs, json: bool) -> Result<()> {
    anyhow::ensure!((0.0..=1.0).contains(&a.threshold), "--threshold must be in [0, 1] (got {})", a.threshold);
    let cells = a.cells.run(cfg, Vec::new(), !json);
    super::serve::model_inputs(&cells.model, super::overlap().input("--input", &cells.input))
        .input_opt("--ontology", a.ontology.as_deref())
        .input_opt("--truth-map", a.truth_map.as_deref())
        .output("--out", &a.out)
        .output_opt("--h5ad-out", a.h5ad_out.as_deref())
        .check()?;
    let req = corrflow::annotate::AnnotateRequest {
        cells,
        out: a.out,
        h5ad_out: a.h5ad_out,
        threshold: a.threshold,
        ontology: a.ontology,
        truth: a.truth.map(|column| corrflow::annotate::Truth { column, map: a.truth_map }),
    };
    let s = corrflow::annotate::annotate(&req)?;
    let mut human = format!(
        "annotate ({}): {} cells ({} dropped: no vocabulary gene), head of {} leaves over {} terms of ontology {}, τ {} -> {} in {:.2}s ({:.0} cells/s)",
        s.encoder, s.cells, s.dropped, s.leaves, s.terms, s.ontology_version, s.threshold, s.out, s.seconds, s.cells_per_s
    );
    if let Some(e) = &s.evaluation {
        human.push_str(&format!(
            "\nagainst '{}': {} cells scored; exact {:.4}, ancestor-tolerant {:.4}, macro-F1 {:.4}",
            e.column, e.scored_cells, e.exact_accuracy, e.ancestor_tolerant_accuracy, e.macro_f1
        ));
        let depths: Vec<String> =
            e.by_depth.iter().map(|d| format!("{}: {:.3} ({})", d.depth, d.accuracy, d.cells)).collect();
        human.push_str(&format!("\n  accuracy by depth: {}", depths.join(", ")));
        for (label, n) in &e.unmapped {
            human.push_str(&format!("\n  unmapped label '{label}': {n} cells not scored"));
        }
        for (id, n) in &e.outside_head {
            human.push_str(&format!("\n  term {id} is not in the model's head: {n} cells not scored"));
        }
    }
    print_summary(json, &human, &s)
}
