//! `serve` over loopback: embeddings equal the offline runtime's for token ids and for raw
//! counts; concurrent clients each get their own cells back; every error status (400, 401, 404,
//! 408, 413, 422, 429, 503) comes with a JSON message, the 400s hyper answers itself included;
//! overload gives 429s and no crash; slow uploads are cut off under the minimum rate and cannot
//! take the slots of small requests; metrics count it all; SIGTERM shuts down gracefully with a
//! summary.

use crate::common;

use std::sync::Mutex;
use std::time::Duration;

use common::server::{get, post, Server};
use common::*;

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Real cells' tokens, cut to the model's input layout.
fn cells(f: &TinyModel, n: usize) -> Vec<Vec<u32>> {
    let exported = corrflow::model_meta::open_exported(&f.model).unwrap();
    let keep = exported.meta.tokenize_layout().max_genes;
    atlas_tokens(&f.corpus, "pbmc").into_iter().take(n).map(|(_, t)| t.into_iter().take(keep).collect()).collect()
}

/// The runtime's embeddings of `cells`, each run alone (no batching, no padding).
fn offline(f: &TinyModel, cells: &[Vec<u32>]) -> Vec<Vec<f32>> {
    let mut enc = corrflow::runtime::OrtEncoder::open(&f.model, &Default::default()).unwrap();
    let pad = enc.vocab.pad;
    cells.iter().map(|c| enc.embed(&corrflow::runtime::PaddedBatch::new([c.as_slice()], pad)).unwrap()).collect()
}

fn embeddings(body: &str) -> Vec<Vec<f32>> {
    serde_json::from_value(json(body)["embeddings"].clone()).unwrap()
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

/// Sends `request` (its Host header added) on a fresh connection and returns what comes back.
fn raw_request(url: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (line, rest) = request.split_once("\r\n").unwrap();
    write!(stream, "{line}\r\nHost: {addr}\r\n{rest}").unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&answer).contains("\"error\"") && answer.ends_with(b"}") {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature (make test enables it)")]
fn a_full_server_answers_429_before_reading_the_body() {
    use std::io::{Read, Write};
    let f = tiny_model();
    // Batches take 12 s, so admitted requests stay in flight.
    let server = Server::start(
        &f.model,
        &["--max-queue", "1", "--batch-wait-ms", "0"],
        &[("FAILPOINTS", "serve-batch=sleep(12000)")],
    );
    server.wait_ready();
    let url = format!("{}/v1/embed", server.url);
    let body = serde_json::json!({"input_ids": cells(f, 1)}).to_string();
    let addr = server.url.trim_start_matches("http://").to_string();
    std::thread::scope(|s| {
        // --max-queue 1 admits two requests at once: both wait for the slow batch.
        let waiting: Vec<_> = (0..2).map(|_| s.spawn(|| post(&url, &body, None))).collect();
        // Wait until both are admitted: a fixed sleep here lost that race on a loaded machine
        // (the third was admitted and waited for its body).
        let start = std::time::Instant::now();
        while !get(&format!("{}/metrics", server.url), None).1.contains("corrflow_requests_in_flight 2\n") {
            assert!(start.elapsed() < Duration::from_secs(30), "the two requests were never both in flight");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Issue 43: `Expect: 100-continue` gets the 429 instead of `100 Continue`: the body is
        // never asked for, and the connection closes after the answer (it was held open, waiting
        // for a body the client rightly never sends, until the read timeout below).
        let mut cont = std::net::TcpStream::connect(&addr).unwrap();
        cont.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(cont, "POST /v1/embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\nExpect: 100-continue\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        cont.read_to_end(&mut answer).expect("the connection closes after the 429");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(!answer.contains("100 Continue"), "the body was asked for: {answer}");
        // A third declares a 10 MB body and sends none of it: a server that read bodies before
        // admission would wait for it; this one answers at once.
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        // Without admission before the body the server would wait for the body forever.
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(stream, "POST /v1/embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n").unwrap();
        let mut answer = [0u8; 256];
        let n = stream.read(&mut answer).expect("an answer without the body");
        let head = String::from_utf8_lossy(&answer[..n]).to_string();
        assert!(head.starts_with("HTTP/1.1 429"), "{head}");
        assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
        drop(stream);
        // Clients that send their whole (8 MiB) body before reading, as `http.client` and
        // `requests` do, all read their answer: each refused body is drained, not cut off with a
        // reset (issue 43: past a shared 16 MiB drain budget they saw broken pipes).
        let answers: Vec<Result<String, String>> = (0..8)
            .map(|_| s.spawn(|| send_whole_body_then_read(&addr, &vec![b' '; 8 << 20])))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|c| c.join().unwrap())
            .collect();
        let refused = answers.iter().filter(|a| matches!(a, Ok(h) if h.starts_with("HTTP/1.1 429"))).count();
        assert!(answers.iter().all(Result::is_ok), "transport errors: {answers:?}");
        assert!(refused > 0, "{answers:?}");
        for w in waiting {
            let (status, text) = w.join().unwrap();
            assert_eq!(status, 200, "{text}");
        }
    });
}

/// Writes a request with `body` in full, then reads the answer's head: `Err` for a transport
/// error (a reset or broken pipe), as `http.client` would see it.
fn send_whole_body_then_read(addr: &str, body: &[u8]) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /v1/embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(|e| format!("sending the head: {e}"))?;
    stream.write_all(body).map_err(|e| format!("sending the body: {e}"))?;
    let mut answer = [0u8; 512];
    let n = stream.read(&mut answer).map_err(|e| format!("reading the answer: {e}"))?;
    match n {
        0 => Err("closed without an answer".into()),
        n => Ok(String::from_utf8_lossy(&answer[..n]).into_owned()),
    }
}

/// The value of an unlabelled metric in a `/metrics` text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Polls `/metrics` until `ok` holds for `name`'s value (panics after 60 s).
fn wait_for_metric(server: &Server, name: &str, ok: impl Fn(f64) -> bool) {
    let start = std::time::Instant::now();
    loop {
        let (_, m) = get(&format!("{}/metrics", server.url), None);
        if metric(&m, name).is_some_and(&ok) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{name} never reached the value awaited: {m}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens a connection and sends a request head declaring `declared` body bytes, then `sent` of
/// them, and nothing more.
fn stalled_upload(addr: &str, declared: usize, sent: usize) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        stream,
        "POST /v1/embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    )
    .unwrap();
    stream.write_all(&vec![b' '; sent]).unwrap();
    stream
}

#[test]
fn a_stalled_upload_is_cut_off_after_the_body_timeout_and_does_not_hold_shutdown() {
    use std::io::{Read, Write};
    let f = tiny_model();
    let server = Server::start(&f.model, &["--body-timeout-s", "2"], &[]);
    server.wait_ready();
    let addr = server.url.trim_start_matches("http://").to_string();
    // Issue 43: an upload that stops halfway was held as long as its client wished (≥ 45 s).
    let mut stream = stalled_upload(&addr, 1000, 10);
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("the connection is closed after the 408, before the read timeout");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-timeout-s"), "{answer}");

    // SIGTERM while one upload stalls mid-body and another mid-headers: the server stops within
    // the timeout instead of waiting for them (the bound below is generous for a loaded machine).
    let _body = stalled_upload(&addr, 1000, 10);
    let mut head = std::net::TcpStream::connect(&addr).unwrap();
    write!(head, "POST /v1/embed HTTP/1.1\r\nHost: {addr}\r\n").unwrap();
    // (A small body is read before admission: it is open, but holds no request slot.)
    wait_for_metric(&server, "corrflow_request_bodies_open", |v| v == 1.0);
    let start = std::time::Instant::now();
    let pid = server.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let mut server = server;
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "serve still running 60 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{}", server.log.lock().unwrap());
    assert!(start.elapsed() < Duration::from_secs(30), "SIGTERM took {:?}", start.elapsed());
}

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature (make test enables it)")]
fn a_request_whose_client_disconnected_is_not_computed() {
    use std::io::Write;
    let f = tiny_model();
    // Each batch takes 3 s, so a second request waits in the queue.
    let server = Server::start(
        &f.model,
        &["--max-queue", "4", "--batch-wait-ms", "0"],
        &[("FAILPOINTS", "serve-batch=sleep(3000)")],
    );
    server.wait_ready();
    let url = format!("{}/v1/embed", server.url);
    let addr = server.url.trim_start_matches("http://").to_string();
    let cells = cells(f, 3);
    std::thread::scope(|s| {
        let first = s.spawn(|| post(&url, &serde_json::json!({"input_ids": [&cells[0]]}).to_string(), None));
        // The first request is in its batch once its queue wait is recorded.
        wait_for_metric(&server, "corrflow_queue_wait_seconds_count", |v| v == 1.0);
        // A second client sends two cells, waits until they are queued, and leaves.
        let body = serde_json::json!({"input_ids": &cells[1..]}).to_string();
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "POST /v1/embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        wait_for_metric(&server, "corrflow_queue_depth", |v| v == 1.0);
        stream.shutdown(std::net::Shutdown::Both).unwrap();
        drop(stream);
        let (status, text) = first.join().unwrap();
        assert_eq!(status, 200, "{text}");
    });
    // Issue 43: the gone client's cells used to be computed all the same.
    wait_for_metric(&server, "corrflow_requests_abandoned_total", |v| v == 1.0);
    let (_, m) = get(&format!("{}/metrics", server.url), None);
    assert_eq!(metric(&m, "corrflow_batch_cells_sum"), Some(1.0), "only the first request's cell ran: {m}");
    assert_eq!(metric(&m, "corrflow_cells_embedded_total"), Some(1.0), "{m}");
    // And the server still answers.
    assert_eq!(post(&url, &serde_json::json!({"input_ids": [&cells[1]]}).to_string(), None).0, 200);
}

/// Issue 51: a malformed head that hyper refuses before the router (duplicate conflicting
/// `Content-Length` headers, `Content-Length: -1`) gets the JSON error body every other 4xx has,
/// saying what is wrong, instead of a bare 400 with an empty body.
#[test]
fn a_malformed_content_length_gets_a_json_400() {
    let f = tiny_model();
    let server = Server::start(&f.model, &[], &[]);
    server.wait_ready();
    for (lengths, needle) in [
        ("Content-Length: 5\r\nContent-Length: 6\r\n", "conflicting Content-Length headers (5, 6)"),
        ("Content-Length: -1\r\n", "Content-Length '-1' is not a length"),
    ] {
        let answer = raw_request(
            &server.url,
            &format!("POST /v1/embed HTTP/1.1\r\nContent-Type: application/json\r\n{lengths}\r\nhello"),
        );
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer: {answer:?}"));
        assert!(head.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{answer}");
        let error = &json(body)["error"];
        assert_eq!(error["status"], 400, "{answer}");
        assert!(error["message"].as_str().unwrap().contains(needle), "{answer}");
    }
    // The server is unharmed.
    assert_eq!(post(&format!("{}/v1/embed", server.url), r#"{"input_ids":[[5,6]]}"#, None).0, 200);
}

/// Sends a request head declaring `declared` body bytes, then one byte every 100 ms (10
/// bytes/s), until the server answers (then it only reads, until the connection closes) or
/// `stop` is set; returns the answer.
fn drip(addr: &str, declared: usize, stop: &std::sync::atomic::AtomicBool) -> String {
    use std::io::{ErrorKind, Read, Write};
    let mut stream = stalled_upload(addr, declared, 1);
    // The wait for an answer is the pause between two bytes.
    stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let (mut answer, mut sent, mut buf) = (Vec::new(), 1, [0u8; 4096]);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if answer.is_empty() && sent < declared {
                    if stream.write_all(b" ").is_err() {
                        break;
                    }
                    sent += 1;
                }
            }
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// Issue 51: a body slower than `--min-body-bytes-per-s` gets 408 once `--body-grace-s` has
/// passed, long before the body timeout (an hour here), small or large, stalled or dripping.
#[test]
fn an_upload_under_the_minimum_rate_is_cut_off_after_the_grace_period() {
    let f = tiny_model();
    let server = Server::start(
        &f.model,
        &["--body-timeout-s", "3600", "--body-grace-s", "1", "--min-body-bytes-per-s", "1000"],
        &[],
    );
    server.wait_ready();
    let addr = server.url.trim_start_matches("http://").to_string();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let uploads: Vec<_> = [(1000, false), (4 << 20, false), (1000, true), (4 << 20, true)]
            .into_iter()
            .map(|(declared, dripping)| {
                let (addr, stop) = (&addr, &stop);
                s.spawn(move || {
                    if dripping {
                        return drip(addr, declared, stop);
                    }
                    let mut stream = stalled_upload(addr, declared, 10);
                    let mut answer = Vec::new();
                    // Without the minimum rate this read times out (60 s) without an answer.
                    let _ = std::io::Read::read_to_end(&mut stream, &mut answer);
                    String::from_utf8_lossy(&answer).into_owned()
                })
            })
            .collect();
        for u in uploads {
            let answer = u.join().unwrap();
            assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
            assert!(answer.contains("--min-body-bytes-per-s"), "{answer}");
        }
    });
    let (_, m) = get(&format!("{}/metrics", server.url), None);
    assert_eq!(metric(&m, "corrflow_request_bodies_too_slow_total"), Some(4.0), "{m}");
    assert_eq!(metric(&m, "corrflow_request_bodies_open"), Some(0.0), "{m}");
}

/// Issue 51: slow uploads, more than the server has request slots (`--max-queue 4`: 8), cannot
/// deny service: large ones are admitted before their body, at most 4 at once; small ones are
/// read first and hold no slot while they drip. A normal 4-cell request is answered 200 while
/// all of them are still dripping (the minimum rate is off here, so none is cut off).
#[test]
fn slow_uploads_cannot_take_the_slots_of_a_normal_request() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let f = tiny_model();
    let server =
        Server::start(&f.model, &["--max-queue", "4", "--body-timeout-s", "600", "--min-body-bytes-per-s", "0"], &[]);
    server.wait_ready();
    let addr = server.url.trim_start_matches("http://").to_string();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // 12 large (1 MiB declared) and 12 small (2 KB) uploads, each dripping.
        for k in 0..24 {
            let (addr, stop) = (&addr, &stop);
            s.spawn(move || drip(addr, if k % 2 == 0 { 1 << 20 } else { 2000 }, stop));
        }
        // The attack is in place: 4 large uploads admitted, every body open (the large ones
        // refused with 429 are being drained).
        wait_for_metric(&server, "corrflow_request_bodies_open", |v| v == 24.0);
        wait_for_metric(&server, "corrflow_requests_in_flight", |v| v == 4.0);
        let cell = serde_json::json!({"genes": ["CD74", "HLA-DRA", "MS4A1"], "counts": [12, 7, 3]});
        let body = serde_json::json!({"cells": [&cell, &cell, &cell, &cell]}).to_string();
        let (status, text) = post(&format!("{}/v1/embed", server.url), &body, None);
        stop.store(true, Ordering::Relaxed);
        assert_eq!(status, 200, "a normal request under a slow-upload attack: {text}");
        assert_eq!(embeddings(&text).len(), 4);
    });
}
