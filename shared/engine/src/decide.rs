//! Asking core's disruption decision on a gathered view: the disruption job decides
//! with it once per run, and the command machine re-decides with it at validation (on
//! the command's own candidates, as if its replacements were not there yet).
//! Besides the view, core gets what only the engine knows: the nodes already being
//! taken away, and the nodes whose instances drifted from what their EC2NodeClass
//! selects now (image, subnet, security groups, as EC2 reports them).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use nodewright_core::api::model::{Ec2NodeClass, NodePool};
use nodewright_core::capacity_buffer::buffer_room;
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::{ClusterSnapshot, Node, Pod, PodFields};
use nodewright_core::disruption::drift::{LaunchedWith, Selection, external_drift};
use nodewright_core::disruption::horizon::unchanged_until;
use nodewright_core::disruption::{Decision, DisruptionInput};
use nodewright_core::nodeclaim::{DisruptionCommand, NodeClaim, instance_id_from_provider_id};
use nodewright_core::planning_view::{
    ClusterView, in_flight_claims, planning_claims, planning_snapshot,
};
use nodewright_core::pricing::Pricing;
use nodewright_core::provisioning::ProvisioningInput;
use nodewright_core::scheduling::InFlightClaim;
use nodewright_core::well_known::{LABEL_ARCH, LABEL_CAPACITY_RESERVATION_ID, LABEL_NODEPOOL};

use crate::gather::Gathered;
use crate::ports::Instance;

/// Core's decision function, as the engine calls it (injected by tests). It must be a
/// function of its input alone, as core's is: the disruption job answers a run whose
/// input is unchanged with the decision it already has ([`Remembered`]).
pub type Decider = Arc<dyn Fn(&DisruptionInput<'_>) -> Decision + Send + Sync>;

/// Core's `decide`.
pub fn default_decider() -> Decider {
    Arc::new(|input: &DisruptionInput<'_>| nodewright_core::disruption::decide(input))
}

/// Asks core on the gathered view of the cluster. At validation, `revalidate` holds
/// the commands being checked (empty for a fresh decision): their replacements' nodes
/// are left out (their pods, if any, are pending in the view), their own candidates
/// are not "already disrupting", and core decides on those candidates alone (a fresh
/// decision over the whole cluster may pick another set of nodes, and would abandon a
/// command that still holds). The commands due in one poll are checked by one decision:
/// at 5,000 nodes a drift wave validates hundreds of commands a poll, and a decision
/// each would cost the poll hundreds of passes over the whole cluster.
pub(crate) fn decide(
    decider: &Decider,
    spot_to_spot: bool,
    gathered: &Gathered,
    now: i64,
    revalidate: &[&DisruptionCommand],
) -> Decision {
    decide_remembering(decider, spot_to_spot, gathered, now, revalidate, None)
}

/// [`decide`], answered from `remembered` when core's view is the one the decision
/// kept there was made on and the clock has not reached what could change it
/// ([`unchanged_until`]); a fresh decision that starts nothing is kept there for the
/// next run. (Validation passes none: it decides on commands under way.)
pub(crate) fn decide_remembering(
    decider: &Decider,
    spot_to_spot: bool,
    gathered: &Gathered,
    now: i64,
    revalidate: &[&DisruptionCommand],
    remembered: Option<&Remembered>,
) -> Decision {
    // Voluntary disruption weighs every PodDisruptionBudget: without them it decides
    // nothing (and a command being validated is abandoned) until they can be read.
    if let Some(u) = gathered
        .state
        .unreadable
        .iter()
        .find(|u| u.kind == "poddisruptionbudgets")
    {
        return Decision {
            problems: vec![format!(
                "no voluntary disruption: PodDisruptionBudgets cannot be read ({}); grant list and watch on poddisruptionbudgets",
                u.why()
            )],
            ..Decision::default()
        };
    }
    let hide: HashSet<&str> = revalidate
        .iter()
        .flat_map(|c| c.replacements.iter().map(|r| r.name.as_str()))
        .collect();
    let own: HashSet<&str> = revalidate
        .iter()
        .flat_map(|c| c.candidates.iter().map(String::as_str))
        .collect();
    let claims: Vec<NodeClaim> = planning_claims(&gathered.claims)
        .into_iter()
        .filter(|c| !hide.contains(c.name.as_str()))
        .collect();
    let hidden_nodes: HashSet<&str> = gathered
        .claims
        .iter()
        .filter(|c| hide.contains(c.name.as_str()))
        .filter_map(|c| c.node_name.as_deref())
        .collect();
    let nodes: Vec<_> = gathered
        .state
        .nodes
        .iter()
        .filter(|n| !hidden_nodes.contains(n.name.as_str()))
        .cloned()
        .collect();
    let pods: Vec<Pod> = gathered
        .state
        .pods
        .iter()
        .filter(|p| {
            !(p.daemonset_owned
                && p.node_name
                    .as_deref()
                    .is_some_and(|n| hidden_nodes.contains(n)))
        })
        .map(|p| match p.node_name.as_deref() {
            Some(n) if hidden_nodes.contains(n) => Pod::from(PodFields {
                node_name: None,
                marked_unschedulable: true,
                ..PodFields::clone(p)
            }),
            _ => p.clone(),
        })
        .collect();
    let view = ClusterView {
        nodes: &nodes,
        pods: &pods,
        daemonsets: &gathered.state.daemonsets,
        pdbs: &gathered.state.pdbs,
    };
    let mut snapshot: ClusterSnapshot = planning_snapshot(view, &claims, &gathered.pools);
    let in_flight = in_flight_claims(&claims, &snapshot);
    let external_drift = resource_drift(gathered, &nodes);
    // Nodes already on their way out, candidates of other commands, and nodes rebooting
    // for repair: budgets count them, and they are neither candidates nor destinations.
    let disrupting: Vec<String> = gathered
        .claims
        .iter()
        .filter(|c| {
            (c.state.is_being_taken_away() && !own.contains(c.name.as_str())) || c.reboot.is_some()
        })
        .filter_map(|c| c.node_name.clone())
        .collect();
    // Live claims launched for pods still pending (a replace-then-drain's replacement
    // while a PodDisruptionBudget holds the pods on the node being drained).
    let pending: HashSet<String> = snapshot
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .map(|p| p.key())
        .collect();
    let nominated: Vec<String> = claims
        .iter()
        .filter(|c| c.state.is_live_capacity() && c.pods.iter().any(|p| pending.contains(p)))
        .filter_map(|c| c.node_name.clone())
        .collect();
    let validating: Option<Vec<String>> = (!revalidate.is_empty()).then(|| {
        gathered
            .claims
            .iter()
            .filter(|c| own.contains(c.name.as_str()))
            .filter_map(|c| c.node_name.clone())
            .collect()
    });
    let pricing = reservations_back(gathered, &hide);
    let pricing = pricing.as_ref().unwrap_or(&gathered.pricing);
    // The room CapacityBuffers hold on nodes: their virtual pods where provisioning
    // places them, so a node holding one is not empty and a consolidation fits them.
    let room = buffer_room(
        &ProvisioningInput {
            snapshot: &snapshot,
            node_pools: &gathered.pools,
            node_classes: &gathered.state.node_classes,
            catalog: &gathered.catalog,
            pricing,
            in_flight: &in_flight,
        },
        &gathered.virtual_pods,
    );
    snapshot.pods.extend(room);
    let input = DisruptionInput {
        snapshot: &snapshot,
        node_pools: &gathered.pools,
        node_classes: &gathered.state.node_classes,
        catalog: &gathered.catalog,
        pricing,
        in_flight: &in_flight,
        now,
        spot_to_spot,
        external_drift: &external_drift,
        disrupting: &disrupting,
        nominated: &nominated,
        validating: validating.as_deref(),
    };
    let Some(remembered) = remembered.filter(|_| revalidate.is_empty()) else {
        return decider(&input);
    };
    if let Some(decision) = remembered.answer(&input, &gathered.catalog) {
        return decision;
    }
    let decision = decider(&input);
    if decision.commands.is_empty() {
        let until = unchanged_until(&input);
        let pricing = pricing.clone();
        remembered.keep(Kept {
            at: now,
            until,
            spot_to_spot,
            node_pools: gathered.pools.clone(),
            node_classes: gathered.state.node_classes.clone(),
            catalog: Arc::clone(&gathered.catalog),
            pricing,
            in_flight,
            external_drift,
            disrupting,
            nominated,
            snapshot,
            decision: decision.clone(),
        });
    }
    decision
}

/// The last fresh decision that started nothing, with everything core read for it but
/// the clock, for as long as the warm function lives: while the cluster, its
/// NodePools, prices and the rest stay as they were, the next run's answer is this one
/// (Karpenter keeps a cluster "consolidated" until something changes, so a quiet
/// minute does not search every node again), up to the moment a fact that depends on
/// the time alone flips ([`unchanged_until`]: an expiry, a do-not-disrupt duration
/// lapsing, consolidateAfter running, a scheduled budget). The answer is the decision
/// core would make, not an approximation of it: the view is compared whole.
#[derive(Default)]
pub(crate) struct Remembered(Mutex<Option<Kept>>);

pub(crate) struct Kept {
    at: i64,
    until: Option<i64>,
    spot_to_spot: bool,
    node_pools: Vec<NodePool>,
    node_classes: Vec<Ec2NodeClass>,
    catalog: Arc<Catalog>,
    pricing: Pricing,
    in_flight: Vec<InFlightClaim>,
    external_drift: Vec<(String, String)>,
    disrupting: Vec<String>,
    nominated: Vec<String>,
    snapshot: ClusterSnapshot,
    decision: Decision,
}

impl Remembered {
    fn answer(&self, input: &DisruptionInput<'_>, catalog: &Arc<Catalog>) -> Option<Decision> {
        // Every field named (no `..`): a field added to the input must be compared here,
        // or the answer would ignore it.
        let DisruptionInput {
            snapshot,
            node_pools,
            node_classes,
            catalog: _,
            pricing,
            in_flight,
            now,
            spot_to_spot,
            external_drift,
            disrupting,
            nominated,
            validating,
        } = input;
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let kept = kept.as_ref()?;
        let holds = kept.at <= *now
            && kept.until.is_none_or(|until| *now < until)
            && validating.is_none()
            && kept.spot_to_spot == *spot_to_spot
            && kept.disrupting == *disrupting
            && kept.nominated == *nominated
            && kept.external_drift == *external_drift
            && kept.node_pools == *node_pools
            && kept.node_classes == *node_classes
            && (Arc::ptr_eq(&kept.catalog, catalog) || *kept.catalog == **catalog)
            && kept.pricing == **pricing
            && kept.in_flight == *in_flight
            && kept.snapshot == **snapshot;
        holds.then(|| kept.decision.clone())
    }

    fn keep(&self, kept: Kept) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(kept);
    }
}

/// The pricing as it was before the `hidden` replacements launched, when one of them
/// took an instance of a capacity reservation: EC2 counts that instance out of the
/// reservation's `available`, and the view without the replacement would otherwise
/// find the reservation full and its candidates' pods needing on-demand capacity, and
/// abandon a command whose replacement is up. One instance back per such replacement;
/// `None` when there is none.
fn reservations_back(gathered: &Gathered, hidden: &HashSet<&str>) -> Option<Pricing> {
    let mut taken: Vec<&str> = gathered
        .claims
        .iter()
        .filter(|c| hidden.contains(c.name.as_str()))
        .filter_map(|c| c.labels.get(LABEL_CAPACITY_RESERVATION_ID))
        .map(String::as_str)
        .collect();
    taken.retain(|id| gathered.pricing.reservations.iter().any(|r| r.id == *id));
    if taken.is_empty() {
        return None;
    }
    let mut pricing = gathered.pricing.clone();
    for id in taken {
        if let Some(r) = pricing.reservations.iter_mut().find(|r| r.id == id) {
            r.available += 1;
        }
    }
    Some(pricing)
}

/// (node, why) for each managed node whose instance runs an AMI, sits in a subnet, has
/// security groups or runs in a capacity reservation its NodePool's EC2NodeClass no
/// longer selects, as resolved by this tick's gather. A node whose class did not
/// resolve, or whose instance is not listed (or EC2 did not say), is not drifted this
/// way.
fn resource_drift(gathered: &Gathered, nodes: &[Node]) -> Vec<(String, String)> {
    let selections: HashMap<&str, Selection<'_>> = gathered
        .classes
        .iter()
        .map(|(name, (_, resolved))| (name.as_str(), resolved.selection(name)))
        .collect();
    let instances: HashMap<&str, &Instance> = gathered
        .owned
        .iter()
        .chain(&gathered.karpenter_instances)
        .map(|i| (i.id.as_str(), i))
        .collect();
    let launched = nodes.iter().filter_map(|node| {
        let pool = node.labels.get(LABEL_NODEPOOL)?;
        let pool = gathered.pools.iter().find(|p| &p.name == pool)?;
        let class = selections.get(pool.node_class_ref.name.as_str())?;
        let id = node
            .provider_id
            .as_deref()
            .and_then(instance_id_from_provider_id)?;
        let instance = instances.get(id)?;
        let arch = node.labels.get(LABEL_ARCH).or_else(|| {
            gathered
                .catalog
                .get(&instance.instance_type)
                .and_then(|t| t.labels.get(LABEL_ARCH))
        });
        let with = LaunchedWith {
            node: &node.name,
            arch: arch.map(String::as_str),
            image: instance.image_id.as_deref(),
            subnet: instance.subnet_id.as_deref(),
            security_groups: &instance.security_group_ids,
            reservation: instance
                .capacity_reservation_id
                .as_deref()
                .filter(|_| instance.capacity_type == CapacityType::Reserved),
        };
        Some((with, class))
    });
    let drifted = external_drift(launched);
    for (node, why) in &drifted {
        tracing::debug!(node = %node, reason = %why, "drifted from what its EC2NodeClass selects");
    }
    drifted
}
