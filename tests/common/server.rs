//! A `corrflow serve` process on loopback for the tests, and a blocking HTTP client.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
