//! Opening an embeddings Parquet file (`embed`'s `cell_id`/`gene_id` + `embedding`) for the eval
//! commands, its schema checked before any row is read, so that a file of the wrong shape is
//! named for what is wrong with it rather than called damaged.

use std::fs::File;
use std::path::Path;

use arrow_schema::{DataType, Schema};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use corrflow_io::error::{Error, IoContext, Result};

/// A reader of `path`'s record batches and the embedding's width; `ids` names the id column
/// the caller needs (`None`: none) and `hint` how such a file is written.
pub(crate) fn open(path: &Path, ids: Option<&str>, hint: &str) -> Result<(ParquetRecordBatchReader, usize)> {
    let file = File::open(path).at(path)?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::parquet_read(path, e))?;
    let dim = check_schema(builder.schema(), ids, hint).map_err(|msg| Error::format(path, msg))?;
    let reader = builder.build().map_err(|e| Error::parquet_read(path, e))?;
    Ok((reader, dim))
}

/// The embedding's width, or what is wrong with the columns.
fn check_schema(schema: &Schema, ids: Option<&str>, hint: &str) -> std::result::Result<usize, String> {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if names.is_empty() {
        return Err(format!("the table has no columns, so no embeddings ({hint})"));
    }
    let columns = names.join(", ");
    if let Some(id) = ids {
        match schema.field_with_name(id).map(|f| f.data_type()) {
            Ok(DataType::Utf8) => {}
            Ok(other) => return Err(format!("column '{id}' is {other}, not a string ({hint})")),
            Err(_) => return Err(format!("no '{id}' column (columns: {columns}; {hint})")),
        }
    }
    let field = schema
        .field_with_name("embedding")
        .map_err(|_| format!("no 'embedding' column (columns: {columns}; {hint})"))?;
    match field.data_type() {
        DataType::FixedSizeList(_, 0) => {
            Err(format!("column 'embedding' is 0 wide: a fixed-size list of no values per row ({hint})"))
        }
        DataType::FixedSizeList(item, n) if item.data_type() == &DataType::Float32 => Ok(*n as usize),
        DataType::FixedSizeList(item, _) => {
            Err(format!("column 'embedding' holds {}, not float32 ({hint})", item.data_type()))
        }
        other => Err(format!("column 'embedding' is {other}, not a fixed-size list of float32 ({hint})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;
    use std::sync::Arc;

    fn schema(fields: Vec<Field>) -> Schema {
        Schema::new(fields)
    }

    #[test]
    fn each_wrong_shape_is_named() {
        let id = Field::new("cell_id", DataType::Utf8, false);
        let list = |n| DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), n);
        let hint = "write it with corrflow embed";
        let ok = schema(vec![id.clone(), Field::new("embedding", list(8), true)]);
        assert_eq!(check_schema(&ok, Some("cell_id"), hint), Ok(8));
        let cases = [
            (schema(vec![]), "no columns"),
            (schema(vec![id.clone()]), "no 'embedding' column (columns: cell_id"),
            (schema(vec![id.clone(), Field::new("embedding", list(0), true)]), "0 wide"),
            (schema(vec![Field::new("embedding", list(4), true)]), "no 'cell_id' column"),
            (
                schema(vec![Field::new("cell_id", DataType::Int64, false), Field::new("embedding", list(4), true)]),
                "not a string",
            ),
            (schema(vec![id.clone(), Field::new("embedding", DataType::Float32, true)]), "not a fixed-size list"),
        ];
        for (s, needle) in cases {
            let err = check_schema(&s, Some("cell_id"), hint).unwrap_err();
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }
}
