//! Hugging Face `datasets` `save_to_disk` layout: uncompressed Arrow IPC *stream* files plus
//! `dataset_info.json` and `state.json`, so `datasets.load_from_disk` (and Geneformer's
//! pretrainer) reads a corpus directly.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Schema};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::read::for_each_batch;
use crate::error::{Error, IoContext, Result};
use corrflow_fs::atomic::write_json_atomic;

fn feature_of(dt: &DataType) -> Result<Value> {
    let dtype = match dt {
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::Float64 => "float64",
        DataType::Boolean => "bool",
        DataType::Utf8 => "string",
        DataType::List(item) => return Ok(json!({"feature": feature_of(item.data_type())?, "_type": "Sequence"})),
        other => return Err(Error::Usage(format!("no Hugging Face feature type for {other}"))),
    };
    Ok(json!({"dtype": dtype, "_type": "Value"}))
}

/// Writes the cells of `atlas_dirs` (in order) as one Hugging Face dataset at `out`, one Arrow
/// file per shard. The dataset appears at `out` only when complete.
pub fn export_hf(atlas_dirs: &[PathBuf], out: &Path) -> Result<u64> {
    if out.exists() {
        return Err(Error::conflict(out, "already exists; remove it or choose another --hf directory"));
    }
    corrflow_fs::atomic::publish_dir(out, |stage| write_dataset(atlas_dirs, stage))
}

/// The dataset's files, written into `stage`; the number of rows.
fn write_dataset(atlas_dirs: &[PathBuf], stage: &Path) -> Result<u64> {
    let mut n_files = 0usize;
    for dir in atlas_dirs {
        n_files += super::AtlasManifest::load(dir)?.shards.len();
    }
    let mut written = Vec::new();
    let mut rows = 0u64;
    let mut features: Option<Value> = None;
    let mut fingerprint = Sha256::new();
    for dir in atlas_dirs {
        let manifest = super::AtlasManifest::load(dir)?;
        for shard in &manifest.shards {
            fingerprint.update(shard.sha256.as_bytes());
        }
        let mut writer: Option<(StreamWriter<BufWriter<File>>, PathBuf, u64)> = None;
        let mut hf_schema: Option<Arc<Schema>> = None;
        let mut shard_rows = 0u64;
        let mut shard_idx = 0usize;
        let target_rows: Vec<u64> = manifest.shards.iter().map(|s| s.cells).collect();
        for_each_batch(dir, |rb| {
            if writer.is_none() {
                let name = format!("data-{:05}-of-{n_files:05}.arrow", written.len());
                let path = stage.join(&name);
                let (feats, schema) = hf_schema_of(&rb.schema())?;
                features.get_or_insert(feats);
                let file = BufWriter::new(File::create(&path).at(&path)?);
                let w = StreamWriter::try_new(file, &schema).map_err(|e| Error::parquet(&path, e))?;
                hf_schema = Some(schema);
                writer = Some((w, path, 0));
                written.push(name);
            }
            let (w, path, n) = writer.as_mut().expect("opened above"); // ok: invariant
            let schema = hf_schema.clone().expect("set with the writer"); // ok: invariant
            let rb = rb.clone().with_schema(schema).map_err(|e| Error::parquet(&*path, e))?;
            w.write(&rb).map_err(|e| Error::parquet(&*path, e))?;
            *n += rb.num_rows() as u64;
            shard_rows += rb.num_rows() as u64;
            if shard_rows >= target_rows[shard_idx] {
                let (w, path, n) = writer.take().expect("open"); // ok: invariant
                finish(w, &path)?;
                rows += n;
                shard_rows = 0;
                shard_idx += 1;
            }
            Ok(())
        })?;
        if let Some((w, path, n)) = writer.take() {
            finish(w, &path)?;
            rows += n;
        }
    }
    write_dataset_metadata(stage, &written, features, &hex::encode(&fingerprint.finalize()[..8]))?;
    Ok(rows)
}

/// The `datasets` features of a corpus schema, and the schema with them in its `huggingface`
/// metadata (what `datasets` reads back).
fn hf_schema_of(schema: &Schema) -> Result<(Value, Arc<Schema>)> {
    let feats: serde_json::Map<String, Value> =
        schema.fields().iter().map(|f| Ok((f.name().clone(), feature_of(f.data_type())?))).collect::<Result<_>>()?;
    let feats = Value::Object(feats);
    let meta = json!({"info": {"features": feats}}).to_string();
    let schema = Arc::new(Schema::new_with_metadata(
        schema.fields().clone(),
        [("huggingface".to_string(), meta)].into_iter().collect::<std::collections::HashMap<_, _>>(),
    ));
    Ok((feats, schema))
}

/// Renames the staged files to their final `-of-` total and writes `dataset_info.json` and
/// `state.json`.
fn write_dataset_metadata(stage: &Path, written: &[String], features: Option<Value>, fingerprint: &str) -> Result<()> {
    // Shards with no cells produce no file; renumber the "-of-" total to what exists.
    let total = written.len();
    let mut data_files = Vec::new();
    for (i, name) in written.iter().enumerate() {
        let final_name = format!("data-{i:05}-of-{total:05}.arrow");
        std::fs::rename(stage.join(name), stage.join(&final_name)).at(stage.join(name))?;
        data_files.push(json!({"filename": final_name}));
    }
    let info = json!({
        "builder_name": null, "citation": "", "config_name": null, "dataset_name": null,
        "dataset_size": null, "description": "corrflow token corpus", "download_checksums": null,
        "download_size": null, "features": features.unwrap_or(json!({})), "homepage": "",
        "license": "", "size_in_bytes": null, "splits": null, "supervised_keys": null, "version": null
    });
    let state = json!({
        "_data_files": data_files,
        "_fingerprint": fingerprint,
        "_format_columns": null, "_format_kwargs": {}, "_format_type": null,
        "_output_all_columns": false, "_split": null
    });
    write_json_atomic(&stage.join("dataset_info.json"), &info)?;
    Ok(write_json_atomic(&stage.join("state.json"), &state)?)
}

fn finish(mut w: StreamWriter<BufWriter<File>>, path: &Path) -> Result<()> {
    w.finish().map_err(|e| Error::parquet(path, e))?;
    let file = w.into_inner().map_err(|e| Error::parquet(path, e))?;
    file.into_inner().map_err(|e| Error::io(path, e.into_error()))?.sync_all().at(path)
}
