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
            r#"EC2NodeClass "default": spec.kubelet.systemReserved.cpu: quantity "lots" is not a Kubernetes quantity (expected a number with an optional suffix such as 500m, 2, 1.5Gi, 256M, 1e3)"#,
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
        problems(&format!("{CLASS}  kubelet:\n    maxPods: lots\n")),
        vec![
            r#"EC2NodeClass "default": spec.kubelet.maxPods: invalid type: string "lots", expected an integer"#
        ]
    );
}
