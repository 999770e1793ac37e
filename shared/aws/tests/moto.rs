//! nodewright-aws against moto's server (one test binary: the SDKs are slow to link).
//!
//! Every test needs moto, so every test is `#[ignore]`d with that reason: run them with
//! `bash tests/moto.sh cargo test -p nodewright-aws --test moto -- --include-ignored`
//! (tests/run.sh, and so CI, does). Run without moto, a test fails naming what is missing.
//! Every test makes its own table / VPC / cluster name, so they run in parallel on
//! one server without seeing each other.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_ec2::types::ResourceType;

use nodewright_aws::testing::{
    IamClient, K8S, Network, REGION, create_table_from_definition, network, node_role, sdk_config,
    tag_spec, unique,
};
use nodewright_aws::{AwsContext, ClusterInfo, DynamoStore, Ec2Cloud, Ec2CloudConfig, moto};
use nodewright_core::api::model::{
    AmiSelectorTerm, Ec2NodeClass, Kubelet, MetadataOptions, SelectorTerm, Taint, TaintEffect,
    managed_instance_profile_name,
};
use nodewright_core::catalog::CapacityType;
use nodewright_core::nodeclaim::{ClaimSpec, ClaimState, NodeClaim};
use nodewright_engine::ports::{ClaimStore, LeaseStore};
use nodewright_engine::ports::{
    Cloud, Decision, ErrorKind, LaunchRequest, Offering, ResolvedNodeClass, Store,
};

// ----- DynamoDB ------------------------------------------------------------------------

/// One contract, two stores: each test below runs against the in-memory store that the
/// engine's tests and the simulator rely on (`in_memory`, always) and against
/// DynamoStore on moto (`dynamodb_on_moto`), so the fake is proven to behave as the
/// real store does where the engine depends on it.
macro_rules! store_contract {
    ($name:ident, |$store:ident| $body:block) => {
        mod $name {
            use super::*;

            async fn contract($store: &dyn Store) $body

            #[tokio::test]
            async fn in_memory() {
                contract(&nodewright_sim::fakes::MemoryStore::new()).await
            }

            #[tokio::test]
            #[ignore = "needs moto: run through tests/moto.sh"]
            async fn dynamodb_on_moto() {
                let url = moto!();
                contract(&store(&url).await).await
            }
        }
    };
}

async fn store(url: &str) -> DynamoStore {
    let table = unique("nodewright");
    create_table_from_definition(url, &table).await;
    DynamoStore::new(&AwsContext::for_emulator(url, REGION).await, table)
}

fn claim(name: &str) -> NodeClaim {
    NodeClaim::launching(
        ClaimSpec {
            labels: Default::default(),
            name: name.into(),
            node_pool: "default".into(),
            node_class: "default".into(),
            instance_type_options: vec!["m5.large".into(), "c5.large".into()],
            zones: vec!["us-east-1a".into()],
            capacity_types: vec![CapacityType::OnDemand],
            pods: vec!["default/web-1".into()],
        },
        1_000,
    )
}

fn launched(mut c: NodeClaim, instance_id: &str) -> NodeClaim {
    c.state = ClaimState::Launched;
    c.version += 1;
    c.instance_id = Some(instance_id.into());
    c.instance_type = Some("m5.large".into());
    c.zone = Some("us-east-1a".into());
    c.capacity_type = Some(CapacityType::OnDemand);
    c.price_per_hour = Some(0.096);
    c.launched_at = Some(1_010);
    c.updated_at = 1_010;
    c
}

store_contract!(claims_are_created_once_and_read_back, |store| {
    let c = claim("default-abc12");
    store.create_claim(&c).await.unwrap();
    assert_eq!(
        store.get_claim("default-abc12").await.unwrap(),
        Some(c.clone())
    );
    assert_eq!(store.get_claim("missing").await.unwrap(), None);

    let again = store.create_claim(&c).await.unwrap_err();
    assert_eq!(again.kind, ErrorKind::Conflict);
});

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_table_that_does_not_exist_is_named_on_one_line_without_raw_http() {
    let url = moto!();
    let table = unique("no-such-table");
    let store = DynamoStore::new(&AwsContext::for_emulator(&url, REGION).await, table.clone());
    let named =
        format!("DynamoDB table {table:?} does not exist in {REGION} (NODEWRIGHT_TABLE_NAME)");

    let read = store.list_claims().await.unwrap_err();
    let write = store.create_claim(&claim("default-a")).await.unwrap_err();
    let lease = store
        .acquire_lease("provisioner", "me", 1_000, Duration::from_secs(30))
        .await
        .unwrap_err();

    for error in [read, write, lease] {
        assert_eq!(error.kind, ErrorKind::NotFound, "{error}");
        let text = error.to_string();
        assert!(text.contains(&named), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
        let source = std::error::Error::source(&error).expect("the AWS error is kept");
        assert!(
            source.to_string().contains("ResourceNotFoundException"),
            "{source}"
        );
        let debug = format!("{error:?}").to_ascii_lowercase();
        assert!(
            !debug.contains("content-type") && !debug.contains("x-amzn-requestid"),
            "no raw HTTP headers: {debug}"
        );
    }
}

store_contract!(
    claim_updates_are_conditional_on_state_and_version,
    |store| {
        let c = claim("default-upd01");
        store.create_claim(&c).await.unwrap();

        let next = launched(c.clone(), "i-0123456789abcdef0");
        store
            .update_claim(&next, ClaimState::Launching, 1)
            .await
            .unwrap();
        assert_eq!(store.get_claim(&c.name).await.unwrap(), Some(next.clone()));

        // Someone else already advanced it: stale version.
        let stale = launched(c.clone(), "i-0fedcba9876543210");
        let err = store
            .update_claim(&stale, ClaimState::Launching, 1)
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Conflict, "{err}");

        // Right version, wrong state.
        let mut wrong_state = next.clone();
        wrong_state.version = 3;
        wrong_state.state = ClaimState::Registered;
        let err = store
            .update_claim(&wrong_state, ClaimState::Launching, 2)
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Conflict, "{err}");

        // Updating a claim that does not exist is a conflict too.
        let mut ghost = launched(claim("ghost"), "i-11111111");
        ghost.version = 2;
        assert_eq!(
            store
                .update_claim(&ghost, ClaimState::Launching, 1)
                .await
                .unwrap_err()
                .kind,
            ErrorKind::Conflict
        );

        // The version must step by one.
        assert_eq!(
            store
                .update_claim(&next, ClaimState::Launched, 5)
                .await
                .unwrap_err()
                .kind,
            ErrorKind::Invalid
        );

        // Unchanged by the refused writes.
        assert_eq!(store.get_claim(&c.name).await.unwrap(), Some(next));
    }
);

store_contract!(
    claims_list_across_pages_and_are_found_by_instance,
    |store| {
        // Large claims so the Query needs several 1 MB pages.
        let mut names = Vec::new();
        for i in 0..40 {
            let mut c = claim(&format!("pool-{i:03}"));
            c.pods = (0..800)
                .map(|p| format!("namespace-with-a-long-name/pod-with-a-long-name-{p:05}"))
                .collect();
            if i == 7 {
                c = launched(c, "i-0aaaaaaaaaaaaaaa7");
            }
            store.create_claim(&c).await.unwrap();
            names.push(c.name);
        }
        let mut listed: Vec<String> = store
            .list_claims()
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        listed.sort();
        assert_eq!(listed, names);

        let found = store
            .claim_by_instance("i-0aaaaaaaaaaaaaaa7")
            .await
            .unwrap()
            .expect("claim by instance");
        assert_eq!(found.name, "pool-007");
        assert_eq!(
            store
                .claim_by_instance("i-0bbbbbbbbbbbbbbbb")
                .await
                .unwrap(),
            None
        );
    }
);

store_contract!(
    leases_exclude_others_until_they_expire_with_increasing_tokens,
    |store| {
        let ttl = Duration::from_secs(30);

        let first = store
            .acquire_lease("provisioner", "a", 1_000, ttl)
            .await
            .unwrap()
            .expect("free lease");
        assert_eq!(first.holder, "a");
        assert_eq!(first.expires_at, 1_030);

        // Held: someone else is refused.
        assert_eq!(
            store
                .acquire_lease("provisioner", "b", 1_010, ttl)
                .await
                .unwrap(),
            None
        );
        // Other leases are independent.
        assert!(
            store
                .acquire_lease("disruption", "b", 1_010, ttl)
                .await
                .unwrap()
                .is_some()
        );

        // Renewal by the holder extends it.
        let renewed = store.renew_lease(&first, 1_020, ttl).await.unwrap();
        assert_eq!((renewed.token, renewed.expires_at), (first.token, 1_050));
        assert_eq!(
            store
                .acquire_lease("provisioner", "b", 1_049, ttl)
                .await
                .unwrap(),
            None
        );

        // Expired: b gets it from the second it expires (not a second later, as every
        // waiter's wake-up assumes), with a larger fencing token.
        let second = store
            .acquire_lease("provisioner", "b", 1_050, ttl)
            .await
            .unwrap()
            .expect("expired lease");
        assert_eq!(second.holder, "b");
        assert!(
            second.token > first.token,
            "{} > {}",
            second.token,
            first.token
        );

        // a lost it: renewing is a conflict, releasing is a no-op that leaves b's lease alone.
        assert_eq!(
            store
                .renew_lease(&renewed, 1_052, ttl)
                .await
                .unwrap_err()
                .kind,
            ErrorKind::Conflict
        );
        store.release_lease(&renewed).await.unwrap();
        assert_eq!(
            store
                .acquire_lease("provisioner", "c", 1_053, ttl)
                .await
                .unwrap(),
            None
        );

        // b releases: c may take it at once, and the token still grows.
        store.release_lease(&second).await.unwrap();
        let third = store
            .acquire_lease("provisioner", "c", 1_054, ttl)
            .await
            .unwrap()
            .expect("released lease");
        assert!(third.token > second.token);
    }
);

store_contract!(
    unavailable_offerings_expire_even_before_ttl_deletion,
    |store| {
        let o = |t: &str, ct| Offering {
            instance_type: t.into(),
            zone: "us-east-1a".into(),
            capacity_type: ct,
            price: 0.1,
        };
        store
            .mark_unavailable(&o("m5.large", CapacityType::Spot), 1_180)
            .await
            .unwrap();
        store
            .mark_unavailable(&o("c5.large", CapacityType::OnDemand), 1_060)
            .await
            .unwrap();

        let mut now = store.unavailable_offerings(1_000).await.unwrap();
        now.sort();
        assert_eq!(
            now,
            vec![
                (
                    "c5.large".to_string(),
                    "us-east-1a".to_string(),
                    CapacityType::OnDemand
                ),
                (
                    "m5.large".to_string(),
                    "us-east-1a".to_string(),
                    CapacityType::Spot
                ),
            ]
        );
        assert_eq!(
            store.unavailable_offerings(1_100).await.unwrap(),
            vec![(
                "m5.large".to_string(),
                "us-east-1a".to_string(),
                CapacityType::Spot
            )]
        );
        assert_eq!(store.unavailable_offerings(1_200).await.unwrap(), vec![]);
    }
);

store_contract!(
    idempotency_keys_are_claimed_once_until_they_expire,
    |store| {
        let day = Duration::from_secs(86_400);
        assert!(
            !store
                .idempotency_key_exists("event-1", 1_000)
                .await
                .unwrap()
        );
        assert!(
            store
                .claim_idempotency_key("event-1", 1_000, day)
                .await
                .unwrap()
        );
        assert!(
            store
                .idempotency_key_exists("event-1", 1_001)
                .await
                .unwrap()
        );
        assert!(
            !store
                .idempotency_key_exists("event-1", 1_000 + 86_401)
                .await
                .unwrap(),
            "expired keys read as absent"
        );
        assert!(
            !store
                .claim_idempotency_key("event-1", 1_001, day)
                .await
                .unwrap()
        );
        assert!(
            store
                .claim_idempotency_key("event-2", 1_001, day)
                .await
                .unwrap()
        );
        assert!(
            store
                .claim_idempotency_key("event-1", 1_000 + 86_401, day)
                .await
                .unwrap()
        );
    }
);

store_contract!(decisions_round_trip_in_time_order, |store| {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let d = |at: i64, action: &str| Decision {
        at,
        job: "provision".into(),
        action: action.into(),
        reason: "3 pending pods".into(),
        price_per_hour: Some(0.096),
    };
    // Yesterday, and two in the same second today.
    store
        .record_decision(&d(now - 86_400, "old"))
        .await
        .unwrap();
    store.record_decision(&d(now - 60, "first")).await.unwrap();
    store.record_decision(&d(now - 60, "second")).await.unwrap();
    store.record_decision(&d(now - 10, "third")).await.unwrap();

    let recent = store.decisions(now - 120).await.unwrap();
    let actions: Vec<&str> = recent.iter().map(|d| d.action.as_str()).collect();
    assert_eq!(actions.len(), 3);
    assert!(actions.contains(&"first") && actions.contains(&"second"));
    assert_eq!(actions[2], "third");
    assert_eq!(recent[2], d(now - 10, "third"));

    assert_eq!(store.decisions(now - 2 * 86_400).await.unwrap().len(), 4);
});

// ----- EC2 ---------------------------------------------------------------------------

fn cluster_info(name: &str) -> ClusterInfo {
    ClusterInfo {
        arn: Some(format!("arn:aws:eks:us-east-1:123456789012:cluster/{name}")),
        name: name.into(),
        endpoint: "https://EXAMPLE.gr7.us-east-1.eks.amazonaws.com".into(),
        ca_pem: b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec(),
        version: K8S.into(),
        service_cidr: Some("10.100.0.0/16".into()),
    }
}

fn node_class(cluster: &str, amis: Vec<AmiSelectorTerm>) -> Ec2NodeClass {
    let discovery = BTreeMap::from([("karpenter.sh/discovery".to_string(), cluster.to_string())]);
    Ec2NodeClass {
        name: "default".into(),
        ami_selector_terms: amis,
        ami_family: None,
        subnet_selector_terms: vec![SelectorTerm::Tags(discovery.clone())],
        security_group_selector_terms: vec![SelectorTerm::Tags(discovery)],
        role: Some(NODE_ROLE.into()),
        instance_profile: None,
        status_instance_profile: None,
        user_data: None,
        block_device_mappings: vec![],
        metadata_options: MetadataOptions::default(),
        tags: BTreeMap::from([("team".to_string(), "platform".to_string())]),
        kubelet: Kubelet::default(),
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

fn alias() -> AmiSelectorTerm {
    AmiSelectorTerm::Alias {
        family: "al2023".into(),
        version: "latest".into(),
    }
}

/// The role `node_class` names.
const NODE_ROLE: &str = "KarpenterNodeRole";

/// An Ec2Cloud for `cluster`, with the node role existing in IAM.
async fn cloud(url: &str, cluster: &str, net: &Network) -> Ec2Cloud {
    cloud_with(url, cluster, net, true).await
}

async fn cloud_with(url: &str, cluster: &str, net: &Network, manage_profiles: bool) -> Ec2Cloud {
    node_role(url, NODE_ROLE).await;
    let config = Ec2CloudConfig {
        ssm_public_prefix: net.ssm_prefix.clone(),
        manage_instance_profiles: manage_profiles,
        ..Ec2CloudConfig::default()
    };
    Ec2Cloud::new(
        &AwsContext::for_emulator(url, REGION).await,
        config,
        cluster_info(cluster),
    )
}

fn launch_request(
    claim: &str,
    class: Ec2NodeClass,
    resolved: ResolvedNodeClass,
    offerings: Vec<Offering>,
) -> LaunchRequest {
    LaunchRequest {
        claim_name: claim.into(),
        node_pool: "default".into(),
        node_class: class,
        resolved,
        offerings,
        prices_overlaid: false,
        labels: BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("karpenter.sh/nodeclaim".to_string(), claim.to_string()),
        ]),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("web".into()),
            effect: TaintEffect::NoSchedule,
        }],
        kubernetes_version: K8S.into(),
    }
}

fn on_demand(t: &str, zone: &str, price: f64) -> Offering {
    Offering {
        instance_type: t.into(),
        zone: zone.into(),
        capacity_type: CapacityType::OnDemand,
        price,
    }
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn node_classes_resolve_subnets_groups_and_images_by_alias_id_and_tags() {
    let url = moto!();
    let cluster = unique("resolve");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;

    // AMI alias through the (seeded) public SSM parameters, both architectures.
    let resolved = cloud
        .resolve_node_class(&node_class(&cluster, vec![alias()]), K8S)
        .await
        .unwrap();
    let mut subnet_ids: Vec<&str> = resolved.subnets.iter().map(|s| s.id.as_str()).collect();
    subnet_ids.sort();
    let mut expected = vec![
        net.subnet_a.as_str(),
        net.subnet_b.as_str(),
        net.subnet_b2.as_str(),
    ];
    expected.sort();
    assert_eq!(subnet_ids, expected);
    let zone_of = |id: &str| {
        resolved
            .subnets
            .iter()
            .find(|s| s.id == id)
            .unwrap()
            .zone
            .clone()
    };
    assert_eq!(zone_of(&net.subnet_a), "us-east-1a");
    assert_eq!(zone_of(&net.subnet_b), "us-east-1b");
    // The zone ID too (`availabilityZoneId`): ARC names shifted zones by it.
    for s in &resolved.subnets {
        assert!(
            s.zone_id.starts_with("use1-az"),
            "subnet {} in {}: zone id {:?}",
            s.id,
            s.zone,
            s.zone_id
        );
    }
    assert_eq!(
        resolved.security_group_ids,
        vec![net.security_group.clone()]
    );
    let mut images: Vec<(String, String)> = resolved
        .images
        .iter()
        .map(|i| (i.arch.clone(), i.id.clone()))
        .collect();
    images.sort();
    assert_eq!(
        images,
        vec![
            ("amd64".into(), net.ami_amd64.clone()),
            ("arm64".into(), net.ami_arm64.clone())
        ]
    );

    // By id (subnets, groups, image).
    let mut by_id = node_class(&cluster, vec![AmiSelectorTerm::Id(net.ami_arm64.clone())]);
    by_id.subnet_selector_terms = vec![SelectorTerm::Id(net.subnet_a.clone())];
    by_id.security_group_selector_terms = vec![SelectorTerm::Id(net.security_group.clone())];
    let resolved = cloud.resolve_node_class(&by_id, K8S).await.unwrap();
    assert_eq!(resolved.subnets.len(), 1);
    assert_eq!(resolved.subnets[0].id, net.subnet_a);
    assert_eq!(
        resolved.security_group_ids,
        vec![net.security_group.clone()]
    );
    assert_eq!(resolved.images.len(), 1);
    assert_eq!(
        (
            resolved.images[0].id.as_str(),
            resolved.images[0].arch.as_str()
        ),
        (net.ami_arm64.as_str(), "arm64")
    );

    // Security group by name; image by tags.
    let mut by_tags = node_class(
        &cluster,
        vec![AmiSelectorTerm::Tags {
            tags: BTreeMap::from([(
                format!("nodewright-test/{cluster}"),
                "node-image".to_string(),
            )]),
            owner: None,
        }],
    );
    by_tags.security_group_selector_terms = vec![SelectorTerm::Name(format!("{cluster}-nodes"))];
    let resolved = cloud.resolve_node_class(&by_tags, K8S).await.unwrap();
    assert_eq!(
        resolved.security_group_ids,
        vec![net.security_group.clone()]
    );
    assert_eq!(resolved.images.len(), 1);
    assert_eq!(resolved.images[0].id, net.ami_amd64);

    // Nothing selected is a clear NotFound.
    let mut none = node_class(&cluster, vec![alias()]);
    none.subnet_selector_terms = vec![SelectorTerm::Tags(BTreeMap::from([(
        "karpenter.sh/discovery".to_string(),
        "nobody".to_string(),
    )]))];
    let err = cloud.resolve_node_class(&none, K8S).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert!(err.message.contains("subnetSelectorTerms"), "{err}");

    // An alias whose parameters do not exist selects nothing.
    let err = cloud
        .resolve_node_class(&node_class(&cluster, vec![alias()]), "1.99")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
}

async fn describe_instance(url: &str, id: &str) -> aws_sdk_ec2::types::Instance {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(url).await);
    let out = ec2
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .unwrap();
    out.reservations.unwrap()[0]
        .instances
        .clone()
        .unwrap()
        .remove(0)
}

/// The launch templates tagged for `cluster`, every page read: tests running in
/// parallel on the same moto create theirs for their own clusters.
async fn launch_templates_named_nodewright(url: &str, cluster: &str) -> Vec<String> {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(url).await);
    let cluster_tag = format!("kubernetes.io/cluster/{cluster}");
    let mut names = Vec::new();
    let mut next: Option<String> = None;
    loop {
        // Pages as large as EC2 allows: moto pages by position, and templates other
        // tests create meanwhile shift positions between pages (one was skipped so).
        let out = ec2
            .describe_launch_templates()
            .max_results(200)
            .set_next_token(next.take())
            .send()
            .await
            .unwrap();
        names.extend(
            out.launch_templates
                .unwrap_or_default()
                .into_iter()
                .filter(|t| {
                    t.tags
                        .iter()
                        .flatten()
                        .any(|tag| tag.key.as_deref() == Some(cluster_tag.as_str()))
                })
                .filter_map(|t| t.launch_template_name),
        );
        match out.next_token {
            Some(t) if !t.is_empty() => next = Some(t),
            _ => break,
        }
    }
    names
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn launches_tag_instances_and_reuse_one_launch_template() {
    let url = moto!();
    let cluster = unique("launch");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    // A user data part and a block device, so the template carries them.
    class.user_data = Some("#!/bin/bash\necho hello\n".into());
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let templates_before = launch_templates_named_nodewright(&url, &cluster).await;

    // Cheapest first: c5.large in us-east-1b (moto launches the first override).
    let offerings = vec![
        on_demand("c5.large", "us-east-1b", 0.085),
        on_demand("m5.large", "us-east-1a", 0.096),
    ];
    let req = launch_request(
        "default-l1",
        class.clone(),
        resolved.clone(),
        offerings.clone(),
    );
    let launched = cloud.launch(&req).await.unwrap();
    assert_eq!(launched.instance_type, "c5.large");
    assert_eq!(launched.zone, "us-east-1b");
    assert_eq!(launched.capacity_type, CapacityType::OnDemand);
    assert_eq!(launched.price, 0.085);

    let instance = describe_instance(&url, &launched.instance_id).await;
    assert_eq!(
        instance.instance_type.as_ref().unwrap().as_str(),
        "c5.large"
    );
    // The us-east-1b subnet with the most free addresses.
    assert_eq!(instance.subnet_id.as_deref(), Some(net.subnet_b.as_str()));
    assert_eq!(
        instance
            .placement
            .as_ref()
            .unwrap()
            .availability_zone
            .as_deref(),
        Some("us-east-1b")
    );
    assert_eq!(instance.image_id.as_deref(), Some(net.ami_amd64.as_str()));
    let tags: BTreeMap<String, String> = instance
        .tags
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key.unwrap(), t.value.unwrap()))
        .collect();
    for (k, v) in [
        (
            format!("kubernetes.io/cluster/{cluster}"),
            "owned".to_string(),
        ),
        ("karpenter.sh/nodepool".into(), "default".into()),
        ("karpenter.sh/nodeclaim".into(), "default-l1".into()),
        ("karpenter.k8s.aws/ec2nodeclass".into(), "default".into()),
        ("eks:eks-cluster-name".into(), cluster.clone()),
        ("nodewright.io/managed-by".into(), "nodewright".into()),
        ("team".into(), "platform".into()),
    ] {
        assert_eq!(tags.get(&k), Some(&v), "tag {k} in {tags:?}");
    }

    let created: Vec<String> = launch_templates_named_nodewright(&url, &cluster)
        .await
        .into_iter()
        .filter(|n| !templates_before.contains(n))
        .collect();
    assert_eq!(created.len(), 1, "{created:?}");
    assert!(created[0].starts_with("nodewright-"), "{created:?}");

    // A second claim, and a second (cold) Ec2Cloud: the same template is reused.
    let second = cloud
        .launch(&launch_request(
            "default-l2",
            class.clone(),
            resolved.clone(),
            offerings.clone(),
        ))
        .await
        .unwrap();
    let cold = self::cloud(&url, &cluster, &net).await;
    let third = cold
        .launch(&launch_request(
            "default-l3",
            class.clone(),
            resolved.clone(),
            offerings,
        ))
        .await
        .unwrap();
    assert_ne!(second.instance_id, third.instance_id);
    let created_after: Vec<String> = launch_templates_named_nodewright(&url, &cluster)
        .await
        .into_iter()
        .filter(|n| !templates_before.contains(n))
        .collect();
    assert_eq!(
        created_after, created,
        "launch template reused, not recreated"
    );

    // A template holds the user data with the node config (decoded from base64).
    let (data, user_data) = template_data(&url, &created[0]).await;
    assert!(user_data.contains("application/node.eks.aws"));
    assert!(user_data.contains("echo hello"));
    assert!(user_data.contains("karpenter.sh/unregistered=true:NoExecute"));
    assert!(user_data.contains("dedicated=web:NoSchedule"));
    assert!(user_data.contains("karpenter.sh/capacity-type=on-demand"));
    assert!(
        !user_data.contains("default-l1"),
        "claim-specific labels stay out of shared templates"
    );
    assert_eq!(
        data.iam_instance_profile.unwrap().name,
        resolved.instance_profile
    );
}

/// Template `name`'s data, and its user data decoded.
async fn template_data(
    url: &str,
    name: &str,
) -> (aws_sdk_ec2::types::ResponseLaunchTemplateData, String) {
    use base64::Engine;
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(url).await);
    let data = ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .send()
        .await
        .unwrap()
        .launch_template_versions
        .unwrap()
        .remove(0)
        .launch_template_data
        .unwrap();
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data.user_data.as_deref().unwrap())
            .unwrap(),
    )
    .unwrap();
    (data, user_data)
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn each_type_gets_a_template_with_the_kubelet_values_its_expressions_give_it() {
    let url = moto!();
    let cluster = unique("kubeexpr");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.kubelet = Kubelet {
        max_pods_expression: Some("min(110, vcpus * 8)".into()),
        kube_reserved_expressions: BTreeMap::from([("cpu".into(), "vcpus * 30".into())]),
        raw: Some(serde_json::json!({
            "maxPods": "min(110, vcpus * 8)",
            "kubeReserved": {"cpu": "vcpus * 30"},
        })),
        ..Kubelet::default()
    };
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let before = launch_templates_named_nodewright(&url, &cluster).await;
    // c5.large (2 vCPUs) and m5.xlarge (4): 16 and 32 pods, 60m and 120m of cpu; two
    // c5 sizes of one answer share a template.
    let offerings = vec![
        on_demand("c5.large", "us-east-1a", 0.085),
        on_demand("m5.large", "us-east-1a", 0.096),
        on_demand("m5.xlarge", "us-east-1a", 0.192),
    ];
    let launched = cloud
        .launch(&launch_request("default-k1", class, resolved, offerings))
        .await
        .unwrap();
    assert_eq!(launched.instance_type, "c5.large");
    let created: Vec<String> = launch_templates_named_nodewright(&url, &cluster)
        .await
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(created.len(), 2, "{created:?}");
    let mut kubelets = Vec::new();
    for name in &created {
        let (_, data) = template_data(&url, name).await;
        let node_config = data
            .split("Content-Type: application/node.eks.aws\n\n")
            .nth(1)
            .and_then(|rest| rest.split("\n\n--").next())
            .unwrap_or_else(|| panic!("no NodeConfig in {data}"));
        let node_config: serde_json::Value = serde_json::from_str(node_config).unwrap();
        kubelets.push(node_config["spec"]["kubelet"]["config"].clone());
    }
    kubelets.sort_by_key(|k| k["maxPods"].as_i64());
    assert_eq!(
        kubelets,
        vec![
            serde_json::json!({"maxPods": 16, "kubeReserved": {"cpu": "60m"}}),
            serde_json::json!({"maxPods": 32, "kubeReserved": {"cpu": "120m"}}),
        ]
    );
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn offerings_a_node_overlay_priced_launch_in_their_order_with_a_prioritized_fleet() {
    let url = moto!();
    let cluster = unique("prio");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    // A Savings Plan overlay made m5.xlarge cheaper than EC2's list says c5.xlarge is.
    let offerings = vec![
        on_demand("m5.xlarge", "us-east-1a", 0.134),
        on_demand("c5.xlarge", "us-east-1a", 0.17),
    ];
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&url).await);
    let fleets_before = ec2
        .describe_fleets()
        .send()
        .await
        .unwrap()
        .fleets
        .unwrap_or_default()
        .len();
    for (claim, overlaid) in [("default-p1", true), ("default-p2", false)] {
        let mut request = launch_request(claim, class.clone(), resolved.clone(), offerings.clone());
        request.prices_overlaid = overlaid;
        cloud.launch(&request).await.unwrap();
    }
    let fleets = ec2.describe_fleets().send().await.unwrap().fleets.unwrap();
    let ours = &fleets[fleets_before..];
    assert_eq!(ours.len(), 2, "{ours:#?}");
    let strategy = |f: &aws_sdk_ec2::types::FleetData| {
        f.on_demand_options
            .as_ref()
            .and_then(|o| o.allocation_strategy.clone())
            .map(|s| s.as_str().to_string())
    };
    let priorities = |f: &aws_sdk_ec2::types::FleetData| -> Vec<(String, Option<f64>)> {
        f.launch_template_configs
            .iter()
            .flatten()
            .flat_map(|c| c.overrides.iter().flatten())
            .map(|o| {
                (
                    o.instance_type
                        .as_ref()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    o.priority,
                )
            })
            .collect()
    };
    assert_eq!(strategy(&ours[0]).as_deref(), Some("prioritized"));
    assert_eq!(
        priorities(&ours[0]),
        [
            ("m5.xlarge".to_string(), Some(0.0)),
            ("c5.xlarge".to_string(), Some(1.0))
        ]
    );
    assert_eq!(strategy(&ours[1]).as_deref(), Some("lowest-price"));
    assert!(priorities(&ours[1]).iter().all(|(_, p)| p.is_none()));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn reboot_for_repair_reboots_the_instance_and_an_unknown_one_is_not_found() {
    let url = moto!();
    let cluster = unique("reboot");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let ours = cloud
        .launch(&launch_request(
            "default-r1",
            class,
            resolved,
            vec![on_demand("m5.large", "us-east-1a", 0.096)],
        ))
        .await
        .unwrap();
    cloud.reboot(&ours.instance_id).await.unwrap();
    let owned = cloud.owned_instances().await.unwrap();
    assert_eq!(owned.len(), 1, "a reboot keeps the instance: {owned:?}");
    assert_eq!(owned[0].id, ours.instance_id);

    let err = cloud.reboot("i-0123456789abcdef0").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound, "{err:?}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "the SDK error is kept"
    );
    let err = cloud.reboot("not-an-id").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid);
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn owned_instances_past_one_describe_instances_page_are_all_listed() {
    let url = moto!();
    let cluster = unique("paged");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&url).await);
    let cluster_tag = format!("kubernetes.io/cluster/{cluster}");
    let tags = [
        (cluster_tag.as_str(), "owned"),
        ("nodewright.io/managed-by", "nodewright"),
    ];
    // One more than the largest page DescribeInstances gives, each its own reservation
    // (moto pages by reservation).
    for _ in 0..1001 {
        ec2.run_instances()
            .image_id(&net.ami_amd64)
            .min_count(1)
            .max_count(1)
            // The default VPC's subnet: the test network's /24 holds 251 addresses.
            .tag_specifications(tag_spec(ResourceType::Instance, &tags))
            .send()
            .await
            .unwrap();
    }
    let mut owned: Vec<String> = cloud
        .owned_instances()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    owned.sort();
    owned.dedup();
    assert_eq!(owned.len(), 1001);
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn owned_instances_are_only_this_clusters_and_terminate_removes_them() {
    let url = moto!();
    let cluster = unique("owned");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let ours = cloud
        .launch(&launch_request(
            "default-o1",
            class,
            resolved,
            vec![on_demand("m5.large", "us-east-1a", 0.096)],
        ))
        .await
        .unwrap();

    // An untagged instance, one of another cluster, and one tagged for this cluster
    // but not managed by nodewright.
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&url).await);
    let cluster_tag = format!("kubernetes.io/cluster/{cluster}");
    for tags in [
        vec![],
        vec![
            ("kubernetes.io/cluster/someone-else", "owned"),
            ("nodewright.io/managed-by", "nodewright"),
        ],
        vec![(cluster_tag.as_str(), "owned")],
    ] {
        let mut run = ec2
            .run_instances()
            .image_id(&net.ami_amd64)
            .min_count(1)
            .max_count(1)
            .subnet_id(&net.subnet_a);
        if !tags.is_empty() {
            run = run.tag_specifications(tag_spec(ResourceType::Instance, &tags));
        }
        run.send().await.unwrap();
    }

    let owned = cloud.owned_instances().await.unwrap();
    assert_eq!(owned.len(), 1, "{owned:?}");
    let i = &owned[0];
    assert_eq!(i.id, ours.instance_id);
    assert_eq!(i.instance_type, "m5.large");
    assert_eq!(i.zone, "us-east-1a");
    assert_eq!(i.capacity_type, CapacityType::OnDemand);
    assert_eq!(i.claim_name.as_deref(), Some("default-o1"));
    assert!(i.state == "running" || i.state == "pending", "{}", i.state);
    assert!(i.launch_time > 0);
    // What drift compares with what the class selects (security groups: see the
    // test of spot and on-demand launches below).
    assert_eq!(i.image_id.as_deref(), Some(net.ami_amd64.as_str()));
    assert_eq!(i.subnet_id.as_deref(), Some(net.subnet_a.as_str()));

    let err = cloud
        .terminate(&["i-not-an-id".to_string()])
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid);
    cloud
        .terminate(std::slice::from_ref(&ours.instance_id))
        .await
        .unwrap();
    assert_eq!(cloud.owned_instances().await.unwrap(), vec![]);
    let state = describe_instance(&url, &ours.instance_id)
        .await
        .state
        .unwrap()
        .name
        .unwrap();
    assert!(
        matches!(state.as_str(), "shutting-down" | "terminated"),
        "{state}"
    );
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn instance_status_checks_are_read_and_healthy_instances_are_not_impaired() {
    // moto reports every running instance's checks as `ok` and has no way to make them
    // fail: this shows DescribeInstanceStatus is asked with the impaired filters and
    // answered; what an impaired answer leads to is tested over the fakes.
    let url = moto!();
    let cluster = unique("status");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    cloud
        .launch(&launch_request(
            "default-s1",
            class,
            resolved,
            vec![on_demand("m5.large", "us-east-1a", 0.096)],
        ))
        .await
        .unwrap();
    assert_eq!(cloud.impaired_instances().await.unwrap(), vec![]);
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn instances_launched_spot_or_on_demand_carry_what_their_class_selects_and_have_not_drifted()
{
    // EC2 gives a fleet's instances the launch template's security groups, spot and
    // on-demand alike (tests/moto_server.py makes moto's CreateFleet do so too): a node
    // just launched must never read as drifted from its EC2NodeClass.
    use nodewright_core::disruption::drift::{LaunchedWith, resource_drift};
    let url = moto!();
    let cluster = unique("drift");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let spot = Offering {
        capacity_type: CapacityType::Spot,
        ..on_demand("m6g.large", "us-east-1b", 0.031)
    };
    for (claim, offering) in [
        ("default-d1", spot),
        ("default-d2", on_demand("m5.large", "us-east-1a", 0.096)),
    ] {
        let request = launch_request(claim, class.clone(), resolved.clone(), vec![offering]);
        cloud.launch(&request).await.unwrap();
    }
    let selection = resolved.selection("default");

    let mut owned = cloud.owned_instances().await.unwrap();
    owned.sort_by(|a, b| a.claim_name.cmp(&b.claim_name));
    assert_eq!(owned.len(), 2, "{owned:?}");
    let expected = [
        (CapacityType::Spot, &net.ami_arm64, "us-east-1b"),
        (CapacityType::OnDemand, &net.ami_amd64, "us-east-1a"),
    ];
    for (i, (capacity_type, image, zone)) in owned.iter().zip(expected) {
        assert_eq!(i.capacity_type, capacity_type);
        assert_eq!(i.image_id.as_ref(), Some(image));
        assert_eq!(i.zone, zone);
        assert_eq!(
            i.security_group_ids,
            vec![net.security_group.clone()],
            "{capacity_type:?}"
        );
        let launched = LaunchedWith {
            node: &i.id,
            arch: None,
            image: i.image_id.as_deref(),
            subnet: i.subnet_id.as_deref(),
            security_groups: &i.security_group_ids,
            reservation: None,
        };
        assert_eq!(
            resource_drift(&launched, &selection),
            None,
            "{capacity_type:?}"
        );
    }
}

/// A subnet in `zone` of `like`'s VPC, tagged for `cluster`'s discovery, with
/// `taken` of its addresses given to network interfaces.
async fn discovered_subnet(
    ec2: &aws_sdk_ec2::Client,
    like: &str,
    cluster: &str,
    cidr: &str,
    zone: &str,
    taken: usize,
) -> String {
    let vpc = ec2
        .describe_subnets()
        .subnet_ids(like)
        .send()
        .await
        .unwrap()
        .subnets()[0]
        .vpc_id()
        .unwrap()
        .to_string();
    let subnet = ec2
        .create_subnet()
        .vpc_id(vpc)
        .cidr_block(cidr)
        .availability_zone(zone)
        .tag_specifications(tag_spec(
            ResourceType::Subnet,
            &[("karpenter.sh/discovery", cluster)],
        ))
        .send()
        .await
        .unwrap()
        .subnet
        .unwrap()
        .subnet_id
        .unwrap();
    take_addresses(ec2, &subnet, taken).await;
    subnet
}

/// Gives `n` of the subnet's addresses to new network interfaces.
async fn take_addresses(ec2: &aws_sdk_ec2::Client, subnet: &str, n: usize) {
    for _ in 0..n {
        ec2.create_network_interface()
            .subnet_id(subnet)
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_subnet_out_of_addresses_is_passed_over_and_its_zone_goes_only_once_every_subnet_is() {
    use nodewright_engine::ports::LaunchError;
    let url = moto!();
    let cluster = unique("ips");
    let net = network(&url, &cluster).await;
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&url).await);
    // us-east-1c: two /28 subnets (11 usable addresses), 11 and 6 of them free.
    let roomy = discovered_subnet(
        &ec2,
        &net.subnet_a,
        &cluster,
        "10.0.4.0/28",
        "us-east-1c",
        0,
    )
    .await;
    let small = discovered_subnet(
        &ec2,
        &net.subnet_a,
        &cluster,
        "10.0.4.16/28",
        "us-east-1c",
        5,
    )
    .await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let in_c = |t: &str| on_demand(t, "us-east-1c", 0.096);
    let launch = |claim: &str, offerings: Vec<Offering>| {
        launch_request(claim, class.clone(), resolved.clone(), offerings)
    };
    let refused = |e: LaunchError| match e {
        LaunchError::InsufficientCapacity { offerings, message } => (offerings, message),
        other => panic!("not insufficient capacity: {other:?}"),
    };
    // Other launches took the roomy subnet's addresses since DescribeSubnets counted them.
    take_addresses(&ec2, &roomy, 11).await;

    // EC2 refuses the roomy subnet: that offering is out of capacity.
    let e = cloud
        .launch(&launch("default-i1", vec![in_c("m5.large")]))
        .await
        .unwrap_err();
    let (offerings, message) = refused(e);
    assert_eq!(offerings, vec![in_c("m5.large")]);
    assert!(
        message.contains("InsufficientFreeAddressesInSubnet"),
        "{message}"
    );

    // Another type in the zone launches into the zone's other subnet, though the count
    // DescribeSubnets gave still ranks the roomy one first.
    let launched = cloud
        .launch(&launch("default-i2", vec![in_c("c5.large")]))
        .await
        .unwrap();
    assert_eq!(launched.zone, "us-east-1c");
    let instance = describe_instance(&url, &launched.instance_id).await;
    assert_eq!(instance.subnet_id.as_deref(), Some(small.as_str()));

    // The small subnet runs out too: once EC2 says so, the whole zone has no capacity,
    // and a launch that may go elsewhere does, reporting the zone's offering.
    take_addresses(&ec2, &small, 5).await;
    let e = cloud
        .launch(&launch("default-i3", vec![in_c("m5.xlarge")]))
        .await
        .unwrap_err();
    assert_eq!(refused(e).0, vec![in_c("m5.xlarge")]);
    let elsewhere = on_demand("m5.large", "us-east-1a", 0.096);
    let launched = cloud
        .launch(&launch(
            "default-i4",
            vec![in_c("r5.large"), elsewhere.clone()],
        ))
        .await
        .unwrap();
    assert_eq!(launched.zone, "us-east-1a");
    assert_eq!(launched.unavailable, vec![in_c("r5.large")]);
    let e = cloud
        .launch(&launch("default-i5", vec![in_c("r5.large")]))
        .await
        .unwrap_err();
    let (offerings, message) = refused(e);
    assert_eq!(offerings, vec![in_c("r5.large")]);
    assert!(message.contains("every subnet of us-east-1c"), "{message}");
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn catalog_comes_from_describe_instance_types_with_embedded_prices() {
    let url = moto!();
    let cluster = unique("catalog");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let catalog = cloud.catalog().await.unwrap();
    assert!(catalog.types.len() > 50, "{} types", catalog.types.len());
    let m5 = catalog.get("m5.large").expect("m5.large offered");
    assert!(m5.on_demand_price.unwrap() > 0.0);
    assert_eq!(
        m5.labels.get("kubernetes.io/arch").map(String::as_str),
        Some("amd64")
    );
    // Cached: the same value again.
    assert_eq!(cloud.catalog().await.unwrap(), catalog);

    let prices = cloud.spot_prices().await.unwrap();
    assert!(prices.values().all(|p| *p > 0.0));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn cluster_info_comes_from_describe_cluster() {
    let url = moto!();
    let config = sdk_config(&url).await;
    let eks = aws_sdk_eks::Client::new(&config);
    let name = unique("eks");
    eks.create_cluster()
        .name(&name)
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .version(K8S)
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .subnet_ids("subnet-1")
                .build(),
        )
        .kubernetes_network_config(
            aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr("10.100.0.0/16")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let ctx = AwsContext::for_emulator(&url, REGION).await;
    let info = ClusterInfo::describe(&ctx, &name).await.unwrap();
    assert_eq!(info.name, name);
    assert_eq!(info.version, K8S);
    assert!(info.endpoint.starts_with("https://"), "{}", info.endpoint);
    assert!(!info.ca_pem.is_empty());
    assert_eq!(info.service_cidr.as_deref(), Some("10.100.0.0/16"));

    let missing = ClusterInfo::describe(&ctx, "no-such-cluster")
        .await
        .unwrap_err();
    assert_eq!(missing.kind, ErrorKind::NotFound);
    assert_eq!(
        missing.to_string(),
        format!(
            "cluster not found: EKS cluster \"no-such-cluster\" does not exist in {REGION} (NODEWRIGHT_CLUSTER_NAME); DescribeCluster"
        )
    );
    assert!(
        !format!("{missing:?}")
            .to_ascii_lowercase()
            .contains("content-type"),
        "no raw HTTP headers: {missing:?}"
    );

    // The token source signs with the context's credentials.
    let token = nodewright_aws::TokenSource::new(&ctx, &name)
        .unwrap()
        .token()
        .await
        .unwrap();
    assert!(token.starts_with("k8s-aws-v1."));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn the_cheaper_spot_group_launches_first_with_the_image_for_its_architecture() {
    let url = moto!();
    let cluster = unique("spot");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let spot = |t: &str, zone: &str, price: f64| Offering {
        instance_type: t.into(),
        zone: zone.into(),
        capacity_type: CapacityType::Spot,
        price,
    };
    // Graviton spot is cheapest; on-demand is there as the fallback group.
    let offerings = vec![
        on_demand("m5.large", "us-east-1a", 0.096),
        spot("m6g.large", "us-east-1a", 0.031),
        spot("m5.large", "us-east-1b", 0.038),
    ];
    let launched = cloud
        .launch(&launch_request("default-s1", class, resolved, offerings))
        .await
        .unwrap();
    assert_eq!(launched.capacity_type, CapacityType::Spot);
    assert_eq!(
        (launched.instance_type.as_str(), launched.zone.as_str()),
        ("m6g.large", "us-east-1a")
    );
    assert_eq!(launched.price, 0.031);

    let instance = describe_instance(&url, &launched.instance_id).await;
    assert_eq!(instance.image_id.as_deref(), Some(net.ami_arm64.as_str()));
    assert_eq!(instance.subnet_id.as_deref(), Some(net.subnet_a.as_str()));

    // Capacity type comes from the instance's lifecycle field.
    let owned = cloud.owned_instances().await.unwrap();
    assert_eq!(owned.len(), 1);
    assert_eq!(owned[0].capacity_type, CapacityType::Spot);
}

// ----- Instance profiles (IAM) ------------------------------------------------------------

async fn iam(url: &str) -> IamClient {
    IamClient::new(&sdk_config(url).await)
}

/// GetInstanceProfile: (roles, tags), or `None` when there is no such profile.
async fn instance_profile(
    url: &str,
    name: &str,
) -> Option<(Vec<String>, BTreeMap<String, String>)> {
    match iam(url)
        .await
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
    {
        Ok(out) => {
            let p = out.instance_profile.unwrap();
            let roles = p.roles.into_iter().map(|r| r.role_name).collect();
            let tags = p
                .tags
                .unwrap_or_default()
                .into_iter()
                .map(|t| (t.key, t.value))
                .collect();
            Some((roles, tags))
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            None
        }
        Err(e) => panic!("GetInstanceProfile {name}: {e:?}"),
    }
}

/// Creates a profile as someone else (Karpenter, an operator) would have.
async fn create_profile(url: &str, name: &str, tags: &[(&str, &str)], role: Option<&str>) {
    create_profile_at(url, "/", name, tags, role).await;
}

/// As [`create_profile`], under an IAM path (Karpenter v1.7+ uses
/// `/karpenter/<region>/<cluster>/<class uid>/`).
async fn create_profile_at(
    url: &str,
    path: &str,
    name: &str,
    tags: &[(&str, &str)],
    role: Option<&str>,
) {
    let iam = iam(url).await;
    let mut create = iam
        .create_instance_profile()
        .instance_profile_name(name)
        .path(path);
    for (k, v) in tags {
        create = create.tags(
            aws_sdk_iam::types::Tag::builder()
                .key(*k)
                .value(*v)
                .build()
                .unwrap(),
        );
    }
    create.send().await.unwrap();
    if let Some(role) = role {
        node_role(url, role).await;
        iam.add_role_to_instance_profile()
            .instance_profile_name(name)
            .role_name(role)
            .send()
            .await
            .unwrap();
    }
}

/// Launches `req` and returns the instance profile of the launch template used (the
/// only template tagged for the test's cluster).
async fn launch_template_profile(
    url: &str,
    cloud: &Ec2Cloud,
    cluster: &str,
    req: LaunchRequest,
) -> Option<String> {
    cloud.launch(&req).await.unwrap();
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(url).await);
    let templates = ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{cluster}"))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .unwrap()
        .launch_templates
        .unwrap_or_default();
    assert_eq!(templates.len(), 1, "{templates:?}");
    ec2.describe_launch_template_versions()
        .launch_template_id(templates[0].launch_template_id.clone().unwrap())
        .send()
        .await
        .unwrap()
        .launch_template_versions
        .unwrap()
        .remove(0)
        .launch_template_data
        .unwrap()
        .iam_instance_profile
        .and_then(|p| p.name)
}

/// Launches one m5.large for `class` and returns the instance profile its launch
/// template names.
async fn profile_of_a_launch(
    url: &str,
    cloud: &Ec2Cloud,
    cluster: &str,
    class: Ec2NodeClass,
    resolved: ResolvedNodeClass,
) -> Option<String> {
    launch_template_profile(
        url,
        cloud,
        cluster,
        launch_request(
            "default-p1",
            class,
            resolved,
            vec![on_demand("m5.large", "us-east-1a", 0.096)],
        ),
    )
    .await
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_class_with_only_a_role_gets_a_tagged_instance_profile_holding_it_and_launches_with_it() {
    let url = moto!();
    let cluster = unique("profile");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let expected = managed_instance_profile_name(&cluster, REGION, "default");
    assert_eq!(instance_profile(&url, &expected).await, None);

    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();

    assert_eq!(
        resolved.instance_profile.as_deref(),
        Some(expected.as_str())
    );
    let (roles, tags) = instance_profile(&url, &expected).await.expect("created");
    assert_eq!(roles, vec![NODE_ROLE.to_string()]);
    for (k, v) in [
        (
            format!("kubernetes.io/cluster/{cluster}"),
            "owned".to_string(),
        ),
        ("eks:eks-cluster-name".into(), cluster.clone()),
        ("karpenter.k8s.aws/ec2nodeclass".into(), "default".into()),
        ("topology.kubernetes.io/region".into(), REGION.into()),
        // The class's own tags, as Karpenter adds them.
        ("team".into(), "platform".into()),
    ] {
        assert_eq!(tags.get(&k), Some(&v), "tag {k} in {tags:?}");
    }

    let profile = profile_of_a_launch(&url, &cloud, &cluster, class, resolved).await;
    assert_eq!(profile, Some(expected));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_warm_resolve_reuses_the_profile_and_a_cold_one_adopts_it() {
    let url = moto!();
    let cluster = unique("profile-again");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let name = managed_instance_profile_name(&cluster, REGION, "default");
    cloud.resolve_node_class(&class, K8S).await.unwrap();
    let created = iam(&url)
        .await
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .unwrap()
        .instance_profile
        .unwrap();

    // A cold Lambda finds the profile and adopts it: same profile (id), same role.
    let cold = self::cloud(&url, &cluster, &net).await;
    let resolved = cold.resolve_node_class(&class, K8S).await.unwrap();
    assert_eq!(resolved.instance_profile.as_deref(), Some(name.as_str()));
    let adopted = iam(&url)
        .await
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .unwrap()
        .instance_profile
        .unwrap();
    assert_eq!(adopted.instance_profile_id, created.instance_profile_id);
    assert_eq!(adopted.roles.len(), 1);

    // A warm Lambda makes no IAM call at all: with the profile gone behind its back,
    // it still reports it and creates nothing (the cold one, asked afresh, would).
    let iam = iam(&url).await;
    iam.remove_role_from_instance_profile()
        .instance_profile_name(&name)
        .role_name(NODE_ROLE)
        .send()
        .await
        .unwrap();
    iam.delete_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .unwrap();
    let warm = cloud.resolve_node_class(&class, K8S).await.unwrap();
    assert_eq!(warm.instance_profile.as_deref(), Some(name.as_str()));
    assert_eq!(instance_profile(&url, &name).await, None, "nothing created");
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_profile_karpenter_created_for_the_class_is_adopted_and_given_the_role() {
    let url = moto!();
    let cluster = unique("profile-adopt");
    let net = network(&url, &cluster).await;
    let name = managed_instance_profile_name(&cluster, REGION, "default");
    let cluster_tag = format!("kubernetes.io/cluster/{cluster}");
    // As Karpenter left it, holding the role the class named before it was edited.
    create_profile(
        &url,
        &name,
        &[
            (cluster_tag.as_str(), "owned"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("topology.kubernetes.io/region", REGION),
            ("created-by", "karpenter"),
        ],
        Some("KarpenterNodeRole-old"),
    )
    .await;
    let cloud = cloud(&url, &cluster, &net).await;

    let resolved = cloud
        .resolve_node_class(&node_class(&cluster, vec![alias()]), K8S)
        .await
        .unwrap();

    assert_eq!(resolved.instance_profile.as_deref(), Some(name.as_str()));
    let (roles, tags) = instance_profile(&url, &name).await.unwrap();
    assert_eq!(roles, vec![NODE_ROLE.to_string()], "the role is replaced");
    assert_eq!(
        tags.get("created-by").map(String::as_str),
        Some("karpenter"),
        "the same profile, adopted rather than recreated"
    );
}

/// A profile as Karpenter v1.7+ creates one for class `default`: a random name, under
/// its path, with its tags, holding `role`; returns its name.
async fn karpenter_v1_7_profile(url: &str, cluster: &str, role: &str) -> String {
    let name = format!(
        "{cluster}_{}",
        1_000_000_000u64 + u64::from(std::process::id())
    );
    let cluster_tag = format!("kubernetes.io/cluster/{cluster}");
    create_profile_at(
        url,
        &format!("/karpenter/{REGION}/{cluster}/5a1c3f0e-class-uid/"),
        &name,
        &[
            (cluster_tag.as_str(), "owned"),
            ("eks:eks-cluster-name", cluster),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("topology.kubernetes.io/region", REGION),
        ],
        Some(role),
    )
    .await;
    name
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_profile_karpenter_v1_7_recorded_in_the_class_status_is_launched_with_as_it_is() {
    let url = moto!();
    let cluster = unique("profile-v17");
    let net = network(&url, &cluster).await;
    let recorded = karpenter_v1_7_profile(&url, &cluster, NODE_ROLE).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.status_instance_profile = Some(recorded.clone());
    let cloud = cloud(&url, &cluster, &net).await;

    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();

    assert_eq!(
        resolved.instance_profile.as_deref(),
        Some(recorded.as_str())
    );
    let managed = managed_instance_profile_name(&cluster, REGION, "default");
    assert_eq!(
        instance_profile(&url, &managed).await,
        None,
        "no second profile beside Karpenter's"
    );
    let (roles, _) = instance_profile(&url, &recorded).await.unwrap();
    assert_eq!(roles, vec![NODE_ROLE.to_string()]);
    let profile = profile_of_a_launch(&url, &cloud, &cluster, class, resolved).await;
    assert_eq!(profile, Some(recorded));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_recorded_profile_holding_another_role_is_left_alone_and_the_managed_one_holds_the_role()
{
    let url = moto!();
    let cluster = unique("profile-v17-role");
    let net = network(&url, &cluster).await;
    let recorded = karpenter_v1_7_profile(&url, &cluster, "KarpenterNodeRole-old").await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.status_instance_profile = Some(recorded.clone());
    let cloud = cloud(&url, &cluster, &net).await;

    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();

    let managed = managed_instance_profile_name(&cluster, REGION, "default");
    assert_eq!(resolved.instance_profile.as_deref(), Some(managed.as_str()));
    let (roles, _) = instance_profile(&url, &managed).await.expect("created");
    assert_eq!(roles, vec![NODE_ROLE.to_string()]);
    let (roles, _) = instance_profile(&url, &recorded).await.unwrap();
    assert_eq!(
        roles,
        vec!["KarpenterNodeRole-old".to_string()],
        "Karpenter's profile is never changed"
    );

    // A profile the status names that is gone: the managed one, too.
    class.status_instance_profile = Some(format!("{cluster}_42"));
    let resolved = self::cloud(&url, &cluster, &net)
        .await
        .resolve_node_class(&class, K8S)
        .await
        .unwrap();
    assert_eq!(resolved.instance_profile, Some(managed));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_profile_of_that_name_not_tagged_for_the_cluster_is_never_changed() {
    let url = moto!();
    let cluster = unique("profile-foreign");
    let net = network(&url, &cluster).await;
    let name = managed_instance_profile_name(&cluster, REGION, "default");
    create_profile(&url, &name, &[("team", "other")], Some("SomeoneElsesRole")).await;
    let cloud = cloud(&url, &cluster, &net).await;

    let err = cloud
        .resolve_node_class(&node_class(&cluster, vec![alias()]), K8S)
        .await
        .unwrap_err();

    assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
    assert!(err.message.contains(&name), "{err}");
    let (roles, _) = instance_profile(&url, &name).await.unwrap();
    assert_eq!(roles, vec!["SomeoneElsesRole".to_string()]);

    // Holding the class's role already, the same profile is simply used.
    let untagged_ok = unique("profile-foreign-ok");
    let net_ok = network(&url, &untagged_ok).await;
    let ok_name = managed_instance_profile_name(&untagged_ok, REGION, "default");
    create_profile(&url, &ok_name, &[], Some(NODE_ROLE)).await;
    let resolved = self::cloud(&url, &untagged_ok, &net_ok)
        .await
        .resolve_node_class(&node_class(&untagged_ok, vec![alias()]), K8S)
        .await
        .unwrap();
    assert_eq!(resolved.instance_profile, Some(ok_name));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn an_instance_profile_named_by_the_class_is_used_as_is_and_nothing_is_created() {
    let url = moto!();
    let cluster = unique("profile-given");
    let net = network(&url, &cluster).await;
    let given = format!("{cluster}-nodes");
    create_profile(&url, &given, &[], Some(NODE_ROLE)).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.role = None;
    class.instance_profile = Some(given.clone());

    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();

    assert_eq!(resolved.instance_profile.as_deref(), Some(given.as_str()));
    let managed = managed_instance_profile_name(&cluster, REGION, "default");
    assert_eq!(instance_profile(&url, &managed).await, None);
    let profile = launch_template_profile(
        &url,
        &cloud,
        &cluster,
        launch_request(
            "default-g1",
            class,
            resolved,
            vec![on_demand("m5.large", "us-east-1a", 0.096)],
        ),
    )
    .await;
    assert_eq!(profile, Some(given));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_role_that_does_not_exist_is_reported_as_not_found() {
    let url = moto!();
    let cluster = unique("profile-norole");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.role = Some(format!("{cluster}-missing-role"));

    let err = cloud.resolve_node_class(&class, K8S).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::NotFound, "{err}");
    assert!(err.message.contains("missing-role"), "{err}");
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn in_a_dry_run_the_profile_is_named_but_not_created() {
    let url = moto!();
    let cluster = unique("profile-dry");
    let net = network(&url, &cluster).await;
    let cloud = cloud_with(&url, &cluster, &net, false).await;

    let resolved = cloud
        .resolve_node_class(&node_class(&cluster, vec![alias()]), K8S)
        .await
        .unwrap();

    let name = managed_instance_profile_name(&cluster, REGION, "default");
    assert_eq!(resolved.instance_profile.as_deref(), Some(name.as_str()));
    assert_eq!(instance_profile(&url, &name).await, None);
}

// ----- Instances Karpenter launched ----------------------------------------------------------

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn instances_karpenter_launched_for_the_cluster_are_listed_and_no_others() {
    let url = moto!();
    let cluster = unique("karpenter");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let class = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    // nodewright's own instance carries karpenter.sh/nodepool too: not listed.
    let ours = cloud
        .launch(&launch_request(
            "default-k0",
            class,
            resolved,
            vec![on_demand("m5.large", "us-east-1a", 0.096)],
        ))
        .await
        .unwrap();
    assert!(!ours.instance_id.is_empty());

    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&url).await);
    let cluster_tag = format!("kubernetes.io/cluster/{cluster}");
    let run = |tags: Vec<(&str, &str)>| {
        let ec2 = ec2.clone();
        let ami = net.ami_amd64.clone();
        let subnet = net.subnet_a.clone();
        let tags: Vec<(String, String)> = tags
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        async move {
            let tags: Vec<(&str, &str)> =
                tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            ec2.run_instances()
                .image_id(ami)
                .instance_type(aws_sdk_ec2::types::InstanceType::M5Xlarge)
                .min_count(1)
                .max_count(1)
                .subnet_id(subnet)
                .tag_specifications(tag_spec(ResourceType::Instance, &tags))
                .send()
                .await
                .unwrap()
                .instances
                .unwrap()[0]
                .instance_id
                .clone()
                .unwrap()
        }
    };
    // Karpenter v1: both cluster tags.
    let v1 = run(vec![
        (cluster_tag.as_str(), "owned"),
        ("eks:eks-cluster-name", cluster.as_str()),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "default-abcde"),
    ])
    .await;
    // Only one of the cluster tags each.
    let owned_only = run(vec![
        (cluster_tag.as_str(), "owned"),
        ("karpenter.sh/nodepool", "default"),
    ])
    .await;
    let eks_only = run(vec![
        ("eks:eks-cluster-name", cluster.as_str()),
        ("karpenter.sh/nodepool", "default"),
    ])
    .await;
    // Stopped: still there, still listed.
    let stopped = run(vec![
        (cluster_tag.as_str(), "owned"),
        ("karpenter.sh/nodepool", "default"),
    ])
    .await;
    ec2.stop_instances()
        .instance_ids(&stopped)
        .send()
        .await
        .unwrap();
    // Not listed: another cluster's, this cluster's without a NodePool tag, terminated.
    run(vec![
        ("kubernetes.io/cluster/someone-else", "owned"),
        ("eks:eks-cluster-name", "someone-else"),
        ("karpenter.sh/nodepool", "default"),
    ])
    .await;
    run(vec![(cluster_tag.as_str(), "owned")]).await;
    let terminated = run(vec![
        (cluster_tag.as_str(), "owned"),
        ("karpenter.sh/nodepool", "default"),
    ])
    .await;
    ec2.terminate_instances()
        .instance_ids(&terminated)
        .send()
        .await
        .unwrap();

    let listed = cloud
        .cluster_instances_launched_by_karpenter()
        .await
        .unwrap();

    let mut ids: Vec<&str> = listed.iter().map(|i| i.id.as_str()).collect();
    ids.sort();
    let mut expected = vec![
        v1.as_str(),
        owned_only.as_str(),
        eks_only.as_str(),
        stopped.as_str(),
    ];
    expected.sort();
    assert_eq!(ids, expected);
    let first = listed.iter().find(|i| i.id == v1).unwrap();
    assert_eq!(first.instance_type, "m5.xlarge");
    assert_eq!(first.zone, "us-east-1a");
    assert_eq!(first.claim_name.as_deref(), Some("default-abcde"));
    assert_eq!(first.capacity_type, CapacityType::OnDemand);
    assert!(first.launch_time > 0);
    // And none of them is nodewright's own.
    let owned: Vec<String> = cloud
        .owned_instances()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(owned, vec![ours.instance_id]);
}

// ----- EC2NodeClass launch fields, as moto's launch template holds them ---------------

/// Launches one claim of `class` (resolved as `resolved`) and reads back the launch
/// template the launch created: the cluster's only nodewright template.
async fn launch_and_read_template(
    url: &str,
    cloud: &Ec2Cloud,
    cluster: &str,
    class: &Ec2NodeClass,
    resolved: &ResolvedNodeClass,
) -> aws_sdk_ec2::types::ResponseLaunchTemplateData {
    let launched = cloud
        .launch(&launch_request(
            "fields-l1",
            class.clone(),
            resolved.clone(),
            vec![on_demand("c5.large", "us-east-1a", 0.085)],
        ))
        .await
        .unwrap();
    assert_eq!(launched.instance_type, "c5.large");
    let templates = launch_templates_named_nodewright(url, cluster).await;
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(url).await);
    assert_eq!(templates.len(), 1, "{templates:?}");
    ec2.describe_launch_template_versions()
        .launch_template_name(&templates[0])
        .send()
        .await
        .unwrap()
        .launch_template_versions
        .unwrap()
        .remove(0)
        .launch_template_data
        .unwrap()
}

fn decoded_user_data(data: &aws_sdk_ec2::types::ResponseLaunchTemplateData) -> String {
    use base64::Engine;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data.user_data.clone().unwrap())
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn network_interfaces_carry_prefixes_public_ip_and_connection_tracking_except_efa_only() {
    use nodewright_core::api::model::{ConnectionTracking, InterfaceType, NetworkInterface};
    let url = moto!();
    let cluster = unique("nics");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.network_interfaces = vec![
        NetworkInterface {
            network_card_index: 0,
            device_index: 0,
            interface_type: InterfaceType::Interface,
        },
        NetworkInterface {
            network_card_index: 1,
            device_index: 0,
            interface_type: InterfaceType::EfaOnly,
        },
    ];
    class.ip_prefix_count = Some(2);
    class.associate_public_ip_address = Some(false);
    class.connection_tracking = Some(ConnectionTracking {
        tcp_established_timeout: Some(3600),
        udp_stream_timeout: None,
        udp_timeout: Some(45),
    });
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let data = launch_and_read_template(&url, &cloud, &cluster, &class, &resolved).await;

    // The groups live on the interfaces, not on the template.
    assert!(data.security_group_ids.unwrap_or_default().is_empty());
    let nics = data.network_interfaces.unwrap();
    assert_eq!(nics.len(), 2, "{nics:?}");
    let primary = &nics[0];
    assert_eq!(primary.network_card_index, Some(0));
    assert_eq!(primary.device_index, Some(0));
    assert_eq!(primary.interface_type.as_deref(), Some("interface"));
    assert_eq!(primary.ipv4_prefix_count, Some(2));
    assert_eq!(primary.associate_public_ip_address, Some(false));
    assert_eq!(
        primary.groups.clone().unwrap_or_default(),
        resolved.security_group_ids
    );
    let tracking = primary.connection_tracking_specification.clone().unwrap();
    assert_eq!(tracking.tcp_established_timeout, Some(3600));
    assert_eq!(tracking.udp_stream_timeout, None);
    assert_eq!(tracking.udp_timeout, Some(45));
    // EC2 refuses addresses, a public IP and connection tracking on EFA-only interfaces.
    let efa = &nics[1];
    assert_eq!(efa.network_card_index, Some(1));
    assert_eq!(efa.device_index, Some(0));
    assert_eq!(efa.interface_type.as_deref(), Some("efa-only"));
    assert_eq!(efa.ipv4_prefix_count, None);
    assert_eq!(efa.associate_public_ip_address, None);
    assert_eq!(efa.connection_tracking_specification, None);
    assert_eq!(
        efa.groups.clone().unwrap_or_default(),
        resolved.security_group_ids
    );
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn without_network_interfaces_the_primary_one_carries_ip_prefixes_and_connection_tracking() {
    use nodewright_core::api::model::ConnectionTracking;
    let url = moto!();
    let cluster = unique("prefixes");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.ip_prefix_count = Some(3);
    class.connection_tracking = Some(ConnectionTracking {
        udp_stream_timeout: Some(120),
        ..ConnectionTracking::default()
    });
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let data = launch_and_read_template(&url, &cloud, &cluster, &class, &resolved).await;
    let nics = data.network_interfaces.unwrap();
    assert_eq!(nics.len(), 1, "{nics:?}");
    assert_eq!(nics[0].device_index, Some(0));
    assert_eq!(nics[0].ipv4_prefix_count, Some(3));
    assert_eq!(nics[0].associate_public_ip_address, None);
    assert_eq!(
        nics[0]
            .connection_tracking_specification
            .clone()
            .unwrap()
            .udp_stream_timeout,
        Some(120)
    );
    assert_eq!(
        nics[0].groups.clone().unwrap_or_default(),
        resolved.security_group_ids
    );
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_volume_initialization_rate_is_set_on_its_ebs_volume() {
    use nodewright_core::api::model::{BlockDevice, BlockDeviceMapping};
    let url = moto!();
    let cluster = unique("volinit");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&url).await);
    let volume = ec2
        .create_volume()
        .availability_zone("us-east-1a")
        .size(50)
        .send()
        .await
        .unwrap();
    let snapshot = ec2
        .create_snapshot()
        .volume_id(volume.volume_id.unwrap())
        .send()
        .await
        .unwrap()
        .snapshot_id
        .unwrap();
    let mut class = node_class(&cluster, vec![alias()]);
    class.block_device_mappings = vec![BlockDeviceMapping {
        device_name: "/dev/xvda".into(),
        ebs: Some(BlockDevice {
            volume_size: None,
            volume_type: Some("gp3".into()),
            iops: None,
            throughput: None,
            encrypted: None,
            kms_key_id: None,
            delete_on_termination: None,
            snapshot_id: Some(snapshot.clone()),
            volume_initialization_rate: Some(250),
        }),
        root_volume: false,
    }];
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let data = launch_and_read_template(&url, &cloud, &cluster, &class, &resolved).await;
    let ebs = data.block_device_mappings.unwrap()[0].ebs.clone().unwrap();
    assert_eq!(ebs.snapshot_id.as_deref(), Some(snapshot.as_str()));
    assert_eq!(ebs.volume_initialization_rate, Some(250));
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn raid0_instance_store_is_requested_in_the_launch_templates_user_data() {
    use nodewright_core::api::model::InstanceStorePolicy;
    let url = moto!();
    let cluster = unique("raid0");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.instance_store_policy = Some(InstanceStorePolicy::Raid0);
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let data = launch_and_read_template(&url, &cloud, &cluster, &class, &resolved).await;
    let user_data = decoded_user_data(&data);
    assert!(
        user_data.contains("\"localStorage\": {\n        \"strategy\": \"RAID0\"\n      }"),
        "{user_data}"
    );
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn a_placement_group_selector_becomes_the_launch_templates_placement_group() {
    use nodewright_core::api::model::PlacementGroupSelector;
    let url = moto!();
    let cluster = unique("pg");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    // moto has no placement groups (no Create/DescribePlacementGroups): the class is
    // resolved without its selector, and the launch carries it.
    let plain = node_class(&cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&plain, K8S).await.unwrap();
    let mut class = plain.clone();
    class.placement_group_selector = Some(PlacementGroupSelector::Name("training".into()));
    let data = launch_and_read_template(&url, &cloud, &cluster, &class, &resolved).await;
    let placement = data.placement.unwrap();
    assert_eq!(placement.group_name.as_deref(), Some("training"));
    assert_eq!(placement.group_id, None);

    let by_id_cluster = unique("pgid");
    let net = network(&url, &by_id_cluster).await;
    let cloud = self::cloud(&url, &by_id_cluster, &net).await;
    let plain = node_class(&by_id_cluster, vec![alias()]);
    let resolved = cloud.resolve_node_class(&plain, K8S).await.unwrap();
    let mut class = plain.clone();
    class.placement_group_selector = Some(PlacementGroupSelector::Id("pg-0123abcd".into()));
    let data = launch_and_read_template(&url, &cloud, &by_id_cluster, &class, &resolved).await;
    assert_eq!(
        data.placement.unwrap().group_id.as_deref(),
        Some("pg-0123abcd")
    );
}

#[tokio::test]
#[ignore = "needs moto: run through tests/moto.sh"]
async fn nested_virtualization_enabled_makes_the_class_not_ready_and_disabled_launches_as_before() {
    use nodewright_core::api::model::CpuOptions;
    let url = moto!();
    let cluster = unique("nested");
    let net = network(&url, &cluster).await;
    let cloud = cloud(&url, &cluster, &net).await;
    let mut class = node_class(&cluster, vec![alias()]);
    class.cpu_options = Some(CpuOptions {
        nested_virtualization: Some(true),
    });
    let err = cloud.resolve_node_class(&class, K8S).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid);
    assert!(
        err.to_string()
            .contains("cpuOptions.nestedVirtualization \"enabled\" is not supported"),
        "{err}"
    );
    // "disabled" is EC2's default: nothing to send.
    class.cpu_options = Some(CpuOptions {
        nested_virtualization: Some(false),
    });
    let resolved = cloud.resolve_node_class(&class, K8S).await.unwrap();
    let data = launch_and_read_template(&url, &cloud, &cluster, &class, &resolved).await;
    assert_eq!(data.cpu_options, None);
}
