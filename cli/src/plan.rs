//! `nodewright plan`: the NodeClaims for a cluster snapshot's pending pods.

use std::path::PathBuf;

use nodewright_core::capacity_buffer::buffer_statuses;
use nodewright_core::catalog::Catalog;
use nodewright_core::provisioning::{ProvisioningInput, plan_provisioning};

use crate::failure::Failure;
use crate::inputs::{load_catalog, load_snapshot, need_in_snapshot, pricing, zones};
use crate::output::{self, Output};
use crate::{buffers, manifests, reservations, scheduler_config, table};

#[derive(clap::Args)]
pub(crate) struct PlanArgs {
    /// NodePool and EC2NodeClass manifests (repeatable).
    #[arg(long = "nodepools", required = true)]
    nodepools: Vec<PathBuf>,
    /// Output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets -A -o json`.
    #[arg(long)]
    snapshot: PathBuf,
    /// Instance catalog in the format of the embedded one (default: embedded AWS catalog).
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Zones to offer capacity in.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "us-east-1a,us-east-1b,us-east-1c"
    )]
    zones: Vec<String>,
    #[command(flatten)]
    capacity: reservations::CapacityArgs,
    #[command(flatten)]
    scheduler: scheduler_config::SchedulerConfigArgs,
    #[command(flatten)]
    strict: manifests::StrictArgs,
    /// table, wide (with the cheapest options of each claim), json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
}

pub(crate) fn run(args: &PlanArgs) -> Result<(), Failure> {
    let manifests = manifests::load(&args.nodepools, args.strict)?;
    manifests::need_node_pools("plan", &args.nodepools, &manifests, args.strict)?;
    let mut snapshot = load_snapshot(&args.snapshot)?;
    need_in_snapshot(
        "plan",
        &args.snapshot.display(),
        &snapshot,
        false,
        args.strict,
    )?;
    args.scheduler.apply(&mut snapshot)?;
    let custom = load_catalog(args.catalog.as_deref())?;
    let catalog = custom.as_ref().unwrap_or_else(|| Catalog::embedded());
    let zones = zones(&args.zones, custom.is_some(), args.strict)?;
    let mut pricing = pricing(zones, &manifests, catalog);
    args.capacity.apply(&mut pricing)?;
    let buffers = buffers::Buffers::of(&manifests, &snapshot);
    snapshot.pods.extend(buffers.virtual_pods.iter().cloned());
    let plan = plan_provisioning(&ProvisioningInput {
        snapshot: &snapshot,
        node_pools: &manifests.node_pools,
        node_classes: &manifests.node_classes,
        catalog,
        pricing: &pricing,
        in_flight: &[],
    });
    let statuses = buffer_statuses(&buffers.resolutions, &buffers.virtual_pods, &plan);
    let out = buffers::PlanOutput {
        plan: &plan,
        capacity_buffers: &statuses,
    };
    if !output::emit(&out, args.output)? {
        print!("{}", table::render(&plan, args.output == Output::Wide));
        print!("{}", buffers::render(&statuses));
    }
    Ok(())
}
