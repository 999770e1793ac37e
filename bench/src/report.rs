//! What the planner benchmarks print: a table on stdout, or with `--json` the table on
//! stderr and one JSON object per figure on stdout (`nodewright-bench all --json >
//! bench.jsonl` keeps both readable), and the problems that make the run fail.

use std::collections::BTreeMap;

use nodewright_core::api::model::NodePool;
use nodewright_core::catalog::Catalog;
use nodewright_core::cluster::ClusterSnapshot;
use nodewright_core::provisioning::ProvisioningPlan;
use nodewright_core::testing::violations;
use serde_json::{Value, json};

pub struct Report {
    json: bool,
    /// Broken plans and failed measurements: the run exits non-zero when any.
    pub failures: Vec<String>,
}

impl Report {
    pub fn new(json: bool) -> Self {
        Report {
            json,
            failures: Vec::new(),
        }
    }

    pub fn line(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    pub fn record(&self, value: Value) {
        if self.json {
            println!("{value}");
        }
    }

    pub fn header(&self, title: &str, target: &str) {
        self.line(&format!("\n== {title} =="));
        self.line(&format!("target: {target}"));
    }

    pub fn target(&self, suite: &str, what: &str, value: f64, met: bool, shown: String) {
        self.line(&format!(
            "  {what}: {shown} — {}",
            if met { "MET" } else { "NOT MET" }
        ));
        self.record(json!({"suite": suite, "target": what, "value": value, "met": met}));
    }

    /// A problem the run fails on, shown in the table too.
    pub fn fail(&mut self, message: String) {
        self.line(&format!("  !! {message}"));
        self.failures.push(message);
    }

    pub fn check_plan(
        &mut self,
        what: &str,
        plan: &ProvisioningPlan,
        snapshot: &ClusterSnapshot,
        pools: &[NodePool],
        catalog: &Catalog,
    ) {
        let broken = violations(plan, snapshot, pools, catalog);
        if !broken.is_empty() {
            let shown: Vec<&str> = broken.iter().take(5).map(String::as_str).collect();
            self.fail(format!(
                "{what}: plan breaks {} constraint(s), e.g. {shown:?}",
                broken.len()
            ));
        }
    }

    pub fn unschedulable_summary(&self, plan: &ProvisioningPlan) {
        if plan.unschedulable.is_empty() {
            return;
        }
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for u in &plan.unschedulable {
            *reasons.entry(u.reason.as_str()).or_default() += 1;
        }
        let mut reasons: Vec<_> = reasons.into_iter().collect();
        reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
        for (reason, n) in reasons.iter().take(3) {
            self.line(&format!("      {n} unschedulable: {reason}"));
        }
    }

    /// The run's outcome: an error listing every problem, if any.
    pub fn finish(self) -> Result<(), String> {
        if self.failures.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "benchmark found {} problem(s):\n  {}",
                self.failures.len(),
                self.failures.join("\n  ")
            ))
        }
    }
}

/// `12345.6` as `12,346`.
pub fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let (sign, digits) = s.split_at(if s.starts_with('-') { 1 } else { 0 });
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}
