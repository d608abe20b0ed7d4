//! `serve` over loopback, the API: embeddings equal the offline runtime's for token ids and for
//! raw counts; concurrent clients each get their own cells back; every error status (400, 401,
//! 404, 408, 413, 422, 429, 503) comes with a JSON message, the 400s hyper answers itself
//! included; overload gives 429s and no crash; metrics count it all; SIGTERM shuts down
//! gracefully with a summary. (Slow, stalled and abandoned uploads: `serve_uploads.rs`.)

use crate::common;

use std::sync::Mutex;

use common::server::*;
use common::*;

/// The runtime's embeddings of `cells`, each run alone (no batching, no padding).
fn offline(f: &TinyModel, cells: &[Vec<u32>]) -> Vec<Vec<f32>> {
    let mut enc = corrflow::runtime::OrtEncoder::open(&f.model, &Default::default()).unwrap();
    let pad = enc.vocab.pad;
    cells.iter().map(|c| enc.embed(&corrflow::runtime::PaddedBatch::new([c.as_slice()], pad)).unwrap()).collect()
}

#[test]
fn embeddings_match_the_offline_runtime_for_token_ids_raw_counts_and_concurrent_clients() {
    let f = tiny_model();
    let server = Server::start(&f.model, &[], &[]);
    server.wait_ready();
    let url = format!("{}/v1/embed", server.url);
    let cells = cells(f, 24);
    let want = offline(f, &cells);

    // Token ids, several cells of different lengths padded together.
    let body = serde_json::json!({"input_ids": cells[..6]}).to_string();
    let (status, text) = post(&url, &body, None);
    assert_eq!(status, 200, "{text}");
    let r = json(&text);
    assert_eq!(r["dim"], 64);
    assert_eq!(r["model"], "model");
    for (got, want) in embeddings(&text).iter().zip(&want) {
        assert!(max_abs_diff(got, want) <= 1e-4);
    }

    // Raw counts: genes and counts that tokenize to a known sequence (descending counts over
    // genes with equal medians would be fragile; use the tokenizer's own contract instead).
    let exported = corrflow::model_meta::open_exported(&f.model).unwrap();
    let vocab = &exported.vocab;
    let genes: Vec<String> = cells[0].iter().map(|&t| vocab.token(t).unwrap().to_string()).collect();
    let counts: Vec<f64> = (0..genes.len()).map(|i| 1.0 + (i % 7) as f64).collect();
    let mut with_unknown = genes.clone();
    with_unknown.push("NOT_A_GENE".into());
    let mut counts_unknown = counts.clone();
    counts_unknown.push(3.0);
    let expected = corrflow::tokenize::tokenize_named_cell(
        vocab,
        &exported.meta.tokenize_layout(),
        &with_unknown,
        &counts_unknown,
    )
    .unwrap();
    let body = serde_json::json!({"cells": [{"genes": with_unknown, "counts": counts_unknown}]}).to_string();
    let (status, text) = post(&url, &body, None);
    assert_eq!(status, 200, "{text}");
    let r = json(&text);
    assert_eq!(r["unknown_genes"], serde_json::json!([1]));
    assert_eq!(r["tokens"], serde_json::json!([expected.tokens.len()]));
    let want_counts = offline(f, &[expected.tokens]);
    assert!(max_abs_diff(&embeddings(&text)[0], &want_counts[0]) <= 1e-4);

    // Concurrent clients: each gets its own cells back, whatever batches they were put in.
    std::thread::scope(|s| {
        for t in 0..8 {
            let (url, cells, want) = (&url, &cells, &want);
            s.spawn(move || {
                for k in 0..5 {
                    let pick: Vec<usize> = (0..3).map(|j| (t * 3 + k + j * 5) % cells.len()).collect();
                    let ids: Vec<&Vec<u32>> = pick.iter().map(|&i| &cells[i]).collect();
                    let (status, text) = post(url, &serde_json::json!({"input_ids": ids}).to_string(), None);
                    assert_eq!(status, 200, "{text}");
                    for (got, &i) in embeddings(&text).iter().zip(&pick) {
                        assert!(max_abs_diff(got, &want[i]) <= 1e-4, "client {t} request {k}: cell {i} differs");
                    }
                }
            });
        }
    });

    let (status, info) = get(&format!("{}/info", server.url), None);
    assert_eq!(status, 200);
    assert_eq!(json(&info)["vocab"]["hash"], exported.meta.vocab_hash.as_str());
    let (status, spec) = get(&format!("{}/openapi.json", server.url), None);
    assert_eq!(status, 200);
    let spec = json(&spec);
    for path in ["/v1/embed", "/health", "/info", "/metrics", "/openapi.json"] {
        assert!(spec["paths"].get(path).is_some(), "openapi.json lacks {path}");
    }
    let (_, metrics) = get(&format!("{}/metrics", server.url), None);
    assert!(metrics.contains("corrflow_http_requests_total{endpoint=\"/v1/embed\",status=\"200\"} 42"), "{metrics}");
    assert!(metrics.contains("corrflow_cells_embedded_total 127"), "{metrics}");
    assert!(metrics.contains("corrflow_batch_cells_bucket"));
    assert!(metrics.contains("corrflow_http_request_duration_seconds_bucket"));
    let (ok, stdout) = server.terminate();
    assert!(ok, "serve did not exit cleanly on SIGTERM");
    let summary = json(stdout.trim().lines().last().unwrap());
    assert_eq!(summary["requests"], 42);
    assert_eq!(summary["cells"], 127);
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature (make test enables it)")]
fn every_error_status_has_a_json_message() {
    let f = tiny_model();
    let server = Server::start(
        &f.model,
        &["--max-body-bytes", "2000", "--max-cells", "2", "--token", "s3cret"],
        &[("FAILPOINTS", "serve-load=sleep(5000)")],
    );
    let url = format!("{}/v1/embed", server.url);
    let auth = Some("s3cret");
    // Loading: 503 from /health and /v1/embed.
    assert_eq!(get(&format!("{}/health", server.url), None).0, 503);
    let (status, text) = post(&url, r#"{"input_ids":[[5]]}"#, auth);
    assert_eq!(status, 503, "{text}");
    assert!(json(&text)["error"]["message"].as_str().unwrap().contains("loading"));
    server.wait_ready();
    for (body, token, status, needle) in [
        (r#"{"input_ids":[[5,6]]}"#.to_string(), None, 401, "bearer token"),
        (r#"{"input_ids":[[5,6]]}"#.to_string(), Some("wrong"), 401, "bearer token"),
        ("{".repeat(3000), auth, 413, "length limit"),
        (r#"{"input_ids":[[5],[6],[7]]}"#.to_string(), auth, 413, "limit is 2"),
        ("[1,2".to_string(), auth, 422, "invalid request body"),
        (r#"{"input_ids":[[999999]]}"#.to_string(), auth, 422, "outside the vocabulary"),
        (r#"{"cells":[{"genes":["TSPAN6"],"counts":[-1]}]}"#.to_string(), auth, 422, "finite"),
        (
            r#"{"cells":[{"genes":["nope"],"counts":[1]}]}"#.to_string(),
            auth,
            422,
            "none of its 1 genes is in the model's vocabulary",
        ),
        // Issue 44: a cell whose known genes all have count 0 is not "not in the vocabulary".
        (
            r#"{"cells":[{"genes":["TSPAN6","CD74"],"counts":[0,0]}]}"#.to_string(),
            auth,
            422,
            "no gene has a count above 0",
        ),
        (r#"{"input_ids":[[0,1,0]]}"#.to_string(), auth, 422, "no gene token"),
    ] {
        let (got, text) = post(&url, &body, token);
        assert_eq!(got, status, "{body:.60}: {text}");
        let msg = json(&text)["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{body:.60}: {msg}");
    }
    assert_eq!(post(&url, r#"{"input_ids":[[5,6]]}"#, auth).0, 200);
    // Issue 43: a malformed chunked body is a 400 saying so, not a 413 "over the length limit".
    let head = raw_request(
        &server.url,
        "POST /v1/embed HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\nzz\r\n{\"input_ids\":[[5]]}\r\n0\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert!(head.contains("could not be read") && !head.contains("length limit"), "{head}");
    assert_eq!(get(&format!("{}/nope", server.url), auth).0, 404);
    // A wrong method gets a JSON message too.
    let (status, text) = get(&url, auth);
    assert_eq!(status, 405, "{text}");
    assert!(json(&text)["error"]["message"].as_str().unwrap().contains("GET is not allowed on /v1/embed"), "{text}");
    assert_eq!(get(&format!("{}/health", server.url), None).0, 200, "/health needs no token");
    assert_eq!(get(&format!("{}/metrics", server.url), None).0, 401);
    let (_, m) = get(&format!("{}/metrics", server.url), auth);
    assert!(m.contains("status=\"422\"} 6") && m.contains("status=\"401\"} 2"), "{m}");
}

/// Issue 44: requests are tokenized as ingest tokenizes files, so non-integer counts are refused
/// (422, naming the flag) unless the server runs with --allow-normalized; a compressed body gets
/// 415 with `Accept-Encoding: identity`, not a JSON parse error.
#[test]
fn normalized_counts_need_allow_normalized_and_compressed_bodies_get_415() {
    let f = tiny_model();
    let body = r#"{"cells":[{"genes":["CD74","HLA-DRA","MS4A1"],"counts":[1.5,2,3]}]}"#;
    let strict = Server::start(&f.model, &[], &[]);
    strict.wait_ready();
    let url = format!("{}/v1/embed", strict.url);
    let (status, text) = post(&url, body, None);
    assert_eq!(status, 422, "{text}");
    let msg = json(&text)["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("gene 'CD74': a non-integer count (1.5)") && msg.contains("--allow-normalized"), "{msg}");
    assert_eq!(post(&url, &body.replace("1.5", "1"), None).0, 200);
    let gzipped = ureq::post(&url)
        .set("Content-Type", "application/json")
        .set("Content-Encoding", "gzip")
        .send_bytes(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    match gzipped {
        Err(ureq::Error::Status(415, r)) => {
            assert_eq!(r.header("Accept-Encoding"), Some("identity"));
            let text = r.into_string().unwrap();
            assert!(json(&text)["error"]["message"].as_str().unwrap().contains("Content-Encoding 'gzip'"), "{text}");
        }
        other => panic!("a gzip body did not get 415: {other:?}"),
    }
    drop(strict);
    let lenient = Server::start(&f.model, &["--allow-normalized"], &[]);
    lenient.wait_ready();
    let (status, text) = post(&format!("{}/v1/embed", lenient.url), body, None);
    assert_eq!(status, 200, "{text}");
    let (_, info) = get(&format!("{}/info", lenient.url), None);
    assert_eq!(json(&info)["allow_normalized"], true, "{info}");
}

#[test]
fn overload_gets_429s_and_the_server_keeps_serving() {
    let f = tiny_model();
    let server = Server::start(&f.model, &["--max-queue", "1", "--batch-wait-ms", "0", "--token-budget", "512"], &[]);
    server.wait_ready();
    let url = format!("{}/v1/embed", server.url);
    let cells = cells(f, 64);
    let body = serde_json::json!({"input_ids": cells}).to_string();
    let statuses = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..12 {
            s.spawn(|| {
                for _ in 0..4 {
                    let (status, text) = post(&url, &body, None);
                    assert!(status == 200 || status == 429, "{status}: {text}");
                    if status == 429 {
                        assert!(json(&text)["error"]["message"].as_str().unwrap().contains("queue is full"));
                    }
                    statuses.lock().unwrap().push(status);
                }
            });
        }
    });
    let statuses = statuses.into_inner().unwrap();
    let rejected = statuses.iter().filter(|&&s| s == 429).count();
    assert!(rejected > 0, "48 concurrent requests against a queue of 1 were all accepted");
    assert!(rejected < statuses.len(), "every request was rejected");
    // Still alive and correct.
    let (status, text) = post(&url, &serde_json::json!({"input_ids": [&cells[0]]}).to_string(), None);
    assert_eq!(status, 200);
    assert!(max_abs_diff(&embeddings(&text)[0], &offline(f, &cells[..1])[0]) <= 1e-4);
    let (_, m) = get(&format!("{}/metrics", server.url), None);
    assert!(m.contains(&format!("status=\"429\"}} {rejected}")), "{m}");
}

#[test]
fn a_model_that_cannot_load_stops_the_server_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let bogus = tmp.path().join("model.onnx");
    std::fs::write(&bogus, b"not a model").unwrap();
    let out = corrflow(&["serve", "--model", bogus.to_str().unwrap(), "--addr", "127.0.0.1:0"]);
    assert!(!out.status.success());
    // Nothing beside it records what it should be: the missing sidecar is the reason given.
    assert!(stderr(&out).contains("model.vocab is missing"), "{}", stderr(&out));
}
