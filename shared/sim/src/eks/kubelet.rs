//! The kubelet of each instance, from boot to stop: it registers its Node
//! `register_after` the instance came up (boot, nodeadm, kubelet start), renews its node
//! lease while the CNI comes up, and turns the node Ready `ready_after` registering; when
//! its instance goes (shutting down, stopping, stopped, terminated) it stops reporting.
//! A node whose instance went before it finished booting never turns Ready.

use std::collections::BTreeMap;
use std::time::Duration;

use nodewright_core::api::model::Taint;
use nodewright_core::catalog::{CapacityType, Catalog};
use nodewright_core::cluster::Node;
use nodewright_core::well_known::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_REGION, LABEL_ZONE,
};

/// How often a booting kubelet renews its node lease.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// An instance as EC2 reports it to the kubelets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceSeen<'a> {
    pub id: &'a str,
    /// EC2's state name: pending, running, shutting-down, terminated, stopping, stopped.
    pub state: &'a str,
    /// When it came up: its launch time, or when the harness first saw it.
    pub up_since: Duration,
}

impl InstanceSeen<'_> {
    /// Shutting down, stopping, stopped or terminated: its kubelet is gone.
    pub fn is_gone(&self) -> bool {
        matches!(
            self.state,
            "shutting-down" | "terminated" | "stopping" | "stopped"
        )
    }
}

/// What a kubelet does next. The harness carries it out, then reports it with
/// [`Kubelets::registered`] or [`Kubelets::done`]; a write that failed is simply not
/// reported and comes again at a later step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletWrite {
    /// The instance's kubelet registers its Node ([`joining_node`]): NotReady, tainted
    /// `karpenter.sh/unregistered` when Karpenter's user data launched it.
    Register { instance: String },
    /// A booting kubelet renews its node lease (so nothing else plays the node yet).
    Heartbeat { node: String },
    /// The kubelet finished booting: the node turns Ready.
    Ready { node: String },
    /// The instance went: its kubelet stops reporting, and the node lifecycle
    /// controller marks the node unreachable after its grace period.
    Stop { node: String },
}

/// One kubelet's life as far as it went.
#[derive(Debug, Clone, Default)]
struct Life {
    node: Option<String>,
    registered_at: Option<Duration>,
    booted: bool,
    stopped: bool,
    last_heartbeat: Option<Duration>,
}

/// Every instance's kubelet. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct Kubelets {
    register_after: Duration,
    ready_after: Duration,
    lives: BTreeMap<String, Life>,
    /// Node → the instance it registered for.
    instance_of: BTreeMap<String, String>,
    hold_registration: bool,
    hold_ready: bool,
}

impl Kubelets {
    pub fn new(register_after: Duration, ready_after: Duration) -> Self {
        Kubelets {
            register_after,
            ready_after,
            ..Kubelets::default()
        }
    }

    /// While held, no instance registers; once released, every instance whose
    /// `register_after` has passed registers at the next step.
    pub fn hold_registration(&mut self, hold: bool) {
        self.hold_registration = hold;
    }

    /// While held, registered nodes keep booting (a slow CNI); once released, every
    /// kubelet whose `ready_after` has passed turns its node Ready at the next step.
    pub fn hold_ready(&mut self, hold: bool) {
        self.hold_ready = hold;
    }

    /// What the kubelets of `instances` do at `now`, in the instances' order.
    pub fn step(&self, now: Duration, instances: &[InstanceSeen<'_>]) -> Vec<KubeletWrite> {
        let mut writes = Vec::new();
        for instance in instances {
            let life = self.lives.get(instance.id);
            let node = life.and_then(|l| l.node.clone());
            if instance.is_gone() {
                if let (Some(node), false) = (node, life.is_some_and(|l| l.stopped)) {
                    writes.push(KubeletWrite::Stop { node });
                }
                continue;
            }
            if instance.state != "running" || life.is_some_and(|l| l.stopped) {
                continue; // pending: still booting; or its kubelet stopped for good
            }
            match (node, life.and_then(|l| l.registered_at), life) {
                (None, _, _)
                    if !self.hold_registration
                        && now >= instance.up_since + self.register_after =>
                {
                    writes.push(KubeletWrite::Register {
                        instance: instance.id.to_string(),
                    });
                }
                (Some(node), Some(at), Some(life)) if !life.booted => {
                    if !self.hold_ready && now >= at + self.ready_after {
                        writes.push(KubeletWrite::Ready { node });
                    } else if life
                        .last_heartbeat
                        .is_none_or(|h| now.saturating_sub(h) >= HEARTBEAT)
                    {
                        writes.push(KubeletWrite::Heartbeat { node });
                    }
                }
                _ => {}
            }
        }
        writes
    }

    /// The kubelet of `instance` registered its Node `node` at `now`.
    pub fn registered(&mut self, instance: &str, node: &str, now: Duration) {
        self.instance_of
            .insert(node.to_string(), instance.to_string());
        let life = self.lives.entry(instance.to_string()).or_default();
        life.node = Some(node.to_string());
        life.registered_at = Some(now);
        life.last_heartbeat = Some(now);
    }

    /// `write` (a heartbeat, Ready or a stop) took effect at `now`.
    pub fn done(&mut self, write: &KubeletWrite, now: Duration) {
        let node = match write {
            KubeletWrite::Register { .. } => return,
            KubeletWrite::Heartbeat { node }
            | KubeletWrite::Ready { node }
            | KubeletWrite::Stop { node } => node,
        };
        let Some(life) = self.life_of_node(node) else {
            return;
        };
        match write {
            KubeletWrite::Heartbeat { .. } => life.last_heartbeat = Some(now),
            KubeletWrite::Ready { .. } => life.booted = true,
            KubeletWrite::Stop { .. } => life.stopped = true,
            KubeletWrite::Register { .. } => {}
        }
    }

    /// The kubelet of `node` stopped while its instance runs on (a hung kubelet): it
    /// does nothing more.
    pub fn stopped(&mut self, node: &str) {
        if let Some(life) = self.life_of_node(node) {
            life.stopped = true;
        }
    }

    fn life_of_node(&mut self, node: &str) -> Option<&mut Life> {
        let instance = self.instance_of.get(node)?;
        self.lives.get_mut(instance)
    }
}

/// An instance joining the cluster, as its kubelet knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoiningInstance<'a> {
    pub id: &'a str,
    pub zone: &'a str,
    pub instance_type: &'a str,
    pub capacity_type: CapacityType,
}

/// The Node an instance's kubelet registers, as Karpenter's user data configures it:
/// named `name` (EC2's private DNS name), providerID `aws:///<zone>/<id>`, the labels
/// it was launched with (`--node-labels`: the NodeClaim's, its NodePool's) plus the
/// ones the kubelet and the cloud provider set themselves (instance type, zone,
/// region, capacity type, hostname, arch, os), the taints it was launched with
/// (`--register-with-taints`), allocatable and capacity of its type from the catalog,
/// NotReady, and the boot id of its first boot.
pub fn joining_node(
    name: &str,
    instance: &JoiningInstance<'_>,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    catalog: &Catalog,
) -> Node {
    let it = catalog.get(instance.instance_type);
    let mut node_labels = BTreeMap::new();
    if let Some(it) = it {
        for key in ["kubernetes.io/arch", "kubernetes.io/os"] {
            if let Some(v) = it.labels.get(key) {
                node_labels.insert(key.to_string(), v.clone());
            }
        }
    }
    node_labels.extend(labels.clone());
    node_labels.insert(LABEL_INSTANCE_TYPE.into(), instance.instance_type.into());
    node_labels.insert(LABEL_ZONE.into(), instance.zone.into());
    let region = instance
        .zone
        .trim_end_matches(|c: char| c.is_ascii_lowercase())
        .to_string();
    node_labels.insert(LABEL_REGION.into(), region);
    node_labels.insert(
        LABEL_CAPACITY_TYPE.into(),
        instance.capacity_type.as_str().into(),
    );
    node_labels.insert(LABEL_HOSTNAME.into(), name.into());
    Node {
        name: name.into(),
        labels: node_labels,
        taints: taints.to_vec(),
        allocatable: it.map(|t| t.allocatable.clone()).unwrap_or_default(),
        capacity: it.map(|t| t.capacity.clone()).unwrap_or_default(),
        provider_id: Some(format!("aws:///{}/{}", instance.zone, instance.id)),
        unschedulable: false,
        ready: false,
        // The kubelet reports the machine's boot id; a reboot changes it.
        boot_id: Some(format!("{}-boot-0", instance.id)),
        ..Node::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(id: &'a str, state: &'a str, up: u64) -> InstanceSeen<'a> {
        InstanceSeen {
            id,
            state,
            up_since: Duration::from_secs(up),
        }
    }

    fn at(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Carries out every write as a harness whose writes all succeed would.
    fn apply(kubelets: &mut Kubelets, now: Duration, writes: &[KubeletWrite]) {
        for write in writes {
            match write {
                KubeletWrite::Register { instance } => {
                    kubelets.registered(instance, &format!("node-{instance}"), now)
                }
                other => kubelets.done(other, now),
            }
        }
    }

    #[test]
    fn a_running_instance_registers_after_its_boot_then_turns_ready_after_the_cni() {
        let mut k = Kubelets::new(at(20), at(10));
        let i = [seen("i-1", "running", 100)];
        assert!(k.step(at(119), &i).is_empty());
        let writes = k.step(at(120), &i);
        assert_eq!(
            writes,
            [KubeletWrite::Register {
                instance: "i-1".into()
            }]
        );
        apply(&mut k, at(120), &writes);
        assert!(
            k.step(at(121), &i).is_empty(),
            "heartbeat renewed at registration"
        );
        assert_eq!(
            k.step(at(122), &i),
            [KubeletWrite::Heartbeat {
                node: "node-i-1".into()
            }]
        );
        let writes = k.step(at(130), &i);
        assert_eq!(
            writes,
            [KubeletWrite::Ready {
                node: "node-i-1".into()
            }]
        );
        apply(&mut k, at(130), &writes);
        assert!(k.step(at(200), &i).is_empty());
    }

    #[test]
    fn a_pending_instance_does_not_register_and_a_failed_registration_comes_again() {
        let k = Kubelets::new(at(20), at(10));
        assert!(k.step(at(500), &[seen("i-1", "pending", 0)]).is_empty());
        let i = [seen("i-1", "running", 0)];
        assert_eq!(k.step(at(500), &i).len(), 1);
        // Not reported as registered: asked again.
        assert_eq!(k.step(at(501), &i).len(), 1);
    }

    #[test]
    fn an_instance_that_goes_while_booting_stops_its_kubelet_once_and_never_turns_ready() {
        let mut k = Kubelets::new(at(20), at(10));
        let writes = k.step(at(20), &[seen("i-1", "running", 0)]);
        apply(&mut k, at(20), &writes);
        let gone = [seen("i-1", "shutting-down", 0)];
        let writes = k.step(at(40), &gone);
        assert_eq!(
            writes,
            [KubeletWrite::Stop {
                node: "node-i-1".into()
            }]
        );
        apply(&mut k, at(40), &writes);
        assert!(k.step(at(41), &gone).is_empty());
        assert!(k.step(at(60), &[seen("i-1", "running", 0)]).is_empty());
    }

    #[test]
    fn holds_keep_instances_unregistered_and_nodes_booting_until_released() {
        let mut k = Kubelets::new(at(2), at(1));
        let i = [seen("i-1", "running", 0)];
        k.hold_registration(true);
        assert!(k.step(at(10), &i).is_empty());
        k.hold_registration(false);
        let writes = k.step(at(10), &i);
        apply(&mut k, at(10), &writes);
        k.hold_ready(true);
        assert_eq!(
            k.step(at(20), &i),
            [KubeletWrite::Heartbeat {
                node: "node-i-1".into()
            }]
        );
        k.hold_ready(false);
        assert_eq!(
            k.step(at(20), &i),
            [KubeletWrite::Ready {
                node: "node-i-1".into()
            }]
        );
    }

    #[test]
    fn the_joining_node_carries_the_launch_labels_and_taints_and_what_the_kubelet_adds() {
        let catalog = Catalog::embedded();
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())]);
        let taints = [Taint {
            key: "karpenter.sh/unregistered".into(),
            value: None,
            effect: nodewright_core::api::model::TaintEffect::NoExecute,
        }];
        let node = joining_node(
            "ip-10-0-0-1.ec2.internal",
            &JoiningInstance {
                id: "i-1",
                zone: "us-east-1a",
                instance_type: "m5.large",
                capacity_type: CapacityType::Spot,
            },
            &labels,
            &taints,
            catalog,
        );
        assert_eq!(node.provider_id.as_deref(), Some("aws:///us-east-1a/i-1"));
        assert_eq!(node.labels[LABEL_REGION], "us-east-1");
        assert_eq!(node.labels[LABEL_CAPACITY_TYPE], "spot");
        assert_eq!(node.labels["kubernetes.io/arch"], "amd64");
        assert_eq!(node.labels["karpenter.sh/nodepool"], "general");
        assert_eq!(node.taints, taints);
        assert!(!node.ready);
        assert!(node.allocatable.get_milli("cpu") > 0);
    }
}
