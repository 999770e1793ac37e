//! The NodeClaim mirrors: the store's claims written to the cluster as
//! `karpenter.sh/v1` NodeClaims (`crate::mirror` builds them), a bounded number of
//! writes a pass, each write remembered so an unchanged claim costs nothing.

use super::*;

/// Mirror objects (NodeClaims) one pass writes at most: a create is two requests (the
/// object, then its status), so 150 take up to 15 s at the client's 20 requests a
/// second. A larger backlog is written by the next ticks, not past the deadline.
pub const MIRROR_WRITES_PER_PASS: usize = 150;

/// The mirrors as this process last wrote them, and the warnings already given.
#[derive(Default)]
pub(super) struct MirrorMemory {
    written: Mutex<HashMap<String, Mirror>>,
    warned_foreign: Mutex<HashSet<String>>,
}

impl MirrorMemory {
    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<String, Mirror>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl KubeCluster {
    /// Brings the NodeClaim mirrors to `claims`: creates, updates and deletes at most
    /// [`MIRROR_WRITES_PER_PASS`] (or the configured number) a pass.
    pub(super) async fn write_mirrors(
        &self,
        claims: &[NodeClaim],
    ) -> Result<MirrorReport, ClusterError> {
        let view = self.view().await;
        let watched = view.node_claims();
        view.catch_up().await;
        let read = watched.read().await?;
        let mut report = MirrorReport::default();
        if read.missing {
            // The watch said so, once (see `watch`).
            report.skipped = Some(crd_missing(&NODE_CLAIMS));
            return Ok(report);
        }
        let seen: HashMap<String, Seen> = read
            .objects
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        let wanted: BTreeMap<String, Mirror> = claims
            .iter()
            .filter_map(mirror_of)
            .map(|m| (m.name.clone(), m))
            .collect();
        let mut failed: Option<ClusterError> = None;
        let api = self.crd_api(&NODE_CLAIMS);
        let mut doomed: Vec<&String> = seen
            .iter()
            .filter(|(name, s)| s.ours && !wanted.contains_key(*name))
            .map(|(name, _)| name)
            .collect();
        doomed.sort();
        for name in doomed {
            if report.writes() >= self.mirror_writes {
                report.deferred += 1;
                continue;
            }
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => report.deleted.push(name.clone()),
                Err(e) if classify(&e) == ErrorKind::NotFound => {}
                Err(e) => {
                    failed.get_or_insert(cluster_error(
                        format!("deleting the NodeClaim mirror {name:?}"),
                        e,
                    ));
                    continue;
                }
            }
            watched.view.deleted(&(String::new(), name.clone()));
            self.mirrors.written().remove(name);
        }
        for want in wanted.values() {
            if report.writes() >= self.mirror_writes {
                if self.mirror_is_stale(seen.get(&want.name), want) {
                    report.deferred += 1;
                }
                continue;
            }
            if let Err(e) = self
                .write_mirror(watched, seen.get(&want.name), want, &mut report)
                .await
            {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Whether [`Self::write_mirror`] would write `want`: missing, or ours and reading
    /// otherwise (as this process last wrote it, else as the watch delivered it).
    fn mirror_is_stale(&self, seen: Option<&Seen>, want: &Mirror) -> bool {
        let Some(seen) = seen else {
            return true;
        };
        let last = self.mirrors.written().get(&want.name).cloned();
        seen.ours && last.as_ref().or(seen.mirror.as_ref()) != Some(want)
    }

    /// Writes one claim's mirror if it does not read as `want` (see `mirror_claims`).
    async fn write_mirror(
        &self,
        watched: &Watched<DynamicObject, Seen>,
        seen: Option<&Seen>,
        want: &Mirror,
        report: &mut MirrorReport,
    ) -> Result<(), ClusterError> {
        let api = self.crd_api(&NODE_CLAIMS);
        let name = want.name.as_str();
        let doing = |what: &str| format!("{what} the NodeClaim mirror {name:?}");
        let last = self.mirrors.written().get(name).cloned();
        let Some(seen) = seen else {
            return self.create_mirror(watched, want, report).await;
        };
        if !seen.ours {
            report.foreign.push(name.to_string());
            let first = lock(&self.mirrors.warned_foreign).insert(name.to_string());
            if first {
                warn!(
                    nodeclaim = name,
                    "a NodeClaim of this claim's name exists that nodewright does not manage (Karpenter's?); leaving it alone, not mirroring the claim"
                );
            }
            return Ok(());
        }
        // What the object reads as: as last written by this process, or (after a cold
        // start) as the watch delivered it.
        let current = last.as_ref().or(seen.mirror.as_ref());
        if current == Some(want) {
            self.mirrors
                .written()
                .insert(name.to_string(), want.clone());
            return Ok(());
        }
        if seen.mirror.as_ref().map(|m| &m.spec) != Some(&want.spec) {
            // The spec is immutable (the CRD refuses changes): delete and create again.
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if classify(&e) == ErrorKind::NotFound => {}
                Err(e) => return Err(cluster_error(doing("deleting"), e)),
            }
            watched.view.deleted(&(String::new(), name.to_string()));
            self.mirrors.written().remove(name);
            self.create_mirror(watched, want, report).await?;
            if let Some(created) = report.created.pop() {
                report.updated.push(created);
            }
            return Ok(());
        }
        let params = strict();
        if current.is_none_or(|c| c.labels != want.labels || c.annotations != want.annotations) {
            let answer = api
                .patch(name, &params, &Patch::Merge(&want.metadata_patch(current)))
                .await
                .map_err(|e| cluster_error(doing("labelling"), e))?;
            watched.view.wrote(&answer, view::as_seen_mirror);
        }
        if current.is_none_or(|c| c.status != want.status) {
            let answer = api
                .patch_status(name, &params, &Patch::Merge(&want.status_patch()))
                .await
                .map_err(|e| cluster_error(doing("writing the status of"), e))?;
            watched.view.wrote(&answer, view::as_seen_mirror);
        }
        self.mirrors
            .written()
            .insert(name.to_string(), want.clone());
        report.updated.push(name.to_string());
        Ok(())
    }

    /// Creates a mirror, then writes its status through `/status` (a create drops it).
    async fn create_mirror(
        &self,
        watched: &Watched<DynamicObject, Seen>,
        want: &Mirror,
        report: &mut MirrorReport,
    ) -> Result<(), ClusterError> {
        let api = self.crd_api(&NODE_CLAIMS);
        let name = want.name.as_str();
        let doing = |what: &str| format!("{what} the NodeClaim mirror {name:?}");
        let object: DynamicObject = serde_json::from_value(want.object())
            .map_err(|e| ClusterError::with_source(ErrorKind::Invalid, doing("building"), e))?;
        match create_strict::<_, DynamicObject>(&self.client, api.resource_url(), &object).await {
            Ok(created) => watched.view.wrote(&created, view::as_seen_mirror),
            // Created since the view last heard (its watch will say): the next tick
            // compares it.
            Err(e) if classify(&e) == ErrorKind::Conflict => return Ok(()),
            Err(e) => return Err(cluster_error(doing("creating"), e)),
        }
        let answer = api
            .patch_status(name, &strict(), &Patch::Merge(&want.status_patch()))
            .await
            .map_err(|e| cluster_error(doing("writing the status of"), e))?;
        watched.view.wrote(&answer, view::as_seen_mirror);
        self.mirrors
            .written()
            .insert(name.to_string(), want.clone());
        report.created.push(name.to_string());
        Ok(())
    }
}
