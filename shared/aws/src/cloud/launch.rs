//! The fleet launch: a claim's offerings grouped by capacity type, one instant
//! CreateFleet per group (cheapest group first, at most [`MAX_OVERRIDES`] overrides),
//! the instance it launched read back, or the failure classified ([`crate::fleet`]) so
//! insufficient capacity moves on to the next group.
//!
//! `reserved` offerings launch into the capacity reservations of the request
//! (`resolved.reservations`, the first of its type and zone with instances left), as
//! Karpenter-AWS does: On-Demand Capacity Reservations as one group (fleet target
//! `on-demand`), Capacity Blocks as another (target and market type `capacity-block`),
//! interruptible ODCRs as a third (target `reserved-capacity` with reservation type
//! `interruptible-capacity-reservation`, no on-demand options), each reservation
//! through a launch template that targets it. At one price the groups go in that order
//! (Karpenter's `CapacityReservationTypeFilter`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetReservationType, FleetType, OnDemandOptionsRequest,
    ReservedCapacityOptionsRequest, ResourceType, SpotAllocationStrategy, SpotOptionsRequest,
    TargetCapacitySpecificationRequest,
};
use sha2::{Digest, Sha256};

use nodewright_core::catalog::{CapacityType, Reservation, ReservationMarket};
use nodewright_engine::ports::{
    CloudError, ErrorKind, Image, LaunchError, LaunchRequest, Launched, Offering, Subnet,
};

use super::{Ec2Cloud, hex, tag_specification};
use crate::error::cloud_error;
use crate::fleet::{
    FleetError, FleetErrors, FleetFailure, NO_FREE_ADDRESSES, classify_fleet_errors,
};
use crate::tags::TAG_NODECLAIM;

/// CreateFleet accepts at most this many overrides per call.
pub const MAX_OVERRIDES: usize = 60;

/// How long a subnet CreateFleet found without a free address is passed over
/// (Karpenter-AWS's 3 minutes, as for an offering out of capacity).
pub const SUBNET_EXHAUSTED_FOR: Duration = Duration::from_secs(180);

/// Subnets CreateFleet lately found without a free address, and until when (this
/// process). DescribeSubnets' free-address count lags the launches of the last
/// minutes; this is what a launch learned since. While one is marked, launches in its
/// zone use the zone's other subnets; a zone whose subnets are all marked gets none.
#[derive(Default)]
pub struct ExhaustedSubnets(Mutex<HashMap<String, Instant>>);

impl ExhaustedSubnets {
    pub fn mark(&self, subnet: &str) {
        let mut marked = self.0.lock().unwrap_or_else(|e| e.into_inner());
        marked.insert(subnet.to_string(), Instant::now() + SUBNET_EXHAUSTED_FOR);
    }

    /// The subnets marked now (expired marks are dropped).
    pub fn now(&self) -> HashSet<String> {
        let mut marked = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        marked.retain(|_, until| *until > now);
        marked.keys().cloned().collect()
    }
}

/// How long after this process created an instance profile a launch that EC2 refuses as
/// invalid is taken for IAM's propagation delay (retried later) rather than a mistake.
pub const PROFILE_PROPAGATION: Duration = Duration::from_secs(120);

impl Ec2Cloud {
    /// Launches one instance for a claim: one CreateFleet per capacity type, the group
    /// with the cheapest offering first, the next one when a group has no capacity.
    pub(super) async fn launch_cheapest_first(
        &self,
        request: &LaunchRequest,
    ) -> Result<Launched, LaunchError> {
        // The subnet with the most free addresses in each zone, among those CreateFleet
        // has not lately found without any (see `ExhaustedSubnets`). A zone whose every
        // subnet is out of addresses has no capacity now: its offerings are not tried.
        let exhausted = self.exhausted_subnets.now();
        let mut subnet_by_zone: HashMap<String, Subnet> = HashMap::new();
        let mut zones_without_addresses: BTreeSet<String> = BTreeSet::new();
        for s in &request.resolved.subnets {
            if exhausted.contains(&s.id) {
                zones_without_addresses.insert(s.zone.clone());
                continue;
            }
            let better = subnet_by_zone
                .get(&s.zone)
                .is_none_or(|cur| s.available_ips > cur.available_ips);
            if better {
                subnet_by_zone.insert(s.zone.clone(), s.clone());
            }
        }
        zones_without_addresses.retain(|zone| !subnet_by_zone.contains_key(zone));
        let (no_addresses, offerings): (Vec<Offering>, Vec<Offering>) = request
            .offerings
            .iter()
            .cloned()
            .partition(|o| zones_without_addresses.contains(&o.zone));
        if !no_addresses.is_empty() {
            tracing::info!(claim = %request.claim_name, zones = ?zones_without_addresses,
                offerings = no_addresses.len(), "every subnet of these zones is out of free addresses");
        }
        // Offerings by capacity type (reserved ones by how the reservation sells),
        // cheapest group first, at one price in the order of `Group`. A reserved
        // offering without a reservation left is not tried.
        let mut groups: BTreeMap<Group, Vec<Offering>> = BTreeMap::new();
        for o in &offerings {
            let market = match o.capacity_type {
                CapacityType::Reserved => match reservation_for(request, o) {
                    Some(r) => Some(r.market()),
                    None => continue,
                },
                _ => None,
            };
            groups
                .entry((o.capacity_type, market))
                .or_default()
                .push(o.clone());
        }
        let mut groups: Vec<(Group, Vec<Offering>)> = groups.into_iter().collect();
        for (_, offerings) in &mut groups {
            offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
        }
        groups.sort_by(|a, b| a.1[0].price.total_cmp(&b.1[0].price));
        if groups.is_empty() && !no_addresses.is_empty() {
            return Err(LaunchError::InsufficientCapacity {
                message: format!(
                    "{NO_FREE_ADDRESSES}: every subnet of {} is out of free addresses",
                    zones_without_addresses
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                offerings: no_addresses,
            });
        }
        if groups.is_empty() {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!("claim {}: no offerings to launch", request.claim_name),
            )
            .into());
        }

        let mut unavailable = no_addresses;
        let mut messages = Vec::new();
        for ((capacity_type, market), offerings) in &groups {
            match self
                .launch_group(
                    request,
                    (*capacity_type, *market),
                    offerings,
                    &subnet_by_zone,
                )
                .await
            {
                Ok(mut launched) => {
                    launched.unavailable.extend(unavailable);
                    return Ok(launched);
                }
                Err(LaunchError::InsufficientCapacity { offerings, message }) => {
                    tracing::info!(claim = %request.claim_name, capacity_type = %capacity_type,
                        offerings = offerings.len(), "insufficient capacity");
                    unavailable.extend(offerings);
                    messages.push(message);
                }
                Err(LaunchError::Cloud(e)) => {
                    return Err(self.while_profile_propagates(request, e).into());
                }
            }
        }
        Err(LaunchError::InsufficientCapacity {
            offerings: unavailable,
            message: messages.join("; "),
        })
    }

    /// One CreateFleet over the offerings of one capacity type (for `reserved`: of one
    /// kind of reservation, each through its reservation's template).
    async fn launch_group(
        &self,
        request: &LaunchRequest,
        (capacity_type, market): Group,
        offerings: &[Offering],
        subnet_by_zone: &HashMap<String, Subnet>,
    ) -> Result<Launched, LaunchError> {
        let images: HashMap<&str, &Image> = request
            .resolved
            .images
            .iter()
            .map(|i| (i.arch.as_str(), i))
            .collect();
        // (launch template name) -> overrides, in price order; offerings actually tried.
        let mut configs: Vec<(String, Vec<FleetLaunchTemplateOverridesRequest>)> = Vec::new();
        let mut tried: Vec<Offering> = Vec::new();
        // (architecture, reservation, kubelet settings the class's expressions give the
        // type) -> template name.
        let mut template_for: HashMap<(String, Option<String>, Option<String>), String> =
            HashMap::new();
        // A NodeOverlay priced these offerings: launch in their order, not EC2's list
        // prices (on-demand only; spot keeps price-capacity-optimized, as Karpenter).
        let prioritized = request.prices_overlaid && capacity_type == CapacityType::OnDemand;
        // Override (type, zone) -> the reservation it launches into.
        let mut reservation_of: HashMap<(String, String), String> = HashMap::new();
        for offering in offerings {
            if tried.len() == MAX_OVERRIDES {
                break;
            }
            let Some(subnet) = subnet_by_zone.get(&offering.zone) else {
                continue;
            };
            let arch = self.arch_of(&offering.instance_type);
            let Some(image) = images.get(arch.as_str()) else {
                continue;
            };
            let reservation = match capacity_type {
                CapacityType::Reserved => match reservation_for(request, offering) {
                    Some(r) => Some(r),
                    None => continue,
                },
                _ => None,
            };
            // Planning gave a type without a maxPods value no pods, so it is not here
            // unless the catalog changed since; it cannot be launched as planned.
            let Some(kubelet) = self.kubelet_for(&request.node_class, &offering.instance_type)
            else {
                continue;
            };
            let key = (
                arch.clone(),
                reservation.map(|r| r.id.clone()),
                kubelet.raw.as_ref().map(|raw| raw.to_string()),
            );
            let template = match template_for.get(&key) {
                Some(t) => t.clone(),
                None => {
                    let content = self.template_content(
                        request,
                        capacity_type,
                        image,
                        reservation,
                        &kubelet,
                    )?;
                    let name = self.ensure_launch_template(&content).await?;
                    template_for.insert(key, name.clone());
                    name
                }
            };
            if let Some(r) = reservation {
                reservation_of.insert(
                    (offering.instance_type.clone(), offering.zone.clone()),
                    r.id.clone(),
                );
            }
            let mut o = FleetLaunchTemplateOverridesRequest::builder()
                .instance_type(offering.instance_type.as_str().into())
                .subnet_id(&subnet.id);
            if prioritized {
                // EC2 launches the lowest number first: the offerings' own order.
                o = o.priority(tried.len() as f64);
            }
            let o = o.build();
            match configs.iter_mut().find(|(name, _)| *name == template) {
                Some((_, overrides)) => overrides.push(o),
                None => configs.push((template, vec![o])),
            }
            tried.push(offering.clone());
        }
        if tried.is_empty() {
            return Err(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "claim {}: no {} offering has both a subnet in its zone and an image for its architecture",
                    request.claim_name, capacity_type
                ),
            )
            .into());
        }

        let mut tags = self.base_tags(&request.node_pool, &request.node_class);
        tags.insert(TAG_NODECLAIM.into(), request.claim_name.clone());
        let options = PurchaseOptions::of(capacity_type, market, prioritized);
        let mut fleet = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(client_token(&request.claim_name, capacity_type, &tried))
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(options.target)
                    .build(),
            )
            .tag_specifications(tag_specification(ResourceType::Instance, &tags))
            .tag_specifications(tag_specification(ResourceType::Volume, &tags))
            // The fleet is tagged too: template.yaml allows CreateFleet only with the
            // cluster tag on every resource the request creates.
            .tag_specifications(tag_specification(ResourceType::Fleet, &tags));
        fleet = fleet
            .set_on_demand_options(options.on_demand)
            .set_spot_options(options.spot)
            .set_reserved_capacity_options(options.reserved);
        for (template, overrides) in configs {
            fleet = fleet.launch_template_configs(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(template)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides))
                    .build(),
            );
        }
        let out = fleet
            .send()
            .await
            .map_err(|e| cloud_error(format!("CreateFleet for claim {}", request.claim_name), e))?;

        let zone_of_subnet: HashMap<&str, &str> = subnet_by_zone
            .values()
            .map(|s| (s.id.as_str(), s.zone.as_str()))
            .collect();
        let errors: Vec<FleetError> = out
            .errors
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| {
                let overrides = e.launch_template_and_overrides.and_then(|l| l.overrides);
                FleetError {
                    code: e.error_code.unwrap_or_else(|| "Unknown".into()),
                    message: e.error_message.unwrap_or_default(),
                    instance_type: overrides
                        .as_ref()
                        .and_then(|o| o.instance_type.as_ref().map(|t| t.as_str().to_string())),
                    zone: overrides.as_ref().and_then(|o| {
                        o.availability_zone.clone().or_else(|| {
                            o.subnet_id
                                .as_deref()
                                .and_then(|s| zone_of_subnet.get(s))
                                .map(|z| z.to_string())
                        })
                    }),
                    subnet: overrides.as_ref().and_then(|o| o.subnet_id.clone()),
                }
            })
            .collect();
        // The offering is out of capacity (below, as Karpenter-AWS marks it); its subnet
        // is also passed over while it lasts, so the zone's other subnets are used.
        for subnet in errors
            .iter()
            .filter_map(FleetError::subnet_without_addresses)
        {
            tracing::info!(claim = %request.claim_name, subnet = %subnet, "subnet out of free addresses");
            self.exhausted_subnets.mark(subnet);
        }
        for instance in out.instances.unwrap_or_default() {
            let Some(instance_id) = instance.instance_ids.unwrap_or_default().into_iter().next()
            else {
                continue;
            };
            let overrides = instance
                .launch_template_and_overrides
                .and_then(|l| l.overrides);
            let instance_type = instance
                .instance_type
                .map(|t| t.as_str().to_string())
                .or_else(|| {
                    overrides
                        .as_ref()
                        .and_then(|o| o.instance_type.as_ref().map(|t| t.as_str().to_string()))
                })
                .unwrap_or_else(|| tried[0].instance_type.clone());
            let zone = overrides
                .as_ref()
                .and_then(|o| {
                    o.availability_zone.clone().or_else(|| {
                        o.subnet_id
                            .as_deref()
                            .and_then(|s| zone_of_subnet.get(s))
                            .map(|z| z.to_string())
                    })
                })
                .or_else(|| {
                    tried
                        .iter()
                        .find(|o| o.instance_type == instance_type)
                        .map(|o| o.zone.clone())
                })
                .unwrap_or_else(|| tried[0].zone.clone());
            let price = tried
                .iter()
                .find(|o| o.instance_type == instance_type && o.zone == zone)
                .or_else(|| tried.iter().find(|o| o.instance_type == instance_type))
                .map(|o| o.price)
                .unwrap_or(tried[0].price);
            tracing::info!(claim = %request.claim_name, instance_id = %instance_id, instance_type = %instance_type,
                zone = %zone, capacity_type = %capacity_type, "launched");
            let unavailable =
                crate::fleet::out_of_capacity_besides(&errors, &tried, &instance_type, &zone);
            let reservation_id = reservation_of
                .get(&(instance_type.clone(), zone.clone()))
                .cloned();
            return Ok(Launched {
                instance_id,
                instance_type,
                zone,
                capacity_type,
                price,
                reservation_id,
                unavailable,
            });
        }

        let failure = classify_fleet_errors(&errors, &tried);
        let errors = FleetErrors(errors);
        match failure {
            FleetFailure::InsufficientCapacity(offerings) => {
                Err(LaunchError::InsufficientCapacity {
                    offerings,
                    message: format!("CreateFleet ({capacity_type}): {errors}"),
                })
            }
            FleetFailure::Failed(kind) => Err(CloudError::with_source(
                kind,
                format!(
                    "CreateFleet for claim {} launched nothing: {errors}",
                    request.claim_name
                ),
                errors,
            )
            .into()),
        }
    }

    /// A launch EC2 refused as invalid shortly after this process created the instance
    /// profile it uses is most likely IAM's propagation delay: report it as
    /// `Unavailable`, so the claim is retried rather than failed.
    fn while_profile_propagates(&self, request: &LaunchRequest, err: CloudError) -> CloudError {
        let Some(profile) = request.resolved.instance_profile.as_deref() else {
            return err;
        };
        let fresh = self.profiles.recently_created(profile, PROFILE_PROPAGATION);
        match propagation_kind(err.kind, fresh) {
            kind if kind == err.kind => err,
            kind => CloudError {
                kind,
                message: format!(
                    "{} (instance profile {profile} was created moments ago; IAM may not have propagated it yet)",
                    err.message
                ),
                source: err.source,
            },
        }
    }
}

/// A launch group: the capacity type, and for `reserved` how its reservations sell
/// (in the order they are tried at one price).
type Group = (CapacityType, Option<ReservationMarket>);

/// How one fleet buys its group, as Karpenter-AWS's `CreateFleetInputBuilder` sets
/// it: the default target capacity type and the one options block that goes with it.
#[derive(Debug, Clone, PartialEq)]
struct PurchaseOptions {
    target: DefaultTargetCapacityType,
    on_demand: Option<OnDemandOptionsRequest>,
    spot: Option<SpotOptionsRequest>,
    reserved: Option<ReservedCapacityOptionsRequest>,
}

impl PurchaseOptions {
    /// `prioritized`: a NodeOverlay ordered the on-demand offerings (launch in their
    /// order rather than EC2's lowest price).
    fn of(
        capacity_type: CapacityType,
        market: Option<ReservationMarket>,
        prioritized: bool,
    ) -> Self {
        let none = |target| PurchaseOptions {
            target,
            on_demand: None,
            spot: None,
            reserved: None,
        };
        match (capacity_type, market) {
            (CapacityType::Spot, _) => PurchaseOptions {
                spot: Some(
                    SpotOptionsRequest::builder()
                        .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                        .build(),
                ),
                ..none(DefaultTargetCapacityType::Spot)
            },
            // A Capacity Block fleet takes no options.
            (CapacityType::Reserved, Some(ReservationMarket::CapacityBlock)) => {
                none(DefaultTargetCapacityType::CapacityBlock)
            }
            // An interruptible ODCR's names its reservation type instead of on-demand's.
            (CapacityType::Reserved, Some(ReservationMarket::Interruptible)) => PurchaseOptions {
                reserved: Some(
                    ReservedCapacityOptionsRequest::builder()
                        .reservation_types(FleetReservationType::InterruptibleCapacityReservation)
                        .build(),
                ),
                ..none(DefaultTargetCapacityType::ReservedCapacity)
            },
            // An ODCR launches as on-demand: its template targets the reservation.
            (CapacityType::OnDemand | CapacityType::Reserved, _) => PurchaseOptions {
                on_demand: Some(
                    OnDemandOptionsRequest::builder()
                        .allocation_strategy(if prioritized {
                            FleetOnDemandAllocationStrategy::Prioritized
                        } else {
                            FleetOnDemandAllocationStrategy::LowestPrice
                        })
                        .build(),
                ),
                ..none(DefaultTargetCapacityType::OnDemand)
            },
        }
    }
}

/// The reservation a reserved offering launches into: the first of the request's with
/// its type and zone and an instance left.
fn reservation_for<'r>(request: &'r LaunchRequest, o: &Offering) -> Option<&'r Reservation> {
    request
        .resolved
        .reservations
        .iter()
        .find(|r| r.instance_type == o.instance_type && r.zone == o.zone && r.available > 0)
}

/// Idempotency token for one CreateFleet: the claim name, plus a digest of what is
/// asked, so that a retry of the same request never launches twice while a retry
/// with other offerings (after insufficient capacity) is a new request rather than
/// an `IdempotentParameterMismatch`.
fn client_token(claim: &str, capacity_type: CapacityType, tried: &[Offering]) -> String {
    let mut h = Sha256::new();
    h.update(capacity_type.as_str());
    for o in tried {
        h.update(format!("|{}@{}", o.instance_type, o.zone));
    }
    let digest = hex(&h.finalize()[..4]);
    let mut base: String = claim.chars().take(64 - 9).collect();
    base.push('-');
    base.push_str(&digest);
    base
}

/// The kind a launch failure is reported as: `Invalid` becomes `Unavailable` (retry
/// later) while the instance profile it used is fresh from this process.
fn propagation_kind(kind: ErrorKind, profile_is_fresh: bool) -> ErrorKind {
    match kind {
        ErrorKind::Invalid if profile_is_fresh => ErrorKind::Unavailable,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_launch_is_retried_only_while_a_new_instance_profile_propagates() {
        assert_eq!(
            propagation_kind(ErrorKind::Invalid, true),
            ErrorKind::Unavailable
        );
        assert_eq!(
            propagation_kind(ErrorKind::Invalid, false),
            ErrorKind::Invalid
        );
        assert_eq!(
            propagation_kind(ErrorKind::Unauthorized, true),
            ErrorKind::Unauthorized
        );
    }

    #[test]
    fn each_kind_of_reservation_is_bought_as_karpenter_buys_it() {
        let odcr =
            PurchaseOptions::of(CapacityType::Reserved, Some(ReservationMarket::Odcr), false);
        assert_eq!(odcr.target, DefaultTargetCapacityType::OnDemand);
        assert!(odcr.on_demand.is_some() && odcr.spot.is_none() && odcr.reserved.is_none());

        let block = PurchaseOptions::of(
            CapacityType::Reserved,
            Some(ReservationMarket::CapacityBlock),
            false,
        );
        assert_eq!(block.target, DefaultTargetCapacityType::CapacityBlock);
        assert!(block.on_demand.is_none() && block.spot.is_none() && block.reserved.is_none());

        let interruptible = PurchaseOptions::of(
            CapacityType::Reserved,
            Some(ReservationMarket::Interruptible),
            false,
        );
        assert_eq!(
            interruptible.target,
            DefaultTargetCapacityType::ReservedCapacity
        );
        assert!(interruptible.on_demand.is_none() && interruptible.spot.is_none());
        assert_eq!(
            interruptible.reserved.unwrap().reservation_types(),
            [FleetReservationType::InterruptibleCapacityReservation]
        );

        let spot = PurchaseOptions::of(CapacityType::Spot, None, true);
        assert_eq!(spot.target, DefaultTargetCapacityType::Spot);
        assert!(spot.spot.is_some() && spot.on_demand.is_none());
        let overlaid = PurchaseOptions::of(CapacityType::OnDemand, None, true);
        assert_eq!(
            overlaid.on_demand.unwrap().allocation_strategy(),
            Some(&FleetOnDemandAllocationStrategy::Prioritized)
        );
    }

    #[test]
    fn at_one_price_odcrs_go_before_capacity_blocks_before_interruptible_odcrs() {
        let mut groups: Vec<Group> = vec![
            (
                CapacityType::Reserved,
                Some(ReservationMarket::Interruptible),
            ),
            (
                CapacityType::Reserved,
                Some(ReservationMarket::CapacityBlock),
            ),
            (CapacityType::Reserved, Some(ReservationMarket::Odcr)),
        ];
        groups.sort();
        assert_eq!(
            groups.iter().map(|g| g.1).collect::<Vec<_>>(),
            [
                Some(ReservationMarket::Odcr),
                Some(ReservationMarket::CapacityBlock),
                Some(ReservationMarket::Interruptible)
            ]
        );
    }

    #[test]
    fn client_tokens_are_stable_per_request_and_fit_the_limit() {
        let o = |t: &str| Offering {
            instance_type: t.into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            price: 0.1,
        };
        let a = client_token(
            "default-x7k2p",
            CapacityType::Spot,
            &[o("m5.large"), o("c5.large")],
        );
        assert!(a.starts_with("default-x7k2p-"));
        assert_eq!(
            a,
            client_token(
                "default-x7k2p",
                CapacityType::Spot,
                &[o("m5.large"), o("c5.large")]
            )
        );
        assert_ne!(
            a,
            client_token("default-x7k2p", CapacityType::Spot, &[o("c5.large")])
        );
        assert!(client_token(&"x".repeat(100), CapacityType::Spot, &[]).len() <= 64);
    }
}
