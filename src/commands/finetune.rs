//! `finetune`: a classification head on a pre-trained encoder.

use anyhow::Result;
use corrflow::config::Config;
use corrflow::train::finetune::{FinetuneRequest, FinetuneTask, SplitMetrics};

use super::print_summary;
use crate::cli::finetune::FinetuneArgs;

pub(crate) fn finetune(cfg: &Config, a: FinetuneArgs, json: bool) -> Result<()> {
    super::overlap()
        .input("--checkpoint", &a.checkpoint)
        .input("--corpus", &a.corpus)
        .input_opt("--gene-labels", a.gene_labels.as_deref())
        .output_dir("--out", &a.out)
        .check()?;
    let mut c = cfg.finetune.clone();
    c.epochs = a.epochs.unwrap_or(c.epochs);
    c.patience = a.patience.unwrap_or(c.patience);
    c.lr = a.lr.unwrap_or(c.lr);
    c.batch_size = a.batch_size.unwrap_or(c.batch_size);
    c.freeze_layers = a.freeze_layers.unwrap_or(c.freeze_layers);
    c.class_weights |= a.class_weights;
    c.validation_fraction = a.validation_fraction.unwrap_or(c.validation_fraction);
    c.test_fraction = a.test_fraction.unwrap_or(c.test_fraction);
    c.max_len = a.max_len.unwrap_or(c.max_len);
    c.pooling = a.pooling.unwrap_or(c.pooling);
    c.seed = a.seed.unwrap_or(c.seed);
    let task = match (a.label, a.gene_labels) {
        (Some(column), _) => FinetuneTask::Cell { column, exclude: a.exclude },
        (None, Some(labels)) => {
            check_classes(&a.classes)?;
            FinetuneTask::Gene { labels, id_column: a.id_column, class_columns: a.classes }
        }
        (None, None) => unreachable!("clap requires --label or --gene-labels"),
    };
    let req = FinetuneRequest {
        checkpoint: a.checkpoint,
        corpus: a.corpus,
        atlases: a.atlases,
        task,
        out: a.out,
        config: c,
        restart: a.restart,
        progress: !json,
        stop_after: a.stop_at_step,
    };
    let s = corrflow::train::finetune_on_cpu(&req)?;
    let scores = |m: &Option<SplitMetrics>| {
        m.as_ref().map_or("-".to_string(), |m| {
            let genes = m
                .genes
                .as_ref()
                .map_or(String::new(), |g| format!(", per gene accuracy {:.3} macro-F1 {:.3}", g.accuracy, g.macro_f1));
            format!("accuracy {:.3} macro-F1 {:.3}{genes}", m.items.accuracy, m.items.macro_f1)
        })
    };
    let mut human = format!(
        "finetune: {} classes, {} of {} steps ({} epochs{}{}), {} trainable parameters ({} frozen); validation {}; test {} -> {}",
        s.classes.len(),
        s.steps,
        s.total_steps,
        s.epochs,
        if s.stopped_early { ", stopped early" } else { "" },
        s.resumed_from.map_or(String::new(), |r| format!(", resumed at {r}")),
        s.trainable_parameters,
        s.frozen_parameters,
        scores(&s.validation),
        scores(&s.test),
        s.checkpoint.as_deref().unwrap_or("-")
    );
    // The test part's scores, or the validation part's where there is no test part.
    let judged = s.test.as_ref().map(|m| ("test", m)).or(s.validation.as_ref().map(|m| ("validation", m)));
    if let Some((part, m)) = judged {
        for c in [m.items.collapse.as_ref(), m.genes.as_ref().and_then(|g| g.collapse.as_ref())].into_iter().flatten() {
            human.push_str(&format!("\nwarning ({part}): {c}"));
        }
    }
    print_summary(json, &human, &s)
}

/// `--classes`: at least two class columns of `--gene-labels`, each named once.
fn check_classes(classes: &[String]) -> Result<()> {
    match classes {
        [] => anyhow::bail!("--gene-labels needs --classes C1,C2,... (at least two of its class columns)"),
        [one] => anyhow::bail!(
            "--classes needs at least two class columns of --gene-labels (got one: '{one}'), e.g. --classes {one},OTHER"
        ),
        _ => {}
    }
    if let Some(c) = classes.iter().find(|c| c.trim().is_empty()) {
        anyhow::bail!("--classes: an empty class column name ('{c}')");
    }
    for (i, c) in classes.iter().enumerate() {
        if classes[..i].contains(c) {
            anyhow::bail!("--classes names '{c}' twice; each class column once");
        }
    }
    Ok(())
}
