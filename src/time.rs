//! Times, durations, rates and backoff: pure logic, unit-tested here.

use crate::sqlite::{Conn, Val};
use crate::text::quote;

/// The longest duration tinyq accepts anywhere: 100 years, far from i64 overflow.
pub const MAX_DURATION_MS: i64 = 100 * 365 * 86_400_000;

pub fn system_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Conn {
    /// Milliseconds since the epoch: the pinned clock (tq_clock), else the system clock.
    pub fn now(&self) -> i64 {
        self.clock.get().unwrap_or_else(system_ms)
    }
}

/// A duration: integer ms, or text such as '500ms', '30s', '10m', '1.5h', '7d' ('5000' is ms).
pub fn parse_duration(v: &Val) -> Result<i64, String> {
    let ms = match v {
        Val::Int(i) => *i,
        Val::Real(f) if f.fract() == 0.0 && f.is_finite() => *f as i64,
        Val::Text(s) => parse_duration_text(s)?,
        other => return Err(format!("a duration must be ms or text like '30s', not {}", other.kind())),
    };
    check_duration(ms, v)
}

fn check_duration(ms: i64, v: &Val) -> Result<i64, String> {
    if ms < 0 {
        return Err(format!("bad duration {}: it is negative", show(v)));
    }
    if ms > MAX_DURATION_MS {
        return Err(format!("bad duration {}: longer than 100 years", show(v)));
    }
    Ok(ms)
}

fn show(v: &Val) -> String {
    match v {
        Val::Text(s) => quote(s),
        Val::Int(i) => i.to_string(),
        Val::Real(f) => f.to_string(),
        other => other.kind().to_string(),
    }
}

fn parse_duration_text(s: &str) -> Result<i64, String> {
    let bad = || format!("bad duration {}: expected a number and a unit among ms s m h d, like '30s'", quote(s));
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit_ms = match unit {
        // A bare number in text is ms, as an integer argument is.
        "" | "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return Err(bad()),
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let n: f64 = num.parse().map_err(|_| bad())?;
    let ms = n * unit_ms;
    if !ms.is_finite() || ms > MAX_DURATION_MS as f64 {
        return Err(format!("bad duration {}: longer than 100 years", quote(s)));
    }
    Ok(ms.round() as i64)
}

/// Times tinyq accepts: from the Unix epoch to the end of year 9999, as ms or as ISO text alike.
const TIME_RANGE: std::ops::RangeInclusive<i64> = 0..=253_402_300_799_999;

/// A time: integer ms since the epoch, or ISO-8601 text ('2026-11-29T12:00:00Z').
pub fn parse_time(v: &Val) -> Result<i64, String> {
    let ms = match v {
        Val::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => *f as i64,
        Val::Int(i) => *i,
        Val::Text(s) => parse_time_text(s).ok_or_else(|| {
            format!("bad time {}: expected ms since the epoch or ISO-8601 like '2026-11-29T12:00:00Z'", quote(s))
        })?,
        other => return Err(format!("a time must be ms or ISO-8601 text, not {}", other.kind())),
    };
    if !TIME_RANGE.contains(&ms) {
        return Err(format!("bad time {}: out of range (1970 to 9999)", show(v)));
    }
    Ok(ms)
}

fn parse_time_text(s: &str) -> Option<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s.trim()) {
        return Some(t.timestamp_millis());
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s.trim(), fmt) {
            return Some(t.and_utc().timestamp_millis());
        }
    }
    chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
        .ok()
        .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight").and_utc().timestamp_millis())
}

/// A rate 'N/duration': at most N starts in any window of that length. '10/s' means '10/1s'.
pub fn parse_rate(v: &Val) -> Result<(i64, i64), String> {
    let Val::Text(s) = v else {
        return Err(format!("a rate must be text like '10/s', not {}", v.kind()));
    };
    let bad = || format!("bad rate {}: expected 'N/duration' like '10/s' or '600/1m'", quote(s));
    let (n, per) = s.split_once('/').ok_or_else(bad)?;
    let n: i64 = n.trim().parse().map_err(|_| bad())?;
    if n < 1 {
        return Err(format!("bad rate {}: N must be at least 1", quote(s)));
    }
    let per = per.trim();
    if !per.ends_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(bad());
    }
    let per = if per.starts_with(|c: char| c.is_ascii_digit()) { per.to_string() } else { format!("1{per}") };
    let ms = parse_duration_text(&per).map_err(|_| bad())?;
    if ms < 1 {
        return Err(format!("bad rate {}: the window must be at least 1ms", quote(s)));
    }
    Ok((n, ms))
}

/// A rate as tq_queue reports it; parse_rate reads it back.
pub fn format_rate(n: i64, ms: i64) -> String {
    format!("{n}/{ms}ms")
}

/// The wait after the k-th charged attempt failed: base·2^(k-1), capped, times `jitter`
/// (a factor in [0.9, 1.1] drawn by the caller).
pub fn backoff(base: i64, cap: i64, k: i64, jitter: f64) -> i64 {
    let doublings = (k.max(1) - 1).min(62) as u32;
    let raw = base.saturating_mul(1i64.checked_shl(doublings).unwrap_or(i64::MAX)).min(cap);
    ((raw as f64) * jitter).round().max(0.0) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Result<i64, String> {
        parse_duration(&Val::Text(s.into()))
    }

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(d("500ms"), Ok(500));
        assert_eq!(d("30s"), Ok(30_000));
        assert_eq!(d("10m"), Ok(600_000));
        assert_eq!(d("1.5h"), Ok(5_400_000));
        assert_eq!(d("7d"), Ok(604_800_000));
        assert_eq!(parse_duration(&Val::Int(1234)), Ok(1234));
        assert_eq!(d("5000"), Ok(5000));
    }

    #[test]
    fn bad_durations_name_the_value() {
        for bad in ["", "5 minutes", "10x", "-5s", "s", "1.2.3s", "ms5", "1e3s", "5S"] {
            let err = d(bad).unwrap_err();
            assert!(err.contains(&format!("'{bad}'")), "{bad}: {err}");
        }
        assert!(parse_duration(&Val::Int(-1)).unwrap_err().contains("negative"));
        assert!(d("99999999d").unwrap_err().contains("100 years"));
        assert!(parse_duration(&Val::Null).is_err());
        assert!(parse_duration(&Val::Blob(vec![1])).is_err());
    }

    #[test]
    fn times_as_ms_or_iso() {
        assert_eq!(parse_time(&Val::Int(5)), Ok(5));
        assert_eq!(parse_time(&Val::Text("2026-11-29T12:00:00Z".into())), Ok(1_795_953_600_000));
        assert_eq!(parse_time(&Val::Text("2026-11-29T13:00:00+01:00".into())), Ok(1_795_953_600_000));
        assert_eq!(parse_time(&Val::Text("2026-11-29 12:00:00".into())), Ok(1_795_953_600_000));
        assert!(parse_time(&Val::Text("tomorrow".into())).unwrap_err().contains("'tomorrow'"));
        assert!(parse_time(&Val::Int(-1)).is_err());
        assert!(parse_time(&Val::Text("1969-12-31T23:59:59Z".into())).unwrap_err().contains("'1969-12-31T23:59:59Z'"));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate(&Val::Text("10/s".into())), Ok((10, 1000)));
        assert_eq!(parse_rate(&Val::Text("600/1m".into())), Ok((600, 60_000)));
        assert_eq!(parse_rate(&Val::Text(format_rate(5, 2500))), Ok((5, 2500)));
        for bad in ["10", "0/s", "x/s", "10/", "10/5", "10/0s", "10/parsec"] {
            assert!(parse_rate(&Val::Text(bad.into())).is_err(), "{bad}");
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b: Vec<i64> = (1..=5).map(|k| backoff(1000, 3_600_000, k, 1.0)).collect();
        assert_eq!(b, vec![1000, 2000, 4000, 8000, 16000]);
        assert_eq!(backoff(1000, 5000, 10, 1.0), 5000);
        assert_eq!(backoff(1000, 3_600_000, 500, 1.0), 3_600_000);
        assert_eq!(backoff(1000, 3_600_000, 1, 1.1), 1100);
        assert_eq!(backoff(1000, 3_600_000, 1, 0.9), 900);
    }
}
