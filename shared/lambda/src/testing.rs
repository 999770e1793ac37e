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
