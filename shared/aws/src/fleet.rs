//! CreateFleet's per-override errors, classified (pure).
//!
//! An instant fleet answers HTTP 200 even when it launched nothing; what went wrong is
//! in `Errors[]`, one entry per override (or per fleet). These functions work on
//! [`FleetError`], a plain copy of those entries, so they are tested without the SDK.

use nodewright_engine::ports::{ErrorKind, Offering};

use crate::error::kind_for_code;

/// One `CreateFleet` `Errors[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError {
    pub code: String,
    pub message: String,
    /// The override it concerns, when the entry names one.
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub subnet: Option<String>,
}

/// EC2's code for an override whose subnet has no free address left.
pub const NO_FREE_ADDRESSES: &str = "InsufficientFreeAddressesInSubnet";

impl FleetError {
    /// The subnet this error says has no free address left, if it is that error.
    pub fn subnet_without_addresses(&self) -> Option<&str> {
        (self.code == NO_FREE_ADDRESSES)
            .then_some(self.subnet.as_deref())
            .flatten()
    }
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(t) = &self.instance_type {
            write!(f, " ({t}")?;
            if let Some(z) = &self.zone {
                write!(f, " in {z}")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// All the `Errors[]` of one CreateFleet call, as an error source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
pub struct FleetErrors(pub Vec<FleetError>);

/// What a CreateFleet that launched nothing means.
#[derive(Debug, Clone, PartialEq)]
pub enum FleetFailure {
    /// These offerings have no capacity (mark them unavailable, retry with the rest).
    InsufficientCapacity(Vec<Offering>),
    /// Rate limited, or another kind of failure.
    Failed(ErrorKind),
}

/// Codes that mean "no capacity for this offering now".
pub fn is_capacity_code(code: &str) -> bool {
    matches!(
        code,
        "InsufficientInstanceCapacity"
            | "MaxSpotInstanceCountExceeded"
            | "VcpuLimitExceeded"
            | "UnfulfillableCapacity"
            | "InsufficientFreeAddressesInSubnet"
            | "InsufficientCapacity"
            | "InsufficientHostCapacity"
            | "SpotMaxPriceTooLow"
            // A capacity reservation with no instance left: the reserved offering is
            // out of capacity, the others may launch (Karpenter marks it unavailable).
            | "ReservationCapacityExceeded"
    )
}

/// Classifies the errors of a fleet that launched nothing, given the offerings that
/// were tried. Capacity errors win (the engine retries with the other offerings and
/// the remaining errors surface then); then throttling; then the first other kind.
/// Offerings CreateFleet reported out of capacity while it launched one elsewhere:
/// Karpenter records these as unavailable too. Errors that name no type and zone
/// cannot be attributed and are left out.
pub fn out_of_capacity_besides(
    errors: &[FleetError],
    tried: &[Offering],
    launched_type: &str,
    launched_zone: &str,
) -> Vec<Offering> {
    tried
        .iter()
        .filter(|o| !(o.instance_type == launched_type && o.zone == launched_zone))
        .filter(|o| {
            errors.iter().any(|e| {
                is_capacity_code(&e.code)
                    && e.instance_type.as_deref() == Some(o.instance_type.as_str())
                    && e.zone.as_deref().is_none_or(|z| z == o.zone)
            })
        })
        .cloned()
        .collect()
}

pub fn classify_fleet_errors(errors: &[FleetError], tried: &[Offering]) -> FleetFailure {
    if errors.is_empty() {
        // Nothing launched and nothing said: treat every offering as unfulfillable.
        return FleetFailure::InsufficientCapacity(tried.to_vec());
    }
    let capacity: Vec<&FleetError> = errors
        .iter()
        .filter(|e| is_capacity_code(&e.code))
        .collect();
    if !capacity.is_empty() {
        let concerned: Vec<Offering> = tried
            .iter()
            .filter(|o| {
                capacity.iter().any(|e| {
                    e.instance_type
                        .as_deref()
                        .is_none_or(|t| t == o.instance_type)
                        && e.zone.as_deref().is_none_or(|z| z == o.zone)
                })
            })
            .cloned()
            .collect();
        return FleetFailure::InsufficientCapacity(if concerned.is_empty() {
            tried.to_vec()
        } else {
            concerned
        });
    }
    let kinds: Vec<ErrorKind> = errors
        .iter()
        .map(|e| kind_for_code(&e.code).unwrap_or(ErrorKind::Other))
        .collect();
    if kinds.contains(&ErrorKind::Throttled) {
        return FleetFailure::Failed(ErrorKind::Throttled);
    }
    FleetFailure::Failed(kinds[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::catalog::CapacityType;

    fn offering(t: &str, zone: &str) -> Offering {
        Offering {
            instance_type: t.into(),
            zone: zone.into(),
            capacity_type: CapacityType::Spot,
            price: 0.1,
        }
    }

    fn err(code: &str, t: Option<&str>, zone: Option<&str>) -> FleetError {
        FleetError {
            code: code.into(),
            message: format!("{code} happened"),
            instance_type: t.map(Into::into),
            zone: zone.map(Into::into),
            subnet: None,
        }
    }

    #[test]
    fn capacity_codes_name_the_offerings_concerned() {
        let tried = vec![
            offering("m5.large", "us-east-1a"),
            offering("m5.large", "us-east-1b"),
            offering("c5.large", "us-east-1a"),
        ];
        for code in [
            "InsufficientInstanceCapacity",
            "MaxSpotInstanceCountExceeded",
            "VcpuLimitExceeded",
            "UnfulfillableCapacity",
            "InsufficientFreeAddressesInSubnet",
        ] {
            let failure =
                classify_fleet_errors(&[err(code, Some("m5.large"), Some("us-east-1a"))], &tried);
            assert_eq!(
                failure,
                FleetFailure::InsufficientCapacity(vec![tried[0].clone()]),
                "{code}"
            );
        }
    }

    #[test]
    fn a_capacity_error_without_an_override_concerns_every_offering() {
        let tried = vec![
            offering("m5.large", "us-east-1a"),
            offering("c5.large", "us-east-1b"),
        ];
        let failure = classify_fleet_errors(&[err("UnfulfillableCapacity", None, None)], &tried);
        assert_eq!(failure, FleetFailure::InsufficientCapacity(tried));
    }

    #[test]
    fn capacity_errors_win_over_other_errors() {
        let tried = vec![
            offering("m5.large", "us-east-1a"),
            offering("c5.large", "us-east-1b"),
        ];
        let errors = [
            err(
                "InvalidParameterValue",
                Some("c5.large"),
                Some("us-east-1b"),
            ),
            err(
                "InsufficientInstanceCapacity",
                Some("m5.large"),
                Some("us-east-1a"),
            ),
        ];
        assert_eq!(
            classify_fleet_errors(&errors, &tried),
            FleetFailure::InsufficientCapacity(vec![tried[0].clone()])
        );
    }

    #[test]
    fn throttling_is_throttled() {
        let tried = vec![offering("m5.large", "us-east-1a")];
        for code in ["RequestLimitExceeded", "Throttling"] {
            let errors = [
                err("InvalidParameterValue", None, None),
                err(code, None, None),
            ];
            assert_eq!(
                classify_fleet_errors(&errors, &tried),
                FleetFailure::Failed(ErrorKind::Throttled),
                "{code}"
            );
        }
    }

    #[test]
    fn other_codes_keep_their_kind() {
        let tried = vec![offering("m5.large", "us-east-1a")];
        let failure = classify_fleet_errors(
            &[err("InvalidLaunchTemplateId.NotFound", None, None)],
            &tried,
        );
        assert_eq!(failure, FleetFailure::Failed(ErrorKind::NotFound));
        let failure = classify_fleet_errors(&[err("UnauthorizedOperation", None, None)], &tried);
        assert_eq!(failure, FleetFailure::Failed(ErrorKind::Unauthorized));
        let failure = classify_fleet_errors(&[err("SomethingNew", None, None)], &tried);
        assert_eq!(failure, FleetFailure::Failed(ErrorKind::Other));
    }

    #[test]
    fn nothing_launched_and_no_errors_is_insufficient_capacity() {
        let tried = vec![offering("m5.large", "us-east-1a")];
        assert_eq!(
            classify_fleet_errors(&[], &tried),
            FleetFailure::InsufficientCapacity(tried)
        );
    }

    #[test]
    fn offerings_out_of_capacity_beside_a_successful_launch_are_reported_but_not_the_launched_one()
    {
        let tried = vec![
            offering("m5.large", "us-east-1a"),
            offering("m5.large", "us-east-1b"),
            offering("c5.large", "us-east-1a"),
        ];
        let errors = vec![
            err(
                "InsufficientInstanceCapacity",
                Some("m5.large"),
                Some("us-east-1a"),
            ),
            err(
                "InvalidParameterValue",
                Some("c5.large"),
                Some("us-east-1a"),
            ),
            err("InsufficientInstanceCapacity", None, None),
        ];
        let out = out_of_capacity_besides(&errors, &tried, "m5.large", "us-east-1b");
        assert_eq!(out, vec![offering("m5.large", "us-east-1a")]);
        assert!(out_of_capacity_besides(&errors, &tried, "m5.large", "us-east-1a").is_empty());
    }
}
