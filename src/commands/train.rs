//! `train` and `eval probe`: pre-training the encoder and judging its embeddings.

use anyhow::Result;
use corrflow::config::Config;

use super::print_summary;
use crate::cli::{EvalCommand, TrainArgs};

pub(crate) fn train(cfg: &Config, args: TrainArgs, json: bool) -> Result<()> {
    let progress = !json;
    let TrainArgs {
        out,
        corpus,
        graph,
        strategy,
        lambda,
        max_steps,
        epochs,
        seed,
        device,
        restart,
        profile_steps,
        stop_at_step,
        dump_batches,
        hce,
        init_from,
    } = args;
    super::mask::check_fraction("--lambda", lambda, true)?;
    let w = hce.hce_weight;
    anyhow::ensure!(w >= 0.0 && w.is_finite(), "--hce-weight must be a finite number ≥ 0 (got {w})");
    let mut train = cfg.train.clone();
    let mut mask = cfg.mask.clone();
    train.corpus = corpus.or(train.corpus);
    train.graph = graph.or(train.graph);
    super::overlap()
        .input_opt("--corpus", train.corpus.as_deref())
        .input_opt("--graph", train.graph.as_deref())
        .input_opt("--init-from", init_from.as_deref())
        .input_opt("--hce-ontology", hce.hce_ontology.as_deref())
        .output_dir("--out", &out)
        .output_opt("--dump-batches", dump_batches.as_deref())
        .check()?;
    train.max_steps = max_steps.unwrap_or(train.max_steps);
    train.epochs = epochs.unwrap_or(train.epochs);
    train.device = device.unwrap_or(train.device);
    mask.strategy = strategy.unwrap_or(mask.strategy);
    mask.lambda = lambda.unwrap_or(mask.lambda);
    if let Some(s) = seed {
        train.seed = s;
        mask.seed = s;
    }
    let req = corrflow::train::TrainRequest {
        model: cfg.model.clone(),
        train,
        mask,
        out: out.clone(),
        restart,
        progress,
        stop_after: stop_at_step,
        profile_steps,
        dump_batches,
        hce: hce.options(),
        init_from,
    };
    let s = corrflow::train::train_on_device(&req)?;
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
    let mut human = format!(
        "train: {} of {} steps ({}; {}), {} parameters, loss {} -> {}, eval loss {} accuracy {} (unigram baseline {}), {:.0} tokens/s -> {}",
        s.steps,
        s.total_steps,
        s.resumed_from.map_or("fresh".into(), |r| format!("resumed at {r}")),
        s.limit.describe(),
        s.parameters,
        fmt(s.first_loss),
        fmt(s.last_loss),
        fmt(s.eval_loss),
        fmt(s.eval_accuracy),
        fmt(s.unigram_accuracy),
        s.tokens_per_s,
        s.checkpoint.as_deref().unwrap_or("-")
    );
    for w in s.warnings() {
        human.push_str(&format!("\nwarning: {w}"));
    }
    print_summary(json, &human, &s)
}

pub(crate) fn eval(cfg: &Config, cmd: EvalCommand, json: bool) -> Result<()> {
    match cmd {
        EvalCommand::Cells(a) => super::eval_cells::eval_cells(cfg, *a, json),
        EvalCommand::Probe {
            embeddings,
            label,
            folds,
            test_fraction,
            neighbours,
            rare_fraction,
            alpha,
            max_iterations,
            seed,
            exclude,
        } => probe(
            corrflow::eval::ProbeRequest {
                embeddings,
                label,
                test_fraction,
                rare_fraction,
                alpha,
                max_iterations,
                seed,
                exclude,
                folds,
                neighbours,
            },
            json,
        ),
        EvalCommand::Genes { embeddings, labels, id_column, positive, negative, folds, seed, alpha, neighbours } => {
            check_alpha(alpha)?;
            anyhow::ensure!(neighbours >= 1, "--neighbours must be at least 1 (got 0)");
            // The labels as a spreadsheet writes them, each gene with one label (a gene listed
            // with both is refused, naming its lines).
            corrflow::util::csv::read_gene_classes(&labels, &id_column, &[positive.clone(), negative.clone()])?;
            let req = corrflow::eval::GeneEvalRequest {
                embeddings,
                labels,
                id_column,
                positive,
                negative,
                folds,
                seed,
                alpha,
                neighbours,
            };
            let r = corrflow::eval::eval_genes(&req)?;
            let human = format!(
                "eval genes: {} positive / {} negative genes ({} labelled genes without an embedding excluded), {}-fold AUROC: logistic {:.3} ± {:.3}, k-NN {:.3} ± {:.3}",
                r.positives, r.negatives, r.excluded, r.folds, r.logistic_auroc.mean, r.logistic_auroc.sd, r.knn_auroc.mean, r.knn_auroc.sd
            );
            print_summary(json, &human, &r)
        }
    }
}

/// `--alpha`: the L2 penalty, a finite number > 0.
fn check_alpha(alpha: f64) -> Result<()> {
    anyhow::ensure!(alpha > 0.0 && alpha.is_finite(), "--alpha must be a finite number > 0 (got {alpha})");
    Ok(())
}

fn probe(req: corrflow::eval::ProbeRequest, json: bool) -> Result<()> {
    let (t, r) = (req.test_fraction, req.rare_fraction);
    anyhow::ensure!(t > 0.0 && t < 1.0, "--test-fraction must be in (0, 1) (got {t})");
    anyhow::ensure!(r > 0.0 && r <= 1.0, "--rare-fraction must be in (0, 1] (got {r})");
    anyhow::ensure!(req.folds >= 1, "--folds must be at least 1 (got 0)");
    anyhow::ensure!(req.neighbours >= 1, "--neighbours must be at least 1 (got 0)");
    check_alpha(req.alpha)?;
    let r = corrflow::eval::probe(&req)?;
    let mut human = format!(
        "probe '{}': {} cells, {} classes, {} fold(s): logistic accuracy {:.4} ± {:.4}, macro-F1 {:.4} ± {:.4}, macro-AUROC {:.4} ± {:.4}; {}-NN accuracy {:.4} ± {:.4}, macro-F1 {:.4} ± {:.4}; rare-class macro-F1 {:.4} ({})",
        r.label, r.cells, r.classes, r.folds, r.accuracy, r.accuracy_sd, r.macro_f1, r.macro_f1_sd, r.macro_auroc,
        r.macro_auroc_sd, req.neighbours, r.knn_accuracy, r.knn_accuracy_sd, r.knn_macro_f1, r.knn_macro_f1_sd,
        r.rare_macro_f1, r.rare_classes.join(", ")
    );
    for c in &r.per_class {
        let auroc = c.auroc.map_or("-".to_string(), |a| format!("{a:.4}"));
        human.push_str(&format!(
            "\n  {:<30} F1 {:.4} ± {:.4}  AUROC {auroc}  ({} cells, {} tested)",
            c.class, c.f1, c.f1_sd, c.cells, c.test_cells
        ));
    }
    print_summary(json, &human, &r)
}
