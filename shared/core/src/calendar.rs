//! Proleptic Gregorian calendar arithmetic on Unix days (H. Hinnant's algorithms), for
//! parsing event times and evaluating cron schedules in UTC without a clock or a crate.

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1..=12, day 1..=31) of a day since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The UTC calendar fields of a Unix time: (minute, hour, day of month, month,
/// day of week with Sunday = 0), as cron reads them.
pub fn cron_fields(unix: i64) -> (u32, u32, u32, u32, u32) {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (_, month, day) = civil_from_days(days);
    // 1970-01-01 was a Thursday (4).
    let weekday = (days + 4).rem_euclid(7);
    (
        (secs / 60 % 60) as u32,
        (secs / 3600) as u32,
        day as u32,
        month as u32,
        weekday as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_fields_of_a_known_instant_are_its_utc_calendar() {
        // 2026-11-23T10:07:00Z is a Monday.
        let t = days_from_civil(2026, 11, 23) * 86_400 + 10 * 3600 + 7 * 60;
        assert_eq!(cron_fields(t), (7, 10, 23, 11, 1));
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
    }
}
