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

/// What to do about an event, given the `rebalance` setting (docs/architecture.md, "Interruption").
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
mod tests;
