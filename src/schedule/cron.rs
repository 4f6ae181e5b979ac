//! When a schedule is due: cron expressions read in an IANA time zone (the `croner` and
//! `chrono-tz` crates), `@every <duration>`, and the due times a gap leaves behind.
//! Pure logic over ms since the epoch, unit-tested here; src/schedule/mod.rs stores it.

use std::str::FromStr;

use chrono::{DateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use crate::options::quote;
use crate::sqlite::Val;
use crate::time;

/// Most jobs one claim adds for one schedule after a gap, with `missed = 'all'`.
pub const MAX_MISSED: usize = 1000;

/// A schedule's timing: `when` and `tz`, checked.
pub enum Timing {
    /// A cron expression (5 fields, or 6 with seconds first, or @hourly...), read in `tz`.
    Cron(Box<Cron>, Tz),
    /// `@every <duration>`: due times `step` ms apart, from the first one.
    Every(i64),
}

/// What to do with the due times a gap left behind (CRON-01).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Missed {
    Latest,
    Skip,
    All,
}

impl Missed {
    pub const NAMES: &'static [&'static str] = &["latest", "skip", "all"];

    pub fn parse(s: &str) -> Result<Missed, String> {
        match s {
            "latest" => Ok(Missed::Latest),
            "skip" => Ok(Missed::Skip),
            "all" => Ok(Missed::All),
            _ => Err(format!("unknown value {} (known: latest, skip, all)", quote(s))),
        }
    }

    pub fn name(self) -> &'static str {
        Missed::NAMES[self as usize]
    }
}

/// An IANA zone such as 'Europe/Paris' (or 'UTC').
pub fn parse_tz(name: &str) -> Result<Tz, String> {
    Tz::from_str(name)
        .map_err(|_| format!("unknown time zone {}: expected an IANA name such as 'Europe/Paris'", quote(name)))
}

impl Timing {
    /// Reads `when` (in zone `tz`): a cron expression, `@every <duration>`, or a nickname.
    pub fn parse(when: &str, tz: &str) -> Result<Timing, String> {
        let zone = parse_tz(tz)?;
        let trimmed = when.trim();
        if let Some(rest) = trimmed.strip_prefix("@every") {
            let step = time::parse_duration(&Val::Text(rest.trim().to_string()))
                .map_err(|e| format!("bad '@every' in {}: {e}", quote(when)))?;
            if step < 1 {
                return Err(format!("bad '@every' in {}: the duration must be longer than 0ms", quote(when)));
            }
            return Ok(Timing::Every(step));
        }
        let fields = trimmed.split_whitespace().count();
        if !trimmed.starts_with('@') && fields != 5 && fields != 6 {
            return Err(format!(
                "bad cron expression {}: expected 5 fields (minute hour day-of-month month day-of-week) \
                 or 6 with seconds first, not {fields}",
                quote(when)
            ));
        }
        // Day-of-month and day-of-week both restricted match either, as in cron.
        let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
        let cron = parser.parse(trimmed).map_err(|e| format!("bad cron expression {}: {e}", quote(when)))?;
        Ok(Timing::Cron(Box::new(cron), zone))
    }

    /// The first due time after `t`. `anchor` is a due time of the series (what `@every`
    /// counts from). None: there is none (a pattern that matches no date).
    pub fn after(&self, t: i64, anchor: i64) -> Option<i64> {
        match self {
            Timing::Every(step) => Some(anchor + ((t - anchor).div_euclid(*step) + 1) * step),
            Timing::Cron(cron, tz) => next_in_zone(cron, *tz, t),
        }
    }

    /// The latest due time at or before `t`, and not before `anchor` (a due time).
    pub fn at_or_before(&self, t: i64, anchor: i64) -> Option<i64> {
        let found = match self {
            Timing::Every(step) => Some(anchor + (t - anchor).div_euclid(*step) * step),
            Timing::Cron(cron, tz) => {
                let at = tz.timestamp_millis_opt(t).single()?;
                cron.find_previous_occurrence(&at, true).ok().map(|d| d.timestamp_millis())
            }
        };
        found.filter(|&d| d >= anchor)
    }

    /// The first due time of a schedule set up at `now`: the first after it.
    pub fn first(&self, now: i64) -> Option<i64> {
        self.after(now, now)
    }

    /// The due times to add when a claim at `now` finds `next` (a due time) has come:
    /// one when it is the only one; after a gap, as `missed` says. Oldest first.
    pub fn due(&self, next: i64, now: i64, missed: Missed) -> Vec<i64> {
        let only_one = self.after(next, next).is_none_or(|second| second > now);
        if only_one {
            return vec![next];
        }
        match missed {
            Missed::Skip => vec![],
            Missed::Latest => self.at_or_before(now, next).into_iter().collect(),
            Missed::All => {
                // Walk back from now: the latest MAX_MISSED, however long the gap was.
                let mut times = vec![];
                let mut t = self.at_or_before(now, next);
                while let Some(d) = t {
                    times.push(d);
                    if times.len() == MAX_MISSED || d == next {
                        break;
                    }
                    t = self.at_or_before(d - 1, next);
                }
                times.reverse();
                times
            }
        }
    }
}

/// The first due time of `cron` after `t`, read in `tz`. croner finds it across an hour
/// that a clock change skips, not across a skipped local day (Pacific/Apia skipped
/// 2011-12-30): there it gives up, and the schedule would never fire again. So past such a
/// gap the search starts again at its end, and the times the gap swallowed run once at
/// its end, as a spring-forward hour's do (CRON-01); unless the pattern runs within the
/// hour after the gap anyway (an hourly one), which then simply goes on.
fn next_in_zone(cron: &Cron, tz: Tz, t: i64) -> Option<i64> {
    let next = |from: i64, inclusive: bool| {
        let at = tz.timestamp_millis_opt(from).single()?;
        cron.find_next_occurrence(&at, inclusive).ok().map(|d| d.timestamp_millis())
    };
    let mut from = t;
    for _ in 0..4 {
        if let Some(d) = next(from, from != t) {
            return Some(d);
        }
        let jump = next_offset_change(tz, from)?;
        let wall = |ms: i64| tz.timestamp_millis_opt(ms).single().map(|d| d.naive_local().and_utc());
        let (gap_start, gap_end) = (wall(jump - 1)?, wall(jump)?);
        let swallowed = cron.find_next_occurrence(&gap_start, false).is_ok_and(|d| d < gap_end);
        match next(jump, true) {
            Some(d) if !swallowed || d < jump + HOUR => return Some(d),
            _ if swallowed => return Some(jump),
            _ => from = jump,
        }
    }
    None
}

const HOUR: i64 = 3_600_000;

/// The first ms after `t`, within about a year, at which `tz`'s offset from UTC changes.
fn next_offset_change(tz: Tz, t: i64) -> Option<i64> {
    let offset = |ms: i64| tz.timestamp_millis_opt(ms).single().map(|d| d.offset().fix());
    let here = offset(t)?;
    let mut hi = (1..=24 * 400).map(|h| t + h * HOUR).find(|&ms| offset(ms) != Some(here))?;
    let mut lo = hi - HOUR; // the change is in (lo, hi]
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if offset(mid) == Some(here) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi)
}

/// A due time as the id of its job shows it: ISO-8601 UTC, to the second (ms when it has some).
pub fn iso(ms: i64) -> String {
    let t: DateTime<Utc> = Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
    if ms.rem_euclid(1000) == 0 {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(iso: &str) -> i64 {
        DateTime::parse_from_rfc3339(iso).unwrap().timestamp_millis()
    }

    fn next(when: &str, tz: &str, after: &str) -> String {
        let t = Timing::parse(when, tz).unwrap();
        iso(t.after(ms(after), ms(after)).unwrap())
    }

    #[test]
    fn cron_in_a_zone() {
        assert_eq!(next("0 9 * * mon", "Europe/Paris", "2026-12-01T00:00:00Z"), "2026-12-07T08:00:00Z");
        assert_eq!(next("0 9 * * mon", "Europe/Paris", "2026-06-01T00:00:00Z"), "2026-06-01T07:00:00Z");
        assert_eq!(next("*/15 * * * *", "UTC", "2026-12-01T08:07:00Z"), "2026-12-01T08:15:00Z");
        assert_eq!(next("30 * * * * *", "UTC", "2026-12-01T08:07:00Z"), "2026-12-01T08:07:30Z");
        assert_eq!(next("@daily", "UTC", "2026-12-01T08:07:00Z"), "2026-12-02T00:00:00Z");
        assert_eq!(next("0 8 1 jan,jul *", "UTC", "2026-12-01T08:07:00Z"), "2027-01-01T08:00:00Z");
    }

    #[test]
    fn spring_forward_runs_once_after_the_gap() {
        // Paris, 2026-03-29: 02:00 local jumps to 03:00; 02:30 does not exist.
        let t = Timing::parse("30 2 * * *", "Europe/Paris").unwrap();
        let d = t.after(ms("2026-03-28T12:00:00Z"), 0).unwrap();
        assert_eq!(iso(d), "2026-03-29T01:00:00Z"); // 03:00 local, the first valid time
        assert_eq!(iso(t.after(d, d).unwrap()), "2026-03-30T00:30:00Z");
    }

    #[test]
    fn fall_back_runs_once_at_the_first_occurrence() {
        // Paris, 2026-10-25: 03:00 local goes back to 02:00; 02:30 occurs twice.
        let t = Timing::parse("30 2 * * *", "Europe/Paris").unwrap();
        let d = t.after(ms("2026-10-24T12:00:00Z"), 0).unwrap();
        assert_eq!(iso(d), "2026-10-25T00:30:00Z"); // 02:30 CEST, the first
        assert_eq!(iso(t.after(d, d).unwrap()), "2026-10-26T01:30:00Z"); // not 01:30Z the same day
    }

    #[test]
    fn a_skipped_local_day_runs_once_at_its_end_then_as_before() {
        // Apia: 2011-12-29 23:59:59 local (UTC-10) was followed by 2011-12-31 00:00 (UTC+14).
        let t = Timing::parse("0 12 * * *", "Pacific/Apia").unwrap();
        let d = t.after(ms("2011-12-29T22:00:00Z"), 0).unwrap(); // after noon on the 29th
        assert_eq!(iso(d), "2011-12-30T10:00:00Z"); // the 30th's noon, at 00:00 on the 31st
        let d = t.after(d, d).unwrap();
        assert_eq!(iso(d), "2011-12-30T22:00:00Z"); // noon on the 31st
        assert_eq!(iso(t.after(d, d).unwrap()), "2011-12-31T22:00:00Z");
        // An hourly pattern goes on at its first time after the gap; a weekly one finds its
        // day past it; a pattern that matches no date still has no next time.
        assert_eq!(next("15 * * * *", "Pacific/Apia", "2011-12-30T09:20:00Z"), "2011-12-30T10:15:00Z");
        assert_eq!(next("0 9 * * mon", "Pacific/Apia", "2011-12-27T00:00:00Z"), "2012-01-01T19:00:00Z");
        assert_eq!(Timing::parse("0 0 30 2 *", "Pacific/Apia").unwrap().after(ms("2011-12-01T00:00:00Z"), 0), None);
    }

    #[test]
    fn every_counts_from_its_anchor() {
        let t = Timing::parse("@every 10m", "UTC").unwrap();
        assert_eq!(t.after(1_000, 0), Some(600_000));
        assert_eq!(t.after(600_000, 0), Some(1_200_000));
        assert_eq!(t.at_or_before(1_250_000, 600_000), Some(1_200_000));
        assert_eq!(t.first(5), Some(600_005));
    }

    #[test]
    fn missed_due_times() {
        let t = Timing::parse("@every 1m", "UTC").unwrap();
        let next = 60_000;
        assert_eq!(t.due(next, 60_500, Missed::Skip), vec![60_000]); // one due time: no gap
        assert_eq!(t.due(next, 300_000, Missed::Latest), vec![300_000]);
        assert_eq!(t.due(next, 300_000, Missed::Skip), Vec::<i64>::new());
        assert_eq!(t.due(next, 300_000, Missed::All), vec![60_000, 120_000, 180_000, 240_000, 300_000]);
        let all = t.due(next, 60_000 * 5000, Missed::All);
        assert_eq!((all.len(), all[999]), (MAX_MISSED, 60_000 * 5000));
        let c = Timing::parse("0 * * * *", "UTC").unwrap();
        let h = 3_600_000;
        assert_eq!(c.due(h, 3 * h + 5, Missed::All), vec![h, 2 * h, 3 * h]);
        assert_eq!(c.due(h, 3 * h + 5, Missed::Latest), vec![3 * h]);
    }

    #[test]
    fn bad_timing_names_the_value() {
        for (when, tz, says) in [
            ("61 * * * *", "UTC", "'61 * * * *'"),
            ("* * *", "UTC", "'* * *'"),
            ("0 0 1 1 * 2030 *", "UTC", "not 7"),
            ("@every 5 minutes", "UTC", "'5 minutes'"),
            ("@every 0s", "UTC", "longer than 0ms"),
            ("@fortnightly", "UTC", "'@fortnightly'"),
            ("0 9 * * mon", "Mars/Olympus", "'Mars/Olympus'"),
        ] {
            let err = Timing::parse(when, tz).err().unwrap_or_else(|| panic!("{when} parsed"));
            assert!(err.contains(says), "{when}: {err}");
        }
    }

    #[test]
    fn ids_show_the_due_time() {
        assert_eq!(iso(ms("2026-12-01T08:00:00Z")), "2026-12-01T08:00:00Z");
        assert_eq!(iso(ms("2026-12-01T08:00:00.250Z")), "2026-12-01T08:00:00.250Z");
    }
}
