//! `annotate`'s Parquet rows: per cell the leaf-argmax, the greedy path and the reliable call,
//! each with its probability, and the labels scored against when there are any.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder};
use arrow_array::{Array, ArrayRef, Float32Array, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};

use crate::annotate::calls::CellCall;
use corrflow_io::corpus::columns::{missing, CELL_ID};
use corrflow_io::error::{Error, Result};

use super::truth::RowTruth;

/// The batch's cell ids.
pub(super) fn cell_ids(rb: &RecordBatch, path: &Path) -> Result<Vec<String>> {
    let ids = rb
        .column_by_name(CELL_ID)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| missing(path, CELL_ID))?;
    Ok((0..ids.len()).map(|i| ids.value(i).to_string()).collect())
}

/// The record batch of `calls` (one per cell id).
pub(super) fn calls_batch(
    ids: &[String],
    calls: &[CellCall],
    truth: Option<&RowTruth>,
    path: &Path,
) -> Result<RecordBatch> {
    let text = |f: &dyn Fn(&CellCall) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from(calls.iter().map(f).collect::<Vec<_>>()))
    };
    let number = |f: &dyn Fn(&CellCall) -> Option<f32>| -> ArrayRef {
        Arc::new(Float32Array::from(calls.iter().map(f).collect::<Vec<_>>()))
    };
    let mut path_ids = ListBuilder::new(StringBuilder::new());
    let mut path_probs = ListBuilder::new(Float32Builder::new());
    for c in calls {
        for t in &c.greedy {
            path_ids.values().append_value(&t.id);
            path_probs.values().append_value(t.probability as f32);
        }
        path_ids.append(true);
        path_probs.append(true);
    }
    let list = |item: DataType| DataType::List(Arc::new(Field::new("item", item, true)));
    let mut fields = vec![
        Field::new(CELL_ID, DataType::Utf8, false),
        Field::new("leaf_id", DataType::Utf8, false),
        Field::new("leaf_label", DataType::Utf8, false),
        Field::new("leaf_probability", DataType::Float32, false),
        Field::new("greedy_path", list(DataType::Utf8), false),
        Field::new("greedy_probabilities", list(DataType::Float32), false),
        Field::new("call_id", DataType::Utf8, true),
        Field::new("call_label", DataType::Utf8, true),
        Field::new("call_probability", DataType::Float32, true),
        Field::new("call_depth", DataType::UInt32, true),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(ids)),
        text(&|c| Some(c.leaf.id.clone())),
        text(&|c| Some(c.leaf.label.clone())),
        number(&|c| Some(c.leaf.probability as f32)),
        Arc::new(path_ids.finish()),
        Arc::new(path_probs.finish()),
        text(&|c| c.call.as_ref().map(|t| t.id.clone())),
        text(&|c| c.call.as_ref().map(|t| t.label.clone())),
        number(&|c| c.call.as_ref().map(|t| t.probability as f32)),
        Arc::new(UInt32Array::from(calls.iter().map(|c| c.call.as_ref().map(|t| t.depth)).collect::<Vec<_>>())),
    ];
    if let Some(t) = truth {
        fields.push(Field::new("truth_label", DataType::Utf8, true));
        fields.push(Field::new("truth_id", DataType::Utf8, true));
        cols.push(Arc::new(StringArray::from(t.labels.clone())));
        cols.push(Arc::new(StringArray::from(t.ids.clone())));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| Error::parquet(path, e))
}
