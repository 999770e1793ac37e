//! Every function's configuration, read in one place from the environment so a
//! missing or malformed setting fails the cold start with a message naming it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use nodewright_core::api::duration::parse_duration;
use nodewright_core::default_spread::SchedulerConfig;
use nodewright_core::interruption::RebalanceAction;
use nodewright_core::repair::RepairSettings;
use nodewright_core::scheduling::requirements::MinValuesPolicy;
use nodewright_kube::ApiRate;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `NODEWRIGHT_CLUSTER_NAME`: the EKS cluster.
    pub cluster_name: String,
    /// `NODEWRIGHT_TABLE_NAME`: the DynamoDB table.
    pub table_name: String,
    /// `NODEWRIGHT_POLL_INTERVAL` (default 5s): how often pending pods are re-read
    /// while the invocation keeps its minute alive.
    pub poll_interval: Duration,
    /// `NODEWRIGHT_DRY_RUN` (default false): plan and record decisions, launch nothing.
    pub dry_run: bool,
    /// `NODEWRIGHT_KUBECONFIG`: use this kubeconfig instead of EKS token auth (local runs).
    pub kubeconfig: Option<PathBuf>,
    /// `NODEWRIGHT_SSM_PUBLIC_PREFIX` (default /aws/service): where the public EKS AMI
    /// parameters live. Only emulators need another value (moto refuses `/aws/...`).
    pub ssm_public_prefix: String,
    /// `NODEWRIGHT_REBALANCE_ACTION` (interruption; default replace): ignore | cordon | replace.
    pub rebalance_action: RebalanceAction,
    /// `NODEWRIGHT_PROVISIONER_FUNCTION` (interruption): the provisioner to invoke
    /// asynchronously after evictions, so replacements do not wait for the schedule.
    pub provisioner_function: Option<String>,
    /// `NODEWRIGHT_ADOPT_KARPENTER_NODES` (default false): record the nodes Karpenter
    /// launched for this cluster as claims, so consolidation, drift, expiry and
    /// interruptions cover them after a migration. Turn on once Karpenter is gone.
    pub adopt_karpenter_nodes: bool,
    /// `NODEWRIGHT_SPOT_TO_SPOT` (default false): consolidation may replace spot nodes
    /// by cheaper spot nodes (Karpenter's SpotToSpotConsolidation). Read by the
    /// disruption function, and by the provisioner, whose polls validate its commands.
    pub spot_to_spot: bool,
    /// `NODEWRIGHT_NODE_REPAIR` (default true): the provisioner replaces nodes that stay
    /// unhealthy (Karpenter's NodeRepair, off by default there; on in EKS Auto Mode).
    pub node_repair: bool,
    /// `NODEWRIGHT_LEGACY_NODE_REPAIR`, `NODEWRIGHT_REBOOT_FOR_REPAIR`,
    /// `NODEWRIGHT_TERMINATE_FIRST_REPAIR` (all default false): repair as Karpenter v1.14
    /// did; reboot the GPU faults a reboot clears; terminate first when a NodePool
    /// cannot stage a replacement (see `nodewright_engine::repair`).
    pub repair: RepairSettings,
    /// `NODEWRIGHT_MIN_VALUES_POLICY` (default Strict): Strict | BestEffort, Karpenter's
    /// `MIN_VALUES_POLICY`. With BestEffort a NodePool's minValues that the types fitting
    /// a claim cannot keep is lowered to what they have instead of leaving the pods
    /// pending. Read by the provisioner and by the disruption function (replacements).
    pub min_values_policy: MinValuesPolicy,
    /// `NODEWRIGHT_KUBE_QPS` (default 20) and `NODEWRIGHT_KUBE_BURST` (default 40): the
    /// most requests per second the function sends the Kubernetes API on average, and
    /// at once (client-go's QPS and burst; see `nodewright_kube::client`).
    pub api_rate: ApiRate,
    /// `NODEWRIGHT_ZONAL_SHIFT` (default false): read the cluster's ARC zonal shifts and
    /// autoshifts; while one is in force, nothing launches in its zone and consolidation
    /// leaves the zone's nodes alone (Karpenter-AWS's `ENABLE_ZONAL_SHIFT`). Read by
    /// the provisioner and the disruption function alike.
    pub zonal_shift: bool,
    /// `NODEWRIGHT_SCHEDULER_CONFIG` (default none): the default topology spread
    /// constraints of the cluster's kube-scheduler, YAML or JSON
    /// (`podTopologySpread.defaultConstraints`, Karpenter's `--scheduler-config`). A pod
    /// without constraints of its own is planned with them; the functions then watch
    /// Services, ReplicaSets, StatefulSets and ReplicationControllers for the selectors.
    pub scheduler_config: SchedulerConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is not set (required)")]
    Missing(&'static str),
    #[error("{name}: {problems}")]
    Invalid {
        name: &'static str,
        problems: String,
    },
    #[error("{name}={value:?}: {expected}")]
    Malformed {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(&std::env::vars().collect())
    }

    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let get = |name: &str| {
            vars.get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let required = |name: &'static str| get(name).ok_or(ConfigError::Missing(name));
        let poll_interval = match get("NODEWRIGHT_POLL_INTERVAL") {
            None => Duration::from_secs(5),
            Some(v) => match parse_duration(&v) {
                Some(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(60) => d,
                _ => {
                    return Err(ConfigError::Malformed {
                        name: "NODEWRIGHT_POLL_INTERVAL",
                        value: v,
                        expected: "a duration between 1s and 60s, like \"5s\"",
                    });
                }
            },
        };
        let flag_or = |name: &'static str, default: bool| match get(name).as_deref() {
            None => Ok(default),
            Some("true" | "1" | "yes") => Ok(true),
            Some("false" | "0" | "no") => Ok(false),
            Some(v) => Err(ConfigError::Malformed {
                name,
                value: v.to_string(),
                expected: "true or false",
            }),
        };
        let flag = |name: &'static str| flag_or(name, false);
        let dry_run = flag("NODEWRIGHT_DRY_RUN")?;
        let node_repair = flag_or("NODEWRIGHT_NODE_REPAIR", true)?;
        let legacy_repair = flag("NODEWRIGHT_LEGACY_NODE_REPAIR")?;
        let terminate_first = flag("NODEWRIGHT_TERMINATE_FIRST_REPAIR")?;
        if legacy_repair && terminate_first {
            return Err(ConfigError::Malformed {
                name: "NODEWRIGHT_TERMINATE_FIRST_REPAIR",
                value: "true".into(),
                expected: "false while NODEWRIGHT_LEGACY_NODE_REPAIR is true (the legacy repair stages no replacement)",
            });
        }
        let repair = if legacy_repair {
            RepairSettings::legacy()
        } else {
            RepairSettings::aws(flag("NODEWRIGHT_REBOOT_FOR_REPAIR")?, terminate_first)
        };
        let adopt_karpenter_nodes = flag("NODEWRIGHT_ADOPT_KARPENTER_NODES")?;
        let spot_to_spot = flag("NODEWRIGHT_SPOT_TO_SPOT")?;
        let ssm_public_prefix =
            get("NODEWRIGHT_SSM_PUBLIC_PREFIX").unwrap_or_else(|| "/aws/service".into());
        if !ssm_public_prefix.starts_with('/') {
            return Err(ConfigError::Malformed {
                name: "NODEWRIGHT_SSM_PUBLIC_PREFIX",
                value: ssm_public_prefix,
                expected: "an SSM parameter path starting with /",
            });
        }
        let rebalance_action = match get("NODEWRIGHT_REBALANCE_ACTION") {
            None => RebalanceAction::Replace,
            Some(v) => v.parse().map_err(|_| ConfigError::Malformed {
                name: "NODEWRIGHT_REBALANCE_ACTION",
                value: v.clone(),
                expected: "ignore, cordon or replace",
            })?,
        };
        let min_values_policy = match get("NODEWRIGHT_MIN_VALUES_POLICY") {
            None => MinValuesPolicy::Strict,
            Some(v) => MinValuesPolicy::parse(&v).ok_or(ConfigError::Malformed {
                name: "NODEWRIGHT_MIN_VALUES_POLICY",
                value: v.clone(),
                expected: "Strict or BestEffort",
            })?,
        };
        let default_rate = ApiRate::default();
        let qps = match get("NODEWRIGHT_KUBE_QPS") {
            None => default_rate.qps,
            Some(v) => match v.parse::<f64>() {
                Ok(q) if q > 0.0 && q <= 1000.0 => q,
                _ => {
                    return Err(ConfigError::Malformed {
                        name: "NODEWRIGHT_KUBE_QPS",
                        value: v,
                        expected: "requests per second, a number above 0 and at most 1000",
                    });
                }
            },
        };
        let burst = match get("NODEWRIGHT_KUBE_BURST") {
            None => default_rate.burst,
            Some(v) => match v.parse::<u32>() {
                Ok(b) if (1..=10_000).contains(&b) => b,
                _ => {
                    return Err(ConfigError::Malformed {
                        name: "NODEWRIGHT_KUBE_BURST",
                        value: v,
                        expected: "a whole number of requests from 1 to 10000",
                    });
                }
            },
        };
        Ok(Config {
            cluster_name: required("NODEWRIGHT_CLUSTER_NAME")?,
            table_name: required("NODEWRIGHT_TABLE_NAME")?,
            poll_interval,
            dry_run,
            kubeconfig: get("NODEWRIGHT_KUBECONFIG").map(PathBuf::from),
            ssm_public_prefix: ssm_public_prefix.trim_end_matches('/').to_string(),
            rebalance_action,
            provisioner_function: get("NODEWRIGHT_PROVISIONER_FUNCTION"),
            adopt_karpenter_nodes,
            spot_to_spot,
            node_repair,
            repair,
            min_values_policy,
            api_rate: ApiRate { qps, burst },
            zonal_shift: flag("NODEWRIGHT_ZONAL_SHIFT")?,
            scheduler_config: match get("NODEWRIGHT_SCHEDULER_CONFIG") {
                None => SchedulerConfig::default(),
                Some(text) => {
                    SchedulerConfig::parse(&text).map_err(|problems| ConfigError::Invalid {
                        name: "NODEWRIGHT_SCHEDULER_CONFIG",
                        problems: problems.join("; "),
                    })?
                }
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_two_required_settings_are_enough_and_defaults_apply() {
        let c = Config::from_vars(&vars(&[
            ("NODEWRIGHT_CLUSTER_NAME", "prod"),
            ("NODEWRIGHT_TABLE_NAME", "nw"),
        ]))
        .unwrap();
        assert_eq!(c.poll_interval, Duration::from_secs(5));
        assert!(!c.dry_run);
        assert!(!c.spot_to_spot);
        assert!(c.node_repair, "node repair is on unless turned off");
        assert_eq!(
            c.repair,
            RepairSettings::aws(false, false),
            "as Karpenter v1.15"
        );
        assert_eq!(c.kubeconfig, None);
        assert_eq!(c.ssm_public_prefix, "/aws/service");
        assert_eq!(c.rebalance_action, RebalanceAction::Replace);
        assert!(!c.adopt_karpenter_nodes, "adoption is opt-in");
        assert_eq!(c.min_values_policy, MinValuesPolicy::Strict);
        assert!(!c.zonal_shift, "zonal shift is opt-in, as Karpenter's");
        assert!(
            c.scheduler_config.is_empty(),
            "no default spread unless written"
        );
    }

    #[test]
    fn a_scheduler_config_is_read_and_a_bad_one_names_the_variable_and_the_field() {
        let with = |v: &str| {
            Config::from_vars(&vars(&[
                ("NODEWRIGHT_CLUSTER_NAME", "prod"),
                ("NODEWRIGHT_TABLE_NAME", "nw"),
                ("NODEWRIGHT_SCHEDULER_CONFIG", v),
            ]))
        };
        let c = with(r#"{"podTopologySpread": {"defaultConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]}}"#).unwrap();
        assert_eq!(c.scheduler_config.default_constraints.len(), 1);
        let e = with(r#"{"podTopologySpread": {"defaultConstraints": [{"maxSkew": 0, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "NODEWRIGHT_SCHEDULER_CONFIG: podTopologySpread.defaultConstraints[0].maxSkew: 0"
            ),
            "{e}"
        );
    }

    #[test]
    fn zonal_shift_is_turned_on_by_its_flag_and_a_bad_value_is_named() {
        let with = |v: &str| {
            Config::from_vars(&vars(&[
                ("NODEWRIGHT_CLUSTER_NAME", "prod"),
                ("NODEWRIGHT_TABLE_NAME", "nw"),
                ("NODEWRIGHT_ZONAL_SHIFT", v),
            ]))
        };
        assert!(with("true").unwrap().zonal_shift);
        assert_eq!(
            with("on").unwrap_err().to_string(),
            "NODEWRIGHT_ZONAL_SHIFT=\"on\": true or false"
        );
    }

    #[test]
    fn the_min_values_policy_is_read_in_karpenters_spelling() {
        let with = |v: &str| {
            Config::from_vars(&vars(&[
                ("NODEWRIGHT_CLUSTER_NAME", "prod"),
                ("NODEWRIGHT_TABLE_NAME", "nw"),
                ("NODEWRIGHT_MIN_VALUES_POLICY", v),
            ]))
        };
        assert_eq!(
            with("BestEffort").unwrap().min_values_policy,
            MinValuesPolicy::BestEffort
        );
        assert_eq!(
            with("Strict").unwrap().min_values_policy,
            MinValuesPolicy::Strict
        );
        assert_eq!(
            with("best-effort").unwrap_err().to_string(),
            "NODEWRIGHT_MIN_VALUES_POLICY=\"best-effort\": Strict or BestEffort"
        );
    }

    #[test]
    fn adopting_karpenter_nodes_is_turned_on_by_its_setting() {
        let with = |v: &str| {
            Config::from_vars(&vars(&[
                ("NODEWRIGHT_CLUSTER_NAME", "prod"),
                ("NODEWRIGHT_TABLE_NAME", "nw"),
                ("NODEWRIGHT_ADOPT_KARPENTER_NODES", v),
            ]))
        };
        assert!(with("true").unwrap().adopt_karpenter_nodes);
        assert!(!with("false").unwrap().adopt_karpenter_nodes);
        assert_eq!(
            with("sometimes").unwrap_err().to_string(),
            "NODEWRIGHT_ADOPT_KARPENTER_NODES=\"sometimes\": true or false"
        );
    }

    #[test]
    fn a_missing_setting_is_named() {
        let err = Config::from_vars(&vars(&[("NODEWRIGHT_TABLE_NAME", "nw")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "NODEWRIGHT_CLUSTER_NAME is not set (required)"
        );
    }

    #[test]
    fn malformed_settings_are_named_with_what_was_expected() {
        let base = [
            ("NODEWRIGHT_CLUSTER_NAME", "prod"),
            ("NODEWRIGHT_TABLE_NAME", "nw"),
        ];
        let with = |k: &str, v: &str| {
            let mut m = vars(&base);
            m.insert(k.into(), v.into());
            Config::from_vars(&m).unwrap_err().to_string()
        };
        assert_eq!(
            with("NODEWRIGHT_POLL_INTERVAL", "5 seconds"),
            "NODEWRIGHT_POLL_INTERVAL=\"5 seconds\": a duration between 1s and 60s, like \"5s\""
        );
        assert!(
            with("NODEWRIGHT_POLL_INTERVAL", "2m").starts_with("NODEWRIGHT_POLL_INTERVAL=\"2m\"")
        );
        assert_eq!(
            with("NODEWRIGHT_DRY_RUN", "maybe"),
            "NODEWRIGHT_DRY_RUN=\"maybe\": true or false"
        );
        assert_eq!(
            with("NODEWRIGHT_REBALANCE_ACTION", "panic"),
            "NODEWRIGHT_REBALANCE_ACTION=\"panic\": ignore, cordon or replace"
        );
        assert_eq!(
            with("NODEWRIGHT_KUBE_QPS", "fast"),
            "NODEWRIGHT_KUBE_QPS=\"fast\": requests per second, a number above 0 and at most 1000"
        );
        assert_eq!(
            with("NODEWRIGHT_KUBE_BURST", "0"),
            "NODEWRIGHT_KUBE_BURST=\"0\": a whole number of requests from 1 to 10000"
        );
    }

    #[test]
    fn the_repair_switches_select_the_policies_and_legacy_refuses_terminate_first() {
        let config = |pairs: &[(&str, &str)]| {
            let mut all = vec![
                ("NODEWRIGHT_CLUSTER_NAME", "prod"),
                ("NODEWRIGHT_TABLE_NAME", "nw"),
            ];
            all.extend_from_slice(pairs);
            Config::from_vars(&vars(&all))
        };
        let c = config(&[("NODEWRIGHT_REBOOT_FOR_REPAIR", "true")]).unwrap();
        assert_eq!(c.repair, RepairSettings::aws(true, false));
        let c = config(&[("NODEWRIGHT_LEGACY_NODE_REPAIR", "true")]).unwrap();
        assert!(c.repair.legacy);
        let e = config(&[
            ("NODEWRIGHT_LEGACY_NODE_REPAIR", "true"),
            ("NODEWRIGHT_TERMINATE_FIRST_REPAIR", "true"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("NODEWRIGHT_TERMINATE_FIRST_REPAIR=\"true\""),
            "{e}"
        );
        assert!(config(&[("NODEWRIGHT_REBOOT_FOR_REPAIR", "maybe")]).is_err());
    }
}
