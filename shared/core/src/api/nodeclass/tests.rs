//! EC2NodeClass rules: AMI terms and aliases, roles and instance profiles, selector
//! terms, block devices, metadata options, tags, and kubelet settings.

use super::super::validate::testing::{CLASS, problems, valid};
use super::*;

/// The shared valid class with `from` replaced by `to`.
fn class_with(from: &str, to: &str) -> String {
    assert!(CLASS.contains(from), "{from:?} not in CLASS");
    CLASS.replacen(from, to, 1)
}

const ALIAS: &str = "  amiSelectorTerms:\n    - alias: al2023@latest\n";
const ROLE: &str = "  role: \"KarpenterNodeRole-${CLUSTER_NAME}\"\n";

#[test]
fn an_alias_with_another_term_is_refused() {
    let text = class_with(
        ALIAS,
        "  amiSelectorTerms:\n    - alias: al2023@latest\n    - id: ami-0123abcd\n",
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"EC2NodeClass "default": spec.amiSelectorTerms: an alias term must be the only term"#
        ]
    );
}

#[test]
fn neither_role_nor_instance_profile_is_refused() {
    assert_eq!(
        problems(&class_with(ROLE, "")),
        vec![
            r#"EC2NodeClass "default": spec: expected one of role or instanceProfile, got neither"#
        ]
    );
    assert_eq!(
        problems(&class_with(ROLE, "  role: r\n  instanceProfile: p\n")),
        vec![r#"EC2NodeClass "default": spec: expected one of role or instanceProfile, got both"#]
    );
}

#[test]
fn an_instance_profile_alone_is_enough() {
    let class = valid(&class_with(
        ROLE,
        "  instanceProfile: KarpenterNodeInstanceProfile\n",
    ))
    .node_classes
    .remove(0);
    assert_eq!(class.role, None);
    assert_eq!(
        class.instance_profile.as_deref(),
        Some("KarpenterNodeInstanceProfile")
    );
}

#[test]
fn the_instance_profile_the_status_records_is_kept_beside_the_role() {
    let text = format!("{CLASS}status:\n  instanceProfile: prod_8234567\n");
    let class = valid(&text).node_classes.remove(0);
    assert!(class.role.is_some());
    assert_eq!(class.instance_profile, None);
    assert_eq!(
        class.status_instance_profile.as_deref(),
        Some("prod_8234567")
    );
    let without = valid(CLASS).node_classes.remove(0);
    assert_eq!(without.status_instance_profile, None);
}

#[test]
fn an_alias_implies_the_ami_family_and_defaults_apply() {
    let class = valid(CLASS).node_classes.remove(0);
    assert_eq!(
        class.ami_selector_terms,
        vec![AmiSelectorTerm::Alias {
            family: "al2023".into(),
            version: "latest".into()
        }]
    );
    assert_eq!(class.ami_family.as_deref(), Some("AL2023"));
    assert_eq!(class.metadata_options, MetadataOptions::default());
    assert!(!class.detailed_monitoring);
    assert_eq!(class.associate_public_ip_address, None);
    assert_eq!(class.kubelet, Kubelet::default());
    assert_eq!(
        class.subnet_selector_terms,
        vec![SelectorTerm::Tags(
            [(
                "karpenter.sh/discovery".to_string(),
                "${CLUSTER_NAME}".to_string()
            )]
            .into()
        )]
    );
}

#[test]
fn bad_aliases_are_explained() {
    let cases = [
        (
            "ubuntu@latest",
            r#"unknown family "ubuntu" (expected one of al2, al2023, bottlerocket, windows2019, windows2022)"#,
        ),
        (
            "al2023",
            r#"expected family@version such as "al2023@latest", got "al2023""#,
        ),
        (
            "al2023@20240625",
            r#"expected version "latest" or a version like "v20240625", got "20240625""#,
        ),
        (
            "windows2022@v1",
            r#"expected version "latest" (Windows aliases cannot be pinned), got "v1""#,
        ),
    ];
    for (alias, message) in cases {
        let text = class_with("alias: al2023@latest", &format!("alias: \"{alias}\""));
        assert_eq!(
            problems(&text),
            vec![format!(
                "EC2NodeClass \"default\": spec.amiSelectorTerms[0].alias: {message}"
            )],
            "{alias}"
        );
    }
    let pinned = valid(&class_with("al2023@latest", "bottlerocket@v1.20.0"))
        .node_classes
        .remove(0);
    assert_eq!(pinned.ami_family.as_deref(), Some("Bottlerocket"));
}

#[test]
fn ami_family_is_required_without_an_alias_and_must_agree_with_one() {
    let by_id = "  amiSelectorTerms:\n    - id: ami-0123abcd\n";
    assert_eq!(
        problems(&class_with(ALIAS, by_id)),
        vec![
            r#"EC2NodeClass "default": spec.amiFamily: required unless amiSelectorTerms uses an alias"#
        ]
    );
    let custom = valid(&class_with(ALIAS, &format!("{by_id}  amiFamily: Custom\n")))
        .node_classes
        .remove(0);
    assert_eq!(custom.ami_family.as_deref(), Some("Custom"));
    assert_eq!(
        problems(&class_with(
            ALIAS,
            &format!("{ALIAS}  amiFamily: Bottlerocket\n")
        )),
        vec![
            r#"EC2NodeClass "default": spec.amiFamily: must be "AL2023" (from the alias) or "Custom", got "Bottlerocket""#
        ]
    );
}

#[test]
fn each_ami_term_selects_exactly_one_way() {
    let terms = "  amiSelectorTerms:\n    - name: my-ami-*\n      owner: self\n    - tags: {team: web}\n    - ssmParameter: /my/ami\n    - id: ami-1\n      name: x\n    - owner: self\n  amiFamily: AL2023\n";
    assert_eq!(
        problems(&class_with(ALIAS, terms)),
        vec![
            r#"EC2NodeClass "default": spec.amiSelectorTerms[3]: expected exactly one of alias, id, name, tags, ssmParameter, got id and name"#,
            r#"EC2NodeClass "default": spec.amiSelectorTerms[4]: expected exactly one of alias, id, name, tags, ssmParameter, got none"#,
        ]
    );
    assert_eq!(
        problems(&class_with(ALIAS, "  amiSelectorTerms: []\n")),
        vec![r#"EC2NodeClass "default": spec.amiSelectorTerms: expected 1 to 30 terms, got 0"#]
    );
}

#[test]
fn subnet_and_security_group_terms_are_checked() {
    let text = CLASS
        .replacen(
            "    - tags:\n        karpenter.sh/discovery: \"${CLUSTER_NAME}\"\n",
            "    - name: private\n    - id: vpc-123\n    - tags: {}\n",
            1,
        )
        .replacen(
            "    - tags:\n        karpenter.sh/discovery: \"${CLUSTER_NAME}\"\n",
            "    - name: nodes\n    - id: sg-0abc\n",
            1,
        );
    assert_eq!(
        problems(&text),
        vec![
            r#"EC2NodeClass "default": spec.subnetSelectorTerms[0]: expected exactly one of id, tags, got name"#,
            r#"EC2NodeClass "default": spec.subnetSelectorTerms[1].id: expected an id like "subnet-0123abcd", got "vpc-123""#,
            r#"EC2NodeClass "default": spec.subnetSelectorTerms[2].tags: at least one tag is required"#,
        ]
    );
    assert_eq!(
        problems(&class_with(
            "  securityGroupSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: \"${CLUSTER_NAME}\"\n",
            ""
        )),
        vec![r#"EC2NodeClass "default": spec.securityGroupSelectorTerms: required"#]
    );
}

#[test]
fn block_device_mappings_are_read_and_checked() {
    let good = "  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      rootVolume: true\n      ebs:\n        volumeSize: 100Gi\n        volumeType: gp3\n        iops: 3000\n        encrypted: true\n        kmsKeyID: key\n        deleteOnTermination: true\n";
    let class = valid(&format!("{CLASS}{good}")).node_classes.remove(0);
    let bdm = &class.block_device_mappings[0];
    assert!(bdm.root_volume);
    let ebs = bdm.ebs.clone().unwrap_or_else(|| panic!("ebs"));
    assert_eq!(ebs.volume_size.as_deref(), Some("100Gi"));
    assert_eq!(ebs.kms_key_id.as_deref(), Some("key"));
    assert_eq!(ebs.iops, Some(3000));

    let bad = "  blockDeviceMappings:\n    - rootVolume: true\n    - deviceName: /dev/xvdb\n      rootVolume: true\n      ebs:\n        volumeSize: 20GB\n        volumeType: gp9\n    - deviceName: /dev/xvdc\n      rootVolume: true\n";
    assert_eq!(
        problems(&format!("{CLASS}{bad}")),
        vec![
            r#"EC2NodeClass "default": spec.blockDeviceMappings[0].deviceName: required"#,
            r#"EC2NodeClass "default": spec.blockDeviceMappings[1].ebs.volumeSize: quantity "20GB" is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)"#,
            r#"EC2NodeClass "default": spec.blockDeviceMappings[1].ebs.volumeType: unknown volume type "gp9" (expected one of standard, io1, io2, gp2, sc1, st1, gp3)"#,
            r#"EC2NodeClass "default": spec.blockDeviceMappings: at most one mapping may have rootVolume: true, got 2"#,
        ]
    );
}

#[test]
fn metadata_options_fill_in_defaults_and_refuse_unknown_values() {
    let partial = valid(&format!(
        "{CLASS}  metadataOptions:\n    httpPutResponseHopLimit: 2\n"
    ))
    .node_classes
    .remove(0);
    assert_eq!(
        partial.metadata_options,
        MetadataOptions {
            http_put_response_hop_limit: 2,
            ..MetadataOptions::default()
        }
    );
    let bad = format!(
        "{CLASS}  metadataOptions:\n    httpTokens: sometimes\n    httpPutResponseHopLimit: 65\n"
    );
    assert_eq!(
        problems(&bad),
        vec![
            r#"EC2NodeClass "default": spec.metadataOptions.httpTokens: expected "required" or "optional", got "sometimes""#,
            r#"EC2NodeClass "default": spec.metadataOptions.httpPutResponseHopLimit: must be between 1 and 64, got 65"#,
        ]
    );
}

#[test]
fn karpenter_owned_tags_are_refused() {
    let text = format!(
        "{CLASS}  tags:\n    team: web\n    kubernetes.io/cluster/prod: owned\n    karpenter.sh/nodepool: x\n"
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"EC2NodeClass "default": spec.tags.karpenter.sh/nodepool: tag "karpenter.sh/nodepool" is restricted (Karpenter sets it)"#,
            r#"EC2NodeClass "default": spec.tags.kubernetes.io/cluster/prod: tag "kubernetes.io/cluster/prod" is restricted (Karpenter sets it)"#,
        ]
    );
}

#[test]
fn kubelet_settings_are_read_and_the_whole_object_kept() {
    let text = format!(
        "{CLASS}  kubelet:\n    maxPods: 110\n    podsPerCore: 2\n    clusterDNS: [\"10.0.0.10\"]\n    systemReserved:\n      cpu: 100m\n  userData: |\n    echo hi\n  associatePublicIPAddress: false\n  detailedMonitoring: true\n"
    );
    let class = valid(&text).node_classes.remove(0);
    assert_eq!(class.kubelet.max_pods, Some(110));
    assert_eq!(class.kubelet.pods_per_core, Some(2));
    assert_eq!(class.kubelet.cluster_dns, vec!["10.0.0.10".to_string()]);
    let raw = class.kubelet.raw.unwrap_or_default();
    assert_eq!(
        raw.pointer("/systemReserved/cpu").and_then(|v| v.as_str()),
        Some("100m")
    );
    assert_eq!(class.user_data.as_deref(), Some("echo hi\n"));
    assert_eq!(class.associate_public_ip_address, Some(false));
    assert!(class.detailed_monitoring);
}

#[test]
fn kubelet_density_settings_are_read_as_quantities_and_thresholds() {
    let text = format!(
        "{CLASS}  kubelet:\n    kubeReserved: {{cpu: 200m, memory: 1Gi}}\n    systemReserved: {{ephemeral-storage: 2Gi}}\n    evictionHard: {{memory.available: 5%, nodefs.available: 1Gi}}\n    evictionSoft: {{memory.available: 10%}}\n    evictionSoftGracePeriod: {{memory.available: 1m30s}}\n"
    );
    let kubelet = valid(&text).node_classes.remove(0).kubelet;
    assert_eq!(
        kubelet.kube_reserved,
        BTreeMap::from([
            ("cpu".to_string(), 200),
            ("memory".to_string(), (1i64 << 30) * 1000)
        ])
    );
    assert_eq!(
        kubelet.system_reserved,
        BTreeMap::from([("ephemeral-storage".to_string(), (2i64 << 30) * 1000)])
    );
    assert_eq!(
        kubelet.eviction_hard,
        BTreeMap::from([
            (
                "memory.available".to_string(),
                EvictionThreshold::Percent(5.0)
            ),
            (
                "nodefs.available".to_string(),
                EvictionThreshold::Quantity((1i64 << 30) * 1000)
            ),
        ])
    );
    assert!(!kubelet.is_default_density());
}

#[test]
fn bad_kubelet_density_settings_name_the_field() {
    let text = format!(
        "{CLASS}  kubelet:\n    maxPods: 3000000000\n    kubeReserved: {{gpu: \"1\", memory: \"-1Gi\"}}\n    systemReserved: {{cpu: lots}}\n    evictionHard: {{memory.available: 120%, disk.available: 1Gi}}\n    evictionSoft: {{nodefs.available: 10%}}\n    evictionSoftGracePeriod: {{memory.available: soon}}\n"
    );
    assert_eq!(
        problems(&text),
        vec![
            r#"EC2NodeClass "default": spec.kubelet.maxPods: must be at most 2147483647, got 3000000000"#,
            r#"EC2NodeClass "default": spec.kubelet.kubeReserved.gpu: "gpu" cannot be reserved (expected one of cpu, memory, ephemeral-storage, pid)"#,
            r#"EC2NodeClass "default": spec.kubelet.kubeReserved.memory: must not be negative, got "-1Gi""#,
            r#"EC2NodeClass "default": spec.kubelet.systemReserved.cpu: "lots" is neither a quantity (quantity "lots" is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)) nor an expression (reads "lots", which is not a variable (expected one of vcpus, memory_mib, default_enis, ips_per_eni, max_pods, instance_type))"#,
            r#"EC2NodeClass "default": spec.kubelet.evictionHard.disk.available: unknown eviction signal "disk.available" (expected one of memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available)"#,
            r#"EC2NodeClass "default": spec.kubelet.evictionHard.memory.available: expected a percentage from 0% to 100% or a non-negative quantity such as 500Mi, got "120%""#,
            r#"EC2NodeClass "default": spec.kubelet.evictionSoftGracePeriod.memory.available: expected a non-negative duration such as "30s" or "1m30s", got "soon""#,
            r#"EC2NodeClass "default": spec.kubelet.evictionSoftGracePeriod.memory.available: has no matching evictionSoft threshold"#,
            r#"EC2NodeClass "default": spec.kubelet.evictionSoft.nodefs.available: has no matching evictionSoftGracePeriod"#,
        ]
    );
    // The kubelet's maps hold strings: a bare number is refused, as Karpenter does.
    assert_eq!(
        problems(&format!(
            "{CLASS}  kubelet:\n    kubeReserved: {{cpu: 1}}\n"
        )),
        vec![
            r#"EC2NodeClass "default": spec.kubelet.kubeReserved.cpu: invalid type: integer `1`, expected a string"#
        ]
    );
}

#[test]
fn kubelet_expressions_are_read_and_bad_ones_name_the_field() {
    let text = format!(
        "{CLASS}  kubelet:\n    maxPods: \"min(110, vcpus * 8)\"\n    kubeReserved: {{cpu: \"vcpus * 30\", memory: 1Gi}}\n    systemReserved: {{memory: \"max_pods * 11\"}}\n"
    );
    let kubelet = crate::api::load(&[("class.yaml".to_string(), text)])
        .unwrap_or_else(|e| panic!("{e:?}"))
        .node_classes
        .remove(0)
        .kubelet;
    assert_eq!(kubelet.max_pods, None);
    assert_eq!(
        kubelet.max_pods_expression.as_deref(),
        Some("min(110, vcpus * 8)")
    );
    assert_eq!(
        kubelet.kube_reserved,
        BTreeMap::from([("memory".to_string(), (1i64 << 30) * 1000)])
    );
    assert_eq!(
        kubelet.kube_reserved_expressions,
        BTreeMap::from([("cpu".to_string(), "vcpus * 30".to_string())])
    );
    assert_eq!(
        kubelet.system_reserved_expressions,
        BTreeMap::from([("memory".to_string(), "max_pods * 11".to_string())])
    );
    assert!(kubelet.has_expressions() && !kubelet.is_default_density());

    let bad = format!(
        "{CLASS}  kubelet:\n    maxPods: \"vcpus * 1.5\"\n    kubeReserved: {{cpu: \"cores * 30\"}}\n"
    );
    assert_eq!(
        problems(&bad),
        vec![
            r#"EC2NodeClass "default": spec.kubelet.maxPods: "vcpus * 1.5": cannot be evaluated: Unsupported binary operator 'mul': Int(2), Float(1.5)"#,
            r#"EC2NodeClass "default": spec.kubelet.kubeReserved.cpu: "cores * 30" is neither a quantity (quantity "cores * 30" is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)) nor an expression (reads "cores", which is not a variable (expected one of vcpus, memory_mib, default_enis, ips_per_eni, max_pods, instance_type))"#,
        ]
    );
}

#[test]
fn grace_periods_take_go_durations() {
    for ok in ["0", "30s", "1m30s", "1.5h", "300ms", "2h45m0.5s", "10us"] {
        assert!(is_go_duration(ok), "{ok}");
    }
    for bad in ["", "-1s", "1", "1d", "m", "1.s5", "soon"] {
        assert!(!is_go_duration(bad), "{bad}");
    }
}

#[test]
fn a_kubelet_field_of_the_wrong_type_names_the_path() {
    assert_eq!(
        problems(&format!("{CLASS}  kubelet:\n    maxPods: 1.5\n")),
        vec![
            r#"EC2NodeClass "default": spec.kubelet.maxPods: invalid type: floating point `1.5`, expected an integer or a string expression"#
        ]
    );
}

/// The one problem `extra` (appended to the shared valid class's spec) causes.
fn only_problem(extra: &str) -> String {
    let found = problems(&format!("{CLASS}{extra}"));
    assert_eq!(found.len(), 1, "{extra:?}: {found:?}");
    found[0]
        .strip_prefix(r#"EC2NodeClass "default": "#)
        .unwrap_or_else(|| panic!("{found:?}"))
        .to_string()
}

#[test]
fn the_launch_fields_are_read_when_valid() {
    let extra = "  instanceStorePolicy: RAID0\n  ipPrefixCount: 2\n  cpuOptions:\n    nestedVirtualization: enabled\n  placementGroupSelector:\n    name: my-cluster-pg\n  connectionTracking:\n    tcpEstablishedTimeout: 432000\n    udpStreamTimeout: 60\n    udpTimeout: 30\n  networkInterfaces:\n    - networkCardIndex: 0\n      deviceIndex: 0\n      interfaceType: interface\n    - networkCardIndex: 1\n      deviceIndex: 1\n      interfaceType: efa-only\n    - networkCardIndex: 1\n      deviceIndex: 0\n      interfaceType: interface\n  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      ebs:\n        snapshotID: snap-0123abcd\n        volumeInitializationRate: 300\n";
    let class = valid(&format!("{CLASS}{extra}")).node_classes.remove(0);
    assert_eq!(
        class.instance_store_policy,
        Some(InstanceStorePolicy::Raid0)
    );
    assert_eq!(class.ip_prefix_count, Some(2));
    assert_eq!(
        class.cpu_options,
        Some(CpuOptions {
            nested_virtualization: Some(true)
        })
    );
    assert_eq!(
        class.placement_group_selector,
        Some(PlacementGroupSelector::Name("my-cluster-pg".into()))
    );
    assert_eq!(
        class.connection_tracking,
        Some(ConnectionTracking {
            tcp_established_timeout: Some(432_000),
            udp_stream_timeout: Some(60),
            udp_timeout: Some(30),
        })
    );
    assert_eq!(
        class.network_interfaces,
        vec![
            NetworkInterface {
                network_card_index: 0,
                device_index: 0,
                interface_type: InterfaceType::Interface
            },
            NetworkInterface {
                network_card_index: 1,
                device_index: 1,
                interface_type: InterfaceType::EfaOnly
            },
            NetworkInterface {
                network_card_index: 1,
                device_index: 0,
                interface_type: InterfaceType::Interface
            },
        ]
    );
    let ebs = class.block_device_mappings[0].ebs.clone().unwrap();
    assert_eq!(ebs.volume_initialization_rate, Some(300));

    let by_id = valid(&format!(
        "{CLASS}  placementGroupSelector:\n    id: pg-0123abcd\n  cpuOptions:\n    nestedVirtualization: disabled\n"
    ))
    .node_classes
    .remove(0);
    assert_eq!(
        by_id.placement_group_selector,
        Some(PlacementGroupSelector::Id("pg-0123abcd".into()))
    );
    assert_eq!(
        by_id.cpu_options.unwrap().nested_virtualization,
        Some(false)
    );

    // None of them set: nothing changes.
    let plain = valid(CLASS).node_classes.remove(0);
    assert_eq!(plain.instance_store_policy, None);
    assert!(plain.network_interfaces.is_empty());
    assert_eq!(plain.cpu_options, None);
    assert_eq!(plain.placement_group_selector, None);
    assert_eq!(plain.ip_prefix_count, None);
    assert_eq!(plain.connection_tracking, None);
}

#[test]
fn an_instance_store_policy_other_than_raid0_is_refused() {
    assert_eq!(
        only_problem("  instanceStorePolicy: RAID1\n"),
        r#"spec.instanceStorePolicy: unknown policy "RAID1" (expected "RAID0")"#
    );
}

#[test]
fn ip_prefix_count_must_not_be_negative() {
    assert_eq!(
        only_problem("  ipPrefixCount: -1\n"),
        "spec.ipPrefixCount: must be at least 0, got -1"
    );
    assert_eq!(
        only_problem("  ipPrefixCount: 3000000000\n"),
        "spec.ipPrefixCount: must be at most 2147483647, got 3000000000"
    );
    let zero = valid(&format!("{CLASS}  ipPrefixCount: 0\n"))
        .node_classes
        .remove(0);
    assert_eq!(zero.ip_prefix_count, Some(0));
}

#[test]
fn nested_virtualization_is_enabled_or_disabled() {
    assert_eq!(
        only_problem("  cpuOptions:\n    nestedVirtualization: on\n"),
        r#"spec.cpuOptions.nestedVirtualization: expected "enabled" or "disabled", got "on""#
    );
}

#[test]
fn a_placement_group_is_selected_by_exactly_one_of_id_and_name() {
    assert_eq!(
        only_problem("  placementGroupSelector:\n    id: pg-0123abcd\n    name: pg\n"),
        "spec.placementGroupSelector: expected exactly one of id and name, got both"
    );
    assert_eq!(
        only_problem("  placementGroupSelector: {}\n"),
        "spec.placementGroupSelector: expected exactly one of id and name, got none"
    );
    assert_eq!(
        only_problem("  placementGroupSelector:\n    id: sg-0123abcd\n"),
        r#"spec.placementGroupSelector.id: expected an id like "pg-0123abcd", got "sg-0123abcd""#
    );
    assert_eq!(
        only_problem("  placementGroupSelector:\n    name: \"\"\n"),
        "spec.placementGroupSelector.name: must not be empty"
    );
}

#[test]
fn connection_tracking_sets_a_timeout_within_its_range() {
    assert_eq!(
        only_problem("  connectionTracking: {}\n"),
        "spec.connectionTracking: at least one of tcpEstablishedTimeout, udpStreamTimeout and udpTimeout must be set"
    );
    for (field, bad, range) in [
        ("tcpEstablishedTimeout", 59, "between 60 and 432000"),
        ("tcpEstablishedTimeout", 432_001, "between 60 and 432000"),
        ("udpStreamTimeout", 181, "between 60 and 180"),
        ("udpStreamTimeout", 59, "between 60 and 180"),
        ("udpTimeout", 29, "between 30 and 60"),
        ("udpTimeout", 61, "between 30 and 60"),
    ] {
        assert_eq!(
            only_problem(&format!("  connectionTracking:\n    {field}: {bad}\n")),
            format!("spec.connectionTracking.{field}: must be {range}, got {bad}")
        );
    }
}

#[test]
fn network_interfaces_follow_karpenters_rules() {
    let entry = |card: i64, device: i64, kind: &str| {
        format!(
            "    - networkCardIndex: {card}\n      deviceIndex: {device}\n      interfaceType: {kind}\n"
        )
    };
    let list = |entries: &[String]| format!("  networkInterfaces:\n{}", entries.concat());
    assert_eq!(
        only_problem(&list(&[entry(0, 0, "efa-only"), entry(0, 1, "interface")])),
        r#"spec.networkInterfaces: must include a primary interface (networkCardIndex 0, deviceIndex 0, interfaceType "interface")"#
    );
    assert_eq!(
        only_problem(&list(&[entry(0, 0, "interface"), entry(0, 0, "efa-only")])),
        "spec.networkInterfaces[1]: duplicate networkCardIndex 0 and deviceIndex 0"
    );
    assert_eq!(
        only_problem(&list(&[
            entry(0, 0, "interface"),
            entry(1, 0, "efa-only"),
            entry(1, 1, "efa-only")
        ])),
        "spec.networkInterfaces[2]: at most one efa-only interface per network card (card 1 has two)"
    );
    assert_eq!(
        only_problem(&list(&[entry(0, 0, "interface"), entry(0, 1, "efa")])),
        r#"spec.networkInterfaces[1].interfaceType: unknown interface type "efa" (expected "interface" or "efa-only")"#
    );
    assert_eq!(
        only_problem(&list(&[entry(0, 0, "interface"), entry(-1, 1, "efa-only")])),
        "spec.networkInterfaces[1].networkCardIndex: must be at least 0, got -1"
    );
    assert_eq!(
        only_problem(
            "  networkInterfaces:\n    - networkCardIndex: 0\n      interfaceType: interface\n"
        ),
        "spec.networkInterfaces[0].deviceIndex: required"
    );
    let many: Vec<String> = (0..151).map(|i| entry(0, i, "interface")).collect();
    assert_eq!(
        only_problem(&list(&many)),
        "spec.networkInterfaces: at most 150 entries are allowed, got 151"
    );
    // An empty list is no interfaces: EC2's default primary interface.
    let empty = valid(&format!("{CLASS}  networkInterfaces: []\n"))
        .node_classes
        .remove(0);
    assert!(empty.network_interfaces.is_empty());
}

#[test]
fn a_volume_initialization_rate_needs_a_snapshot_and_a_rate_from_100_to_300() {
    let mapping = |ebs: &str| {
        format!("  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      ebs:\n{ebs}")
    };
    assert_eq!(
        only_problem(&mapping(
            "        volumeSize: 20Gi\n        volumeInitializationRate: 200\n"
        )),
        "spec.blockDeviceMappings[0].ebs.volumeInitializationRate: snapshotID must be set when volumeInitializationRate is set"
    );
    for bad in [99, 301] {
        assert_eq!(
            only_problem(&mapping(&format!(
                "        snapshotID: snap-0123abcd\n        volumeInitializationRate: {bad}\n"
            ))),
            format!(
                "spec.blockDeviceMappings[0].ebs.volumeInitializationRate: must be between 100 and 300, got {bad}"
            )
        );
    }
}

#[test]
fn capacity_reservation_terms_are_read_with_karpenters_rules_and_field_paths() {
    let class = valid(&format!(
        "{CLASS}  capacityReservationSelectorTerms:\n    - id: cr-0123abcd\n    - tags:\n        team: ml\n      ownerID: \"012345678901\"\n      instanceMatchCriteria: targeted\n"
    ))
    .node_classes
    .remove(0);
    assert_eq!(
        class.capacity_reservation_selector_terms,
        vec![
            CapacityReservationSelectorTerm {
                id: Some("cr-0123abcd".into()),
                ..Default::default()
            },
            CapacityReservationSelectorTerm {
                id: None,
                owner_id: Some("012345678901".into()),
                tags: [("team".to_string(), "ml".to_string())].into(),
                instance_match_criteria: Some(InstanceMatchCriteria::Targeted),
            },
        ]
    );
    let terms = |t: &str| format!("  capacityReservationSelectorTerms:\n{t}");
    assert_eq!(
        only_problem(&terms("    - ownerID: \"012345678901\"\n")),
        "spec.capacityReservationSelectorTerms[0]: expected at least one of id, tags, instanceMatchCriteria, got none"
    );
    assert_eq!(
        only_problem(&terms(
            "    - id: cr-0123abcd\n      instanceMatchCriteria: open\n"
        )),
        "spec.capacityReservationSelectorTerms[0]: id is mutually exclusive: it cannot be set with tags, ownerID or instanceMatchCriteria"
    );
    assert_eq!(
        only_problem(&terms("    - id: odcr-1\n")),
        "spec.capacityReservationSelectorTerms[0].id: expected an id like \"cr-0123abcd\", got \"odcr-1\""
    );
    assert_eq!(
        only_problem(&terms(
            "    - instanceMatchCriteria: open\n      ownerID: \"12345\"\n"
        )),
        "spec.capacityReservationSelectorTerms[0].ownerID: expected a 12-digit AWS account id, got \"12345\""
    );
    assert_eq!(
        only_problem(&terms("    - instanceMatchCriteria: any\n")),
        "spec.capacityReservationSelectorTerms[0].instanceMatchCriteria: expected one of open, targeted, got \"any\""
    );
    assert_eq!(
        only_problem(&terms("    - tags:\n        team: \"\"\n")),
        "spec.capacityReservationSelectorTerms[0].tags: empty tag keys or values are not allowed (use \"*\" to match any value)"
    );
    let many: String = (0..31).map(|i| format!("    - id: cr-{i:08}\n")).collect();
    assert_eq!(
        only_problem(&terms(&many)),
        "spec.capacityReservationSelectorTerms: expected at most 30 terms, got 31"
    );
}
