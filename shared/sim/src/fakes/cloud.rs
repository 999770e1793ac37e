//! FakeCloud: EC2 in memory.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CloudOp {
    Catalog,
    SpotPrices,
    ResolveNodeClass,
    Launch,
    Terminate,
    Reboot,
    OwnedInstances,
    KarpenterInstances,
    InstanceStatus,
    CapacityReservations,
    ZonalShifts,
}

/// The errors an EC2 call answers when it fails at random (`inject_faults`): throttling
/// (RequestLimitExceeded) and 5xx (InternalError, ServiceUnavailable).
fn injectable(_op: CloudOp) -> &'static [ErrorKind] {
    &[ErrorKind::Throttled, ErrorKind::Unavailable]
}

/// An instance the fake cloud holds, with the request that launched it.
#[derive(Debug, Clone)]
pub struct FakeInstance {
    pub instance: Instance,
    pub price: f64,
    pub request: LaunchRequest,
}

/// A capacity reservation the fake cloud holds (`add_reservation`): how many
/// instances it takes in all; what it has left is that less the instances running in
/// it, so launches use it up and terminations give it back, as in EC2.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeReservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub reservation_type: ReservationType,
    pub total: u32,
    pub end_time: Option<i64>,
    pub interruptible: bool,
    pub owner_id: String,
    pub tags: BTreeMap<String, String>,
    pub instance_match_criteria: InstanceMatchCriteria,
    /// `active`, `expired`, `cancelled`, ...: only active ones are listed.
    pub state: String,
}

impl FakeReservation {
    /// An active open ODCR of `total` instances of `instance_type` in `zone`, owned by
    /// account 123456789012.
    pub fn new(id: &str, instance_type: &str, zone: &str, total: u32) -> Self {
        Self {
            id: id.to_string(),
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            reservation_type: ReservationType::Default,
            total,
            end_time: None,
            interruptible: false,
            owner_id: "123456789012".into(),
            tags: BTreeMap::new(),
            instance_match_criteria: InstanceMatchCriteria::Open,
            state: "active".into(),
        }
    }

    /// Whether `term` selects it, as DescribeCapacityReservations' filters would: the
    /// id, else every given field (tags with `"*"` matching any value).
    fn selected_by(&self, term: &CapacityReservationSelectorTerm) -> bool {
        if let Some(id) = &term.id {
            return *id == self.id;
        }
        term.owner_id.as_ref().is_none_or(|o| *o == self.owner_id)
            && term
                .instance_match_criteria
                .is_none_or(|c| c == self.instance_match_criteria)
            && term
                .tags
                .iter()
                .all(|(k, v)| self.tags.get(k).is_some_and(|have| v == "*" || have == v))
    }
}

struct CloudInner {
    catalog: Arc<Catalog>,
    spot_prices: BTreeMap<(String, String), f64>,
    subnets: Vec<Subnet>,
    /// What every EC2NodeClass resolves to (`set_images`, `set_security_groups`).
    images: Vec<Image>,
    security_group_ids: Vec<String>,
    /// Insertion order kept for stable listings.
    instances: Vec<FakeInstance>,
    /// Instance id → position in `instances`.
    by_id: HashMap<String, usize>,
    /// ClientToken (claim name) → instance id.
    tokens: HashMap<String, String>,
    out_of_capacity: HashSet<(String, String, CapacityType)>,
    /// Ids of the instances Karpenter launched (`insert_karpenter_instance`): not
    /// nodewright's, so not in `owned_instances`.
    karpenter: HashSet<String>,
    /// Instances whose status checks fail: id → (failing checks, since).
    impaired: BTreeMap<String, (Vec<String>, i64)>,
    /// RebootInstances calls not yet taken by [`FakeCloud::take_reboots`]: (id, when).
    reboots: Vec<(String, i64)>,
    reservations: Vec<FakeReservation>,
    /// What ARC holds on the cluster ([`FakeCloud::start_zonal_shift`]).
    zonal_shifts: Vec<ZonalShift>,
    faults: Faults<CloudOp, CloudError>,
    calls: Vec<Call<CloudOp>>,
    next_id: u64,
}

/// EC2 in memory: CreateFleet (instant) with ClientToken idempotency, capacity per
/// offering, TerminateInstances, owned-instance listing, and instances Karpenter
/// launched for the cluster.
pub struct FakeCloud {
    inner: Mutex<CloudInner>,
    clock: Arc<dyn Clock>,
    /// Region of the zones, for the names of managed instance profiles.
    region: String,
}

/// The Availability Zone ID the fake gives a zone name, shaped as AWS's are
/// (`us-east-1a` → `use1-az1`, `eu-west-2c` → `euw2-az3`). In AWS the mapping differs
/// per account, which is why ARC names zones by ID.
pub fn zone_id(zone: &str) -> String {
    let (region, letter) = zone.split_at(zone.len().saturating_sub(1));
    let mut short = String::new();
    for (i, part) in region.split('-').enumerate() {
        match i {
            0 => short.push_str(part),
            _ if part.chars().all(|c| c.is_ascii_digit()) => short.push_str(part),
            _ => short.extend(part.chars().next()),
        }
    }
    let n = letter
        .bytes()
        .next()
        .filter(u8::is_ascii_lowercase)
        .map_or(0, |b| b - b'a' + 1);
    format!("{short}-az{n}")
}

/// The cluster the fakes stand for (the name `node_class` discovers subnets by).
pub const FAKE_CLUSTER: &str = "test-cluster";

impl FakeCloud {
    /// A cloud offering `catalog` in `zones`, one subnet per zone, reading launch
    /// times from `clock`.
    pub fn new(catalog: Catalog, zones: &[&str], clock: Arc<dyn Clock>) -> Self {
        let subnets = zones
            .iter()
            .enumerate()
            .map(|(i, z)| Subnet {
                id: format!("subnet-{:017x}", mix(i as u64) >> 4),
                zone: z.to_string(),
                zone_id: zone_id(z),
                available_ips: 4091,
            })
            .collect();
        Self {
            inner: Mutex::new(CloudInner {
                catalog: Arc::new(catalog),
                spot_prices: BTreeMap::new(),
                subnets,
                images: vec![
                    Image {
                        id: "ami-0aaaaaaaaaaaaaaa1".into(),
                        arch: "amd64".into(),
                    },
                    Image {
                        id: "ami-0aaaaaaaaaaaaaaa2".into(),
                        arch: "arm64".into(),
                    },
                ],
                security_group_ids: vec!["sg-0123456789abcdef0".into()],
                instances: Vec::new(),
                by_id: HashMap::new(),
                tokens: HashMap::new(),
                out_of_capacity: HashSet::new(),
                karpenter: HashSet::new(),
                impaired: BTreeMap::new(),
                reboots: Vec::new(),
                reservations: Vec::new(),
                zonal_shifts: Vec::new(),
                faults: Faults::default(),
                calls: Vec::new(),
                next_id: 1,
            }),
            clock,
            region: zones
                .first()
                .map(|z| z.trim_end_matches(|c: char| c.is_ascii_lowercase()))
                .filter(|r| !r.is_empty())
                .unwrap_or("us-east-1")
                .to_string(),
        }
    }

    /// Replaces the subnets (several per zone, or none in a zone).
    pub fn set_subnets(&self, subnets: Vec<Subnet>) {
        lock(&self.inner).subnets = subnets;
    }

    /// Replaces the images every EC2NodeClass selects (a new AMI published under
    /// its alias): instances launched before run the old ones.
    pub fn set_images(&self, images: Vec<Image>) {
        lock(&self.inner).images = images;
    }

    /// ARC shifts traffic away from `zone` (a zone name: the fake reports it by its
    /// [`zone_id`], as ARC does) until `expires` (`None`: an autoshift, until
    /// [`FakeCloud::end_zonal_shifts`]).
    pub fn start_zonal_shift(&self, zone: &str, kind: &str, expires: Option<i64>) {
        lock(&self.inner).zonal_shifts.push(ZonalShift {
            zone_id: zone_id(zone),
            applied: true,
            expires,
            kind: kind.to_string(),
        });
    }

    /// ARC ends every shift on the cluster (an autoshift's end; a shift cancelled).
    pub fn end_zonal_shifts(&self) {
        lock(&self.inner).zonal_shifts.clear();
    }

    /// Replaces the security groups every EC2NodeClass selects.
    pub fn set_security_groups(&self, ids: Vec<String>) {
        lock(&self.inner).security_group_ids = ids;
    }

    pub fn set_spot_price(&self, instance_type: &str, zone: &str, price: f64) {
        lock(&self.inner)
            .spot_prices
            .insert((instance_type.to_string(), zone.to_string()), price);
    }

    /// Marks an offering as having (or not having) capacity.
    pub fn set_capacity(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        available: bool,
    ) {
        let key = (instance_type.to_string(), zone.to_string(), capacity_type);
        let mut inner = lock(&self.inner);
        if available {
            inner.out_of_capacity.remove(&key);
        } else {
            inner.out_of_capacity.insert(key);
        }
    }

    /// Adds (or replaces, by id) a capacity reservation.
    pub fn add_reservation(&self, reservation: FakeReservation) {
        let mut inner = lock(&self.inner);
        inner.reservations.retain(|r| r.id != reservation.id);
        inner.reservations.push(reservation);
    }

    /// Reservation `id` ends (`state`: `expired`, `cancelled`): EC2 lists it no more,
    /// and its instances run on as on-demand, outside any reservation.
    pub fn end_reservation(&self, id: &str, state: &str) {
        let mut inner = lock(&self.inner);
        for r in inner.reservations.iter_mut().filter(|r| r.id == id) {
            r.state = state.to_string();
        }
        for i in inner
            .instances
            .iter_mut()
            .filter(|i| i.instance.capacity_reservation_id.as_deref() == Some(id))
        {
            i.instance.capacity_reservation_id = None;
            i.instance.capacity_type = CapacityType::OnDemand;
        }
    }

    /// The owner of the interruptible reservation `instance` runs in takes one
    /// instance's capacity back: the reservation holds one fewer from now on (EC2
    /// terminates the instance after its warning; the caller does that). The
    /// instance's zone; `None` if it runs in no interruptible reservation.
    pub fn reclaim_from_reservation(&self, instance: &str) -> Option<String> {
        let mut inner = lock(&self.inner);
        let (reservation, zone) = inner
            .instances
            .iter()
            .find(|i| i.instance.id == instance && i.instance.state != "terminated")
            .and_then(|i| {
                Some((
                    i.instance.capacity_reservation_id.clone()?,
                    i.instance.zone.clone(),
                ))
            })?;
        let r = inner
            .reservations
            .iter_mut()
            .find(|r| r.id == reservation && r.interruptible)?;
        r.total = r.total.saturating_sub(1);
        Some(zone)
    }

    /// Whether reservation `id` is an interruptible one.
    pub fn interruptible_reservation(&self, id: &str) -> bool {
        lock(&self.inner)
            .reservations
            .iter()
            .any(|r| r.id == id && r.interruptible)
    }

    /// The instances reservation `id` can still take: its total less the instances
    /// running in it. `None` if there is no such reservation.
    pub fn reservation_available(&self, id: &str) -> Option<u32> {
        let inner = lock(&self.inner);
        let r = inner.reservations.iter().find(|r| r.id == id)?;
        Some(Self::available_in(&inner, r))
    }

    fn available_in(inner: &CloudInner, r: &FakeReservation) -> u32 {
        let used = inner
            .instances
            .iter()
            .filter(|i| {
                i.instance.state != "terminated"
                    && i.instance.capacity_reservation_id.as_deref() == Some(&r.id)
            })
            .count();
        r.total
            .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX))
    }

    recording_api!(CloudOp, CloudError, record);

    /// Every instance ever launched, terminated ones included.
    pub fn instances(&self) -> Vec<FakeInstance> {
        lock(&self.inner).instances.clone()
    }

    /// Instances not terminated.
    pub fn running(&self) -> Vec<Instance> {
        lock(&self.inner)
            .instances
            .iter()
            .filter(|i| i.instance.state != "terminated")
            .map(|i| i.instance.clone())
            .collect()
    }

    /// Whether `check` holds for every instance not terminated, visited in launch order
    /// (as [`FakeCloud::running`] lists them) without copying one. `check` runs under
    /// the fake's lock: it must not call the fake.
    pub fn all_running(&self, check: impl FnMut(&Instance) -> bool) -> bool {
        lock(&self.inner)
            .instances
            .iter()
            .filter(|i| i.instance.state != "terminated")
            .map(|i| &i.instance)
            .all(check)
    }

    pub fn instance(&self, id: &str) -> Option<FakeInstance> {
        let inner = lock(&self.inner);
        inner.by_id.get(id).map(|&at| inner.instances[at].clone())
    }

    /// Starts an instance outside any launch (another tool's, or a leaked one), tagged
    /// with `claim_name` if given and launched at `launch_time`.
    pub fn insert_instance(
        &self,
        instance_type: &str,
        zone: &str,
        claim_name: Option<&str>,
        launch_time: i64,
    ) -> Instance {
        let mut inner = lock(&self.inner);
        let id = Self::new_id(&mut inner);
        let instance = Instance {
            id,
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type: CapacityType::OnDemand,
            state: "running".into(),
            claim_name: claim_name.map(str::to_string),
            launch_time,
            image_id: None,
            subnet_id: None,
            security_group_ids: vec![],
            capacity_reservation_id: None,
        };
        let request = LaunchRequest {
            claim_name: claim_name.unwrap_or_default().to_string(),
            node_pool: String::new(),
            node_class: node_class("default"),
            resolved: ResolvedNodeClass {
                subnets: vec![],
                security_group_ids: vec![],
                images: vec![],
                instance_profile: None,
                reservations: vec![],
            },
            offerings: vec![],
            prices_overlaid: false,
            labels: BTreeMap::new(),
            taints: vec![],
            kubernetes_version: String::new(),
        };
        let at = inner.instances.len();
        inner.by_id.insert(instance.id.clone(), at);
        inner.instances.push(FakeInstance {
            instance: instance.clone(),
            price: 0.0,
            request,
        });
        instance
    }

    /// What the instance is billed per hour (one started outside any launch is billed
    /// nothing until told). False if there is no such instance.
    pub fn set_price(&self, id: &str, price: f64) -> bool {
        let mut inner = lock(&self.inner);
        let Some(&at) = inner.by_id.get(id) else {
            return false;
        };
        inner.instances[at].price = price;
        true
    }

    /// EC2 takes the instance away by itself (a spot reclaim at its deadline, a
    /// hardware failure): it is terminated, and no call of ours is logged. `false` if
    /// there is no such running instance.
    pub fn reclaim(&self, id: &str) -> bool {
        let mut inner = lock(&self.inner);
        let Some(&at) = inner.by_id.get(id) else {
            return false;
        };
        let instance = &mut inner.instances[at].instance;
        if instance.state == "terminated" {
            return false;
        }
        instance.state = "terminated".into();
        true
    }

    /// Starts an instance as Karpenter would have launched it for this cluster (tagged
    /// with `karpenter.sh/nodepool` = `node_pool` and, if given, `karpenter.sh/nodeclaim`
    /// = `claim_name`; not nodewright's): listed by
    /// `cluster_instances_launched_by_karpenter`, never by `owned_instances`. Its
    /// kubelet (`FakeCluster::register_from`) registers with Karpenter's labels.
    pub fn insert_karpenter_instance(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        node_pool: &str,
        claim_name: Option<&str>,
        launch_time: i64,
    ) -> Instance {
        let mut inner = lock(&self.inner);
        let id = Self::new_id(&mut inner);
        let instance = Instance {
            id,
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type,
            state: "running".into(),
            claim_name: claim_name.map(str::to_string),
            launch_time,
            image_id: None,
            subnet_id: None,
            security_group_ids: vec![],
            capacity_reservation_id: None,
        };
        let mut labels = BTreeMap::from([
            (LABEL_NODEPOOL.to_string(), node_pool.to_string()),
            ("karpenter.sh/registered".to_string(), "true".to_string()),
            ("karpenter.sh/initialized".to_string(), "true".to_string()),
        ]);
        if let Some(claim) = claim_name {
            labels.insert("karpenter.sh/nodeclaim".into(), claim.to_string());
        }
        let request = LaunchRequest {
            claim_name: claim_name.unwrap_or_default().to_string(),
            node_pool: node_pool.to_string(),
            node_class: node_class("default"),
            resolved: ResolvedNodeClass {
                subnets: vec![],
                security_group_ids: vec![],
                images: vec![],
                instance_profile: None,
                reservations: vec![],
            },
            offerings: vec![],
            prices_overlaid: false,
            labels,
            taints: vec![],
            kubernetes_version: String::new(),
        };
        let at = inner.instances.len();
        inner.by_id.insert(instance.id.clone(), at);
        inner.karpenter.insert(instance.id.clone());
        inner.instances.push(FakeInstance {
            instance: instance.clone(),
            price: 0.0,
            request,
        });
        instance
    }

    /// The RebootInstances calls since the last take: (instance id, when), in order.
    /// What reboots is up to whoever models the machine (the simulator's world).
    pub fn take_reboots(&self) -> Vec<(String, i64)> {
        std::mem::take(&mut lock(&self.inner).reboots)
    }

    /// The instance's status checks start failing now (`checks`: `instance`, `system`);
    /// an empty list makes them pass again. False if there is no such instance.
    pub fn set_impaired(&self, id: &str, checks: &[&str]) -> bool {
        let now = self.clock.now();
        let mut inner = lock(&self.inner);
        if !inner.by_id.contains_key(id) {
            return false;
        }
        if checks.is_empty() {
            inner.impaired.remove(id);
        } else {
            inner.impaired.insert(
                id.to_string(),
                (checks.iter().map(|c| c.to_string()).collect(), now),
            );
        }
        true
    }

    /// Sets an instance's state ("stopped", "shutting-down", ...) as EC2 would change it.
    pub fn set_state(&self, id: &str, state: &str) -> bool {
        let mut inner = lock(&self.inner);
        match inner.by_id.get(id).copied() {
            Some(at) => {
                inner.instances[at].instance.state = state.to_string();
                true
            }
            None => false,
        }
    }

    fn new_id(inner: &mut CloudInner) -> String {
        let n = inner.next_id;
        inner.next_id += 1;
        // "i-" + 17 lowercase hex digits, like current EC2 ids.
        format!("i-0{:016x}", mix(n))
    }
}

#[async_trait]
impl Cloud for FakeCloud {
    async fn catalog(&self) -> Result<Arc<Catalog>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::Catalog, "") {
            return Err(e);
        }
        Ok(Arc::clone(&lock(&self.inner).catalog))
    }

    async fn spot_prices(&self) -> Result<BTreeMap<(String, String), f64>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::SpotPrices, "") {
            return Err(e);
        }
        Ok(lock(&self.inner).spot_prices.clone())
    }

    async fn resolve_node_class(
        &self,
        node_class: &Ec2NodeClass,
        _kubernetes_version: &str,
    ) -> Result<ResolvedNodeClass, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::ResolveNodeClass, node_class.name.clone()) {
            return Err(e);
        }
        let inner = lock(&self.inner);
        Ok(ResolvedNodeClass {
            subnets: inner.subnets.clone(),
            security_group_ids: inner.security_group_ids.clone(),
            images: inner.images.clone(),
            // As Ec2Cloud: `instanceProfile` as written, else the managed one for the role.
            instance_profile: node_class.instance_profile_for(FAKE_CLUSTER, &self.region),
            reservations: vec![],
        })
    }

    async fn capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<Reservation>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::CapacityReservations, "") {
            return Err(e);
        }
        let inner = lock(&self.inner);
        Ok(inner
            .reservations
            .iter()
            .filter(|r| r.state == "active" && terms.iter().any(|t| r.selected_by(t)))
            .map(|r| Reservation {
                id: r.id.clone(),
                instance_type: r.instance_type.clone(),
                zone: r.zone.clone(),
                reservation_type: r.reservation_type,
                available: Self::available_in(&inner, r),
                end_time: r.end_time,
                interruptible: r.interruptible,
                node_classes: vec![],
            })
            .collect())
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, LaunchError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::Launch, request.claim_name.clone()) {
            return Err(LaunchError::Cloud(e));
        }
        let now = self.clock.now();
        let mut inner = lock(&self.inner);
        // ClientToken: the same token returns the instance it launched the first time.
        if let Some(id) = inner.tokens.get(&request.claim_name).cloned()
            && let Some(existing) = inner.instances.iter().find(|i| i.instance.id == id)
        {
            return Ok(Launched {
                instance_id: existing.instance.id.clone(),
                instance_type: existing.instance.instance_type.clone(),
                zone: existing.instance.zone.clone(),
                capacity_type: existing.instance.capacity_type,
                price: existing.price,
                reservation_id: existing.instance.capacity_reservation_id.clone(),
                unavailable: vec![],
            });
        }
        if request.offerings.is_empty() {
            return Err(LaunchError::Cloud(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "CreateFleet for {}: no launch template overrides",
                    request.claim_name
                ),
            )));
        }
        if let Some(unknown) = request
            .offerings
            .iter()
            .find(|o| inner.catalog.get(&o.instance_type).is_none())
        {
            return Err(LaunchError::Cloud(CloudError::new(
                ErrorKind::Invalid,
                format!(
                    "CreateFleet for {}: invalid instance type {}",
                    request.claim_name, unknown.instance_type
                ),
            )));
        }
        let subnet_zones: HashSet<&str> = inner.subnets.iter().map(|s| s.zone.as_str()).collect();
        // EC2's choice: on-demand at its own list price (`lowest-price`), unless the
        // request asks for its own order (`prioritized`, prices a NodeOverlay set);
        // spot at the request's prices (EC2's spot prices, as gathered).
        let ec2_price = |o: &Offering| match o.capacity_type {
            CapacityType::OnDemand if !request.prices_overlaid => inner
                .catalog
                .get(&o.instance_type)
                .and_then(|t| t.on_demand_price)
                .unwrap_or(o.price),
            _ => o.price,
        };
        let mut order: Vec<&Offering> = request.offerings.iter().collect();
        if !request.prices_overlaid {
            order.sort_by(|a, b| ec2_price(a).total_cmp(&ec2_price(b)));
        }
        let mut refused = Vec::new();
        let mut chosen = None;
        for o in order {
            let key = (o.instance_type.clone(), o.zone.clone(), o.capacity_type);
            if !subnet_zones.contains(o.zone.as_str()) || inner.out_of_capacity.contains(&key) {
                refused.push(o.clone());
                continue;
            }
            // A reserved offering launches into one of the class's reservations of
            // its type and zone that still has room (EC2 answers
            // ReservationCapacityExceeded otherwise, an insufficient-capacity error).
            let reservation = if o.capacity_type == CapacityType::Reserved {
                let room = request.resolved.reservations.iter().find_map(|wanted| {
                    inner.reservations.iter().find(|r| {
                        r.id == wanted.id
                            && r.state == "active"
                            && r.instance_type == o.instance_type
                            && r.zone == o.zone
                            && Self::available_in(&inner, r) > 0
                    })
                });
                match room {
                    Some(r) => Some(r.id.clone()),
                    None => {
                        refused.push(o.clone());
                        continue;
                    }
                }
            } else {
                None
            };
            chosen = Some((o.clone(), reservation));
            break;
        }
        let Some((o, reservation_id)) = chosen else {
            let message = format!(
                "CreateFleet for {}: InsufficientInstanceCapacity for {}",
                request.claim_name,
                refused
                    .iter()
                    .map(|o| format!("{}/{}/{}", o.instance_type, o.zone, o.capacity_type))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return Err(LaunchError::InsufficientCapacity {
                offerings: refused,
                message,
            });
        };
        let id = Self::new_id(&mut inner);
        // As Ec2Cloud launches: the request's image for the type's architecture, the
        // subnet with the most free addresses in the zone, every security group.
        let arch = inner
            .catalog
            .get(&o.instance_type)
            .and_then(|t| t.labels.get(LABEL_ARCH).cloned());
        let image_id = request
            .resolved
            .images
            .iter()
            .find(|i| arch.as_deref().is_none_or(|a| a == i.arch))
            .map(|i| i.id.clone());
        let subnet_id = request
            .resolved
            .subnets
            .iter()
            .filter(|s| s.zone == o.zone)
            .reduce(|best, s| {
                if s.available_ips > best.available_ips {
                    s
                } else {
                    best
                }
            })
            .map(|s| s.id.clone());
        let instance = Instance {
            id: id.clone(),
            instance_type: o.instance_type.clone(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type,
            state: "running".into(),
            claim_name: Some(request.claim_name.clone()),
            launch_time: now,
            image_id,
            subnet_id,
            security_group_ids: request.resolved.security_group_ids.clone(),
            capacity_reservation_id: reservation_id.clone(),
        };
        inner.tokens.insert(request.claim_name.clone(), id.clone());
        let at = inner.instances.len();
        inner.by_id.insert(id.clone(), at);
        inner.instances.push(FakeInstance {
            instance,
            price: o.price,
            request: request.clone(),
        });
        Ok(Launched {
            instance_id: id,
            instance_type: o.instance_type,
            zone: o.zone,
            capacity_type: o.capacity_type,
            price: o.price,
            reservation_id,
            unavailable: refused,
        })
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::Terminate, instance_ids.join(",")) {
            return Err(e);
        }
        let mut inner = lock(&self.inner);
        // TerminateInstances is all-or-nothing on unknown ids.
        if let Some(unknown) = instance_ids
            .iter()
            .find(|id| !inner.by_id.contains_key(*id))
        {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                format!("TerminateInstances: InvalidInstanceID.NotFound {unknown}"),
            ));
        }
        for id in instance_ids {
            if let Some(&at) = inner.by_id.get(id) {
                inner.instances[at].instance.state = "terminated".into();
            }
        }
        Ok(())
    }

    async fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::Reboot, instance_id.to_string()) {
            return Err(e);
        }
        let now = self.clock.now();
        let mut inner = lock(&self.inner);
        let running = inner
            .by_id
            .get(instance_id)
            .is_some_and(|&at| inner.instances[at].instance.state != "terminated");
        if !running {
            return Err(CloudError::new(
                ErrorKind::NotFound,
                format!("RebootInstances: InvalidInstanceID.NotFound {instance_id}"),
            ));
        }
        // A reboot clears what the status checks saw.
        inner.impaired.remove(instance_id);
        inner.reboots.push((instance_id.to_string(), now));
        Ok(())
    }

    async fn owned_instances(&self) -> Result<Vec<Instance>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::OwnedInstances, "") {
            return Err(e);
        }
        let inner = lock(&self.inner);
        Ok(inner
            .instances
            .iter()
            .filter(|i| {
                i.instance.state != "terminated" && !inner.karpenter.contains(&i.instance.id)
            })
            .map(|i| i.instance.clone())
            .collect())
    }

    async fn zonal_shifts(&self) -> Result<Vec<ZonalShift>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::ZonalShifts, "") {
            return Err(e);
        }
        // ARC stops listing a zonal shift once it has expired.
        let now = self.clock.now();
        Ok(lock(&self.inner)
            .zonal_shifts
            .iter()
            .filter(|z| z.expires.is_none_or(|end| end > now))
            .cloned()
            .collect())
    }

    async fn impaired_instances(
        &self,
    ) -> Result<Vec<nodewright_core::repair::ImpairedInstance>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::InstanceStatus, "") {
            return Err(e);
        }
        let inner = lock(&self.inner);
        // EC2 reports status checks of running instances only.
        Ok(inner
            .impaired
            .iter()
            .filter(|(id, _)| {
                inner
                    .by_id
                    .get(*id)
                    .is_some_and(|&at| inner.instances[at].instance.state == "running")
            })
            .map(
                |(id, (checks, since))| nodewright_core::repair::ImpairedInstance {
                    instance_id: id.clone(),
                    checks: checks.clone(),
                    since: Some(*since),
                },
            )
            .collect())
    }

    async fn cluster_instances_launched_by_karpenter(&self) -> Result<Vec<Instance>, CloudError> {
        tokio::task::yield_now().await;
        if let Some(e) = self.record(CloudOp::KarpenterInstances, "") {
            return Err(e);
        }
        let inner = lock(&self.inner);
        Ok(inner
            .instances
            .iter()
            .filter(|i| {
                inner.karpenter.contains(&i.instance.id)
                    && matches!(
                        i.instance.state.as_str(),
                        "pending" | "running" | "stopping" | "stopped"
                    )
            })
            .map(|i| i.instance.clone())
            .collect())
    }
}

/// A minimal valid EC2NodeClass (al2023@latest, role "KarpenterNodeRole").
pub fn node_class(name: &str) -> Ec2NodeClass {
    Ec2NodeClass {
        name: name.to_string(),
        ami_selector_terms: vec![nodewright_core::api::model::AmiSelectorTerm::Alias {
            family: "al2023".into(),
            version: "latest".into(),
        }],
        ami_family: Some("AL2023".into()),
        subnet_selector_terms: vec![SelectorTerm::Tags(BTreeMap::from([(
            "karpenter.sh/discovery".to_string(),
            "test-cluster".to_string(),
        )]))],
        security_group_selector_terms: vec![SelectorTerm::Tags(BTreeMap::from([(
            "karpenter.sh/discovery".to_string(),
            "test-cluster".to_string(),
        )]))],
        role: Some("KarpenterNodeRole".into()),
        instance_profile: None,
        status_instance_profile: None,
        user_data: None,
        block_device_mappings: vec![],
        metadata_options: MetadataOptions::default(),
        tags: BTreeMap::new(),
        kubelet: Default::default(),
        associate_public_ip_address: None,
        detailed_monitoring: false,
        instance_store_policy: None,
        network_interfaces: vec![],
        cpu_options: None,
        placement_group_selector: None,
        ip_prefix_count: None,
        connection_tracking: None,
        capacity_reservation_selector_terms: vec![],
    }
}
