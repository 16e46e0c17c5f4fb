//! A small `strftime` for the `strftime_now(fmt)` template function (Llama 3.x, Gemma 3 and
//! others print today's date into the system prompt). Times are UTC: the standard library has
//! no time-zone database, and a server's local zone is rarely what the user meant anyway.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// A broken-down UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcDateTime {
    /// Calendar year, e.g. 2025.
    pub year: i64,
    /// Month 1..=12.
    pub month: u32,
    /// Day of the month 1..=31.
    pub day: u32,
    /// Hour 0..=23.
    pub hour: u32,
    /// Minute 0..=59.
    pub minute: u32,
    /// Second 0..=59.
    pub second: u32,
    /// Day of the week, 0 = Monday .. 6 = Sunday (Python's `weekday()`).
    pub weekday: u32,
    /// Day of the year 1..=366.
    pub yday: u32,
}

impl UtcDateTime {
    /// Breaks down `t` (times before 1970 count backwards correctly).
    pub fn from_system_time(t: SystemTime) -> Self {
        let secs: i64 = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2),
            Err(e) => {
                let d = e.duration();
                // Round towards minus infinity so that e.g. -0.5 s is 23:59:59 the day before.
                -i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2) - i64::from(d.subsec_nanos() > 0)
            }
        };
        Self::from_unix(secs)
    }

    /// Breaks down seconds since 1970-01-01T00:00:00Z.
    pub fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        let jan1 = days_from_civil(year, 1, 1);
        UtcDateTime {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
            // 1970-01-01 was a Thursday (3 with Monday = 0).
            weekday: (days + 3).rem_euclid(7) as u32,
            yday: (days - jan1 + 1) as u32,
        }
    }
}

/// Days since 1970-01-01 → (year, month, day), Howard Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01, the inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats `t` (UTC) like C/Python `strftime`.
///
/// Supported: `%Y %y %m %d %e %B %b %h %A %a %H %I %M %S %p %j %u %w %F %T %D %R %Z %z %%`;
/// a `-` flag (`%-d`, glibc style) drops the zero padding. Unknown directives are copied
/// through unchanged, as glibc does.
pub fn strftime(fmt: &str, t: SystemTime) -> String {
    format_datetime(fmt, &UtcDateTime::from_system_time(t))
}

/// Formats a broken-down time; see [`strftime`] for the directives.
pub fn format_datetime(fmt: &str, dt: &UtcDateTime) -> String {
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let no_pad = chars.peek() == Some(&'-');
        if no_pad {
            chars.next();
        }
        let Some(d) = chars.next() else {
            out.push('%');
            if no_pad {
                out.push('-');
            }
            break;
        };
        let num = |v: i64, width: usize| if no_pad { v.to_string() } else { format!("{v:0width$}") };
        let hour12 = if dt.hour % 12 == 0 { 12 } else { dt.hour % 12 };
        let piece = match d {
            'Y' => dt.year.to_string(),
            'y' => num(dt.year.rem_euclid(100), 2),
            'm' => num(dt.month.into(), 2),
            'd' => num(dt.day.into(), 2),
            'e' => {
                if no_pad {
                    dt.day.to_string()
                } else {
                    format!("{:2}", dt.day)
                }
            }
            'B' => MONTHS[(dt.month as usize + 11) % 12].to_owned(),
            'b' | 'h' => MONTHS[(dt.month as usize + 11) % 12][..3].to_owned(),
            'A' => WEEKDAYS[dt.weekday as usize % 7].to_owned(),
            'a' => WEEKDAYS[dt.weekday as usize % 7][..3].to_owned(),
            'H' => num(dt.hour.into(), 2),
            'I' => num(hour12.into(), 2),
            'M' => num(dt.minute.into(), 2),
            'S' => num(dt.second.into(), 2),
            'p' => (if dt.hour < 12 { "AM" } else { "PM" }).to_owned(),
            'j' => num(dt.yday.into(), 3),
            'u' => (dt.weekday + 1).to_string(),
            'w' => ((dt.weekday + 1) % 7).to_string(),
            'F' => format!("{}-{:02}-{:02}", dt.year, dt.month, dt.day),
            'T' => format!("{:02}:{:02}:{:02}", dt.hour, dt.minute, dt.second),
            'R' => format!("{:02}:{:02}", dt.hour, dt.minute),
            'D' => format!("{:02}/{:02}/{:02}", dt.month, dt.day, dt.year.rem_euclid(100)),
            'Z' => "UTC".to_owned(),
            'z' => "+0000".to_owned(),
            '%' => "%".to_owned(),
            other => {
                if no_pad {
                    format!("%-{other}")
                } else {
                    format!("%{other}")
                }
            }
        };
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_dates() {
        // 2024-02-29T13:05:09Z, a Thursday; day 60 of a leap year.
        let t = UNIX_EPOCH + Duration::from_secs(1_709_211_909);
        // Python: datetime(2024,2,29,13,5,9).strftime("%Y-%m-%d %H:%M:%S %A %a %B %b %p %j %I %y")
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %A %a %B %b %p %j %I %y", t),
            "2024-02-29 13:05:09 Thursday Thu February Feb PM 060 01 24"
        );
        assert_eq!(strftime("%-d %b %Y", t), "29 Feb 2024");
        assert_eq!(strftime("%d %B %Y, %% %q", UNIX_EPOCH), "01 January 1970, % %q");
        let dt = UtcDateTime::from_unix(-1);
        assert_eq!((dt.year, dt.month, dt.day, dt.hour, dt.weekday, dt.yday), (1969, 12, 31, 23, 2, 365));
        let dt = UtcDateTime::from_unix(951_782_400); // 2000-02-29
        assert_eq!((dt.year, dt.month, dt.day, dt.yday), (2000, 2, 29, 60));
    }

    #[test]
    fn round_trip_days() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
