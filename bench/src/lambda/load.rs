//! Writing the world into a real API server as fast as it takes it: objects go through
//! the API as any client's would (create, then `.status` through the `/status`
//! subresource, which a create ignores), [`IN_FLIGHT`] requests at a time, as the
//! cluster's administrator (exempt from API Priority and Fairness, unpaced here). The
//! objects are generated on a blocking thread and handed over through a short
//! channel: 125,000 pods are never held at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Method;
use kube::Client;
use nodewright_kube::testing::ControlPlane;
use nodewright_kube::testing::objects::{self, Refused, kind_info};
use nodewright_kube::{ApiRate, StaticToken};
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;

/// Requests in flight: enough to keep kube-apiserver and etcd busy on a few cores.
const IN_FLIGHT: usize = 32;
/// Tries of one request the server could not take (unreachable, 429, 5xx).
const ATTEMPTS: u32 = 6;
/// How often progress is reported while loading.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);
const STRICT: &str = "fieldValidation=Strict";

/// What a load wrote.
#[derive(Debug, Clone, Copy, Default)]
pub struct Loaded {
    pub objects: usize,
    pub pods: usize,
    pub requests: usize,
    pub seconds: f64,
    /// CPU seconds kube-apiserver and etcd spent meanwhile, and the bench (generating,
    /// encoding and sending): who set the pace. Measured by the caller.
    pub server_cpu_s: f64,
    pub bench_cpu_s: f64,
}

/// A cluster-admin client with no pacing of its own: the server sets the pace.
pub fn admin_client(control_plane: &ControlPlane) -> Result<Client, String> {
    nodewright_kube::client::client_for_endpoint(
        control_plane.server(),
        Some(control_plane.ca_pem()),
        Arc::new(StaticToken(control_plane.admin_token().to_string())),
        ApiRate {
            qps: 1e6,
            burst: IN_FLIGHT as u32,
        },
    )
    .map_err(|e| format!("an admin client: {e}"))
}

/// Writes every object `generate` hands to its callback, in any order (nothing in a
/// world depends on another object existing first). `what` names the load in the
/// progress lines on stderr.
pub async fn load<G>(client: &Client, what: &str, generate: G) -> Result<Loaded, String>
where
    G: FnOnce(&mut dyn FnMut(Value)) -> Result<(), String> + Send + 'static,
{
    let started = Instant::now();
    let (tx, rx) = mpsc::channel::<Value>(IN_FLIGHT * 4);
    let generator = tokio::task::spawn_blocking(move || {
        // A closed channel means a write failed: the rest is generated and dropped.
        generate(&mut |object| {
            let _ = tx.blocking_send(object);
        })
    });
    let rx = Arc::new(Mutex::new(rx));
    let objects = Arc::new(AtomicUsize::new(0));
    let pods = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let mut writers = JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let (client, rx) = (client.clone(), rx.clone());
        let (objects, pods, requests) = (objects.clone(), pods.clone(), requests.clone());
        writers.spawn(async move {
            loop {
                let Some(object) = rx.lock().await.recv().await else {
                    return Ok::<_, String>(());
                };
                let is_pod = object["kind"] == "Pod";
                requests.fetch_add(write(&client, object).await?, Ordering::Relaxed);
                objects.fetch_add(1, Ordering::Relaxed);
                pods.fetch_add(usize::from(is_pod), Ordering::Relaxed);
            }
        });
    }
    let progress = tokio::spawn({
        let (objects, what) = (objects.clone(), what.to_string());
        async move {
            let mut tick = tokio::time::interval(PROGRESS_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let n = objects.load(Ordering::Relaxed);
                let s = started.elapsed().as_secs_f64();
                eprintln!(
                    "  {what}: {n} objects in {s:.0} s ({:.0} a second)",
                    n as f64 / s
                );
            }
        }
    });
    let mut failed = None;
    while let Some(done) = writers.join_next().await {
        let outcome = done
            .map_err(|e| format!("a writer failed: {e}"))
            .and_then(|r| r);
        if let Err(e) = outcome {
            failed.get_or_insert(e);
            writers.abort_all();
            // The generator's sends now fail: it runs to its end without blocking.
            rx.lock().await.close();
        }
    }
    progress.abort();
    let generated = generator
        .await
        .map_err(|e| format!("generating the objects: {e}"))?;
    if let Some(e) = failed {
        return Err(format!("{what}: {e}"));
    }
    generated?;
    Ok(Loaded {
        objects: objects.load(Ordering::Relaxed),
        pods: pods.load(Ordering::Relaxed),
        requests: requests.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
        ..Loaded::default()
    })
}

/// Creates the object, then writes its status; replaces an object of that name that is
/// already there (the namespaces a server starts with). The requests it took.
async fn write(client: &Client, mut object: Value) -> Result<usize, String> {
    let kind = object["kind"].as_str().unwrap_or("?").to_string();
    let info = kind_info(&kind);
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    let ns = namespace.as_deref();
    let status = if info.status {
        object.as_object_mut().and_then(|o| o.remove("status"))
    } else {
        None
    };
    let collection = format!("{}?{STRICT}", info.collection(ns));
    let (created, mut requests) = retried(|| {
        objects::send(
            client,
            Method::POST,
            &collection,
            "application/json",
            Some(&object),
        )
    })
    .await;
    match created {
        Ok(_) => {}
        Err(e) if e.code == 409 => {
            if let Some(status) = status {
                object["status"] = status;
            }
            objects::put(client, object)
                .await
                .map_err(|e| format!("replacing {kind} {name}: {e}"))?;
            return Ok(requests + 2);
        }
        Err(e) => return Err(format!("creating {kind} {name}: {e}")),
    }
    if let Some(status) = status {
        let path = format!("{}/status?{STRICT}", info.object(ns, &name));
        let patch = json!({ "status": status });
        let (written, more) = retried(|| {
            objects::send(
                client,
                Method::PATCH,
                &path,
                "application/merge-patch+json",
                Some(&patch),
            )
        })
        .await;
        requests += more;
        written.map_err(|e| format!("writing the status of {kind} {name}: {e}"))?;
    }
    Ok(requests)
}

/// `request` again while the server could not take it (unreachable, 429, 5xx), with a
/// growing pause: the answer, and how many requests it took.
async fn retried<F, Fut>(mut request: F) -> (Result<Value, Refused>, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, Refused>>,
{
    let mut attempt = 1;
    loop {
        let answer = request().await;
        let again = matches!(&answer, Err(e) if matches!(e.code, 0 | 429 | 500..=504));
        if !again || attempt == ATTEMPTS {
            return (answer, attempt as usize);
        }
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        attempt += 1;
    }
}
