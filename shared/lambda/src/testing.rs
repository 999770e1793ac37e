//! A stand-in for the Lambda Runtime API (feature `test-support`), for tests of what a
//! function posts during its cold start: it records every request and answers
//! `202 Accepted`. Nothing emulates the Runtime API's init phase (cargo-lambda's
//! emulator serves invocations), so this is a plain HTTP/1.1 listener on 127.0.0.1.
//! Panics are the point here.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RecordedRequest {
    /// The value of a header, by its name in any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct RuntimeApiStub {
    address: String,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
}

impl RuntimeApiStub {
    /// Listens on a free port; serves until the test process ends.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("local address").to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let request = read_request(&stream);
                // Recorded before the answer: once the caller has its response, the
                // request is visible to the test.
                recorded.lock().unwrap().push(request);
                let mut stream = stream;
                let body = r#"{"status":"OK"}"#;
                let _ = write!(
                    stream,
                    "HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        RuntimeApiStub { address, requests }
    }

    /// `host:port`, the form of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.address.clone()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().unwrap().clone()
    }
}

fn read_request(stream: &TcpStream) -> RecordedRequest {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("request line");
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().expect("a numeric content-length"))
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("the body");
    RecordedRequest {
        method,
        path,
        headers,
        body: String::from_utf8(body).expect("a UTF-8 body"),
    }
}

/// Runs a function binary (`CARGO_BIN_EXE_<name>`) with only `vars` and a stand-in
/// Runtime API in its environment: what a cold start prints and what it posted.
pub fn cold_start(
    binary: &str,
    vars: &[(&str, &str)],
) -> (std::process::Output, Vec<RecordedRequest>) {
    let api = RuntimeApiStub::start();
    let output = std::process::Command::new(binary)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", api.address())
        .envs(vars.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run {binary}: {e}"));
    (output, api.requests())
}

/// `2025-01-01T00:00:00.000000Z ...`: a log line that starts with an RFC 3339 time.
pub fn starts_with_a_timestamp(line: &str) -> bool {
    let time = line.split(' ').next().unwrap_or("");
    time.len() >= 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T'
}

/// The cold start failed with one timestamped text line naming `error_type` and
/// `message`, nothing on stderr, and one post to the init-error endpoint with them.
pub fn assert_init_error_reported(
    out: &std::process::Output,
    requests: &[RecordedRequest],
    error_type: &str,
    message: &str,
) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert_eq!(stderr, "", "no Debug dump on stderr");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = lines[0];
    assert!(starts_with_a_timestamp(line), "{line}");
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(error_type), "{line}");
    assert!(line.contains(message), "{line}");

    assert_eq!(requests.len(), 1, "{requests:?}");
    let r = &requests[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/2018-06-01/runtime/init/error")
    );
    assert_eq!(
        r.header("Lambda-Runtime-Function-Error-Type"),
        Some(error_type)
    );
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("JSON body");
    assert_eq!(
        body,
        serde_json::json!({"errorType": error_type, "errorMessage": message})
    );
}
