//! The part of the Lambda Runtime API a function's process talks to, on 127.0.0.1:
//! `GET /2018-06-01/runtime/invocation/next` is held until the bench releases an
//! event (Lambda's long poll), `POST .../invocation/{id}/response` and `.../error`
//! complete it, `POST .../init/error` records a failed cold start. The bench drives
//! it: [`RuntimeApi::signal`] says when the process asks for its next event (it is
//! idle from then on, so that is when its CPU time is read) and how each invocation
//! ended; [`RuntimeApi::release`] hands it an event.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};

const NEXT: &str = "/2018-06-01/runtime/invocation/next";
const INVOCATION: &str = "/2018-06-01/runtime/invocation/";
const INIT_ERROR: &str = "/2018-06-01/runtime/init/error";

/// One event handed to the function.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub request_id: String,
    pub payload: String,
    /// The invocation's timeout (the function's `Timeout` in template.yaml).
    pub timeout: Duration,
    pub function_arn: String,
}

/// What the function did, as the Runtime API saw it.
#[derive(Debug, Clone)]
pub enum Signal {
    /// It asked for its next event at this time.
    Waiting(Instant),
    Ended(Outcome),
}

/// How an invocation (or the cold start) ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Response {
        request_id: String,
        body: String,
        at: Instant,
    },
    Error {
        request_id: String,
        body: String,
        at: Instant,
    },
    InitError {
        error_type: String,
        body: String,
    },
}

struct Channels {
    waiting: mpsc::UnboundedSender<Instant>,
    events: Mutex<mpsc::UnboundedReceiver<Invocation>>,
    outcomes: mpsc::UnboundedSender<Outcome>,
}

pub struct RuntimeApi {
    address: String,
    waiting: mpsc::UnboundedReceiver<Instant>,
    events: mpsc::UnboundedSender<Invocation>,
    outcomes: mpsc::UnboundedReceiver<Outcome>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RuntimeApi {
    /// Listens on a free 127.0.0.1 port, serving on the current tokio runtime.
    pub async fn start() -> std::io::Result<RuntimeApi> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?.to_string();
        let (waiting_tx, waiting) = mpsc::unbounded_channel();
        let (events, events_rx) = mpsc::unbounded_channel();
        let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
        let channels = Arc::new(Channels {
            waiting: waiting_tx,
            events: Mutex::new(events_rx),
            outcomes: outcomes_tx,
        });
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let channels = channels.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let channels = channels.clone();
                        async move { Ok::<_, Infallible>(serve(&channels, request).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(RuntimeApi {
            address,
            waiting,
            events,
            outcomes,
            accept,
        })
    }

    /// `host:port`, the form of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What the function does next: ask for an event (it is idle from then on), or
    /// end an invocation or its cold start. `None` once the server is gone.
    pub async fn signal(&mut self) -> Option<Signal> {
        // An invocation's end is posted before the function asks for the next event:
        // when both are queued, the end comes first.
        tokio::select! {
            biased;
            outcome = self.outcomes.recv() => outcome.map(Signal::Ended),
            at = self.waiting.recv() => at.map(Signal::Waiting),
        }
    }

    /// Answers the function's pending (or next) `next` with this event.
    pub fn release(&self, invocation: Invocation) {
        // The receiver lives as long as the server task, which never ends.
        let _ = self.events.send(invocation);
    }
}

type Answer = Response<Full<Bytes>>;

async fn serve(channels: &Channels, request: Request<Incoming>) -> Answer {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let path = parts.uri.path();
    let at = Instant::now();
    match (&parts.method, path) {
        (&Method::GET, NEXT) => {
            let _ = channels.waiting.send(at);
            // One `next` at a time: the function never asks twice concurrently.
            let event = channels.events.lock().await.recv().await;
            match event {
                Some(invocation) => next_answer(&invocation),
                None => answer(StatusCode::INTERNAL_SERVER_ERROR, "the bench has stopped"),
            }
        }
        (&Method::POST, INIT_ERROR) => {
            let error_type = parts
                .headers
                .get("lambda-runtime-function-error-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let _ = channels
                .outcomes
                .send(Outcome::InitError { error_type, body });
            accepted()
        }
        (&Method::POST, p) if p.starts_with(INVOCATION) => {
            let rest = &p[INVOCATION.len()..];
            match rest.split_once('/') {
                Some((id, "response")) => {
                    let _ = channels.outcomes.send(Outcome::Response {
                        request_id: id.to_string(),
                        body,
                        at,
                    });
                    accepted()
                }
                Some((id, "error")) => {
                    let _ = channels.outcomes.send(Outcome::Error {
                        request_id: id.to_string(),
                        body,
                        at,
                    });
                    accepted()
                }
                _ => answer(StatusCode::NOT_FOUND, "unknown invocation path"),
            }
        }
        _ => answer(StatusCode::NOT_FOUND, "not part of the Runtime API"),
    }
}

fn next_answer(invocation: &Invocation) -> Answer {
    let deadline = SystemTime::now() + invocation.timeout;
    let deadline_ms = deadline
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .header("lambda-runtime-aws-request-id", &invocation.request_id)
        .header("lambda-runtime-deadline-ms", deadline_ms.to_string())
        .header(
            "lambda-runtime-invoked-function-arn",
            &invocation.function_arn,
        )
        .header(
            "lambda-runtime-trace-id",
            format!(
                "Root=1-{:08x}-{:024x};Parent={:016x};Sampled=0",
                deadline_ms / 1000,
                deadline_ms,
                deadline_ms
            ),
        )
        .body(Full::new(Bytes::from(invocation.payload.clone())))
        .unwrap_or_else(|_| answer(StatusCode::INTERNAL_SERVER_ERROR, "building the answer"))
}

fn accepted() -> Answer {
    answer(StatusCode::ACCEPTED, r#"{"status":"OK"}"#)
}

fn answer(status: StatusCode, body: &str) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
}
