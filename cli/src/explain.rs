//! `nodewright explain pod NS/NAME | node NAME | nodepool NAME`: why, from the
//! decision log and the cluster as read ([`crate::status`]'s sources).
//!
//! - a pod: pending or not; if pending, core's planner's answer for it (the constraint
//!   no NodePool satisfies, or why nothing is launched for it, or what would be
//!   launched); if on a node nodewright launched, why that instance type (the claim's
//!   launch decision: type, zone, price, the pods it was for);
//! - a node, named by its Node's name, its NodeClaim's or its instance id: its claim's
//!   state; if gone, since when and why; if being taken away, the typed cause and the
//!   command; if staying, core's typed reason (`RejectCode`) and what would change it;
//! - a NodePool: its nodes, usage against limits, problems, recent decisions.

use std::collections::HashSet;
use std::fmt::Write as _;

use clap::ValueEnum;
use nodewright_core::nodeclaim::{ClaimState, NodeClaim};
use serde::Serialize;

use crate::failure::Failure;
use crate::observed::{LoggedDecision, SourceArgs, StatusInput};
use crate::output::Output;
use crate::output::{self, dollars};
use crate::status::{age, load, rfc3339};

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Kind {
    Pod,
    Node,
    Nodepool,
}

#[derive(clap::Args)]
pub struct ExplainArgs {
    /// What to explain.
    #[arg(value_enum)]
    pub kind: Kind,
    /// `namespace/name` for a pod; for a node its name, its NodeClaim's name (as
    /// `status` lists it) or its instance id; a NodePool's name.
    pub name: String,
    #[command(flatten)]
    pub source: SourceArgs,
    /// table, json or yaml.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
}

/// The answer: a sentence, the facts behind it, the typed reason where there is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub kind: &'static str,
    pub name: String,
    pub summary: String,
    pub details: Vec<String>,
    /// A pending pod: the constraint core's planner reports for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// A node staying: core's `RejectCode`, its sentence and what would change it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejection: Option<Rejection>,
    /// A node being taken away: the claim's `DisruptionCause`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruption: Option<String>,
    /// Decision-log entries naming it, oldest first (at most [`SHOWN`]).
    pub decisions: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    pub code: String,
    pub reason: String,
    pub would_change: String,
}

/// A decision-log entry, or a run of identical ones (the provisioner says a pod
/// cannot be scheduled on every tick).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub at: String,
    pub job: String,
    pub action: String,
    pub reason: String,
    /// How many identical entries in a row this one stands for (1: itself).
    pub times: usize,
    /// The last of them, when more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// Decision-log entries shown per answer: the latest ones.
pub const SHOWN: usize = 10;

pub fn run(args: &ExplainArgs) -> Result<(), Failure> {
    let output = args.output.refuse_wide("explain")?;
    let input = load(&args.source)?;
    let e = explain(&input, args.kind, &args.name)?;
    if !output::emit(&e, output)? {
        print!("{}", render(&e));
    }
    Ok(())
}

pub fn explain(input: &StatusInput, kind: Kind, name: &str) -> Result<Explanation, Failure> {
    match kind {
        Kind::Pod => pod(input, name),
        Kind::Node => node(input, name),
        Kind::Nodepool => nodepool(input, name),
    }
}

pub fn render(e: &Explanation) -> String {
    let mut out = format!("{} {}: {}\n", e.kind, e.name, e.summary);
    for d in &e.details {
        let _ = writeln!(out, "  {d}");
    }
    if !e.decisions.is_empty() {
        let _ = writeln!(out, "Decisions:");
        for d in &e.decisions {
            let times = match &d.until {
                Some(until) => format!(" ({} times, until {until})", d.times),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "  {}{times} {}: {} — {}",
                d.at, d.job, d.action, d.reason
            );
        }
    }
    out
}

fn blank(kind: &'static str, name: &str, summary: String) -> Explanation {
    Explanation {
        kind,
        name: name.to_string(),
        summary,
        details: Vec::new(),
        constraint: None,
        rejection: None,
        disruption: None,
        decisions: Vec::new(),
    }
}

/// The latest [`SHOWN`] decisions whose action or reason names one of `names`, runs
/// of identical ones as one entry.
fn naming(decisions: &[LoggedDecision], names: &[&str]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for d in decisions.iter().filter(|d| {
        names
            .iter()
            .any(|n| mentions(&d.action, n) || mentions(&d.reason, n))
    }) {
        match entries.last_mut() {
            Some(e) if e.job == d.job && e.action == d.action && e.reason == d.reason => {
                e.times += 1;
                e.until = Some(rfc3339(d.at));
            }
            _ => entries.push(entry(d)),
        }
    }
    entries.split_off(entries.len().saturating_sub(SHOWN))
}

/// `text` names `name` as a whole word (claim `spot-a` is not `spot-ab`).
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '-' || c == '.' || c == '/' || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        // A sentence's full stop after the name still ends it.
        let after_ends = match after {
            None => true,
            Some('.') => text[i + name.len() + 1..]
                .chars()
                .next()
                .is_none_or(|c| !word(c)),
            Some(c) => !word(c),
        };
        before.is_none_or(|c| !word(c)) && after_ends
    })
}

fn entry(d: &LoggedDecision) -> Entry {
    Entry {
        at: rfc3339(d.at),
        job: d.job.clone(),
        action: d.action.clone(),
        reason: d.reason.clone(),
        times: 1,
        until: None,
    }
}

fn describe_claim(c: &NodeClaim, now: i64) -> String {
    let mut s = format!(
        "claim {} (NodePool {}): {}",
        c.name,
        c.node_pool,
        c.state.as_str()
    );
    if let Some(t) = &c.instance_type {
        let _ = write!(
            s,
            ", {t} {} in {}",
            c.capacity_type.map(|t| t.as_str()).unwrap_or("?"),
            c.zone.as_deref().unwrap_or("?")
        );
    }
    if let Some(p) = c.price_per_hour {
        let _ = write!(s, " at ${}/h", dollars(p));
    }
    if let Some(i) = &c.instance_id {
        let _ = write!(s, " ({i})");
    }
    let _ = write!(s, ", age {}", age(now - c.created_at));
    s
}

/// The claim recording `node`: a live one first.
fn claim_of_node<'a>(input: &'a StatusInput, node: &str) -> Option<&'a NodeClaim> {
    let mut of: Vec<&NodeClaim> = input
        .claims
        .iter()
        .filter(|c| c.node_name.as_deref() == Some(node))
        .collect();
    of.sort_by_key(|c| (c.state.is_terminal(), -c.updated_at));
    of.first().copied()
}

fn pod(input: &StatusInput, key: &str) -> Result<Explanation, Failure> {
    let Some(p) = input.cluster.pods.iter().find(|p| p.pod == key) else {
        return Err(Failure::Invalid(vec![format!(
            "pod {key} is not in the cluster as read ({}); name it as namespace/name",
            input.source
        )]));
    };
    let cluster = &input.cluster;
    let prov = &cluster.provisioning;
    let Some(node) = &p.node else {
        let mut e = blank("pod", key, String::new());
        if let Some(u) = prov.unschedulable.iter().find(|u| u.pod == key) {
            e.summary = format!("pending: no NodePool can take it: {}", u.reason);
            e.constraint = Some(u.reason.clone());
        } else if let Some(u) = prov.not_provisioned.iter().find(|u| u.pod == key) {
            e.summary = format!("pending; nodewright launches nothing for it: {}", u.reason);
            e.constraint = Some(u.reason.clone());
        } else if let Some(c) = prov
            .planned
            .iter()
            .find(|c| c.pods.iter().any(|q| q == key))
        {
            e.summary = format!(
                "pending; the provisioner launches for it: {} {} in {} from NodePool {} (${}/h, cheapest of {} option(s), {} pod(s))",
                c.instance_type,
                c.capacity_type,
                c.zone,
                c.node_pool,
                dollars(c.price_per_hour),
                c.options,
                c.pods.len()
            );
        } else if let Some(a) = prov.absorbed.iter().find(|a| a.pod == key) {
            e.summary = format!("pending; it {} (no launch needed)", a.reason);
        } else {
            e.summary = "pending; the planner does not count it as provisionable".into();
        }
        let mut pools: Vec<_> = cluster.node_pools.iter().collect();
        pools.sort_by_key(|p| (-p.weight, p.name.clone()));
        e.details.push(format!(
            "NodePools tried, by weight: {}",
            if pools.is_empty() {
                "none (no valid NodePool)".into()
            } else {
                pools
                    .iter()
                    .map(|p| format!("{} (weight {})", p.name, p.weight))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
        for p in pools.iter().filter(|p| !p.limits_reached.is_empty()) {
            e.details.push(format!(
                "NodePool {} is at its limits: {}",
                p.name,
                p.limits_reached.join(", ")
            ));
        }
        for invalid in &cluster.invalid {
            e.details.push(format!("not usable: {invalid}"));
        }
        for c in input
            .claims
            .iter()
            .filter(|c| !c.state.is_terminal() && c.pods.iter().any(|q| q == key))
        {
            e.details
                .push(format!("launched for it: {}", describe_claim(c, input.now)));
        }
        e.decisions = naming(&input.decisions, &[key]);
        return Ok(e);
    };
    let mut e = blank("pod", key, format!("running on node {node}"));
    match claim_of_node(input, node) {
        None => e.details.push(format!(
            "node {node} is not nodewright's: no claim records it"
        )),
        Some(c) => {
            e.summary = format!(
                "running on node {node}, launched by nodewright as {}",
                c.instance_type.as_deref().unwrap_or("?")
            );
            e.details.push(describe_claim(c, input.now));
            let prefix = format!("launch {} as ", c.name);
            match input
                .decisions
                .iter()
                .rev()
                .find(|d| d.action.starts_with(&prefix))
            {
                Some(d) => e.details.push(format!(
                    "launch decision at {}: {} — {}",
                    rfc3339(d.at),
                    d.action,
                    d.reason
                )),
                None => e
                    .details
                    .push("its launch decision is older than the log read".into()),
            }
            let options = &c.instance_type_options;
            e.details.push(format!(
                "why that type: the cheapest offering with capacity among {} type(s) that fit the pods it was for, cheapest first: {}{}",
                options.len(),
                options.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                if options.len() > 5 { ", ..." } else { "" }
            ));
            if c.pods.iter().any(|q| q == key) {
                e.details.push(format!(
                    "it was one of the {} pod(s) the claim was launched for",
                    c.pods.len()
                ));
            } else {
                e.details.push(format!(
                    "the claim was launched for other pods ({}); kube-scheduler placed this one there later",
                    c.pods.len()
                ));
            }
        }
    }
    e.decisions = naming(&input.decisions, &[key]);
    Ok(e)
}

/// What would let core disrupt a node it keeps for `code`.
pub fn would_change(code: &str) -> &'static str {
    match code {
        "DoNotDisrupt" => {
            "removing karpenter.sh/do-not-disrupt from the node and its pods (or those pods finishing)"
        }
        "PodDisruptionBudget" => {
            "a PodDisruptionBudget of its pods allowing a disruption (more healthy replicas, or a looser budget)"
        }
        "DisruptionBudget" => {
            "room in the NodePool's disruption budget: nodes being disrupted finishing, or a larger spec.disruption.budgets for this reason and time"
        }
        "ConsolidateAfter" => {
            "time: consolidateAfter elapsing with no pod arriving or leaving (or setting it, if it is Never)"
        }
        "ConsolidationPolicy" => {
            "the node emptying, or consolidationPolicy: WhenEmptyOrUnderutilized on its NodePool"
        }
        "PodsDoNotFit" => {
            "room elsewhere for its pods (other nodes with free capacity), or a cheaper replacement that fits them"
        }
        "NotCheaper" => "a cheaper instance type that fits its pods, or its pods needing less",
        "SpotToSpot" => {
            "spot-to-spot consolidation turned on (the stack's SpotToSpot parameter), with at least 15 cheaper spot types that fit its pods"
        }
        "NotReady" => "the node becoming Ready and its claim Initialized",
        "Balanced" => {
            "a move saving a larger share of the NodePool's cost for the disruption it causes (Balanced scores savings against pods moved), or consolidationPolicy: WhenEmptyOrUnderutilized"
        }
        _ => "the condition named above going away",
    }
}

/// The node `name` names — a Node's name, a NodeClaim's name or an instance id — as
/// (its Node's name if it has one, its claim if one records it); `None` when nothing
/// in the cluster or the store answers to it.
fn find_node<'a>(
    input: &'a StatusInput,
    name: &str,
) -> Option<(Option<String>, Option<&'a NodeClaim>)> {
    if input.cluster.nodes.iter().any(|n| n.name == name) {
        return Some((Some(name.to_string()), claim_of_node(input, name)));
    }
    let by_claim = |c: &&NodeClaim| c.name == name || c.instance_id.as_deref() == Some(name);
    let mut named: Vec<&NodeClaim> = input.claims.iter().filter(by_claim).collect();
    // A live claim first, then the latest.
    named.sort_by_key(|c| (c.state.is_terminal(), -c.updated_at));
    if let Some(c) = named.first() {
        return Some((c.node_name.clone(), Some(c)));
    }
    claim_of_node(input, name).map(|c| (Some(name.to_string()), Some(c)))
}

fn node(input: &StatusInput, name: &str) -> Result<Explanation, Failure> {
    let cluster = &input.cluster;
    let Some((node_name, claim)) = find_node(input, name) else {
        return Err(Failure::Invalid(vec![format!(
            "node {name} is neither a node, a NodeClaim nor an instance id in the cluster or the store as read ({}); `nodewright status` lists them",
            input.source
        )]));
    };
    let seen = node_name
        .as_deref()
        .and_then(|n| cluster.nodes.iter().find(|x| x.name == n));
    let shown = node_name
        .clone()
        .or_else(|| claim.map(|c| c.name.clone()))
        .unwrap_or_else(|| name.to_string());
    let mut e = blank("node", &shown, String::new());
    if let Some(n) = seen {
        e.details.push(format!(
            "{}{}, {} pod(s) besides DaemonSets",
            if n.ready { "Ready" } else { "not Ready" },
            if n.unschedulable { ", cordoned" } else { "" },
            n.pods.len()
        ));
    } else {
        e.details
            .push("no Node object: not registered yet, or already deleted".into());
    }
    let Some(c) = claim else {
        e.summary = "not nodewright's: no claim records it; nodewright never disrupts it".into();
        return Ok(e);
    };
    e.details.insert(0, describe_claim(c, input.now));
    let node_name = node_name.as_deref().unwrap_or(c.name.as_str());
    let in_decision = cluster
        .disruption
        .commands
        .iter()
        .find(|cmd| cmd.nodes.iter().any(|n| n == node_name));
    let rejected = cluster
        .disruption
        .rejected
        .iter()
        .find(|r| r.node == node_name);
    if c.state.is_terminal() {
        e.summary = format!(
            "gone: its claim is {} (since {})",
            c.state.as_str(),
            rfc3339(c.updated_at)
        );
        if let Some(d) = &c.disruption {
            e.disruption = Some(format!("{:?}", d.cause));
            e.details.push(format!(
                "it was taken away for {:?}, from {}",
                d.cause,
                rfc3339(d.since)
            ));
        }
    } else if let Some(d) = &c.disruption {
        e.disruption = Some(format!("{:?}", d.cause));
        e.summary = format!(
            "being taken away ({}): {:?} since {}",
            c.state.as_str(),
            d.cause,
            rfc3339(d.since)
        );
        if let Some(deadline) = d.deadline {
            e.details
                .push(format!("gone regardless at {}", rfc3339(deadline)));
        }
        if let Some(cmd) = &d.command {
            e.details.push(format!(
                "disruption command {}: candidates {}; replacements {}; {}",
                cmd.id,
                cmd.candidates.join(", "),
                if cmd.replacements.is_empty() {
                    "none".to_string()
                } else {
                    cmd.replacements
                        .iter()
                        .map(|r| r.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                if cmd.validated {
                    "validated: draining"
                } else {
                    "waiting for validation (cordoned, not drained)"
                }
            ));
        }
    } else if let Some(cmd) = in_decision {
        e.summary = format!(
            "core would disrupt it now: {} ({}), {} replacement(s), saving ${}/h",
            cmd.method,
            cmd.reason,
            cmd.replacements,
            dollars(cmd.savings_per_hour)
        );
        e.details.push(format!(
            "with {}; the disruption function starts the command on its next run with no command in flight",
            cmd.nodes.join(", ")
        ));
    } else if let Some(r) = rejected {
        e.summary = format!("stays: {} — {}", r.code, r.reason);
        e.details
            .push(format!("what would change it: {}", would_change(&r.code)));
        e.rejection = Some(Rejection {
            code: r.code.clone(),
            reason: r.reason.clone(),
            would_change: would_change(&r.code).into(),
        });
    } else if c.state != ClaimState::Initialized {
        e.summary = format!(
            "stays: not a disruption candidate while its claim is {}",
            c.state.as_str()
        );
    } else {
        e.summary = "stays: core did not consider it".into();
        for p in cluster
            .disruption
            .problems
            .iter()
            .filter(|p| mentions(p, node_name))
        {
            e.details.push(p.clone());
        }
    }
    let mut names = vec![node_name, c.name.as_str()];
    names.extend(c.instance_id.as_deref());
    names.dedup();
    e.decisions = naming(&input.decisions, &names);
    Ok(e)
}

fn nodepool(input: &StatusInput, name: &str) -> Result<Explanation, Failure> {
    let cluster = &input.cluster;
    let pool = cluster.node_pools.iter().find(|p| p.name == name);
    let invalid: Vec<&String> = cluster
        .invalid
        .iter()
        .filter(|i| i.contains(&format!("NodePool {name:?}")) || mentions(i, name))
        .collect();
    if pool.is_none() && invalid.is_empty() {
        return Err(Failure::Invalid(vec![format!(
            "NodePool {name} is not in the cluster as read ({})",
            input.source
        )]));
    }
    let live: Vec<&NodeClaim> = input
        .claims
        .iter()
        .filter(|c| c.node_pool == name && !c.state.is_terminal())
        .collect();
    let price: f64 = live.iter().filter_map(|c| c.price_per_hour).sum();
    let mut e = blank(
        "nodepool",
        name,
        format!("{} live claim(s), ${}/h", live.len(), dollars(price)),
    );
    for c in &live {
        e.details.push(format!(
            "{} on node {}",
            describe_claim(c, input.now),
            c.node_name.as_deref().unwrap_or("-")
        ));
    }
    match pool {
        Some(p) => {
            let usage: Vec<String> = p
                .usage
                .iter()
                .map(|(k, v)| match p.limits.get(k) {
                    Some(l) => format!("{k} {v} of {l}"),
                    None => format!("{k} {v}"),
                })
                .collect();
            e.details.push(format!(
                "usage: {}{}",
                usage.join(", "),
                if p.limits.is_empty() {
                    " (no limits)"
                } else {
                    ""
                }
            ));
            e.details.push(format!(
                "weight {}, EC2NodeClass {}",
                p.weight, p.node_class
            ));
            if !p.conditions.is_empty() {
                e.details.push(format!(
                    "conditions: {}",
                    p.conditions
                        .iter()
                        .map(|c| format!("{}={}", c.type_, c.status))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            for c in p.conditions.iter().filter(|c| c.status != "True") {
                e.details.push(format!(
                    "problem: {} is {} ({}){}",
                    c.type_,
                    c.status,
                    c.reason,
                    if c.message.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", c.message)
                    }
                ));
            }
            if !p.limits_reached.is_empty() {
                e.details.push(format!(
                    "problem: at its limits ({}): nothing more is launched from it",
                    p.limits_reached.join(", ")
                ));
            }
        }
        None => e.summary = format!("not usable; {}", e.summary),
    }
    for i in invalid {
        e.details.push(format!("problem: {i}"));
    }
    let nodes: HashSet<&str> = live.iter().filter_map(|c| c.node_name.as_deref()).collect();
    let mut codes: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in cluster
        .disruption
        .rejected
        .iter()
        .filter(|r| nodes.contains(r.node.as_str()))
    {
        *codes.entry(r.code.as_str()).or_insert(0) += 1;
    }
    if !codes.is_empty() {
        e.details.push(format!(
            "nodes staying: {}",
            codes
                .iter()
                .map(|(c, n)| format!("{n} {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let unschedulable = cluster.provisioning.unschedulable.len();
    if unschedulable > 0 {
        e.details.push(format!(
            "{unschedulable} pending pod(s) no NodePool can take (explain pod NS/NAME for each)"
        ));
    }
    let mut names: Vec<&str> = input
        .claims
        .iter()
        .filter(|c| c.node_pool == name)
        .flat_map(|c| std::iter::once(c.name.as_str()).chain(c.node_name.as_deref()))
        .collect();
    names.push(name);
    e.decisions = naming(&input.decisions, &names);
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_mentioned_only_as_a_whole_word() {
        assert!(mentions("launch spot-a as m5.large", "spot-a"));
        assert!(mentions("drain and terminate spot-a (i-1)", "spot-a"));
        assert!(mentions(
            "keep ip-10-0-0-1.ec2.internal.",
            "ip-10-0-0-1.ec2.internal"
        ));
        assert!(!mentions("launch spot-ab as m5.large", "spot-a"));
        assert!(!mentions("default/web-10", "default/web-1"));
    }
}
