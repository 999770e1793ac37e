//! The NodeClaim lifecycle as pure data and pure functions.
//!
//! ```text
//! Launching → Launched → Registered → Initialized → Disrupting{reason} → Draining → Terminating → Terminated
//!     ↘ LaunchFailed (terminal)        ↑ Launched and Registered may also go to Disrupting (liveness, interruption)
//! ```
//! A disruption command's candidate that was never validated goes back
//! `Disrupting → Initialized` when the command is abandoned (its node was only cordoned).
//! Every store write of a claim is a conditional update on (expected state, version);
//! `transition` is the only way to produce the next record, so no job can skip a state.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::catalog::CapacityType;
use crate::overlay::OverlaysApplied;
use crate::share::Shared;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum ClaimState {
    Launching,
    Launched,
    Registered,
    Initialized,
    Disrupting,
    Draining,
    Terminating,
    Terminated,
    LaunchFailed,
}

impl ClaimState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::Launching => "Launching",
            ClaimState::Launched => "Launched",
            ClaimState::Registered => "Registered",
            ClaimState::Initialized => "Initialized",
            ClaimState::Disrupting => "Disrupting",
            ClaimState::Draining => "Draining",
            ClaimState::Terminating => "Terminating",
            ClaimState::Terminated => "Terminated",
            ClaimState::LaunchFailed => "LaunchFailed",
        }
    }

    /// No further transition is possible.
    pub fn is_terminal(self) -> bool {
        matches!(self, ClaimState::Terminated | ClaimState::LaunchFailed)
    }

    /// The claim has (or may have) an instance that is not being taken away yet:
    /// capacity the planner can count on.
    pub fn is_live_capacity(self) -> bool {
        matches!(
            self,
            ClaimState::Launching
                | ClaimState::Launched
                | ClaimState::Registered
                | ClaimState::Initialized
        )
    }

    /// Disrupting, Draining or Terminating: on its way out, not there yet.
    pub fn is_being_taken_away(self) -> bool {
        matches!(
            self,
            ClaimState::Disrupting | ClaimState::Draining | ClaimState::Terminating
        )
    }

    /// Whether `self → next` is an allowed step.
    pub fn can_become(self, next: ClaimState) -> bool {
        use ClaimState::*;
        matches!(
            (self, next),
            (Launching, Launched)
                | (Launching, LaunchFailed)
                | (Launched, Registered)
                | (Launched, Disrupting)
                | (Registered, Initialized)
                | (Registered, Disrupting)
                | (Initialized, Disrupting)
                | (Disrupting, Initialized)
                | (Disrupting, Draining)
                | (Draining, Terminating)
                | (Terminating, Terminated)
        )
    }
}

/// Why a claim is being taken away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DisruptionCause {
    SpotInterrupted,
    RebalanceRecommended,
    InstanceStopped,
    InstanceTerminated,
    ScheduledChange,
    /// Launched but never registered within the registration TTL.
    Unregistered,
    Expired,
    Drifted,
    Empty,
    Underutilized,
    /// Node repair: a condition the kubelet or the node monitoring agent reports stayed
    /// unhealthy past its toleration, or EC2's status checks failed.
    Unhealthy,
    /// A static NodePool has more nodes than its `replicas` (Karpenter's termination
    /// reason "overprovisioned"): taken away gracefully, outside disruption budgets.
    Overprovisioned,
    /// The node runs in a Capacity Block about to end (Karpenter's capacity
    /// reservation expiration): drained before EC2 reclaims the block.
    CapacityReservationExpiring,
    /// The owner of the interruptible capacity reservation the node runs in takes the
    /// instance back (EC2's capacity reservation interruption warning).
    CapacityReservationInterrupted,
}

/// One NodeClaim as the store records it. Times are Unix seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaim {
    pub name: String,
    pub node_pool: String,
    pub node_class: String,
    pub state: ClaimState,
    /// Bumped on every write; writes are conditional on the previous value.
    pub version: u64,
    /// Candidate instance types, cheapest first. Shared, not copied, when the claim is:
    /// up to 60 names, copied with every claim a poll or a decision reads.
    pub instance_type_options: Shared<Vec<String>>,
    pub zones: Vec<String>,
    pub capacity_types: Vec<CapacityType>,
    /// The pods the claim was made for (namespace/name), for explanations (shared, as
    /// the options are).
    pub pods: Shared<Vec<String>>,
    /// Labels its node must carry beyond its NodePool's and its type's: values the
    /// plan settled on for multi-valued keys (a pod's selector, a topology pin).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub created_at: i64,
    pub updated_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<CapacityType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    /// Why a launch failed, as the cloud said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// When the store may forget a terminal claim (DynamoDB TTL attribute; Unix seconds).
    /// Set on the Terminated tombstone, so late events for its instance are still
    /// recognised as ours (and ignored) for a while.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// Recorded from a node Karpenter launched (`NodeClaim::adopted`): its instance
    /// carries Karpenter's tags, not nodewright's, and is listed with them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
    /// The NodePool and EC2NodeClass drift hashes the claim was launched with
    /// (`crate::disruption::hash`), written on its node at registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodepool_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodeclass_hash: Option<String>,
    /// When a driver recorded that it is about to send TerminateInstances (the intent,
    /// written first, so two drivers of one claim never both send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate_requested_at: Option<i64>,
    /// Whether NodeOverlays priced or sized any of `instance_type_options` when the
    /// claim was made: its mirror's `karpenter.sh/price-overlay-applied` and
    /// `capacity-overlay-applied` annotations. Absent in claims stored before.
    #[serde(default, skip_serializing_if = "OverlaysApplied::is_none")]
    pub overlays_applied: OverlaysApplied,
    /// A reboot for repair in flight (the claim stays live capacity meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<Reboot>,
    /// When each reboot for repair of this claim was committed (Unix seconds, the last
    /// 24 hours): a third within a day replaces the node instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reboots: Vec<i64>,
    /// When the last reboot for repair ended well: repair tolerations count from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebooted_at: Option<i64>,
}

/// A reboot for repair in flight: requested (tainted `karpenter.sh/rebooting`, the
/// pods drained within `grace_secs`), then issued (RebootInstances sent), then over
/// when the node's boot id changed and it is Ready again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reboot {
    pub requested_at: i64,
    /// The condition behind it, as the decision log says it.
    pub reason: String,
    /// How long the drain before the reboot may take (seconds; `None`: until the pods
    /// are gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_secs: Option<i64>,
    /// The node's boot id when the reboot was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    pub cause: DisruptionCause,
    /// When the instance will be gone regardless (spot: event time + 2 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
    pub since: i64,
    /// The drain waits until then (replace-then-drain: cordoned first, drained when the
    /// replacement is up or the deadline nears).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_after: Option<i64>,
    /// How long the drain may take once it starts (seconds): the deadline is set then,
    /// never later than one already set (node repair's bound: the replacement comes
    /// first, the bound counts from the drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_grace: Option<i64>,
    /// The event (interruption message id) that started this disruption: a redelivery
    /// of the same event resumes it, another event leaves it to its owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The disruption command this claim is a candidate of (the disruption job's):
    /// the whole command rides on each of its candidates, so any one of them is
    /// enough to resume it after a crash. Such a claim does not drain until the
    /// command is validated.
    ///
    /// Shared, not copied, with the claim: every candidate of a command of many nodes
    /// carries it whole, replacements' instance types included, and their tombstones
    /// keep it, so each read of the claims copied it candidates × candidates times.
    /// An `Arc` rather than a [`Shared`]: `None` already says "no command", and a
    /// command has no empty value for a `Shared` to stand for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Arc<DisruptionCommand>>,
}

/// A disruption command in flight (see `Disruption::command`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionCommand {
    /// Stable across retries: replacement claim names derive from it.
    pub id: String,
    /// Every candidate claim of the command, this one among them.
    pub candidates: Vec<String>,
    /// The claims launched before any candidate drains (names fixed up front, so a
    /// retry finds the claim it created instead of launching another).
    pub replacements: Vec<ClaimSpec>,
    /// Validation passed: the candidates may drain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub validated: bool,
}

impl DisruptionCause {
    /// The instance is gone or going by itself: nothing to wait for (no evictions, no
    /// PDBs), pods and node are simply cleaned up.
    pub fn instance_gone(self) -> bool {
        matches!(
            self,
            DisruptionCause::InstanceStopped | DisruptionCause::InstanceTerminated
        )
    }
}

impl DisruptionCause {
    /// How urgent the cause is: the instance is gone (3), EC2 takes it at a deadline
    /// (2), it should go but nothing forces it now (1).
    pub fn urgency(self) -> u8 {
        match self {
            DisruptionCause::InstanceStopped | DisruptionCause::InstanceTerminated => 3,
            DisruptionCause::SpotInterrupted
            | DisruptionCause::CapacityReservationInterrupted
            | DisruptionCause::Unhealthy => 2,
            _ => 1,
        }
    }
}

impl Disruption {
    /// The disruption in progress after a later event for the same instance
    /// (`incoming`), or `None` when that event asks for nothing more. A more urgent cause
    /// takes over (a spot warning after a rebalance recommendation, a state change after
    /// anything); an earlier deadline is kept; a drain that waits stops waiting when the
    /// new event does not wait. `since` stays: the disruption began with the first event.
    pub fn escalated_by(&self, incoming: &Disruption) -> Option<Disruption> {
        let cause = if incoming.cause.urgency() > self.cause.urgency() {
            incoming.cause
        } else {
            self.cause
        };
        let deadline = match (self.deadline, incoming.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let drain_after = match (self.drain_after, incoming.drain_after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
        let next = Disruption {
            cause,
            deadline,
            since: self.since,
            drain_after,
            drain_grace: self.drain_grace,
            event: self.event.clone(),
            command: self.command.clone(),
        };
        if next.cause == self.cause
            && next.deadline == self.deadline
            && next.drain_after == self.drain_after
        {
            return None;
        }
        // A more urgent event takes the claim out of any disruption command: it drains
        // now, and the command (which waits to validate) is abandoned for the rest.
        Some(Disruption {
            event: incoming.event.clone().or(next.event),
            command: None,
            ..next
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NodeClaim {name:?}: {from:?} cannot become {to:?}")]
pub struct TransitionError {
    pub name: String,
    pub from: ClaimState,
    pub to: ClaimState,
}

/// What a new claim is made of: the plan's decision, before anything is launched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSpec {
    pub name: String,
    pub node_pool: String,
    pub node_class: String,
    pub instance_type_options: Vec<String>,
    pub zones: Vec<String>,
    pub capacity_types: Vec<CapacityType>,
    pub pods: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

/// An instance that is already a node, to be recorded as a claim by
/// [`NodeClaim::adopted`].
#[derive(Debug, Clone, PartialEq)]
pub struct AdoptedInstance {
    pub name: String,
    pub node_pool: String,
    pub node_class: String,
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// `None` when the catalog does not price the type.
    pub price_per_hour: Option<f64>,
    pub node_name: String,
    /// When EC2 launched the instance (Unix seconds).
    pub launched_at: i64,
}

impl NodeClaim {
    /// The disruption command this claim is a candidate of, if any.
    pub fn command(&self) -> Option<&DisruptionCommand> {
        self.disruption.as_ref()?.command.as_deref()
    }

    /// A candidate of a disruption command not yet validated: cordoned, its pods still
    /// running, and nothing certain yet about its going away.
    pub fn held_by_unvalidated_command(&self) -> bool {
        self.state == ClaimState::Disrupting && self.command().is_some_and(|c| !c.validated)
    }

    /// A new claim in its first state, `Launching`, version 1, created at `now`.
    pub fn launching(spec: ClaimSpec, now: i64) -> NodeClaim {
        NodeClaim {
            name: spec.name,
            node_pool: spec.node_pool,
            node_class: spec.node_class,
            state: ClaimState::Launching,
            version: 1,
            instance_type_options: spec.instance_type_options.into(),
            zones: spec.zones,
            capacity_types: spec.capacity_types,
            pods: spec.pods.into(),
            labels: spec.labels,
            created_at: now,
            updated_at: now,
            instance_id: None,
            instance_type: None,
            zone: None,
            capacity_type: None,
            price_per_hour: None,
            node_name: None,
            launched_at: None,
            registered_at: None,
            initialized_at: None,
            disruption: None,
            failure: None,
            expires_at: None,
            adopted: false,
            nodepool_hash: None,
            nodeclass_hash: None,
            terminate_requested_at: None,
            overlays_applied: OverlaysApplied::default(),
            reboot: None,
            reboots: Vec::new(),
            rebooted_at: None,
        }
    }

    /// A claim recorded for an instance someone else launched and that is already a
    /// working node (a node Karpenter launched, adopted after a migration): state
    /// `Initialized`, version 1, created at `now`. The one way a claim starts past
    /// `Launching`: nothing is launched, registered or initialized for it, so no
    /// transition is skipped; from here it follows the ordinary path (Disrupting →
    /// Draining → Terminating → Terminated). `launched_at` is the instance's own
    /// launch time, so expiry counts from when the node really started.
    pub fn adopted(instance: AdoptedInstance, now: i64) -> NodeClaim {
        NodeClaim {
            name: instance.name,
            node_pool: instance.node_pool,
            node_class: instance.node_class,
            state: ClaimState::Initialized,
            version: 1,
            instance_type_options: vec![instance.instance_type.clone()].into(),
            zones: vec![instance.zone.clone()],
            capacity_types: vec![instance.capacity_type],
            pods: Shared::default(),
            labels: BTreeMap::new(),
            created_at: now,
            updated_at: now,
            instance_id: Some(instance.instance_id),
            instance_type: Some(instance.instance_type),
            zone: Some(instance.zone),
            capacity_type: Some(instance.capacity_type),
            price_per_hour: instance.price_per_hour,
            node_name: Some(instance.node_name),
            launched_at: Some(instance.launched_at),
            registered_at: Some(now),
            initialized_at: Some(now),
            disruption: None,
            failure: None,
            expires_at: None,
            adopted: true,
            nodepool_hash: None,
            nodeclass_hash: None,
            terminate_requested_at: None,
            overlays_applied: OverlaysApplied::default(),
            reboot: None,
            reboots: Vec::new(),
            rebooted_at: None,
        }
    }

    /// The next record: same claim in state `to`, version + 1, `updated_at = now`.
    /// `edit` fills in what the step learned (instance id, node name, ...).
    pub fn transition(
        &self,
        to: ClaimState,
        now: i64,
        edit: impl FnOnce(&mut NodeClaim),
    ) -> Result<NodeClaim, TransitionError> {
        if !self.state.can_become(to) {
            return Err(TransitionError {
                name: self.name.clone(),
                from: self.state,
                to,
            });
        }
        let mut next = self.clone();
        next.state = to;
        next.version = self.version + 1;
        next.updated_at = now;
        edit(&mut next);
        Ok(next)
    }

    /// The next record in the *same* state (version + 1, `updated_at = now`): for
    /// changes within a state, such as a disruption escalated by a more urgent event.
    /// Terminal claims are never amended.
    pub fn amend(
        &self,
        now: i64,
        edit: impl FnOnce(&mut NodeClaim),
    ) -> Result<NodeClaim, TransitionError> {
        if self.state.is_terminal() {
            return Err(TransitionError {
                name: self.name.clone(),
                from: self.state,
                to: self.state,
            });
        }
        let mut next = self.clone();
        next.version = self.version + 1;
        next.updated_at = now;
        edit(&mut next);
        next.state = self.state;
        Ok(next)
    }

    /// `aws:///<zone>/<instance-id>`, the providerID the kubelet registers with.
    pub fn provider_id(&self) -> Option<String> {
        Some(format!(
            "aws:///{}/{}",
            self.zone.as_ref()?,
            self.instance_id.as_ref()?
        ))
    }
}

/// The instance id inside a node's providerID (`aws:///us-east-1a/i-0123…`).
pub fn instance_id_from_provider_id(provider_id: &str) -> Option<&str> {
    let id = provider_id.strip_prefix("aws:///")?.rsplit('/').next()?;
    is_instance_id(id).then_some(id)
}

/// `i-` followed by 8 or 17 lowercase hex digits.
pub fn is_instance_id(s: &str) -> bool {
    let Some(hex) = s.strip_prefix("i-") else {
        return false;
    };
    (hex.len() == 8 || hex.len() == 17)
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> NodeClaim {
        NodeClaim::launching(
            ClaimSpec {
                name: "default-abcde".into(),
                node_pool: "default".into(),
                node_class: "default".into(),
                instance_type_options: vec!["m5.large".into()],
                zones: vec!["us-east-1a".into()],
                capacity_types: vec![CapacityType::OnDemand],
                pods: vec![],
                labels: BTreeMap::new(),
            },
            100,
        )
    }

    #[test]
    fn overlay_facts_ride_on_the_stored_claim_and_a_claim_stored_before_them_reads() {
        let older = r#"{"name":"default-abcde","nodePool":"default","nodeClass":"default",
            "state":"Launching","version":1,"instanceTypeOptions":["m5.large"],
            "zones":["us-east-1a"],"capacityTypes":["on-demand"],"pods":[],
            "createdAt":100,"updatedAt":100}"#;
        let read: NodeClaim = serde_json::from_str(older).unwrap();
        assert_eq!(read, claim());
        assert!(read.overlays_applied.is_none());
        // Written only when an overlay applied, and kept through every transition.
        assert!(
            !serde_json::to_string(&read)
                .unwrap()
                .contains("overlaysApplied")
        );
        let mut c = claim();
        c.overlays_applied.capacity = true;
        let text = serde_json::to_string(&c).unwrap();
        assert!(
            text.contains(r#""overlaysApplied":{"capacity":true}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<NodeClaim>(&text).unwrap(), c);
        let moved = c.transition(ClaimState::Launched, 200, |_| {}).unwrap();
        assert!(moved.overlays_applied.capacity && !moved.overlays_applied.price);
    }

    #[test]
    fn a_copied_or_transitioned_claim_shares_its_options_pods_and_command_and_is_stored_as_before()
    {
        let mut c = claim();
        c.pods = vec!["default/web-0".to_string()].into();
        c.state = ClaimState::Initialized;
        let marked = c
            .transition(ClaimState::Disrupting, 200, |n| {
                n.disruption = Some(Disruption {
                    command: Some(Arc::new(DisruptionCommand {
                        id: "cmd-1".into(),
                        candidates: vec!["default-abcde".into()],
                        replacements: vec![],
                        validated: false,
                    })),
                    ..disruption(DisruptionCause::Underutilized, None, None)
                });
            })
            .unwrap();
        let copy = marked.clone();
        assert!(copy.instance_type_options.same_as(&c.instance_type_options));
        assert!(copy.pods.same_as(&c.pods));
        let command = |c: &NodeClaim| c.disruption.as_ref().unwrap().command.clone().unwrap();
        assert!(Arc::ptr_eq(&command(&copy), &command(&marked)));
        // Validating one copy's command leaves the other's as it was.
        let mut validated = copy.clone();
        let shared = validated
            .disruption
            .as_mut()
            .unwrap()
            .command
            .as_mut()
            .unwrap();
        Arc::make_mut(shared).validated = true;
        assert!(!command(&marked).validated && command(&validated).validated);
        // The stored form is the plain one: lists, and the command as an object.
        let text = serde_json::to_string(&validated).unwrap();
        assert!(
            text.contains(r#""instanceTypeOptions":["m5.large"]"#),
            "{text}"
        );
        assert!(text.contains(r#""pods":["default/web-0"]"#), "{text}");
        assert!(text.contains(r#""command":{"id":"cmd-1","candidates":["default-abcde"],"replacements":[],"validated":true}"#), "{text}");
        assert_eq!(serde_json::from_str::<NodeClaim>(&text).unwrap(), validated);
    }

    #[test]
    fn the_happy_path_visits_every_state_in_order() {
        use ClaimState::*;
        let mut c = claim();
        for next in [
            Launched,
            Registered,
            Initialized,
            Disrupting,
            Draining,
            Terminating,
            Terminated,
        ] {
            c = c.transition(next, 200, |_| {}).unwrap();
        }
        assert_eq!(c.version, 8);
        assert!(c.state.is_terminal());
    }

    #[test]
    fn no_state_can_be_skipped_or_left_once_terminal() {
        use ClaimState::*;
        let c = claim();
        assert!(c.transition(Registered, 1, |_| {}).is_err());
        assert!(c.transition(Terminating, 1, |_| {}).is_err());
        let failed = c.transition(LaunchFailed, 1, |_| {}).unwrap();
        for to in [Launching, Launched, Disrupting, Terminating, Terminated] {
            assert!(failed.transition(to, 2, |_| {}).is_err(), "{to:?}");
        }
    }

    fn disruption(
        cause: DisruptionCause,
        deadline: Option<i64>,
        drain_after: Option<i64>,
    ) -> Disruption {
        Disruption {
            cause,
            deadline,
            since: 10,
            drain_after,
            drain_grace: None,
            event: Some(format!("{cause:?}")),
            command: None,
        }
    }

    #[test]
    fn a_spot_warning_escalates_a_rebalance_to_drain_now_with_its_deadline() {
        let rebalance = disruption(DisruptionCause::RebalanceRecommended, None, Some(310));
        let spot = disruption(DisruptionCause::SpotInterrupted, Some(140), None);
        let next = rebalance.escalated_by(&spot).unwrap();
        assert_eq!(next.cause, DisruptionCause::SpotInterrupted);
        assert_eq!(next.deadline, Some(140));
        assert_eq!(next.drain_after, None, "drains now");
        assert_eq!(next.since, 10, "the disruption began with the first event");
        assert_eq!(next.event.as_deref(), Some("SpotInterrupted"));
    }

    #[test]
    fn a_state_change_takes_over_any_disruption_and_a_less_urgent_event_changes_nothing() {
        let spot = disruption(DisruptionCause::SpotInterrupted, Some(140), None);
        let gone = disruption(DisruptionCause::InstanceTerminated, None, None);
        assert_eq!(
            spot.escalated_by(&gone).unwrap().cause,
            DisruptionCause::InstanceTerminated
        );
        let rebalance = disruption(DisruptionCause::RebalanceRecommended, None, Some(310));
        assert_eq!(spot.escalated_by(&rebalance), None);
        assert_eq!(
            spot.escalated_by(&spot.clone()),
            None,
            "a repeat is nothing new"
        );
        let later = disruption(DisruptionCause::SpotInterrupted, Some(200), None);
        assert_eq!(
            spot.escalated_by(&later),
            None,
            "a later deadline is not kept"
        );
    }

    #[test]
    fn amending_keeps_the_state_and_bumps_the_version_but_never_revives_a_terminal_claim() {
        let c = claim();
        let amended = c.amend(5, |c| c.state = ClaimState::Terminated).unwrap();
        assert_eq!((amended.state, amended.version), (ClaimState::Launching, 2));
        let failed = c.transition(ClaimState::LaunchFailed, 1, |_| {}).unwrap();
        assert!(failed.amend(2, |_| {}).is_err());
    }

    #[test]
    fn an_adopted_claim_starts_initialized_and_follows_the_ordinary_path_out() {
        use ClaimState::*;
        let c = NodeClaim::adopted(
            AdoptedInstance {
                name: "default-k8r7x".into(),
                node_pool: "default".into(),
                node_class: "default".into(),
                instance_id: "i-0123456789abcdef0".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: Some(0.04),
                node_name: "ip-10-0-1-23.ec2.internal".into(),
                launched_at: 50,
            },
            100,
        );
        assert_eq!((c.state, c.version), (Initialized, 1));
        assert_eq!(c.launched_at, Some(50));
        assert_eq!(
            c.provider_id().as_deref(),
            Some("aws:///us-east-1a/i-0123456789abcdef0")
        );
        assert_eq!(c.capacity_types, vec![CapacityType::Spot]);
        // The lifecycle before Initialized never happened: it cannot be re-entered.
        for to in [Launching, Launched, Registered, LaunchFailed] {
            assert!(c.transition(to, 101, |_| {}).is_err(), "{to:?}");
        }
        let mut c = c;
        for next in [Disrupting, Draining, Terminating, Terminated] {
            c = c.transition(next, 200, |_| {}).unwrap();
        }
        assert!(c.state.is_terminal());
    }

    #[test]
    fn provider_ids_round_trip_and_reject_forged_ids() {
        let mut c = claim();
        c.zone = Some("us-east-1a".into());
        c.instance_id = Some("i-0123456789abcdef0".into());
        let pid = c.provider_id().unwrap();
        assert_eq!(
            instance_id_from_provider_id(&pid),
            Some("i-0123456789abcdef0")
        );
        assert_eq!(
            instance_id_from_provider_id("aws:///us-east-1a/i-xyz"),
            None
        );
        assert!(is_instance_id("i-12345678"));
        assert!(!is_instance_id("i-1234567"));
        assert!(!is_instance_id("i-0123456789ABCDEF0"));
    }
}
