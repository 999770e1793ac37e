//! Exact Kubernetes resource quantities and resource vectors.
//!
//! Every quantity is held as an `i64` count of *milli-units* (millicores for cpu,
//! millibytes for memory), the same fixed-point representation kube-scheduler uses
//! through `MilliValue()`. Parsing never goes through a float, so "1.1Gi" summed a
//! thousand times is exactly 1100 Gi, not 1099.9999.

use std::collections::BTreeMap;
use std::fmt;

/// Why a quantity string is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantity {0:?} is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)"
    )]
    Malformed(String),
}

/// The largest magnitude a quantity holds, in milli-units: `i64::MAX` milli is about
/// 9.2 million billion cores or 8 PiB of memory, some 250 times the largest EC2
/// instance (32 TiB). Kubernetes accepts far larger quantities (decimal forms have no
/// upper bound at all, `1e100` is valid), and people write them to mean "no limit"
/// (`limits: {memory: 10000000Gi}`). Parsing *saturates* here instead of refusing: a
/// saturated limit is more than any number of nodes can reach, a saturated request
/// fits no node, and both keep the exact `i64` compare and add of the packer's hot
/// loop (`fits_in`, saturating `add`/`sub`). Widening to `i128` would double every
/// resource vector to be exact only about amounts no node has.
pub const QUANTITY_CEILING: i64 = i64::MAX;

/// Parses a Kubernetes quantity ("500m", "1.5Gi", "256M", "1e3") into milli-units,
/// exactly as `resource.ParseQuantity` reads it followed by `MilliValue()`: any
/// fraction below a milli-unit rounds up (away from zero), and a magnitude above
/// [`QUANTITY_CEILING`] saturates to it.
///
/// The grammar is apimachinery's scanner, including its leniencies: a lone sign or
/// point is zero (`"+"`, `"."`), `"1."` is one, and the decimal exponent is any
/// integer (`"1e-40"` rounds up to one milli-unit, `"1e40"` saturates).
pub fn parse_milli(text: &str) -> Result<i64, QuantityError> {
    let malformed = || QuantityError::Malformed(text.to_string());
    // The API server trims surrounding whitespace when it reads a quantity from JSON.
    let s = text.trim();
    if s.is_empty() {
        return Err(malformed());
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let int_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (int_part, after_int) = rest.split_at(int_end);
    let (frac_part, suffix) = match after_int.strip_prefix('.') {
        Some(after_point) => {
            let frac_end = after_point
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after_point.len());
            after_point.split_at(frac_end)
        }
        None => ("", after_int),
    };
    // Binary suffixes multiply by 2^shift; every form then scales by 10^exponent.
    let (shift, exponent): (u32, i64) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        exp if exp.len() > 1 && exp.starts_with(['e', 'E']) => {
            let digits = &exp[1..];
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed());
            }
            // apimachinery parses the exponent as an int64 and keeps it as an int32
            // (wrapping); an exponent beyond int64 is refused.
            let e: i64 = digits.parse().map_err(|_| malformed())?;
            (0, i64::from(e as i32))
        }
        _ => return Err(malformed()),
    };
    let magnitude = scaled_milli(int_part, frac_part, shift, exponent + 3);
    Ok(if negative { -magnitude } else { magnitude })
}

/// A quantity as a catalog or a manifest writes it: a string (`"940m"`, `"2Gi"`) or a
/// bare number (`8`). Kept as written until [`RawQuantity::milli`] parses it.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum RawQuantity {
    Text(String),
    Number(serde_json::Number),
}

impl RawQuantity {
    /// The quantity in milli-units, as [`parse_milli`] reads its text.
    pub(crate) fn milli(&self) -> Result<i64, QuantityError> {
        match self {
            RawQuantity::Text(s) => parse_milli(s),
            RawQuantity::Number(n) => parse_milli(&n.to_string()),
        }
    }
}

/// Whether a quantity string matches the pattern CRDs put on `resource.Quantity` fields
/// (`^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`),
/// as on a NodePool's `spec.limits`. The API server checks it before anything parses
/// the value, so it refuses some strings `parse_milli` reads (`"Gi"`, `"."`, `"+"`); a
/// string must pass both to be a valid limit.
pub fn matches_crd_quantity_pattern(text: &str) -> bool {
    /// `([0-9]+(\.[0-9]*)?)|(\.[0-9]+)` at the start of `s`; the rest after it.
    fn number(s: &str) -> Option<&str> {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let rest = &s[int_len..];
        match rest.strip_prefix('.') {
            Some(after) => {
                let frac_len = after.bytes().take_while(u8::is_ascii_digit).count();
                (int_len > 0 || frac_len > 0).then_some(&after[frac_len..])
            }
            None => (int_len > 0).then_some(rest),
        }
    }
    let unsigned = |s: &'_ str| -> Option<()> {
        let s = s.strip_prefix(['+', '-']).unwrap_or(s);
        let suffix = number(s)?;
        let ok = match suffix {
            "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
            "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
            exp if exp.starts_with(['e', 'E']) => {
                let e = &exp[1..];
                number(e.strip_prefix(['+', '-']).unwrap_or(e)) == Some("")
            }
            _ => false,
        };
        ok.then_some(())
    };
    unsigned(text).is_some()
}

/// `ceil(digits × 2^shift × 10^(pow10 − frac.len()))`, saturating at
/// [`QUANTITY_CEILING`]. `digits` is `int_part` followed by `frac_part`, any length.
fn scaled_milli(int_part: &str, frac_part: &str, shift: u32, pow10: i64) -> i64 {
    // Decimal digits, most significant first, without leading zeros.
    let mut digits: Vec<u8> = int_part
        .bytes()
        .chain(frac_part.bytes())
        .map(|b| b - b'0')
        .skip_while(|d| *d == 0)
        .collect();
    if digits.is_empty() {
        return 0;
    }
    // Multiply by 2^shift in decimal, exactly (shift is at most 60).
    for _ in 0..shift {
        let mut carry = 0;
        for d in digits.iter_mut().rev() {
            let v = *d * 2 + carry;
            *d = v % 10;
            carry = v / 10;
        }
        if carry > 0 {
            digits.insert(0, carry);
        }
    }
    // The value is digits × 10^pow: its integer part has `int_len` digits.
    let pow = pow10 - frac_part.len() as i64;
    let int_len = digits.len() as i64 + pow;
    if int_len > 19 {
        // At least 10^19 > i64::MAX, since the leading digit is not zero.
        return QUANTITY_CEILING;
    }
    if int_len <= 0 {
        // A non-zero fraction of a milli-unit rounds up to one.
        return 1;
    }
    let int_len = int_len as usize;
    let mut value: u128 = 0;
    for i in 0..int_len {
        value = value * 10 + u128::from(digits.get(i).copied().unwrap_or(0));
    }
    if digits.iter().skip(int_len).any(|d| *d != 0) {
        value += 1;
    }
    i64::try_from(value).unwrap_or(QUANTITY_CEILING)
}

/// Resources a pod requests or a node offers. Well-known resources live in fixed slots
/// so the packer's hot loop is a handful of integer compares; anything else (custom
/// extended resources) goes to a small ordered map.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    fixed: [i64; WELL_KNOWN.len()],
    // Boxed: most resources have no extended ones, and an empty box is one word where
    // an inline map would be three.
    #[allow(clippy::box_collection)]
    other: Option<Box<BTreeMap<String, i64>>>,
}

/// The well-known resource names, in slot order.
pub const WELL_KNOWN: [&str; 11] = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "pods",
    "nvidia.com/gpu",
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "vpc.amazonaws.com/pod-eni",
    "vpc.amazonaws.com/efa",
    // The EBS volumes a pod attaches and a node can attach (Kubernetes' own name for a
    // CSI driver's attach limit); see `crate::volume_limits`.
    "attachable-volumes-csi-ebs.csi.aws.com",
];
pub const CPU: usize = 0;
pub const MEMORY: usize = 1;
pub const EPHEMERAL_STORAGE: usize = 2;
pub const PODS: usize = 3;
pub const EBS_ATTACHMENTS: usize = 10;

fn slot(name: &str) -> Option<usize> {
    WELL_KNOWN.iter().position(|n| *n == name)
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    /// A single pod slot and nothing else: what a pod with no requests still takes.
    pub fn one_pod() -> Self {
        let mut r = Self::default();
        r.fixed[PODS] = 1000;
        r
    }

    /// Milli-value of a resource (0 when absent).
    pub fn get_milli(&self, name: &str) -> i64 {
        match slot(name) {
            Some(i) => self.fixed[i],
            None => self
                .other
                .as_ref()
                .and_then(|m| m.get(name).copied())
                .unwrap_or(0),
        }
    }

    #[inline]
    pub fn slot_milli(&self, slot: usize) -> i64 {
        self.fixed[slot]
    }

    pub fn set_milli(&mut self, name: &str, value: i64) {
        match slot(name) {
            Some(i) => self.fixed[i] = value,
            None => {
                let map = self.other.get_or_insert_with(Default::default);
                if value == 0 {
                    map.remove(name);
                } else {
                    map.insert(name.to_string(), value);
                }
                if map.is_empty() {
                    self.other = None;
                }
            }
        }
    }

    /// Parses and sets a quantity.
    pub fn set_quantity(&mut self, name: &str, quantity: &str) -> Result<(), QuantityError> {
        self.set_milli(name, parse_milli(quantity)?);
        Ok(())
    }

    /// `self += other`, saturating: every single quantity up to `i64::MAX` milli is
    /// parseable, so sums (a NodePool's usage over its nodes, a bin's requests) can
    /// exceed it; a saturated total still compares as more than any limit or ceiling.
    pub fn add(&mut self, other: &Resources) {
        for (a, b) in self.fixed.iter_mut().zip(other.fixed.iter()) {
            *a = a.saturating_add(*b);
        }
        if let Some(o) = &other.other {
            for (k, v) in o.iter() {
                let cur = self.get_milli(k);
                self.set_milli(k, cur.saturating_add(*v));
            }
        }
    }

    /// `self -= other`, saturating like [`Resources::add`].
    pub fn sub(&mut self, other: &Resources) {
        for (a, b) in self.fixed.iter_mut().zip(other.fixed.iter()) {
            *a = a.saturating_sub(*b);
        }
        if let Some(o) = &other.other {
            for (k, v) in o.iter() {
                let cur = self.get_milli(k);
                self.set_milli(k, cur.saturating_sub(*v));
            }
        }
    }

    /// Element-wise maximum (the init-container rule).
    pub fn max_with(&mut self, other: &Resources) {
        for (a, b) in self.fixed.iter_mut().zip(other.fixed.iter()) {
            *a = (*a).max(*b);
        }
        if let Some(o) = &other.other {
            for (k, v) in o.iter() {
                let cur = self.get_milli(k);
                self.set_milli(k, cur.max(*v));
            }
        }
    }

    /// True when every requested resource fits in `capacity`.
    #[inline]
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        for i in 0..WELL_KNOWN.len() {
            if self.fixed[i] > capacity.fixed[i] {
                return false;
            }
        }
        match &self.other {
            None => true,
            Some(o) => o.iter().all(|(k, v)| *v <= capacity.get_milli(k)),
        }
    }

    /// Whether `self + extra` fits in `capacity` ([`Resources::add`], then
    /// [`Resources::fits_in`]), without building the sum when neither has custom
    /// resources: the packer asks it for every bin it tries a pod on.
    #[inline]
    pub fn fits_in_with(&self, extra: &Resources, capacity: &Resources) -> bool {
        if self.other.is_some() || extra.other.is_some() {
            let mut total = self.clone();
            total.add(extra);
            return total.fits_in(capacity);
        }
        (0..WELL_KNOWN.len())
            .all(|i| self.fixed[i].saturating_add(extra.fixed[i]) <= capacity.fixed[i])
    }

    /// The first resource (by name) that does not fit, with requested and available milli-values.
    pub fn first_shortfall(&self, capacity: &Resources) -> Option<(String, i64, i64)> {
        self.iter()
            .find(|(name, v)| *v > capacity.get_milli(name))
            .map(|(name, v)| (name.to_string(), v, capacity.get_milli(name)))
    }

    /// Non-zero entries, well-known first, then custom ones by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        WELL_KNOWN
            .iter()
            .zip(self.fixed.iter())
            .filter(|(_, v)| **v != 0)
            .map(|(n, v)| (*n, *v))
            .chain(
                self.other
                    .iter()
                    .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), *v))),
            )
    }

    /// Whether every entry is a well-known resource (no custom extended ones).
    pub fn only_well_known(&self) -> bool {
        self.other.as_ref().is_none_or(|m| m.is_empty())
    }

    pub fn any_negative(&self) -> Option<(&str, i64)> {
        self.iter().find(|(_, v)| *v < 0)
    }

    pub fn is_zero(&self) -> bool {
        self.iter().next().is_none()
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in self.iter() {
            m.entry(&k, &format_milli(k, v));
        }
        m.finish()
    }
}

/// Renders a milli-value for people: cpu as cores or millicores, byte resources in
/// binary units, counts as integers.
pub fn format_milli(name: &str, milli: i64) -> String {
    if milli == QUANTITY_CEILING {
        // A saturated quantity was written larger than this: say so rather than
        // print the ceiling as if it were the amount.
        return format!("at least {}", format_exact(name, milli));
    }
    format_exact(name, milli)
}

fn format_exact(name: &str, milli: i64) -> String {
    match name {
        "cpu" => {
            if milli % 1000 == 0 {
                format!("{}", milli / 1000)
            } else {
                format!("{milli}m")
            }
        }
        "memory" | "ephemeral-storage" => {
            let bytes = milli / 1000;
            for (unit, size) in [
                ("Pi", 1i64 << 50),
                ("Ti", 1 << 40),
                ("Gi", 1 << 30),
                ("Mi", 1 << 20),
                ("Ki", 1 << 10),
            ] {
                if bytes >= size {
                    let whole = bytes as f64 / size as f64;
                    return if bytes % size == 0 {
                        format!("{}{unit}", bytes / size)
                    } else {
                        format!("{whole:.2}{unit}")
                    };
                }
            }
            format!("{bytes}")
        }
        _ => {
            if milli % 1000 == 0 {
                format!("{}", milli / 1000)
            } else {
                format!("{milli}m")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_exactly_into_milli_units() {
        let cases = [
            ("1", 1000),
            ("500m", 500),
            ("0.5", 500),
            (".5", 500),
            ("1.5", 1500),
            ("250m", 250),
            ("1Ki", 1024 * 1000),
            ("1.5Gi", 1536 * 1024 * 1024 * 1000),
            ("256M", 256_000_000_000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("100n", 1),
            ("1u", 1),
            ("+2", 2000),
            ("-1", -1000),
            ("17Gi", 17 * (1i64 << 30) * 1000),
        ];
        for (text, milli) in cases {
            assert_eq!(parse_milli(text), Ok(milli), "{text}");
        }
    }

    #[test]
    fn malformed_quantities_are_errors_not_guesses() {
        for text in [
            "",
            "1.5.3Gi",
            "abc",
            "1Gb",
            "1 Gi",
            "1e",
            "1ee3",
            "--1",
            "1e1.5",
            "1K",
            "1ki",
            "1e99999999999999999999",
            "0x10",
        ] {
            assert!(
                matches!(parse_milli(text), Err(QuantityError::Malformed(_))),
                "{text:?} should be malformed, got {:?}",
                parse_milli(text)
            );
        }
    }

    #[test]
    fn quantities_beyond_the_ceiling_saturate_instead_of_failing() {
        let cases = [
            // "No limit" as people write it: 10 million GiB is 1.07e19 milli-bytes.
            ("10000000Gi", QUANTITY_CEILING),
            ("99999999999Ei", QUANTITY_CEILING),
            ("8Ei", QUANTITY_CEILING),
            ("1e100", QUANTITY_CEILING),
            ("1E19", QUANTITY_CEILING),
            ("1E", QUANTITY_CEILING),
            ("-1e100", -QUANTITY_CEILING),
            // Exactly the ceiling, and the next milli-unit up.
            ("9223372036854775.807", QUANTITY_CEILING),
            ("9223372036854775.8071", QUANTITY_CEILING),
            ("9223372036854775806m", QUANTITY_CEILING - 1),
            // Just below: still exact.
            ("8Pi", 9_007_199_254_740_992_000),
        ];
        for (text, milli) in cases {
            assert_eq!(parse_milli(text), Ok(milli), "{text}");
        }
    }

    #[test]
    fn tiny_and_oddly_written_quantities_read_as_kubernetes_reads_them() {
        let cases = [
            // Below a milli-unit rounds up, however far below.
            ("1e-40", 1),
            ("0.000000000000000000000000000000000000000001", 1),
            ("1n", 1),
            ("0.0000e5", 0),
            // Many digits, exact.
            ("1234567890123456.789", 1_234_567_890_123_456_789),
            ("00000000000000000000000000000000000001.5Ki", 1536 * 1000),
            ("1.5Ki", 1536 * 1000),
            ("0.1Ki", 102_400),
            ("0.001Ki", 1024),
            // apimachinery's scanner: a lone sign or point is zero, "1." is one.
            (".", 0),
            ("+", 0),
            ("1.", 1000),
            ("Gi", 0),
            ("1e+3", 1_000_000),
            // "E" alone is the exa suffix, not an exponent.
            ("1P", 1_000_000_000_000_000_000),
            // The exponent is kept as an int32, wrapping as apimachinery does.
            ("1e4294967296", 1000),
        ];
        for (text, milli) in cases {
            assert_eq!(parse_milli(text), Ok(milli), "{text}");
        }
    }

    #[test]
    fn the_crd_pattern_refuses_what_the_api_server_refuses_for_limits() {
        for text in [
            "1",
            "+1",
            "-1",
            "1.",
            ".5",
            "1.5Gi",
            "10000000Gi",
            "1e100",
            "1E-3",
            "1e1.5",
            "500m",
        ] {
            assert!(matches_crd_quantity_pattern(text), "{text} should match");
        }
        for text in [
            "", ".", "+", "Gi", "1 Gi", "1ki", "1e", "e3", "1.5.3", "1Gb",
        ] {
            assert!(
                !matches_crd_quantity_pattern(text),
                "{text} should not match"
            );
        }
    }

    #[test]
    fn a_saturated_quantity_is_shown_as_at_least_the_ceiling() {
        assert_eq!(format_milli("memory", QUANTITY_CEILING), "at least 8.19Pi");
        assert_eq!(format_milli("memory", 9_007_199_254_740_992_000), "8Pi");
        assert_eq!(
            format_milli("cpu", QUANTITY_CEILING),
            "at least 9223372036854775807m"
        );
    }

    #[test]
    fn summing_a_fractional_quantity_a_thousand_times_has_no_drift() {
        let mut total = Resources::new();
        let mut one = Resources::new();
        one.set_quantity("memory", "1.1Gi").unwrap();
        for _ in 0..1000 {
            total.add(&one);
        }
        let mut expected = Resources::new();
        expected.set_quantity("memory", "1100Gi").unwrap();
        assert_eq!(total, expected);
    }

    #[test]
    fn custom_extended_resources_fit_only_where_offered() {
        let mut pod = Resources::one_pod();
        pod.set_quantity("example.com/dongle", "1").unwrap();
        let mut node = Resources::new();
        node.set_quantity("pods", "10").unwrap();
        assert!(!pod.fits_in(&node));
        assert_eq!(
            pod.first_shortfall(&node),
            Some(("example.com/dongle".to_string(), 1000, 0))
        );
        node.set_quantity("example.com/dongle", "2").unwrap();
        assert!(pod.fits_in(&node));
    }

    #[test]
    fn a_sum_fits_without_being_built_exactly_when_the_built_sum_fits() {
        let r = |pairs: &[(&str, &str)]| {
            let mut r = Resources::new();
            for (name, q) in pairs {
                r.set_quantity(name, q).unwrap();
            }
            r
        };
        let node = r(&[
            ("cpu", "4"),
            ("memory", "8Gi"),
            ("pods", "10"),
            ("example.com/dongle", "2"),
        ]);
        let used = [
            r(&[("cpu", "3"), ("memory", "4Gi"), ("pods", "3")]),
            r(&[("cpu", "3500m"), ("pods", "9")]),
            r(&[("cpu", "1"), ("example.com/dongle", "1")]),
            r(&[("cpu", "1"), ("example.com/dongle", "2")]),
        ];
        let pods = [
            r(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "1")]),
            r(&[("cpu", "500m"), ("pods", "1")]),
            r(&[("cpu", "1001m"), ("pods", "1")]),
            r(&[("pods", "2")]),
            r(&[("example.com/dongle", "1"), ("pods", "1")]),
            r(&[("memory", "5Gi")]),
        ];
        let mut fits = 0;
        for u in &used {
            for p in &pods {
                let mut total = u.clone();
                total.add(p);
                assert_eq!(
                    u.fits_in_with(p, &node),
                    total.fits_in(&node),
                    "{u:?} + {p:?}"
                );
                fits += usize::from(total.fits_in(&node));
            }
        }
        // Both answers occur, with and without custom resources.
        assert!(fits > 0 && fits < used.len() * pods.len());
        // Saturating, as `add` is: a sum past i64::MAX still does not fit.
        let mut huge = Resources::new();
        huge.set_milli("cpu", i64::MAX);
        let mut roomy = Resources::new();
        roomy.set_milli("cpu", i64::MAX - 1);
        assert!(!huge.fits_in_with(&r(&[("cpu", "1")]), &roomy));
    }
}
