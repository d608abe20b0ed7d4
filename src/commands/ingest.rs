//! `ingest`, `vocab build` and `export hf`: files into a token-shard corpus and back out.

use std::path::PathBuf;

use anyhow::Result;
use corrflow::config::{Config, ModelVersion};
use corrflow::formats::ReadOptions;
use corrflow::fs::paths::Overlap;
use corrflow::ingest::{build_vocabulary, VocabBuildOptions};
use corrflow::ingest::{run_ingest, IngestRequest};
use corrflow::tokenize::{versioned_layout, TokenizeOptions};
use corrflow::vocab::Vocabulary;
use corrflow_algorithms::SequenceLayout;

use super::print_summary;
use crate::cli::{IngestArgs, VocabCommand};

pub(crate) fn ingest(cfg: &Config, a: IngestArgs, json: bool) -> Result<()> {
    let progress = !json;
    let version = a.version.unwrap_or(cfg.ingest.version);
    let overlap = super::overlap()
        .inputs("FILE", &a.inputs)
        .input_opt("--cell-type-map", a.cell_type_map.as_deref())
        .output_dir("--out", &a.out);
    let overlap = match &a.hf {
        Some(hf) => overlap.replaced_dir("--hf", hf),
        None => overlap,
    };
    vocab_input(overlap, &a.vocab).check()?;
    let (vocab, layout) =
        versioned_layout(Vocabulary::resolve(&a.vocab)?, version == ModelVersion::V2, cfg.ingest.max_genes)?;
    let req = IngestRequest {
        corpus: a.out.clone(),
        atlas: a.atlas.clone(),
        inputs: a.inputs.clone(),
        vocab,
        read: ReadOptions { filter_pass: !a.ignore_filter_pass, ..a.read.read_options(cfg, a.obs_columns.clone()) },
        tokenize: TokenizeOptions {
            layout,
            allow_normalized: a.read.allow_normalized || a.read.log1p,
            transform: a.read.transform(),
        },
        shard_cells: cfg.ingest.shard_cells,
        zstd_level: cfg.ingest.zstd_level,
        restart: a.restart,
        show_progress: progress,
        cancel: Default::default(),
        cell_types: a
            .cell_type_map
            .as_deref()
            .map(|m| corrflow::ontology::map::CellTypeMapping::open(m, &a.obs_columns))
            .transpose()?,
        expression: !a.ranks_only,
    };
    let s = run_ingest(&req)?;
    let mut human = format!(
        "ingest: atlas '{}': {} cells read, {} kept, {} dropped (no vocabulary gene), {} tokens, {} shards in {:.2}s ({:.0} cells/s, {:.1} MB/s)",
        s.atlas, s.cells_read, s.cells_kept, s.dropped.total(), s.tokens, s.shards, s.seconds, s.cells_per_s, s.mb_per_s
    );
    let g = &s.genes;
    human.push_str(&format!(
        "\ngenes: {} of {} in the vocabulary ({} by Ensembl id, {} by unversioned id, {} by symbol){}",
        g.matched(),
        g.genes_in_file,
        g.matched_by_id,
        g.matched_by_unversioned_id,
        g.matched_by_symbol,
        if g.duplicate_columns > 0 {
            format!("; {} columns share a token with another (their counts are summed)", g.duplicate_columns)
        } else {
            String::new()
        }
    ));
    for w in &s.warnings {
        human.push_str(&format!("\nwarning: {w}"));
    }
    if let Some(c) = &s.cell_types {
        human.push_str(&format!(
            "\ncell types: {} cells mapped to {}",
            c.mapped_cells,
            corrflow::ontology::map::CL_ID_COLUMN
        ));
        for (label, n) in &c.unmapped {
            human.push_str(&format!("\n  unmapped label '{label}': {n} cells (no cl_id)"));
        }
        if c.missing > 0 {
            human.push_str(&format!("\n  {} cells without a '{}' value", c.missing, c.column));
        }
    }
    if let Some(hf) = &a.hf {
        let dir = corrflow::corpus::atlas_dir(&a.out, &a.atlas);
        let rows = corrflow::corpus::export_hf(&[dir], hf)?;
        human.push_str(&format!("\nexported {rows} cells to {} (Hugging Face save_to_disk layout)", hf.display()));
    }
    print_summary(json, &human, &s)
}

pub(crate) fn vocab(cfg: &Config, cmd: VocabCommand, json: bool) -> Result<()> {
    let VocabCommand::Build {
        out,
        name,
        alpha,
        min_cells,
        two_pass,
        sketch_memory_mb,
        read,
        ignore_filter_pass,
        inputs,
    } = cmd;
    super::overlap().inputs("FILE", &inputs).replaced_dir("--out", &out).check()?;
    let name = name.unwrap_or_else(|| out.file_name().map_or("custom".into(), |n| n.to_string_lossy().into_owned()));
    let opts = VocabBuildOptions {
        name,
        read: ReadOptions { filter_pass: !ignore_filter_pass, ..read.read_options(cfg, Vec::new()) },
        values: TokenizeOptions {
            layout: SequenceLayout::v1(),
            allow_normalized: read.allow_normalized || read.log1p,
            transform: read.transform(),
        },
        alpha: alpha.unwrap_or(cfg.vocab.alpha),
        min_cells: min_cells.unwrap_or(cfg.vocab.min_cells),
        two_pass: two_pass || cfg.vocab.two_pass,
        sketch_memory_mb: sketch_memory_mb.unwrap_or(cfg.vocab.sketch_memory_mb),
    };
    let (_, s) = build_vocabulary(&inputs, &out, &opts)?;
    let human = format!(
        "vocab build: {} genes from {} cells, medians within {:.3}% relative error, written to {}",
        s.genes,
        s.cells,
        s.alpha * 100.0,
        out.display()
    );
    print_summary(json, &human, &s)
}

pub(crate) fn export_hf(corpus: PathBuf, atlas: Vec<String>, out: PathBuf, json: bool) -> Result<()> {
    super::overlap().input("--corpus", &corpus).replaced_dir("--out", &out).check()?;
    let names = if atlas.is_empty() { corrflow::corpus::list_atlases(&corpus) } else { atlas };
    anyhow::ensure!(!names.is_empty(), "{}: no finished atlas in this corpus", corpus.display());
    let dirs: Vec<_> = names.iter().map(|n| corrflow::corpus::atlas_dir(&corpus, n)).collect();
    let rows = corrflow::corpus::export_hf(&dirs, &out)?;
    let summary = serde_json::json!({"command": "export hf", "out": out, "atlases": names, "cells": rows});
    print_summary(json, &format!("exported {rows} cells from {} atlases to {}", names.len(), out.display()), &summary)
}

/// `overlap` with `--vocab` as an input when it names a directory (not a built-in vocabulary).
pub(crate) fn vocab_input(overlap: Overlap, vocab: &str) -> Overlap {
    let dir = std::path::Path::new(vocab);
    if dir.exists() {
        overlap.input("--vocab", dir)
    } else {
        overlap
    }
}
