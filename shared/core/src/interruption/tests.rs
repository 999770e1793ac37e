//! Every EventBridge event kind read from its fixture (and forged variants), the action
//! each calls for, the errors that name the bad field, and the fuzz body over every
//! fixture.

use super::*;

const SPOT: &str = include_str!("../../tests/fixtures/events/spot-interruption.json");
const REBALANCE: &str = include_str!("../../tests/fixtures/events/rebalance-recommendation.json");
const TERMINATED: &str = include_str!("../../tests/fixtures/events/state-change-terminated.json");
const HEALTH: &str = include_str!("../../tests/fixtures/events/health-scheduled-change.json");
const TICK: &str = include_str!("../../tests/fixtures/events/scheduled-tick.json");
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
        let e = parse_event(&forged(TERMINATED, |v| v["detail"]["state"] = state.into())).unwrap();
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
    let e = parse_event(&forged(SPOT, |v| v["time"] = "2026-02-30T10:00:00Z".into())).unwrap_err();
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
