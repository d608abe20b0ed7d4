//! `GET /openapi.json`: the OpenAPI 3.0.3 document, built once from `openapi-base.json` (info
//! and the shared schemas) and each endpoint's operation in [`super::ENDPOINTS`]; and the
//! helpers the endpoints' operations share.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::ENDPOINTS;

const BASE: &str = include_str!("openapi-base.json");

/// The served document.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let base: Map<String, Value> = serde_json::from_str(BASE).expect("openapi-base.json is a JSON object (tested)");
        let mut paths = Map::new();
        for e in ENDPOINTS {
            let item = paths.entry(e.path).or_insert_with(|| json!({}));
            item[e.method.openapi_key()] = (e.openapi)();
        }
        // `paths` after `info`, where OpenAPI documents put it.
        let mut doc = Map::new();
        for (key, value) in base {
            let info = key == "info";
            doc.insert(key, value);
            if info {
                doc.insert("paths".into(), Value::Object(std::mem::take(&mut paths)));
            }
        }
        serde_json::to_string_pretty(&doc).expect("a JSON value serializes")
    })
}

pub async fn handle() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document()).into_response()
}

pub fn openapi() -> Value {
    json!({"summary": "This document", "responses": {"200": {"description": "OpenAPI 3 document"}}})
}

/// A response whose body is the JSON schema `schema` of the components.
pub fn json_body(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}},
    })
}

/// An error response (`{"error": {"status", "message"}}`).
pub fn error_response(description: &str) -> Value {
    json_body(description, "Error")
}

/// The errors of an endpoint that reads cells and runs the model (`encode.rs`); `invalid`
/// extends the 422's description with the endpoint's own parameters.
pub fn model_errors(invalid: &str) -> Map<String, Value> {
    [
        ("401", "Missing or wrong bearer token".to_string()),
        (
            "408",
            "The body did not arrive within the server's --body-timeout-s, or arrived slower than \
             --min-body-bytes-per-s on average once --body-grace-s had passed"
                .to_string(),
        ),
        ("413", "Body larger than the server's limit, or more cells than one request may hold".to_string()),
        ("415", "The body is compressed (a Content-Encoding other than identity): send it uncompressed".to_string()),
        (
            "422",
            format!(
                "Invalid input (malformed JSON, mismatched genes/counts, negative or non-finite counts, non-integer \
                 counts (unless the server runs with --allow-normalized), token ids outside the vocabulary, a cell \
                 without any vocabulary gene){invalid}"
            ),
        ),
        ("429", "The request queue is full; retry after the Retry-After seconds".to_string()),
        ("503", "The model is still loading, or the server is shutting down".to_string()),
    ]
    .into_iter()
    .map(|(status, description)| (status.to_string(), error_response(&description)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document says OpenAPI 3.0.3, so it may use only 3.0's schema keywords: 3.1's
    /// `{"type": "null"}` and type arrays make openapi-spec-validator and client generators
    /// reject it (nullable values are `nullable: true`). python/tests/test_errors.py runs the
    /// validator itself on the served document.
    #[test]
    fn the_openapi_document_uses_only_openapi_3_0_schemas() {
        fn walk(v: &Value, at: &str, bad: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    match m.get("type") {
                        Some(Value::String(t)) if t == "null" => bad.push(format!("{at}: type null")),
                        Some(Value::Array(_)) => bad.push(format!("{at}: a type array")),
                        _ => {}
                    }
                    for (k, x) in m {
                        walk(x, &format!("{at}/{k}"), bad);
                    }
                }
                Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| walk(x, &format!("{at}/{i}"), bad)),
                _ => {}
            }
        }
        let doc: Value = serde_json::from_str(document()).unwrap();
        assert_eq!(doc["openapi"], "3.0.3");
        let mut bad = Vec::new();
        walk(&doc, "", &mut bad);
        assert!(bad.is_empty(), "OpenAPI 3.1-only constructs in a 3.0.3 document: {bad:?}");
    }

    /// Every endpoint of the table is in the document under its method, every `$ref` points at
    /// a schema of the base document, and the document has no other paths.
    #[test]
    fn the_document_describes_every_endpoint_of_the_table_and_nothing_else() {
        let doc: Value = serde_json::from_str(document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert_eq!(paths.len(), ENDPOINTS.len());
        for e in ENDPOINTS {
            let op = &paths[e.path][e.method.openapi_key()];
            assert!(op["summary"].is_string() && op["responses"].is_object(), "{}: {op}", e.path);
        }
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r.clone());
                    }
                    m.values().for_each(|x| refs(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(&doc, &mut all);
        for r in all {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{r}"));
            assert!(doc["components"]["schemas"].get(name).is_some(), "{r} is not a schema of the document");
        }
    }
}
