//! Making "why" reach people. A scheduled invocation's return value goes nowhere, so
//! everything a tick learns about what it could *not* do is published here, once per
//! provisioning tick, through every channel someone may be looking at:
//!
//! | finding | log (warn) | decision log | Kubernetes Event | status conditions |
//! |---|---|---|---|---|
//! | a pod no NodePool can hold | `pod`, `reason` | "cannot schedule ns/pod" | Warning `FailedScheduling` on the pod | — |
//! | a [`Problem`] with a NodePool or EC2NodeClass | `object_kind`, `object`, `condition`, `reason`, `detail` | "cannot use EC2NodeClass \"x\"" | Warning, reason = the problem's, on the object | the problem's condition False, `Ready` False |
//! | a healthy NodePool or EC2NodeClass | — | — | — | every condition True |
//! | fields a NodePool or EC2NodeClass carries that nodewright ignores, only partly honours or does not know ([`Problem::fields_not_honoured`]) | `object_kind`, `object`, `generation`, `fields`, once per object version | — | — | `ValidationSucceeded` stays True, reason `UnsupportedFieldsIgnored`, the fields in its message |
//! | a claim launched for pods ([`ClaimPods`]) | — | — | Normal `Launched` / `Nominated` on *every* pod | — |
//!
//! The conditions are Karpenter's: an EC2NodeClass is `Ready` when `SubnetsReady`,
//! `SecurityGroupsReady`, `AMIsReady`, `InstanceProfileReady` and `ValidationSucceeded`
//! are; a NodePool when `ValidationSucceeded` and `NodeClassReady` are. The reasons
//! (`SubnetsNotFound`, `SecurityGroupsNotFound`, `AMINotFound`, `NodeClassNotFound`,
//! `NodePoolValidationFailed`) are Karpenter's too, so alerts and `kubectl wait
//! --for=condition=Ready` written for Karpenter keep working.
//!
//! **De-duplication.** A poll loop ticks every few seconds; a stuck pod must not get an
//! event, a log line and a DynamoDB decision every five seconds. The same finding —
//! (object, reason, message) — is published once per [`DEDUPE_WINDOW`] (five minutes,
//! Karpenter's window for `FailedScheduling`): the log line and the decision with it,
//! then nothing until the window has passed (a suppressed repeat logs at debug). A
//! finding whose message changes is new and goes out at once (Karpenter keys on the
//! object alone; a changed reason is news worth the event). An event that could not be
//! posted is tried again on the next tick. Statuses are remembered as written: an
//! unchanged status is not sent again within the window, and after it only re-checked
//! (the adapter reads the object and writes nothing when it already reads so). The
//! memory lives in the [`Reasons`] value, i.e. for the life of a warm Lambda; a cold
//! start publishes each current finding once more.
//!
//! Everything here is best effort: a failure is logged and counted in the
//! [`PublishReport`], never returned, and never fails the tick. `now` is passed in; this
//! module reads no clock.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use serde_json::{Map, Value};
use tracing::{debug, info, warn};

use nodewright_core::api::fields::ObjectFields;
use nodewright_core::provisioning::UnschedulablePod;

use crate::context::Ports;
use crate::ports::{
    ClusterEvent, Condition, ConditionStatus, Decision, EventType, InvalidObject, Invalidity,
    ObjectKind, StatusUpdate,
};

/// How long the same finding is not published again.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Calls to the cluster and the store in flight at once: enough that a slow API does
/// not serialize hundreds of pod events, few enough not to be throttled for it.
const CONCURRENCY: usize = 8;

/// The API server refuses longer event messages (events.k8s.io's 1 kB note limit).
const EVENT_MESSAGE_LIMIT: usize = 1024;
/// The Karpenter CRDs' `maxLength` for a condition message.
const CONDITION_MESSAGE_LIMIT: usize = 32768;

// ----- condition types (Karpenter's) -----------------------------------------------------

pub const READY: &str = "Ready";
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const SUBNETS_READY: &str = "SubnetsReady";
pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
pub const AMIS_READY: &str = "AMIsReady";
pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
pub const NODE_CLASS_READY: &str = "NodeClassReady";
pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";

/// The conditions an EC2NodeClass's `Ready` depends on.
pub const NODE_CLASS_CONDITIONS: [&str; 6] = [
    VALIDATION_SUCCEEDED,
    SUBNETS_READY,
    SECURITY_GROUPS_READY,
    AMIS_READY,
    INSTANCE_PROFILE_READY,
    CAPACITY_RESERVATIONS_READY,
];
/// The conditions a NodePool's `Ready` depends on.
pub const NODE_POOL_CONDITIONS: [&str; 2] = [VALIDATION_SUCCEEDED, NODE_CLASS_READY];
/// The conditions a NodeOverlay's `Ready` depends on.
pub const NODE_OVERLAY_CONDITIONS: [&str; 1] = [VALIDATION_SUCCEEDED];

/// The reason of a dependent condition left Unknown because an earlier step failed.
pub const NOT_EVALUATED: &str = "NotEvaluated";

/// The reason of a `ValidationSucceeded` condition that stays True although the object
/// carries fields nodewright ignores, only partly honours or does not know.
pub const UNSUPPORTED_FIELDS_IGNORED: &str = "UnsupportedFieldsIgnored";

fn dependents(kind: ObjectKind) -> &'static [&'static str] {
    match kind {
        ObjectKind::NodePool => &NODE_POOL_CONDITIONS,
        ObjectKind::Ec2NodeClass => &NODE_CLASS_CONDITIONS,
        ObjectKind::NodeOverlay => &NODE_OVERLAY_CONDITIONS,
        ObjectKind::CapacityBuffer => &[],
    }
}

// ----- what the provisioner tells us ------------------------------------------------------

/// A NodePool or EC2NodeClass that cannot be used, and why: the condition it makes
/// False, with a machine-readable reason and a message for people.
///
/// How the other conditions of the object follow (see [`conditions_for`]): a failed
/// `ValidationSucceeded` means nothing else was evaluated (the rest Unknown); a failed
/// `Ready` alone (the object could not be resolved at all) leaves the resolution steps
/// Unknown; a failed resolution step (subnets, security groups, AMIs, instance profile,
/// node class) means validation and the steps not named passed — the provisioner
/// resolves them together and reports every step that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: ObjectKind,
    pub name: String,
    /// The condition type made False: "SubnetsReady", "NodeClassReady", "Ready"...
    pub condition: String,
    /// CamelCase: "SubnetsNotFound".
    pub reason: String,
    pub message: String,
    /// The object's version a notice is about ([`Problem::fields_not_honoured`]: logged
    /// once per version); `None` for every other problem.
    pub version: Option<String>,
}

impl Problem {
    fn new(kind: ObjectKind, name: &str, condition: &str, reason: &str, message: String) -> Self {
        Problem {
            kind,
            name: name.into(),
            condition: condition.into(),
            reason: reason.into(),
            message,
            version: None,
        }
    }

    /// The object carries fields nodewright ignores, only partly honours or does not
    /// know. Not a failure: `ValidationSucceeded` stays True with reason
    /// [`UNSUPPORTED_FIELDS_IGNORED`] and the fields in its message; the warning is
    /// logged once per version of the object, with no event.
    pub fn fields_not_honoured(kind: ObjectKind, fields: &ObjectFields) -> Self {
        Problem {
            version: Some(fields.version.clone()),
            ..Self::new(
                kind,
                &fields.name,
                VALIDATION_SUCCEEDED,
                UNSUPPORTED_FIELDS_IGNORED,
                fields.message(),
            )
        }
    }

    /// A notice ([`Problem::fields_not_honoured`]), not a failure.
    pub fn is_notice(&self) -> bool {
        self.reason == UNSUPPORTED_FIELDS_IGNORED
    }

    /// The class's `subnetSelectorTerms` (summarized by the caller, e.g.
    /// `tags karpenter.sh/discovery=prod`) select no subnet.
    pub fn no_subnets(node_class: &str, selector_summary: &str) -> Self {
        Self::new(
            ObjectKind::Ec2NodeClass,
            node_class,
            SUBNETS_READY,
            "SubnetsNotFound",
            format!("subnetSelectorTerms ({selector_summary}) select no subnet"),
        )
    }

    /// The class's `securityGroupSelectorTerms` select no security group.
    pub fn no_security_groups(node_class: &str, selector_summary: &str) -> Self {
        Self::new(
            ObjectKind::Ec2NodeClass,
            node_class,
            SECURITY_GROUPS_READY,
            "SecurityGroupsNotFound",
            format!("securityGroupSelectorTerms ({selector_summary}) select no security group"),
        )
    }

    /// The class's `capacityReservationSelectorTerms` could not be looked up (EC2
    /// refused the filters): Karpenter's `CapacityReservationsReady` False.
    pub fn capacity_reservations_unavailable(node_class: &str, message: impl Into<String>) -> Self {
        Self::new(
            ObjectKind::Ec2NodeClass,
            node_class,
            CAPACITY_RESERVATIONS_READY,
            "CapacityReservationsNotFound",
            message.into(),
        )
    }

    /// The class's `amiSelectorTerms` select no image (for this Kubernetes version).
    pub fn no_images(node_class: &str, selector_summary: &str) -> Self {
        Self::new(
            ObjectKind::Ec2NodeClass,
            node_class,
            AMIS_READY,
            "AMINotFound",
            format!("amiSelectorTerms ({selector_summary}) select no AMI"),
        )
    }

    /// The class's instance profile could not be found or created.
    pub fn no_instance_profile(node_class: &str, message: impl Into<String>) -> Self {
        Self::new(
            ObjectKind::Ec2NodeClass,
            node_class,
            INSTANCE_PROFILE_READY,
            "InstanceProfileUnavailable",
            message.into(),
        )
    }

    /// The pool's `nodeClassRef` names an EC2NodeClass that does not exist.
    pub fn node_class_missing(node_pool: &str, node_class: &str) -> Self {
        Self::new(
            ObjectKind::NodePool,
            node_pool,
            NODE_CLASS_READY,
            "NodeClassNotFound",
            format!("EC2NodeClass {node_class:?} does not exist"),
        )
    }

    /// The pool's EC2NodeClass exists but is not ready; the pool's `NodeClassReady`
    /// carries the class's reason, as Karpenter propagates it.
    pub fn node_class_not_ready(
        node_pool: &str,
        node_class: &str,
        class_reason: &str,
        class_message: &str,
    ) -> Self {
        Self::new(
            ObjectKind::NodePool,
            node_pool,
            NODE_CLASS_READY,
            class_reason,
            format!("EC2NodeClass {node_class:?} is not ready: {class_message}"),
        )
    }

    /// The object's spec is invalid (`ValidationSucceeded` False).
    pub fn invalid(kind: ObjectKind, name: &str, message: impl Into<String>) -> Self {
        let reason = match kind {
            ObjectKind::NodePool => "NodePoolValidationFailed",
            ObjectKind::Ec2NodeClass => "NodeClassValidationFailed",
            ObjectKind::NodeOverlay => "RuntimeValidation",
            ObjectKind::CapacityBuffer => "ResolutionFailed",
        };
        Self::new(kind, name, VALIDATION_SUCCEEDED, reason, message.into())
    }

    /// The class could not be resolved at all (the cloud refused the request as
    /// invalid or not found): `Ready` False, the resolution steps Unknown.
    pub fn unresolved(node_class: &str, message: impl Into<String>) -> Self {
        Self::new(
            ObjectKind::Ec2NodeClass,
            node_class,
            READY,
            "NodeClassNotReady",
            message.into(),
        )
    }

    /// The problem behind an object the cluster adapter found invalid.
    pub fn from_invalid(object: &InvalidObject) -> Self {
        match &object.why {
            Invalidity::Spec { message } => Self::invalid(object.kind, &object.name, message),
            Invalidity::NodeClassNotFound { node_class } => {
                Self::node_class_missing(&object.name, node_class)
            }
            Invalidity::NodeClassInvalid { node_class } => Self::node_class_not_ready(
                &object.name,
                node_class,
                "NodeClassValidationFailed",
                "its spec is invalid",
            ),
        }
    }
}

/// Extra `status` fields to write on an object (merged into the same status write as
/// its conditions).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusFields {
    pub kind: ObjectKind,
    pub name: String,
    pub fields: Map<String, Value>,
}

impl StatusFields {
    /// `status.instanceProfile` of an EC2NodeClass, as Karpenter records it.
    pub fn instance_profile(node_class: &str, profile: &str) -> Self {
        let mut fields = Map::new();
        fields.insert("instanceProfile".into(), profile.into());
        StatusFields {
            kind: ObjectKind::Ec2NodeClass,
            name: node_class.into(),
            fields,
        }
    }
}

/// A Normal event for every pod of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPods {
    pub claim: String,
    /// "namespace/name"
    pub pods: Vec<String>,
    /// "Launched" or "Nominated".
    pub reason: String,
    pub message: String,
}

impl ClaimPods {
    /// The claim's instance was launched for these pods.
    pub fn launched(claim: &str, pods: &[String], instance_type: &str, zone: &str) -> Self {
        ClaimPods {
            claim: claim.into(),
            pods: pods.to_vec(),
            reason: "Launched".into(),
            message: format!(
                "NodeClaim {claim} launched as {instance_type} in {zone} for {} pod(s)",
                pods.len()
            ),
        }
    }

    /// These pods are expected to run on the claim's node (`node` once it registered).
    /// The message is Karpenter's: "Pod should schedule on: nodeclaim/X, node/Y".
    pub fn nominated(claim: &str, pods: &[String], node: Option<&str>) -> Self {
        let message = match node {
            Some(node) => format!("Pod should schedule on: nodeclaim/{claim}, node/{node}"),
            None => format!("Pod should schedule on: nodeclaim/{claim}"),
        };
        ClaimPods {
            claim: claim.into(),
            pods: pods.to_vec(),
            reason: "Nominated".into(),
            message,
        }
    }
}

/// What one tick found, for [`Reasons::publish`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ReasonsInput<'a> {
    pub unschedulable: &'a [UnschedulablePod],
    pub problems: &'a [Problem],
    /// EC2NodeClasses that resolved (subnets, security groups, AMIs) and validated.
    pub healthy_node_classes: &'a [String],
    /// NodePools that validated and whose EC2NodeClass is healthy.
    pub healthy_node_pools: &'a [String],
    pub status_fields: &'a [StatusFields],
    pub claims: &'a [ClaimPods],
}

/// What [`Reasons::publish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Findings logged and recorded as decisions (not suppressed).
    pub reported: usize,
    /// Events posted.
    pub events: usize,
    /// Objects whose status changed, in the order written.
    pub statuses_changed: Vec<(ObjectKind, String)>,
    /// Findings and claim events not published again inside the window.
    pub suppressed: usize,
    /// Events, decisions or status writes that failed (each logged).
    pub failures: usize,
    /// Objects whose fields not honoured were logged: once per object version.
    pub fields_logged: usize,
}

// ----- conditions ---------------------------------------------------------------------------

/// The conditions of an object given all its problems this tick (none: healthy).
/// Every dependent condition of the kind is set, then `Ready`; a problem naming a
/// condition outside the kind's set adds it False too. Notices
/// ([`Problem::fields_not_honoured`]) fail nothing: a True `ValidationSucceeded` takes
/// their reason and message.
pub fn conditions_for(kind: ObjectKind, problems: &[&Problem]) -> Vec<Condition> {
    let (notices, failures): (Vec<&Problem>, Vec<&Problem>) =
        problems.iter().copied().partition(|p| p.is_notice());
    let mut out = failure_conditions(kind, &failures);
    if let Some(notice) = notices.first() {
        let message = notices
            .iter()
            .map(|n| n.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        for c in out
            .iter_mut()
            .filter(|c| c.type_ == VALIDATION_SUCCEEDED && c.status == ConditionStatus::True)
        {
            c.reason = notice.reason.clone();
            c.message = clip(&message, CONDITION_MESSAGE_LIMIT);
        }
    }
    out
}

/// [`conditions_for`] of the problems that are failures.
fn failure_conditions(kind: ObjectKind, problems: &[&Problem]) -> Vec<Condition> {
    let Some(first) = problems.first() else {
        let mut all: Vec<Condition> = dependents(kind).iter().map(|t| Condition::met(t)).collect();
        all.push(Condition::met(READY));
        return all;
    };
    let named = |t: &str| problems.iter().find(|p| p.condition == t);
    let invalid = named(VALIDATION_SUCCEEDED);
    let unresolved = named(READY);
    let mut out = Vec::new();
    for &t in dependents(kind) {
        let condition = if let Some(p) = named(t) {
            Condition::failed(t, &p.reason, clip(&p.message, CONDITION_MESSAGE_LIMIT))
        } else if t == VALIDATION_SUCCEEDED {
            // Any other problem was found after validation passed.
            Condition::met(t)
        } else if let Some(blocker) = invalid.or(unresolved) {
            Condition::unknown(
                t,
                NOT_EVALUATED,
                format!("not evaluated: {} is False", blocker.condition),
            )
        } else {
            Condition::met(t)
        };
        out.push(condition);
    }
    for p in problems {
        if p.condition != READY && !out.iter().any(|c| c.type_ == p.condition) {
            out.push(Condition::failed(
                &p.condition,
                &p.reason,
                clip(&p.message, CONDITION_MESSAGE_LIMIT),
            ));
        }
    }
    let message = problems
        .iter()
        .map(|p| p.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    out.push(Condition::failed(
        READY,
        &first.reason,
        clip(&message, CONDITION_MESSAGE_LIMIT),
    ));
    out
}

/// At most `limit` bytes of `s`, cut at a character boundary.
fn clip(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_string();
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

// ----- publishing -------------------------------------------------------------------------

/// Remembered publications, each with when it went out.
#[derive(Default)]
struct Memory {
    /// Findings logged and recorded as decisions.
    reported: HashMap<String, i64>,
    /// Events posted.
    posted: HashMap<String, i64>,
    /// Statuses written (or found already so).
    statuses: HashMap<(ObjectKind, String), (StatusUpdate, i64)>,
    /// The version of each object whose fields not honoured were last logged (not
    /// windowed: once per version; objects without a notice this tick are forgotten).
    fields_logged: HashMap<(ObjectKind, String), String>,
}

/// One finding or notice to publish: a log line and a decision (findings only) and an
/// event, under one de-duplication key.
struct Notice {
    key: String,
    event: ClusterEvent,
    finding: Option<Finding>,
}

/// The log line and decision of a finding.
enum Finding {
    Pod { pod: String, why: String },
    Object(Problem),
}

/// The outcome of one notice's I/O: (key, event posted?, decision written?), `None`
/// when not attempted.
type Sent = (String, Option<bool>, Option<bool>);

/// Publishes what a tick found (see the module documentation), remembering what went
/// out so that repeats inside [`DEDUPE_WINDOW`] are not published again. Build one per
/// cold start and keep it with the provisioner.
pub struct Reasons {
    window: i64,
    memory: Mutex<Memory>,
}

impl Default for Reasons {
    fn default() -> Self {
        Self::new()
    }
}

impl Reasons {
    pub fn new() -> Self {
        Self::with_window(DEDUPE_WINDOW)
    }

    /// With another de-duplication window (tests, a noisier deployment).
    pub fn with_window(window: Duration) -> Self {
        Reasons {
            window: i64::try_from(window.as_secs()).unwrap_or(i64::MAX),
            memory: Mutex::default(),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes `input` as found at `now` (Unix seconds). Never fails; see
    /// [`PublishReport`] for what went out.
    pub async fn publish(
        &self,
        ports: &Ports,
        now: i64,
        input: &ReasonsInput<'_>,
    ) -> PublishReport {
        let mut report = PublishReport::default();
        self.forget_before(now.saturating_sub(self.window));
        self.log_fields_not_honoured(input.problems, &mut report);
        let notices = notices(input);
        let sends = self.log_and_select(notices, now, &mut report);
        let sent: Vec<Sent> = stream::iter(sends)
            .map(|(notice, post, decide)| send(ports, now, notice, post, decide))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        {
            let mut memory = self.memory();
            for (key, posted, decided) in sent {
                match posted {
                    Some(true) => {
                        report.events += 1;
                        memory.posted.insert(key, now);
                    }
                    Some(false) => report.failures += 1,
                    None => {}
                }
                if decided == Some(false) {
                    report.failures += 1;
                }
            }
        }
        self.write_statuses(ports, now, input, &mut report).await;
        report
    }

    /// Logs each object's fields not honoured, once per version of the object.
    fn log_fields_not_honoured(&self, problems: &[Problem], report: &mut PublishReport) {
        let mut memory = self.memory();
        let current: HashSet<(ObjectKind, &str)> = problems
            .iter()
            .filter(|p| p.is_notice())
            .map(|p| (p.kind, p.name.as_str()))
            .collect();
        memory
            .fields_logged
            .retain(|(kind, name), _| current.contains(&(*kind, name.as_str())));
        for p in problems.iter().filter(|p| p.is_notice()) {
            let version = p.version.clone().unwrap_or_default();
            let key = (p.kind, p.name.clone());
            if memory.fields_logged.get(&key) == Some(&version) {
                continue;
            }
            warn!(
                object_kind = %p.kind,
                object = %p.name,
                generation = %version,
                fields = %p.message,
                "the object carries Karpenter fields nodewright does not fully honour"
            );
            memory.fields_logged.insert(key, version);
            report.fields_logged += 1;
        }
    }

    fn forget_before(&self, cutoff: i64) {
        let mut memory = self.memory();
        memory.reported.retain(|_, at| *at > cutoff);
        memory.posted.retain(|_, at| *at > cutoff);
        memory.statuses.retain(|_, (_, at)| *at > cutoff);
    }

    /// Logs the findings not reported inside the window and picks what to send for
    /// each notice: (notice, post its event?, write its decision?).
    fn log_and_select(
        &self,
        notices: Vec<Notice>,
        now: i64,
        report: &mut PublishReport,
    ) -> Vec<(Notice, bool, bool)> {
        let mut memory = self.memory();
        let mut this_tick = HashSet::new();
        let mut out = Vec::new();
        for notice in notices {
            if !this_tick.insert(notice.key.clone()) {
                continue;
            }
            let post = !memory.posted.contains_key(&notice.key);
            let decide = match &notice.finding {
                Some(finding) if !memory.reported.contains_key(&notice.key) => {
                    log_finding(finding);
                    memory.reported.insert(notice.key.clone(), now);
                    report.reported += 1;
                    true
                }
                _ => false,
            };
            if post || decide {
                out.push((notice, post, decide));
            } else {
                debug!(key = %notice.key, "already published in this window");
                report.suppressed += 1;
            }
        }
        out
    }

    /// Writes each NodeOverlay's `ValidationSucceeded` (and `Ready`) from its verdict,
    /// as Karpenter's NodeOverlay controller does: True, or False with reason
    /// `Conflict` or `RuntimeValidation`. An overlay not applied is logged when its
    /// status changes. Never fails; see [`PublishReport`].
    /// Each CapacityBuffer's status as Karpenter's buffer controller and provisioner
    /// write it: `ReadyForProvisioning` and `Provisioning` (when this pass says), and
    /// `replicas`, `podTemplateRef`, `podTemplateGeneration`, `provisioningStrategy`;
    /// written only when it changed, as every status here.
    pub async fn publish_buffers(
        &self,
        ports: &Ports,
        now: i64,
        buffers: &[nodewright_core::api::buffer::CapacityBuffer],
        resolutions: &[nodewright_core::capacity_buffer::Resolution],
        statuses: &[nodewright_core::capacity_buffer::BufferStatus],
    ) -> PublishReport {
        let mut report = PublishReport::default();
        let updates: Vec<((ObjectKind, String), StatusUpdate)> = buffers
            .iter()
            .zip(resolutions)
            .zip(statuses)
            .map(|((buffer, resolution), status)| {
                let conditions = status
                    .conditions
                    .iter()
                    .map(|c| Condition {
                        type_: c.kind.to_string(),
                        status: if c.status == "True" {
                            ConditionStatus::True
                        } else {
                            ConditionStatus::False
                        },
                        reason: c.reason.to_string(),
                        message: clip(&c.message, CONDITION_MESSAGE_LIMIT),
                    })
                    .collect();
                let resolved = resolution.outcome.as_ref().ok();
                let template = resolved.and_then(|r| r.pod_template.as_ref());
                let mut fields = Map::new();
                fields.insert(
                    "replicas".into(),
                    status.replicas.map_or(Value::Null, Value::from),
                );
                fields.insert(
                    "podTemplateRef".into(),
                    template.map_or(Value::Null, |(name, _)| serde_json::json!({ "name": name })),
                );
                fields.insert(
                    "podTemplateGeneration".into(),
                    template.map_or(Value::Null, |(_, generation)| Value::from(*generation)),
                );
                fields.insert(
                    "provisioningStrategy".into(),
                    Value::from(buffer.provisioning_strategy.clone()),
                );
                let update = StatusUpdate { conditions, fields };
                ((ObjectKind::CapacityBuffer, buffer.key()), update)
            })
            .collect();
        for (status, (key, update)) in statuses.iter().zip(&updates) {
            let known = self
                .memory()
                .statuses
                .get(key)
                .is_some_and(|(last, _)| last == update);
            if !known {
                let summary: Vec<String> = status
                    .conditions
                    .iter()
                    .map(|c| format!("{}={} {}", c.kind, c.status, c.reason))
                    .collect();
                info!(capacity_buffer = %status.buffer, replicas = ?status.replicas,
                    existing = status.existing, new_capacity = status.new_capacity,
                    failed = status.failed, conditions = %summary.join(", "), "capacity buffer");
            }
        }
        self.write_updates(ports, now, updates, &mut report).await;
        report
    }

    pub async fn publish_overlays(
        &self,
        ports: &Ports,
        now: i64,
        statuses: &[nodewright_core::overlay::OverlayStatus],
    ) -> PublishReport {
        let mut report = PublishReport::default();
        if statuses.is_empty() {
            return report;
        }
        let updates: Vec<((ObjectKind, String), StatusUpdate)> = statuses
            .iter()
            .map(|s| {
                let conditions = if s.succeeded() {
                    vec![Condition::met(VALIDATION_SUCCEEDED), Condition::met(READY)]
                } else {
                    let message = clip(&s.message(), CONDITION_MESSAGE_LIMIT);
                    vec![
                        Condition::failed(VALIDATION_SUCCEEDED, s.reason(), message.clone()),
                        Condition::failed(READY, s.reason(), message),
                    ]
                };
                let update = StatusUpdate {
                    conditions,
                    fields: Map::new(),
                };
                ((ObjectKind::NodeOverlay, s.name.clone()), update)
            })
            .collect();
        for (s, (key, update)) in statuses.iter().zip(&updates) {
            let known = self
                .memory()
                .statuses
                .get(key)
                .is_some_and(|(last, _)| last == update);
            if !s.succeeded() && !known {
                warn!(node_overlay = %s.name, reason = s.reason(), message = %s.message(), "NodeOverlay not applied");
            }
        }
        self.write_updates(ports, now, updates, &mut report).await;
        report
    }

    /// Writes each reported object's conditions (and extra fields) unless the same
    /// status was written inside the window.
    async fn write_statuses(
        &self,
        ports: &Ports,
        now: i64,
        input: &ReasonsInput<'_>,
        report: &mut PublishReport,
    ) {
        self.write_updates(ports, now, status_updates(input), report)
            .await;
    }

    /// Writes each status unless the same was written inside the window.
    async fn write_updates(
        &self,
        ports: &Ports,
        now: i64,
        updates: Vec<((ObjectKind, String), StatusUpdate)>,
        report: &mut PublishReport,
    ) {
        let updates: Vec<((ObjectKind, String), StatusUpdate)> = updates
            .into_iter()
            .filter(|(object, update)| {
                let memory = self.memory();
                memory
                    .statuses
                    .get(object)
                    .is_none_or(|(last, _)| last != update)
            })
            .collect();
        let results: Vec<_> = stream::iter(updates)
            .map(|((kind, name), update)| async move {
                let result = ports.cluster.update_status(kind, &name, &update, now).await;
                ((kind, name), update, result)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut memory = self.memory();
        for ((kind, name), update, result) in results {
            match result {
                Ok(changed) => {
                    if changed {
                        let ready = update
                            .conditions
                            .iter()
                            .find(|c| c.type_ == READY)
                            .map(|c| c.status.as_str())
                            .unwrap_or("");
                        info!(object_kind = %kind, object = %name, ready, "status written");
                        report.statuses_changed.push((kind, name.clone()));
                    }
                    memory.statuses.insert((kind, name), (update, now));
                }
                Err(e) => {
                    warn!(object_kind = %kind, object = %name, error = %e, "could not write status");
                    report.failures += 1;
                }
            }
        }
    }
}

fn log_finding(finding: &Finding) {
    match finding {
        Finding::Pod { pod, why } => warn!(pod = %pod, reason = %why, "pod cannot be scheduled"),
        Finding::Object(p) => warn!(
            object_kind = %p.kind,
            object = %p.name,
            condition = %p.condition,
            reason = %p.reason,
            detail = %p.message,
            "object cannot be used"
        ),
    }
}

/// Every finding and claim event of a tick, with its de-duplication key.
fn notices(input: &ReasonsInput<'_>) -> Vec<Notice> {
    let mut out = Vec::new();
    for u in input.unschedulable {
        let message = clip(
            &format!("nodewright cannot launch a node for this pod: {}", u.reason),
            EVENT_MESSAGE_LIMIT,
        );
        let Some(event) =
            ClusterEvent::about_pod(&u.pod, EventType::Warning, "FailedScheduling", message)
        else {
            warn!(pod = %u.pod, "an unschedulable pod without a namespace; no event posted");
            continue;
        };
        out.push(Notice {
            key: format!("Pod/{}/FailedScheduling/{}", u.pod, u.reason),
            event,
            finding: Some(Finding::Pod {
                pod: u.pod.clone(),
                why: u.reason.clone(),
            }),
        });
    }
    for p in input.problems.iter().filter(|p| !p.is_notice()) {
        out.push(Notice {
            key: format!("{}/{}/{}/{}", p.kind, p.name, p.reason, p.message),
            event: ClusterEvent::about_object(
                p.kind,
                &p.name,
                EventType::Warning,
                &p.reason,
                clip(&p.message, EVENT_MESSAGE_LIMIT),
            ),
            finding: Some(Finding::Object(p.clone())),
        });
    }
    for claim in input.claims {
        for pod in &claim.pods {
            let message = clip(&claim.message, EVENT_MESSAGE_LIMIT);
            let Some(event) =
                ClusterEvent::about_pod(pod, EventType::Normal, &claim.reason, message)
            else {
                warn!(pod = %pod, claim = %claim.claim, "a claim's pod without a namespace; no event posted");
                continue;
            };
            out.push(Notice {
                key: format!("Pod/{pod}/{}/{}", claim.reason, claim.message),
                event,
                finding: None,
            });
        }
    }
    out
}

/// Posts the notice's event and writes its decision, as chosen.
async fn send(ports: &Ports, now: i64, notice: Notice, post: bool, decide: bool) -> Sent {
    let decided = match (&notice.finding, decide) {
        (Some(finding), true) => {
            let decision = decision_for(finding, now);
            Some(match ports.decisions.record_decision(&decision).await {
                Ok(()) => true,
                Err(e) => {
                    warn!(action = %decision.action, error = %e, "could not record decision");
                    false
                }
            })
        }
        _ => None,
    };
    let posted = if post {
        Some(match ports.cluster.record_event(&notice.event).await {
            Ok(()) => true,
            Err(e) => {
                warn!(
                    reason = %notice.event.reason,
                    object_kind = %notice.event.kind,
                    object = %notice.event.name,
                    error = %e,
                    "could not record event"
                );
                false
            }
        })
    } else {
        None
    };
    (notice.key, posted, decided)
}

fn decision_for(finding: &Finding, now: i64) -> Decision {
    let (action, reason) = match finding {
        Finding::Pod { pod, why } => (format!("cannot schedule {pod}"), why.clone()),
        Finding::Object(p) => (
            format!("cannot use {} {:?}", p.kind, p.name),
            format!("{} ({} False): {}", p.reason, p.condition, p.message),
        ),
    };
    Decision {
        at: now,
        job: "provision".into(),
        action,
        reason,
        price_per_hour: None,
    }
}

/// The status of every object the tick reported on: conditions from its problems (or
/// all True when listed healthy), plus extra fields.
fn status_updates(input: &ReasonsInput<'_>) -> Vec<((ObjectKind, String), StatusUpdate)> {
    let mut order: Vec<(ObjectKind, String)> = Vec::new();
    let mut problems: HashMap<(ObjectKind, String), Vec<&Problem>> = HashMap::new();
    for p in input.problems {
        let key = (p.kind, p.name.clone());
        if !problems.contains_key(&key) {
            order.push(key.clone());
        }
        problems.entry(key).or_default().push(p);
    }
    let healthy = input
        .healthy_node_classes
        .iter()
        .map(|n| (ObjectKind::Ec2NodeClass, n))
        .chain(
            input
                .healthy_node_pools
                .iter()
                .map(|n| (ObjectKind::NodePool, n)),
        );
    for (kind, name) in healthy {
        let key = (kind, name.clone());
        // Problems win over a contradictory "healthy".
        if !problems.contains_key(&key) && !order.contains(&key) {
            order.push(key);
        }
    }
    let mut updates: Vec<((ObjectKind, String), StatusUpdate)> = order
        .into_iter()
        .map(|key| {
            let found = problems.get(&key).map(Vec::as_slice).unwrap_or_default();
            let update = StatusUpdate {
                conditions: conditions_for(key.0, found),
                fields: Map::new(),
            };
            (key, update)
        })
        .collect();
    for extra in input.status_fields {
        let key = (extra.kind, extra.name.clone());
        match updates.iter_mut().find(|(k, _)| *k == key) {
            Some((_, update)) => update.fields.extend(extra.fields.clone()),
            None => updates.push((
                key,
                StatusUpdate {
                    conditions: Vec::new(),
                    fields: extra.fields.clone(),
                },
            )),
        }
    }
    updates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(conditions: &'a [Condition], t: &str) -> &'a Condition {
        conditions
            .iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t} in {conditions:#?}"))
    }

    #[test]
    fn a_healthy_class_has_every_condition_true_with_its_type_as_reason() {
        let all = conditions_for(ObjectKind::Ec2NodeClass, &[]);
        assert_eq!(all.len(), NODE_CLASS_CONDITIONS.len() + 1);
        for c in &all {
            assert_eq!(c.status, ConditionStatus::True, "{c:?}");
            assert_eq!(c.reason, c.type_);
            assert!(c.message.is_empty());
        }
    }

    #[test]
    fn a_failed_resolution_step_fails_ready_and_leaves_the_other_steps_true() {
        let p = Problem::no_subnets("default", "tags karpenter.sh/discovery=prod");
        let all = conditions_for(ObjectKind::Ec2NodeClass, &[&p]);
        assert_eq!(find(&all, SUBNETS_READY).status, ConditionStatus::False);
        assert_eq!(find(&all, SUBNETS_READY).reason, "SubnetsNotFound");
        assert_eq!(find(&all, READY).status, ConditionStatus::False);
        assert_eq!(find(&all, READY).reason, "SubnetsNotFound");
        assert_eq!(find(&all, READY).message, p.message);
        for t in [SECURITY_GROUPS_READY, AMIS_READY, VALIDATION_SUCCEEDED] {
            assert_eq!(find(&all, t).status, ConditionStatus::True, "{t}");
        }
    }

    #[test]
    fn a_failed_validation_leaves_every_later_step_unknown() {
        let p = Problem::invalid(ObjectKind::NodePool, "web", "spec.weight: not a number");
        let all = conditions_for(ObjectKind::NodePool, &[&p]);
        let validation = find(&all, VALIDATION_SUCCEEDED);
        assert_eq!(validation.status, ConditionStatus::False);
        assert_eq!(validation.reason, "NodePoolValidationFailed");
        assert_eq!(
            find(&all, NODE_CLASS_READY).status,
            ConditionStatus::Unknown
        );
        assert_eq!(find(&all, NODE_CLASS_READY).reason, NOT_EVALUATED);
        assert_eq!(find(&all, READY).status, ConditionStatus::False);
    }

    #[test]
    fn an_unresolved_class_passed_validation_and_its_steps_are_unknown() {
        let p = Problem::unresolved("default", "InvalidParameterValue");
        let all = conditions_for(ObjectKind::Ec2NodeClass, &[&p]);
        assert_eq!(
            find(&all, VALIDATION_SUCCEEDED).status,
            ConditionStatus::True
        );
        assert_eq!(find(&all, SUBNETS_READY).status, ConditionStatus::Unknown);
        assert_eq!(find(&all, READY).reason, "NodeClassNotReady");
        assert_eq!(all.iter().filter(|c| c.type_ == READY).count(), 1);
    }

    #[test]
    fn several_problems_are_all_named_and_ready_carries_the_first_reason_and_every_message() {
        let a = Problem::no_subnets("default", "a");
        let b = Problem::no_security_groups("default", "b");
        let all = conditions_for(ObjectKind::Ec2NodeClass, &[&a, &b]);
        assert_eq!(find(&all, SUBNETS_READY).status, ConditionStatus::False);
        assert_eq!(
            find(&all, SECURITY_GROUPS_READY).status,
            ConditionStatus::False
        );
        assert_eq!(find(&all, READY).reason, "SubnetsNotFound");
        assert_eq!(
            find(&all, READY).message,
            format!("{}; {}", a.message, b.message)
        );
    }

    #[test]
    fn a_pool_whose_class_is_invalid_carries_the_class_reason() {
        let p = Problem::from_invalid(&InvalidObject {
            kind: ObjectKind::NodePool,
            name: "web".into(),
            why: Invalidity::NodeClassInvalid {
                node_class: "default".into(),
            },
        });
        assert_eq!(p.condition, NODE_CLASS_READY);
        assert_eq!(p.reason, "NodeClassValidationFailed");
        let missing = Problem::from_invalid(&InvalidObject {
            kind: ObjectKind::NodePool,
            name: "web".into(),
            why: Invalidity::NodeClassNotFound {
                node_class: "gpu".into(),
            },
        });
        assert_eq!(missing.reason, "NodeClassNotFound");
        let all = conditions_for(ObjectKind::NodePool, &[&missing]);
        assert_eq!(
            find(&all, VALIDATION_SUCCEEDED).status,
            ConditionStatus::True
        );
    }

    #[test]
    fn a_notice_alone_keeps_every_condition_true_and_names_the_fields_on_validation() {
        let object = serde_json::json!({"metadata": {"name": "web", "generation": 2},
            "spec": {"template": {"spec": {"taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "x"}]}}}});
        let fields = ObjectFields::of(nodewright_core::api::Kind::NodePool, &object)
            .expect("timeAdded is not honoured");
        let notice = Problem::fields_not_honoured(ObjectKind::NodePool, &fields);
        assert!(notice.is_notice());
        assert_eq!(notice.version.as_deref(), Some("2"));
        let all = conditions_for(ObjectKind::NodePool, &[&notice]);
        assert!(
            all.iter().all(|c| c.status == ConditionStatus::True),
            "{all:#?}"
        );
        let validation = find(&all, VALIDATION_SUCCEEDED);
        assert_eq!(validation.reason, UNSUPPORTED_FIELDS_IGNORED);
        assert_eq!(validation.message, fields.message());
        assert_eq!(find(&all, READY).reason, READY);
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let s = "é".repeat(600);
        let cut = clip(&s, EVENT_MESSAGE_LIMIT);
        assert!(cut.len() <= EVENT_MESSAGE_LIMIT);
        assert_eq!(cut.len(), EVENT_MESSAGE_LIMIT);
        assert_eq!(clip("short", 10), "short");
        let odd = clip(&s, 1023);
        assert_eq!(odd.len(), 1022);
    }

    #[test]
    fn extra_status_fields_join_the_objects_conditions_or_stand_alone() {
        let healthy = vec!["default".to_string()];
        let fields = vec![
            StatusFields::instance_profile("default", "nodewright_profile"),
            StatusFields::instance_profile("other", "p2"),
        ];
        let updates = status_updates(&ReasonsInput {
            healthy_node_classes: &healthy,
            status_fields: &fields,
            ..ReasonsInput::default()
        });
        assert_eq!(updates.len(), 2);
        assert_eq!(updates[0].0, (ObjectKind::Ec2NodeClass, "default".into()));
        assert_eq!(updates[0].1.fields["instanceProfile"], "nodewright_profile");
        assert!(!updates[0].1.conditions.is_empty());
        assert!(updates[1].1.conditions.is_empty());
    }
}
