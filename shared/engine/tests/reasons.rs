//! Reasons reaching people: events, decisions and status conditions published by
//! `Reasons::publish` over the in-memory fakes, on a virtual clock.

use std::sync::Arc;
use std::time::Duration;

use nodewright_core::catalog::Catalog;
use nodewright_core::provisioning::UnschedulablePod;
use nodewright_core::testing::general_purpose_pool;
use nodewright_engine::ports::{
    Clock, ClusterError, ClusterEvent, ConditionStatus, ErrorKind, EventType, InvalidObject,
    Invalidity, ObjectKind, StoreError,
};
use nodewright_engine::reasons::{
    AMIS_READY, DEDUPE_WINDOW, NODE_CLASS_READY, READY, SECURITY_GROUPS_READY, SUBNETS_READY,
    VALIDATION_SUCCEEDED,
};
use nodewright_engine::{ClaimPods, Ports, Problem, Reasons, ReasonsInput, StatusFields};
use nodewright_sim::fakes::{
    ClusterOp, FakeCloud, FakeCluster, ManualClock, MemoryStore, StoreOp, node_class,
};

struct Env {
    clock: Arc<ManualClock>,
    cluster: Arc<FakeCluster>,
    store: Arc<MemoryStore>,
    ports: Ports,
    reasons: Reasons,
}

impl Env {
    /// A cluster with the general-purpose NodePool and its EC2NodeClass "default".
    fn new() -> Self {
        let clock = Arc::new(ManualClock::default());
        let catalog = Catalog::embedded().clone();
        let cloud = Arc::new(FakeCloud::new(
            catalog.clone(),
            &["us-east-1a"],
            clock.clone(),
        ));
        let cluster = Arc::new(FakeCluster::new(Arc::new(catalog)));
        cluster.with_state(|s| {
            s.node_pools.push(general_purpose_pool());
            s.node_classes.push(node_class("default"));
        });
        let store = Arc::new(MemoryStore::new());
        let ports = Ports::new(cloud, cluster.clone(), store.clone(), clock.clone());
        Env {
            clock,
            cluster,
            store,
            ports,
            reasons: Reasons::new(),
        }
    }

    fn pool(&self) -> String {
        general_purpose_pool().name
    }

    fn now(&self) -> i64 {
        self.clock.now()
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    async fn publish(&self, input: ReasonsInput<'_>) -> nodewright_engine::PublishReport {
        self.reasons.publish(&self.ports, self.now(), &input).await
    }

    fn events_with(&self, reason: &str) -> Vec<ClusterEvent> {
        self.cluster
            .events()
            .into_iter()
            .filter(|e| e.reason == reason)
            .collect()
    }

    fn status_writes(&self) -> usize {
        self.cluster
            .call_counts()
            .get(&ClusterOp::UpdateStatus)
            .copied()
            .unwrap_or(0)
    }

    fn class_condition(&self, t: &str) -> nodewright_sim::fakes::StoredCondition {
        self.cluster
            .condition(ObjectKind::Ec2NodeClass, "default", t)
            .unwrap_or_else(|| panic!("EC2NodeClass default has no {t} condition"))
    }
}

fn unschedulable(pod: &str, reason: &str) -> UnschedulablePod {
    UnschedulablePod {
        pod: pod.into(),
        reason: reason.into(),
    }
}

const TOO_BIG: &str = "no instance type has 512 cpu";

#[tokio::test]
async fn an_unschedulable_pod_gets_one_failed_scheduling_event_and_one_decision() {
    let env = Env::new();
    let pods = [unschedulable("team-a/huge", TOO_BIG)];
    let input = ReasonsInput {
        unschedulable: &pods,
        ..ReasonsInput::default()
    };

    let first = env.publish(input).await;

    let events = env.events_with("FailedScheduling");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].kind, "Pod");
    assert_eq!(events[0].namespace.as_deref(), Some("team-a"));
    assert_eq!(events[0].name, "huge");
    assert_eq!(events[0].event_type, EventType::Warning);
    assert!(events[0].message.contains(TOO_BIG), "{}", events[0].message);
    let decisions = env.store.all_decisions();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].job, "provision");
    assert_eq!(decisions[0].action, "cannot schedule team-a/huge");
    assert_eq!(decisions[0].reason, TOO_BIG);
    assert_eq!(decisions[0].at, env.now());
    assert_eq!((first.reported, first.events, first.failures), (1, 1, 0));

    // The poll loop's next tick, five seconds later, finds the same pod for the same reason.
    env.advance(Duration::from_secs(5));
    let second = env.publish(input).await;

    assert_eq!(
        env.events_with("FailedScheduling").len(),
        1,
        "no duplicate event"
    );
    assert_eq!(env.store.all_decisions().len(), 1, "no duplicate decision");
    assert_eq!(
        (second.reported, second.events, second.suppressed),
        (0, 0, 1)
    );
}

#[tokio::test]
async fn the_same_reason_is_published_again_once_the_window_has_passed() {
    let env = Env::new();
    let pods = [unschedulable("default/huge", TOO_BIG)];
    let input = ReasonsInput {
        unschedulable: &pods,
        ..ReasonsInput::default()
    };
    env.publish(input).await;

    env.advance(DEDUPE_WINDOW - Duration::from_secs(1));
    env.publish(input).await;
    assert_eq!(env.events_with("FailedScheduling").len(), 1);

    env.advance(Duration::from_secs(1));
    env.publish(input).await;
    assert_eq!(env.events_with("FailedScheduling").len(), 2);
    assert_eq!(env.store.all_decisions().len(), 2);
}

#[tokio::test]
async fn a_pod_whose_reason_changes_is_told_at_once() {
    let env = Env::new();
    let before = [unschedulable("default/web", TOO_BIG)];
    env.publish(ReasonsInput {
        unschedulable: &before,
        ..ReasonsInput::default()
    })
    .await;

    env.advance(Duration::from_secs(5));
    let after = [unschedulable("default/web", "NodePool limits reached")];
    env.publish(ReasonsInput {
        unschedulable: &after,
        ..ReasonsInput::default()
    })
    .await;

    let messages: Vec<String> = env
        .events_with("FailedScheduling")
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(messages.len(), 2);
    assert!(
        messages[1].contains("NodePool limits reached"),
        "{messages:?}"
    );
}

#[tokio::test]
async fn a_class_with_no_subnets_reads_not_ready_with_the_reason_and_gets_a_warning_event() {
    let env = Env::new();
    let problems = [Problem::no_subnets(
        "default",
        "tags karpenter.sh/discovery=test-cluster",
    )];

    let report = env
        .publish(ReasonsInput {
            problems: &problems,
            ..ReasonsInput::default()
        })
        .await;

    let ready = env.class_condition(READY);
    assert_eq!(ready.condition.status, ConditionStatus::False);
    assert_eq!(ready.condition.reason, "SubnetsNotFound");
    assert!(ready.condition.message.contains("select no subnet"));
    assert_eq!(ready.last_transition_time, env.now());
    let subnets = env.class_condition(SUBNETS_READY);
    assert_eq!(subnets.condition.status, ConditionStatus::False);
    assert_eq!(subnets.condition.reason, "SubnetsNotFound");
    for t in [SECURITY_GROUPS_READY, AMIS_READY, VALIDATION_SUCCEEDED] {
        assert_eq!(
            env.class_condition(t).condition.status,
            ConditionStatus::True,
            "{t}"
        );
    }

    let events = env.events_with("SubnetsNotFound");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "EC2NodeClass");
    assert_eq!(events[0].name, "default");
    assert_eq!(events[0].namespace, None);
    assert_eq!(events[0].event_type, EventType::Warning);
    assert_eq!(events[0].message, problems[0].message);

    let decisions = env.store.all_decisions();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].action, "cannot use EC2NodeClass \"default\"");
    assert!(decisions[0].reason.starts_with("SubnetsNotFound"));
    assert_eq!(
        report.statuses_changed,
        [(ObjectKind::Ec2NodeClass, "default".to_string())]
    );
}

#[tokio::test]
async fn a_class_that_becomes_healthy_flips_to_true_with_a_new_transition_time() {
    let env = Env::new();
    let problems = [Problem::no_subnets("default", "tags env=prod")];
    env.publish(ReasonsInput {
        problems: &problems,
        ..ReasonsInput::default()
    })
    .await;
    let broken_at = env.now();

    // Someone tags the subnets; a minute later the class resolves.
    env.advance(Duration::from_secs(60));
    let healthy = ["default".to_string()];
    let report = env
        .publish(ReasonsInput {
            healthy_node_classes: &healthy,
            ..ReasonsInput::default()
        })
        .await;

    let fixed_at = env.now();
    for t in [READY, SUBNETS_READY] {
        let c = env.class_condition(t);
        assert_eq!(c.condition.status, ConditionStatus::True, "{t}");
        assert_eq!(c.condition.reason, t);
        assert!(c.condition.message.is_empty());
        assert_eq!(c.last_transition_time, fixed_at, "{t} flipped");
    }
    let unchanged = env.class_condition(SECURITY_GROUPS_READY);
    assert_eq!(
        unchanged.last_transition_time, broken_at,
        "a condition that stayed True keeps its transition time"
    );
    assert_eq!(report.statuses_changed.len(), 1);
    assert!(
        env.events_with("SubnetsNotFound").len() == 1,
        "no warning for a healthy class"
    );
}

#[tokio::test]
async fn unchanged_conditions_are_not_written_again_by_the_poll_loop() {
    let env = Env::new();
    let classes = ["default".to_string()];
    let pools = [env.pool()];
    let input = ReasonsInput {
        healthy_node_classes: &classes,
        healthy_node_pools: &pools,
        ..ReasonsInput::default()
    };

    env.publish(input).await;
    assert_eq!(env.status_writes(), 2, "one write per object");
    let pool_ready = env
        .cluster
        .condition(ObjectKind::NodePool, &env.pool(), READY)
        .expect("the pool's Ready");
    assert_eq!(pool_ready.condition.status, ConditionStatus::True);
    assert!(
        env.cluster
            .condition(ObjectKind::NodePool, &env.pool(), NODE_CLASS_READY)
            .is_some()
    );

    // A minute of polls, one tick every five seconds.
    for _ in 0..12 {
        env.advance(Duration::from_secs(5));
        let report = env.publish(input).await;
        assert!(report.statuses_changed.is_empty());
    }
    assert_eq!(
        env.status_writes(),
        2,
        "no status call while nothing changed"
    );
    assert!(env.cluster.events().is_empty());
    assert!(env.store.all_decisions().is_empty());
}

#[tokio::test]
async fn after_the_window_an_unchanged_status_is_checked_and_reads_unchanged() {
    let env = Env::new();
    let classes = ["default".to_string()];
    let input = ReasonsInput {
        healthy_node_classes: &classes,
        ..ReasonsInput::default()
    };
    env.publish(input).await;
    let first_at = env.class_condition(READY).last_transition_time;

    env.advance(DEDUPE_WINDOW);
    let report = env.publish(input).await;

    assert_eq!(env.status_writes(), 2, "checked again");
    assert!(report.statuses_changed.is_empty(), "and nothing changed");
    assert_eq!(env.class_condition(READY).last_transition_time, first_at);
}

#[tokio::test]
async fn every_pod_of_a_launched_claim_gets_the_event() {
    let env = Env::new();
    let pods: Vec<String> = (0..3).map(|i| format!("default/web-{i}")).collect();
    let claims = [ClaimPods::launched(
        "default-x7k2p",
        &pods,
        "m6a.2xlarge",
        "us-east-1a",
    )];
    let input = ReasonsInput {
        claims: &claims,
        ..ReasonsInput::default()
    };

    let report = env.publish(input).await;

    let events = env.events_with("Launched");
    let mut names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    for e in &events {
        assert_eq!(e.event_type, EventType::Normal);
        assert_eq!(e.namespace.as_deref(), Some("default"));
        assert!(e.message.contains("default-x7k2p"), "{}", e.message);
    }
    assert_eq!(report.events, 3);
    assert!(
        env.store.all_decisions().is_empty(),
        "the launch decision is the provisioner's"
    );

    env.advance(Duration::from_secs(5));
    env.publish(input).await;
    assert_eq!(env.events_with("Launched").len(), 3, "not posted twice");
}

#[tokio::test]
async fn nominated_pods_each_get_an_event_naming_the_node() {
    let env = Env::new();
    let pods: Vec<String> = ["default/a", "team-b/b"].map(String::from).to_vec();
    let claims = [ClaimPods::nominated(
        "default-x7k2p",
        &pods,
        Some("ip-10-0-0-1.ec2.internal"),
    )];

    env.publish(ReasonsInput {
        claims: &claims,
        ..ReasonsInput::default()
    })
    .await;

    let events = env.events_with("Nominated");
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|e| e.message.starts_with("Pod should schedule on: nodeclaim/")),
        "Karpenter's message: {events:#?}"
    );
    assert!(
        events
            .iter()
            .all(|e| e.message.contains("ip-10-0-0-1.ec2.internal"))
    );
    assert!(
        events
            .iter()
            .any(|e| e.namespace.as_deref() == Some("team-b") && e.name == "b")
    );
}

#[tokio::test]
async fn a_failed_event_never_fails_the_tick_and_is_posted_on_the_next_one() {
    let env = Env::new();
    env.cluster.fail_next(
        ClusterOp::RecordEvent,
        ClusterError::new(ErrorKind::Unavailable, "the API server is restarting"),
    );
    env.store.fail_next(
        StoreOp::RecordDecision,
        StoreError::new(ErrorKind::Throttled, "slow down"),
    );
    let pods = [unschedulable("default/huge", TOO_BIG)];
    let input = ReasonsInput {
        unschedulable: &pods,
        ..ReasonsInput::default()
    };

    let first = env.publish(input).await;
    assert_eq!(first.failures, 2);
    assert!(env.cluster.events().is_empty());

    env.advance(Duration::from_secs(5));
    let second = env.publish(input).await;

    assert_eq!(second.events, 1);
    assert_eq!(env.events_with("FailedScheduling").len(), 1);
    assert_eq!(
        second.reported, 0,
        "the finding was logged once; only the event is retried"
    );
}

#[tokio::test]
async fn a_failed_status_write_is_tried_again_on_the_next_tick() {
    let env = Env::new();
    env.cluster.fail_next(
        ClusterOp::UpdateStatus,
        ClusterError::new(ErrorKind::Conflict, "the object has been modified"),
    );
    let problems = [Problem::no_security_groups("default", "tags env=prod")];
    let input = ReasonsInput {
        problems: &problems,
        ..ReasonsInput::default()
    };

    let first = env.publish(input).await;
    assert_eq!(first.failures, 1);
    assert!(
        env.cluster
            .status(ObjectKind::Ec2NodeClass, "default")
            .is_none()
    );

    env.advance(Duration::from_secs(5));
    env.publish(input).await;

    let sg = env.class_condition(SECURITY_GROUPS_READY);
    assert_eq!(sg.condition.status, ConditionStatus::False);
    assert_eq!(sg.condition.reason, "SecurityGroupsNotFound");
    assert_eq!(env.events_with("SecurityGroupsNotFound").len(), 1);
}

#[tokio::test]
async fn an_invalid_pool_read_from_the_cluster_reads_validation_failed() {
    let env = Env::new();
    let object = InvalidObject {
        kind: ObjectKind::NodePool,
        name: "broken".into(),
        why: Invalidity::Spec {
            message: "spec.template.spec.requirements[0].operator: unknown operator".into(),
        },
    };
    env.cluster
        .with_state(|s| s.invalid_objects.push(object.clone()));
    let problems = [Problem::from_invalid(&object)];

    env.publish(ReasonsInput {
        problems: &problems,
        ..ReasonsInput::default()
    })
    .await;

    let c = env
        .cluster
        .condition(ObjectKind::NodePool, "broken", VALIDATION_SUCCEEDED)
        .expect("ValidationSucceeded");
    assert_eq!(c.condition.status, ConditionStatus::False);
    assert_eq!(c.condition.reason, "NodePoolValidationFailed");
    let class_ready = env
        .cluster
        .condition(ObjectKind::NodePool, "broken", NODE_CLASS_READY)
        .expect("NodeClassReady");
    assert_eq!(class_ready.condition.status, ConditionStatus::Unknown);
    let events = env.events_with("NodePoolValidationFailed");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "NodePool");
}

#[tokio::test]
async fn a_status_for_an_object_that_does_not_exist_is_a_logged_failure() {
    let env = Env::new();
    let problems = [Problem::node_class_missing("ghost", "gpu")];

    let report = env
        .publish(ReasonsInput {
            problems: &problems,
            ..ReasonsInput::default()
        })
        .await;

    assert_eq!(report.failures, 1);
    assert!(report.statuses_changed.is_empty());
    assert_eq!(
        env.events_with("NodeClassNotFound").len(),
        1,
        "the event still goes out"
    );
}

#[tokio::test]
async fn the_instance_profile_is_recorded_on_the_class_status() {
    let env = Env::new();
    let classes = ["default".to_string()];
    let fields = [StatusFields::instance_profile(
        "default",
        "test-cluster_1234567890",
    )];

    env.publish(ReasonsInput {
        healthy_node_classes: &classes,
        status_fields: &fields,
        ..ReasonsInput::default()
    })
    .await;

    let status = env
        .cluster
        .status(ObjectKind::Ec2NodeClass, "default")
        .expect("a status");
    assert_eq!(status.fields["instanceProfile"], "test-cluster_1234567890");
    assert_eq!(
        status.condition(READY).map(|c| c.condition.status),
        Some(ConditionStatus::True)
    );
    assert_eq!(env.status_writes(), 1, "conditions and fields in one write");
}

// ----- fields nodewright does not fully honour ------------------------------------------

use nodewright_core::api::Kind;
use nodewright_core::api::fields::ObjectFields;
use nodewright_engine::reasons::UNSUPPORTED_FIELDS_IGNORED;
use nodewright_engine::{Provisioner, ProvisionerConfig};

/// The general-purpose pool as read from a cluster at `generation`, with a taint's
/// `timeAdded` (which nodewright ignores).
fn pool_with_ignored_field(generation: i64) -> ObjectFields {
    let object = serde_json::json!({
        "metadata": {"name": general_purpose_pool().name, "generation": generation},
        "spec": {"weight": 10, "template": {"spec": {"requirements": [],
            "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}]}}}
    });
    ObjectFields::of(Kind::NodePool, &object).expect("timeAdded is not honoured")
}

#[tokio::test]
async fn a_pool_with_ignored_fields_stays_valid_and_ready_with_a_reason_naming_them() {
    let env = Env::new();
    env.cluster
        .with_state(|s| s.fields_not_honoured.push(pool_with_ignored_field(1)));
    let provisioner = Provisioner::new(
        env.ports.clone(),
        ProvisionerConfig::new("test-cluster", "holder-a"),
    );

    provisioner.tick().await.expect("tick");

    let pool = env.pool();
    let validation = env
        .cluster
        .condition(ObjectKind::NodePool, &pool, VALIDATION_SUCCEEDED)
        .expect("ValidationSucceeded");
    assert_eq!(validation.condition.status, ConditionStatus::True);
    assert_eq!(validation.condition.reason, UNSUPPORTED_FIELDS_IGNORED);
    assert!(
        validation
            .condition
            .message
            .contains("spec.template.spec.taints[0].timeAdded: not supported (ignored)"),
        "{}",
        validation.condition.message
    );
    let ready = env
        .cluster
        .condition(ObjectKind::NodePool, &pool, READY)
        .expect("Ready");
    assert_eq!(ready.condition.status, ConditionStatus::True);
    let class_ready = env
        .cluster
        .condition(ObjectKind::NodePool, &pool, NODE_CLASS_READY)
        .expect("NodeClassReady");
    assert_eq!(class_ready.condition.status, ConditionStatus::True);
    assert!(env.events_with(UNSUPPORTED_FIELDS_IGNORED).is_empty());
    let class = env.class_condition(VALIDATION_SUCCEEDED);
    assert_eq!(
        class.condition.reason, VALIDATION_SUCCEEDED,
        "the class has no such field"
    );
}

#[tokio::test]
async fn fields_not_honoured_are_logged_once_per_generation_not_once_per_tick() {
    let env = Env::new();
    let publish = |generation: i64| {
        let problems = [Problem::fields_not_honoured(
            ObjectKind::NodePool,
            &pool_with_ignored_field(generation),
        )];
        let env = &env;
        async move {
            env.publish(ReasonsInput {
                problems: &problems,
                ..ReasonsInput::default()
            })
            .await
        }
    };

    assert_eq!(publish(1).await.fields_logged, 1);
    env.advance(DEDUPE_WINDOW * 3);
    let again = publish(1).await;
    assert_eq!(again.fields_logged, 0, "same generation, past the window");
    assert_eq!(again.events, 0, "a notice posts no event");
    assert_eq!(publish(2).await.fields_logged, 1, "the spec changed");
}

#[tokio::test]
async fn a_notice_does_not_hide_a_real_failure_of_the_same_pool() {
    let env = Env::new();
    let problems = [
        Problem::node_class_missing(&env.pool(), "gpu"),
        Problem::fields_not_honoured(ObjectKind::NodePool, &pool_with_ignored_field(1)),
    ];

    env.publish(ReasonsInput {
        problems: &problems,
        ..ReasonsInput::default()
    })
    .await;

    let pool = env.pool();
    let ready = env
        .cluster
        .condition(ObjectKind::NodePool, &pool, READY)
        .expect("Ready");
    assert_eq!(ready.condition.status, ConditionStatus::False);
    assert_eq!(ready.condition.reason, "NodeClassNotFound");
    assert!(!ready.condition.message.contains("timeAdded"));
    let validation = env
        .cluster
        .condition(ObjectKind::NodePool, &pool, VALIDATION_SUCCEEDED)
        .expect("ValidationSucceeded");
    assert_eq!(validation.condition.status, ConditionStatus::True);
    assert_eq!(validation.condition.reason, UNSUPPORTED_FIELDS_IGNORED);
}
