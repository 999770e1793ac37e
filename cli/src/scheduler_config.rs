//! `--scheduler-config FILE`: the default topology spread constraints the cluster's
//! kube-scheduler applies (`podTopologySpread.defaultConstraints`, as Karpenter's
//! `--scheduler-config` reads them). `plan` and `disrupt` give each pod without
//! constraints of its own the defaults, with the selector kube-scheduler deduces from
//! the snapshot's Services and the pod's ReplicaSet, StatefulSet or
//! ReplicationController ([`nodewright_core::default_spread`]).

use std::path::PathBuf;

use nodewright_core::cluster::ClusterSnapshot;
use nodewright_core::default_spread::{SchedulerConfig, apply_defaults_from};

use crate::failure::{Failure, read};

#[derive(clap::Args)]
pub(crate) struct SchedulerConfigArgs {
    /// The default topology spread constraints of the cluster's kube-scheduler, as YAML
    /// or JSON: `podTopologySpread: {defaultConstraints: [{maxSkew, topologyKey,
    /// whenUnsatisfiable}]}`. A pod without constraints of its own is planned with them.
    #[arg(long = "scheduler-config")]
    scheduler_config: Option<PathBuf>,
}

impl SchedulerConfigArgs {
    /// Gives the snapshot's pods the configured defaults; a bad file exits 1 naming each
    /// field at fault.
    pub(crate) fn apply(&self, snapshot: &mut ClusterSnapshot) -> Result<(), Failure> {
        let Some(path) = &self.scheduler_config else {
            return Ok(());
        };
        let config = SchedulerConfig::parse(&read(path)?).map_err(|problems| {
            Failure::Invalid(
                problems
                    .into_iter()
                    .map(|p| format!("{}: {p}", path.display()))
                    .collect(),
            )
        })?;
        apply_defaults_from(
            &mut snapshot.pods,
            &config,
            &snapshot.services,
            &snapshot.controllers,
        );
        Ok(())
    }
}
