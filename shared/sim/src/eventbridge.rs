//! EventBridge events as EC2 and AWS Health send them: the JSON the interruption
//! Lambda receives as an SQS message body (the shapes of
//! `shared/core/tests/fixtures/events/*.json`), built with `serde_json` rather than
//! strings so every payload is valid JSON. The simulator sends these and nothing else:
//! the interruption job reads them with `core::interruption::parse_event`, exactly as
//! in AWS.

use nodewright_core::interruption::{
    CAPACITY_RESERVATION_INTERRUPTION, HEALTH_EVENT, REBALANCE_RECOMMENDATION, SPOT_INTERRUPTION,
    STATE_CHANGE, format_rfc3339,
};
use serde_json::{Value, json};

/// The account every simulated event comes from.
pub const ACCOUNT: &str = "123456789012";

/// Where and when an event happens.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The EventBridge event id (a UUID).
    pub id: String,
    /// Unix seconds.
    pub time: i64,
    pub region: String,
}

fn envelope(e: &Envelope, detail_type: &str, source: &str, resources: Vec<String>) -> Value {
    json!({
        "version": "0",
        "id": e.id,
        "detail-type": detail_type,
        "source": source,
        "account": ACCOUNT,
        "time": format_rfc3339(e.time),
        "region": e.region,
        "resources": resources,
    })
}

fn instance_arn(e: &Envelope, instance: &str) -> String {
    format!("arn:aws:ec2:{}:{ACCOUNT}:instance/{instance}", e.region)
}

fn with_detail(mut event: Value, detail: Value) -> String {
    event["detail"] = detail;
    event.to_string()
}

/// "EC2 Spot Instance Interruption Warning": EC2 takes the instance two minutes after
/// `time`.
pub fn spot_interruption(e: &Envelope, instance: &str) -> String {
    with_detail(
        envelope(
            e,
            SPOT_INTERRUPTION,
            "aws.ec2",
            vec![instance_arn(e, instance)],
        ),
        json!({"instance-id": instance, "instance-action": "terminate"}),
    )
}

/// "EC2 Capacity Reservation Instance Interruption Warning": the owner of the
/// interruptible reservation `instance` runs in takes it back at `termination` (the
/// detail AWS documents: instance id, action, termination time, zone id).
pub fn capacity_reservation_interruption(
    e: &Envelope,
    instance: &str,
    zone_id: &str,
    termination: i64,
) -> String {
    with_detail(
        envelope(
            e,
            CAPACITY_RESERVATION_INTERRUPTION,
            "aws.ec2",
            vec![instance_arn(e, instance)],
        ),
        json!({
            "instance-id": instance,
            "instance-action": "terminate",
            "instance-termination-time": format_rfc3339(termination),
            "azId": zone_id,
        }),
    )
}

/// "EC2 Instance Rebalance Recommendation": the instance is at elevated risk.
pub fn rebalance_recommendation(e: &Envelope, instance: &str) -> String {
    with_detail(
        envelope(
            e,
            REBALANCE_RECOMMENDATION,
            "aws.ec2",
            vec![instance_arn(e, instance)],
        ),
        json!({"instance-id": instance}),
    )
}

/// "EC2 Instance State-change Notification" (`pending`, `running`, `stopping`,
/// `stopped`, `shutting-down`, `terminated`).
pub fn state_change(e: &Envelope, instance: &str, state: &str) -> String {
    with_detail(
        envelope(e, STATE_CHANGE, "aws.ec2", vec![instance_arn(e, instance)]),
        json!({"instance-id": instance, "state": state}),
    )
}

/// "AWS Health Event", EC2 `scheduledChange`: the instances are retired at `start`.
/// AWS Health writes `startTime` in RFC 1123 form.
pub fn scheduled_change(e: &Envelope, instances: &[String], start: i64) -> String {
    let entities: Vec<Value> = instances
        .iter()
        .map(|i| json!({"entityValue": i}))
        .collect();
    with_detail(
        envelope(e, HEALTH_EVENT, "aws.health", instances.to_vec()),
        json!({
            "eventArn": format!(
                "arn:aws:health:{}::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_{}",
                e.region, e.id
            ),
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "startTime": rfc1123(start),
            "eventDescription": [{
                "language": "en_US",
                "latestDescription": "The instance is scheduled for retirement."
            }],
            "affectedEntities": entities,
        }),
    )
}

/// Unix seconds as `Mon, 30 Nov 2026 15:10:09 GMT`.
pub fn rfc1123(secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // format_rfc3339 does the calendar: YYYY-MM-DDTHH:MM:SSZ.
    let iso = format_rfc3339(secs);
    let (date, time) = iso.split_once('T').unwrap_or((&iso, "00:00:00Z"));
    let mut parts = date.splitn(3, '-');
    let year = parts.next().unwrap_or("1970");
    let month: usize = parts.next().and_then(|m| m.parse().ok()).unwrap_or(1);
    let day = parts.next().unwrap_or("01");
    // 1970-01-01 was a Thursday.
    let weekday = DAYS[secs.div_euclid(86_400).rem_euclid(7) as usize];
    format!(
        "{weekday}, {day} {} {year} {} GMT",
        MONTHS[month.clamp(1, 12) - 1],
        time.trim_end_matches('Z')
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::interruption::{
        Action, EventKind, RebalanceAction, action_for, parse_event,
    };

    fn at(time: i64) -> Envelope {
        Envelope {
            id: "0f0e0d0c-0b0a-4908-8706-050403020100".into(),
            time,
            region: "us-east-1".into(),
        }
    }

    const I: &str = "i-0123456789abcdef0";

    #[test]
    fn a_spot_warning_parses_as_the_lambda_reads_it_with_a_two_minute_deadline() {
        let event = parse_event(&spot_interruption(&at(1_735_689_600), I)).unwrap();
        assert_eq!(event.kind, EventKind::SpotInterruption);
        assert_eq!(event.instance_ids[0].as_str(), I);
        assert_eq!(event.account.as_deref(), Some(ACCOUNT));
        assert_eq!(
            action_for(&event, RebalanceAction::Replace).deadline(),
            Some(1_735_689_600 + 120)
        );
    }

    #[test]
    fn rebalance_state_change_and_health_events_parse_to_their_kinds() {
        let rebalance = parse_event(&rebalance_recommendation(&at(0), I)).unwrap();
        assert_eq!(rebalance.kind, EventKind::RebalanceRecommendation);
        let stopped = parse_event(&state_change(&at(0), I, "stopped")).unwrap();
        assert_eq!(stopped.state.as_deref(), Some("stopped"));
        assert_eq!(
            action_for(&stopped, RebalanceAction::Replace),
            Action::CleanUp
        );
        let start = 1_735_693_200;
        let health = parse_event(&scheduled_change(&at(0), &[I.to_string()], start)).unwrap();
        assert_eq!(health.kind, EventKind::ScheduledChange);
        assert_eq!(health.start_time, Some(start), "RFC 1123 read back");
    }

    #[test]
    fn rfc1123_names_the_weekday_and_month() {
        assert_eq!(rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(rfc1123(1_796_051_409), "Mon, 30 Nov 2026 15:10:09 GMT");
    }
}
