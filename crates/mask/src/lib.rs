//! The masking stage: CorrMask Algorithm 2 and its baselines (pure functions in
//! `corrflow_algorithms::mask`) applied to a corpus, for the audit and for training.
//!
//! - [`MaskContext`]: the graph's neighbour table, the PMI table and the replacement vocabulary
//!   of a corpus, checked against each other.
//! - [`run_audit`]: the paper's Table 3 over a corpus, optionally dumping every plan.
//! - [`plan`]: the corpus split into training and held-out cells, epochs shuffled and
//!   length-grouped into planned batches (the trainer's and the Python loader's data).
//! - [`dataflow`]: the timely operator that
//!   masks them with the graph of their time and feeds the trainer through a bounded channel;
//!   [`fixed`] masks them without it when the graph never changes (the Python loader);
//!   [`GraphWatch`] polls the graph directory for the operator.
//! - [`held_out_batches`]: the held-out cells masked once, at a fixed epoch, for evaluation.

pub mod audit;
mod context;
pub mod dataflow;
mod dump;
pub mod fixed;
mod graph_watch;
mod held_out;
pub mod plan;
pub mod values;

pub use audit::{audit_command, run_audit, table, AuditReport, AuditRequest, AuditRow};
pub use context::{count_pmi, MaskContext};
pub use dump::MaskDumpWriter;
pub use graph_watch::GraphWatch;
pub use held_out::held_out_batches;
