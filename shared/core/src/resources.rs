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
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// Parses a Kubernetes quantity ("500m", "1.5Gi", "256M", "1e3") into milli-units,
/// rounding up like `resource.Quantity.MilliValue()`.
pub fn parse_milli(text: &str) -> Result<i64, QuantityError> {
    let malformed = || QuantityError::Malformed(text.to_string());
    let s = text.trim();
    if s.is_empty() {
        return Err(malformed());
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Split number and suffix at the first byte that is neither digit nor '.'.
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(malformed());
    }
    // (multiplier numerator, power of ten) applied to the decimal number, in milli-units.
    let (mul, pow10): (i128, i32) = match suffix {
        "" => (1, 3),
        "n" => (1, -6),
        "u" => (1, -3),
        "m" => (1, 0),
        "k" => (1, 6),
        "M" => (1, 9),
        "G" => (1, 12),
        "T" => (1, 15),
        "P" => (1, 18),
        "E" => (1, 21),
        "Ki" => (1 << 10, 3),
        "Mi" => (1 << 20, 3),
        "Gi" => (1 << 30, 3),
        "Ti" => (1 << 40, 3),
        "Pi" => (1 << 50, 3),
        "Ei" => (1 << 60, 3),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().map_err(|_| malformed())?;
            if !(-30..=30).contains(&e) {
                return Err(QuantityError::Overflow(text.to_string()));
            }
            (1, e + 3)
        }
        _ => return Err(malformed()),
    };
    if int_part.len() + frac_part.len() > 30 {
        return Err(QuantityError::Overflow(text.to_string()));
    }
    let digits: i128 = format!("{int_part}{frac_part}")
        .parse()
        .map_err(|_| malformed())?;
    let pow = pow10 - frac_part.len() as i32;
    let overflow = || QuantityError::Overflow(text.to_string());
    let scaled = digits.checked_mul(mul).ok_or_else(overflow)?;
    let value = if pow >= 0 {
        scaled
            .checked_mul(10i128.checked_pow(pow as u32).ok_or_else(overflow)?)
            .ok_or_else(overflow)?
    } else {
        let div = 10i128.checked_pow((-pow) as u32).ok_or_else(overflow)?;
        // Round away from zero to the next milli-unit, as MilliValue() does.
        (scaled + div - 1) / div
    };
    let value = if negative { -value } else { value };
    i64::try_from(value).map_err(|_| overflow())
}

/// Resources a pod requests or a node offers. Well-known resources live in fixed slots
/// so the packer's hot loop is a handful of integer compares; anything else (custom
/// extended resources) goes to a small ordered map.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    fixed: [i64; WELL_KNOWN.len()],
    other: Option<Box<BTreeMap<String, i64>>>,
}

/// The well-known resource names, in slot order.
pub const WELL_KNOWN: [&str; 10] = [
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
];
pub const CPU: usize = 0;
pub const MEMORY: usize = 1;
pub const EPHEMERAL_STORAGE: usize = 2;
pub const PODS: usize = 3;

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
                ("Ti", 1i64 << 40),
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
            "", "1.5.3Gi", "abc", "1Gb", "1 Gi", "Gi", ".", "1e", "1ee3", "--1",
        ] {
            assert!(
                matches!(parse_milli(text), Err(QuantityError::Malformed(_))),
                "{text:?} should be malformed, got {:?}",
                parse_milli(text)
            );
        }
        assert!(matches!(
            parse_milli("99999999999Ei"),
            Err(QuantityError::Overflow(_))
        ));
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
}
