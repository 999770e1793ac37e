//! What the control plane itself spends while a function runs against it: the CPU time
//! of kube-apiserver and etcd (read from /proc at each invocation's start and end) and
//! their resident memory, sampled every [`SAMPLE_EVERY`] so that each invocation gets
//! the peak of the two together, and each process's own peak (`VmHWM`, loading
//! included) at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nodewright_kube::testing::ControlPlane;

use super::process;

/// The components measured: the ones a function's requests reach.
const COMPONENTS: [&str; 2] = ["kube-apiserver", "etcd"];
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// kube-apiserver's and etcd's processes, sampled in the background until dropped.
pub struct ServerProcesses {
    components: Vec<(String, u32)>,
    ticks_per_second: f64,
    /// The largest sum of their resident sets since the last [`Self::take_peak_rss`].
    peak: Arc<AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Drop for ServerProcesses {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

impl ServerProcesses {
    /// Finds the components of `control_plane` and starts sampling them.
    pub fn watch(control_plane: &ControlPlane) -> Result<ServerProcesses, String> {
        let components: Vec<(String, u32)> = control_plane
            .component_processes()
            .into_iter()
            .filter(|(name, _)| COMPONENTS.contains(&name.as_str()))
            .collect();
        if components.len() != COMPONENTS.len() {
            return Err(format!(
                "the control plane's processes: found {components:?}, expected {COMPONENTS:?}"
            ));
        }
        let peak = Arc::new(AtomicU64::new(0));
        let sampler = tokio::spawn({
            let (components, peak) = (components.clone(), peak.clone());
            async move {
                let mut tick = tokio::time::interval(SAMPLE_EVERY);
                loop {
                    tick.tick().await;
                    peak.fetch_max(rss_sum(&components), Ordering::Relaxed);
                }
            }
        });
        Ok(ServerProcesses {
            components,
            ticks_per_second: process::ticks_per_second(),
            peak,
            sampler,
        })
    }

    /// CPU seconds both have used so far.
    pub fn cpu_seconds(&self) -> Result<f64, String> {
        self.components
            .iter()
            .map(|(_, pid)| process::cpu_seconds(*pid, self.ticks_per_second))
            .sum()
    }

    /// The peak of both resident sets together since the last call (or the start), and
    /// start over from now.
    pub fn take_peak_rss(&self) -> u64 {
        let now = rss_sum(&self.components);
        self.peak.swap(now, Ordering::Relaxed).max(now)
    }

    /// Each one's peak resident set since it started (`VmHWM`), by name.
    pub fn lifetime_peaks(&self) -> Vec<(String, u64)> {
        self.components
            .iter()
            .map(|(name, pid)| {
                let peak = process::status_bytes(*pid, "VmHWM").unwrap_or(0);
                (name.clone(), peak)
            })
            .collect()
    }
}

fn rss_sum(components: &[(String, u32)]) -> u64 {
    components
        .iter()
        .map(|(_, pid)| process::status_bytes(*pid, "VmRSS").unwrap_or(0))
        .sum()
}

/// The machine's load average over 1, 5 and 15 minutes (/proc/loadavg).
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut fields = text
        .split_whitespace()
        .map(|f| f.parse::<f64>().unwrap_or(0.0));
    [(); 3].map(|()| fields.next().unwrap_or(0.0))
}
