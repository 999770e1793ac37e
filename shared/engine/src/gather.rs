//! The one read a tick starts from: the cluster, the claims, EC2's catalog, prices and
//! instances, and every EC2NodeClass resolved — gathered once, concurrently, so the
//! provisioner and the disruption job see the cluster the same way.
//!
//! A class that cannot be used (no subnets, no security groups, no image, a selector
//! EC2 rejects) leaves its NodePools out of [`Gathered::pools`] and says why in
//! [`Gathered::problems`]; a transient failure to resolve one fails the gather or skips
//! the class, as the caller asks ([`Unresolved`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tracing::warn;

use nodewright_core::api::Kind;
use nodewright_core::api::model::{Ec2NodeClass, NodePool, SelectorTerm};
use nodewright_core::catalog::{CapacityType, Catalog, Reservation};
use nodewright_core::nodeclaim::{DisruptionCause, NodeClaim};
use nodewright_core::pricing::Pricing;
use nodewright_core::well_known::LABEL_CAPACITY_RESERVATION_ID;

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::{ClusterState, ErrorKind, Instance, ObjectKind, ResolvedNodeClass};
use crate::reasons::Problem;

/// Everything a tick reads before deciding.
pub(crate) struct Gathered {
    pub(crate) state: ClusterState,
    pub(crate) claims: Vec<NodeClaim>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) pricing: Pricing,
    pub(crate) owned: Vec<Instance>,
    /// Instances Karpenter launched for this cluster: listed when adopting, or while
    /// adopted claims live (to tell whether their instances still exist).
    pub(crate) karpenter_instances: Vec<Instance>,
    pub(crate) kubernetes_version: String,
    pub(crate) classes: HashMap<String, (Ec2NodeClass, ResolvedNodeClass)>,
    /// Pools whose node class resolved.
    pub(crate) pools: Vec<NodePool>,
    pub(crate) invalid: Vec<String>,
    /// Why NodePools or EC2NodeClasses cannot be used, for `Reasons::publish`.
    pub(crate) problems: Vec<Problem>,
    /// EC2NodeClasses that resolved, and the instance profile each uses.
    pub(crate) healthy_classes: Vec<(String, Option<String>)>,
    /// Each NodeOverlay's verdict (applied, in conflict, invalid), for its status.
    pub(crate) overlay_statuses: Vec<nodewright_core::overlay::OverlayStatus>,
    /// Capacity Blocks the classes select that are about to end: their nodes are
    /// drained before the end ([`crate::reservations`]).
    pub(crate) expiring_reservations: Vec<Reservation>,
    /// Each CapacityBuffer resolved (its chunk and replicas, or why not), and the
    /// virtual pods of those resolved ([`nodewright_core::capacity_buffer`]).
    pub(crate) buffers: Vec<nodewright_core::capacity_buffer::Resolution>,
    pub(crate) virtual_pods: Vec<nodewright_core::cluster::Pod>,
    /// The zones under an ARC zonal shift now (also in `pricing.shifted_zones`).
    pub(crate) shifted_zones: Vec<crate::zonal_shift::ShiftedZone>,
}

impl Gathered {
    /// `next` in place of the claim of the same name (or added): what a write left.
    pub(crate) fn put_claim(&mut self, next: NodeClaim) {
        match self.claims.iter_mut().find(|c| c.name == next.name) {
            Some(c) => *c = next,
            None => self.claims.push(next),
        }
    }
}

/// What [`gather`] does when an EC2NodeClass fails to resolve for a transient reason
/// (throttled, unavailable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// The gather fails and the tick is retried: the provisioner, since planning
    /// without a NodePool would call its pods unschedulable.
    Fail,
    /// The class and its NodePools are left out, logged with the error: the
    /// disruption job, whose nodes of that class sit one run out.
    Skip,
}

/// Reads everything concurrently and resolves the EC2NodeClasses the NodePools use.
/// Karpenter's instances are listed only when `adopting_karpenter_nodes` or while
/// adopted claims live.
pub(crate) async fn gather(
    p: &Ports,
    now: i64,
    unresolved: Unresolved,
    adopting_karpenter_nodes: bool,
) -> Result<Gathered> {
    let (state, claims, unavailable, catalog, spot, owned, kubernetes_version, shifts) = tokio::try_join!(
        async { p.cluster.state().await.map_err(EngineError::from) },
        async { p.claims.list_claims().await.map_err(EngineError::from) },
        async {
            p.backoff
                .unavailable_offerings(now)
                .await
                .map_err(EngineError::from)
        },
        async { p.cloud.catalog().await.map_err(EngineError::from) },
        async { p.cloud.spot_prices().await.map_err(EngineError::from) },
        async { p.cloud.owned_instances().await.map_err(EngineError::from) },
        async {
            p.cluster
                .kubernetes_version()
                .await
                .map_err(EngineError::from)
        },
        async {
            // Best effort: a tick is not lost because ARC cannot be read (the adapter
            // answers from its last read while it can).
            Ok::<_, EngineError>(p.cloud.zonal_shifts().await.unwrap_or_else(|e| {
                warn!(error = %e, kind = ?e.kind, "could not read the cluster's zonal shifts; planning as if none were in force");
                Vec::new()
            }))
        },
    )?;
    let adopted_live = claims.iter().any(|c| c.adopted && !c.state.is_terminal());
    let karpenter_instances = if adopting_karpenter_nodes || adopted_live {
        p.cloud.cluster_instances_launched_by_karpenter().await?
    } else {
        Vec::new()
    };
    let mut invalid = state.invalid.clone();
    let mut problems: Vec<Problem> = state
        .invalid_objects
        .iter()
        .map(Problem::from_invalid)
        .collect();
    let mut classes = HashMap::new();
    let wanted: HashSet<&str> = state
        .node_pools
        .iter()
        .map(|p| p.node_class_ref.name.as_str())
        .collect();
    let mut unusable: HashMap<String, Problem> = HashMap::new();
    let mut reservations: Vec<Reservation> = Vec::new();
    for class in state
        .node_classes
        .iter()
        .filter(|c| wanted.contains(c.name.as_str()))
    {
        let problem = match p.cloud.resolve_node_class(class, &kubernetes_version).await {
            Ok(r) if r.subnets.is_empty() => Some(Problem::no_subnets(
                &class.name,
                &terms_summary(&class.subnet_selector_terms),
            )),
            Ok(r) if r.security_group_ids.is_empty() => Some(Problem::no_security_groups(
                &class.name,
                &terms_summary(&class.security_group_selector_terms),
            )),
            Ok(r) if r.images.is_empty() => Some(Problem::no_images(
                &class.name,
                &format!("{} term(s)", class.ami_selector_terms.len()),
            )),
            Ok(mut r) => match class_reservations(p, class).await {
                Ok(found) => {
                    r.reservations = found;
                    reservations.extend(r.reservations.iter().cloned());
                    classes.insert(class.name.clone(), (class.clone(), r));
                    None
                }
                Err(e) if matches!(e.kind, ErrorKind::Invalid | ErrorKind::NotFound) => Some(
                    Problem::capacity_reservations_unavailable(&class.name, e.to_string()),
                ),
                Err(e) if unresolved == Unresolved::Skip => {
                    warn!(node_class = %class.name, error = %e, kind = ?e.kind,
                        "could not list the EC2NodeClass's capacity reservations; its NodePools sit this run out");
                    None
                }
                Err(e) => return Err(e.into()),
            },
            Err(e) if matches!(e.kind, ErrorKind::Invalid | ErrorKind::NotFound) => {
                Some(Problem::unresolved(&class.name, e.to_string()))
            }
            Err(e) if unresolved == Unresolved::Skip => {
                warn!(node_class = %class.name, error = %e, kind = ?e.kind,
                    "could not resolve the EC2NodeClass; its NodePools sit this run out (no drift, no disruption)");
                None
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(problem) = problem {
            invalid.push(format!(
                "EC2NodeClass {:?}: {}",
                class.name, problem.message
            ));
            unusable.insert(class.name.clone(), problem.clone());
            problems.push(problem);
        }
    }
    let mut pools = Vec::new();
    for pool in &state.node_pools {
        let class = &pool.node_class_ref.name;
        if classes.contains_key(class) {
            pools.push(pool.clone());
        } else if let Some(why) = unusable.get(class) {
            problems.push(Problem::node_class_not_ready(
                &pool.name,
                class,
                &why.reason,
                &why.message,
            ));
        } else if !state.node_classes.iter().any(|c| &c.name == class) {
            invalid.push(format!(
                "NodePool {:?}: EC2NodeClass {:?} does not exist",
                pool.name, class
            ));
            if !problems
                .iter()
                .any(|p| p.kind == ObjectKind::NodePool && p.name == pool.name)
            {
                problems.push(Problem::node_class_missing(&pool.name, class));
            }
        }
    }
    // Notices last: a pool's other problems are looked up above. Only objects whose
    // status this tick writes (used, or reported): a class no NodePool uses is never
    // resolved, and its conditions must not read True for it.
    for fields in &state.fields_not_honoured {
        let kind = match fields.kind {
            Kind::NodePool => ObjectKind::NodePool,
            Kind::Ec2NodeClass => ObjectKind::Ec2NodeClass,
        };
        let used = match kind {
            ObjectKind::NodePool => pools.iter().any(|p| p.name == fields.name),
            ObjectKind::Ec2NodeClass => classes.contains_key(&fields.name),
            ObjectKind::NodeOverlay | ObjectKind::CapacityBuffer => false,
        };
        let reported = problems
            .iter()
            .any(|p| p.kind == kind && p.name == fields.name);
        if used || reported {
            problems.push(Problem::fields_not_honoured(kind, fields));
        }
    }
    let healthy_classes = classes
        .iter()
        .map(|(name, (_, r))| (name.clone(), r.instance_profile.clone()))
        .collect();
    let mut zones: Vec<String> = classes
        .values()
        .flat_map(|(_, r)| r.subnets.iter().map(|s| s.zone.clone()))
        .collect();
    zones.sort();
    zones.dedup();
    let mut pricing = Pricing::for_zones(zones);
    let shifted_zones =
        crate::zonal_shift::shifted_zones(&shifts, classes.values().map(|(_, r)| r), now);
    pricing.shifted_zones = shifted_zones.iter().map(|s| s.zone.clone()).collect();
    pricing.spot_prices = spot.into_iter().collect();
    pricing.unavailable = unavailable.into_iter().collect();
    let (expiring, mut usable) = merge_reservations(reservations, now);
    // Karpenter's `MarkUnavailable` on a reservation interruption: its owner is taking
    // instances back, so none is launched into it for a while, whatever count
    // DescribeCapacityReservations still shows.
    for id in interrupted_reservations(&claims, now) {
        if let Some(r) = usable.iter_mut().find(|r| r.id == id) {
            r.available = 0;
        }
    }
    pricing.reservations = usable;
    pricing
        .unavailable
        .extend(interrupted_offerings(&claims, now));
    // NodeOverlays over the pools that can launch: planning and consolidation price
    // and size with the same table.
    let overlays =
        nodewright_core::overlay::resolve(&state.node_overlays, &pools, &catalog, &pricing.zones);
    pricing.overlays = std::sync::Arc::new(overlays.table);
    let buffers = nodewright_core::capacity_buffer::resolve_buffers(
        &state.capacity_buffers,
        &state.pod_templates,
        &state.workloads,
    );
    let virtual_pods =
        nodewright_core::capacity_buffer::virtual_pods(&state.capacity_buffers, &buffers);
    Ok(Gathered {
        state,
        claims,
        catalog,
        pricing,
        owned,
        karpenter_instances,
        kubernetes_version,
        classes,
        pools,
        invalid,
        problems,
        healthy_classes,
        overlay_statuses: overlays.statuses,
        expiring_reservations: expiring,
        buffers,
        virtual_pods,
        shifted_zones,
    })
}

/// The capacity reservations `class` selects, each naming the class; none (and no
/// call) when it has no `capacityReservationSelectorTerms`.
async fn class_reservations(
    p: &Ports,
    class: &Ec2NodeClass,
) -> std::result::Result<Vec<Reservation>, crate::ports::CloudError> {
    if class.capacity_reservation_selector_terms.is_empty() {
        return Ok(Vec::new());
    }
    let mut found = p
        .cloud
        .capacity_reservations(&class.capacity_reservation_selector_terms)
        .await?;
    for r in &mut found {
        r.node_classes = vec![class.name.clone()];
    }
    Ok(found)
}

/// One entry per reservation (several classes may select it: their names are joined,
/// and the smallest count two reads gave is kept, as Karpenter's reservation manager
/// does), split into those expiring at `now` (Capacity Blocks near their end: nothing
/// launches into them, their nodes are drained) and those planning may use. Ordered
/// as Karpenter launches into them at one price (ODCRs, Capacity Blocks, interruptible
/// ODCRs; see [`Reservation::market`]): planning and launch take the first with room.
fn merge_reservations(found: Vec<Reservation>, now: i64) -> (Vec<Reservation>, Vec<Reservation>) {
    let mut merged: Vec<Reservation> = Vec::new();
    for r in found {
        match merged.iter_mut().find(|m| m.id == r.id) {
            Some(m) => {
                m.available = m.available.min(r.available);
                for c in r.node_classes {
                    if !m.node_classes.contains(&c) {
                        m.node_classes.push(c);
                    }
                }
            }
            None => merged.push(r),
        }
    }
    merged.sort_by(|a, b| a.launch_order().cmp(&b.launch_order()));
    merged.into_iter().partition(|r| r.expiring(now))
}

/// Gives the gathered pods without topology spread constraints of their own the
/// cluster's defaults (`config`, the stack's `SchedulerConfig`), with the selectors
/// deduced from the gathered Services and controllers: planning, consolidation and the
/// validation of commands then see the pods as kube-scheduler schedules them.
pub(crate) fn apply_default_spread(
    gathered: &mut Gathered,
    config: &nodewright_core::default_spread::SchedulerConfig,
) {
    let state = &mut gathered.state;
    nodewright_core::default_spread::apply_defaults_from(
        &mut state.pods,
        config,
        &state.services,
        &state.controllers,
    );
}

/// How long the offering of an instance EC2 reclaimed is avoided, counted from the
/// warning: what the interruption function writes into the ICE cache.
pub const INTERRUPTED_OFFERING_SECS: i64 = 180;

/// The spot offerings of claims a spot interruption took, from the claims themselves:
/// a tick that sees the claim disrupted sees its offering unavailable, whatever order
/// the ICE cache and the claims were read in (the interruption function marks the
/// offering before it writes the claim, but a reader may see the second write first).
pub fn interrupted_offerings(
    claims: &[NodeClaim],
    now: i64,
) -> impl Iterator<Item = (String, String, CapacityType)> + '_ {
    claims.iter().filter_map(move |c| {
        let d = c.disruption.as_ref()?;
        if d.cause != DisruptionCause::SpotInterrupted
            || d.since + INTERRUPTED_OFFERING_SECS <= now
            || c.capacity_type != Some(CapacityType::Spot)
        {
            return None;
        }
        Some((
            c.instance_type.clone()?,
            c.zone.clone()?,
            CapacityType::Spot,
        ))
    })
}

/// The reservations whose owner took back an instance of ours less than
/// [`INTERRUPTED_OFFERING_SECS`] ago, from the claims the warning disrupted.
pub fn interrupted_reservations(claims: &[NodeClaim], now: i64) -> impl Iterator<Item = &str> {
    claims.iter().filter_map(move |c| {
        let d = c.disruption.as_ref()?;
        if d.cause != DisruptionCause::CapacityReservationInterrupted
            || d.since + INTERRUPTED_OFFERING_SECS <= now
        {
            return None;
        }
        c.labels
            .get(LABEL_CAPACITY_RESERVATION_ID)
            .map(String::as_str)
    })
}

/// A selector's terms for people: `tags karpenter.sh/discovery=prod; id subnet-0abc`.
fn terms_summary(terms: &[SelectorTerm]) -> String {
    if terms.is_empty() {
        return "no terms".into();
    }
    terms
        .iter()
        .map(|t| match t {
            SelectorTerm::Id(id) => format!("id {id}"),
            SelectorTerm::Name(name) => format!("name {name}"),
            SelectorTerm::Tags(tags) => format!(
                "tags {}",
                tags.iter()
                    .map(|(k, v)| if v == "*" || v.is_empty() {
                        k.clone()
                    } else {
                        format!("{k}={v}")
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        })
        .collect::<Vec<_>>()
        .join("; ")
}
