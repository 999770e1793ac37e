//! The Deployments, StatefulSets and ReplicaSets CapacityBuffers name (`scalableRef`),
//! read by name and kept for [`WORKLOAD_TTL`]: watching every ReplicaSet of a large
//! cluster (ten revisions a Deployment) would cost more memory than the few a buffer
//! names, and Karpenter's buffer controller, too, reads them by name every 30 seconds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use kube::Client;
use kube::api::Api;

use nodewright_core::api::buffer::{APPS_GROUP, BufferSource, CapacityBuffer};
use nodewright_core::cluster::ScalableWorkload;
use nodewright_core::snapshot::{deployment_from_k8s, replicaset_from_k8s, statefulset_from_k8s};
use nodewright_engine::ports::{ClusterError, UnreadableKind};

use crate::error::cluster_error;

/// How long a workload read by name is used before it is read again (Karpenter
/// requeues each buffer every 30 s).
pub(crate) const WORKLOAD_TTL: Duration = Duration::from_secs(30);

/// (kind, namespace, name).
type Key = (String, String, String);

/// The workloads read so far, each with when (`None`: it did not exist).
#[derive(Default)]
pub(crate) struct Workloads {
    read: Mutex<HashMap<Key, (Instant, Option<ScalableWorkload>)>>,
}

impl Workloads {
    fn memory(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Key, (Instant, Option<ScalableWorkload>)>> {
        self.read.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every workload `buffers` name that exists. A kind RBAC forbids is recorded in
    /// `unreadable` (its buffers then read as not found); any other failure is the
    /// answer.
    pub(crate) async fn named(
        &self,
        client: &Client,
        buffers: &[CapacityBuffer],
        unreadable: &mut Vec<UnreadableKind>,
    ) -> Result<Vec<ScalableWorkload>, ClusterError> {
        let mut keys: Vec<Key> = buffers
            .iter()
            .filter_map(|b| match &b.source {
                Some(BufferSource::Scalable {
                    api_group,
                    kind,
                    name,
                }) if api_group.is_empty() || api_group == APPS_GROUP => {
                    Some((kind.clone(), b.namespace.clone(), name.clone()))
                }
                _ => None,
            })
            .collect();
        keys.sort();
        keys.dedup();
        let mut out = Vec::new();
        for key in keys {
            let fresh = self
                .memory()
                .get(&key)
                .filter(|(at, _)| at.elapsed() < WORKLOAD_TTL)
                .map(|(_, w)| w.clone());
            let workload = match fresh {
                Some(w) => w,
                None => match read(client, &key).await {
                    Ok(w) => {
                        self.memory()
                            .insert(key.clone(), (Instant::now(), w.clone()));
                        w
                    }
                    Err(e) if UnreadableKind::degrades(e.kind()) => {
                        let plural = format!("{}s", key.0.to_lowercase());
                        if !unreadable.iter().any(|u| u.kind == plural) {
                            unreadable.push(UnreadableKind {
                                kind: plural,
                                error_kind: e.kind(),
                                message: e.to_string(),
                            });
                        }
                        None
                    }
                    Err(e) => return Err(e),
                },
            };
            out.extend(workload);
        }
        Ok(out)
    }
}

/// One workload by kind, namespace and name; `None` when it does not exist (or is a
/// kind a `scalableRef` may not name).
async fn read(
    client: &Client,
    (kind, namespace, name): &Key,
) -> Result<Option<ScalableWorkload>, ClusterError> {
    let doing = || format!("reading {kind} {namespace}/{name} (a CapacityBuffer's scalableRef)");
    let workload = match kind.as_str() {
        "Deployment" => get::<Deployment>(client, namespace, name, doing)
            .await?
            .map(deployment_from_k8s),
        "StatefulSet" => get::<StatefulSet>(client, namespace, name, doing)
            .await?
            .map(statefulset_from_k8s),
        "ReplicaSet" => get::<ReplicaSet>(client, namespace, name, doing)
            .await?
            .map(replicaset_from_k8s),
        _ => None,
    };
    Ok(workload)
}

/// The namespaced object `name` of kind `K`; `None` when it does not exist.
async fn get<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    doing: impl Fn() -> String,
) -> Result<Option<K>, ClusterError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| cluster_error(doing(), e))
}
