//! Peak memory and CPU of what a provisioner or disruption tick holds: the cluster
//! gathered through the Kubernetes API (the same `KubeCluster::state()` the Lambda
//! functions call: the first call lists every kind and starts the watches, later ones
//! read the watched view) and a provisioning plan over it. The API is a real
//! kube-apiserver and etcd (`nodewright_kube::testing`, started by tests/kube/up.sh),
//! loaded from a snapshot file; the gather runs in a child process as the functions'
//! user, over TLS, whose peak RSS (VmHWM) and CPU time (getrusage) are the figures: the
//! first read (what a cold start pays), a tick's read of the view, and a poll
//! (`unbound_pods`, every 5 s), each in CPU-seconds.
//!
//! ```sh
//! nodewright bench --suite command --runs 1 --dir /tmp/nw-bench   # writes cluster-1000.json, cluster-5000.json
//! cargo run --release -p nodewright-kube --features testing --example gather_memory -- \
//!     /tmp/nw-bench/cluster-1000.json /tmp/nw-bench/real-nodepools.yaml
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::ClusterSnapshot;
use nodewright_core::pricing::Pricing;
use nodewright_core::provisioning::{ProvisioningInput, plan_provisioning};
use nodewright_engine::ports::Cluster;
use nodewright_kube::testing::{ControlPlane, Options, objects};
use nodewright_kube::{ApiRate, KubeCluster, StaticToken};
use serde_json::{Value, json};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, server, ca_file, token] if flag == "--child" => child(server, ca_file, token),
        [snapshot, pools] => parent(snapshot, pools),
        _ => Err("usage: gather_memory SNAPSHOT.json NODEPOOLS.yaml".into()),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// The object as a client would create it: without what the API server fills in.
fn as_created(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
            "generation",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
    object
}

fn parent(snapshot: &str, pools: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(snapshot).map_err(|e| format!("{snapshot}: {e}"))?;
    let list: Value = serde_json::from_str(&text).map_err(|e| format!("{snapshot}: {e}"))?;
    drop(text);
    let pools_text = std::fs::read_to_string(pools).map_err(|e| format!("{pools}: {e}"))?;
    let mut objects: Vec<Value> = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&pools_text) {
        let object: Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("{pools}: {e}"))?;
        if !object.is_null() {
            objects.push(object);
        }
    }
    let mut counts = (0usize, 0usize);
    let mut skipped = BTreeSet::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let kind = item["kind"].as_str().unwrap_or_default();
        match kind {
            "Node" => counts.0 += 1,
            "Pod" => counts.1 += 1,
            _ => {}
        }
        if objects::KINDS.iter().any(|k| k.kind == kind) {
            objects.push(as_created(item.clone()));
        } else {
            skipped.insert(kind.to_string());
        }
    }
    drop(list);
    if !skipped.is_empty() {
        eprintln!("not loaded (kinds the test helpers do not write): {skipped:?}");
    }
    let namespaces: BTreeSet<String> = objects
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str().map(str::to_string))
        .collect();
    let rt = runtime()?;
    rt.block_on(async {
        let cp = ControlPlane::start_with(Options::api_server_only()).await;
        for namespace in namespaces {
            let ns =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
            if let Err(e) = cp.try_put(ns).await
                && e.code != 409
            {
                return Err(format!("namespace {namespace}: {e}"));
            }
        }
        let loaded = Instant::now();
        let total = objects.len();
        let failures: Vec<String> = futures_util::stream::iter(objects)
            .map(|object| {
                let cp = &cp;
                async move {
                    let what = format!(
                        "{} {}",
                        object["kind"].as_str().unwrap_or("?"),
                        object["metadata"]["name"].as_str().unwrap_or("?")
                    );
                    cp.try_put(object)
                        .await
                        .err()
                        .map(|e| format!("{what}: {e}"))
                }
            })
            .buffer_unordered(32)
            .filter_map(|failure| async move { failure })
            .collect()
            .await;
        if let Some(first) = failures.first() {
            return Err(format!(
                "{} of {total} objects refused, the first: {first}",
                failures.len()
            ));
        }
        eprintln!(
            "{total} objects loaded in {:.1} s",
            loaded.elapsed().as_secs_f64()
        );
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let args = [
            "--child".to_string(),
            cp.server().to_string(),
            cp.info().ca_file.display().to_string(),
            cp.nodewright().token.clone(),
        ];
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(exe).args(args).output()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "the gather failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        println!(
            "{} nodes, {} pods through the Kubernetes API: {}",
            counts.0,
            counts.1,
            stdout.trim()
        );
        Ok(())
    })
}

/// One tick's worth: gather, plan, then report the high-water mark.
fn child(server: &str, ca_file: &str, token: &str) -> Result<(), String> {
    let rt = runtime()?;
    rt.block_on(async {
        let baseline = vm_hwm_mb();
        let ca = std::fs::read(ca_file).map_err(|e| format!("{ca_file}: {e}"))?;
        let cluster = KubeCluster::from_endpoint(
            server,
            Some(&ca),
            Arc::new(StaticToken(token.to_string())),
            ApiRate::default(),
        )
        .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let cpu_before = cpu_seconds();
        let state = cluster.state().await.map_err(|e| e.to_string())?;
        let gathered = started.elapsed();
        let first_cpu = cpu_seconds() - cpu_before;
        let gather_peak = vm_hwm_mb();
        // What a warm process pays: a tick's read, and polls, from the watched view.
        const READS: u32 = 5;
        let cpu_before = cpu_seconds();
        for _ in 0..READS {
            let again = cluster.state().await.map_err(|e| e.to_string())?;
            std::hint::black_box(again);
        }
        let tick_read_cpu = (cpu_seconds() - cpu_before) / f64::from(READS);
        const POLLS: u32 = 20;
        let cpu_before = cpu_seconds();
        for _ in 0..POLLS {
            let pending = cluster.unbound_pods().await.map_err(|e| e.to_string())?;
            std::hint::black_box(pending);
        }
        let poll_cpu = (cpu_seconds() - cpu_before) / f64::from(POLLS);
        let snapshot = ClusterSnapshot {
            nodes: state.nodes,
            pods: state.pods,
            daemonsets: state.daemonsets,
            pdbs: state.pdbs,
            workloads: Vec::new(),
            services: Vec::new(),
            controllers: Vec::new(),
            autoscalers: Vec::new(),
        };
        let pricing = Pricing::default();
        let plan = plan_provisioning(&ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &state.node_pools,
            node_classes: &state.node_classes,
            catalog: Catalog::embedded(),
            pricing: &pricing,
            in_flight: &[],
        });
        println!(
            "gather {:.2} s ({:.3} CPU-s: the first read, listing every kind); a tick's read of the watched view {:.3} CPU-s; a poll {:.4} CPU-s; peak RSS {:.1} MB after the gather, {:.1} MB after planning ({} claims); {:.1} MB before anything",
            gathered.as_secs_f64(),
            first_cpu,
            tick_read_cpu,
            poll_cpu,
            gather_peak,
            vm_hwm_mb(),
            plan.node_claims.len(),
            baseline
        );
        Ok(())
    })
}

/// User + system CPU time of this process so far (every thread), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct it is given and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// VmHWM of this process in MB (10^6 bytes); 0 off Linux.
fn vm_hwm_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib * 1024.0 / 1e6)
}
