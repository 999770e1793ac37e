//! `--reservations FILE`: the capacity reservations `plan` may launch into, as YAML or
//! JSON (`reservations: [{id, instanceType, zone, available, reservationType,
//! endTime, nodeClasses}]`), standing for what DescribeCapacityReservations would
//! report for the EC2NodeClasses' `capacityReservationSelectorTerms`. A reservation
//! without `nodeClasses` is open to every class; with them, only to the classes named.

use std::path::Path;

use serde::Deserialize;

use nodewright_core::catalog::Reservation;

use crate::{Failure, read};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    reservations: Vec<Reservation>,
}

/// The reservations in `path`; a field of the wrong shape is named with its path.
pub(crate) fn load(path: &Path) -> Result<Vec<Reservation>, Failure> {
    let text = read(path)?;
    let de = serde_yaml_ng::Deserializer::from_str(&text);
    let file: File = serde_path_to_error::deserialize(de)
        .map_err(|e| Failure::Invalid(vec![format!("{}: {e}", path.display())]))?;
    let mut problems = Vec::new();
    for (i, r) in file.reservations.iter().enumerate() {
        if !r.id.starts_with("cr-") {
            problems.push(format!(
                "{}: reservations[{i}].id: expected an id like \"cr-0123abcd\", got {:?}",
                path.display(),
                r.id
            ));
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
        Ok(file.reservations)
    } else {
        Err(Failure::Invalid(problems))
    }
}
