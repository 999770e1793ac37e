//! The instance-type catalog and spot prices, as EC2 describes them, with the per-process
//! reuse that keeps a warm Lambda (and a test binary) from reading them every tick.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::LocationType;

use nodewright_core::api::model::{Ec2NodeClass, Kubelet};
use nodewright_core::catalog::{Catalog, InstanceType};
use nodewright_core::density::{self, FamilyFlags};
use nodewright_core::resources::Resources;
use nodewright_engine::ports::{CloudError, ErrorKind};

use super::Ec2Cloud;
use crate::error::cloud_error;

/// A value a warm Lambda reuses until it is `ttl` old (read again after that; a failed
/// read keeps nothing, so the next call tries again).
struct Reused<T> {
    value: Mutex<Option<(Instant, T)>>,
}

impl<T> Default for Reused<T> {
    fn default() -> Self {
        Self {
            value: Mutex::new(None),
        }
    }
}

impl<T: Clone> Reused<T> {
    fn get(&self, now: Instant, ttl: Duration) -> Option<T> {
        let value = self.value.lock().expect("reused value lock");
        value
            .as_ref()
            .filter(|(at, _)| now.saturating_duration_since(*at) < ttl)
            .map(|(_, v)| v.clone())
    }

    /// Reads the last value whatever its age (for facts that do not go stale, such as
    /// an instance type's architecture).
    fn peek<R>(&self, read: impl FnOnce(&T) -> Option<R>) -> Option<R> {
        let value = self.value.lock().expect("reused value lock");
        value.as_ref().and_then(|(_, v)| read(v))
    }

    fn put(&self, now: Instant, value: T) {
        *self.value.lock().expect("reused value lock") = Some((now, value));
    }
}

/// What EC2 says the same to every caller in a region: the catalog and spot prices.
/// Kept per process, not per `Ec2Cloud`: a Lambda container builds one anyway, and a
/// test binary that builds one per scenario reads them once (moto takes seconds to
/// answer DescribeInstanceTypes and DescribeSpotPriceHistory).
#[derive(Default)]
pub(super) struct ReadOnce {
    catalog: Reused<Arc<Catalog>>,
    spot_prices: Reused<BTreeMap<(String, String), f64>>,
}

impl ReadOnce {
    pub(super) fn for_endpoint(endpoint: &str, region: &str) -> Arc<ReadOnce> {
        static BY_ENDPOINT: LazyLock<Mutex<HashMap<String, Arc<ReadOnce>>>> =
            LazyLock::new(Mutex::default);
        BY_ENDPOINT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(format!("{endpoint} {region}"))
            .or_default()
            .clone()
    }
}

impl Ec2Cloud {
    /// The instance types offered in the region: the embedded catalog's entry where it
    /// has one, else one built from DescribeInstanceTypes; reused for `catalog_ttl`.
    pub(super) async fn read_catalog(&self) -> Result<Arc<Catalog>, CloudError> {
        if let Some(catalog) = self
            .read
            .catalog
            .get(Instant::now(), self.config.catalog_ttl)
        {
            return Ok(catalog);
        }
        // Which types are offered in at least one zone of the region.
        let mut offered: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .ec2
                .describe_instance_type_offerings()
                .location_type(LocationType::AvailabilityZone)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeInstanceTypeOfferings", e))?;
            for o in out.instance_type_offerings.unwrap_or_default() {
                if let (Some(t), Some(zone)) = (o.instance_type, o.location) {
                    offered
                        .entry(t.as_str().to_string())
                        .or_default()
                        .insert(zone);
                }
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        let embedded = Catalog::embedded();
        let mut types = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .ec2
                .describe_instance_types()
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeInstanceTypes", e))?;
            for info in out.instance_types.unwrap_or_default() {
                let Some(name) = info.instance_type.as_ref().map(|t| t.as_str().to_string()) else {
                    continue;
                };
                if !offered.contains_key(&name) {
                    continue;
                }
                if let Some(known) = embedded.get(&name) {
                    types.push(known.clone());
                    continue;
                }
                let arch = info
                    .processor_info
                    .as_ref()
                    .and_then(|p| p.supported_architectures.as_ref())
                    .map(|archs| {
                        if archs.contains(&aws_sdk_ec2::types::ArchitectureType::Arm64) {
                            "arm64"
                        } else {
                            "amd64"
                        }
                    })
                    .unwrap_or("amd64");
                let vcpus = info
                    .v_cpu_info
                    .as_ref()
                    .and_then(|v| v.default_v_cpus)
                    .unwrap_or(0);
                let memory = info
                    .memory_info
                    .as_ref()
                    .and_then(|m| m.size_in_mib)
                    .unwrap_or(0);
                if vcpus == 0 || memory == 0 {
                    continue;
                }
                types.push(instance_type_from_api(
                    &name,
                    arch,
                    i64::from(vcpus),
                    memory,
                ));
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        types.sort_by(|a, b| a.name.cmp(&b.name));
        if types.is_empty() {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                "DescribeInstanceTypes: no instance type is offered in this region",
            ));
        }
        let catalog = Arc::new(Catalog { types });
        self.read.catalog.put(Instant::now(), Arc::clone(&catalog));
        Ok(catalog)
    }

    /// The latest spot price of each (instance type, zone); reused for `spot_prices_ttl`.
    pub(super) async fn read_spot_prices(
        &self,
    ) -> Result<BTreeMap<(String, String), f64>, CloudError> {
        if let Some(prices) = self
            .read
            .spot_prices
            .get(Instant::now(), self.config.spot_prices_ttl)
        {
            return Ok(prices);
        }
        let mut latest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
        let mut next: Option<String> = None;
        let now = std::time::SystemTime::now();
        loop {
            let out = self
                .ec2
                .describe_spot_price_history()
                .product_descriptions("Linux/UNIX")
                .start_time(now.into())
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| cloud_error("DescribeSpotPriceHistory", e))?;
            for p in out.spot_price_history.unwrap_or_default() {
                let (Some(t), Some(zone), Some(price)) =
                    (p.instance_type, p.availability_zone, p.spot_price)
                else {
                    continue;
                };
                let Ok(price) = price.parse::<f64>() else {
                    continue;
                };
                let at = p.timestamp.map(|d| d.secs()).unwrap_or(0);
                let key = (t.as_str().to_string(), zone);
                if latest.get(&key).is_none_or(|(seen, _)| at >= *seen) {
                    latest.insert(key, (at, price));
                }
            }
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => break,
            }
        }
        let prices: BTreeMap<(String, String), f64> =
            latest.into_iter().map(|(k, (_, p))| (k, p)).collect();
        self.read.spot_prices.put(Instant::now(), prices.clone());
        Ok(prices)
    }

    /// Architecture of an instance type: the cached catalog, the embedded one, or the
    /// naming convention (a `g` after the generation digit means Graviton).
    pub(super) fn arch_of(&self, instance_type: &str) -> String {
        let cached = self.read.catalog.peek(|c| {
            c.get(instance_type).and_then(|t| {
                t.labels
                    .get(nodewright_core::well_known::LABEL_ARCH)
                    .cloned()
            })
        });
        cached
            .or_else(|| {
                Catalog::embedded().get(instance_type).and_then(|t| {
                    t.labels
                        .get(nodewright_core::well_known::LABEL_ARCH)
                        .cloned()
                })
            })
            .unwrap_or_else(|| guess_arch(instance_type).into())
    }

    /// The kubelet settings an `instance_type` node of `class` is given: the class's,
    /// with its expressions evaluated on the type (from the cached catalog, else the
    /// embedded one), as planning sized it. `None` when the type has no `maxPods`
    /// value or is unknown, so it cannot be launched as planned.
    pub(super) fn kubelet_for(&self, class: &Ec2NodeClass, instance_type: &str) -> Option<Kubelet> {
        if !class.kubelet.has_expressions() {
            return Some(class.kubelet.clone());
        }
        let flags = FamilyFlags::of(class.ami_family.as_deref());
        let resolve = |it: &InstanceType| density::resolved_kubelet(it, flags, &class.kubelet).ok();
        self.read
            .catalog
            .peek(|c| c.get(instance_type).map(resolve))
            .unwrap_or_else(|| Catalog::embedded().get(instance_type).and_then(resolve))
    }
}

fn guess_arch(instance_type: &str) -> &'static str {
    let family = instance_type.split('.').next().unwrap_or("");
    if family == "a1" {
        return "arm64";
    }
    match family.find(|c: char| c.is_ascii_digit()) {
        Some(i) if family[i + 1..].contains('g') => "arm64",
        _ => "amd64",
    }
}

/// Labels and allocatable for an instance type the embedded catalog does not know,
/// from what DescribeInstanceTypes says (allocatable with Karpenter's AL2023 overhead
/// formulas and 110 pods).
fn instance_type_from_api(name: &str, arch: &str, vcpus: i64, memory_mib: i64) -> InstanceType {
    let mut labels = BTreeMap::new();
    labels.insert(
        nodewright_core::well_known::LABEL_INSTANCE_TYPE.to_string(),
        name.to_string(),
    );
    labels.insert(
        nodewright_core::well_known::LABEL_ARCH.to_string(),
        arch.to_string(),
    );
    labels.insert(
        nodewright_core::well_known::LABEL_OS.to_string(),
        "linux".to_string(),
    );
    labels.insert(
        nodewright_core::well_known::LABEL_INSTANCE_CPU.to_string(),
        vcpus.to_string(),
    );
    labels.insert(
        nodewright_core::well_known::LABEL_INSTANCE_MEMORY.to_string(),
        memory_mib.to_string(),
    );
    if let Some((family, size)) = name.split_once('.') {
        labels.insert("karpenter.k8s.aws/instance-family".into(), family.into());
        labels.insert("karpenter.k8s.aws/instance-size".into(), size.into());
        if let Some(i) = family.find(|c: char| c.is_ascii_digit()) {
            labels.insert(
                "karpenter.k8s.aws/instance-category".into(),
                family[..i].into(),
            );
            let generation: String = family[i..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            labels.insert("karpenter.k8s.aws/instance-generation".into(), generation);
        }
    }
    let max_pods = 110i64;
    // kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of the next
    // two, 0.25% of the rest (millicores).
    let cores = vcpus * 1000;
    let reserved_cpu = [(1000, 60), (1000, 10), (2000, 5)]
        .iter()
        .scan(cores, |left, &(span, permille)| {
            let used = (*left).min(span);
            *left -= used;
            Some(used * permille / 1000)
        })
        .sum::<i64>()
        + (cores - 4000).max(0) * 25 / 10_000;
    let reserved_mem_mib = 255 + 11 * max_pods + 100; // kube-reserved + eviction threshold
    let mut allocatable = Resources::new();
    allocatable.set_milli("cpu", (cores - reserved_cpu).max(0));
    allocatable.set_milli(
        "memory",
        (memory_mib - reserved_mem_mib).max(0) * (1 << 20) * 1000,
    );
    allocatable.set_milli("pods", max_pods * 1000);
    let mut capacity = allocatable.clone();
    // The EBS volumes it attaches for pods (a resource planning counts, not capacity).
    allocatable.set_milli(
        nodewright_core::resources::WELL_KNOWN[nodewright_core::resources::EBS_ATTACHMENTS],
        nodewright_core::catalog::estimated_ebs_attachments(name) * 1000,
    );
    capacity.set_milli("cpu", cores);
    capacity.set_milli("memory", memory_mib * (1 << 20) * 1000);
    InstanceType {
        name: name.to_string(),
        labels,
        allocatable,
        capacity,
        on_demand_price: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_value_is_served_until_its_ttl_then_read_again() {
        let reused: Reused<u32> = Reused::default();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(300);
        assert_eq!(reused.get(t0, ttl), None, "nothing read yet");
        reused.put(t0, 7);
        assert_eq!(reused.get(t0 + Duration::from_secs(299), ttl), Some(7));
        assert_eq!(reused.get(t0 + ttl, ttl), None, "stale at the ttl");
        reused.put(t0 + ttl, 8);
        assert_eq!(reused.get(t0 + ttl, ttl), Some(8));
        assert_eq!(
            reused.get(t0, Duration::ZERO),
            None,
            "a zero ttl never reuses"
        );
    }

    #[test]
    fn graviton_families_are_arm64() {
        assert_eq!(guess_arch("m7g.large"), "arm64");
        assert_eq!(guess_arch("c7gn.xlarge"), "arm64");
        assert_eq!(guess_arch("a1.medium"), "arm64");
        assert_eq!(guess_arch("m5.large"), "amd64");
        assert_eq!(guess_arch("m7i-flex.large"), "amd64");
    }

    #[test]
    fn api_only_instance_types_get_karpenter_labels_and_overhead() {
        let t = instance_type_from_api("m9z.2xlarge", "amd64", 8, 32768);
        assert_eq!(t.labels["karpenter.k8s.aws/instance-family"], "m9z");
        assert_eq!(t.labels["karpenter.k8s.aws/instance-category"], "m");
        assert_eq!(t.labels["karpenter.k8s.aws/instance-generation"], "9");
        assert_eq!(t.allocatable.get_milli("cpu"), 8000 - 60 - 10 - 10 - 10);
        assert_eq!(
            t.allocatable
                .get_milli("attachable-volumes-csi-ebs.csi.aws.com"),
            25_000,
            "the Nitro default less the root volume and a second interface"
        );
        assert_eq!(t.on_demand_price, None);
    }
}
