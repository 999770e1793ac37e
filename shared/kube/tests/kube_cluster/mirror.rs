//! NodeClaim mirrors of the claims (`mirror_claims`): accepted by Karpenter's own
//! NodeClaim CRD (its schema and CEL rules, strict field validation), listed by
//! `kubectl get nodeclaims` with their nodes, written only when they differ, rewritten
//! when someone deletes one, deleted with their claims, never touching a NodeClaim
//! nodewright does not manage, and a backlog spread over passes.

use std::collections::BTreeMap;
use std::time::Duration;

use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, Disruption, DisruptionCause, NodeClaim};
use nodewright_engine::ports::Cluster;
use nodewright_kube::testing::FaultProxy;
use serde_json::json;

use super::{Setup, api_server, condition_of, eventually, kubectl};

const NODE_CLAIMS_PATH: &str = "/apis/karpenter.sh/v1/nodeclaims";

fn launching_claim(name: &str) -> NodeClaim {
    NodeClaim::launching(
        ClaimSpec {
            name: name.into(),
            node_pool: "general-purpose".into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.xlarge".into()],
            zones: vec!["us-east-1a".into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec!["default/web-0".into()],
            labels: Default::default(),
        },
        1_000,
    )
}

pub(super) fn initialized_claim(name: &str) -> NodeClaim {
    launching_claim(name)
        .transition(ClaimState::Launched, 1_010, |c| {
            c.instance_id = Some("i-0123456789abcdef0".into());
            c.instance_type = Some("m5.xlarge".into());
            c.zone = Some("us-east-1a".into());
            c.capacity_type = Some(CapacityType::OnDemand);
            c.price_per_hour = Some(0.192);
            c.launched_at = Some(1_010);
        })
        .and_then(|c| {
            c.transition(ClaimState::Registered, 1_050, |c| {
                c.node_name = Some("ip-10-0-0-1.ec2.internal".into());
                c.registered_at = Some(1_050);
            })
        })
        .and_then(|c| {
            c.transition(ClaimState::Initialized, 1_080, |c| {
                c.initialized_at = Some(1_080)
            })
        })
        .expect("allowed transitions")
}

fn disrupted(claim: &NodeClaim, cause: DisruptionCause) -> NodeClaim {
    claim
        .transition(ClaimState::Disrupting, 2_000, |c| {
            c.disruption = Some(Disruption {
                cause,
                deadline: None,
                since: 2_000,
                drain_after: None,
                drain_grace: None,
                event: None,
                command: None,
            })
        })
        .expect("an allowed transition")
}

/// A claim in every state and shape the provisioner mirrors: each live state, every
/// disruption cause, spot and several options, overlays applied, the pool's labels.
pub(super) fn every_kind_of_claim() -> Vec<NodeClaim> {
    const CAUSES: [DisruptionCause; 14] = [
        DisruptionCause::SpotInterrupted,
        DisruptionCause::RebalanceRecommended,
        DisruptionCause::InstanceStopped,
        DisruptionCause::InstanceTerminated,
        DisruptionCause::ScheduledChange,
        DisruptionCause::Unregistered,
        DisruptionCause::Expired,
        DisruptionCause::Drifted,
        DisruptionCause::Empty,
        DisruptionCause::Underutilized,
        DisruptionCause::Unhealthy,
        DisruptionCause::Overprovisioned,
        DisruptionCause::CapacityReservationExpiring,
        DisruptionCause::CapacityReservationInterrupted,
    ];
    let mut claims = vec![launching_claim("general-purpose-launching")];
    let mut spot = launching_claim("general-purpose-spot");
    spot.instance_type_options = vec![
        "m5.xlarge".into(),
        "m6a.xlarge".into(),
        "c6i.2xlarge".into(),
    ]
    .into();
    spot.zones = vec![
        "us-east-1a".into(),
        "us-east-1b".into(),
        "us-east-1c".into(),
    ];
    spot.capacity_types = vec![CapacityType::Spot, CapacityType::OnDemand];
    spot.labels = BTreeMap::from([
        ("team".to_string(), "web".to_string()),
        ("example.com/tier".to_string(), "frontend".to_string()),
    ]);
    claims.push(spot);
    let launched = launching_claim("general-purpose-launched")
        .transition(ClaimState::Launched, 1_010, |c| {
            c.instance_id = Some("i-0aaaaaaaaaaaaaaa1".into());
            c.instance_type = Some("m5.xlarge".into());
            c.zone = Some("us-east-1a".into());
            c.capacity_type = Some(CapacityType::Spot);
            c.price_per_hour = Some(0.0712);
            c.launched_at = Some(1_010);
        })
        .unwrap();
    claims.push(launched.clone());
    let registered = launched
        .transition(ClaimState::Registered, 1_050, |c| {
            c.node_name = Some("ip-10-0-0-2.ec2.internal".into());
            c.registered_at = Some(1_050);
        })
        .unwrap();
    let mut registered = registered;
    registered.name = "general-purpose-registered".into();
    claims.push(registered);
    let mut overlaid = initialized_claim("general-purpose-overlaid");
    overlaid.overlays_applied.price = true;
    overlaid.overlays_applied.capacity = true;
    claims.push(overlaid);
    claims.push(initialized_claim("general-purpose-initialized"));
    for cause in CAUSES {
        let name = format!("general-purpose-{}", format!("{cause:?}").to_lowercase());
        claims.push(disrupted(&initialized_claim(&name), cause));
    }
    let draining = disrupted(
        &initialized_claim("general-purpose-draining"),
        DisruptionCause::Drifted,
    )
    .transition(ClaimState::Draining, 2_100, |_| {})
    .unwrap();
    claims.push(draining.clone());
    let mut terminating = draining
        .transition(ClaimState::Terminating, 2_200, |_| {})
        .unwrap();
    terminating.name = "general-purpose-terminating".into();
    claims.push(terminating);
    claims
}

/// Writes (anything but GET) sent to NodeClaims.
fn node_claim_writes(proxy: &FaultProxy) -> Vec<String> {
    proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(NODE_CLAIMS_PATH) && r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// The rows of a kubectl table, each cell cut at its header's column.
pub(super) fn table(printed: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = printed.lines();
    let header = lines.next().expect("a header");
    let mut starts: Vec<(usize, &str)> = Vec::new();
    let mut at = 0;
    for word in header.split_whitespace() {
        let start = header[at..].find(word).expect("the header's word") + at;
        starts.push((start, word));
        at = start + word.len();
    }
    lines
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(i, (start, name))| {
                    let end = starts.get(i + 1).map_or(line.len(), |(s, _)| *s);
                    let cell = line.get(*start..end.min(line.len())).unwrap_or("");
                    (name.to_string(), cell.trim().to_string())
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn every_mirror_is_accepted_by_karpenters_crd_and_listed_with_its_node() {
    let t = api_server().await;
    let claims = every_kind_of_claim();

    let report = t.cluster.mirror_claims(&claims).await.expect("mirrored");

    let mut created = report.created.clone();
    created.sort();
    let mut wanted: Vec<String> = claims.iter().map(|c| c.name.clone()).collect();
    wanted.sort();
    assert_eq!(created, wanted, "{report:?}");
    // Every write was strict: a field the CRD lacks would have been refused, not pruned.
    let writes: Vec<String> = t
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(NODE_CLAIMS_PATH) && r.method != "GET")
        .filter(|r| !r.query.contains("fieldValidation=Strict"))
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert!(writes.is_empty(), "not strict: {writes:?}");

    let rows = table(&kubectl(&t.cp, &["get", "nodeclaims"]));
    assert_eq!(rows.len(), claims.len(), "{rows:#?}");
    for claim in &claims {
        let row = rows
            .iter()
            .find(|r| r["NAME"] == claim.name)
            .unwrap_or_else(|| panic!("{} is not listed: {rows:#?}", claim.name));
        let stored = t.cp.get("NodeClaim", None, &claim.name).await.unwrap();
        let ready = condition_of(&stored, "Ready")["status"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            (
                row["TYPE"].as_str(),
                row["ZONE"].as_str(),
                row["CAPACITY"].as_str(),
                row["NODE"].as_str(),
                row["READY"].as_str(),
            ),
            (
                claim.instance_type.as_deref().unwrap_or(""),
                claim.zone.as_deref().unwrap_or(""),
                claim.capacity_type.map_or("", |c| c.as_str()),
                claim.node_name.as_deref().unwrap_or(""),
                ready.as_str(),
            ),
            "{}: {row:?}",
            claim.name
        );
    }
    let initialized = rows
        .iter()
        .find(|r| r["NAME"] == "general-purpose-initialized")
        .unwrap();
    assert_eq!(initialized["NODE"], "ip-10-0-0-1.ec2.internal");
    assert_eq!(initialized["READY"], "True");

    // Read back from the watch, each is as wanted: a quiet pass writes nothing.
    t.proxy.clear_requests();
    let quiet = t.cluster.mirror_claims(&claims).await.expect("quiet");
    assert_eq!(quiet.writes(), 0, "{quiet:?}");
    assert!(node_claim_writes(&t.proxy).is_empty());
}

#[tokio::test]
async fn a_claim_is_mirrored_as_a_node_claim_and_a_quiet_pass_writes_nothing() {
    let t = api_server().await;
    let claim = initialized_claim("general-purpose-abcde");
    let report = t
        .cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(report.created, vec![claim.name.clone()]);

    let object =
        t.cp.get("NodeClaim", None, &claim.name)
            .await
            .expect("the mirror exists");
    let labels = &object["metadata"]["labels"];
    assert_eq!(labels["karpenter.sh/nodepool"], "general-purpose");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.xlarge");
    assert_eq!(labels["topology.kubernetes.io/zone"], "us-east-1a");
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "nodewright");
    assert_eq!(
        object["metadata"]["annotations"]["nodewright.dev/price-per-hour"],
        "0.192"
    );
    assert_eq!(object["spec"]["nodeClassRef"]["group"], "nodewright.dev");
    assert_eq!(object["spec"]["nodeClassRef"]["name"], "default");
    assert_eq!(
        object["status"]["providerID"],
        "aws:///us-east-1a/i-0123456789abcdef0"
    );
    assert_eq!(object["status"]["nodeName"], "ip-10-0-0-1.ec2.internal");
    for t in ["Launched", "Registered", "Initialized", "Ready"] {
        assert_eq!(condition_of(&object, t)["status"], "True", "{t}: {object}");
    }
    // Status through /status (the CRD's subresource), spec and metadata through the
    // object.
    assert_eq!(
        node_claim_writes(&t.proxy),
        vec![
            format!("POST {NODE_CLAIMS_PATH}"),
            format!("PATCH {NODE_CLAIMS_PATH}/{}/status", claim.name),
        ]
    );

    t.proxy.clear_requests();
    let quiet = t
        .cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(quiet.writes(), 0, "{quiet:?}");
    assert!(node_claim_writes(&t.proxy).is_empty());
    assert_eq!(
        t.proxy.count_lists(NODE_CLAIMS_PATH),
        0,
        "read from the watch"
    );

    // A new process over the same mirrors (a cold start) finds them as wanted.
    let fresh = t.another_process();
    let cold = fresh.mirror_claims(&[claim]).await.unwrap();
    assert_eq!(cold.writes(), 0, "{cold:?}");
    assert!(node_claim_writes(&t.proxy).is_empty());
}

#[tokio::test]
async fn a_changed_claim_is_written_a_deleted_mirror_rewritten_and_a_terminated_claims_removed() {
    let t = api_server().await;
    let claim = initialized_claim("general-purpose-fghij");
    t.cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();

    let disrupted = disrupted(&claim, DisruptionCause::Underutilized);
    let report = t
        .cluster
        .mirror_claims(std::slice::from_ref(&disrupted))
        .await
        .unwrap();
    assert_eq!(report.updated, vec![claim.name.clone()]);
    let object = t.cp.get("NodeClaim", None, &claim.name).await.unwrap();
    assert_eq!(
        condition_of(&object, "DisruptionReason")["reason"],
        "Underutilized"
    );
    assert_eq!(condition_of(&object, "Ready")["status"], "False");
    assert_eq!(
        object["metadata"]["annotations"]["nodewright.dev/state"],
        "Disrupting"
    );

    // Someone deletes it: the watch says so, and the next pass writes it again.
    t.cp.remove("NodeClaim", None, &claim.name).await;
    eventually(
        "the deleted mirror is written again",
        Duration::from_secs(30),
        || async {
            let report = t
                .cluster
                .mirror_claims(std::slice::from_ref(&disrupted))
                .await
                .unwrap();
            report.created == vec![claim.name.clone()]
        },
    )
    .await;
    assert!(t.cp.get("NodeClaim", None, &claim.name).await.is_some());

    let mut done = disrupted.clone();
    done.state = ClaimState::Terminated;
    let report = t.cluster.mirror_claims(&[done]).await.unwrap();
    assert_eq!(report.deleted, vec![claim.name.clone()]);
    assert!(t.cp.get("NodeClaim", None, &claim.name).await.is_none());
    // A claim the store no longer has: its mirror goes too.
    t.cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let report = t.cluster.mirror_claims(&[]).await.unwrap();
    assert_eq!(report.deleted, vec![claim.name.clone()]);
}

#[tokio::test]
async fn a_node_claim_nodewright_does_not_manage_is_never_touched() {
    let t = api_server().await;
    let karpenters = t
        .cp
        .put(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "general-purpose-klmno", "labels": {"karpenter.sh/nodepool": "general-purpose"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
        }))
        .await;
    let claim = initialized_claim("general-purpose-klmno");
    let report = t.cluster.mirror_claims(&[claim]).await.unwrap();
    assert_eq!(report.foreign, vec!["general-purpose-klmno".to_string()]);
    let report = t.cluster.mirror_claims(&[]).await.unwrap();
    assert!(report.deleted.is_empty(), "{report:?}");
    assert!(node_claim_writes(&t.proxy).is_empty());
    assert_eq!(
        t.cp.get("NodeClaim", None, "general-purpose-klmno").await,
        Some(karpenters)
    );
}

#[tokio::test]
async fn without_the_node_claim_crd_nothing_is_mirrored_and_nothing_fails() {
    let t = api_server().await;
    t.cp.uninstall("nodeclaims.karpenter.sh").await;
    let claim = initialized_claim("general-purpose-pqrst");
    let report = t
        .cluster
        .mirror_claims(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(report.skipped.is_some(), "{report:?}");
    assert_eq!(report.writes(), 0);
    let again = t.cluster.mirror_claims(&[claim]).await.unwrap();
    assert!(again.skipped.is_some());
    assert!(node_claim_writes(&t.proxy).is_empty());
    assert_eq!(
        t.proxy.count_lists(NODE_CLAIMS_PATH),
        1,
        "asked once; the next ask is minutes away"
    );
}

#[tokio::test]
async fn a_mirror_backlog_is_written_a_few_objects_a_pass_until_it_is_done() {
    let Setup {
        cp,
        cluster,
        proxy: _proxy,
    } = api_server().await;
    let cluster = cluster.with_mirror_writes_per_pass(2);
    let claims: Vec<NodeClaim> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|s| initialized_claim(&format!("general-purpose-{s}aaaa")))
        .collect();
    let first = cluster.mirror_claims(&claims).await.unwrap();
    assert_eq!((first.created.len(), first.deferred), (2, 3), "{first:?}");
    let second = cluster.mirror_claims(&claims).await.unwrap();
    assert_eq!(
        (second.created.len(), second.deferred),
        (2, 1),
        "{second:?}"
    );
    let third = cluster.mirror_claims(&claims).await.unwrap();
    assert_eq!((third.created.len(), third.deferred), (1, 0), "{third:?}");
    for c in &claims {
        assert!(
            cp.get("NodeClaim", None, &c.name).await.is_some(),
            "{}",
            c.name
        );
    }
    // Deletes count too: four gone, two a pass.
    let kept = &claims[..1];
    let report = cluster.mirror_claims(kept).await.unwrap();
    assert_eq!(
        (report.deleted.len(), report.deferred),
        (2, 2),
        "{report:?}"
    );
    let report = cluster.mirror_claims(kept).await.unwrap();
    assert_eq!(
        (report.deleted.len(), report.deferred),
        (2, 0),
        "{report:?}"
    );
    let quiet = cluster.mirror_claims(kept).await.unwrap();
    assert_eq!((quiet.writes(), quiet.deferred), (0, 0), "{quiet:?}");
}
