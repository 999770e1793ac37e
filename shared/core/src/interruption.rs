//! Interruption: how nodewright reads an EventBridge event and what it decides to do.
//!
//! [`parse_event`] turns the JSON of one event into a [`ParsedEvent`]; [`action_for`]
//! turns that into an [`Action`]. Both are pure: the caller passes the text and the
//! rebalance setting, and gets data back. Touching instances (and checking that this
//! cluster owns them) is the engine's job.
//!
//! Rules the parser keeps:
//! - Every instance id is checked (`i-` + 8 or 17 lowercase hex digits) before it lands in
//!   a [`ParsedEvent`]; a bad one is an error naming the field, never an action.
//! - Events nodewright has no use for (other detail-types, other sources, non-EC2 or
//!   non-scheduledChange Health events) parse as [`EventKind::Ignored`] with a reason.
//! - Fields nodewright does not read are tolerated, `account` may be missing (moto drops
//!   it on EventBridge→SQS), and a field of the wrong type is an error naming the field.
//!
//! Timestamps are parsed here by hand (RFC 3339 for `time`, RFC 1123/2822 or RFC 3339 for
//! a Health `startTime`): they are two small fixed formats, and a date-time crate would add
//! a dependency to the pure core for a few dozen lines of arithmetic.

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};
use thiserror::Error;

use crate::calendar::{civil_from_days, days_from_civil};
use crate::nodeclaim::is_instance_id;

pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
pub const REBALANCE_RECOMMENDATION: &str = "EC2 Instance Rebalance Recommendation";
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
pub const HEALTH_EVENT: &str = "AWS Health Event";
pub const CAPACITY_RESERVATION_INTERRUPTION: &str =
    "EC2 Capacity Reservation Instance Interruption Warning";

/// A Spot interruption warning comes two minutes before EC2 reclaims the instance.
pub const SPOT_NOTICE_SECONDS: i64 = 120;

/// Instance states after which the node and its claim are cleaned up.
pub const GONE_STATES: [&str; 4] = ["stopping", "stopped", "shutting-down", "terminated"];

/// An EC2 instance id: `i-` followed by 8 or 17 lowercase hex digits. A value that exists
/// is valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(String);

impl InstanceId {
    pub fn parse(s: &str) -> Option<InstanceId> {
        is_instance_id(s).then(|| InstanceId(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for InstanceId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    SpotInterruption,
    RebalanceRecommendation,
    StateChange,
    ScheduledChange,
    CapacityReservationInterruption,
    Ignored,
}

impl EventKind {
    /// Stable camelCase name, as the CLI prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SpotInterruption => "spotInterruption",
            EventKind::RebalanceRecommendation => "rebalanceRecommendation",
            EventKind::StateChange => "stateChange",
            EventKind::ScheduledChange => "scheduledChange",
            EventKind::CapacityReservationInterruption => "capacityReservationInterruption",
            EventKind::Ignored => "ignored",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One EventBridge event as nodewright reads it. Times are Unix seconds (UTC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedEvent {
    /// The EventBridge event id: the idempotency key.
    pub id: String,
    pub kind: EventKind,
    pub source: String,
    pub detail_type: String,
    /// Missing when the event came through moto's EventBridge→SQS.
    pub account: Option<String>,
    pub region: Option<String>,
    /// Validated; empty only when the event is ignored.
    pub instance_ids: Vec<InstanceId>,
    /// `detail.state` of a state-change notification.
    pub state: Option<String>,
    /// `detail.instance-action` of a Spot or capacity-reservation warning (`terminate`, `stop`, `hibernate`).
    pub instance_action: Option<String>,
    /// `detail.eventTypeCode` of a Health event, e.g. `AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED`.
    pub health_event_type: Option<String>,
    /// The envelope's `time`.
    pub time: i64,
    /// `detail.startTime` of a Health scheduled change.
    pub start_time: Option<i64>,
    /// `detail.instance-termination-time` of a capacity-reservation warning.
    pub termination_time: Option<i64>,
    /// Why the event is [`EventKind::Ignored`]; `None` otherwise.
    pub ignored_reason: Option<String>,
}

/// Why an event could not be read. Every variant but `Json` names the field (a dotted
/// path such as `detail.affectedEntities[0].entityValue`).
#[derive(Debug, Error)]
pub enum EventError {
    #[error("not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("{field}: required but missing")]
    Missing { field: String },
    #[error("{field}: expected {expected}, found {found}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: String,
    },
    #[error(
        "{field}: {value:?} is not an EC2 instance id (expected i- followed by 8 or 17 hex digits)"
    )]
    InstanceId { field: String, value: String },
    #[error("{field}: {value:?} is not a timestamp (expected {expected})")]
    Time {
        field: String,
        value: String,
        expected: &'static str,
    },
}

impl EventError {
    /// The field the error is about; `None` for malformed JSON.
    pub fn field(&self) -> Option<&str> {
        match self {
            EventError::Json(_) => None,
            EventError::Missing { field }
            | EventError::WrongType { field, .. }
            | EventError::InstanceId { field, .. }
            | EventError::Time { field, .. } => Some(field),
        }
    }
}

/// What nodewright does with a Launched/Registered instance that an event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Taint and evict now, the instance is going away at `deadline`; optionally mark the
    /// offering unavailable (for a Spot warning the instance type × zone × spot offering,
    /// for a capacity-reservation warning the reservation) and ask the provisioner to run now.
    DrainNow {
        deadline: i64,
        mark_offering_unavailable: bool,
        replace: bool,
    },
    /// Launch a replacement first, then drain within budgets; finish before `deadline` if any.
    ReplaceThenDrain { deadline: Option<i64> },
    /// Mark the node unschedulable and leave its pods where they are.
    Cordon,
    /// The instance is stopping or gone: clean up its node and claim.
    CleanUp,
    /// Acknowledge and do nothing.
    None { reason: String },
}

impl Action {
    /// Stable lowercase name, as the CLI prints it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::DrainNow { .. } => "drain-now",
            Action::ReplaceThenDrain { .. } => "replace-then-drain",
            Action::Cordon => "cordon",
            Action::CleanUp => "clean-up",
            Action::None { .. } => "none",
        }
    }

    pub fn deadline(&self) -> Option<i64> {
        match self {
            Action::DrainNow { deadline, .. } => Some(*deadline),
            Action::ReplaceThenDrain { deadline } => *deadline,
            _ => None,
        }
    }

    /// Why nothing is done; `None` for every other action.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Action::None { reason } => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `rebalance` setting: what a Rebalance Recommendation leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RebalanceAction {
    /// Karpenter's behaviour.
    Ignore,
    Cordon,
    /// Pre-launch a replacement, then drain within budgets.
    #[default]
    Replace,
}

impl RebalanceAction {
    pub const ALL: [RebalanceAction; 3] = [
        RebalanceAction::Ignore,
        RebalanceAction::Cordon,
        RebalanceAction::Replace,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RebalanceAction::Ignore => "ignore",
            RebalanceAction::Cordon => "cordon",
            RebalanceAction::Replace => "replace",
        }
    }
}

impl fmt::Display for RebalanceAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RebalanceAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RebalanceAction::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                format!("{s:?} is not a rebalance action (expected ignore, cordon or replace)")
            })
    }
}

/// Reads one EventBridge event. Ignored events are `Ok` with [`EventKind::Ignored`] and a
/// reason; only unreadable events are errors.
pub fn parse_event(json: &str) -> Result<ParsedEvent, EventError> {
    let value: Value = serde_json::from_str(json).map_err(EventError::Json)?;
    let root = Obj::root(&value)?;
    let id = root.str("id")?.to_string();
    let detail_type = root.str("detail-type")?.to_string();
    let source = root.str("source")?.to_string();
    let time_text = root.str("time")?;
    let time = parse_rfc3339(time_text).ok_or_else(|| EventError::Time {
        field: "time".into(),
        value: time_text.into(),
        expected: "RFC 3339",
    })?;
    let version = root.opt_str("version")?;
    let mut event = ParsedEvent {
        id,
        kind: EventKind::Ignored,
        account: root.opt_str("account")?.map(str::to_string),
        region: root.opt_str("region")?.map(str::to_string),
        source,
        detail_type,
        instance_ids: vec![],
        state: None,
        instance_action: None,
        health_event_type: None,
        time,
        start_time: None,
        termination_time: None,
        ignored_reason: None,
    };
    if let Some(v) = version.filter(|v| *v != "0") {
        return Ok(ignored(
            event,
            format!("version {v:?} is not supported (expected \"0\")"),
        ));
    }
    let expected_source = match event.detail_type.as_str() {
        SPOT_INTERRUPTION
        | REBALANCE_RECOMMENDATION
        | STATE_CHANGE
        | CAPACITY_RESERVATION_INTERRUPTION => "aws.ec2",
        HEALTH_EVENT => "aws.health",
        other => {
            let reason = format!("detail-type {other:?} is not an interruption event");
            return Ok(ignored(event, reason));
        }
    };
    if event.source != expected_source {
        let reason = format!(
            "{:?} from source {:?} (expected {expected_source})",
            event.detail_type, event.source
        );
        return Ok(ignored(event, reason));
    }
    let detail = root.obj("detail")?;
    match event.detail_type.as_str() {
        SPOT_INTERRUPTION => {
            event.kind = EventKind::SpotInterruption;
            event.instance_ids = vec![detail.instance_id("instance-id")?];
            event.instance_action = detail.opt_str("instance-action")?.map(str::to_string);
        }
        REBALANCE_RECOMMENDATION => {
            event.kind = EventKind::RebalanceRecommendation;
            event.instance_ids = vec![detail.instance_id("instance-id")?];
        }
        STATE_CHANGE => {
            event.kind = EventKind::StateChange;
            event.instance_ids = vec![detail.instance_id("instance-id")?];
            event.state = Some(detail.str("state")?.to_string());
        }
        CAPACITY_RESERVATION_INTERRUPTION => {
            event.kind = EventKind::CapacityReservationInterruption;
            event.instance_ids = vec![detail.instance_id("instance-id")?];
            event.instance_action = detail.opt_str("instance-action")?.map(str::to_string);
            event.termination_time = detail.opt_time("instance-termination-time")?;
        }
        _ => return health_event(event, &detail),
    }
    Ok(event)
}

/// `source: aws.health`: only EC2 scheduled changes are acted on.
fn health_event(mut event: ParsedEvent, detail: &Obj<'_>) -> Result<ParsedEvent, EventError> {
    let service = detail.opt_str("service")?;
    let category = detail.opt_str("eventTypeCategory")?;
    if service != Some("EC2") {
        let reason = match service {
            Some(s) => format!("AWS Health event for service {s:?} (only EC2 is acted on)"),
            None => "AWS Health event without detail.service (only EC2 is acted on)".to_string(),
        };
        return Ok(ignored(event, reason));
    }
    if category != Some("scheduledChange") {
        let reason = match category {
            Some(c) => format!("AWS Health event of category {c:?} (only scheduledChange is acted on)"),
            None => "AWS Health event without detail.eventTypeCategory (only scheduledChange is acted on)".to_string(),
        };
        return Ok(ignored(event, reason));
    }
    event.health_event_type = detail.opt_str("eventTypeCode")?.map(str::to_string);
    event.start_time = detail.opt_time("startTime")?;
    let entities = detail.array("affectedEntities")?;
    let mut ids = Vec::with_capacity(entities.len());
    for (i, entity) in entities.iter().enumerate() {
        let entity = Obj::new(format!("{}.affectedEntities[{i}]", detail.path), entity)?;
        let id = entity.instance_id("entityValue")?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        return Ok(ignored(
            event,
            "AWS Health scheduledChange lists no affected entities".into(),
        ));
    }
    event.kind = EventKind::ScheduledChange;
    event.instance_ids = ids;
    Ok(event)
}

fn ignored(mut event: ParsedEvent, reason: String) -> ParsedEvent {
    event.kind = EventKind::Ignored;
    event.instance_ids.clear();
    event.ignored_reason = Some(reason);
    event
}

/// What to do about an event, given the `rebalance` setting (DESIGN.md, "Interruption").
pub fn action_for(event: &ParsedEvent, rebalance: RebalanceAction) -> Action {
    match event.kind {
        EventKind::SpotInterruption => Action::DrainNow {
            deadline: event.time.saturating_add(SPOT_NOTICE_SECONDS),
            mark_offering_unavailable: true,
            replace: true,
        },
        // Same two-minute notice; EC2 also says when it will terminate, which wins.
        EventKind::CapacityReservationInterruption => Action::DrainNow {
            deadline: event
                .termination_time
                .unwrap_or(event.time.saturating_add(SPOT_NOTICE_SECONDS)),
            mark_offering_unavailable: true,
            replace: true,
        },
        EventKind::RebalanceRecommendation => match rebalance {
            RebalanceAction::Ignore => Action::None {
                reason: "rebalance recommendations are ignored (rebalance: ignore)".into(),
            },
            RebalanceAction::Cordon => Action::Cordon,
            RebalanceAction::Replace => Action::ReplaceThenDrain { deadline: None },
        },
        EventKind::StateChange => match event.state.as_deref() {
            Some(s) if GONE_STATES.contains(&s) => Action::CleanUp,
            Some(s) => Action::None {
                reason: format!("instance state {s:?} needs no action"),
            },
            None => Action::None {
                reason: "state change without a state".into(),
            },
        },
        EventKind::ScheduledChange => Action::ReplaceThenDrain {
            deadline: event.start_time,
        },
        EventKind::Ignored => Action::None {
            reason: event
                .ignored_reason
                .clone()
                .unwrap_or_else(|| "ignored".into()),
        },
    }
}

/// A JSON object and its dotted path, for error messages that name the field.
struct Obj<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    fn root(value: &'a Value) -> Result<Obj<'a>, EventError> {
        match value {
            Value::Object(map) => Ok(Obj {
                path: String::new(),
                map,
            }),
            other => Err(wrong_type("event", "an object", other)),
        }
    }

    fn new(path: String, value: &'a Value) -> Result<Obj<'a>, EventError> {
        match value {
            Value::Object(map) => Ok(Obj { path, map }),
            other => Err(wrong_type(&path, "an object", other)),
        }
    }

    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn required(&self, key: &str) -> Result<&'a Value, EventError> {
        self.map.get(key).ok_or_else(|| EventError::Missing {
            field: self.field(key),
        })
    }

    fn str(&self, key: &str) -> Result<&'a str, EventError> {
        match self.required(key)? {
            Value::String(s) => Ok(s),
            other => Err(wrong_type(&self.field(key), "a string", other)),
        }
    }

    /// Absent or null is `None`.
    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, EventError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(&self.field(key), "a string", other)),
        }
    }

    fn obj(&self, key: &str) -> Result<Obj<'a>, EventError> {
        Obj::new(self.field(key), self.required(key)?)
    }

    fn array(&self, key: &str) -> Result<&'a [Value], EventError> {
        match self.required(key)? {
            Value::Array(items) => Ok(items),
            other => Err(wrong_type(&self.field(key), "an array", other)),
        }
    }

    fn instance_id(&self, key: &str) -> Result<InstanceId, EventError> {
        let value = self.str(key)?;
        InstanceId::parse(value).ok_or_else(|| EventError::InstanceId {
            field: self.field(key),
            value: value.into(),
        })
    }

    fn opt_time(&self, key: &str) -> Result<Option<i64>, EventError> {
        let Some(text) = self.opt_str(key)? else {
            return Ok(None);
        };
        parse_timestamp(text)
            .map(Some)
            .ok_or_else(|| EventError::Time {
                field: self.field(key),
                value: text.into(),
                expected: "RFC 1123 or RFC 3339",
            })
    }
}

fn wrong_type(field: &str, expected: &'static str, found: &Value) -> EventError {
    let found = match found {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string {:?}", s.chars().take(40).collect::<String>()),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    };
    EventError::WrongType {
        field: field.into(),
        expected,
        found,
    }
}

/// RFC 3339 (`2026-11-20T10:00:00Z`, `…T10:00:00.123+01:00`) or RFC 1123 / RFC 2822
/// (`Mon, 30 Nov 2026 15:10:09 GMT`), to Unix seconds.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    parse_rfc3339(s).or_else(|| parse_rfc2822(s))
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` to Unix seconds; fractions are truncated.
/// `t`, `z` and a space for `T` are accepted (RFC 3339 §5.6 allows them).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let year = digits(b, 0, 4)?;
    let month = digits(b, 5, 2)?;
    let day = digits(b, 8, 2)?;
    let hour = digits(b, 11, 2)?;
    let minute = digits(b, 14, 2)?;
    let second = digits(b, 17, 2)?;
    if b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' => {
            i += 1;
            0
        }
        sign @ (b'+' | b'-') => {
            let hh = digits(b, i + 1, 2)?;
            let mm = digits(b, i + 4, 2)?;
            if b[i + 3] != b':' || hh > 23 || mm > 59 {
                return None;
            }
            i += 6;
            let off = hh * 3600 + mm * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    if i != b.len() {
        return None;
    }
    Some(unix(year, month, day, hour, minute, second)? - offset)
}

/// `[Wkd,] D Mon YYYY HH:MM[:SS] (GMT|UT|UTC|Z|±HHMM)` to Unix seconds. The weekday
/// must be a weekday name but is not checked against the date.
pub fn parse_rfc2822(s: &str) -> Option<i64> {
    let s = s.trim();
    let rest = match s.split_once(',') {
        Some((weekday, rest)) => {
            let weekday = weekday.trim();
            ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
                .iter()
                .any(|w| weekday.eq_ignore_ascii_case(w))
                .then_some(rest)?
        }
        None => s,
    };
    let mut parts = rest.split_ascii_whitespace();
    let day = number(parts.next()?, 1, 2)?;
    let month_name = parts.next()?;
    let month = MONTHS
        .iter()
        .position(|m| month_name.eq_ignore_ascii_case(m))? as i64
        + 1;
    let year = number(parts.next()?, 4, 4)?;
    let mut clock = parts.next()?.split(':');
    let hour = number(clock.next()?, 2, 2)?;
    let minute = number(clock.next()?, 2, 2)?;
    let second = match clock.next() {
        Some(sec) => number(sec, 2, 2)?,
        None => 0,
    };
    if clock.next().is_some() {
        return None;
    }
    let zone = parts.next()?;
    let offset = match zone {
        "GMT" | "UT" | "UTC" | "Z" => 0,
        _ => {
            let (sign, hhmm) = match zone.as_bytes().first()? {
                b'+' => (1, &zone[1..]),
                b'-' => (-1, &zone[1..]),
                _ => return None,
            };
            let n = number(hhmm, 4, 4)?;
            let (hh, mm) = (n / 100, n % 100);
            if hh > 23 || mm > 59 {
                return None;
            }
            sign * (hh * 3600 + mm * 60)
        }
    };
    if parts.next().is_some() {
        return None;
    }
    Some(unix(year, month, day, hour, minute, second)? - offset)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// `n` ASCII digits at `start`, or `None` (including when `b` is too short).
fn digits(b: &[u8], start: usize, n: usize) -> Option<i64> {
    let slice = b.get(start..start.checked_add(n)?)?;
    slice.iter().try_fold(0i64, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
    })
}

/// A whole token of `min..=max` ASCII digits.
fn number(token: &str, min: usize, max: usize) -> Option<i64> {
    (min..=max).contains(&token.len()).then_some(())?;
    digits(token.as_bytes(), 0, token.len())
}

/// Checks the calendar (leap years included; a leap second counts as the next second).
fn unix(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> Option<i64> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=days_in_month).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPOT: &str = include_str!("../tests/fixtures/events/spot-interruption.json");
    const REBALANCE: &str = include_str!("../tests/fixtures/events/rebalance-recommendation.json");
    const TERMINATED: &str = include_str!("../tests/fixtures/events/state-change-terminated.json");
    const HEALTH: &str = include_str!("../tests/fixtures/events/health-scheduled-change.json");
    const TICK: &str = include_str!("../tests/fixtures/events/scheduled-tick.json");
    const FIXTURES: [&str; 5] = [SPOT, REBALANCE, TERMINATED, HEALTH, TICK];

    /// A fixture with `edit` applied to its JSON: a forged event.
    fn forged(fixture: &str, edit: impl FnOnce(&mut Value)) -> String {
        let mut v: Value = serde_json::from_str(fixture).unwrap();
        edit(&mut v);
        v.to_string()
    }

    /// A capacity-reservation warning in the shape AWS documents for interruptible
    /// Capacity Reservations (detail: instance-id, instance-action, instance-termination-time, azId).
    fn capacity_reservation(termination_time: Option<&str>) -> String {
        forged(SPOT, |v| {
            v["id"] = "cr-warning-1".into();
            v["detail-type"] = CAPACITY_RESERVATION_INTERRUPTION.into();
            v["detail"]["azId"] = "usw2-az1".into();
            if let Some(t) = termination_time {
                v["detail"]["instance-termination-time"] = t.into();
            }
        })
    }

    fn ids(event: &ParsedEvent) -> Vec<&str> {
        event.instance_ids.iter().map(InstanceId::as_str).collect()
    }

    fn error(json: &str) -> String {
        parse_event(json).expect_err("an error").to_string()
    }

    const T_10_00: i64 = 1_795_168_800; // 2026-11-20T10:00:00Z

    #[test]
    fn a_spot_interruption_warning_drains_now_with_a_two_minute_deadline_and_marks_the_offering() {
        let e = parse_event(SPOT).unwrap();
        assert_eq!(e.kind, EventKind::SpotInterruption);
        assert_eq!(e.id, "12345678-1234-1234-1234-123456789012");
        assert_eq!(ids(&e), ["i-1234567890abcdef0"]);
        assert_eq!(e.instance_action.as_deref(), Some("terminate"));
        assert_eq!(e.time, T_10_00);
        assert_eq!(
            (e.state.as_deref(), e.ignored_reason.as_deref()),
            (None, None)
        );
        for rebalance in RebalanceAction::ALL {
            assert_eq!(
                action_for(&e, rebalance),
                Action::DrainNow {
                    deadline: T_10_00 + 120,
                    mark_offering_unavailable: true,
                    replace: true
                }
            );
        }
    }

    #[test]
    fn a_rebalance_recommendation_follows_the_rebalance_setting_which_defaults_to_replace() {
        let e = parse_event(REBALANCE).unwrap();
        assert_eq!(e.kind, EventKind::RebalanceRecommendation);
        assert_eq!(ids(&e), ["i-1234567890abcdef0"]);
        assert_eq!(
            action_for(&e, RebalanceAction::default()),
            Action::ReplaceThenDrain { deadline: None }
        );
        assert_eq!(action_for(&e, RebalanceAction::Cordon), Action::Cordon);
        let ignore = action_for(&e, RebalanceAction::Ignore);
        assert_eq!(ignore.as_str(), "none");
        assert!(
            ignore.reason().unwrap().contains("rebalance: ignore"),
            "{ignore:?}"
        );
    }

    #[test]
    fn a_terminated_state_change_cleans_up_the_node_and_claim() {
        let e = parse_event(TERMINATED).unwrap();
        assert_eq!(e.kind, EventKind::StateChange);
        assert_eq!(ids(&e), ["i-1234567890abcdef0"]);
        assert_eq!(e.state.as_deref(), Some("terminated"));
        assert_eq!(e.time, T_10_00 + 130);
        assert_eq!(action_for(&e, RebalanceAction::Replace), Action::CleanUp);
    }

    #[test]
    fn stopping_and_gone_states_clean_up_while_pending_and_running_need_no_action() {
        for (state, action) in [
            ("stopping", "clean-up"),
            ("stopped", "clean-up"),
            ("shutting-down", "clean-up"),
            ("terminated", "clean-up"),
            ("pending", "none"),
            ("running", "none"),
        ] {
            let e =
                parse_event(&forged(TERMINATED, |v| v["detail"]["state"] = state.into())).unwrap();
            let a = action_for(&e, RebalanceAction::Replace);
            assert_eq!(a.as_str(), action, "{state}");
            if action == "none" {
                assert!(a.reason().unwrap().contains(state), "{a:?}");
            }
        }
    }

    #[test]
    fn an_ec2_health_scheduled_change_replaces_then_drains_before_its_start_time() {
        let e = parse_event(HEALTH).unwrap();
        assert_eq!(e.kind, EventKind::ScheduledChange);
        assert_eq!(ids(&e), ["i-0abcd1111abcd1111"]);
        assert_eq!(
            e.health_event_type.as_deref(),
            Some("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED")
        );
        assert_eq!(e.start_time, Some(1_796_051_409)); // Mon, 30 Nov 2026 15:10:09 GMT
        assert_eq!(
            action_for(&e, RebalanceAction::Ignore),
            Action::ReplaceThenDrain {
                deadline: Some(1_796_051_409)
            }
        );
    }

    #[test]
    fn a_health_scheduled_change_names_every_affected_instance_once() {
        let json = forged(HEALTH, |v| {
            v["detail"]["affectedEntities"] = serde_json::json!([
                {"entityValue": "i-0abcd1111abcd1111"},
                {"entityValue": "i-12345678", "status": "PENDING"},
                {"entityValue": "i-0abcd1111abcd1111"}
            ]);
            v["detail"]["startTime"] = "2026-11-30T15:10:09Z".into();
        });
        let e = parse_event(&json).unwrap();
        assert_eq!(ids(&e), ["i-0abcd1111abcd1111", "i-12345678"]);
        assert_eq!(e.start_time, Some(1_796_051_409));
    }

    #[test]
    fn a_health_scheduled_change_without_affected_instances_is_ignored() {
        let e = parse_event(&forged(HEALTH, |v| {
            v["detail"]["affectedEntities"] = serde_json::json!([])
        }))
        .unwrap();
        assert_eq!(e.kind, EventKind::Ignored);
        assert!(e.ignored_reason.unwrap().contains("no affected entities"));
    }

    #[test]
    fn a_capacity_reservation_interruption_drains_now_by_its_termination_time() {
        let e = parse_event(&capacity_reservation(Some("2026-11-20T10:01:30Z"))).unwrap();
        assert_eq!(e.kind, EventKind::CapacityReservationInterruption);
        assert_eq!(ids(&e), ["i-1234567890abcdef0"]);
        assert_eq!(e.termination_time, Some(T_10_00 + 90));
        assert_eq!(
            action_for(&e, RebalanceAction::Replace),
            Action::DrainNow {
                deadline: T_10_00 + 90,
                mark_offering_unavailable: true,
                replace: true
            }
        );
    }

    #[test]
    fn a_capacity_reservation_interruption_without_a_termination_time_gets_two_minutes() {
        let e = parse_event(&capacity_reservation(None)).unwrap();
        assert_eq!(
            action_for(&e, RebalanceAction::Replace).deadline(),
            Some(T_10_00 + 120)
        );
    }

    #[test]
    fn an_eventbridge_scheduled_tick_is_ignored_with_a_reason() {
        let e = parse_event(TICK).unwrap();
        assert_eq!(e.kind, EventKind::Ignored);
        assert!(e.instance_ids.is_empty());
        let reason = e.ignored_reason.clone().unwrap();
        assert!(reason.contains("Scheduled Event"), "{reason}");
        assert_eq!(
            action_for(&e, RebalanceAction::Replace),
            Action::None { reason }
        );
    }

    #[test]
    fn a_health_event_for_rds_is_ignored_with_a_reason() {
        let e = parse_event(&forged(HEALTH, |v| v["detail"]["service"] = "RDS".into())).unwrap();
        assert_eq!(e.kind, EventKind::Ignored);
        assert!(
            e.ignored_reason.as_deref().unwrap().contains("\"RDS\""),
            "{e:?}"
        );
        assert_eq!(action_for(&e, RebalanceAction::Replace).as_str(), "none");
    }

    #[test]
    fn a_health_event_that_is_not_a_scheduled_change_is_ignored_with_a_reason() {
        let e = parse_event(&forged(HEALTH, |v| {
            v["detail"]["eventTypeCategory"] = "issue".into()
        }))
        .unwrap();
        assert_eq!(e.kind, EventKind::Ignored);
        assert!(e.ignored_reason.unwrap().contains("\"issue\""));
    }

    #[test]
    fn an_ec2_detail_type_from_another_source_is_ignored_not_trusted() {
        let e = parse_event(&forged(SPOT, |v| v["source"] = "custom.forger".into())).unwrap();
        assert_eq!(e.kind, EventKind::Ignored);
        assert!(e.ignored_reason.unwrap().contains("custom.forger"));
    }

    #[test]
    fn an_unknown_version_is_ignored_with_a_reason() {
        let e = parse_event(&forged(SPOT, |v| v["version"] = "1".into())).unwrap();
        assert_eq!(e.kind, EventKind::Ignored);
        assert!(e.ignored_reason.unwrap().contains("version"));
    }

    #[test]
    fn unknown_extra_fields_are_tolerated_in_the_envelope_and_the_detail() {
        let json = forged(SPOT, |v| {
            v["replay-name"] = "x".into();
            v["nested"] = serde_json::json!({"a": [1, 2, {"b": null}]});
            v["detail"]["instance-lifecycle"] = "spot".into();
            v["detail"]["extra"] = serde_json::json!(42);
        });
        assert_eq!(parse_event(&json).unwrap(), parse_event(SPOT).unwrap());
    }

    #[test]
    fn an_event_without_an_account_parses_as_moto_delivers_it() {
        for fixture in FIXTURES {
            let without = forged(fixture, |v| {
                v.as_object_mut().unwrap().remove("account");
            });
            let e = parse_event(&without).unwrap();
            assert_eq!(e.account, None);
            assert_eq!(e.kind, parse_event(fixture).unwrap().kind);
        }
        assert_eq!(
            parse_event(SPOT).unwrap().account.as_deref(),
            Some("123456789012")
        );
    }

    #[test]
    fn a_bad_instance_id_is_an_error_naming_the_field() {
        let err = error(&forged(SPOT, |v| {
            v["detail"]["instance-id"] = "i-XYZ".into()
        }));
        assert_eq!(
            err,
            "detail.instance-id: \"i-XYZ\" is not an EC2 instance id (expected i- followed by 8 or 17 hex digits)"
        );
        for bad in [
            "i-1234567",
            "i-0123456789ABCDEF0",
            "",
            "i-12345678 ",
            "../../etc",
            "i-123456789",
        ] {
            let e = parse_event(&forged(REBALANCE, |v| {
                v["detail"]["instance-id"] = bad.into()
            }))
            .unwrap_err();
            assert_eq!(e.field(), Some("detail.instance-id"), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_affected_entity_is_an_error_naming_its_index() {
        let json = forged(HEALTH, |v| {
            v["detail"]["affectedEntities"] = serde_json::json!([{"entityValue": "i-0abcd1111abcd1111"}, {"entityValue": "vol-0123"}]);
        });
        let err = parse_event(&json).unwrap_err();
        assert_eq!(err.field(), Some("detail.affectedEntities[1].entityValue"));
        assert!(err.to_string().contains("\"vol-0123\""), "{err}");
    }

    #[test]
    fn a_field_of_the_wrong_type_is_an_error_naming_the_field() {
        let err = error(&forged(SPOT, |v| v["detail"]["instance-id"] = 42.into()));
        assert_eq!(err, "detail.instance-id: expected a string, found 42");
        for (edit, field) in [
            (
                Box::new(|v: &mut Value| v["id"] = 7.into()) as Box<dyn Fn(&mut Value)>,
                "id",
            ),
            (Box::new(|v: &mut Value| v["time"] = true.into()), "time"),
            (
                Box::new(|v: &mut Value| v["account"] = serde_json::json!([1])),
                "account",
            ),
            (Box::new(|v: &mut Value| v["detail"] = "x".into()), "detail"),
            (
                Box::new(|v: &mut Value| v["detail"]["instance-action"] = serde_json::json!({})),
                "detail.instance-action",
            ),
        ] {
            let e = parse_event(&forged(SPOT, edit)).unwrap_err();
            assert_eq!(e.field(), Some(field), "{e}");
            assert!(matches!(e, EventError::WrongType { .. }), "{e}");
        }
        let e = parse_event(&forged(HEALTH, |v| {
            v["detail"]["affectedEntities"] = "i-0abcd1111abcd1111".into()
        }))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "detail.affectedEntities: expected an array, found the string \"i-0abcd1111abcd1111\""
        );
        let e = parse_event(&forged(HEALTH, |v| {
            v["detail"]["affectedEntities"][0] = 3.into()
        }))
        .unwrap_err();
        assert_eq!(e.field(), Some("detail.affectedEntities[0]"));
    }

    #[test]
    fn a_missing_required_field_is_an_error_naming_it() {
        for (fixture, path) in [
            (SPOT, &["id"][..]),
            (SPOT, &["detail-type"]),
            (SPOT, &["source"]),
            (SPOT, &["time"]),
            (SPOT, &["detail"]),
            (SPOT, &["detail", "instance-id"]),
            (TERMINATED, &["detail", "state"]),
            (HEALTH, &["detail", "affectedEntities"]),
        ] {
            let json = forged(fixture, |v| {
                let (last, parents) = path.split_last().unwrap();
                let mut at = v;
                for p in parents {
                    at = &mut at[*p];
                }
                at.as_object_mut().unwrap().remove(*last);
            });
            let e = parse_event(&json).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("{}: required but missing", path.join("."))
            );
        }
    }

    #[test]
    fn a_bad_timestamp_is_an_error_naming_the_field() {
        let e =
            parse_event(&forged(SPOT, |v| v["time"] = "2026-02-30T10:00:00Z".into())).unwrap_err();
        assert_eq!(e.field(), Some("time"));
        let e = parse_event(&forged(HEALTH, |v| {
            v["detail"]["startTime"] = "next Tuesday".into()
        }))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "detail.startTime: \"next Tuesday\" is not a timestamp (expected RFC 1123 or RFC 3339)"
        );
    }

    #[test]
    fn malformed_json_and_non_objects_are_errors_not_panics() {
        for bad in [
            "",
            "{",
            "{\"id\":",
            "nul",
            "\u{feff}{}",
            &SPOT[..SPOT.len() / 2],
        ] {
            assert!(
                matches!(parse_event(bad), Err(EventError::Json(_))),
                "{bad:?}"
            );
        }
        for not_object in ["[]", "42", "\"event\"", "null"] {
            assert_eq!(
                parse_event(not_object).unwrap_err().field(),
                Some("event"),
                "{not_object}"
            );
        }
    }

    #[test]
    fn rfc_3339_times_parse_exactly_to_unix_seconds() {
        for (text, want) in [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2026-11-20T10:00:00Z", Some(T_10_00)),
            ("2026-11-20t10:00:00z", Some(T_10_00)),
            ("2026-11-20 10:00:00Z", Some(T_10_00)),
            ("2026-11-20T10:00:00.999Z", Some(T_10_00)),
            ("2026-11-20T11:30:00+01:30", Some(T_10_00)),
            ("2026-11-20T05:00:00-05:00", Some(T_10_00)),
            ("2024-02-29T00:00:00Z", Some(1_709_164_800)),
            ("2000-03-01T00:00:00Z", Some(951_868_800)),
            ("1969-12-31T23:59:59Z", Some(-1)),
            ("2023-02-29T00:00:00Z", None),
            ("1900-02-29T00:00:00Z", None),
            ("2026-13-01T00:00:00Z", None),
            ("2026-11-20T24:00:00Z", None),
            ("2026-11-20T10:00:00", None),
            ("2026-11-20T10:00:00.Z", None),
            ("2026-11-20T10:00:00+0100", None),
            ("2026-11-20T10:00:00Zjunk", None),
            ("2026-11-20", None),
            ("", None),
            ("２０２６-11-20T10:00:00Z", None),
        ] {
            assert_eq!(parse_rfc3339(text), want, "{text}");
        }
    }

    #[test]
    fn health_start_times_parse_in_rfc_1123_rfc_2822_and_iso_8601_forms() {
        let want = Some(1_796_051_409);
        for text in [
            "Mon, 30 Nov 2026 15:10:09 GMT",
            "30 Nov 2026 15:10:09 GMT",
            "Mon, 30 Nov 2026 15:10:09 UTC",
            "mon, 30 nov 2026 15:10:09 +0000",
            "Mon, 30 Nov 2026 16:10:09 +0100",
            "Mon, 30 Nov 2026 10:10:09 -0500",
            "2026-11-30T15:10:09Z",
            "2026-11-30T15:10:09.000Z",
        ] {
            assert_eq!(parse_timestamp(text), want, "{text}");
        }
        assert_eq!(
            parse_timestamp("Mon, 1 Dec 2026 15:10 GMT"),
            Some(1_796_137_800)
        );
        for bad in [
            "Mon, 30 Nov 2026 15:10:09",
            "Xyz, 30 Nov 2026 15:10:09 GMT",
            "Mon, 31 Nov 2026 15:10:09 GMT",
            "Mon, 30 Foo 2026 15:10:09 GMT",
            "Mon, 30 Nov 26 15:10:09 GMT",
            "Mon, 30 Nov 2026 15:10:09 GMT extra",
            "Mon, 30 Nov 2026 15:10:09:01 GMT",
            "Mon, 30 Nov 2026 15:10:09 +2500",
            "Mon, 30 Nov 2026 15:10:09 +é",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn formatting_unix_seconds_round_trips_through_the_rfc_3339_parser() {
        assert_eq!(format_rfc3339(T_10_00 + 120), "2026-11-20T10:02:00Z");
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
        let mut t = -2_208_988_800; // 1900-01-01
        while t < 4_102_444_800 {
            // 2100-01-01
            assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t), "{t}");
            t += 86_400 * 7 + 3_599;
        }
    }

    #[test]
    fn actions_and_kinds_have_stable_names() {
        let names: Vec<&str> = [
            Action::DrainNow {
                deadline: 0,
                mark_offering_unavailable: true,
                replace: true,
            },
            Action::ReplaceThenDrain { deadline: None },
            Action::Cordon,
            Action::CleanUp,
            Action::None { reason: "x".into() },
        ]
        .iter()
        .map(Action::as_str)
        .collect();
        assert_eq!(
            names,
            [
                "drain-now",
                "replace-then-drain",
                "cordon",
                "clean-up",
                "none"
            ]
        );
        assert_eq!(
            EventKind::CapacityReservationInterruption.to_string(),
            "capacityReservationInterruption"
        );
        for r in RebalanceAction::ALL {
            assert_eq!(r.as_str().parse::<RebalanceAction>(), Ok(r));
        }
        assert!("Replace".parse::<RebalanceAction>().is_err());
    }

    #[test]
    fn every_fixture_runs_through_the_fuzz_body() {
        for fixture in FIXTURES {
            crate::testing::fuzz_event(fixture.as_bytes());
        }
        crate::testing::fuzz_event(capacity_reservation(Some("2026-11-20T10:01:30Z")).as_bytes());
    }

    #[test]
    fn every_truncation_and_byte_flip_of_every_fixture_runs_through_the_fuzz_body() {
        for fixture in FIXTURES {
            let bytes = fixture.as_bytes();
            for i in 0..bytes.len() {
                crate::testing::fuzz_event(&bytes[..i]);
                for replacement in [b'"', b'0', b'x', b'}', 0xff] {
                    let mut mutated = bytes.to_vec();
                    mutated[i] = replacement;
                    crate::testing::fuzz_event(&mutated);
                }
            }
        }
    }
}
