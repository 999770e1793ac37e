//! A command's replacements narrowed to what makes the command worth running: reserved
//! offerings pinned, options cheaper than the nodes they replace (and still keeping
//! minValues), none of the nodes' own types, spot-to-spot's 15 cheaper types, and the
//! price each option launches at.

use std::collections::{HashMap, HashSet};

use crate::catalog::CapacityType;
use crate::provisioning::PlannedNodeClaim;
use crate::scheduling::requirements::ValueSet;
use crate::well_known::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE};

use super::super::command::DisruptionInput;
use super::super::speculate::Placement;
use super::super::{RejectCode, Rejection};
use super::{Candidate, SPOT_TO_SPOT_MIN_TYPES, Types};

/// A replacement whose chosen offering is reserved launches into the reservation or not
/// at all: its capacity type is narrowed to `reserved` (Karpenter's
/// `FinalizeScheduling` for a NodeClaim holding reserved offerings), so a launch that
/// finds the reservation full fails and the node stays, rather than being replaced by
/// an on-demand node the command priced as reserved. The other replacements keep their
/// capacity types and are priced at what they launch as (see [`cheapest_offering`]).
pub(super) fn pin_reserved(claims: &mut [PlannedNodeClaim]) {
    let reserved = CapacityType::Reserved.as_str();
    for claim in claims.iter_mut() {
        if claim.capacity_type != reserved {
            continue;
        }
        claim.capacity_types = vec![reserved.to_string()];
        claim
            .requirements
            .add(LABEL_CAPACITY_TYPE, ValueSet::in_values([reserved]));
    }
}

/// Keeps, for each replacement, only the options that still make the command cheaper
/// with the other replacements at their cheapest (Karpenter filters the replacement's
/// types to those cheaper than the candidates); the options kept must still keep the
/// replacement's minValues ([`keeps_min_values`]).
pub(super) fn cheaper_options_only(
    claims: &mut [PlannedNodeClaim],
    cap: f64,
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
) -> Result<(), Rejection> {
    let total = claims.iter().fold(0.0, |t, c| t + c.price_per_hour);
    for claim in claims.iter_mut() {
        let room = cap - (total - claim.price_per_hour);
        let kept: Vec<String> = claim
            .instance_type_options
            .iter()
            .filter(|name| cheapest_offering(input, types, name, claim).is_some_and(|p| p < room))
            .cloned()
            .collect();
        if kept.is_empty() {
            // Not even its cheapest option is cheaper: the command is not, which the
            // price check after this says.
            claim.instance_type_options = vec![claim.instance_type.clone()];
            continue;
        }
        keeps_min_values(claim, &kept, types)?;
        claim.instance_type_options = kept;
    }
    Ok(())
}

/// Whether `kept`, the options of `claim` cheaper than the nodes it replaces, still
/// have as many distinct values of each minValues key as the claim's requirements
/// ask (Karpenter's `RemoveInstanceTypeOptionsByPriceAndMinValues`): else the launch
/// could not keep the NodePool's flexibility, and the command is refused. Under the
/// BestEffort minValues policy the claim's requirements carry the minimums planning
/// relaxed them to, and those are what count, as in Karpenter.
pub(super) fn keeps_min_values(
    claim: &PlannedNodeClaim,
    kept: &[String],
    types: &Types<'_>,
) -> Result<(), Rejection> {
    for (key, set) in claim.requirements.iter() {
        let Some(min) = set.min_values else { continue };
        let distinct: HashSet<&str> = kept
            .iter()
            .filter_map(|name| types.get(name)?.labels.get(key.as_str()))
            .map(String::as_str)
            .collect();
        if distinct.len() < min as usize {
            return Err(Rejection::new(
                RejectCode::NotCheaper,
                format!(
                    "the replacement's types cheaper than it ({}) have {} distinct {key}, below the NodePool's minValues {min}",
                    kept.join(", "),
                    distinct.len()
                ),
            ));
        }
    }
    Ok(())
}

/// How many of `options` (cheapest first), from the first, keep every minValues of
/// `claim` (Karpenter's `SatisfiesMinValues`); all of them when no prefix does, none
/// without minValues.
pub(super) fn types_min_values_need(
    claim: &PlannedNodeClaim,
    options: &[String],
    types: &Types<'_>,
) -> usize {
    let wanted: Vec<(&str, usize)> = claim
        .requirements
        .iter()
        .filter_map(|(key, set)| Some((key.as_str(), set.min_values? as usize)))
        .collect();
    if wanted.is_empty() {
        return 0;
    }
    let mut seen: Vec<HashSet<&str>> = vec![HashSet::new(); wanted.len()];
    for (i, name) in options.iter().enumerate() {
        let labels = types.get(name).map(|t| &t.labels);
        for ((key, _), values) in wanted.iter().zip(&mut seen) {
            if let Some(v) = labels.and_then(|l| l.get(*key)) {
                values.insert(v.as_str());
            }
        }
        if wanted
            .iter()
            .zip(&seen)
            .all(|((_, min), v)| v.len() >= *min)
        {
            return i + 1;
        }
    }
    options.len()
}

/// Several nodes replaced by a claim that may launch as one of their own types, at no
/// less than that node costs, are no better than keeping that node and deleting the
/// others (which moves fewer pods): such options go (Karpenter's
/// `filterOutSameInstanceType`), and a claim left with none, or with too few to keep
/// its minValues, rejects the command — single-node consolidation then deletes nodes
/// instead. Two m5.xlarge with a pod each become one of them, not a new m5.xlarge.
pub(super) fn no_type_of_their_own(
    claims: &mut [PlannedNodeClaim],
    set: &[&Candidate<'_>],
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
) -> Result<(), Rejection> {
    let mut own: HashMap<&str, f64> = HashMap::new();
    for c in set {
        if let Some(t) = c.verdict.node.labels.get(LABEL_INSTANCE_TYPE) {
            let p = own.entry(t.as_str()).or_insert(c.price);
            *p = p.min(c.price);
        }
    }
    for claim in claims.iter_mut() {
        let cap = claim
            .instance_type_options
            .iter()
            .filter_map(|t| own.get(t.as_str()).copied())
            .fold(f64::INFINITY, f64::min);
        if cap.is_infinite() {
            continue;
        }
        let kept: Vec<(String, f64)> = claim
            .instance_type_options
            .iter()
            .filter_map(|name| {
                let p = cheapest_offering(input, types, name, claim)?;
                (p < cap).then(|| (name.clone(), p))
            })
            .collect();
        let Some(cheapest) = kept.iter().min_by(|a, b| a.1.total_cmp(&b.1)).cloned() else {
            return Err(Rejection::new(
                RejectCode::NotCheaper,
                format!(
                    "their pods need a {}, which one of them already is: keeping it costs no more",
                    claim.instance_type
                ),
            ));
        };
        let kept: Vec<String> = kept.into_iter().map(|(name, _)| name).collect();
        keeps_min_values(claim, &kept, types)?;
        claim.instance_type_options = kept;
        if !claim.instance_type_options.contains(&claim.instance_type) {
            (claim.instance_type, claim.price_per_hour) = cheapest;
        }
    }
    Ok(())
}

/// The price the claim's offerings give type `name` (its cheapest allowed zone and
/// capacity type), at what the claim launches as: a claim pinned to a reservation
/// ([`pin_reserved`]) at the reserved price only, any other at its on-demand or spot
/// prices only. A reservation with room elsewhere in the catalog is no price for a
/// claim whose solve found none left for it: it launches on-demand.
pub(super) fn cheapest_offering(
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
    name: &str,
    claim: &PlannedNodeClaim,
) -> Option<f64> {
    let it = types.get(name)?;
    let pinned = claim.capacity_type == CapacityType::Reserved.as_str();
    let mut best: Option<f64> = None;
    for zone in &claim.zones {
        for ct in &claim.capacity_types {
            let Some(ct) = CapacityType::parse(ct) else {
                continue;
            };
            if (ct == CapacityType::Reserved) != pinned {
                continue;
            }
            // The replacement's pool's prices: its NodeOverlays count, as in planning.
            if let Some(p) = input.pricing.price_in(&claim.node_pool, it, zone, ct) {
                best = Some(best.map_or(p, |b: f64| b.min(p)));
            }
        }
    }
    best
}

/// Spot-to-spot: the one replacement must be spot, with at least 15 spot types
/// cheaper than the node that keep its minValues; it launches with the 15 cheapest, or
/// with as many of the cheapest as its minValues need if that is more (Karpenter's
/// `computeSpotToSpotConsolidation`).
pub(super) fn spot_replacement(
    placement: &mut Placement,
    price: f64,
    input: &DisruptionInput<'_>,
    types: &Types<'_>,
) -> Result<(), Rejection> {
    let [claim] = placement.new_claims.as_mut_slice() else {
        return Err(Rejection::new(
            RejectCode::SpotToSpot,
            "spot-to-spot consolidation replaces a node by one node",
        ));
    };
    if !claim.capacity_types.iter().any(|c| c == "spot") {
        return Err(Rejection::new(
            RejectCode::SpotToSpot,
            "the replacement cannot be spot",
        ));
    }
    // Options are cheapest first at their cheapest offering; the replacement's spot
    // price is what counts, so keep those whose spot offering is cheaper.
    let mut cheaper: Vec<(f64, String)> = claim
        .instance_type_options
        .iter()
        .filter_map(|name| {
            let it = types.get(name)?;
            let spot = claim
                .zones
                .iter()
                .filter_map(|z| {
                    input
                        .pricing
                        .price_in(&claim.node_pool, it, z, CapacityType::Spot)
                })
                .min_by(f64::total_cmp)?;
            (spot < price).then(|| (spot, name.clone()))
        })
        .collect();
    cheaper.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let names: Vec<String> = cheaper.iter().map(|(_, name)| name.clone()).collect();
    keeps_min_values(claim, &names, types)?;
    if cheaper.len() < SPOT_TO_SPOT_MIN_TYPES {
        return Err(Rejection::new(
            RejectCode::SpotToSpot,
            format!(
                "spot-to-spot needs {SPOT_TO_SPOT_MIN_TYPES} cheaper spot instance types, {} fit",
                cheaper.len()
            ),
        ));
    }
    claim.price_per_hour = cheaper[0].0;
    let launch_with = SPOT_TO_SPOT_MIN_TYPES.max(types_min_values_need(claim, &names, types));
    claim.instance_type_options = names.into_iter().take(launch_with).collect();
    claim.instance_type = claim.instance_type_options[0].clone();
    claim.capacity_type = "spot".into();
    claim.capacity_types = vec!["spot".into()];
    Ok(())
}
