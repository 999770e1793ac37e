//! Which label keys a NodePool may use, as Karpenter decides it.
//!
//! Karpenter (core `pkg/apis/v1/labels.go`, extended by the AWS provider) reserves the
//! label domains `kubernetes.io`, `k8s.io`, `karpenter.sh` and `karpenter.k8s.aws`
//! (and their subdomains), except `kops.k8s.io`, `node.kubernetes.io` and
//! `node-restriction.kubernetes.io`, and except the well-known labels it can schedule
//! on. `kubernetes.io/hostname` is never allowed; nor is `karpenter.sh/nodepool`,
//! which Karpenter sets itself (its CRD rejects it in requirements and labels).

use crate::well_known::{LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};

/// Labels inside restricted domains that a NodePool may still use.
const WELL_KNOWN: &[&str] = &[
    "karpenter.sh/capacity-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    LABEL_INSTANCE_TYPE,
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/windows-build",
    "topology.k8s.aws/zone-id",
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.k8s.aws/instance-tenancy",
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-interruptible",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
];

/// Always rejected, whatever the domain rules say.
const RESTRICTED: &[&str] = &[LABEL_HOSTNAME, LABEL_NODEPOOL];

const RESTRICTED_DOMAINS: &[&str] = &[
    "kubernetes.io",
    "k8s.io",
    "karpenter.sh",
    "karpenter.k8s.aws",
];

const DOMAIN_EXCEPTIONS: &[&str] = &[
    "kops.k8s.io",
    "node.kubernetes.io",
    "node-restriction.kubernetes.io",
];

/// Old label names Karpenter reads as their current equivalents.
const NORMALIZED: &[(&str, &str)] = &[
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
    ("beta.kubernetes.io/os", "kubernetes.io/os"),
    (
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
    ),
];

/// Whether `value` is a DNS-1123 label of at most `max` characters (63 for a label
/// proper), as Kubernetes requires of pod and namespace names: lowercase letters, digits
/// and '-', starting and ending with a letter or digit.
pub fn is_dns_label(value: &str, max: usize) -> bool {
    let b = value.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= max
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
}

/// The current name of a label key (`beta.kubernetes.io/arch` → `kubernetes.io/arch`).
pub fn normalize_label_key(key: &str) -> &str {
    NORMALIZED
        .iter()
        .find(|(old, _)| *old == key)
        .map(|(_, new)| *new)
        .unwrap_or(key)
}

/// `None` when a NodePool may use `key` as a requirement key or template label;
/// otherwise why not.
pub fn label_restriction(key: &str) -> Option<String> {
    let key = normalize_label_key(key);
    if RESTRICTED.contains(&key) {
        return Some(format!("label {key:?} is restricted"));
    }
    if WELL_KNOWN.contains(&key) {
        return None;
    }
    let domain = key.split_once('/').map(|(d, _)| d)?;
    if DOMAIN_EXCEPTIONS.iter().any(|e| in_domain(domain, e)) {
        return None;
    }
    RESTRICTED_DOMAINS
        .iter()
        .find(|r| in_domain(domain, r))
        .map(|r| format!("label domain {r:?} is restricted (only well-known labels such as karpenter.sh/capacity-type may use it)"))
}

/// `domain` is `parent` or a subdomain of it. (Karpenter tests a plain suffix; a
/// dot-aware test keeps `notkubernetes.io` usable, which Karpenter's CRD also allows.)
fn in_domain(domain: &str, parent: &str) -> bool {
    domain == parent
        || domain
            .strip_suffix(parent)
            .is_some_and(|head| head.ends_with('.'))
}

/// Why `value` is not a Kubernetes label value (at most 63 characters, alphanumeric at
/// both ends, `-`, `_` and `.` inside; empty is allowed), or `None` when it is one.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.len() > 63 {
        return Some(format!(
            "label value {value:?} is longer than 63 characters"
        ));
    }
    (!is_name_segment(value)).then(|| {
        format!("label value {value:?} must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
    })
}

/// Why `key` is not a Kubernetes label key (`[prefix/]name`: a DNS subdomain prefix of
/// at most 253 characters, a name as a label value but not empty), or `None`.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty() && name.len() <= 63 && is_name_segment(name);
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    (!(name_ok && prefix_ok)).then(|| {
        format!("{key:?} is not a valid label key (expected an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.')")
    })
}

fn is_name_segment(text: &str) -> bool {
    let bytes = text.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_and_custom_labels_are_allowed() {
        for key in [
            "karpenter.sh/capacity-type",
            "kubernetes.io/arch",
            "beta.kubernetes.io/arch",
            "node.kubernetes.io/instance-type",
            "karpenter.k8s.aws/instance-family",
            "example.com/team",
            "team",
            "kops.k8s.io/instancegroup",
            "foo.node.kubernetes.io/bar",
        ] {
            assert_eq!(label_restriction(key), None, "{key}");
        }
    }

    #[test]
    fn reserved_domains_and_labels_are_rejected() {
        assert_eq!(
            label_restriction("kubernetes.io/hostname").as_deref(),
            Some(r#"label "kubernetes.io/hostname" is restricted"#)
        );
        assert_eq!(
            label_restriction("karpenter.sh/nodepool").as_deref(),
            Some(r#"label "karpenter.sh/nodepool" is restricted"#)
        );
        for key in [
            "karpenter.sh/custom",
            "foo.kubernetes.io/x",
            "k8s.io/x",
            "karpenter.k8s.aws/made-up",
        ] {
            assert!(label_restriction(key).is_some(), "{key}");
        }
    }

    #[test]
    fn label_keys_and_values_follow_kubernetes_syntax() {
        assert_eq!(label_key_problem("example.com/team"), None);
        assert_eq!(label_key_problem("team"), None);
        for key in ["", "/x", "Example.com/x", "a/b/c", "x/", "-x", "a..b/x"] {
            assert!(label_key_problem(key).is_some(), "{key:?}");
        }
        assert_eq!(label_value_problem(""), None);
        assert_eq!(label_value_problem("m5.large"), None);
        assert_eq!(
            label_value_problem("-bad"),
            Some(r#"label value "-bad" must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit"#.into())
        );
        assert!(label_value_problem(&"a".repeat(64)).is_some());
    }

    #[test]
    fn dns_labels_are_lowercase_alphanumerics_and_inner_dashes_up_to_the_limit() {
        for good in ["web", "web-x7k2p", "a", "0-9"] {
            assert!(is_dns_label(good, 63), "{good}");
        }
        for bad in ["", "Web", "-web", "web-", "web_1", "web.1"] {
            assert!(!is_dns_label(bad, 63), "{bad}");
        }
        assert!(is_dns_label(&"a".repeat(63), 63));
        assert!(!is_dns_label(&"a".repeat(58), 57));
    }
}
