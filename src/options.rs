//! The optional JSON `options` argument, and checks on plain arguments. Every message
//! names the argument or key; the function wrapper adds the function's name.

use serde_json::{Map, Value};

use crate::sqlite::{Error, Result, Val};
use crate::time;

/// Longest id, queue name, group key or step name, in bytes.
pub const MAX_NAME: usize = 1000;

pub struct Options(Map<String, Value>);

/// A time given as a time, or as a duration from now.
pub enum Moment {
    At(i64),
    After(i64),
}

impl Options {
    /// Parses `options` (NULL or absent means none) and rejects keys outside `allowed`.
    pub fn parse(v: Option<&Val>, allowed: &[&str]) -> Result<Options> {
        let map = match v {
            None | Some(Val::Null) => Map::new(),
            Some(Val::Text(s)) => match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(m)) => m,
                _ => bail!("options must be a JSON object like '{{\"delay\": \"10s\"}}', not '{}'", clip(s)),
            },
            Some(other) => bail!("options must be a JSON object, not {}", other.kind()),
        };
        if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            bail!("unknown option \"{k}\" (known: {})", allowed.join(", "));
        }
        Ok(Options(map))
    }

    /// Is the key given at all (a null value included)?
    pub fn present(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    fn raw(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    pub fn text(&self, key: &str) -> Result<Option<String>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(s)) => name(&format!("option \"{key}\""), &Val::Text(s.clone())).map(Some),
            Some(v) => bail!("option \"{key}\" must be text, not {}", json_kind(v)),
        }
    }

    pub fn int(&self, key: &str, lo: i64, hi: i64) -> Result<Option<i64>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Number(n))
                if n.as_i64().is_some() || n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.0e15) =>
            {
                let i = n.as_i64().unwrap_or_else(|| n.as_f64().expect("checked") as i64);
                if i < lo || i > hi {
                    bail!("option \"{key}\" must be from {lo} to {hi}, not {i}");
                }
                Ok(Some(i))
            }
            Some(v) => bail!("option \"{key}\" must be an integer, not {}", json_kind(v)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => bail!("option \"{key}\" must be true or false, not {}", json_kind(v)),
        }
    }

    /// A JSON object (such as `meta`), kept as its JSON text.
    pub fn object(&self, key: &str) -> Result<Option<String>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(v.to_string())),
            Some(v) => {
                bail!("option \"{key}\" must be a JSON object like {{\"tenant\": \"acme\"}}, not {}", json_kind(v))
            }
        }
    }

    pub fn duration(&self, key: &str) -> Result<Option<i64>> {
        self.typed(key, time::parse_duration)
    }

    pub fn time(&self, key: &str) -> Result<Option<i64>> {
        self.typed(key, time::parse_time)
    }

    /// A time, or a duration from now (text with a unit, '10m'); a number is a time.
    pub fn moment(&self, key: &str) -> Result<Option<Moment>> {
        let Some(Value::String(s)) = self.raw(key) else { return Ok(self.time(key)?.map(Moment::At)) };
        let text = Val::Text(s.clone());
        if let Ok(t) = time::parse_time(&text) {
            return Ok(Some(Moment::At(t)));
        }
        match time::parse_duration(&text) {
            Ok(d) => Ok(Some(Moment::After(d))),
            Err(_) => bail!(
                "option \"{key}\": '{}' is neither a time (ms since the epoch, or ISO-8601 like '2026-11-29T12:00:00Z') nor a duration (like '10m')",
                clip(s)
            ),
        }
    }

    pub fn rate(&self, key: &str) -> Result<Option<(i64, i64)>> {
        self.typed(key, time::parse_rate)
    }

    /// A duration, time or rate: a JSON string or number, read as SQL would pass it.
    fn typed<T>(&self, key: &str, parse: fn(&Val) -> std::result::Result<T, String>) -> Result<Option<T>> {
        let v = match self.raw(key) {
            None => return Ok(None),
            Some(Value::String(s)) => Val::Text(s.clone()),
            Some(Value::Number(n)) => n.as_i64().map(Val::Int).unwrap_or(Val::Real(n.as_f64().unwrap_or(f64::NAN))),
            Some(v) => bail!("option \"{key}\" must not be {}", json_kind(v)),
        };
        parse(&v).map(Some).map_err(|e| Error::bad(format!("option \"{key}\": {e}")))
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The first characters of a long text, for messages.
pub fn clip(s: &str) -> String {
    if s.chars().count() <= 60 {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(60).collect::<String>())
    }
}

/// A required name (id, queue, group, step, worker): non-empty text up to MAX_NAME bytes.
pub fn name(what: &str, v: &Val) -> Result<String> {
    match v {
        Val::Text(s) if s.is_empty() => bail!("{what} must not be empty"),
        Val::Text(s) if s.len() > MAX_NAME => bail!("{what} is longer than {MAX_NAME} bytes"),
        Val::Text(s) if s.contains('\0') => bail!("{what} must not contain a NUL character"),
        Val::Text(s) => Ok(s.clone()),
        Val::Blob(_) => bail!("{what} must be valid UTF-8 text, not a blob"),
        other => bail!("{what} must be text, not {}", other.kind()),
    }
}

/// A required integer argument within bounds.
pub fn int(what: &str, v: &Val, lo: i64, hi: i64) -> Result<i64> {
    match v {
        // A whole number sent as a real (JavaScript drivers send every number so).
        Val::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => int(what, &Val::Int(*f as i64), lo, hi),
        Val::Int(i) if *i >= lo && *i <= hi => Ok(*i),
        Val::Int(i) => bail!("{what} must be from {lo} to {hi}, not {i}"),
        Val::Text(s) => match s.trim().parse::<i64>() {
            Ok(i) => int(what, &Val::Int(i), lo, hi),
            Err(_) => bail!("{what} must be an integer, not '{}'", clip(s)),
        },
        other => bail!("{what} must be an integer, not {}", other.kind()),
    }
}

/// A value kept as data (payload, result, progress, step answer): text or a number.
pub fn data(what: &str, v: &Val, allow_null: bool) -> Result<Val> {
    match v {
        Val::Null if allow_null => Ok(Val::Null),
        Val::Null => bail!("{what} must not be NULL (use '{{}}' for an empty payload)"),
        Val::Blob(_) => bail!("{what} must be text or a number, not a blob"),
        v => Ok(v.clone()),
    }
}
