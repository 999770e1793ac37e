//! The interruption path as AWS runs it: EventBridge puts each event in an SQS queue
//! ([`SqsQueue`]: at-least-once, so now and then a message arrives twice; a message
//! not deleted comes back after the visibility timeout; after `max_receives` it goes to
//! the dead-letter queue), and Lambda's event source mapping hands batches of up to ten
//! messages to the interruption function ([`InterruptionFunction`]), which reads each
//! as the real handler does (`functions/interruption/src/lib.rs`): `parse_event`,
//! `action_for`, [`input_for`], then [`handle_interruption_until`] with the
//! invocation's time budget; a second copy of an event in one batch is acknowledged as
//! a duplicate; only retryable failures are left for redelivery.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use nodewright_core::interruption::{EventKind, RebalanceAction, action_for, parse_event};

use nodewright_engine::context::Ports;
use nodewright_engine::interrupt::{
    InterruptionConfig, InterruptionOutcome, handle_interruption_until, input_for,
};

use super::rng::Rng;

/// The queue's settings, as `template.yaml` sets them.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// `VisibilityTimeout` (must exceed the function's timeout).
    pub visibility_timeout: Duration,
    /// `maxReceiveCount` of the redrive policy.
    pub max_receives: u32,
    /// `BatchSize` of the event source mapping.
    pub batch_size: usize,
    /// How often a message is delivered a second time (at-least-once delivery).
    pub duplicate_rate: f64,
    /// How often an event is delivered late (5–120 s), after newer ones (fault
    /// injection; 0 by default).
    pub late_rate: f64,
    /// No event is delivered late from this instant on (Unix seconds).
    pub late_until: i64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            visibility_timeout: Duration::from_secs(70),
            max_receives: 3,
            batch_size: 10,
            duplicate_rate: 0.05,
            late_rate: 0.0,
            late_until: i64::MAX,
        }
    }
}

/// One SQS message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub message_id: String,
    pub body: String,
    pub sent_at: i64,
    visible_at: i64,
    receives: u32,
}

/// What went through the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Events sent (one per event, duplicates not counted).
    pub sent: usize,
    /// Extra copies delivered.
    pub duplicated: usize,
    /// Messages waiting or in flight now.
    pub queued: usize,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: usize,
    /// Events delivered late (`late_rate`).
    pub late: usize,
}

struct QueueInner {
    messages: Vec<Message>,
    dead: Vec<Message>,
    stats: QueueStats,
    rng: Rng,
    next_id: u64,
}

pub struct SqsQueue {
    config: QueueConfig,
    inner: Mutex<QueueInner>,
}

impl SqsQueue {
    pub fn new(config: QueueConfig, seed: u64) -> Self {
        SqsQueue {
            config,
            inner: Mutex::new(QueueInner {
                messages: Vec::new(),
                dead: Vec::new(),
                stats: QueueStats::default(),
                rng: Rng::new(seed),
                next_id: 0,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, QueueInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// EventBridge delivers `body` at `now`; now and then (`duplicate_rate`) a second
    /// copy follows within a few seconds, as at-least-once delivery allows; with a
    /// `late_rate`, now and then the event comes 5–120 s late, after newer ones.
    pub fn send(&self, body: String, now: i64) {
        let mut inner = self.inner();
        inner.stats.sent += 1;
        let late = if now < self.config.late_until && inner.rng.chance(self.config.late_rate) {
            inner.stats.late += 1;
            inner.rng.range(5, 120)
        } else {
            0
        };
        let now = now + late;
        let copies = if inner.rng.chance(self.config.duplicate_rate) {
            inner.stats.duplicated += 1;
            2
        } else {
            1
        };
        for copy in 0..copies {
            inner.next_id += 1;
            let delay = if copy == 0 {
                0
            } else {
                inner.rng.below(4) as i64
            };
            let id = inner.rng.uuid();
            inner.messages.push(Message {
                message_id: id,
                body: body.clone(),
                sent_at: now,
                visible_at: now + delay,
                receives: 0,
            });
        }
    }

    /// Up to `batch_size` visible messages, oldest first; they turn invisible for the
    /// visibility timeout. A message received `max_receives` times already goes to the
    /// dead-letter queue instead.
    pub fn receive(&self, now: i64) -> Vec<Message> {
        let mut inner = self.inner();
        let timeout = i64::try_from(self.config.visibility_timeout.as_secs()).unwrap_or(i64::MAX);
        let mut visible: Vec<usize> = (0..inner.messages.len())
            .filter(|&i| inner.messages[i].visible_at <= now)
            .collect();
        visible.sort_by_key(|&i| (inner.messages[i].sent_at, i));
        let mut batch = Vec::new();
        let mut dead = Vec::new();
        for i in visible {
            if batch.len() == self.config.batch_size {
                break;
            }
            let m = &mut inner.messages[i];
            if m.receives >= self.config.max_receives {
                dead.push(i);
                continue;
            }
            m.receives += 1;
            m.visible_at = now + timeout;
            batch.push(m.clone());
        }
        dead.sort_unstable_by(|a, b| b.cmp(a));
        for i in dead {
            let m = inner.messages.remove(i);
            inner.dead.push(m);
            inner.stats.dead_lettered += 1;
        }
        batch
    }

    /// The function acknowledged the message.
    pub fn delete(&self, message_id: &str) {
        self.inner().messages.retain(|m| m.message_id != message_id);
    }

    pub fn stats(&self) -> QueueStats {
        let inner = self.inner();
        QueueStats {
            queued: inner.messages.len(),
            ..inner.stats
        }
    }

    /// Messages in the dead-letter queue.
    pub fn dead_letters(&self) -> Vec<Message> {
        self.inner().dead.clone()
    }
}

/// What became of one record (as the Lambda handler's `Disposition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Disposition {
    /// Unreadable: acknowledged.
    Malformed,
    /// Read, nothing to do: acknowledged.
    Ignored,
    /// Handled before (another delivery, or another copy in this batch): acknowledged.
    Duplicate,
    Handled,
    /// Retryable failure: left in the queue for redelivery.
    Retry,
    /// A failure no retry can fix: acknowledged.
    Failed,
}

/// One record's result.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordResult {
    pub message_id: String,
    pub event_id: Option<String>,
    pub kind: Option<EventKind>,
    pub disposition: Disposition,
    pub provisioner_needed: bool,
}

/// The interruption Lambda: configuration as `template.yaml` and `Config::from_env`
/// set it.
pub struct InterruptionFunction {
    pub ports: Ports,
    pub config: InterruptionConfig,
    pub rebalance: RebalanceAction,
    /// The function's timeout (template: 60 s).
    pub timeout: Duration,
}

/// Time the handler keeps free before its deadline (as the Lambda's `DEADLINE_MARGIN_SECS`).
pub const DEADLINE_MARGIN_SECS: i64 = 10;

impl InterruptionFunction {
    /// One invocation with one batch: the records concurrently, drains kept going until
    /// the invocation's deadline less the margin.
    pub async fn invoke(&self, batch: &[Message]) -> Vec<RecordResult> {
        let now = self.ports.clock.now();
        let timeout = i64::try_from(self.timeout.as_secs()).unwrap_or(i64::MAX);
        let until = (now + timeout - DEADLINE_MARGIN_SECS).max(now);
        let mut seen = HashSet::new();
        let firsts: Vec<bool> = batch
            .iter()
            .map(|m| match event_id_of(&m.body) {
                Some(id) => seen.insert(id),
                None => true,
            })
            .collect();
        futures_util::future::join_all(batch.iter().zip(firsts).map(|(m, first)| async move {
            if first {
                self.record(m, until).await
            } else {
                RecordResult {
                    message_id: m.message_id.clone(),
                    event_id: event_id_of(&m.body),
                    kind: None,
                    disposition: Disposition::Duplicate,
                    provisioner_needed: false,
                }
            }
        }))
        .await
    }

    async fn record(&self, message: &Message, until: i64) -> RecordResult {
        let mut result = RecordResult {
            message_id: message.message_id.clone(),
            event_id: None,
            kind: None,
            disposition: Disposition::Malformed,
            provisioner_needed: false,
        };
        let Ok(event) = parse_event(&message.body) else {
            return result;
        };
        result.event_id = Some(event.id.clone());
        result.kind = Some(event.kind);
        let action = action_for(&event, self.rebalance);
        let Some(input) = input_for(&event, &action) else {
            result.disposition = Disposition::Ignored;
            return result;
        };
        match handle_interruption_until(&self.ports, &self.config, input, until).await {
            Ok(InterruptionOutcome::Duplicate) => result.disposition = Disposition::Duplicate,
            Ok(outcome) => {
                result.disposition = Disposition::Handled;
                result.provisioner_needed = outcome.provisioner_needed();
            }
            Err(e) if e.kind().is_some_and(|k| k.is_retryable()) => {
                result.disposition = Disposition::Retry
            }
            Err(_) => result.disposition = Disposition::Failed,
        }
        result
    }
}

fn event_id_of(body: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    serde_json::from_str::<Id>(body).ok().map(|i| i.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(duplicate_rate: f64) -> SqsQueue {
        SqsQueue::new(
            QueueConfig {
                duplicate_rate,
                ..QueueConfig::default()
            },
            42,
        )
    }

    #[test]
    fn a_message_not_deleted_comes_back_after_the_visibility_timeout() {
        let q = queue(0.0);
        q.send("{}".into(), 100);
        let first = q.receive(100);
        assert_eq!(first.len(), 1);
        assert!(q.receive(101).is_empty(), "invisible while in flight");
        let again = q.receive(100 + 70);
        assert_eq!(again[0].message_id, first[0].message_id);
        q.delete(&again[0].message_id);
        assert!(q.receive(10_000).is_empty());
    }

    #[test]
    fn a_message_received_too_often_goes_to_the_dead_letter_queue() {
        let q = queue(0.0);
        q.send("{}".into(), 0);
        for round in 0..3 {
            assert_eq!(q.receive(round * 70).len(), 1);
        }
        assert!(q.receive(3 * 70).is_empty());
        assert_eq!(q.dead_letters().len(), 1);
        assert_eq!(q.stats().dead_lettered, 1);
    }

    #[test]
    fn a_late_event_is_received_after_a_newer_one() {
        let q = SqsQueue::new(
            QueueConfig {
                duplicate_rate: 0.0,
                late_rate: 1.0,
                ..QueueConfig::default()
            },
            7,
        );
        q.send("{\"id\":\"old\"}".into(), 0);
        assert!(q.receive(4).is_empty(), "at least 5 s late");
        let on_time = SqsQueue::new(QueueConfig::default(), 7);
        on_time.send("{}".into(), 0);
        assert_eq!(on_time.receive(0).len(), 1);
        let mut order = Vec::new();
        let q2 = SqsQueue::new(
            QueueConfig {
                duplicate_rate: 0.0,
                late_rate: 0.5,
                ..QueueConfig::default()
            },
            11,
        );
        for i in 0..20 {
            q2.send(format!("{i}"), i);
        }
        for t in 0..200 {
            for m in q2.receive(t) {
                q2.delete(&m.message_id);
                order.push(m.body.parse::<i64>().unwrap());
            }
        }
        assert_eq!(order.len(), 20, "none lost");
        assert!(q2.stats().late > 0);
        assert!(
            order.windows(2).any(|w| w[0] > w[1]),
            "out of order: {order:?}"
        );
        assert_eq!(q.stats().late, 1);
    }

    #[test]
    fn every_message_is_delivered_at_least_once_and_some_twice() {
        let q = queue(0.5);
        for i in 0..40 {
            q.send(format!("{{\"id\":\"{i}\"}}"), 0);
        }
        let mut bodies = Vec::new();
        loop {
            let batch = q.receive(10);
            if batch.is_empty() {
                break;
            }
            assert!(batch.len() <= 10);
            for m in batch {
                q.delete(&m.message_id);
                bodies.push(m.body);
            }
        }
        let distinct: HashSet<&String> = bodies.iter().collect();
        assert_eq!(distinct.len(), 40, "none lost");
        let stats = q.stats();
        assert!(stats.duplicated > 0);
        assert_eq!(bodies.len(), 40 + stats.duplicated);
    }
}
