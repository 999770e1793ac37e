//! Five-field cron expressions for disruption budget schedules.
//!
//! Karpenter evaluates `budgets[].schedule` with the standard cron parser of
//! robfig/cron (the one Kubernetes CronJobs use): minute, hour, day of month, month,
//! day of week; `*`/`?`, lists, ranges, steps, month and weekday names, and the
//! `@yearly`-style macros. No seconds field, no `@every`, no time zones (Karpenter
//! documents budgets schedules as UTC-only). Parsing is pure; the caller supplies the
//! calendar fields of the instant it is asking about.

use std::fmt;

/// A parsed schedule: one bit set per allowed value of each field.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CronSchedule {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// Whether day-of-month / day-of-week were written as `*` or `?` (also `*/n`).
    /// When both are restricted, a day matches if *either* does (the cron rule).
    dom_star: bool,
    dow_star: bool,
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
/// Month names map to 1..=12 (index + 1).
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Weekday names map to 0..=6, Sunday first.
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl CronSchedule {
    /// Parses `"0 9 * * mon-fri"`, `"*/15 * * * *"` or a macro such as `"@daily"`.
    /// The error says which field is wrong and why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let expanded = expand_macro(trimmed)?;
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily, got {} field(s)",
                fields.len()
            ));
        }
        Ok(CronSchedule {
            minutes: parse_field(fields[0], &MINUTE)?,
            hours: parse_field(fields[1], &HOUR)?,
            days_of_month: parse_field(fields[2], &DAY_OF_MONTH)?,
            months: parse_field(fields[3], &MONTH)?,
            days_of_week: parse_field(fields[4], &DAY_OF_WEEK)?,
            dom_star: is_star(fields[2]),
            dow_star: is_star(fields[4]),
        })
    }

    /// Whether the schedule fires at this minute. `month` is 1..=12, `day_of_month`
    /// 1..=31, `day_of_week` 0..=6 with Sunday = 0; out-of-range values never match.
    pub fn matches(
        &self,
        minute: u32,
        hour: u32,
        day_of_month: u32,
        month: u32,
        day_of_week: u32,
    ) -> bool {
        has(self.minutes, minute)
            && has(self.hours, hour)
            && self.matches_day(day_of_month, month, day_of_week)
    }
}

impl CronSchedule {
    /// Whether the schedule fires on this day (month included).
    fn matches_day(&self, day_of_month: u32, month: u32, day_of_week: u32) -> bool {
        let dom = has(self.days_of_month, day_of_month);
        let dow = has(self.days_of_week, day_of_week);
        let day = if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        };
        day && has(self.months, month)
    }

    /// Whether the schedule fires at some minute `t` (Unix seconds, UTC) with
    /// `after < t <= until`. Whole days and hours that cannot match are skipped, so a
    /// window of weeks costs a few thousand steps at most.
    pub fn fires_between(&self, after: i64, until: i64) -> bool {
        // The first whole minute strictly after `after`.
        let mut t = after.div_euclid(60) * 60 + 60;
        while t <= until {
            let (minute, hour, dom, month, dow) = crate::calendar::cron_fields(t);
            if !self.matches_day(dom, month, dow) {
                t = t.div_euclid(86_400) * 86_400 + 86_400;
                continue;
            }
            if !has(self.hours, hour) {
                t = t.div_euclid(3600) * 3600 + 3600;
                continue;
            }
            if has(self.minutes, minute) {
                return true;
            }
            t += 60;
        }
        false
    }
}

impl super::model::Budget {
    /// The budget's schedule, parsed. `None` for an always-active budget. A validated
    /// budget's schedule always parses, so `None` never hides an error there.
    pub fn cron_schedule(&self) -> Option<CronSchedule> {
        self.schedule
            .as_deref()
            .and_then(|s| CronSchedule::parse(s).ok())
    }
}

impl fmt::Debug for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |bits: u64| {
            (0..64)
                .filter(|b| bits & (1u64 << b) != 0)
                .collect::<Vec<u32>>()
        };
        f.debug_struct("CronSchedule")
            .field("minutes", &list(self.minutes))
            .field("hours", &list(self.hours))
            .field("days_of_month", &list(self.days_of_month))
            .field("months", &list(self.months))
            .field("days_of_week", &list(self.days_of_week))
            .finish()
    }
}

fn has(bits: u64, value: u32) -> bool {
    value < 64 && bits & (1u64 << value) != 0
}

fn is_star(field: &str) -> bool {
    field.starts_with('*') || field.starts_with('?')
}

fn expand_macro(text: &str) -> Result<&str, String> {
    if !text.starts_with('@') {
        return Ok(text);
    }
    match text {
        "@yearly" | "@annually" => Ok("0 0 1 1 *"),
        "@monthly" => Ok("0 0 1 * *"),
        "@weekly" => Ok("0 0 * * 0"),
        "@daily" | "@midnight" => Ok("0 0 * * *"),
        "@hourly" => Ok("0 * * * *"),
        other => Err(format!(
            "unknown macro {other:?} (expected one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)"
        )),
    }
}

/// A comma-separated list of `*`, `?`, `n`, `a-b`, each optionally `/step`.
fn parse_field(text: &str, field: &Field) -> Result<u64, String> {
    let mut bits = 0u64;
    for part in text.split(',') {
        bits |= parse_part(part, field)
            .map_err(|why| format!("{} field {text:?}: {why}", field.name))?;
    }
    Ok(bits)
}

fn parse_part(part: &str, field: &Field) -> Result<u64, String> {
    let (range, step) = match part.split_once('/') {
        Some((range, step)) => (range, Some(parse_step(step)?)),
        None => (part, None),
    };
    let (start, end) = if range == "*" || range == "?" {
        (field.min, field.max)
    } else if let Some((a, b)) = range.split_once('-') {
        (parse_value(a, field)?, parse_value(b, field)?)
    } else {
        let single = parse_value(range, field)?;
        // `5/15` means "from 5 to the end, every 15", as in robfig/cron.
        (single, if step.is_some() { field.max } else { single })
    };
    if start > end {
        return Err(format!("range {start}-{end} is backwards"));
    }
    let step = step.unwrap_or(1);
    Ok((start..=end)
        .step_by(step)
        .fold(0u64, |bits, v| bits | (1u64 << v)))
}

fn parse_step(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(step) if step > 0 => Ok(step),
        _ => Err(format!("step {text:?} is not a positive number")),
    }
}

fn parse_value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(index) = field.names.iter().position(|n| *n == lower) {
        return Ok(field.min + index as u32);
    }
    let value: u32 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number{}", name_hint(field)))?;
    if value < field.min || value > field.max {
        return Err(format!(
            "{value} is out of range {}-{}",
            field.min, field.max
        ));
    }
    Ok(value)
}

fn name_hint(field: &Field) -> String {
    match field.names {
        [] => String::new(),
        [first, .., last] => format!(" or a name {first}..{last}"),
        [only] => format!(" or {only}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(text: &str) -> CronSchedule {
        match CronSchedule::parse(text) {
            Ok(c) => c,
            Err(e) => panic!("{text:?} should parse: {e}"),
        }
    }

    #[test]
    fn weekday_mornings_match_only_at_nine_on_monday_to_friday() {
        let c = cron("0 9 * * mon-fri");
        // 2024-06-03 was a Monday (dow 1); 2024-06-08 a Saturday (dow 6).
        assert!(c.matches(0, 9, 3, 6, 1));
        assert!(c.matches(0, 9, 7, 6, 5));
        assert!(!c.matches(0, 9, 8, 6, 6));
        assert!(!c.matches(0, 9, 9, 6, 0));
        assert!(!c.matches(1, 9, 3, 6, 1));
        assert!(!c.matches(0, 10, 3, 6, 1));
    }

    #[test]
    fn daily_macro_matches_midnight_every_day() {
        let c = cron("@daily");
        assert_eq!(c, cron("0 0 * * *"));
        assert_eq!(cron("@midnight"), c);
        assert!(c.matches(0, 0, 17, 2, 3));
        assert!(!c.matches(0, 1, 17, 2, 3));
    }

    #[test]
    fn every_macro_expands_to_its_five_fields() {
        assert_eq!(cron("@yearly"), cron("0 0 1 1 *"));
        assert_eq!(cron("@annually"), cron("0 0 1 1 *"));
        assert_eq!(cron("@monthly"), cron("0 0 1 * *"));
        assert_eq!(cron("@weekly"), cron("0 0 * * 0"));
        assert_eq!(cron("@hourly"), cron("0 * * * *"));
    }

    #[test]
    fn every_fifteen_minutes_matches_quarter_hours() {
        let c = cron("*/15 * * * *");
        for minute in 0..60 {
            assert_eq!(c.matches(minute, 5, 1, 1, 1), minute % 15 == 0, "{minute}");
        }
    }

    #[test]
    fn lists_ranges_steps_and_names_combine() {
        let c = cron("5/20 1,3-5/2 * JAN,jul-Aug *");
        assert!(c.matches(5, 1, 1, 1, 0));
        assert!(c.matches(45, 5, 1, 8, 0));
        assert!(!c.matches(45, 4, 1, 8, 0));
        assert!(!c.matches(45, 5, 1, 2, 0));
        assert!(!c.matches(0, 1, 1, 1, 0));
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        // The 1st of the month, or any Sunday.
        let c = cron("0 0 1 * sun");
        assert!(c.matches(0, 0, 1, 5, 3));
        assert!(c.matches(0, 0, 12, 5, 0));
        assert!(!c.matches(0, 0, 12, 5, 3));
        // With day-of-week a star, only the day of month counts.
        let c = cron("0 0 1 * *");
        assert!(!c.matches(0, 0, 12, 5, 0));
    }

    #[test]
    fn out_of_range_inputs_never_match() {
        let c = cron("* * * * *");
        assert!(c.matches(59, 23, 31, 12, 6));
        assert!(!c.matches(60, 0, 1, 1, 0));
        assert!(!c.matches(0, 0, 1, 13, 0));
        assert!(!c.matches(u32::MAX, 0, 1, 1, 0));
    }

    #[test]
    fn bad_fields_are_named_in_the_error() {
        let cases = [
            (
                "61 * * * *",
                r#"minute field "61": 61 is out of range 0-59"#,
            ),
            ("* 24 * * *", r#"hour field "24": 24 is out of range 0-23"#),
            (
                "* * 0 * *",
                r#"day-of-month field "0": 0 is out of range 1-31"#,
            ),
            (
                "* * * foo *",
                r#"month field "foo": "foo" is not a number or a name jan..dec"#,
            ),
            (
                "* * * * 7",
                r#"day-of-week field "7": 7 is out of range 0-6"#,
            ),
            (
                "*/0 * * * *",
                r#"minute field "*/0": step "0" is not a positive number"#,
            ),
            ("* 5-1 * * *", r#"hour field "5-1": range 5-1 is backwards"#),
            (
                "* * * *",
                "expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily, got 4 field(s)",
            ),
            (
                "",
                "expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily, got 0 field(s)",
            ),
            (
                "@every 1h",
                r#"unknown macro "@every 1h" (expected one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)"#,
            ),
            (
                "0 0 * * * *",
                "expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily, got 6 field(s)",
            ),
            ("1,,2 * * * *", r#"minute field "1,,2": "" is not a number"#),
        ];
        for (text, message) in cases {
            assert_eq!(
                CronSchedule::parse(text),
                Err(message.to_string()),
                "{text:?}"
            );
        }
    }
}
