//! What `plan` and `disrupt` may launch into beyond the catalog, as the functions see
//! it: `--reservations FILE`, the capacity reservations, as YAML or JSON
//! (`reservations: [{id, instanceType, zone, available, reservationType, interruptible,
//! endTime, nodeClasses}]`), standing for what DescribeCapacityReservations would report for the
//! EC2NodeClasses' `capacityReservationSelectorTerms` (a reservation without
//! `nodeClasses` is open to every class; with them, only to the classes named); and
//! `--min-values-policy`, the stack's `MinValuesPolicy`; and `--zonal-shift`, the zones
//! an ARC zonal shift or autoshift is in force in (the stack's `ZonalShift`): nothing
//! launches there, and `disrupt` neither disrupts nor fills the nodes there.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use nodewright_core::catalog::{Reservation, ReservationType};
use nodewright_core::pricing::Pricing;
use nodewright_core::scheduling::requirements::MinValuesPolicy;

use crate::failure::{Failure, read};

/// The flags `plan` and `disrupt` share about the capacity they may launch.
#[derive(clap::Args)]
pub(crate) struct CapacityArgs {
    /// When the types that fit a claim cannot keep a NodePool's minValues: leave its
    /// pods pending (strict), or lower the minimum and launch (best-effort), as
    /// Karpenter's MIN_VALUES_POLICY.
    #[arg(long, value_enum, default_value = "strict")]
    min_values_policy: MinValuesPolicyArg,
    /// Capacity reservations to launch into (`reservations: [{id, instanceType, zone,
    /// available, reservationType, interruptible, endTime, nodeClasses}]`): reserved offerings for
    /// NodePools that allow `karpenter.sh/capacity-type: reserved`.
    #[arg(long)]
    reservations: Option<PathBuf>,
    /// Zones under an ARC zonal shift or autoshift (comma-separated, each one of
    /// --zones): nothing launches there, and disrupt neither disrupts nor fills the
    /// nodes there, as the functions do with the stack's ZonalShift on.
    #[arg(long = "zonal-shift", value_delimiter = ',')]
    zonal_shift: Vec<String>,
}

impl CapacityArgs {
    /// Sets the policy on `pricing`, and the reservations when a file is given.
    pub(crate) fn apply(&self, pricing: &mut Pricing) -> Result<(), Failure> {
        pricing.min_values_policy = self.min_values_policy.into();
        let mut problems = Vec::new();
        for zone in &self.zonal_shift {
            let zone = zone.trim();
            if !pricing.zones.iter().any(|z| z == zone) {
                problems.push(format!(
                    "--zonal-shift: {zone:?} is not one of --zones ({})",
                    pricing.zones.join(", ")
                ));
            } else if !pricing.is_shifted(zone) {
                pricing.shifted_zones.push(zone.to_string());
            }
        }
        if !problems.is_empty() {
            return Err(Failure::Invalid(problems));
        }
        if let Some(path) = &self.reservations {
            pricing.reservations = load(path)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum MinValuesPolicyArg {
    Strict,
    BestEffort,
}

impl From<MinValuesPolicyArg> for MinValuesPolicy {
    fn from(arg: MinValuesPolicyArg) -> Self {
        match arg {
            MinValuesPolicyArg::Strict => Self::Strict,
            MinValuesPolicyArg::BestEffort => Self::BestEffort,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    reservations: Vec<Reservation>,
}

/// The reservations in `path`; a field of the wrong shape is named with its path.
fn load(path: &Path) -> Result<Vec<Reservation>, Failure> {
    let text = read(path)?;
    let de = serde_yaml_ng::Deserializer::from_str(&text);
    let file: File = serde_path_to_error::deserialize(de)
        .map_err(|e| Failure::Invalid(vec![format!("{}: {e}", path.display())]))?;
    let mut problems = Vec::new();
    for (i, r) in file.reservations.iter().enumerate() {
        for p in shape_problems(r) {
            problems.push(format!("{}: reservations[{i}].{p}", path.display()));
        }
        if file.reservations[..i].iter().any(|o| o.id == r.id) {
            problems.push(format!(
                "{}: reservations[{i}].id: {:?} is listed twice",
                path.display(),
                r.id
            ));
        }
    }
    if problems.is_empty() {
        // As the functions gather them: planning takes the first with room.
        let mut reservations = file.reservations;
        reservations.sort_by(|a, b| a.launch_order().cmp(&b.launch_order()));
        Ok(reservations)
    } else {
        Err(Failure::Invalid(problems))
    }
}

/// What is wrong with one reservation's fields, each message starting with the field
/// it names (`id: ...`); the simulator's scenarios check theirs with it too.
pub(crate) fn shape_problems(r: &Reservation) -> Vec<String> {
    let mut problems = Vec::new();
    if !r.id.starts_with("cr-") {
        problems.push(format!(
            "id: expected an id like \"cr-0123abcd\", got {:?}",
            r.id
        ));
    }
    if r.interruptible && r.reservation_type == ReservationType::CapacityBlock {
        problems.push(format!(
            "interruptible: {:?} is a Capacity Block, and only an ODCR (reservationType: default) can be interruptible",
            r.id
        ));
    }
    problems
}
