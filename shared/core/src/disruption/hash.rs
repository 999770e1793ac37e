//! Drift hashes: what a NodePool's template and an EC2NodeClass looked like when a node
//! was launched, written on the node (as Karpenter does) and compared later.
//!
//! The hash is FNV-1a 64 over a canonical encoding written here field by field (every
//! string length-prefixed, maps in key order, JSON objects with sorted keys), so it
//! depends neither on `HashMap` iteration order, nor on `Debug` output, nor on the Rust
//! version. Karpenter hashes with `hashstructure` and its own version string: its
//! hashes mean nothing to ours, so each node also carries the version of the scheme
//! that wrote its hash, and a hash is only ever compared when that version is ours.

use crate::api::model::{BlockDeviceMapping, Ec2NodeClass, NodePool, NodeRequirement, Taint};
use crate::cluster::Node;

/// nodewright's hash scheme. Karpenter writes "v3" and the like: never equal, so nodes
/// Karpenter launched are never found drifted by comparing its hash with ours. Bump it
/// when the encoding below changes (every node then reads as "not comparable", never
/// as drifted).
pub const HASH_VERSION: &str = "nodewright-v1";

/// The hash of the NodePool fields that shape a node: template labels, annotations,
/// taints, startup taints, requirements, nodeClassRef, expireAfter and
/// terminationGracePeriod. Not `disruption`, `limits` nor `weight`: changing those
/// changes no node.
pub fn nodepool_hash(pool: &NodePool) -> String {
    let mut e = Encoder::default();
    e.map("labels", pool.labels.iter());
    e.map("annotations", pool.annotations.iter());
    e.taints("taints", &pool.taints);
    e.taints("startupTaints", &pool.startup_taints);
    e.requirements(&pool.requirements);
    e.str("nodeClassRef.group", &pool.node_class_ref.group);
    e.str("nodeClassRef.kind", &pool.node_class_ref.kind);
    e.str("nodeClassRef.name", &pool.node_class_ref.name);
    e.opt_u64("expireAfter", pool.expire_after.map(|d| d.as_secs()));
    e.opt_u64(
        "terminationGracePeriod",
        pool.termination_grace_period.map(|d| d.as_secs()),
    );
    e.finish()
}

/// The hash of the EC2NodeClass fields that shape a launch: AMI family, role or
/// instance profile, user data, block devices, metadata options, tags, kubelet,
/// public IP and monitoring, and (when set) instance store policy, network interfaces,
/// CPU options, placement group selector, connection tracking and EBS volume
/// initialization rates. Not `ipPrefixCount`, which Karpenter's hash ignores too. Not the AMI, subnet and security group selector terms:
/// what they select is compared by the caller against what the node runs (external
/// drift), so a term rewritten to select the same things is no drift.
pub fn nodeclass_hash(class: &Ec2NodeClass) -> String {
    let mut e = Encoder::default();
    e.opt_str("amiFamily", class.ami_family.as_deref());
    e.opt_str("role", class.role.as_deref());
    e.opt_str("instanceProfile", class.instance_profile.as_deref());
    e.opt_str("userData", class.user_data.as_deref());
    e.block_devices(&class.block_device_mappings);
    let m = &class.metadata_options;
    e.str("metadataOptions.httpEndpoint", &m.http_endpoint);
    e.str("metadataOptions.httpProtocolIPv6", &m.http_protocol_ipv6);
    e.str(
        "metadataOptions.httpPutResponseHopLimit",
        &m.http_put_response_hop_limit.to_string(),
    );
    e.str("metadataOptions.httpTokens", &m.http_tokens);
    e.map("tags", class.tags.iter());
    // The kubelet object as written: every setting, not only those planning reads.
    let kubelet = class.kubelet.raw.as_ref().map(canonical_json);
    e.opt_str("kubelet", kubelet.as_deref());
    e.opt_str(
        "associatePublicIPAddress",
        class.associate_public_ip_address.map(bool_str),
    );
    e.str("detailedMonitoring", bool_str(class.detailed_monitoring));
    // Fields read later are encoded only when set, so a class that sets none of them
    // keeps the hash it had before. `ipPrefixCount` is left out, as Karpenter leaves it
    // out of its hash.
    e.launch_fields(class);
    e.finish()
}

/// Why `node` has drifted from `pool` or `class` by hash, or `None`: the hashes match,
/// or cannot be compared — the node carries no hash, or one written by another scheme
/// (`*_version` is the node's version annotation; a node Karpenter launched has
/// Karpenter's). A node without a class (`None`) is only checked against its pool.
pub fn hash_drift(
    pool: &NodePool,
    class: Option<&Ec2NodeClass>,
    node: &Node,
    nodepool_hash_version: Option<&str>,
    nodeclass_hash_version: Option<&str>,
) -> Option<String> {
    if nodepool_hash_version == Some(HASH_VERSION)
        && let Some(h) = node.nodepool_hash.as_deref()
    {
        let now = nodepool_hash(pool);
        if h != now {
            return Some(format!(
                "NodePool {:?} changed since the node was launched (hash {h} → {now})",
                pool.name
            ));
        }
    }
    if let Some(class) = class
        && nodeclass_hash_version == Some(HASH_VERSION)
        && let Some(h) = node.nodeclass_hash.as_deref()
    {
        let now = nodeclass_hash(class);
        if h != now {
            return Some(format!(
                "EC2NodeClass {:?} changed since the node was launched (hash {h} → {now})",
                class.name
            ));
        }
    }
    None
}

fn bool_str(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

/// JSON with object keys sorted and no whitespace, whatever order it was read in.
fn canonical_json(v: &serde_json::Value) -> String {
    use serde_json::Value;
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&m[k], out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

/// Feeds FNV-1a 64 with a self-delimiting encoding: `name`, then each value as its
/// length and bytes, so ("ab","c") and ("a","bc") differ.
struct Encoder {
    h: u64,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            h: 0xcbf2_9ce4_8422_2325,
        }
    }
}

impl Encoder {
    fn bytes(&mut self, b: &[u8]) {
        for x in (b.len() as u64).to_le_bytes().iter().chain(b) {
            self.h ^= u64::from(*x);
            self.h = self.h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn str(&mut self, name: &str, v: &str) {
        self.bytes(name.as_bytes());
        self.bytes(v.as_bytes());
    }
    fn opt_str(&mut self, name: &str, v: Option<&str>) {
        self.bytes(name.as_bytes());
        match v {
            None => self.bytes(b"\0none"),
            Some(v) => self.bytes(v.as_bytes()),
        }
    }
    fn opt_u64(&mut self, name: &str, v: Option<u64>) {
        self.opt_str(name, v.map(|v| v.to_string()).as_deref());
    }
    fn count(&mut self, name: &str, n: usize) {
        self.str(name, &n.to_string());
    }
    /// Maps are iterated in key order (BTreeMap), so the encoding is canonical.
    fn map<'a>(&mut self, name: &str, m: impl ExactSizeIterator<Item = (&'a String, &'a String)>) {
        self.count(name, m.len());
        for (k, v) in m {
            self.str(k, v);
        }
    }
    fn taints(&mut self, name: &str, taints: &[Taint]) {
        // Order is not meaning: a taint list reordered is the same node.
        let mut sorted: Vec<(&str, Option<&str>, &str)> = taints
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
            .collect();
        sorted.sort();
        self.count(name, sorted.len());
        for (k, v, effect) in sorted {
            self.str("key", k);
            self.opt_str("value", v);
            self.str("effect", effect);
        }
    }
    fn requirements(&mut self, reqs: &[NodeRequirement]) {
        let mut sorted: Vec<&NodeRequirement> = reqs.iter().collect();
        sorted.sort_by(|a, b| {
            (a.key.as_str(), a.operator.as_str()).cmp(&(b.key.as_str(), b.operator.as_str()))
        });
        self.count("requirements", sorted.len());
        for r in sorted {
            self.str("key", &r.key);
            self.str("operator", r.operator.as_str());
            let mut values: Vec<&str> = r.values.iter().map(String::as_str).collect();
            values.sort_unstable();
            self.count("values", values.len());
            for v in values {
                self.bytes(v.as_bytes());
            }
            self.opt_u64("minValues", r.min_values.map(u64::from));
        }
    }
    fn block_devices(&mut self, bdms: &[BlockDeviceMapping]) {
        self.count("blockDeviceMappings", bdms.len());
        for b in bdms {
            self.str("deviceName", &b.device_name);
            self.str("rootVolume", bool_str(b.root_volume));
            let Some(ebs) = &b.ebs else {
                self.bytes(b"\0noebs");
                continue;
            };
            self.opt_str("volumeSize", ebs.volume_size.as_deref());
            self.opt_str("volumeType", ebs.volume_type.as_deref());
            self.opt_u64("iops", ebs.iops.map(|v| v as u64));
            self.opt_u64("throughput", ebs.throughput.map(|v| v as u64));
            self.opt_str("encrypted", ebs.encrypted.map(bool_str));
            self.opt_str("kmsKeyID", ebs.kms_key_id.as_deref());
            self.opt_str(
                "deleteOnTermination",
                ebs.delete_on_termination.map(bool_str),
            );
            self.opt_str("snapshotID", ebs.snapshot_id.as_deref());
        }
    }
    fn launch_fields(&mut self, class: &Ec2NodeClass) {
        use crate::api::model::{InstanceStorePolicy, PlacementGroupSelector};
        if let Some(InstanceStorePolicy::Raid0) = class.instance_store_policy {
            self.str("instanceStorePolicy", "RAID0");
        }
        if !class.network_interfaces.is_empty() {
            // A set: the order they are written in is not meaning.
            let mut interfaces: Vec<(i32, i32, &str)> = class
                .network_interfaces
                .iter()
                .map(|n| {
                    (
                        n.network_card_index,
                        n.device_index,
                        n.interface_type.as_str(),
                    )
                })
                .collect();
            interfaces.sort_unstable();
            self.count("networkInterfaces", interfaces.len());
            for (card, device, kind) in interfaces {
                self.str("networkCardIndex", &card.to_string());
                self.str("deviceIndex", &device.to_string());
                self.str("interfaceType", kind);
            }
        }
        if let Some(cpu) = &class.cpu_options {
            self.opt_str(
                "cpuOptions.nestedVirtualization",
                cpu.nested_virtualization
                    .map(|on| if on { "enabled" } else { "disabled" }),
            );
        }
        match &class.placement_group_selector {
            Some(PlacementGroupSelector::Id(id)) => self.str("placementGroupSelector.id", id),
            Some(PlacementGroupSelector::Name(name)) => {
                self.str("placementGroupSelector.name", name)
            }
            None => {}
        }
        if let Some(ct) = &class.connection_tracking {
            let n = |v: Option<i32>| v.map(|v| v.to_string());
            self.opt_str(
                "connectionTracking.tcpEstablishedTimeout",
                n(ct.tcp_established_timeout).as_deref(),
            );
            self.opt_str(
                "connectionTracking.udpStreamTimeout",
                n(ct.udp_stream_timeout).as_deref(),
            );
            self.opt_str(
                "connectionTracking.udpTimeout",
                n(ct.udp_timeout).as_deref(),
            );
        }
        for (i, b) in class.block_device_mappings.iter().enumerate() {
            if let Some(rate) = b.ebs.as_ref().and_then(|e| e.volume_initialization_rate) {
                self.str(
                    &format!("blockDeviceMappings[{i}].ebs.volumeInitializationRate"),
                    &rate.to_string(),
                );
            }
        }
    }
    /// 16 lowercase hex digits.
    fn finish(self) -> String {
        format!("{:016x}", self.h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    use crate::api::model::{MetadataOptions, SelectorTerm, TaintEffect};
    use std::collections::BTreeMap;

    fn pool() -> NodePool {
        testing::node_pool("default", vec![])
    }

    fn taint(key: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: None,
            effect,
        }
    }

    fn class() -> Ec2NodeClass {
        Ec2NodeClass {
            name: "default".into(),
            ami_selector_terms: vec![],
            ami_family: Some("AL2023".into()),
            subnet_selector_terms: vec![SelectorTerm::Id("subnet-1".into())],
            security_group_selector_terms: vec![SelectorTerm::Id("sg-1".into())],
            role: Some("KarpenterNodeRole".into()),
            instance_profile: None,
            status_instance_profile: None,
            user_data: None,
            block_device_mappings: vec![],
            metadata_options: MetadataOptions::default(),
            tags: BTreeMap::new(),
            kubelet: Default::default(),
            associate_public_ip_address: None,
            detailed_monitoring: false,
            instance_store_policy: None,
            network_interfaces: vec![],
            cpu_options: None,
            placement_group_selector: None,
            ip_prefix_count: None,
            connection_tracking: None,
            capacity_reservation_selector_terms: vec![],
        }
    }

    /// `class()` with a block device, so the EBS encoding is pinned too.
    fn class_with_volume() -> Ec2NodeClass {
        let mut c = class();
        c.block_device_mappings = vec![BlockDeviceMapping {
            device_name: "/dev/xvda".into(),
            ebs: Some(crate::api::model::BlockDevice {
                volume_size: Some("100Gi".into()),
                volume_type: Some("gp3".into()),
                iops: None,
                throughput: None,
                encrypted: Some(true),
                kms_key_id: None,
                delete_on_termination: None,
                snapshot_id: Some("snap-0123abcd".into()),
                volume_initialization_rate: None,
            }),
            root_volume: true,
        }];
        c
    }

    #[test]
    fn a_class_without_the_launch_fields_hashes_as_before_they_existed() {
        // Pinned before instanceStorePolicy, networkInterfaces, cpuOptions,
        // placementGroupSelector, connectionTracking and volumeInitializationRate were
        // read: nodes launched then are not drifted by the upgrade.
        assert_eq!(nodeclass_hash(&class()), "2b4e25d815d10147");
        assert_eq!(nodeclass_hash(&class_with_volume()), "3086ce2900bc8271");
    }

    #[test]
    fn each_launch_field_changes_the_nodeclass_hash_except_ip_prefix_count() {
        use crate::api::model::{
            ConnectionTracking, CpuOptions, InstanceStorePolicy, InterfaceType, NetworkInterface,
            PlacementGroupSelector,
        };
        let base = class_with_volume();
        let h = nodeclass_hash(&base);
        let primary = NetworkInterface {
            network_card_index: 0,
            device_index: 0,
            interface_type: InterfaceType::Interface,
        };
        type Change = Box<dyn Fn(&mut Ec2NodeClass)>;
        let changes: Vec<(&str, Change)> = vec![
            (
                "instanceStorePolicy",
                Box::new(|c| c.instance_store_policy = Some(InstanceStorePolicy::Raid0)),
            ),
            (
                "networkInterfaces",
                Box::new(move |c| c.network_interfaces = vec![primary.clone()]),
            ),
            (
                "cpuOptions",
                Box::new(|c| {
                    c.cpu_options = Some(CpuOptions {
                        nested_virtualization: Some(true),
                    })
                }),
            ),
            (
                "placementGroupSelector",
                Box::new(|c| {
                    c.placement_group_selector = Some(PlacementGroupSelector::Name("pg".into()))
                }),
            ),
            (
                "connectionTracking",
                Box::new(|c| {
                    c.connection_tracking = Some(ConnectionTracking {
                        udp_timeout: Some(30),
                        ..ConnectionTracking::default()
                    })
                }),
            ),
            (
                "volumeInitializationRate",
                Box::new(|c| {
                    if let Some(ebs) = c.block_device_mappings[0].ebs.as_mut() {
                        ebs.volume_initialization_rate = Some(200);
                    }
                }),
            ),
        ];
        for (field, change) in &changes {
            let mut c = base.clone();
            change(&mut c);
            assert_ne!(nodeclass_hash(&c), h, "{field}");
        }
        // Karpenter's struct tag leaves ipPrefixCount out of the hash (`hash:"ignore"`).
        let mut c = base.clone();
        c.ip_prefix_count = Some(4);
        assert_eq!(nodeclass_hash(&c), h);
        // Interfaces are a set, as Karpenter hashes slices.
        let efa = NetworkInterface {
            network_card_index: 1,
            device_index: 0,
            interface_type: InterfaceType::EfaOnly,
        };
        let mut a = base.clone();
        a.network_interfaces = vec![
            NetworkInterface {
                network_card_index: 0,
                device_index: 0,
                interface_type: InterfaceType::Interface,
            },
            efa.clone(),
        ];
        let mut b = a.clone();
        b.network_interfaces.reverse();
        assert_eq!(nodeclass_hash(&a), nodeclass_hash(&b));
    }

    #[test]
    fn the_nodepool_hash_is_pinned_so_a_new_rust_or_refactor_cannot_drift_every_node() {
        // If this changes, bump HASH_VERSION: every node launched before would
        // otherwise read as drifted.
        let h = nodepool_hash(&pool());
        assert_eq!(h.len(), 16);
        assert_eq!(h, nodepool_hash(&pool()));
        assert_eq!(h, PINNED_DEFAULT_POOL_HASH, "got {h}");
    }

    const PINNED_DEFAULT_POOL_HASH: &str = "7271df6171be70a1";

    #[test]
    fn disruption_limits_and_weight_do_not_change_the_nodepool_hash_but_labels_do() {
        let base = nodepool_hash(&pool());
        let mut p = pool();
        p.weight = 50;
        p.limits = None;
        p.disruption.budgets.clear();
        p.disruption.consolidate_after = None;
        assert_eq!(nodepool_hash(&p), base);
        p.labels.insert("team".into(), "a".into());
        assert_ne!(nodepool_hash(&p), base);
    }

    #[test]
    fn the_order_taints_and_requirements_are_written_in_does_not_matter() {
        let mut a = pool();
        a.taints = vec![
            taint("a", TaintEffect::NoSchedule),
            taint("b", TaintEffect::NoExecute),
        ];
        let mut b = a.clone();
        a.requirements.push(testing::req(
            "team",
            crate::api::model::Operator::In,
            &["a", "b"],
        ));
        b.requirements.insert(
            0,
            testing::req("team", crate::api::model::Operator::In, &["b", "a"]),
        );
        b.taints.reverse();
        assert_eq!(nodepool_hash(&a), nodepool_hash(&b));
    }

    #[test]
    fn selector_terms_do_not_change_the_nodeclass_hash_but_user_data_does() {
        let c = class();
        let base = nodeclass_hash(&c);
        let mut d = c.clone();
        d.subnet_selector_terms.clear();
        d.ami_selector_terms.clear();
        assert_eq!(nodeclass_hash(&d), base);
        d.user_data = Some("#!/bin/bash\necho hi".into());
        assert_ne!(nodeclass_hash(&d), base);
    }

    #[test]
    fn kubelet_json_key_order_does_not_change_the_nodeclass_hash() {
        let mut a = class();
        a.kubelet.raw = Some(serde_json::json!({"maxPods": 20, "clusterDNS": ["10.0.0.10"]}));
        let mut b = a.clone();
        b.kubelet.raw =
            Some(serde_json::from_str(r#"{"clusterDNS":["10.0.0.10"],"maxPods":20}"#).unwrap());
        assert_eq!(nodeclass_hash(&a), nodeclass_hash(&b));
    }

    fn node_with(pool_hash: &str, class_hash: &str) -> Node {
        Node {
            nodepool_hash: Some(pool_hash.into()),
            nodeclass_hash: Some(class_hash.into()),
            ..Node::default()
        }
    }

    #[test]
    fn a_node_is_drifted_only_when_its_hash_is_ours_and_differs() {
        let p = pool();
        let c = class();
        let same = node_with(&nodepool_hash(&p), &nodeclass_hash(&c));
        let v = Some(HASH_VERSION);
        assert_eq!(hash_drift(&p, Some(&c), &same, v, v), None);

        let mut changed = p.clone();
        changed.labels.insert("team".into(), "b".into());
        let why = hash_drift(&changed, Some(&c), &same, v, v).unwrap();
        assert!(why.contains("NodePool \"default\""), "{why}");

        // Karpenter's hash of the same pool is another number under another version:
        // never compared.
        let karpenters = node_with("1234567890", "987654321");
        assert_eq!(
            hash_drift(&p, Some(&c), &karpenters, Some("v3"), Some("v3")),
            None
        );
        assert_eq!(hash_drift(&p, Some(&c), &karpenters, None, None), None);

        let mut class2 = c.clone();
        class2.tags.insert("cost-centre".into(), "42".into());
        let why = hash_drift(&p, Some(&class2), &same, v, v).unwrap();
        assert!(why.contains("EC2NodeClass"), "{why}");
    }
}
