//! Taking a claim away, one function per step of
//! `Disrupting → Draining → Terminating → Terminated`. Each step is one conditional
//! store write (plus its side effect), so a crash between any two leaves a state the
//! next tick resumes from with `advance`.
//!
//! Draining is trivial for now (it is only reached by claims whose node never
//! registered); evicting pods from a registered node grows here.

use tracing::info;

use nodewright_core::cluster::Node;
use nodewright_core::nodeclaim::{ClaimState, Disruption, DisruptionCause, NodeClaim};

use crate::context::Ports;
use crate::error::{EngineError, Result};
use crate::ports::{ClusterEvent, ErrorKind, EventType};

/// Writes `next` over `prev` conditionally on `prev`'s state and version.
pub(crate) async fn save(ports: &Ports, prev: &NodeClaim, next: NodeClaim) -> Result<NodeClaim> {
    ports.store.update_claim(&next, prev.state, prev.version).await?;
    Ok(next)
}

/// Step 1: the claim is to be taken away, for `cause`.
pub async fn disrupt(ports: &Ports, claim: &NodeClaim, cause: DisruptionCause, deadline: Option<i64>) -> Result<NodeClaim> {
    let now = ports.clock.now();
    let next = claim.transition(ClaimState::Disrupting, now, |c| {
        c.disruption = Some(Disruption { cause, deadline, since: now });
    })?;
    let next = save(ports, claim, next).await?;
    info!(claim = %claim.name, cause = ?cause, "disrupting");
    Ok(next)
}

/// Step 2: start draining the claim's node. With no node there is nothing to cordon
/// or evict.
pub async fn start_draining(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    let next = claim.transition(ClaimState::Draining, ports.clock.now(), |_| {})?;
    save(ports, claim, next).await
}

/// Step 3: the node is empty (or never existed): the instance may go.
pub async fn finish_draining(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    let next = claim.transition(ClaimState::Terminating, ports.clock.now(), |_| {})?;
    save(ports, claim, next).await
}

/// Step 4: terminate the instance the store records for this claim, then tombstone
/// the claim. An instance already gone (NotFound) counts as terminated.
pub async fn terminate_instance(ports: &Ports, claim: &NodeClaim) -> Result<NodeClaim> {
    if let Some(id) = &claim.instance_id {
        match ports.cloud.terminate(std::slice::from_ref(id)).await {
            Ok(()) => info!(claim = %claim.name, instance = %id, "terminated instance"),
            Err(e) if e.kind == ErrorKind::NotFound => info!(claim = %claim.name, instance = %id, "instance already gone"),
            Err(e) => return Err(EngineError::Cloud(e)),
        }
    }
    let next = claim.transition(ClaimState::Terminated, ports.clock.now(), |_| {})?;
    let next = save(ports, claim, next).await?;
    let cause = claim.disruption.as_ref().map(|d| format!("{:?}", d.cause)).unwrap_or_default();
    ports
        .emit(ClusterEvent {
            kind: "Node".into(),
            namespace: None,
            name: claim.node_name.clone().unwrap_or_else(|| claim.name.clone()),
            event_type: EventType::Normal,
            reason: "Terminated".into(),
            message: format!("NodeClaim {} terminated ({cause})", claim.name),
        })
        .await;
    Ok(next)
}

/// Runs the remaining steps for a claim whose node does not exist (so nothing to
/// drain), from whichever step it is at. Returns the claim as last written.
pub async fn advance(ports: &Ports, claim: &NodeClaim, node: Option<&Node>) -> Result<NodeClaim> {
    let mut c = claim.clone();
    loop {
        c = match c.state {
            ClaimState::Disrupting => start_draining(ports, &c).await?,
            // A node still present would need its pods evicted first: not this step's job yet.
            ClaimState::Draining if node.is_none() => finish_draining(ports, &c).await?,
            ClaimState::Terminating => terminate_instance(ports, &c).await?,
            _ => return Ok(c),
        };
    }
}
