//! Queue settings (docs/reference.md, tq_queue): stored per queue in tinyq_queues, NULL
//! meaning the default. A leaf: every module that reads a queue's settings uses this one.

use crate::options::Options;
use crate::sqlite::{Conn, Result};
use crate::time::format_rate;

/// The options tq_queue takes: one per setting.
pub const KEYS: &[&str] = &[
    "lease",
    "timeout",
    "attempts",
    "backoff",
    "backoff_max",
    "concurrency",
    "rate",
    "group_concurrency",
    "group_rate",
    "dedupe",
    "keep",
    "paused",
];

pub const DEFAULT_KEEP: i64 = 7 * 86_400_000;
pub const DEFAULT_DEDUPE: i64 = 86_400_000;
pub const DEFAULT_LEASE: i64 = 30_000;

/// A queue's settings as stored: None means "the default".
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub name: String,
    lease: Option<i64>,
    timeout: Option<i64>,
    attempts: Option<i64>,
    backoff: Option<i64>,
    backoff_max: Option<i64>,
    pub concurrency: Option<i64>,
    pub rate: Option<(i64, i64)>,
    pub group_concurrency: Option<i64>,
    pub group_rate: Option<(i64, i64)>,
    dedupe: Option<i64>,
    keep: Option<i64>,
    pub paused: bool,
}

impl Settings {
    /// The settings of a queue that has no row yet: every default.
    pub fn defaults(name: &str) -> Settings {
        Settings { name: name.to_string(), ..Default::default() }
    }
    pub fn lease(&self) -> i64 {
        self.lease.unwrap_or(DEFAULT_LEASE)
    }
    pub fn timeout(&self) -> i64 {
        self.timeout.unwrap_or(3_600_000)
    }
    pub fn attempts(&self) -> i64 {
        self.attempts.unwrap_or(20)
    }
    pub fn backoff(&self) -> i64 {
        self.backoff.unwrap_or(1_000)
    }
    pub fn backoff_max(&self) -> i64 {
        self.backoff_max.unwrap_or(3_600_000)
    }
    pub fn dedupe(&self) -> i64 {
        self.dedupe.unwrap_or(DEFAULT_DEDUPE)
    }
    pub fn keep(&self) -> i64 {
        self.keep.unwrap_or(DEFAULT_KEEP)
    }
    /// Does any limit need the starts log?
    pub fn counts_starts(&self) -> bool {
        self.rate.is_some() || self.group_rate.is_some()
    }
    /// The longest rate window, for trimming the starts log.
    pub fn longest_window(&self) -> i64 {
        self.rate.map_or(0, |r| r.1).max(self.group_rate.map_or(0, |r| r.1))
    }
    pub fn has_group_limits(&self) -> bool {
        self.group_concurrency.is_some() || self.group_rate.is_some()
    }

    pub fn to_json(&self) -> String {
        let rate = |r: Option<(i64, i64)>| r.map(|(n, ms)| format_rate(n, ms));
        serde_json::json!({
            "queue": self.name,
            "lease": self.lease(),
            "timeout": self.timeout(),
            "attempts": self.attempts(),
            "backoff": self.backoff(),
            "backoff_max": self.backoff_max(),
            "concurrency": self.concurrency,
            "rate": rate(self.rate),
            "group_concurrency": self.group_concurrency,
            "group_rate": rate(self.group_rate),
            "dedupe": self.dedupe(),
            "keep": self.keep(),
            "paused": self.paused,
        })
        .to_string()
    }
}

fn pair(n: Option<i64>, ms: Option<i64>) -> Option<(i64, i64)> {
    Some((n?, ms?))
}

/// The settings of `name` (defaults when the queue has no row yet).
pub fn load(conn: &Conn, name: &str) -> Result<Settings> {
    let stored = conn.row(
        "SELECT lease, timeout, attempts, backoff, backoff_max, concurrency, rate_n, rate_ms,
                group_concurrency, group_rate_n, group_rate_ms, dedupe, keep, paused
         FROM tinyq_queues WHERE name = ?1",
        &[&name],
        |st| Settings {
            name: name.to_string(),
            lease: st.opt_int(0),
            timeout: st.opt_int(1),
            attempts: st.opt_int(2),
            backoff: st.opt_int(3),
            backoff_max: st.opt_int(4),
            concurrency: st.opt_int(5),
            rate: pair(st.opt_int(6), st.opt_int(7)),
            group_concurrency: st.opt_int(8),
            group_rate: pair(st.opt_int(9), st.opt_int(10)),
            dedupe: st.opt_int(11),
            keep: st.opt_int(12),
            paused: st.int(13) != 0,
        },
    )?;
    Ok(stored.unwrap_or_else(|| Settings::defaults(name)))
}

/// Every queue that has a row.
pub fn all(conn: &Conn) -> Result<Vec<Settings>> {
    let names = conn.rows("SELECT name FROM tinyq_queues ORDER BY name", &[], |st| st.text(0).unwrap_or_default())?;
    names.iter().map(|n| load(conn, n)).collect()
}

pub fn save(conn: &Conn, s: &Settings) -> Result<()> {
    let (rate_n, rate_ms) = (s.rate.map(|r| r.0), s.rate.map(|r| r.1));
    let (grate_n, grate_ms) = (s.group_rate.map(|r| r.0), s.group_rate.map(|r| r.1));
    conn.exec(
        "INSERT INTO tinyq_queues (name, lease, timeout, attempts, backoff, backoff_max, concurrency,
             rate_n, rate_ms, group_concurrency, group_rate_n, group_rate_ms, dedupe, keep, paused)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
         ON CONFLICT (name) DO UPDATE SET lease = ?2, timeout = ?3, attempts = ?4, backoff = ?5,
             backoff_max = ?6, concurrency = ?7, rate_n = ?8, rate_ms = ?9, group_concurrency = ?10,
             group_rate_n = ?11, group_rate_ms = ?12, dedupe = ?13, keep = ?14, paused = ?15",
        &[
            &s.name,
            &s.lease,
            &s.timeout,
            &s.attempts,
            &s.backoff,
            &s.backoff_max,
            &s.concurrency,
            &rate_n,
            &rate_ms,
            &s.group_concurrency,
            &grate_n,
            &grate_ms,
            &s.dedupe,
            &s.keep,
            &s.paused,
        ],
    )?;
    Ok(())
}

/// Applies the keys present in `opts` (null resets a key to its default).
fn apply(s: &mut Settings, opts: &Options) -> Result<()> {
    const BIG: i64 = 1_000_000_000;
    let positive = |key: &str, v: Option<i64>| -> Result<Option<i64>> {
        if v == Some(0) {
            bail!("option \"{key}\" must be longer than 0ms");
        }
        Ok(v)
    };
    s.lease = positive("lease", opts.duration("lease")?)?;
    s.timeout = positive("timeout", opts.duration("timeout")?)?;
    s.attempts = opts.int("attempts", 1, 1_000_000)?;
    s.backoff = opts.duration("backoff")?;
    s.backoff_max = opts.duration("backoff_max")?;
    s.concurrency = opts.int("concurrency", 1, BIG)?;
    s.rate = opts.rate("rate")?;
    s.group_concurrency = opts.int("group_concurrency", 1, BIG)?;
    s.group_rate = opts.rate("group_rate")?;
    s.dedupe = opts.duration("dedupe")?;
    s.keep = opts.duration("keep")?;
    s.paused = opts.bool("paused")?.unwrap_or(false);
    Ok(())
}

impl Settings {
    /// These settings with the keys present in `opts` changed (a null key back to its
    /// default); the keys absent stay as they are.
    pub fn updated(&self, opts: &Options) -> Result<Settings> {
        let mut s = self.clone();
        // apply() reads absent keys as None, so only the keys given are taken from it.
        let mut given = self.clone();
        apply(&mut given, opts)?;
        macro_rules! merge {
            ($($f:ident),*) => { $( if opts.present(stringify!($f)) { s.$f = given.$f; } )* };
        }
        merge!(
            lease,
            timeout,
            attempts,
            backoff,
            backoff_max,
            concurrency,
            rate,
            group_concurrency,
            group_rate,
            dedupe,
            keep,
            paused
        );
        Ok(s)
    }

    /// Do the counters and the set-aside jobs follow the same settings in both (see
    /// limits::rebuild)?
    pub fn same_limits(&self, other: &Settings) -> bool {
        (self.rate, self.group_concurrency, self.group_rate) == (other.rate, other.group_concurrency, other.group_rate)
    }
}
