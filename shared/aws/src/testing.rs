//! Test support against moto's server, shared by this crate's tests and the Lambda
//! end-to-end tests: the emulator URL, unique names, SDK clients, the table created
//! from infra/dynamodb-table.json, a tagged network with AMIs and AL2023 alias
//! parameters under a test prefix, and node roles.
//! Compiled only with the `test-support` feature; panics are the point here.
//!
//! A test that needs moto is marked `#[ignore = "needs moto: run through tests/moto.sh"]`,
//! so a plain `cargo test` reports it as ignored rather than passed, and
//! `bash tests/moto.sh cargo test -- --include-ignored` (what tests/run.sh and CI run)
//! runs it. Without moto, [`moto_url`] fails the test; it never passes having done nothing.

use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    PointInTimeRecoverySpecification, Projection, ProjectionType, ScalarAttributeType,
    SseSpecification, TimeToLiveSpecification,
};
use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use serde_json::Value;

pub use aws_config::SdkConfig;
pub use aws_sdk_dynamodb::Client as DynamoClient;
pub use aws_sdk_ec2::Client as Ec2Client;
pub use aws_sdk_eks::Client as EksClient;
pub use aws_sdk_iam::Client as IamClient;

/// `let url = moto!();` — the emulator URL ([`moto_url`]).
#[macro_export]
macro_rules! moto {
    () => {
        $crate::testing::moto_url()
    };
}

pub const REGION: &str = "us-east-1";
pub const K8S: &str = "1.33";

/// moto's URL from `NODEWRIGHT_MOTO_URL` (tests/moto.sh sets it); panics without it.
pub fn moto_url() -> String {
    match std::env::var("NODEWRIGHT_MOTO_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "NODEWRIGHT_MOTO_URL is not set: this test needs moto; run it through tests/moto.sh, \
             e.g. bash tests/moto.sh cargo test -p <crate> -- --include-ignored"
        ),
    }
}

pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{nanos:x}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub async fn sdk_config(url: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(url)
        .region(aws_config::Region::new(REGION))
        .credentials_provider(aws_credential_types::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .load()
        .await
}

/// Creates a table from infra/dynamodb-table.json (the CloudFormation Properties).
pub async fn create_table_from_definition(url: &str, table: &str) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../infra/dynamodb-table.json"
    ))
    .unwrap();
    let def: Value = serde_json::from_str(&text).unwrap();
    let key_schema = |v: &Value| -> Vec<KeySchemaElement> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|k| {
                KeySchemaElement::builder()
                    .attribute_name(k["AttributeName"].as_str().unwrap())
                    .key_type(KeyType::from(k["KeyType"].as_str().unwrap()))
                    .build()
                    .unwrap()
            })
            .collect()
    };
    let client = aws_sdk_dynamodb::Client::new(&sdk_config(url).await);
    let mut create = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::from(def["BillingMode"].as_str().unwrap()))
        .set_key_schema(Some(key_schema(&def["KeySchema"])))
        .sse_specification(
            SseSpecification::builder()
                .enabled(def["SSESpecification"]["SSEEnabled"].as_bool().unwrap())
                .build(),
        );
    for a in def["AttributeDefinitions"].as_array().unwrap() {
        create = create.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(a["AttributeName"].as_str().unwrap())
                .attribute_type(ScalarAttributeType::from(
                    a["AttributeType"].as_str().unwrap(),
                ))
                .build()
                .unwrap(),
        );
    }
    for g in def["GlobalSecondaryIndexes"].as_array().unwrap() {
        create = create.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(g["IndexName"].as_str().unwrap())
                .set_key_schema(Some(key_schema(&g["KeySchema"])))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::from(
                            g["Projection"]["ProjectionType"].as_str().unwrap(),
                        ))
                        .build(),
                )
                .build()
                .unwrap(),
        );
    }
    create.send().await.unwrap();
    let ttl = &def["TimeToLiveSpecification"];
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(ttl["AttributeName"].as_str().unwrap())
                .enabled(ttl["Enabled"].as_bool().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    client
        .update_continuous_backups()
        .table_name(table)
        .point_in_time_recovery_specification(
            PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(
                    def["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"]
                        .as_bool()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// An IAM role EC2 instances may assume (a node role), created unless it exists (IAM
/// is account-wide in moto too: tests share role names).
pub async fn node_role(url: &str, name: &str) {
    let iam = aws_sdk_iam::Client::new(&sdk_config(url).await);
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    match iam
        .create_role()
        .role_name(name)
        .assume_role_policy_document(trust)
        .send()
        .await
    {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_entity_already_exists_exception()) => {}
        Err(e) => panic!("create role {name}: {e:?}"),
    }
}

pub struct Network {
    pub subnet_a: String,
    pub subnet_b: String,
    pub subnet_b2: String,
    pub security_group: String,
    pub ami_amd64: String,
    pub ami_arm64: String,
    pub ssm_prefix: String,
}

pub fn tag_spec(resource: ResourceType, tags: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

/// An EKS cluster named `cluster` in moto, in `subnet` (the provisioner reads its
/// endpoint, version and CA at a cold start).
pub async fn eks_cluster(url: &str, cluster: &str, subnet: &str) -> Result<(), String> {
    aws_sdk_eks::Client::new(&sdk_config(url).await)
        .create_cluster()
        .name(cluster)
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .version(K8S)
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .subnet_ids(subnet)
                .build(),
        )
        .send()
        .await
        .map(|_| ())
        .map_err(|e| format!("CreateCluster {cluster:?} in moto: {e:?}"))
}

/// A VPC with tagged subnets in two zones, a tagged security group, two tagged AMIs
/// and the AL2023 alias parameters under a test prefix.
pub async fn network(url: &str, cluster: &str) -> Network {
    let config = sdk_config(url).await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let ssm = aws_sdk_ssm::Client::new(&config);
    let discovery = ("karpenter.sh/discovery", cluster);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap()
        .vpc
        .unwrap()
        .vpc_id
        .unwrap();
    let subnet = |cidr: &'static str, zone: &'static str, tags: Vec<(&'static str, String)>| {
        let ec2 = ec2.clone();
        let vpc = vpc.clone();
        async move {
            let tags: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (*k, v.as_str())).collect();
            ec2.create_subnet()
                .vpc_id(vpc)
                .cidr_block(cidr)
                .availability_zone(zone)
                .tag_specifications(tag_spec(ResourceType::Subnet, &tags))
                .send()
                .await
                .unwrap()
                .subnet
                .unwrap()
                .subnet_id
                .unwrap()
        }
    };
    let subnet_a = subnet(
        "10.0.1.0/24",
        "us-east-1a",
        vec![(discovery.0, cluster.to_string())],
    )
    .await;
    // Two subnets in us-east-1b: the larger one has more free addresses.
    let subnet_b = subnet(
        "10.0.8.0/21",
        "us-east-1b",
        vec![(discovery.0, cluster.to_string())],
    )
    .await;
    let subnet_b2 = subnet(
        "10.0.2.0/26",
        "us-east-1b",
        vec![(discovery.0, cluster.to_string())],
    )
    .await;
    // Not selected (no discovery tag).
    subnet(
        "10.0.3.0/24",
        "us-east-1c",
        vec![("other", "x".to_string())],
    )
    .await;

    let security_group = ec2
        .create_security_group()
        .group_name(format!("{cluster}-nodes"))
        .description("nodes")
        .vpc_id(&vpc)
        .tag_specifications(tag_spec(ResourceType::SecurityGroup, &[discovery]))
        .send()
        .await
        .unwrap()
        .group_id
        .unwrap();

    // moto ships Amazon AMIs; pick one per architecture and tag it for this test. The
    // least tagged one: every emulated cluster of a run tags one (the moto server is
    // shared), and EC2 allows 50 tags on a resource.
    let images = ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .unwrap()
        .images
        .unwrap();
    let pick = |arch: &str| {
        images
            .iter()
            .filter(|i| i.architecture.as_ref().map(|a| a.as_str()) == Some(arch))
            // moto also lists images with ids EC2 would not accept (`ami-ekswin`).
            .filter(|i| {
                i.image_id
                    .as_deref()
                    .and_then(|id| id.strip_prefix("ami-"))
                    .is_some_and(|hex| hex.chars().all(|c| c.is_ascii_hexdigit()))
            })
            .min_by_key(|i| i.tags.as_ref().map_or(0, Vec::len))
            .and_then(|i| i.image_id.clone())
            .unwrap_or_else(|| panic!("moto has no {arch} AMI"))
    };
    let (ami_amd64, ami_arm64) = (pick("x86_64"), pick("arm64"));
    ec2.create_tags()
        .resources(&ami_amd64)
        .tags(
            Tag::builder()
                .key(format!("nodewright-test/{cluster}"))
                .value("node-image")
                .build(),
        )
        .send()
        .await
        .unwrap();

    let ssm_prefix = format!("/{}/aws/service", unique("nodewright-test"));
    for (arch, ami) in [("x86_64", &ami_amd64), ("arm64", &ami_arm64)] {
        ssm.put_parameter()
            .name(format!("{ssm_prefix}/eks/optimized-ami/{K8S}/amazon-linux-2023/{arch}/standard/recommended/image_id"))
            .value(ami)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .send()
            .await
            .unwrap();
    }
    Network {
        subnet_a,
        subnet_b,
        subnet_b2,
        security_group,
        ami_amd64,
        ami_arm64,
        ssm_prefix,
    }
}
