//! Durations as Karpenter writes them: Go-style `720h`, `1h30m`, `30s`, and `Never`.
//!
//! Karpenter's CRD admits only the units `s`, `m` and `h` (pattern `([0-9]+(s|m|h))+`),
//! not the full Go syntax (`ms`, `1.5h`), so we accept exactly that and no more: a
//! manifest nodewright accepts is one the API server accepts.

use std::time::Duration;

/// The message for a value that is not a duration (used for every duration field).
pub const EXPECTED_DURATION: &str = r#"expected a duration like "720h" or "1h30m""#;
/// The message for fields that also accept `Never`.
pub const EXPECTED_DURATION_OR_NEVER: &str =
    r#"expected a duration like "720h" or "1h30m", or "Never""#;

/// Parses `([0-9]+(s|m|h))+` into a duration, summing the parts as Go does
/// (`1h1h` is two hours). `None` when the text does not match or overflows.
pub fn parse_duration(text: &str) -> Option<Duration> {
    parse_parts(text, &['s', 'm', 'h']).map(Duration::from_secs)
}

/// `Never` is `Ok(None)`; otherwise as [`parse_duration`].
pub fn parse_nillable_duration(text: &str) -> Option<Option<Duration>> {
    if text == "Never" {
        Some(None)
    } else {
        parse_duration(text).map(Some)
    }
}

/// A budget duration: Karpenter only takes hours and minutes there
/// (`^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$`, the trailing `0s` being what Go's
/// `Duration.String()` appends).
pub fn parse_budget_duration(text: &str) -> Option<Duration> {
    let body = text
        .strip_suffix("0s")
        .filter(|b| !b.is_empty())
        .unwrap_or(text);
    let parts = split_parts(body)?;
    let units: String = parts.iter().map(|(_, u)| *u).collect();
    if !matches!(units.as_str(), "h" | "m" | "hm") {
        return None;
    }
    parse_parts(body, &['m', 'h']).map(Duration::from_secs)
}

/// Total seconds of `digits unit` parts whose units are all in `allowed`.
fn parse_parts(text: &str, allowed: &[char]) -> Option<u64> {
    let mut total: u64 = 0;
    for (number, unit) in split_parts(text)? {
        if !allowed.contains(&unit) {
            return None;
        }
        let scale = match unit {
            's' => 1,
            'm' => 60,
            _ => 3600,
        };
        let value: u64 = number.parse().ok()?;
        total = total.checked_add(value.checked_mul(scale)?)?;
    }
    Some(total)
}

/// Splits `1h30m` into `[("1", 'h'), ("30", 'm')]`; `None` unless every part is
/// one or more ASCII digits followed by one unit letter.
fn split_parts(text: &str) -> Option<Vec<(&str, char)>> {
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let (number, after) = rest.split_at(digits);
        let unit = after.chars().next()?;
        parts.push((number, unit));
        rest = &after[unit.len_utf8()..];
    }
    if parts.is_empty() { None } else { Some(parts) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karpenter_style_durations_parse_into_seconds() {
        assert_eq!(
            parse_duration("720h"),
            Some(Duration::from_secs(720 * 3600))
        );
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("1h1h"), Some(Duration::from_secs(7200)));
    }

    #[test]
    fn anything_outside_the_crd_pattern_is_rejected() {
        for text in [
            "",
            "30 seconds",
            "1.5h",
            "10ms",
            "h",
            "5",
            "-1h",
            "1d",
            "Never",
            "1h ",
            "１h",
        ] {
            assert_eq!(parse_duration(text), None, "{text:?}");
        }
        assert_eq!(parse_duration("99999999999999999999h"), None);
        assert_eq!(parse_duration("9999999999999999h"), None);
    }

    #[test]
    fn never_is_no_duration_at_all() {
        assert_eq!(parse_nillable_duration("Never"), Some(None));
        assert_eq!(
            parse_nillable_duration("5m"),
            Some(Some(Duration::from_secs(300)))
        );
        assert_eq!(parse_nillable_duration("never"), None);
    }

    #[test]
    fn budget_durations_take_only_hours_and_minutes() {
        assert_eq!(
            parse_budget_duration("8h"),
            Some(Duration::from_secs(8 * 3600))
        );
        assert_eq!(
            parse_budget_duration("30m"),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(
            parse_budget_duration("1h30m"),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(
            parse_budget_duration("1h30m0s"),
            Some(Duration::from_secs(5400))
        );
        for text in ["30s", "1m1h", "0s", "", "1h30m10s"] {
            assert_eq!(parse_budget_duration(text), None, "{text:?}");
        }
    }
}
