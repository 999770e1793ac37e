//! NodePool and EC2NodeClass status written through the `/status` subresource: merged
//! conditions with transition times and observed generations, other controllers'
//! conditions and fields kept, a concurrent writer's change met with a 409 and a
//! re-read, and what `kubectl wait --for=condition=Ready` makes of it.

use nodewright_engine::ports::{Cluster, Condition, ErrorKind, ObjectKind, StatusUpdate};
use nodewright_kube::STATUS_ATTEMPTS;
use nodewright_kube::testing::objects;
use serde_json::{Value, json};

use super::{
    T0, api_server, condition_of, conditions_of, default_node_class, kubectl, node_pool,
    not_ready_class,
};

const CLASS_STATUS_PATH: &str = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status";
const CLASS_PATH: &str = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default";

#[tokio::test]
async fn a_status_write_sets_conditions_with_their_transition_time_and_observed_generation() {
    let t = api_server().await;
    let put = t.cp.put(default_node_class()).await;
    let spec = put["spec"].clone();

    let changed = t
        .cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("status written");

    assert!(changed);
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    assert_eq!(
        condition_of(&class, "Ready"),
        json!({
            "type": "Ready",
            "status": "False",
            "reason": "SubnetsNotFound",
            "message": "subnetSelectorTerms select no subnet",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
            "observedGeneration": 1,
        })
    );
    assert_eq!(
        condition_of(&class, "SecurityGroupsReady")["reason"],
        "SecurityGroupsReady"
    );
    let types: Vec<Value> = conditions_of(&class)
        .iter()
        .map(|c| c["type"].clone())
        .collect();
    assert_eq!(
        types,
        ["Ready", "SecurityGroupsReady", "SubnetsReady"],
        "sorted by type"
    );
    assert_eq!(class["spec"], spec, "the spec is untouched");
    assert_eq!(
        class["metadata"]["generation"], 1,
        "a status write is no spec change"
    );
    let patch = t
        .proxy
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("a patch");
    assert_eq!(patch.path, CLASS_STATUS_PATH);
    assert!(patch.query.contains("fieldValidation=Strict"), "{patch:?}");
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    let body = patch.body.expect("a JSON body");
    assert_eq!(
        body["metadata"]["resourceVersion"], put["metadata"]["resourceVersion"],
        "written under the read version"
    );
}

#[tokio::test]
async fn an_unchanged_status_is_read_and_not_written() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("first write");
    t.proxy.clear_requests();

    let changed = t
        .cluster
        .update_status(
            ObjectKind::Ec2NodeClass,
            "default",
            &not_ready_class(),
            T0 + 60,
        )
        .await
        .expect("second call");

    assert!(!changed);
    assert_eq!(t.proxy.count("GET", CLASS_PATH), 1);
    assert_eq!(t.proxy.count("PATCH", CLASS_STATUS_PATH), 0);
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    assert_eq!(
        condition_of(&class, "Ready")["lastTransitionTime"],
        "2025-01-01T00:00:00Z"
    );
}

#[tokio::test]
async fn a_flipped_condition_gets_a_new_transition_time_and_the_others_keep_theirs() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("not ready");

    let healthy = StatusUpdate {
        conditions: vec![
            Condition::met("SubnetsReady"),
            Condition::met("SecurityGroupsReady"),
            Condition::met("Ready"),
        ],
        fields: Default::default(),
    };
    let changed = t
        .cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &healthy, T0 + 90)
        .await
        .expect("ready");

    assert!(changed);
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    let ready = condition_of(&class, "Ready");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "Ready");
    assert_eq!(ready["message"], "");
    assert_eq!(ready["lastTransitionTime"], "2025-01-01T00:01:30Z");
    assert_eq!(
        condition_of(&class, "SecurityGroupsReady")["lastTransitionTime"],
        "2025-01-01T00:00:00Z",
        "stayed True: its transition time stays"
    );
}

#[tokio::test]
async fn conditions_set_by_another_controller_are_kept() {
    let t = api_server().await;
    let mut pool = node_pool("general-purpose");
    pool["status"] = json!({
        "conditions": [{
            "type": "NodeRegistrationHealthy",
            "status": "Unknown",
            "reason": "AwaitingReconciliation",
            "message": "",
            "lastTransitionTime": "2024-12-01T00:00:00Z",
        }],
        "nodes": 3,
    });
    t.cp.put(default_node_class()).await;
    t.cp.put(pool).await;

    t.cluster
        .update_status(
            ObjectKind::NodePool,
            "general-purpose",
            &StatusUpdate {
                conditions: vec![
                    Condition::met("NodeClassReady"),
                    Condition::met("ValidationSucceeded"),
                    Condition::met("Ready"),
                ],
                fields: Default::default(),
            },
            T0,
        )
        .await
        .expect("written");

    let pool = t.cp.get("NodePool", None, "general-purpose").await.unwrap();
    let types: Vec<Value> = conditions_of(&pool)
        .iter()
        .map(|c| c["type"].clone())
        .collect();
    assert_eq!(
        types,
        [
            "NodeClassReady",
            "NodeRegistrationHealthy",
            "Ready",
            "ValidationSucceeded"
        ]
    );
    assert_eq!(
        condition_of(&pool, "NodeRegistrationHealthy")["lastTransitionTime"],
        "2024-12-01T00:00:00Z"
    );
    assert_eq!(pool["status"]["nodes"], 3, "other status fields are kept");
}

#[tokio::test]
async fn a_concurrent_status_change_is_retried_and_both_changes_are_kept() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    // Between nodewright's read and its write, Karpenter (mid-migration) sets a condition.
    let admin = t.cp.admin().clone();
    t.proxy.after_next("GET", CLASS_PATH, move || async move {
        objects::modify(&admin, "EC2NodeClass", None, "default", |class| {
            class["status"] = json!({"conditions": [{
                "type": "AMIsReady", "status": "True", "reason": "AMIsReady", "message": "",
                "lastTransitionTime": "2024-12-01T00:00:00Z",
            }]});
        })
        .await
        .expect("the concurrent write");
    });

    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("written after a retry");

    let statuses: Vec<u16> = t
        .proxy
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [409, 200]);
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    assert_eq!(condition_of(&class, "AMIsReady")["status"], "True");
    assert_eq!(condition_of(&class, "SubnetsReady")["status"], "False");
}

#[tokio::test]
async fn an_object_whose_status_keeps_changing_gives_up_with_conflict() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    for i in 0..STATUS_ATTEMPTS {
        let admin = t.cp.admin().clone();
        t.proxy.after_next("GET", CLASS_PATH, move || async move {
            objects::modify(&admin, "EC2NodeClass", None, "default", |class| {
                class["status"]["instanceProfile"] = format!("churn-{i}").into();
            })
            .await
            .expect("the concurrent write");
        });
    }

    let error = t
        .cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect_err("conflict");

    assert_eq!(error.kind(), ErrorKind::Conflict);
    assert_eq!(
        t.proxy.count("PATCH", CLASS_STATUS_PATH),
        STATUS_ATTEMPTS as usize
    );
}

#[tokio::test]
async fn the_observed_generation_follows_spec_changes_and_keeps_the_transition_time() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("first");
    // Someone edits the subnet selector: a new generation.
    let edited =
        t.cp.modify("EC2NodeClass", None, "default", |class| {
            class["spec"]["subnetSelectorTerms"] = json!([{"tags": {"Name": "private-*"}}]);
        })
        .await
        .unwrap();
    assert_eq!(edited["metadata"]["generation"], 2);

    let changed = t
        .cluster
        .update_status(
            ObjectKind::Ec2NodeClass,
            "default",
            &not_ready_class(),
            T0 + 60,
        )
        .await
        .expect("second");

    assert!(changed, "the observed generation moved");
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    let ready = condition_of(&class, "Ready");
    assert_eq!(ready["observedGeneration"], 2);
    assert_eq!(ready["lastTransitionTime"], "2025-01-01T00:00:00Z");
}

#[tokio::test]
async fn status_fields_are_written_beside_the_conditions_and_null_removes_one() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    let mut update = not_ready_class();
    update
        .fields
        .insert("instanceProfile".into(), "test-cluster_123".into());

    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &update, T0)
        .await
        .expect("written");
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    assert_eq!(class["status"]["instanceProfile"], "test-cluster_123");
    assert_eq!(
        t.proxy.count("PATCH", CLASS_STATUS_PATH),
        1,
        "one write for both"
    );
    // Read back as the functions read classes: the profile the status records is what
    // a Karpenter v1.7+ class is launched with (it names its profiles at random).
    let mut recorded = None;
    for _ in 0..50 {
        let state = t.cluster.state().await.expect("state");
        recorded = state.node_classes[0].status_instance_profile.clone();
        if recorded.is_some() {
            break;
        }
        // A watched view sees the write when its watch event arrives.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(recorded.as_deref(), Some("test-cluster_123"));

    let mut removal = StatusUpdate::default();
    removal.fields.insert("instanceProfile".into(), Value::Null);
    assert!(
        t.cluster
            .update_status(ObjectKind::Ec2NodeClass, "default", &removal, T0)
            .await
            .expect("removed")
    );
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    assert!(class["status"].get("instanceProfile").is_none());
    assert_eq!(conditions_of(&class).len(), 3, "conditions untouched");
}

/// Strict validation: a status field the CRD does not have is refused, not pruned; the
/// adapter finds which field (a dry run of each), says so once, and writes the rest
/// then and later. (The field an older Karpenter's CRD lacks is `old_crds`'.)
#[tokio::test]
async fn a_status_field_the_crd_does_not_have_is_refused_and_left_out_from_then_on() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    let mut update = not_ready_class();
    update.fields.insert("instanceProfile".into(), "p".into());
    update.fields.insert("notAField".into(), "x".into());

    let changed = t
        .cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &update, T0)
        .await
        .expect("written without the field the CRD lacks");

    assert!(changed);
    let class = t.cp.get("EC2NodeClass", None, "default").await.unwrap();
    assert_eq!(class["status"]["instanceProfile"], "p");
    assert!(class["status"].get("notAField").is_none(), "{class:#}");
    assert_eq!(condition_of(&class, "Ready")["status"], "False");
    let patches: Vec<(bool, u16)> = t
        .proxy
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| (r.query.contains("dryRun=All"), r.status))
        .collect();
    assert_eq!(
        patches,
        [(false, 422), (true, 200), (true, 422), (false, 200)],
        "refused whole, each field tried alone, then written without it"
    );

    // From now on the field is left out: no refusal, no dry run.
    t.proxy.clear_requests();
    update.fields.insert("instanceProfile".into(), "q".into());
    assert!(
        t.cluster
            .update_status(ObjectKind::Ec2NodeClass, "default", &update, T0)
            .await
            .expect("written")
    );
    let patches: Vec<u16> = t
        .proxy
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.status)
        .collect();
    assert_eq!(patches, [200]);

    // A condition the CRD's schema refuses (a reason that is not CamelCase) is Invalid.
    let bad = StatusUpdate {
        conditions: vec![Condition::failed("Ready", "not a reason!", "x")],
        fields: Default::default(),
    };
    let error = t
        .cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &bad, T0)
        .await
        .expect_err("the CRD's pattern for reasons");
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
}

#[tokio::test]
async fn a_status_write_for_a_missing_object_is_not_found() {
    let t = api_server().await;

    let error = t
        .cluster
        .update_status(ObjectKind::NodePool, "ghost", &not_ready_class(), T0)
        .await
        .expect_err("no such pool");

    assert_eq!(error.kind(), ErrorKind::NotFound);
}

/// What an operator (or a CD pipeline) waits on: `kubectl wait --for=condition=Ready`
/// reads the conditions nodewright wrote through `/status`.
#[tokio::test]
async fn kubectl_wait_for_ready_sees_the_conditions_nodewright_writes() {
    let t = api_server().await;
    t.cp.put(default_node_class()).await;
    t.cp.put(node_pool("general-purpose")).await;
    let wait = |what: &str| {
        t.cp.kubectl()
            .args(["wait", "--for=condition=Ready", "--timeout=2s", what])
            .output()
            .expect("kubectl runs")
    };
    assert!(
        !wait("nodepool/general-purpose").status.success(),
        "no Ready condition yet"
    );

    let ready = StatusUpdate {
        conditions: vec![
            Condition::met("ValidationSucceeded"),
            Condition::met("NodeClassReady"),
            Condition::met("Ready"),
        ],
        fields: Default::default(),
    };
    t.cluster
        .update_status(ObjectKind::NodePool, "general-purpose", &ready, T0)
        .await
        .expect("pool status");
    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &not_ready_class(), T0)
        .await
        .expect("class status");

    let pool = wait("nodepool/general-purpose");
    assert!(
        pool.status.success(),
        "{}",
        String::from_utf8_lossy(&pool.stderr)
    );
    assert!(
        String::from_utf8_lossy(&pool.stdout).contains("condition met"),
        "{}",
        String::from_utf8_lossy(&pool.stdout)
    );
    assert!(
        !wait("ec2nodeclass/default").status.success(),
        "the class says Ready=False"
    );
    let healthy = StatusUpdate {
        conditions: vec![
            Condition::met("SubnetsReady"),
            Condition::met("SecurityGroupsReady"),
            Condition::met("Ready"),
        ],
        fields: Default::default(),
    };
    t.cluster
        .update_status(ObjectKind::Ec2NodeClass, "default", &healthy, T0 + 60)
        .await
        .expect("class status");
    let class = wait("ec2nodeclass/default");
    assert!(
        class.status.success(),
        "{}",
        String::from_utf8_lossy(&class.stderr)
    );
    // And `kubectl get` prints the pool's READY column from the same condition.
    let printed = kubectl(&t.cp, &["get", "nodepool", "general-purpose"]);
    assert!(printed.contains("True"), "{printed}");
}
