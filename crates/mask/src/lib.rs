//! The masking stage: CorrMask Algorithm 2 and its baselines (pure functions in
//! `corrflow_algorithms::mask`) applied to a corpus, for the audit and for training.
//!
//! - [`MaskContext`]: the graph's neighbour table, the PMI table and the replacement vocabulary
//!   of a corpus, checked against each other.
//! - [`run_audit`]: the paper's Table 3 over a corpus, optionally dumping every plan.
//! - [`dataflow`]: the timely operator that
//!   masks them with the graph of their time and feeds the trainer through a bounded channel.

pub mod audit;
mod context;
pub mod dataflow;
mod dump;

pub use audit::{audit_command, run_audit, table, AuditReport, AuditRequest, AuditRow};
pub use context::{count_pmi, MaskContext};
pub use dump::MaskDumpWriter;
