//! User data for nodes: AL2023 (nodeadm `NodeConfig` in a MIME multipart document)
//! and Bottlerocket (TOML settings). Pure functions over the cluster and the node's
//! labels and taints.
//!
//! `instanceStorePolicy: RAID0` is written as Karpenter writes it: nodeadm's
//! `spec.instance.localStorage.strategy: RAID0` on AL2023, and on Bottlerocket an
//! essential bootstrap command, run at every boot, that makes the instance store one
//! array (`apiclient ephemeral-storage init`) and binds the containerd, kubelet and pod
//! log directories onto it.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};

use nodewright_core::api::model::{Kubelet, Taint};

use crate::eks::ClusterInfo;

pub const MIME_BOUNDARY: &str = "//";

/// `key=value:Effect` (or `key:Effect`).
pub fn taint_flag_value(taint: &Taint) -> String {
    match &taint.value {
        Some(v) => format!("{}={}:{}", taint.key, v, taint.effect.as_str()),
        None => format!("{}:{}", taint.key, taint.effect.as_str()),
    }
}

/// The nodeadm NodeConfig (as JSON, which is YAML) for one node.
pub fn node_config(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: &Kubelet,
) -> Value {
    let mut flags = Vec::new();
    if !labels.is_empty() {
        let joined: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        flags.push(format!("--node-labels={}", joined.join(",")));
    }
    if !taints.is_empty() {
        let joined: Vec<String> = taints.iter().map(taint_flag_value).collect();
        flags.push(format!("--register-with-taints={}", joined.join(",")));
    }
    // Karpenter's kubelet fields are KubeletConfiguration fields of the same names.
    let mut config = match &kubelet.raw {
        Some(Value::Object(map)) => map.clone(),
        _ => serde_json::Map::new(),
    };
    if let Some(max_pods) = kubelet.max_pods {
        config.insert("maxPods".into(), json!(max_pods));
    }
    if !kubelet.cluster_dns.is_empty() {
        config.insert("clusterDNS".into(), json!(kubelet.cluster_dns));
    }
    let mut cluster_spec = serde_json::Map::new();
    cluster_spec.insert("name".into(), json!(cluster.name));
    cluster_spec.insert("apiServerEndpoint".into(), json!(cluster.endpoint));
    cluster_spec.insert(
        "certificateAuthority".into(),
        json!(base64::engine::general_purpose::STANDARD.encode(&cluster.ca_pem)),
    );
    if let Some(cidr) = &cluster.service_cidr {
        cluster_spec.insert("cidr".into(), json!(cidr));
    }
    json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": cluster_spec,
            "kubelet": { "config": config, "flags": flags },
        }
    })
}

/// The MIME parts of the user's own user data: its parts if it is already a MIME
/// multipart document, else one part whose type is guessed from its content.
fn custom_parts(custom: &str) -> Vec<String> {
    if let Some(boundary) = multipart_boundary(custom) {
        let delimiter = format!("--{boundary}");
        return custom
            .split(&delimiter)
            .skip(1) // the MIME headers before the first part
            .map(|p| p.trim_start_matches(['\r', '\n']))
            .filter(|p| !p.starts_with("--")) // the closing delimiter
            .map(|p| p.trim_end().to_string())
            .filter(|p| !p.is_empty())
            .collect();
    }
    let content_type = if custom.contains("node.eks.aws/") && custom.contains("NodeConfig") {
        "application/node.eks.aws"
    } else if custom.trim_start().starts_with("#cloud-config") {
        "text/cloud-config"
    } else {
        "text/x-shellscript; charset=\"us-ascii\""
    };
    vec![format!(
        "Content-Type: {content_type}\n\n{}",
        custom.trim_end()
    )]
}

fn multipart_boundary(text: &str) -> Option<String> {
    let header_end = text.find("\n\n").or_else(|| text.find("\r\n\r\n"))?;
    let headers = &text[..header_end];
    let line = headers.lines().find(|l| {
        l.to_ascii_lowercase()
            .starts_with("content-type: multipart/")
    })?;
    let at = line.find("boundary=")? + "boundary=".len();
    let b = line[at..].split(';').next()?.trim().trim_matches('"');
    (!b.is_empty()).then(|| b.to_string())
}

/// AL2023 user data: the user's parts first, then nodewright's NodeConfig (nodeadm
/// merges NodeConfigs in order, so the cluster settings nodewright writes win). With
/// `raid0`, nodeadm makes the instance store one RAID-0 array for the node's state.
pub fn al2023_user_data(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: &Kubelet,
    custom: Option<&str>,
    raid0: bool,
) -> String {
    let mut parts: Vec<String> = custom.map(custom_parts).unwrap_or_default();
    let mut config = node_config(cluster, labels, taints, kubelet);
    if raid0 {
        config["spec"]["instance"] = json!({ "localStorage": { "strategy": "RAID0" } });
    }
    let config = serde_json::to_string_pretty(&config).expect("JSON value");
    parts.push(format!(
        "Content-Type: application/node.eks.aws\n\n{config}"
    ));
    let mut out = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n"
    );
    for part in parts {
        out.push_str(&format!("--{MIME_BOUNDARY}\n{part}\n\n"));
    }
    out.push_str(&format!("--{MIME_BOUNDARY}--\n"));
    out
}

fn toml_string(s: &str) -> String {
    // JSON string escapes are valid TOML basic-string escapes.
    serde_json::to_string(s).expect("string")
}

/// Bottlerocket user data: the user's TOML first, then the cluster settings. With
/// `raid0`, a bootstrap command puts the node's state on the instance store.
pub fn bottlerocket_user_data(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: &Kubelet,
    custom: Option<&str>,
    raid0: bool,
) -> String {
    let mut out = String::new();
    if let Some(custom) = custom {
        out.push_str(custom.trim_end());
        out.push_str("\n\n");
    }
    out.push_str("[settings.kubernetes]\n");
    out.push_str(&format!("cluster-name = {}\n", toml_string(&cluster.name)));
    out.push_str(&format!(
        "api-server = {}\n",
        toml_string(&cluster.endpoint)
    ));
    out.push_str(&format!(
        "cluster-certificate = {}\n",
        toml_string(&base64::engine::general_purpose::STANDARD.encode(&cluster.ca_pem))
    ));
    if let Some(max_pods) = kubelet.max_pods {
        out.push_str(&format!("max-pods = {max_pods}\n"));
    }
    if !kubelet.cluster_dns.is_empty() {
        let ips: Vec<String> = kubelet.cluster_dns.iter().map(|s| toml_string(s)).collect();
        out.push_str(&format!("cluster-dns-ip = [{}]\n", ips.join(", ")));
    }
    out.push_str("\n[settings.kubernetes.node-labels]\n");
    for (k, v) in labels {
        out.push_str(&format!("{} = {}\n", toml_string(k), toml_string(v)));
    }
    let mut by_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for t in taints {
        let value = format!("{}:{}", t.value.as_deref().unwrap_or(""), t.effect.as_str());
        by_key.entry(&t.key).or_default().push(toml_string(&value));
    }
    out.push_str("\n[settings.kubernetes.node-taints]\n");
    for (k, values) in by_key {
        out.push_str(&format!("{} = [{}]\n", toml_string(k), values.join(", ")));
    }
    if raid0 {
        out.push_str(BOTTLEROCKET_RAID0);
    }
    out
}

/// The bootstrap command Karpenter gives Bottlerocket for `instanceStorePolicy: RAID0`
/// (the explicit `--dirs` form, which every Bottlerocket release with
/// `ephemeral-storage` accepts).
const BOTTLEROCKET_RAID0: &str = "\n[settings.bootstrap-commands.000-mount-instance-storage]\ncommands = [[\"apiclient\", \"ephemeral-storage\", \"init\"], [\"apiclient\", \"ephemeral-storage\", \"bind\", \"--dirs\", \"/var/lib/containerd\", \"/var/lib/kubelet\", \"/var/log/pods\"]]\nmode = \"always\"\nessential = true\n";

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::api::model::TaintEffect;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            arn: None,
            name: "prod".into(),
            endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com".into(),
            ca_pem: b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec(),
            version: "1.33".into(),
            service_cidr: Some("10.100.0.0/16".into()),
        }
    }

    fn unregistered() -> Taint {
        Taint {
            key: "karpenter.sh/unregistered".into(),
            value: Some("true".into()),
            effect: TaintEffect::NoExecute,
        }
    }

    #[test]
    fn al2023_user_data_is_mime_with_a_node_config_carrying_labels_and_taints() {
        let labels = BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("team".to_string(), "web".to_string()),
        ]);
        let ud = al2023_user_data(
            &cluster(),
            &labels,
            &[unregistered()],
            &Kubelet::default(),
            None,
            false,
        );
        assert!(
            ud.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"")
        );
        assert!(ud.contains("Content-Type: application/node.eks.aws"));
        assert!(
            ud.contains("\"apiServerEndpoint\": \"https://ABC.gr7.us-east-1.eks.amazonaws.com\"")
        );
        assert!(ud.contains("\"cidr\": \"10.100.0.0/16\""));
        assert!(ud.contains("--node-labels=karpenter.sh/nodepool=default,team=web"));
        assert!(ud.contains("--register-with-taints=karpenter.sh/unregistered=true:NoExecute"));
        assert!(ud.trim_end().ends_with("--//--"));
    }

    #[test]
    fn the_node_config_gives_the_kubelet_the_density_settings_planning_assumed() {
        let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: dense}\nspec:\n  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n  kubelet:\n    maxPods: 8\n    podsPerCore: 2\n    kubeReserved: {memory: 1Gi, cpu: 200m}\n    systemReserved: {memory: 512Mi}\n    evictionHard: {memory.available: 5%, nodefs.available: 10%}\n    evictionSoft: {memory.available: 10%}\n    evictionSoftGracePeriod: {memory.available: 1m30s}\n    imageGCHighThresholdPercent: 80\n";
        let kubelet = nodewright_core::api::load(&[("class.yaml".into(), class.into())])
            .unwrap_or_else(|_| panic!("valid class"))
            .node_classes
            .remove(0)
            .kubelet;
        let config = node_config(&cluster(), &BTreeMap::new(), &[], &kubelet);
        let kubelet_config = &config["spec"]["kubelet"]["config"];
        assert_eq!(
            kubelet_config,
            &json!({
                "maxPods": 8,
                "podsPerCore": 2,
                "kubeReserved": {"memory": "1Gi", "cpu": "200m"},
                "systemReserved": {"memory": "512Mi"},
                "evictionHard": {"memory.available": "5%", "nodefs.available": "10%"},
                "evictionSoft": {"memory.available": "10%"},
                "evictionSoftGracePeriod": {"memory.available": "1m30s"},
                "imageGCHighThresholdPercent": 80,
            })
        );
    }

    #[test]
    fn custom_user_data_becomes_its_own_part_before_the_node_config() {
        let ud = al2023_user_data(
            &cluster(),
            &BTreeMap::new(),
            &[],
            &Kubelet::default(),
            Some("#!/bin/bash\necho hi\n"),
            false,
        );
        let script = ud
            .find("Content-Type: text/x-shellscript")
            .expect("script part");
        let config = ud
            .find("Content-Type: application/node.eks.aws")
            .expect("config part");
        assert!(script < config);
        assert!(ud.contains("echo hi"));
    }

    #[test]
    fn custom_mime_user_data_is_merged_part_by_part() {
        let custom = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: text/x-shellscript\n\necho one\n--BOUNDARY\nContent-Type: text/x-shellscript\n\necho two\n--BOUNDARY--\n";
        let ud = al2023_user_data(
            &cluster(),
            &BTreeMap::new(),
            &[],
            &Kubelet::default(),
            Some(custom),
            false,
        );
        assert!(!ud.contains("BOUNDARY"));
        assert_eq!(ud.matches("Content-Type: text/x-shellscript").count(), 2);
        assert_eq!(ud.matches("--//\n").count(), 3);
    }

    #[test]
    fn raid0_asks_nodeadm_for_a_raid0_local_storage_strategy() {
        let ud = al2023_user_data(
            &cluster(),
            &BTreeMap::new(),
            &[],
            &Kubelet::default(),
            None,
            true,
        );
        let at = ud.find("{\n").expect("node config");
        let end = ud[at..].find("\n\n--//").expect("end of part") + at;
        let config: Value = serde_json::from_str(&ud[at..end]).expect("JSON node config");
        assert_eq!(
            config["spec"]["instance"],
            json!({"localStorage": {"strategy": "RAID0"}})
        );
        let plain = al2023_user_data(
            &cluster(),
            &BTreeMap::new(),
            &[],
            &Kubelet::default(),
            None,
            false,
        );
        assert!(!plain.contains("localStorage"));
    }

    #[test]
    fn raid0_on_bottlerocket_is_an_essential_bootstrap_command_run_at_every_boot() {
        let ud = bottlerocket_user_data(
            &cluster(),
            &BTreeMap::new(),
            &[unregistered()],
            &Kubelet::default(),
            None,
            true,
        );
        assert!(ud.contains(
            "[settings.bootstrap-commands.000-mount-instance-storage]\ncommands = [[\"apiclient\", \"ephemeral-storage\", \"init\"], [\"apiclient\", \"ephemeral-storage\", \"bind\", \"--dirs\", \"/var/lib/containerd\", \"/var/lib/kubelet\", \"/var/log/pods\"]]\nmode = \"always\"\nessential = true\n"
        ), "{ud}");
        let plain = bottlerocket_user_data(
            &cluster(),
            &BTreeMap::new(),
            &[],
            &Kubelet::default(),
            None,
            false,
        );
        assert!(!plain.contains("bootstrap-commands"));
    }
}
