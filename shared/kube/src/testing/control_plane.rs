//! [`ControlPlane`]: a real Kubernetes control plane for one test, started by
//! `tests/kube/up.sh` and stopped when the value is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::Client;
use serde::Deserialize;
use serde_json::{Value, json};

use super::objects::{self, Refused};
use crate::client::{ApiRate, StaticToken, client_for_endpoint};
use crate::cluster::KubeCluster;

/// The repository's root (the test scripts live under it).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Which of Karpenter's CRD sets is installed (see tests/kube/crds.lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crds {
    /// Karpenter v1.15.1: NodePool, NodeClaim, NodeOverlay, CapacityBuffer, EC2NodeClass.
    Karpenter1_15_1,
    /// Karpenter v1.1.1's NodePool and NodeClaim (no NodeOverlay, no CapacityBuffer), as
    /// a cluster that installed them then and never upgraded them.
    Karpenter1_1_1,
    /// None: a cluster without Karpenter's CRDs.
    None,
}

/// How a control plane is started. `Options::default()`: every component (etcd,
/// kube-apiserver, kube-controller-manager, kube-scheduler, KWOK), Karpenter v1.15.1's
/// CRDs and `infra/rbac.yaml` applied.
#[derive(Debug, Clone)]
pub struct Options {
    pub crds: Crds,
    /// Run kube-controller-manager, kube-scheduler and KWOK (else etcd and kube-apiserver
    /// alone: nothing binds, runs or recreates pods but the test).
    pub controllers: bool,
    /// Apply `infra/rbac.yaml` (the functions' ClusterRole and its binding).
    pub rbac: bool,
    /// How long a KWOK node's lease lasts (renewed at a quarter of it).
    pub node_lease_seconds: u32,
    pub apiserver_args: Vec<String>,
    pub controller_manager_args: Vec<String>,
    pub scheduler_args: Vec<String>,
    pub kwok_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            crds: Crds::Karpenter1_15_1,
            controllers: true,
            rbac: true,
            node_lease_seconds: 40,
            apiserver_args: Vec::new(),
            controller_manager_args: Vec::new(),
            scheduler_args: Vec::new(),
            kwok_args: Vec::new(),
        }
    }
}

impl Options {
    /// etcd and kube-apiserver only, with Karpenter v1.15.1's CRDs and the RBAC: the
    /// objects stay exactly as the test writes them.
    pub fn api_server_only() -> Self {
        Options {
            controllers: false,
            ..Options::default()
        }
    }

    pub fn with_crds(mut self, crds: Crds) -> Self {
        self.crds = crds;
        self
    }

    pub fn with_apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    pub fn with_controller_manager_arg(mut self, arg: impl Into<String>) -> Self {
        self.controller_manager_args.push(arg.into());
        self
    }
}

/// DIR/control-plane.json, as `controlplane up` writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    pub server: String,
    pub ca_file: PathBuf,
    pub kubeconfig: PathBuf,
    pub admin_token: String,
    pub users: std::collections::BTreeMap<String, User>,
    pub etcd: String,
    pub kubernetes_version: String,
    pub crds: Vec<String>,
    pub components: Vec<String>,
    pub audit_log: PathBuf,
    pub logs: PathBuf,
    pub ready_seconds: f64,
    pub kwok_node_annotation: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub token: String,
    pub groups: Vec<String>,
    pub kubeconfig: PathBuf,
}

/// The user the functions run as: in the group `infra/rbac.yaml` binds.
pub const NODEWRIGHT_USER: &str = "nodewright";

/// A running control plane on loopback, stopped (with everything it started) on drop.
/// Its files (logs, audit log, kubeconfigs) are kept when the test panicked, and their
/// directory printed.
pub struct ControlPlane {
    dir: PathBuf,
    info: Info,
    ca_pem: Vec<u8>,
    admin: Client,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("server", &self.info.server)
            .finish()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let stopped = Command::new("bash")
            .arg(repository().join("tests/kube/down.sh"))
            .arg(&self.dir)
            .status();
        if !matches!(stopped, Ok(s) if s.success()) {
            eprintln!(
                "stopping the control plane in {} failed: {stopped:?}",
                self.dir.display()
            );
        }
        if std::thread::panicking() {
            eprintln!(
                "the control plane's logs and audit log: {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

static STARTED: AtomicU64 = AtomicU64::new(0);

impl ControlPlane {
    /// Every component, Karpenter v1.15.1's CRDs and the functions' RBAC. Panics, with
    /// the components' logs, when it cannot start (a test cannot go on without it).
    pub async fn start() -> ControlPlane {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> ControlPlane {
        let dir = std::env::temp_dir().join(format!(
            "nodewright-kube-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let root = repository();
        let mut args: Vec<String> = vec![
            root.join("tests/kube/up.sh").display().to_string(),
            dir.display().to_string(),
            format!("--owner-pid={}", std::process::id()),
            format!(
                "--node-lease-duration-seconds={}",
                options.node_lease_seconds
            ),
        ];
        match options.crds {
            Crds::Karpenter1_15_1 => {}
            Crds::Karpenter1_1_1 => args.push(format!(
                "--crds={}",
                root.join("target/kube/crds/karpenter-v1.1.1").display()
            )),
            Crds::None => args.push("--crds=".into()),
        }
        if options.rbac {
            args.push(format!(
                "--apply={}",
                root.join("infra/rbac.yaml").display()
            ));
        }
        if !options.controllers {
            args.push("--components=none".into());
        }
        for (flag, values) in [
            ("--apiserver-arg", &options.apiserver_args),
            ("--controller-manager-arg", &options.controller_manager_args),
            ("--scheduler-arg", &options.scheduler_args),
            ("--kwok-arg", &options.kwok_args),
        ] {
            args.extend(values.iter().map(|v| format!("{flag}={v}")));
        }
        let output = tokio::task::spawn_blocking(move || Command::new("bash").args(&args).output())
            .await
            .expect("the start of the control plane")
            .expect("bash runs tests/kube/up.sh");
        if !output.status.success() {
            panic!(
                "the control plane did not start ({}):\n{}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let info: Info = serde_json::from_slice(
            &std::fs::read(dir.join("control-plane.json")).expect("control-plane.json"),
        )
        .expect("control-plane.json is what controlplane up writes");
        let ca_pem = std::fs::read(&info.ca_file).expect("the control plane's CA");
        let admin = client_for_endpoint(
            &info.server,
            Some(&ca_pem),
            Arc::new(StaticToken(info.admin_token.clone())),
            // The test's own writes: not paced like the functions'.
            ApiRate {
                qps: 1000.0,
                burst: 1000,
            },
        )
        .expect("an admin client");
        ControlPlane {
            dir,
            info,
            ca_pem,
            admin,
        }
    }

    pub fn info(&self) -> &Info {
        &self.info
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.info.server
    }

    /// The CA the server's certificate is signed by (PEM).
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    /// The cluster-admin kubeconfig (`kubectl --kubeconfig`).
    pub fn kubeconfig(&self) -> &Path {
        &self.info.kubeconfig
    }

    /// The functions' identity: a user in the group `infra/rbac.yaml` binds.
    pub fn nodewright(&self) -> &User {
        &self.info.users[NODEWRIGHT_USER]
    }

    /// A client as cluster-admin (for the test's own reads and writes).
    pub fn admin(&self) -> &Client {
        &self.admin
    }

    /// The admin's bearer token.
    pub fn admin_token(&self) -> &str {
        &self.info.admin_token
    }

    /// A client to the server that adds nothing — no token, pacing, retries or response
    /// timeout (watches stream for minutes) — for a proxy that forwards another client's
    /// requests, that client's own `Authorization` included.
    pub fn forwarding_client(&self) -> Client {
        crate::client::install_crypto_provider();
        let mut config = kube::Config::new(self.server().parse().expect("the server's URL"));
        config.root_cert = Some(crate::client::parse_ca(self.ca_pem()).expect("the server's CA"));
        config.default_retry = false;
        config.read_timeout = None;
        Client::try_from(config).expect("a client to the control plane")
    }

    /// The components' processes now running, (name, pid): `etcd`, `kube-apiserver`
    /// and whichever others were started — for a benchmark's reading of their CPU time
    /// and memory in /proc (Linux).
    pub fn component_processes(&self) -> Vec<(String, u32)> {
        let supervisor = std::fs::read_to_string(self.dir.join("supervisor.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok());
        let Some(supervisor) = supervisor else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut components = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            // The parent is field 4 of /proc/PID/stat, after the parenthesised name.
            let parent = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                });
            if parent != Some(supervisor) {
                continue;
            }
            // Each component is the supervisor's own binary run as `controlplane NAME ...`.
            let name = std::fs::read(entry.path().join("cmdline"))
                .ok()
                .and_then(|cmdline| {
                    let arg = cmdline.split(|b| *b == 0).nth(1)?;
                    Some(String::from_utf8_lossy(arg).into_owned())
                });
            if let Some(name) = name {
                components.push((name, pid));
            }
        }
        components.sort();
        components
    }

    /// The product's cluster port as the functions reach EKS: TLS to this server,
    /// authenticated as the `nodewright` user, paced at the default rate.
    pub fn cluster(&self) -> KubeCluster {
        self.cluster_at(self.server(), Some(self.ca_pem()), &self.nodewright().token)
    }

    /// The product's cluster port through `endpoint` (a [`super::FaultProxy`]'s URL)
    /// with `token`.
    pub fn cluster_at(&self, endpoint: &str, ca_pem: Option<&[u8]>, token: &str) -> KubeCluster {
        KubeCluster::from_endpoint(
            endpoint,
            ca_pem,
            Arc::new(StaticToken(token.to_string())),
            ApiRate::default(),
        )
        .expect("a client for the control plane")
    }

    /// `kubectl` (Debian's, from `tests/kube/kubectl.sh`) with the cluster-admin
    /// kubeconfig.
    pub fn kubectl(&self) -> Command {
        let output = Command::new("bash")
            .arg(repository().join("tests/kube/kubectl.sh"))
            .output()
            .expect("bash runs tests/kube/kubectl.sh");
        assert!(
            output.status.success(),
            "tests/kube/kubectl.sh: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let mut command = Command::new(path);
        command.env("KUBECONFIG", self.kubeconfig());
        command
    }

    /// Creates `object` or replaces the object of that name, with its status; the object
    /// as stored. Panics when the server refuses it.
    pub async fn put(&self, object: Value) -> Value {
        let what = describe(&object);
        objects::put(&self.admin, object)
            .await
            .unwrap_or_else(|e| panic!("putting {what}: {e}"))
    }

    /// Like [`ControlPlane::put`], returning the server's refusal instead of panicking.
    pub async fn try_put(&self, object: Value) -> Result<Value, Refused> {
        objects::put(&self.admin, object).await
    }

    pub async fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        objects::get(&self.admin, kind, namespace, name)
            .await
            .unwrap_or_else(|e| panic!("getting {kind} {name}: {e}"))
    }

    /// Every object of the kind, each with `apiVersion` and `kind`.
    pub async fn list(&self, kind: &str) -> Vec<Value> {
        objects::list(&self.admin, kind)
            .await
            .unwrap_or_else(|e| panic!("listing {kind}: {e}"))
    }

    /// Edits the object (and its status) under optimistic concurrency; `None` when there
    /// is none.
    pub async fn modify(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        change: impl FnMut(&mut Value),
    ) -> Option<Value> {
        objects::modify(&self.admin, kind, namespace, name, change)
            .await
            .unwrap_or_else(|e| panic!("modifying {kind} {name}: {e}"))
    }

    /// Deletes the object at once (grace period 0); it as it was, `None` when there was none.
    pub async fn remove(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        objects::remove(&self.admin, kind, namespace, name)
            .await
            .unwrap_or_else(|e| panic!("removing {kind} {name}: {e}"))
    }

    /// Uninstalls a CRD (`nodeoverlays.karpenter.sh`) and waits until the kind is no
    /// longer served.
    pub async fn uninstall(&self, crd: &str) {
        let _ = self
            .remove("CustomResourceDefinition", None, crd)
            .await
            .unwrap_or_else(|| panic!("no CRD {crd} to uninstall"));
        for _ in 0..200 {
            if self
                .get("CustomResourceDefinition", None, crd)
                .await
                .is_none()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("CRD {crd} still there 10 s after its deletion");
    }

    /// The cluster's current resourceVersion (etcd's revision), as a list answers it now.
    pub async fn revision(&self) -> u64 {
        let list = objects::send(
            &self.admin,
            http::Method::GET,
            "/api/v1/namespaces?limit=1",
            "application/json",
            None,
        )
        .await
        .expect("listing namespaces");
        list["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("a list's resourceVersion is etcd's revision")
    }

    /// Compacts etcd at its current revision, as kube-apiserver's periodic compaction
    /// does: a watch (or list) from an older resourceVersion that reaches etcd gets
    /// `410 Gone`. (kube-apiserver's watch cache answers watches within its own window
    /// without etcd; start with `--watch-cache=false` to send every watch to etcd.)
    pub async fn compact(&self) {
        let gateway = |path: &str, body: Value| {
            let url = format!("{}{path}", self.info.etcd);
            async move {
                tokio::task::spawn_blocking(move || {
                    let output = Command::new("curl")
                        .args(["-fsS", "-X", "POST", &url, "-d", &body.to_string()])
                        .output()
                        .expect("curl");
                    assert!(output.status.success(), "etcd {url}: {output:?}");
                    serde_json::from_slice::<Value>(&output.stdout).expect("etcd answers JSON")
                })
                .await
                .expect("etcd request")
            }
        };
        // Any key: the answer's header carries the revision.
        let range = gateway("/v3/kv/range", json!({"key": "AA=="})).await;
        let revision = range["header"]["revision"]
            .as_str()
            .expect("etcd's revision")
            .to_string();
        gateway(
            "/v3/kv/compaction",
            json!({"revision": revision, "physical": true}),
        )
        .await;
    }

    /// The audit log's events so far: every request of the functions' group, with
    /// `verb`, `objectRef`, `user` and `responseStatus.code`.
    pub fn audit_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.info.audit_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}
