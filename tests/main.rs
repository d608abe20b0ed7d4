//! The integration tests, one module per file, linked as one test binary.
//!
//! Each `tests/*.rs` was its own crate, so each linked the whole corrflow library with burn,
//! wgpu, Arrow, HDF5 and ONNX Runtime again: 35 link steps, inside the 18 minutes that a cold
//! `make test` spent on the root package on two cores. As modules of one crate they link once, and the fixtures built
//! once per process (`common::fixtures`, `common::tiny_model`) are built once for all of them.
//! Run one file's tests with `cargo test --release --test integration <file>::`.

mod common;

mod annotate;
mod cluster;
mod concurrency;
mod csr_invariants;
mod custom_strategy;
mod eval_cells;
mod export_hf;
mod finetune;
mod full_disk;
mod gene_embeddings;
mod geneformer_parity;
mod graph_exact;
mod graph_incremental;
mod hostile;
mod import_hf;
mod kill9;
mod malformed;
mod mask_audit;
mod memory;
mod model_integrity;
mod onnx_export;
mod overwrite;
mod perturb;
mod readers;
mod resume;
mod robustness;
mod serve;
mod serve_uploads;
mod synth;
mod train;
mod usability;
mod value_models;
mod verification;
mod vocab_build;
mod wgpu_train;
mod zarr_loom;
