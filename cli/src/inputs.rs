//! Reading what `plan` and `disrupt` take: snapshots, catalogs, zones, and prices with
//! the manifests' NodeOverlays.

use std::path::Path;

use nodewright_core::api::{Manifests, ReadOverlay};
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::ClusterSnapshot;
use nodewright_core::overlay::{self, Resolution};
use nodewright_core::pricing::Pricing;
use nodewright_core::snapshot::parse_snapshot_reader;

use crate::failure::{Failure, read};
use crate::{manifests, region};

/// The manifests' NodeOverlays resolved over `catalog`'s types in `zones`: each
/// offering's price change and each overlay's verdict, as Karpenter resolves them.
pub(crate) fn overlay_resolution(
    manifests: &Manifests,
    catalog: &Catalog,
    zones: &[String],
) -> Resolution {
    let overlays: Vec<ReadOverlay> = manifests.node_overlays.iter().cloned().map(Ok).collect();
    overlay::resolve(&overlays, &manifests.node_pools, catalog, zones)
}

/// Prices in `zones`, with the manifests' NodeOverlays (those in conflict are named on
/// stderr and left out, as Karpenter leaves them out).
pub(crate) fn pricing(zones: Vec<String>, manifests: &Manifests, catalog: &Catalog) -> Pricing {
    let mut pricing = Pricing::for_zones(zones);
    if manifests.node_overlays.is_empty() {
        return pricing;
    }
    let resolution = overlay_resolution(manifests, catalog, &pricing.zones);
    for status in resolution.statuses.iter().filter(|s| !s.succeeded()) {
        eprintln!(
            "warning: NodeOverlay {:?} not applied: {}: {}",
            status.name,
            status.reason(),
            status.message()
        );
    }
    pricing.overlays = std::sync::Arc::new(resolution.table);
    pricing
}

/// Reads a snapshot as a stream: the text is never held whole (a large cluster's is
/// hundreds of megabytes, more than what planning keeps from it).
pub(crate) fn load_snapshot(path: &Path) -> Result<ClusterSnapshot, Failure> {
    let file = std::fs::File::open(path)
        .map_err(|e| Failure::Unusable(format!("{}: cannot read: {e}", path.display())))?;
    parse_snapshot(
        std::io::BufReader::with_capacity(256 * 1024, file),
        &path.display(),
    )
}

/// The snapshot `reader` gives; an error names `source`.
pub(crate) fn parse_snapshot(
    reader: impl std::io::Read,
    source: &dyn std::fmt::Display,
) -> Result<ClusterSnapshot, Failure> {
    parse_snapshot_reader(reader).map_err(|e| Failure::Unusable(format!("{source}: {e}")))
}

/// `--catalog`: `None` means the embedded one.
pub(crate) fn load_catalog(path: Option<&Path>) -> Result<Option<Catalog>, Failure> {
    path.map(|path| {
        Catalog::from_json(&read(path)?)
            .map_err(|e| Failure::Unusable(format!("{}: {e}", path.display())))
    })
    .transpose()
}

/// `--zones`, trimmed; at least one; all availability zones of the catalog's region
/// (the embedded catalog's, us-east-1, unless `custom_catalog`), else exit 1 (a
/// warning with `--lenient`).
pub(crate) fn zones(
    args: &[String],
    custom_catalog: bool,
    strict: manifests::StrictArgs,
) -> Result<Vec<String>, Failure> {
    let zones: Vec<String> = args
        .iter()
        .map(|z| z.trim().to_string())
        .filter(|z| !z.is_empty())
        .collect();
    if zones.is_empty() {
        return Err(Failure::Unusable(
            "--zones: at least one zone is required".into(),
        ));
    }
    let region = (!custom_catalog).then_some(region::EMBEDDED_REGION);
    let problems = region::zone_problems(&zones, region);
    strict.check(
        problems
            .into_iter()
            .map(|p| format!("--zones: {p}"))
            .collect(),
    )?;
    Ok(zones)
}

/// A snapshot holding none of the kinds `command` reads (`kubectl get` of other
/// kinds, or an empty list): exit 1 naming the file (a warning with `--lenient`).
pub(crate) fn need_in_snapshot(
    command: &str,
    source: &dyn std::fmt::Display,
    snapshot: &ClusterSnapshot,
    nodes_needed: bool,
    strict: manifests::StrictArgs,
) -> Result<(), Failure> {
    let what = if nodes_needed {
        snapshot.nodes.is_empty().then_some("no Node")
    } else {
        (snapshot.nodes.is_empty() && snapshot.pods.is_empty()).then_some("no Pod and no Node")
    };
    let Some(what) = what else { return Ok(()) };
    strict.check(vec![format!(
        "{source}: {what} in the list: {command} reads the output of `kubectl get pods,nodes,daemonsets,poddisruptionbudgets,pvc,pv,storageclasses,csinodes -A -o json`"
    )])
}
