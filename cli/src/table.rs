//! The plan as a table for people: one row per NodeClaim, then totals, the pods that
//! could not be placed, and the pending pods no capacity is launched for.

use std::fmt::Write;

use nodewright_core::provisioning::ProvisioningPlan;

use crate::output::dollars;

/// Hours in an average month (365 × 24 / 12), as AWS prices a month.
const HOURS_PER_MONTH: f64 = 730.0;

/// The plan's table; `wide` adds how many types fit in all and the cheapest options.
pub fn render(plan: &ProvisioningPlan, wide: bool) -> String {
    let mut headers = vec![
        "NODEPOOL",
        "INSTANCE TYPE",
        "ZONE",
        "CAPACITY",
        "PODS",
        "$/HOUR",
        "OPTIONS",
    ];
    if wide {
        headers.extend(["COMPATIBLE", "CHEAPEST OPTIONS"]);
    }
    let rows: Vec<Vec<String>> = plan
        .node_claims
        .iter()
        .map(|c| {
            let mut row = vec![
                c.node_pool.clone(),
                c.instance_type.clone(),
                c.zone.clone(),
                c.capacity_type.clone(),
                c.pods.len().to_string(),
                dollars(c.price_per_hour),
                c.instance_type_options.len().to_string(),
            ];
            if wide {
                row.push(c.compatible_instance_types.to_string());
                let mut cheapest = c
                    .instance_type_options
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(",");
                if c.instance_type_options.len() > 3 {
                    cheapest.push_str(",...");
                }
                row.push(cheapest);
            }
            row
        })
        .collect();
    let mut out = String::new();
    if rows.is_empty() {
        let _ = writeln!(out, "No new NodeClaims needed.");
    } else {
        // Numbers are right-aligned, text left-aligned.
        out.push_str(&columns(&headers, &[4, 5, 6, 7], &rows));
    }
    let placed: usize = plan.node_claims.iter().map(|c| c.pods.len()).sum();
    let existing: usize = plan.existing_nodes.iter().map(|a| a.pods.len()).sum();
    let in_flight: usize = plan.in_flight.iter().map(|a| a.pods.len()).sum();
    // Said only when there are some, so plans of clusters without such pods read as before.
    let not_provisioned = match plan.not_provisioned.len() {
        0 => String::new(),
        n => format!("; {n} not provisioned"),
    };
    let _ = writeln!(
        out,
        "\n{} NodeClaim(s) for {placed} pod(s); {existing} pod(s) fit existing nodes; {in_flight} fit in-flight claims; {} unschedulable{not_provisioned}",
        plan.node_claims.len(),
        plan.unschedulable.len()
    );
    let _ = writeln!(
        out,
        "Total: ${}/hour, ${:.2}/month ({HOURS_PER_MONTH} h)",
        dollars(plan.total_price_per_hour),
        crate::output::round4(plan.total_price_per_hour * HOURS_PER_MONTH)
    );
    if !plan.unschedulable.is_empty() {
        let _ = writeln!(out, "\nUnschedulable:");
        for u in &plan.unschedulable {
            let _ = writeln!(out, "  {}: {}", u.pod, u.reason);
        }
    }
    if !plan.not_provisioned.is_empty() {
        let _ = writeln!(
            out,
            "\nNot provisioned (pending, but no capacity is launched for them):"
        );
        for n in &plan.not_provisioned {
            let _ = writeln!(out, "  {}: {}", n.pod, n.reason);
        }
    }
    out
}

/// Rows under headers in columns as kubectl aligns them: two spaces apart, the columns
/// in `right` right-aligned (numbers), trailing spaces trimmed.
pub fn columns(headers: &[&str], right: &[usize], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if right.contains(&i) {
                let _ = write!(s, "{cell:>w$}  ");
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}
