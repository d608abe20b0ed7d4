//! The test predictions as Parquet: per cell (or per gene occurrence) its true and predicted
//! class, the predicted class's probability, and every class's.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{ArrayRef, Float32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use corrflow_io::error::{Error, Result};
use corrflow_io::util::parquet_out::write_parquet_atomic;
use corrflow_io::vocab::Vocabulary;

use super::evaluate::Predictions;
use super::labels::Supervision;

pub(crate) fn write_predictions(path: &Path, p: &Predictions, s: &Supervision, vocab: &Vocabulary) -> Result<()> {
    let k = s.classes.len();
    let predicted = p.predicted(k);
    let mut list = FixedSizeListBuilder::new(Float32Builder::with_capacity(p.probabilities.len()), k as i32);
    for row in p.probabilities.chunks(k) {
        list.values().append_slice(row);
        list.append(true);
    }
    let names = |classes: &mut dyn Iterator<Item = usize>| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(classes.map(|c| s.classes[c].as_str())))
    };
    let mut fields = vec![Field::new("cell_id", DataType::Utf8, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from_iter_values(&p.cells))];
    if s.genes {
        fields.push(Field::new("gene_id", DataType::Utf8, false));
        columns.push(Arc::new(StringArray::from_iter_values(p.items.iter().map(|&t| super::gene_name(vocab, t)))));
    }
    fields.extend([
        Field::new("label", DataType::Utf8, false),
        Field::new("predicted", DataType::Utf8, false),
        Field::new("probability", DataType::Float32, false),
        Field::new(
            "probabilities",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), k as i32),
            true,
        ),
    ]);
    columns.push(names(&mut p.truth.iter().copied()));
    columns.push(names(&mut predicted.iter().copied()));
    columns.push(Arc::new(Float32Array::from_iter_values(
        predicted.iter().enumerate().map(|(i, &c)| p.probabilities[i * k + c]),
    )));
    columns.push(Arc::new(list.finish()));
    let rb = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| Error::parquet(path, e))?;
    write_parquet_atomic(path, &rb)
}
