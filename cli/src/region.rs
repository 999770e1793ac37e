//! `--zones`: availability zones of one region, the embedded catalog's (us-east-1)
//! unless `--catalog` brings prices of another. A zone EC2 does not have there
//! (`us-east-1z`), or one of another region (`eu-west-1a`), would be planned and priced
//! as if it were there; it is a problem instead.

/// The region the embedded catalog's prices are for.
pub(crate) const EMBEDDED_REGION: &str = "us-east-1";

/// The zone letters of [`EMBEDDED_REGION`].
const EMBEDDED_ZONE_LETTERS: &str = "abcdef";

/// `us-east-1` of `us-east-1a` (and of a Local Zone, `us-east-1-bos-1a`); `None` when
/// `zone` is not shaped like a zone name.
pub(crate) fn region_of(zone: &str) -> Option<&str> {
    // A region is `<area>-<place>-<n>` (`us-east-1`, `us-gov-west-1`, `ap-southeast-3`):
    // the zone name's leading run up to and including the first number.
    let digits = zone.find(|c: char| c.is_ascii_digit())?;
    let end = digits + zone[digits..].find(|c: char| !c.is_ascii_digit())?;
    let region = &zone[..end];
    let shaped = region.split('-').count() >= 3
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    shaped.then_some(region)
}

/// One sentence per zone that is not a zone of `region` (the embedded catalog's when
/// `None`: then every zone must be in one region, the first one's).
pub(crate) fn zone_problems(zones: &[String], region: Option<&str>) -> Vec<String> {
    let Some(first) = zones.first() else {
        return Vec::new();
    };
    let (region, known) = match region {
        Some(r) => (r.to_string(), r == EMBEDDED_REGION),
        None => match region_of(first) {
            Some(r) => (r.to_string(), false),
            None => {
                return vec![format!(
                    "{first:?} is not an availability zone name (e.g. us-east-1a)"
                )];
            }
        },
    };
    let mut problems = Vec::new();
    for zone in zones {
        let Some(rest) = zone.strip_prefix(region.as_str()) else {
            let whose = match region_of(zone) {
                Some(r) => format!("a zone of {r}"),
                None => "not an availability zone name".into(),
            };
            problems.push(if known {
                format!(
                    "{zone:?} is {whose}, not of {region}: the embedded catalog prices {region} (give --catalog with prices of another region, and zones of that region only)"
                )
            } else {
                format!("{zone:?} is {whose}, not of {region}: all zones must be in one region")
            });
            continue;
        };
        let regional = rest.len() == 1 && rest.chars().all(|c| c.is_ascii_lowercase());
        // Local and Wavelength Zones: `us-east-1-bos-1a`, `us-east-1-wl1-bos-wlz-1`.
        let local = rest.len() > 1
            && rest.starts_with('-')
            && rest[1..]
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let letter_ok = !known || rest.chars().all(|c| EMBEDDED_ZONE_LETTERS.contains(c));
        if (regional && letter_ok) || local {
            continue;
        }
        problems.push(if regional {
            let letters: Vec<String> = EMBEDDED_ZONE_LETTERS
                .chars()
                .map(|c| format!("{region}{c}"))
                .collect();
            format!(
                "{region} has no zone {zone:?} (its zones are {})",
                letters.join(", ")
            )
        } else {
            format!("{zone:?} is not an availability zone of {region} (e.g. {region}a)")
        });
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(list: &[&str]) -> Vec<String> {
        list.iter().map(|z| z.to_string()).collect()
    }

    #[test]
    fn the_embedded_catalog_takes_us_east_1_zones_and_local_zones_only() {
        let ok = zones(&["us-east-1a", "us-east-1f", "us-east-1-bos-1a"]);
        assert_eq!(
            zone_problems(&ok, Some(EMBEDDED_REGION)),
            Vec::<String>::new()
        );
        assert_eq!(
            zone_problems(&zones(&["us-east-1z"]), Some(EMBEDDED_REGION)),
            [
                "us-east-1 has no zone \"us-east-1z\" (its zones are us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1e, us-east-1f)"
            ]
        );
        let other = zone_problems(&zones(&["us-east-1a", "eu-west-1a"]), Some(EMBEDDED_REGION));
        assert_eq!(other.len(), 1);
        assert!(
            other[0].starts_with("\"eu-west-1a\" is a zone of eu-west-1, not of us-east-1"),
            "{other:?}"
        );
        assert_eq!(
            zone_problems(&zones(&["useast1a"]), Some(EMBEDDED_REGION)).len(),
            1
        );
    }

    #[test]
    fn a_custom_catalog_takes_zones_of_any_one_region() {
        assert_eq!(
            zone_problems(&zones(&["eu-west-1a", "eu-west-1b"]), None),
            Vec::<String>::new()
        );
        assert_eq!(region_of("us-gov-west-1a"), Some("us-gov-west-1"));
        assert_eq!(region_of("ap-southeast-3b"), Some("ap-southeast-3"));
        let mixed = zone_problems(&zones(&["eu-west-1a", "us-east-1a"]), None);
        assert_eq!(
            mixed,
            [
                "\"us-east-1a\" is a zone of us-east-1, not of eu-west-1: all zones must be in one region"
            ]
        );
        assert_eq!(zone_problems(&zones(&["zone-a"]), None).len(), 1);
    }
}
