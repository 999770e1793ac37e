//! `nodewright validate`: NodePool, EC2NodeClass, NodeOverlay and CapacityBuffer
//! manifests held to Karpenter's CRDs, with the fields nodewright does not fully honour.

use std::path::PathBuf;

use nodewright_core::api::Manifests;
use nodewright_core::api::overlay::VALIDATION_SUCCEEDED;
use nodewright_core::catalog::Catalog;
use nodewright_core::density;
use nodewright_core::pricing::Pricing;

use crate::failure::Failure;
use crate::inputs::overlay_resolution;
use crate::manifests;
use crate::output::{self, Output};

#[derive(clap::Args)]
pub(crate) struct ValidateArgs {
    /// YAML or JSON files holding karpenter.sh/v1 NodePools, karpenter.k8s.aws/v1
    /// EC2NodeClasses and karpenter.sh/v1alpha1 NodeOverlays.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// List every Karpenter field present with what nodewright does with it, the
    /// honoured ones too (by default only those not fully honoured are listed).
    #[arg(long)]
    fields: bool,
    #[command(flatten)]
    strict: manifests::StrictArgs,
    /// table, wide (every field, as --fields), json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: Output,
}

/// `validate -o json|yaml`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Validated {
    node_pools: Vec<String>,
    #[serde(rename = "ec2NodeClasses")]
    node_classes: Vec<String>,
    node_overlays: Vec<OverlayVerdict>,
    /// `namespace/name` of each CapacityBuffer and PodTemplate.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    capacity_buffers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pod_templates: Vec<String>,
    /// The fields not fully honoured (every field with --fields).
    fields: Vec<manifests::FieldRow>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct OverlayVerdict {
    name: String,
    applied: bool,
    reason: String,
    message: String,
}

/// Prints the fields not fully honoured (every field with `--fields` or `-o wide`),
/// then validates: unknown and missing required fields are problems unless
/// `--lenient`; the field report never changes the exit code.
pub(crate) fn run(args: &ValidateArgs) -> Result<(), Failure> {
    let read = manifests::read_documents(&args.files)?;
    let all = args.fields || args.output == Output::Wide;
    let fields = manifests::field_lines(&read.documents, all);
    let table = matches!(args.output, Output::Table | Output::Wide);
    if table {
        for row in &fields {
            println!("{row}");
        }
    }
    let manifests = manifests::validate(&read, args.strict)?;
    expression_warnings(&manifests);
    // Conflicts are Karpenter's runtime verdict, over the embedded catalog's types in
    // the default zones: an overlay in conflict is valid, and applied nowhere.
    let zones = Pricing::default().zones;
    let statuses = if manifests.node_overlays.is_empty() {
        Vec::new()
    } else {
        overlay_resolution(&manifests, Catalog::embedded(), &zones).statuses
    };
    if !table {
        let report = Validated {
            node_pools: manifests
                .node_pools
                .iter()
                .map(|p| p.name.clone())
                .collect(),
            node_classes: manifests
                .node_classes
                .iter()
                .map(|c| c.name.clone())
                .collect(),
            node_overlays: statuses
                .iter()
                .map(|s| OverlayVerdict {
                    name: s.name.clone(),
                    applied: s.succeeded(),
                    reason: s.reason().to_string(),
                    message: s.message().to_string(),
                })
                .collect(),
            capacity_buffers: manifests.capacity_buffers.iter().map(|b| b.key()).collect(),
            pod_templates: manifests
                .pod_templates
                .iter()
                .map(|t| format!("{}/{}", t.namespace, t.name))
                .collect(),
            fields,
        };
        output::emit(&report, args.output)?;
        return Ok(());
    }
    let mut counts = vec![
        format!("{} NodePool(s)", manifests.node_pools.len()),
        format!("{} EC2NodeClass(es)", manifests.node_classes.len()),
    ];
    for (n, kind) in [
        (manifests.node_overlays.len(), "NodeOverlay(s)"),
        (manifests.capacity_buffers.len(), "CapacityBuffer(s)"),
        (manifests.pod_templates.len(), "PodTemplate(s)"),
    ] {
        if n > 0 {
            counts.push(format!("{n} {kind}"));
        }
    }
    println!("valid: {}", counts.join(", "));
    for status in &statuses {
        if status.succeeded() {
            println!("NodeOverlay {:?}: {VALIDATION_SUCCEEDED}", status.name);
        } else {
            println!(
                "NodeOverlay {:?}: not applied: {}: {}",
                status.name,
                status.reason(),
                status.message()
            );
        }
    }
    Ok(())
}

/// On stderr, each kubelet expression without a value on some of the embedded
/// catalog's types: valid, but those types are never chosen (`maxPods`) or keep the
/// default (a reservation).
fn expression_warnings(manifests: &Manifests) {
    for class in &manifests.node_classes {
        for gap in density::expression_gaps(Catalog::embedded(), class) {
            let effect = if gap.field.ends_with(".maxPods") {
                "they get no pods and are never chosen"
            } else {
                "the default reservation applies on them"
            };
            let shown: Vec<&str> = gap
                .instance_types
                .iter()
                .take(5)
                .map(String::as_str)
                .collect();
            let more = gap.instance_types.len() - shown.len();
            eprintln!(
                "warning: EC2NodeClass {:?}: {}: no value on {} instance type(s) ({}{}); {effect}: {}",
                class.name,
                gap.field,
                gap.instance_types.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                },
                gap.first
            );
        }
    }
}
