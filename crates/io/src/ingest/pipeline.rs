//! The streaming part of `corrflow ingest`: a three-stage pipeline (read chunks ‖ tokenize in
//! parallel ‖ encode and write shards) joined by bounded channels, so memory stays at a few
//! chunks whatever the corpus size.

use super::request::{IngestRequest, Opened};
use crate::corpus::{AtlasWriter, DropCounts, TokenBatch};
use crate::error::{Error, Result};
use crate::formats::CellSource;
use crate::progress::Task;
use crate::tokenize::{tokenize_chunk, tokenize_chunk_with_expression, GeneMapper};
use crate::util::Cancel;

struct ReadMsg {
    file: usize,
    chunk: crate::formats::CellChunk,
    /// Position after this chunk: (file, next cell), normalized to the next file at its end.
    next: (usize, usize),
}

struct WriteMsg {
    batch: TokenBatch,
    cells_read: u64,
    dropped: DropCounts,
    next: (usize, usize),
}

/// Reads, tokenizes and writes every chunk from where `writer` resumes, committing a shard
/// whenever it holds `req.shard_cells` input cells.
pub(super) fn pipeline(req: &IngestRequest, opened: &mut [Opened], writer: &mut AtlasWriter, bar: &Task) -> Result<()> {
    let resume_at = writer.resume_at();
    let chunk_cells = req.read.chunk_cells.max(1);
    let (read_tx, read_rx) = crossbeam_channel::bounded::<Result<ReadMsg>>(1);
    let (write_tx, write_rx) = crossbeam_channel::bounded::<WriteMsg>(1);
    let n_files = opened.len();
    let gene_ids: Vec<Vec<String>> = opened.iter().map(|o| o.source.gene_ids().to_vec()).collect();
    let (sources, mappers): (Vec<_>, Vec<_>) = opened.iter_mut().map(|o| (&mut o.source, &o.mapper)).unzip();

    std::thread::scope(|s| {
        s.spawn(move || read_stage(sources, resume_at, chunk_cells, &req.cancel, read_tx));
        let writer_thread = s.spawn(move || write_stage(writer, write_rx, resume_at, n_files, req.shard_cells as u64));

        // Stage 2 (this thread): tokenize chunks on the rayon pool, a few in flight at once so
        // that a worker with nothing left of one chunk starts the next instead of idling while
        // the reader or writer holds the other core. Results go to the writer in input order.
        let tokenize_result = rayon::in_place_scope(|scope| -> Result<()> {
            let mut in_flight = std::collections::VecDeque::new();
            let forward = |rx: crossbeam_channel::Receiver<Result<WriteMsg>>| -> Result<bool> {
                let out =
                    rx.recv().map_err(|_| Error::internal("ingest", "a tokenizer task ended without a result"))??;
                Ok(write_tx.send(out).is_ok())
            };
            for msg in read_rx {
                let msg = msg?;
                let (tx, rx) = crossbeam_channel::bounded(1);
                let (gene_ids, mappers) = (&gene_ids, &mappers);
                scope.spawn(move |_| {
                    let _ = tx.send(tokenize_msg(req, &gene_ids[msg.file], mappers[msg.file], msg, bar));
                });
                in_flight.push_back(rx);
                if in_flight.len() >= CHUNKS_IN_FLIGHT && !forward(in_flight.pop_front().expect("non-empty"))? {
                    return Ok(());
                }
            }
            while let Some(rx) = in_flight.pop_front() {
                if !forward(rx)? {
                    break;
                }
            }
            Ok(())
        });
        drop(write_tx);
        let write_result =
            writer_thread.join().unwrap_or_else(|_| Err(Error::internal("ingest", "the shard writer thread panicked")));
        tokenize_result.and(write_result)
    })
}

/// Stage 1: reads chunks in order from `resume_at` (file, cell) on; stops after an error, which
/// is sent on.
fn read_stage(
    sources: Vec<&mut Box<dyn CellSource>>,
    resume_at: (usize, usize),
    chunk_cells: usize,
    cancel: &Cancel,
    read_tx: crossbeam_channel::Sender<Result<ReadMsg>>,
) {
    for (fi, source) in sources.into_iter().enumerate().skip(resume_at.0) {
        let n = source.n_cells();
        let mut start = if fi == resume_at.0 { resume_at.1 } else { 0 };
        while start < n {
            let end = (start + chunk_cells).min(n);
            let msg =
                cancel.check("ingest").and_then(|()| source.read_chunk(start..end).map_err(Into::into)).map(|chunk| {
                    let next = if end == n { (fi + 1, 0) } else { (fi, end) };
                    ReadMsg { file: fi, chunk, next }
                });
            let failed = msg.is_err();
            if read_tx.send(msg).is_err() || failed {
                return;
            }
            start = end;
        }
    }
}

/// Stage 3: writes shards, committing one whenever it holds `shard_cells` input cells, and the
/// last one at the end.
fn write_stage(
    writer: &mut AtlasWriter,
    write_rx: crossbeam_channel::Receiver<WriteMsg>,
    resume_at: (usize, usize),
    n_files: usize,
    shard_cells: u64,
) -> Result<()> {
    let mut last = resume_at;
    for msg in write_rx {
        writer.write(msg.batch, msg.cells_read, &msg.dropped)?;
        last = msg.next;
        let at_end = msg.next.0 >= n_files;
        let full = writer.open_cells_read() >= shard_cells || at_end;
        if full && writer.commit_shard(msg.next)?.is_some() {
            crash_point();
        }
    }
    writer.commit_shard(last)?;
    Ok(())
}

/// Chunks being tokenized at once (each holds `chunk_cells` cells).
const CHUNKS_IN_FLIGHT: usize = 2;

/// Stage 2 for one chunk: its tokens, cell ids and obs values as the writer takes them.
fn tokenize_msg(
    req: &IngestRequest,
    gene_ids: &[String],
    mapper: &GeneMapper,
    msg: ReadMsg,
    bar: &Task,
) -> Result<WriteMsg> {
    let chunk = &msg.chunk;
    let path = req.inputs[msg.file].as_path();
    let tokenize = if req.expression { tokenize_chunk_with_expression } else { tokenize_chunk };
    let t = tokenize(path, chunk, gene_ids, mapper, &req.vocab, &req.tokenize)?;
    let batch = TokenBatch {
        offsets: t.offsets,
        tokens: t.tokens,
        cell_ids: t.kept.iter().map(|&i| chunk.cell_ids[i].clone()).collect(),
        obs: chunk.obs.iter().map(|o| o.select(&t.kept)).collect(),
        expression: t.expression,
    };
    let mut batch = batch;
    if let Some(map) = &req.cell_types {
        let i = req.read.obs_columns.iter().position(|c| *c == map.column).ok_or_else(|| {
            Error::internal("ingest", format!("cell-type column '{}' is not among the obs columns read", map.column))
        })?;
        let ids = map.apply(&req.inputs[msg.file], &batch.obs[i])?;
        batch.obs.push(ids);
    }
    bar.inc(chunk.n_cells() as u64);
    Ok(WriteMsg {
        batch,
        cells_read: chunk.n_cells() as u64,
        dropped: DropCounts { no_vocabulary_genes: t.dropped_no_vocab_genes as u64 },
        next: msg.next,
    })
}

/// Fail point `ingest-after-shard` (built with the `failpoints` feature only): its `return`
/// action aborts the process like `kill -9` (no unwinding, no cleanup) right after a shard is
/// committed, so tests can check that an interrupted ingest resumes to the same result
/// (`FAILPOINTS=ingest-after-shard=2*off->return` crashes after the third shard).
fn crash_point() {
    fail::fail_point!("ingest-after-shard", |_| std::process::abort());
}
