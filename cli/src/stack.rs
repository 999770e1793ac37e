//! `status` and `explain` on a deployed stack (`--table`), read-only: the table through
//! `DynamoStore`, the cluster through `KubeCluster` (kubeconfig), the dead-letter
//! queue's depth (SQS). Behind the `stack` feature: its SDK crates, kube-rs and their
//! TLS stacks were most of a first `cargo run --release -p nodewright-cli -- simulate`.
//! A build without it answers `--table` with the command that has it.

#[cfg(feature = "stack")]
use std::collections::BTreeSet;
#[cfg(feature = "stack")]
use std::path::{Path, PathBuf};

#[cfg(feature = "stack")]
use nodewright_core::catalog::Catalog;
#[cfg(feature = "stack")]
use nodewright_core::nodeclaim::NodeClaim;
#[cfg(feature = "stack")]
use nodewright_core::well_known::LABEL_ZONE;
#[cfg(feature = "stack")]
use nodewright_engine::ports::ClusterState;

use crate::failure::Failure;
#[cfg(feature = "stack")]
use crate::hints;
#[cfg(feature = "stack")]
use crate::observed::{LoggedDecision, ObservedCondition, observe};
use crate::observed::{SourceArgs, StatusInput};

/// The kubeconfig to read: `given`, else `KUBECONFIG`'s first file, else
/// ~/.kube/config; it must exist.
#[cfg(feature = "stack")]
fn kubeconfig_path(given: Option<&Path>) -> Result<PathBuf, Failure> {
    let kubeconfig = match given {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os("KUBECONFIG") {
            Some(p) if !p.is_empty() => {
                // The first file of a list, as kubectl reads it first.
                std::env::split_paths(&p).next().unwrap_or_default()
            }
            _ => std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".kube/config"))
                .ok_or_else(hints::no_home)?,
        },
    };
    if !kubeconfig.is_file() {
        return Err(hints::no_kubeconfig(&kubeconfig));
    }
    Ok(kubeconfig)
}

/// A runtime for one command's reads, on this thread.
#[cfg(feature = "stack")]
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Unusable(format!("cannot start the runtime: {e}")))
}

/// Reads the deployed stack whose table is `table`.
#[cfg(feature = "stack")]
pub fn read(args: &SourceArgs, table: &str) -> Result<StatusInput, Failure> {
    let kubeconfig = kubeconfig_path(args.kubeconfig.as_deref())?;
    if let Some(region) = &args.region {
        // SAFETY: no other thread runs yet (the runtime is built below), so nothing
        // reads the environment while it changes. The AWS SDK reads the region from it.
        unsafe { std::env::set_var("AWS_REGION", region) };
    }
    runtime()?.block_on(read_stack(args, table, &kubeconfig))
}

/// The kinds `simulate --cluster` reads from a file, as (group, version, kind,
/// plural): what `simulate --kubeconfig` lists.
#[cfg(feature = "stack")]
const SNAPSHOT_KINDS: [(&str, &str, &str, &str); 14] = [
    ("", "v1", "Node", "nodes"),
    ("", "v1", "Pod", "pods"),
    ("apps", "v1", "DaemonSet", "daemonsets"),
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "ReplicaSet", "replicasets"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("", "v1", "ReplicationController", "replicationcontrollers"),
    ("", "v1", "Service", "services"),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    ),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("", "v1", "PersistentVolume", "persistentvolumes"),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses"),
    ("storage.k8s.io", "v1", "CSINode", "csinodes"),
];

/// The cluster of `kubeconfig` (as [`read`] finds it) as a `List` of every object
/// `simulate --cluster` reads from a file: what `kubectl get
/// nodes,pods,... -A -o json` prints. Read only: it lists, in pages of 500 as kubectl
/// does, and writes nothing. Each page is written out as text as it comes, so the
/// read holds the list's text and one page, not every object parsed. Returns the
/// kubeconfig read and the list's JSON.
#[cfg(feature = "stack")]
pub fn cluster_list(kubeconfig: Option<&Path>) -> Result<(PathBuf, Vec<u8>), Failure> {
    let kubeconfig = kubeconfig_path(kubeconfig)?;
    let mut list = br#"{"apiVersion":"v1","kind":"List","items":["#.to_vec();
    runtime()?.block_on(async {
        let cluster = nodewright_kube::KubeCluster::from_kubeconfig(
            &kubeconfig,
            nodewright_kube::ApiRate::default(),
        )
        .await
        .map_err(|e| hints::cluster(&kubeconfig, "reading it", &e))?;
        let mut first = true;
        for kind in SNAPSHOT_KINDS {
            list_all(cluster.client(), kind, &mut list, &mut first)
                .await
                .map_err(|e| {
                    let what = format!("listing its {}", kind.3);
                    let kind = nodewright_kube::error::classify(&e);
                    let e = nodewright_engine::ports::ClusterError::with_source(kind, &what, e);
                    hints::cluster(&kubeconfig, &what, &e)
                })?;
        }
        Ok::<_, Failure>(())
    })?;
    list.extend_from_slice(b"]}");
    Ok((kubeconfig, list))
}

/// Every object of `kind` in every namespace, each with its `apiVersion` and `kind`
/// (a server leaves them off a list's items), written to `list` as items of a JSON
/// array (`first`: none is written yet, so no comma goes before it).
#[cfg(feature = "stack")]
async fn list_all(
    client: &kube::Client,
    (group, version, kind, plural): (&str, &str, &str, &str),
    list: &mut Vec<u8>,
    first: &mut bool,
) -> Result<(), kube::Error> {
    use kube::api::{Api, ApiResource, DynamicObject, ListParams, TypeMeta};
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.clone(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        for mut object in page.items {
            object.types = Some(TypeMeta {
                api_version: api_version.clone(),
                kind: kind.into(),
            });
            if !std::mem::take(first) {
                list.push(b',');
            }
            serde_json::to_writer(&mut *list, &object).map_err(kube::Error::SerdeError)?;
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}

/// Reads a deployed stack: claims and decisions from the table, the cluster, the
/// dead-letter queue's depth. Writes nothing.
#[cfg(feature = "stack")]
async fn read_stack(
    args: &SourceArgs,
    table: &str,
    kubeconfig: &std::path::Path,
) -> Result<StatusInput, Failure> {
    use nodewright_engine::ports::{ClaimStore as _, Cluster as _, DecisionLog as _};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let ctx = nodewright_aws::AwsContext::from_env().await;
    let Some(region) = ctx.region() else {
        return Err(hints::no_region());
    };
    let given_zones = given_zones(&args.zones, &region)?;
    let store = nodewright_aws::DynamoStore::new(&ctx, table);
    let cluster = nodewright_kube::KubeCluster::from_kubeconfig(
        kubeconfig,
        nodewright_kube::ApiRate::default(),
    )
    .await
    .map_err(|e| hints::cluster(kubeconfig, "reading it", &e))?;
    let since = now - i64::try_from(args.since.as_secs()).unwrap_or(i64::MAX / 2);
    let (claims, decisions, state) =
        tokio::join!(store.list_claims(), store.decisions(since), cluster.state());
    let claims = claims.map_err(|e| hints::store(table, &region, "listing claims", &e))?;
    let decisions = decisions.map_err(|e| hints::store(table, &region, "reading decisions", &e))?;
    let state = state.map_err(|e| hints::cluster(kubeconfig, "listing its objects", &e))?;
    let dead_letter_queue = match &args.dead_letter_queue_url {
        Some(url) => Some(dead_letters(url).await?),
        None => None,
    };
    let conditions = pool_conditions(&cluster).await?;
    let zones = zones_for(given_zones, &region, &state, &claims);
    let mut cluster = observe(
        &state,
        &claims,
        Catalog::embedded(),
        zones,
        now,
        args.spot_to_spot,
    );
    for (pool, conditions) in conditions {
        cluster.set_conditions(&pool, conditions);
    }
    Ok(StatusInput {
        now,
        source: format!("table {table}"),
        claims,
        decisions: decisions.into_iter().map(LoggedDecision::from).collect(),
        cluster,
        dead_letter_queue,
    })
}

/// Every NodePool's `status.conditions` (the engine's port reads specs only).
#[cfg(feature = "stack")]
async fn pool_conditions(
    cluster: &nodewright_kube::KubeCluster,
) -> Result<Vec<(String, Vec<ObservedCondition>)>, Failure> {
    use kube::api::{Api, ApiResource, DynamicObject, ListParams};
    let resource = ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: nodewright_core::api::NODE_POOL_API_VERSION.into(),
        kind: nodewright_core::api::NODE_POOL_KIND.into(),
        plural: "nodepools".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(cluster.client().clone(), &resource);
    let pools = api.list(&ListParams::default()).await.map_err(|e| match &e {
        kube::Error::Api(status) if status.code == 404 => Failure::Unusable(
            "the cluster serves no karpenter.sh/v1 NodePools: install Karpenter v1.15's CRDs (infra/crds.md), or set KUBECONFIG or --kubeconfig to the stack's cluster".into(),
        ),
        _ => Failure::Unusable(format!("the cluster: listing NodePools: {e}")),
    })?;
    let text = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(pools
        .items
        .into_iter()
        .filter_map(|p| {
            let name = p.metadata.name?;
            let conditions = p
                .data
                .pointer("/status/conditions")
                .and_then(serde_json::Value::as_array)
                .map(|list| {
                    list.iter()
                        .map(|c| ObservedCondition {
                            type_: text(c, "type"),
                            status: text(c, "status"),
                            reason: text(c, "reason"),
                            message: text(c, "message"),
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some((name, conditions))
        })
        .collect())
}

/// SQS `ApproximateNumberOfMessages` of the queue at `url`.
#[cfg(feature = "stack")]
async fn dead_letters(url: &str) -> Result<u64, Failure> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let out = aws_sdk_sqs::Client::new(&config)
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .map_err(|e| hints::dead_letter_queue(url, &e))?;
    out.attributes()
        .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            Failure::Unusable(format!(
                "dead-letter queue {url}: no ApproximateNumberOfMessages in the answer"
            ))
        })
}

/// `--zones` as given, trimmed, each a zone of the stack's `region`: planning in a
/// zone the region does not have would answer for capacity that cannot exist.
#[cfg(feature = "stack")]
fn given_zones(flag: &[String], region: &str) -> Result<Vec<String>, Failure> {
    let given: Vec<String> = flag
        .iter()
        .map(|z| z.trim().to_string())
        .filter(|z| !z.is_empty())
        .collect();
    let problems = crate::region::zone_problems(&given, Some(region));
    if problems.is_empty() {
        Ok(given)
    } else {
        Err(Failure::Invalid(
            problems
                .into_iter()
                .map(|p| format!("--zones: {p} (the stack is in {region})"))
                .collect(),
        ))
    }
}

/// Zones to plan in: `given` if any, else the claims' and nodes' zones, else the
/// region's first three.
#[cfg(feature = "stack")]
fn zones_for(
    given: Vec<String>,
    region: &str,
    state: &ClusterState,
    claims: &[NodeClaim],
) -> Vec<String> {
    if !given.is_empty() {
        return given;
    }
    let mut zones: BTreeSet<String> = claims
        .iter()
        .flat_map(|c| c.zones.iter().chain(c.zone.iter()).cloned())
        .collect();
    zones.extend(
        state
            .nodes
            .iter()
            .filter_map(|n| n.labels.get(LABEL_ZONE).cloned()),
    );
    if zones.is_empty() {
        return ["a", "b", "c"].map(|z| format!("{region}{z}")).to_vec();
    }
    zones.into_iter().collect()
}

/// Without the `stack` feature: the command to run instead, with the same arguments.
#[cfg(not(feature = "stack"))]
pub fn read(_args: &SourceArgs, _table: &str) -> Result<StatusInput, Failure> {
    Err(Failure::Unusable(without_stack(
        "reading a deployed stack (--table)",
        std::env::args().skip(1),
    )))
}

/// Without the `stack` feature: the command to run instead, with the same arguments.
#[cfg(not(feature = "stack"))]
pub fn cluster_list(
    _kubeconfig: Option<&std::path::Path>,
) -> Result<(std::path::PathBuf, Vec<u8>), Failure> {
    Err(Failure::Unusable(without_stack(
        "reading a live cluster (--kubeconfig)",
        std::env::args().skip(1),
    )))
}

/// What a build without the `stack` feature says to `what` (`--table`,
/// `--kubeconfig`): the same command (`args`, after the program's name) run with the
/// feature.
#[cfg_attr(feature = "stack", allow(dead_code))]
fn without_stack(what: &str, args: impl Iterator<Item = String>) -> String {
    let args: Vec<String> = args.map(|a| shell_word(&a)).collect();
    format!(
        "{what} needs nodewright built with the `stack` feature: run `cargo run --release -p nodewright-cli --features stack -- {}`",
        args.join(" ")
    )
}

/// `word` as a shell reads it back: quoted unless it is plain.
#[cfg_attr(feature = "stack", allow(dead_code))]
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_the_stack_feature_names_the_command_that_reads_a_stack() {
        let args = [
            "status",
            "--table",
            "nodewright-state",
            "--kubeconfig",
            "/tmp/my config",
        ];
        let line = without_stack(
            "reading a deployed stack (--table)",
            args.iter().map(|a| a.to_string()),
        );
        assert!(
            line.ends_with(
                "run `cargo run --release -p nodewright-cli --features stack -- status --table nodewright-state --kubeconfig '/tmp/my config'`"
            ),
            "{line}"
        );
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }

    #[cfg(feature = "stack")]
    #[test]
    fn zones_of_another_region_or_none_at_all_are_refused_for_the_stacks_region() {
        let zones = |z: &[&str]| z.iter().map(|z| z.to_string()).collect::<Vec<_>>();
        let Ok(given) = given_zones(&zones(&["eu-west-1a", " eu-west-1b "]), "eu-west-1") else {
            panic!("zones of the stack's region refused");
        };
        assert_eq!(given, zones(&["eu-west-1a", "eu-west-1b"]));
        for (wrong, region) in [
            ("us-east-1a", "eu-west-1"),
            ("west", "eu-west-1"),
            ("us-east-1z", "us-east-1"),
        ] {
            let Err(Failure::Invalid(lines)) = given_zones(&zones(&[wrong]), region) else {
                panic!("{wrong} accepted in {region}");
            };
            let message = lines.join("\n");
            assert!(message.starts_with("--zones: "), "{message}");
            assert!(message.contains(wrong), "{message}");
            assert!(
                message.ends_with(&format!("(the stack is in {region})")),
                "{message}"
            );
        }
        let empty = ClusterState::default();
        assert_eq!(
            zones_for(Vec::new(), "eu-west-1", &empty, &[]),
            zones(&["eu-west-1a", "eu-west-1b", "eu-west-1c"])
        );
    }
}
