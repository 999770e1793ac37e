//! What an instance type leaves for pods under an EC2NodeClass's `kubelet` settings:
//! Karpenter's arithmetic (`pkg/providers/instancetype/types.go` in
//! aws/karpenter-provider-aws), so nodewright packs a node exactly as full as Karpenter
//! would.
//!
//! allocatable = capacity − (kubeReserved + systemReserved + hard eviction threshold):
//!
//! - **capacity**: cpu from `karpenter.k8s.aws/instance-cpu`; memory from
//!   `instance-memory` less 64 MiB on arm64 (Graviton's reserved CMA) and less the VM
//!   overhead, ⌈7.5%⌉ in MiB (Karpenter's `VM_MEMORY_OVERHEAD_PERCENT` default);
//!   ephemeral-storage as Karpenter's `ephemeralStorage` sizes it: with
//!   `instanceStorePolicy: RAID0`, the instance store of a type that has one
//!   (`instance-local-nvme`, in GB as EC2 reports `TotalSizeInGB`); else the
//!   `blockDeviceMappings` entry with `rootVolume: true`, or (Custom) the last entry,
//!   or the entry on the family's ephemeral device (`/dev/xvda` on AL2 and AL2023,
//!   `/dev/xvdb` on Bottlerocket, `/dev/sda1` on Windows), when it has a
//!   `volumeSize`; else the family's default volume (20 GiB, Windows 50 GiB); pods
//!   from `maxPods`, else
//!   the ENI limit (AL2, AL2023, Bottlerocket) or 110 (Windows), capped at
//!   `podsPerCore × vCPUs` where the family honours it. GPUs, EFAs and pod ENIs have
//!   no overhead and are the catalog's.
//! - **kubeReserved** defaults: cpu 6% of the first core, 1% of the second, 0.5% of
//!   the next two and 0.25% of the rest; memory 11 MiB per pod + 255 MiB, where "pods"
//!   is the ENI limit on families that size it so (AL2, AL2023) however `maxPods` is
//!   set, and the pod count otherwise; ephemeral-storage 1 GiB. Each key written
//!   replaces its default, the others stay.
//! - **eviction**: memory 100 Mi and ephemeral-storage 10% by default;
//!   `evictionHard` `memory.available` / `nodefs.available` replace them, as a
//!   quantity or a percentage of capacity. `evictionSoft` does not count: the kubelet
//!   subtracts only hard thresholds from allocatable, and Karpenter follows it
//!   (aws/karpenter-provider-aws#8565; older releases took the larger of the two).
//!
//! The embedded catalog's allocatable *is* this arithmetic under the default
//! configuration (its pods being the ENI limit), which the tests check for every type.
//! A type of a custom catalog without the instance-cpu / instance-memory labels has no
//! size to compute from: it keeps its allocatable, with only the pod count changed.

use crate::api::model::{Ec2NodeClass, EvictionThreshold, InstanceStorePolicy, Kubelet};
use crate::catalog::{Catalog, InstanceType};
use crate::kubelet_expressions::{self, Expression, ExpressionError, Vars};
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources, parse_milli};
use crate::well_known::LABEL_INSTANCE_LOCAL_NVME;
use crate::well_known::{LABEL_ARCH, LABEL_INSTANCE_CPU, LABEL_INSTANCE_MEMORY};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;
/// Karpenter's `--vm-memory-overhead-percent` default.
const VM_MEMORY_OVERHEAD: f64 = 0.075;

/// How an AMI family sizes pods and memory (Karpenter's `FeatureFlags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyFlags {
    /// kubeReserved memory counts the ENI-limited pods, not the configured pods.
    pub eni_limited_memory_overhead: bool,
    pub pods_per_core: bool,
    /// Without `maxPods`, pods is the ENI limit (else 110).
    pub eni_limited_pod_density: bool,
    /// ephemeral-storage without `blockDeviceMappings`: the family's default volume
    /// for it (Karpenter's `DefaultEBS` 20 GiB; Windows' root volume 50 GiB).
    pub volume_bytes: i64,
}

impl FamilyFlags {
    /// The flags of an `amiFamily` ("AL2023", "Bottlerocket", ...); AL2, AL2023 and
    /// Custom share the defaults, as in Karpenter.
    pub fn of(ami_family: Option<&str>) -> Self {
        match ami_family {
            Some("Bottlerocket") => Self {
                eni_limited_memory_overhead: false,
                pods_per_core: false,
                eni_limited_pod_density: true,
                volume_bytes: 20 * GIB,
            },
            Some(f) if f.starts_with("Windows") => Self {
                eni_limited_memory_overhead: false,
                pods_per_core: true,
                eni_limited_pod_density: false,
                volume_bytes: 50 * GIB,
            },
            _ => Self {
                eni_limited_memory_overhead: true,
                pods_per_core: true,
                eni_limited_pod_density: true,
                volume_bytes: 20 * GIB,
            },
        }
    }
}

/// Where a class puts node ephemeral-storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Storage {
    /// `instanceStorePolicy: RAID0`: the instance store, on types that have one.
    pub raid0: bool,
    /// The EBS volume size in bytes `blockDeviceMappings` give it; `None` for the
    /// family's default volume.
    pub volume_bytes: Option<i64>,
}

impl Storage {
    /// How `class` sizes ephemeral-storage (Karpenter's `ephemeralStorage`, less the
    /// instance type, which [`allocatable_with`] adds).
    pub fn of(class: &Ec2NodeClass) -> Self {
        let bdms = &class.block_device_mappings;
        let size = |i: usize| {
            bdms[i]
                .ebs
                .as_ref()
                .and_then(|e| e.volume_size.as_deref())
                .and_then(|s| parse_milli(s).ok())
                .map(|milli| milli / 1000)
        };
        let family = class.ami_family.as_deref();
        let volume_bytes = if bdms.is_empty() {
            None
        } else if let Some(root) = bdms.iter().position(|b| b.root_volume)
            && let Some(bytes) = size(root)
        {
            Some(bytes)
        } else if family == Some("Custom") {
            // Karpenter cannot know a custom AMI's layout: the last mapping, else its
            // default EBS volume.
            Some(size(bdms.len() - 1).unwrap_or(20 * GIB))
        } else {
            let device = ephemeral_device(family);
            bdms.iter()
                .position(|b| b.device_name == device)
                .and_then(size)
        };
        Self {
            raid0: class.instance_store_policy == Some(InstanceStorePolicy::Raid0),
            volume_bytes,
        }
    }
}

/// The device a family's kubelet and container runtime state lives on.
fn ephemeral_device(ami_family: Option<&str>) -> &'static str {
    match ami_family {
        Some("Bottlerocket") => "/dev/xvdb",
        Some(f) if f.starts_with("Windows") => "/dev/sda1",
        _ => "/dev/xvda",
    }
}

/// `it`'s allocatable under `kubelet` on an AMI family with `flags`, with the family's
/// default volume.
pub fn allocatable(it: &InstanceType, flags: FamilyFlags, kubelet: &Kubelet) -> Resources {
    allocatable_with(it, flags, kubelet, Storage::default())
}

/// `it`'s ephemeral-storage capacity in bytes under `storage`.
fn storage_bytes(it: &InstanceType, flags: FamilyFlags, storage: Storage) -> i64 {
    let nvme_gb = it
        .labels
        .get(LABEL_INSTANCE_LOCAL_NVME)
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|gb| *gb > 0);
    match (storage.raid0, nvme_gb) {
        (true, Some(gb)) => gb.saturating_mul(1_000_000_000),
        _ => storage.volume_bytes.unwrap_or(flags.volume_bytes),
    }
}

/// `it`'s allocatable under `kubelet` on an AMI family with `flags`, its
/// ephemeral-storage sized by `storage`.
pub fn allocatable_with(
    it: &InstanceType,
    flags: FamilyFlags,
    kubelet: &Kubelet,
    storage: Storage,
) -> Resources {
    if kubelet.has_expressions() {
        return match resolved_kubelet(it, flags, kubelet) {
            Ok(resolved) => allocatable_with(it, flags, &resolved, storage),
            Err(_) => without_pods(it),
        };
    }
    // The catalog's pods is the ENI limit: the kubelet reserves no pods.
    let eni_pods = it.allocatable.slot_milli(PODS) / 1000;
    let vcpus = it
        .labels
        .get(LABEL_INSTANCE_CPU)
        .and_then(|v| v.parse::<i64>().ok());
    let memory_mib = it
        .labels
        .get(LABEL_INSTANCE_MEMORY)
        .and_then(|v| v.parse::<i64>().ok());
    let pods = pods(it, flags, kubelet.max_pods, kubelet.pods_per_core);
    let mut out = it.allocatable.clone();
    out.set_milli("pods", pods.saturating_mul(1000));
    let (Some(vcpus), Some(memory_mib)) = (vcpus, memory_mib) else {
        return out;
    };
    let cpu = vcpus.saturating_mul(1000);
    let memory = vm_memory(memory_mib, it.labels.get(LABEL_ARCH).map(String::as_str));
    let storage = storage_bytes(it, flags, storage).saturating_mul(1000);

    let memory_pods = if flags.eni_limited_memory_overhead {
        eni_pods
    } else {
        pods
    };
    let mut overhead = Resources::new();
    let mut set = |slot: &str, milli: i64| overhead.set_milli(slot, milli);
    set("cpu", kube_reserved_cpu(cpu));
    set("memory", (11 * memory_pods + 255) * MIB * 1000);
    set("ephemeral-storage", GIB * 1000);
    for (name, milli) in &kubelet.kube_reserved {
        set(name, *milli);
    }
    let mut total = overhead;
    for (name, milli) in &kubelet.system_reserved {
        total.set_milli(name, total.get_milli(name).saturating_add(*milli));
    }
    let eviction_memory = match kubelet.eviction_hard.get("memory.available") {
        Some(t) => threshold(*t, memory),
        None => 100 * MIB * 1000,
    };
    let eviction_storage = match kubelet.eviction_hard.get("nodefs.available") {
        Some(t) => threshold(*t, storage),
        // ⌈10% of the volume⌉ in bytes, computed as Karpenter does in floating point.
        None => ((storage / 1000) as f64 / 100.0 * 10.0).ceil() as i64 * 1000,
    };
    for (slot, value) in [
        (MEMORY, eviction_memory),
        (EPHEMERAL_STORAGE, eviction_storage),
    ] {
        let name = crate::resources::WELL_KNOWN[slot];
        total.set_milli(name, total.get_milli(name).saturating_add(value));
    }
    for (slot, capacity) in [(CPU, cpu), (MEMORY, memory), (EPHEMERAL_STORAGE, storage)] {
        let name = crate::resources::WELL_KNOWN[slot];
        out.set_milli(name, capacity.saturating_sub(total.slot_milli(slot)));
    }
    out
}

/// The pods `it` runs: `max_pods`, else the ENI limit or 110, capped at
/// `pods_per_core` × vCPUs where the family honours it (Karpenter's `pods`).
fn pods(
    it: &InstanceType,
    flags: FamilyFlags,
    max_pods: Option<i64>,
    pods_per_core: Option<i64>,
) -> i64 {
    let vcpus = it
        .labels
        .get(LABEL_INSTANCE_CPU)
        .and_then(|v| v.parse::<i64>().ok());
    let mut pods = match max_pods {
        Some(max) => max,
        None if flags.eni_limited_pod_density => it.allocatable.slot_milli(PODS) / 1000,
        None => 110,
    };
    if let (Some(per_core), Some(cpus), true) = (pods_per_core, vcpus, flags.pods_per_core)
        && per_core > 0
    {
        pods = pods.min(per_core.saturating_mul(cpus));
    }
    pods
}

/// `it`'s values for kubelet expressions, with `max_pods` as given.
pub fn expression_vars(it: &InstanceType, max_pods: i64) -> Vars {
    let label = |key: &str| {
        it.labels
            .get(key)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let (default_enis, ips_per_eni) = kubelet_expressions::eni_limits(&it.name).unwrap_or((0, 0));
    Vars {
        vcpus: label(LABEL_INSTANCE_CPU),
        memory_mib: label(LABEL_INSTANCE_MEMORY),
        default_enis,
        ips_per_eni,
        max_pods,
        instance_type: it.name.clone(),
    }
}

/// A class's kubelet expressions, compiled once for all its instance types.
#[derive(Debug, Clone)]
struct Compiled {
    max_pods: Option<Expression>,
    /// `kubeReserved` by resource.
    kube_reserved: Vec<(String, Expression)>,
    /// `systemReserved` by resource.
    system_reserved: Vec<(String, Expression)>,
}

impl Compiled {
    fn of(kubelet: &Kubelet) -> Result<Self, ExpressionError> {
        let each = |map: &std::collections::BTreeMap<String, String>| {
            map.iter()
                .map(|(name, text)| Ok((name.clone(), Expression::compile(text)?)))
                .collect::<Result<Vec<_>, ExpressionError>>()
        };
        Ok(Self {
            max_pods: kubelet
                .max_pods_expression
                .as_deref()
                .map(Expression::compile)
                .transpose()?,
            kube_reserved: each(&kubelet.kube_reserved_expressions)?,
            system_reserved: each(&kubelet.system_reserved_expressions)?,
        })
    }
}

/// A type no pod fits: one whose `maxPods` expression has no value for it.
fn without_pods(it: &InstanceType) -> Resources {
    let mut out = it.allocatable.clone();
    out.set_milli("pods", 0);
    out
}

/// `kubelet` as `it` gets it: each expression evaluated on `it`'s values, its result
/// in the settings (and in `raw`, which user data writes) in place of the expression.
/// `maxPods` first, from the pods `it` would have without it; then the reservations,
/// from the pods it has with it. A reservation without a value for `it` (failed, or
/// negative) is left out, so the default applies; a `maxPods` without one is an error.
pub fn resolved_kubelet(
    it: &InstanceType,
    flags: FamilyFlags,
    kubelet: &Kubelet,
) -> Result<Kubelet, ExpressionError> {
    resolve(it, flags, kubelet, &Compiled::of(kubelet)?)
}

fn resolve(
    it: &InstanceType,
    flags: FamilyFlags,
    kubelet: &Kubelet,
    compiled: &Compiled,
) -> Result<Kubelet, ExpressionError> {
    let mut out = kubelet.clone();
    let mut raw = out.raw.take();
    if let Some(expression) = &compiled.max_pods {
        let without = pods(it, flags, None, kubelet.pods_per_core);
        let max_pods = expression.max_pods(&expression_vars(it, without))?;
        out.max_pods = Some(max_pods);
        if let Some(serde_json::Value::Object(raw)) = &mut raw {
            raw.insert("maxPods".into(), max_pods.into());
        }
    }
    let vars = expression_vars(it, pods(it, flags, out.max_pods, kubelet.pods_per_core));
    for (field, expressions, values) in [
        (
            "kubeReserved",
            &compiled.kube_reserved,
            &mut out.kube_reserved,
        ),
        (
            "systemReserved",
            &compiled.system_reserved,
            &mut out.system_reserved,
        ),
    ] {
        let mut raw_map = match &mut raw {
            Some(serde_json::Value::Object(raw)) => match raw.get_mut(field) {
                Some(serde_json::Value::Object(map)) => Some(map),
                _ => None,
            },
            _ => None,
        };
        for (name, expression) in expressions {
            let value = expression
                .evaluate(&vars)
                .ok()
                .and_then(|result| kubelet_expressions::reserved(name, result));
            match value {
                Some((text, milli)) => {
                    values.insert(name.clone(), milli);
                    if let Some(map) = raw_map.as_mut() {
                        map.insert(name.clone(), text.into());
                    }
                }
                None => {
                    if let Some(map) = raw_map.as_mut() {
                        map.remove(name);
                    }
                }
            }
        }
    }
    out.max_pods_expression = None;
    out.kube_reserved_expressions.clear();
    out.system_reserved_expressions.clear();
    out.raw = raw;
    Ok(out)
}

/// An expression of a class without a value on some instance types.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpressionGap {
    /// `spec.kubelet.maxPods`, `spec.kubelet.kubeReserved.memory`, ...
    pub field: String,
    /// The types, in catalog order.
    pub instance_types: Vec<String>,
    /// Why, on the first of them.
    pub first: ExpressionError,
}

/// The expressions of `class` that fail (or, for `maxPods`, leave [0, 2³¹−1]; for a
/// reservation, go negative) on some of `catalog`'s types: a type without a `maxPods`
/// value is never chosen, and one without a reservation's value gets the default, so
/// `validate` names them.
pub fn expression_gaps(catalog: &Catalog, class: &Ec2NodeClass) -> Vec<ExpressionGap> {
    let Ok(compiled) = Compiled::of(&class.kubelet) else {
        return Vec::new();
    };
    let flags = FamilyFlags::of(class.ami_family.as_deref());
    let kubelet = &class.kubelet;
    let mut gaps: Vec<ExpressionGap> = Vec::new();
    let mut record = |field: String, it: &InstanceType, error: ExpressionError| match gaps
        .iter_mut()
        .find(|g| g.field == field)
    {
        Some(gap) => gap.instance_types.push(it.name.clone()),
        None => gaps.push(ExpressionGap {
            field,
            instance_types: vec![it.name.clone()],
            first: error,
        }),
    };
    for it in &catalog.types {
        let mut max_pods = kubelet.max_pods;
        if let Some(expression) = &compiled.max_pods {
            let without = pods(it, flags, None, kubelet.pods_per_core);
            match expression.max_pods(&expression_vars(it, without)) {
                Ok(value) => max_pods = Some(value),
                Err(e) => {
                    record("spec.kubelet.maxPods".into(), it, e);
                    continue;
                }
            }
        }
        let vars = expression_vars(it, pods(it, flags, max_pods, kubelet.pods_per_core));
        for (field, expressions) in [
            ("kubeReserved", &compiled.kube_reserved),
            ("systemReserved", &compiled.system_reserved),
        ] {
            for (name, expression) in expressions {
                let error = match expression.evaluate(&vars) {
                    Ok(value) if value < 0 => ExpressionError::Negative {
                        instance_type: it.name.clone(),
                        value,
                    },
                    Ok(_) => continue,
                    Err(e) => e,
                };
                record(format!("spec.kubelet.{field}.{name}"), it, error);
            }
        }
    }
    gaps
}

/// Memory capacity in milli-bytes: the type's MiB, less Graviton's 64 MiB, less the VM
/// overhead rounded up to a MiB (in floating point, as Karpenter computes it).
fn vm_memory(memory_mib: i64, arch: Option<&str>) -> i64 {
    let mib = if arch == Some("arm64") {
        memory_mib - 64
    } else {
        memory_mib
    };
    let bytes = mib.saturating_mul(MIB);
    let overhead_mib = (bytes as f64 * VM_MEMORY_OVERHEAD / 1024.0 / 1024.0).ceil() as i64;
    (mib - overhead_mib)
        .saturating_mul(MIB)
        .saturating_mul(1000)
}

/// The default kubeReserved cpu for `cpu` milli-cores (Bottlerocket's ranges, which
/// Karpenter uses for every family).
fn kube_reserved_cpu(cpu: i64) -> i64 {
    let ranges: [(i64, i64, f64); 4] = [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, 1 << 31, 0.0025),
    ];
    // Each range reached adds its share, truncated to a milli-core.
    let mut reserved = 0;
    for (start, end, share) in ranges {
        if cpu >= start {
            let span = if cpu < end { cpu - start } else { end - start };
            reserved += (span as f64 * share) as i64;
        }
    }
    reserved
}

/// An eviction threshold in milli-units of a resource whose capacity is `capacity`.
fn threshold(t: EvictionThreshold, capacity: i64) -> i64 {
    match t {
        EvictionThreshold::Quantity(milli) => milli,
        // "100%" disables the threshold (the kubelet's reading).
        EvictionThreshold::Percent(100.0) => 0,
        // ⌈capacity × p / 100⌉ in whole units, as Karpenter computes it.
        EvictionThreshold::Percent(p) => {
            ((capacity / 1000) as f64 / 100.0 * p).ceil() as i64 * 1000
        }
    }
}

/// Every catalog type's allocatable under `class`, by catalog index; `None` when the
/// class changes nothing, so planning reads the catalog's own values.
pub fn class_allocatable(catalog: &Catalog, class: &Ec2NodeClass) -> Option<Vec<Resources>> {
    let flags = FamilyFlags::of(class.ami_family.as_deref());
    let storage = Storage::of(class);
    let default_storage = !storage.raid0
        && storage
            .volume_bytes
            .is_none_or(|bytes| bytes == flags.volume_bytes);
    // Bottlerocket's pods are the ENI limit too, so under defaults only Windows differs.
    let same_as_catalog =
        class.kubelet.is_default_density() && flags.eni_limited_pod_density && default_storage;
    if same_as_catalog {
        return None;
    }
    if class.kubelet.has_expressions() {
        // Compiled once for every type; the class was checked when it was read.
        let compiled = Compiled::of(&class.kubelet).ok();
        return Some(
            catalog
                .types
                .iter()
                .map(|it| {
                    match compiled
                        .as_ref()
                        .map(|c| resolve(it, flags, &class.kubelet, c))
                    {
                        Some(Ok(resolved)) => allocatable_with(it, flags, &resolved, storage),
                        _ => without_pods(it),
                    }
                })
                .collect(),
        );
    }
    Some(
        catalog
            .types
            .iter()
            .map(|it| allocatable_with(it, flags, &class.kubelet, storage))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::resources::format_milli;

    fn al2023() -> FamilyFlags {
        FamilyFlags::of(Some("AL2023"))
    }

    fn m5_large() -> &'static InstanceType {
        Catalog::embedded().get("m5.large").expect("m5.large")
    }

    fn mib(n: i64) -> i64 {
        n * MIB * 1000
    }

    #[test]
    fn the_default_configuration_reproduces_the_catalog_allocatable_of_every_type() {
        let catalog = Catalog::embedded();
        let mut wrong = Vec::new();
        for it in &catalog.types {
            let computed = allocatable(it, al2023(), &Kubelet::default());
            if computed != it.allocatable {
                wrong.push(format!(
                    "{}: catalog {:?}, computed {:?}",
                    it.name, it.allocatable, computed
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {} types differ, e.g. {:?}",
            wrong.len(),
            catalog.types.len(),
            &wrong[..wrong.len().min(3)]
        );
        // Bottlerocket sizes pods and memory the same way when nothing is set.
        let rocket = FamilyFlags::of(Some("Bottlerocket"));
        assert_eq!(
            allocatable(m5_large(), rocket, &Kubelet::default()),
            m5_large().allocatable
        );
    }

    #[test]
    fn max_pods_replaces_the_eni_limit_but_al2023_still_reserves_memory_for_the_eni_limit() {
        let kubelet = Kubelet {
            max_pods: Some(8),
            ..Kubelet::default()
        };
        let a = allocatable(m5_large(), al2023(), &kubelet);
        assert_eq!(a.get_milli("pods"), 8000);
        assert_eq!(a.get_milli("memory"), mib(6903));
        // Bottlerocket reserves for the pods it runs: 11 × 8 + 255 MiB instead of
        // 11 × 29 + 255 MiB.
        let rocket = allocatable(m5_large(), FamilyFlags::of(Some("Bottlerocket")), &kubelet);
        assert_eq!(rocket.get_milli("memory"), mib(7577 - 343 - 100));
    }

    #[test]
    fn pods_per_core_caps_pods_where_the_family_honours_it() {
        let kubelet = Kubelet {
            pods_per_core: Some(2),
            ..Kubelet::default()
        };
        assert_eq!(
            allocatable(m5_large(), al2023(), &kubelet).get_milli("pods"),
            4000
        );
        let with_max = Kubelet {
            max_pods: Some(3),
            ..kubelet.clone()
        };
        assert_eq!(
            allocatable(m5_large(), al2023(), &with_max).get_milli("pods"),
            3000
        );
        let rocket = FamilyFlags::of(Some("Bottlerocket"));
        assert_eq!(
            allocatable(m5_large(), rocket, &kubelet).get_milli("pods"),
            29_000
        );
    }

    #[test]
    fn kube_reserved_keys_replace_their_default_and_system_reserved_adds() {
        let kubelet = Kubelet {
            kube_reserved: BTreeMap::from([("memory".to_string(), mib(1024))]),
            system_reserved: BTreeMap::from([
                ("memory".to_string(), mib(512)),
                ("cpu".to_string(), 100),
            ]),
            ..Kubelet::default()
        };
        let a = allocatable(m5_large(), al2023(), &kubelet);
        // 7577 MiB after the VM overhead, less 1 GiB, 512 MiB and the 100 MiB eviction.
        assert_eq!(a.get_milli("memory"), mib(7577 - 1024 - 512 - 100));
        // The default kube-reserved cpu (60m + 10m) stays, system-reserved adds 100m.
        assert_eq!(a.get_milli("cpu"), 2000 - 70 - 100);
        assert_eq!(a.get_milli("ephemeral-storage"), 17 * GIB * 1000);
    }

    #[test]
    fn hard_eviction_thresholds_are_quantities_or_percentages_of_capacity() {
        let kubelet = Kubelet {
            eviction_hard: BTreeMap::from([
                (
                    "memory.available".to_string(),
                    EvictionThreshold::Percent(10.0),
                ),
                (
                    "nodefs.available".to_string(),
                    EvictionThreshold::Percent(100.0),
                ),
            ]),
            ..Kubelet::default()
        };
        let a = allocatable(m5_large(), al2023(), &kubelet);
        // ⌈10% of 7577 MiB⌉ = ⌈794506035.2⌉ bytes.
        assert_eq!(
            a.get_milli("memory"),
            mib(7577 - 574) - 794_506_036 * 1000,
            "{}",
            format_milli("memory", a.get_milli("memory"))
        );
        // 100% disables the threshold: only the 1 GiB kube-reserved is left out.
        assert_eq!(a.get_milli("ephemeral-storage"), 19 * GIB * 1000);
        let by_quantity = Kubelet {
            eviction_hard: BTreeMap::from([(
                "memory.available".to_string(),
                EvictionThreshold::Quantity(mib(500)),
            )]),
            ..Kubelet::default()
        };
        assert_eq!(
            allocatable(m5_large(), al2023(), &by_quantity).get_milli("memory"),
            mib(7577 - 574 - 500)
        );
    }

    #[test]
    fn graviton_types_lose_64_mib_before_the_vm_overhead() {
        let a1 = Catalog::embedded().get("a1.medium").unwrap();
        let kubelet = Kubelet {
            system_reserved: BTreeMap::from([("memory".to_string(), mib(100))]),
            ..Kubelet::default()
        };
        // 2048 − 64 = 1984 MiB, less ⌈148.8⌉ MiB, less 11 × 8 + 255 MiB and 100 MiB.
        assert_eq!(
            allocatable(a1, al2023(), &kubelet).get_milli("memory"),
            mib(1984 - 149 - 343 - 100 - 100)
        );
    }

    #[test]
    fn a_type_without_size_labels_keeps_its_allocatable_but_takes_max_pods() {
        let catalog = Catalog::from_json(
            r#"{"instanceTypes":[{"name":"small.x","labels":{},"allocatable":{"cpu":"2","memory":"4Gi","pods":"20"},"onDemandPricePerHour":0.05}]}"#,
        )
        .unwrap();
        let it = &catalog.types[0];
        let kubelet = Kubelet {
            max_pods: Some(8),
            kube_reserved: BTreeMap::from([("memory".to_string(), mib(1024))]),
            ..Kubelet::default()
        };
        let a = allocatable(it, al2023(), &kubelet);
        assert_eq!(a.get_milli("pods"), 8000);
        assert_eq!(a.get_milli("memory"), it.allocatable.get_milli("memory"));
    }

    #[test]
    fn only_a_class_that_changes_density_gets_its_own_allocatable() {
        let text = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\nspec:\n  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n  kubelet:\n    evictionSoft: {memory.available: 5%}\n    evictionSoftGracePeriod: {memory.available: 1m30s}\n";
        let mut class = crate::api::load(&[("class.yaml".to_string(), text.to_string())])
            .unwrap_or_else(|_| panic!("valid class"))
            .node_classes
            .remove(0);
        // A soft threshold alone changes nothing: the kubelet does not subtract it.
        assert_eq!(class_allocatable(Catalog::embedded(), &class), None);
        class.kubelet.max_pods = Some(8);
        let per_type = class_allocatable(Catalog::embedded(), &class).expect("computed");
        assert_eq!(per_type.len(), Catalog::embedded().types.len());
        assert!(per_type.iter().all(|r| r.get_milli("pods") <= 8000));
    }

    #[test]
    fn expressions_size_each_type_from_its_own_values_as_karpenter_does() {
        let class = load_class(
            "  kubelet:\n    maxPods: \"min(110, vcpus * 8)\"\n    kubeReserved: {cpu: \"vcpus * 30\", memory: \"max_pods * 11\"}\n    systemReserved: {memory: 100Mi}\n",
        );
        let m5 = resolved_kubelet(m5_large(), al2023(), &class.kubelet).unwrap();
        assert_eq!(m5.max_pods, Some(16));
        assert_eq!(
            m5.kube_reserved,
            BTreeMap::from([("cpu".to_string(), 60), ("memory".to_string(), mib(176))])
        );
        assert!(!m5.has_expressions());
        // User data gets the values, formatted as Karpenter writes them.
        assert_eq!(
            m5.raw,
            Some(serde_json::json!({
                "maxPods": 16,
                "kubeReserved": {"cpu": "60m", "memory": "176Mi"},
                "systemReserved": {"memory": "100Mi"},
            }))
        );
        let a = allocatable(m5_large(), al2023(), &class.kubelet);
        assert_eq!(a.get_milli("pods"), 16_000);
        assert_eq!(a.get_milli("cpu"), 2000 - 60);
        assert_eq!(a.get_milli("memory"), mib(7577 - 176 - 100 - 100));

        // 16 vCPUs: min(110, 128) pods, and memory for 110 of them.
        let big = Catalog::embedded().get("m5.4xlarge").unwrap();
        let resolved = resolved_kubelet(big, al2023(), &class.kubelet).unwrap();
        assert_eq!(resolved.max_pods, Some(110));
        assert_eq!(resolved.kube_reserved["memory"], mib(1216));

        let per_type = class_allocatable(Catalog::embedded(), &class).expect("computed");
        let index = Catalog::embedded()
            .types
            .iter()
            .position(|t| t.name == "m5.large")
            .unwrap();
        assert_eq!(per_type[index], a);
    }

    #[test]
    fn a_type_without_a_max_pods_value_gets_no_pods_and_a_failed_reservation_keeps_its_default() {
        let class = load_class("  kubelet:\n    maxPods: \"110 / (vcpus - 2)\"\n");
        assert!(resolved_kubelet(m5_large(), al2023(), &class.kubelet).is_err());
        assert_eq!(
            allocatable(m5_large(), al2023(), &class.kubelet).get_milli("pods"),
            0
        );
        let xlarge = Catalog::embedded().get("m5.xlarge").unwrap();
        assert_eq!(
            allocatable(xlarge, al2023(), &class.kubelet).get_milli("pods"),
            55_000
        );

        let class =
            load_class("  kubelet:\n    kubeReserved: {memory: \"memory_mib / (vcpus - 2)\"}\n");
        let resolved = resolved_kubelet(m5_large(), al2023(), &class.kubelet).unwrap();
        assert!(resolved.kube_reserved.is_empty());
        assert_eq!(resolved.raw, Some(serde_json::json!({"kubeReserved": {}})));
        assert_eq!(
            allocatable(m5_large(), al2023(), &class.kubelet),
            m5_large().allocatable,
            "the default reservation applies"
        );
    }

    #[test]
    fn expression_gaps_name_each_field_and_the_types_it_has_no_value_on() {
        let class = load_class(
            "  kubelet:\n    maxPods: \"instance_type == 'm5.large' ? -1 : 50\"\n    systemReserved: {cpu: \"100 / (vcpus - 4) + 100\", memory: \"vcpus - 5\"}\n",
        );
        let gaps = expression_gaps(Catalog::embedded(), &class);
        let mut fields: Vec<&str> = gaps.iter().map(|g| g.field.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "spec.kubelet.maxPods",
                "spec.kubelet.systemReserved.cpu",
                "spec.kubelet.systemReserved.memory"
            ]
        );
        let of = |field: &str| gaps.iter().find(|g| g.field == field).unwrap();
        assert_eq!(of("spec.kubelet.maxPods").instance_types, vec!["m5.large"]);
        assert!(matches!(
            of("spec.kubelet.maxPods").first,
            ExpressionError::OutOfRange { value: -1, .. }
        ));
        // Every 4-vCPU type divides by zero; m5.large is not counted again.
        let cpu = of("spec.kubelet.systemReserved.cpu");
        assert!(cpu.instance_types.contains(&"m5.xlarge".to_string()));
        assert!(!cpu.instance_types.contains(&"m5.large".to_string()));
        assert!(matches!(cpu.first, ExpressionError::Evaluation { .. }));
        let memory = of("spec.kubelet.systemReserved.memory");
        assert!(memory.instance_types.contains(&"m5.xlarge".to_string()));
        assert!(!memory.instance_types.contains(&"m5.2xlarge".to_string()));
        assert!(matches!(memory.first, ExpressionError::Negative { .. }));
        assert_eq!(
            expression_gaps(Catalog::embedded(), &load_class("")),
            vec![]
        );
    }

    const GB: i64 = 1_000_000_000;

    fn load_class(extra: &str) -> Ec2NodeClass {
        let text = format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: r\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n{extra}"
        );
        crate::api::load(&[("class.yaml".to_string(), text)])
            .unwrap_or_else(|_| panic!("valid class: {extra}"))
            .node_classes
            .remove(0)
    }

    fn storage_of(class: &Ec2NodeClass, it: &str) -> i64 {
        let it = Catalog::embedded()
            .get(it)
            .unwrap_or_else(|| panic!("{it}"));
        let flags = FamilyFlags::of(class.ami_family.as_deref());
        allocatable_with(it, flags, &class.kubelet, Storage::of(class))
            .get_milli("ephemeral-storage")
            / 1000
    }

    #[test]
    fn raid0_makes_ephemeral_storage_the_instance_store_less_the_eviction_threshold() {
        let class = load_class("  instanceStorePolicy: RAID0\n");
        // m5d.large: 75 GB of NVMe. Less 1 GiB kube-reserved and ⌈10%⌉ eviction.
        let m5d = Catalog::embedded().get("m5d.large").unwrap();
        assert_eq!(m5d.labels[LABEL_INSTANCE_LOCAL_NVME], "75");
        assert_eq!(
            storage_of(&class, "m5d.large"),
            75 * GB - GIB - 75 * GB / 10
        );
        // A type without an instance store keeps the EBS volume.
        assert_eq!(storage_of(&class, "m5.large"), 17 * GIB);
        // Without the policy the instance store is not used.
        assert_eq!(storage_of(&load_class(""), "m5d.large"), 17 * GIB);
        // A hard nodefs threshold is a share of the instance store then.
        let with_threshold = load_class(
            "  instanceStorePolicy: RAID0\n  kubelet:\n    evictionHard: {nodefs.available: 5%}\n",
        );
        assert_eq!(
            storage_of(&with_threshold, "i3.large"),
            475 * GB - GIB - (475 * GB / 100 * 5)
        );
    }

    #[test]
    fn a_root_volume_or_the_familys_ephemeral_device_sizes_ephemeral_storage() {
        let root = load_class(
            "  blockDeviceMappings:\n    - deviceName: /dev/xvdb\n      rootVolume: true\n      ebs: {volumeSize: 100Gi}\n",
        );
        assert_eq!(storage_of(&root, "m5.large"), 100 * GIB - GIB - 10 * GIB);
        // AL2023's ephemeral device is /dev/xvda.
        let xvda = load_class(
            "  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      ebs: {volumeSize: 50Gi}\n",
        );
        assert_eq!(storage_of(&xvda, "m5.large"), 50 * GIB - GIB - 5 * GIB);
        // Another device, not the root volume: the default 20 GiB stays.
        let other = load_class(
            "  blockDeviceMappings:\n    - deviceName: /dev/xvdc\n      ebs: {volumeSize: 500Gi}\n",
        );
        assert_eq!(storage_of(&other, "m5.large"), 17 * GIB);
        assert_eq!(class_allocatable(Catalog::embedded(), &other), None);
        // Bottlerocket keeps its data volume on /dev/xvdb.
        let rocket = load_class(
            "  amiFamily: Bottlerocket\n  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      ebs: {volumeSize: 4Gi}\n    - deviceName: /dev/xvdb\n      ebs: {volumeSize: 40Gi}\n",
        );
        assert_eq!(storage_of(&rocket, "m5.large"), 40 * GIB - GIB - 4 * GIB);
        // RAID0 wins over a root volume on a type with an instance store.
        let both = load_class(
            "  instanceStorePolicy: RAID0\n  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      rootVolume: true\n      ebs: {volumeSize: 100Gi}\n",
        );
        assert_eq!(storage_of(&both, "m5d.large"), 75 * GB - GIB - 75 * GB / 10);
        assert_eq!(storage_of(&both, "m5.large"), 100 * GIB - GIB - 10 * GIB);
    }

    #[test]
    fn a_pod_needing_more_than_the_ebs_default_is_planned_on_an_instance_store_only_with_raid0() {
        use crate::pricing::Pricing;
        use crate::scheduling::{SchedulerInput, schedule};
        let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n---\n";
        let plan = |class_extra: &str| {
            let class = format!(
                "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: r\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n{class_extra}"
            );
            let manifests = crate::api::load(&[("m.yaml".to_string(), format!("{pool}{class}"))])
                .unwrap_or_else(|_| panic!("valid manifests"));
            let mut pod = crate::testing::pod("scratch-0", "500m", "1Gi");
            pod.requests
                .add(&crate::testing::resources(&[("ephemeral-storage", "60Gi")]));
            let pricing = Pricing::default();
            schedule(&SchedulerInput {
                pods: &[pod],
                nodes: &[],
                daemonsets: &[],
                node_pools: &manifests.node_pools,
                node_classes: &manifests.node_classes,
                catalog: Catalog::embedded(),
                pricing: &pricing,
                in_flight: &[],
            })
        };
        // 60 GiB does not fit the 20 GiB root volume of any type.
        let without = plan("");
        assert!(without.new_claims.is_empty());
        assert_eq!(without.unschedulable.len(), 1);
        // With RAID0 it fits types whose instance store is large enough, and only them.
        let with = plan("  instanceStorePolicy: RAID0\n");
        assert_eq!(with.new_claims.len(), 1, "{:?}", with.unschedulable);
        for option in &with.new_claims[0].options {
            let it = Catalog::embedded().get(&option.instance_type).unwrap();
            let gb: i64 = it.labels[LABEL_INSTANCE_LOCAL_NVME].parse().unwrap();
            assert!(gb * GB > 60 * GIB, "{} has {gb} GB", it.name);
        }
    }
}
