//! Resource drift: a node whose instance runs an AMI, sits in a subnet, carries
//! security groups or runs in a capacity reservation its EC2NodeClass no longer selects
//! (Karpenter-AWS's AMIDrift, SubnetDrift, SecurityGroupDrift and
//! CapacityReservationDrift). The hashes of [`super::hash`] cover what the
//! EC2NodeClass *says*; this covers what its selector terms *select now*, which
//! changes without the object changing (a new AMI published under an alias, a subnet
//! untagged). The caller resolves both sides (EC2 describes the instance, the class
//! is resolved against the account); this compares them.

use std::collections::BTreeSet;

/// What EC2 says an instance was launched with. `None` (or no security groups):
/// unknown, and what is unknown never drifts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchedWith<'a> {
    pub node: &'a str,
    /// The node's architecture ("amd64", "arm64"): only the class's images for it count.
    /// `None`: every image the class selects counts.
    pub arch: Option<&'a str>,
    pub image: Option<&'a str>,
    pub subnet: Option<&'a str>,
    pub security_groups: &'a [String],
    /// The capacity reservation it runs in, when it was launched into one (capacity
    /// type `reserved`; an on-demand instance EC2 matched to an open reservation is
    /// not "in" it).
    pub reservation: Option<&'a str>,
}

/// An image an EC2NodeClass selects, and the architecture it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectedImage<'a> {
    pub id: &'a str,
    pub arch: &'a str,
}

/// What an EC2NodeClass selects now (Karpenter's `status.amis`, `status.subnets`,
/// `status.securityGroups`, `status.capacityReservations`). An empty list of images,
/// subnets or security groups selects nothing to compare with: no drift of that kind
/// is reported (such a class cannot launch anyway). Reservations are different, as in
/// Karpenter: a class may select none, and then a node in one has drifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection<'a> {
    pub node_class: &'a str,
    pub images: Vec<SelectedImage<'a>>,
    pub subnets: Vec<&'a str>,
    pub security_groups: Vec<&'a str>,
    pub reservations: Vec<&'a str>,
}

/// Why `node`'s instance no longer matches what its class selects, or `None`. Every
/// kind that drifted is named, AMI first, then subnet, then security groups.
pub fn resource_drift(node: &LaunchedWith<'_>, class: &Selection<'_>) -> Option<String> {
    let name = class.node_class;
    let mut why = Vec::new();
    if let Some(image) = node.image {
        let for_arch: Vec<&str> = class
            .images
            .iter()
            .filter(|i| node.arch.is_none_or(|a| a == i.arch))
            .map(|i| i.id)
            .collect();
        if !class.images.is_empty() && !for_arch.contains(&image) {
            why.push(format!(
                "AMI {image} is no longer selected by EC2NodeClass {name}"
            ));
        }
    }
    if let Some(subnet) = node.subnet
        && !class.subnets.is_empty()
        && !class.subnets.contains(&subnet)
    {
        why.push(format!(
            "subnet {subnet} is no longer selected by EC2NodeClass {name}"
        ));
    }
    if !node.security_groups.is_empty() && !class.security_groups.is_empty() {
        let has: BTreeSet<&str> = node.security_groups.iter().map(String::as_str).collect();
        let selected: BTreeSet<&str> = class.security_groups.iter().copied().collect();
        if has != selected {
            why.push(format!(
                "security groups {} differ from those EC2NodeClass {name} selects ({})",
                join(&has),
                join(&selected)
            ));
        }
    }
    if let Some(r) = node.reservation
        && !class.reservations.contains(&r)
    {
        why.push(format!(
            "capacity reservation {r} is no longer selected by EC2NodeClass {name}"
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// [`resource_drift`] over many nodes: `(node, why)` for each drifted one, in order —
/// what [`super::DisruptionInput::external_drift`] takes.
pub fn external_drift<'a, 'c: 'a>(
    nodes: impl IntoIterator<Item = (LaunchedWith<'a>, &'a Selection<'c>)>,
) -> Vec<(String, String)> {
    nodes
        .into_iter()
        .filter_map(|(node, class)| {
            resource_drift(&node, class).map(|w| (node.node.to_string(), w))
        })
        .collect()
}

fn join(set: &BTreeSet<&str>) -> String {
    set.iter().copied().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class() -> Selection<'static> {
        Selection {
            node_class: "default",
            images: vec![
                SelectedImage {
                    id: "ami-new-amd",
                    arch: "amd64",
                },
                SelectedImage {
                    id: "ami-new-arm",
                    arch: "arm64",
                },
            ],
            subnets: vec!["subnet-a", "subnet-b"],
            security_groups: vec!["sg-1", "sg-2"],
            reservations: vec!["cr-0aaaa"],
        }
    }

    fn sgs(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn node<'a>(
        image: &'a str,
        subnet: &'a str,
        security_groups: &'a [String],
    ) -> LaunchedWith<'a> {
        LaunchedWith {
            node: "n1",
            arch: Some("amd64"),
            image: Some(image),
            subnet: Some(subnet),
            security_groups,
            reservation: None,
        }
    }

    #[test]
    fn a_node_on_what_its_class_selects_has_not_drifted() {
        let groups = sgs(&["sg-2", "sg-1"]);
        let n = node("ami-new-amd", "subnet-b", &groups);
        assert_eq!(resource_drift(&n, &class()), None);
        assert_eq!(external_drift([(n, &class())]), vec![]);
    }

    #[test]
    fn an_ami_no_longer_selected_is_drift() {
        let groups = sgs(&["sg-1", "sg-2"]);
        let n = node("ami-old", "subnet-a", &groups);
        assert_eq!(
            external_drift([(n, &class())]),
            vec![(
                "n1".to_string(),
                "AMI ami-old is no longer selected by EC2NodeClass default".to_string()
            )]
        );
    }

    #[test]
    fn only_the_images_for_the_nodes_architecture_count() {
        let groups = sgs(&["sg-1", "sg-2"]);
        // The arm64 image is selected, but not for an amd64 node.
        let n = node("ami-new-arm", "subnet-a", &groups);
        assert!(
            resource_drift(&n, &class())
                .unwrap()
                .starts_with("AMI ami-new-arm is no longer selected")
        );
        // A node of unknown architecture may run any selected image.
        let unknown = LaunchedWith { arch: None, ..n };
        assert_eq!(resource_drift(&unknown, &class()), None);
    }

    #[test]
    fn a_subnet_no_longer_selected_is_drift() {
        let groups = sgs(&["sg-1", "sg-2"]);
        let n = node("ami-new-amd", "subnet-gone", &groups);
        assert_eq!(
            resource_drift(&n, &class()).as_deref(),
            Some("subnet subnet-gone is no longer selected by EC2NodeClass default")
        );
    }

    #[test]
    fn security_groups_drift_as_a_set() {
        // One missing, one extra, one fewer: all drift; order and duplicates do not.
        for has in [
            sgs(&["sg-1"]),
            sgs(&["sg-1", "sg-2", "sg-3"]),
            sgs(&["sg-1", "sg-3"]),
        ] {
            let n = node("ami-new-amd", "subnet-a", &has);
            let why = resource_drift(&n, &class()).unwrap_or_default();
            assert!(
                why.starts_with("security groups ")
                    && why.ends_with("differ from those EC2NodeClass default selects (sg-1, sg-2)"),
                "{has:?}: {why}"
            );
        }
        let same = sgs(&["sg-2", "sg-1", "sg-2"]);
        assert_eq!(
            resource_drift(&node("ami-new-amd", "subnet-a", &same), &class()),
            None
        );
    }

    #[test]
    fn every_kind_that_drifted_is_named_ami_first() {
        let groups = sgs(&["sg-9"]);
        let n = node("ami-old", "subnet-gone", &groups);
        assert_eq!(
            resource_drift(&n, &class()).as_deref(),
            Some(
                "AMI ami-old is no longer selected by EC2NodeClass default; \
                 subnet subnet-gone is no longer selected by EC2NodeClass default; \
                 security groups sg-9 differ from those EC2NodeClass default selects (sg-1, sg-2)"
            )
        );
    }

    #[test]
    fn what_is_unknown_on_either_side_never_drifts() {
        let none = LaunchedWith {
            node: "n1",
            arch: Some("amd64"),
            image: None,
            subnet: None,
            security_groups: &[],
            reservation: None,
        };
        assert_eq!(resource_drift(&none, &class()), None);
        let groups = sgs(&["sg-9"]);
        let n = node("ami-old", "subnet-gone", &groups);
        let nothing = Selection {
            node_class: "default",
            images: vec![],
            subnets: vec![],
            security_groups: vec![],
            reservations: vec![],
        };
        assert_eq!(resource_drift(&n, &nothing), None);
    }

    #[test]
    fn a_node_in_a_reservation_its_class_no_longer_selects_has_drifted() {
        let groups = sgs(&["sg-1", "sg-2"]);
        let selected = LaunchedWith {
            reservation: Some("cr-0aaaa"),
            ..node("ami-new-amd", "subnet-a", &groups)
        };
        assert_eq!(resource_drift(&selected, &class()), None);
        let dropped = LaunchedWith {
            reservation: Some("cr-0bbbb"),
            ..selected
        };
        assert_eq!(
            resource_drift(&dropped, &class()).as_deref(),
            Some("capacity reservation cr-0bbbb is no longer selected by EC2NodeClass default")
        );
        // A class that selects no reservation at all: the node has drifted too.
        let none = Selection {
            reservations: vec![],
            ..class()
        };
        assert!(resource_drift(&selected, &none).is_some());
    }

    #[test]
    fn only_drifted_nodes_are_returned_in_order() {
        let ok = sgs(&["sg-1", "sg-2"]);
        let c = class();
        let nodes = [
            LaunchedWith {
                node: "a",
                ..node("ami-old", "subnet-a", &ok)
            },
            LaunchedWith {
                node: "b",
                ..node("ami-new-amd", "subnet-a", &ok)
            },
            LaunchedWith {
                node: "c",
                ..node("ami-new-amd", "subnet-x", &ok)
            },
        ];
        let drifted: Vec<String> = external_drift(nodes.iter().map(|n| (*n, &c)))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(drifted, ["a", "c"]);
    }
}
