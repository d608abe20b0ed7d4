//! A `corrflow serve` process on loopback for the tests, and a blocking HTTP client.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{atlas_tokens, TinyModel};

pub struct Server {
    pub child: Child,
    pub url: String,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(model: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_corrflow"));
        cmd.args(["serve", "--json", "--model", model.to_str().unwrap(), "--addr", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("corrflow serve: listening on ") {
                    let _ = tx.send(url.to_string());
                }
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(60)).expect("server did not report its address");
        Server { child, url, log }
    }

    pub fn wait_ready(&self) {
        let start = Instant::now();
        while get(&format!("{}/health", self.url), None).0 != 200 {
            assert!(start.elapsed() < Duration::from_secs(60), "not ready: {}", self.log.lock().unwrap());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit status and stdout.
    pub fn terminate(mut self) -> (bool, String) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap()).wait_with_output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn respond(r: Result<ureq::Response, ureq::Error>) -> (u16, String) {
    match r {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("transport error: {e}"),
    }
}

pub fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = ureq::get(url);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.call() {
        Err(ureq::Error::Transport(_)) => (0, String::new()),
        r => respond(r),
    }
}

pub fn post(url: &str, body: &str, token: Option<&str>) -> (u16, String) {
    let mut req = ureq::post(url).set("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    respond(req.send_string(body))
}

/// The JSON of a response body (panics, showing it, if it is not JSON).
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Real cells' tokens of the tiny model's corpus, cut to the model's input layout.
pub fn cells(f: &TinyModel, n: usize) -> Vec<Vec<u32>> {
    let exported = corrflow::model_meta::open_exported(&f.model).unwrap();
    let keep = exported.meta.tokenize_layout().max_genes;
    atlas_tokens(&f.corpus, "pbmc").into_iter().take(n).map(|(_, t)| t.into_iter().take(keep).collect()).collect()
}

/// The `embeddings` of an `/v1/embed` answer.
pub fn embeddings(body: &str) -> Vec<Vec<f32>> {
    serde_json::from_value(json(body)["embeddings"].clone()).unwrap()
}

/// Sends `request` (its Host header added) on a fresh connection and returns what comes back.
pub fn raw_request(url: &str, request: &str) -> String {
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

/// The value of an unlabelled metric in a `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Polls `/metrics` until `ok` holds for `name`'s value (panics after 60 s).
pub fn wait_for_metric(server: &Server, name: &str, ok: impl Fn(f64) -> bool) {
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
