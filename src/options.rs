//! The optional JSON `options` argument, and checks on plain arguments. Every message
//! names the argument or key; the function wrapper adds the function's name.

use std::collections::HashMap;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::sqlite::{Error, Result, Val};
use crate::time;

/// Longest id, queue name, group key or step name, in bytes.
pub const MAX_NAME: usize = 1000;

pub struct Options {
    map: Map<String, Value>,
    /// The options' text as given: `object` keeps its value's text from it (a Value would
    /// round big numbers and drop a key given twice).
    given: Option<String>,
}

/// A time given as a time, or as a duration from now.
pub enum Moment {
    At(i64),
    After(i64),
}

impl Options {
    /// Parses `options` (NULL or absent means none) and rejects keys outside `allowed`.
    pub fn parse(v: Option<&Val>, allowed: &[&str]) -> Result<Options> {
        let (map, given) = match v {
            None | Some(Val::Null) => (Map::new(), None),
            Some(Val::Text(s)) => match serde_json::from_str::<Keys>(s) {
                Ok(Keys { twice: Some(k), .. }) => bail!("options give the key \"{}\" twice", clip(&k)),
                // The text is kept only where `object` may read a value from it: most
                // options (every add without meta) have no object and copy nothing.
                Ok(Keys { map, .. }) => {
                    let given = map.values().any(Value::is_object).then(|| s.clone());
                    (map, given)
                }
                // Valid JSON of another type is a data error; anything else says what is wrong.
                Err(e) if e.is_data() => bail!("options must be a JSON object, not {}", quote(s)),
                Err(e) => bail!("options are not valid JSON ({e}): {}", quote(s)),
            },
            Some(other) => bail!("options must be a JSON object, not {}", other.kind()),
        };
        if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            bail!("unknown option \"{}\" (known: {})", clip(k), allowed.join(", "));
        }
        Ok(Options { map, given })
    }

    /// Is the key given at all (a null value included)?
    pub fn present(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    fn raw(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
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
            Some(Value::Number(n)) if n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
                bail!("option \"{key}\" must be from {lo} to {hi}, not {n}")
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

    /// A JSON object (such as `meta`), kept as its JSON text as given.
    pub fn object(&self, key: &str) -> Result<Option<String>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(self.given_text(key).unwrap_or_else(|| v.to_string()))),
            Some(v) => {
                bail!("option \"{key}\" must be a JSON object like {{\"tenant\": \"acme\"}}, not {}", json_kind(v))
            }
        }
    }

    /// The text of `key`'s value as the options gave it (parsed again, only for this key).
    fn given_text(&self, key: &str) -> Option<String> {
        let given = self.given.as_deref()?;
        let values: HashMap<&str, &RawValue> = serde_json::from_str(given).ok()?;
        values.get(key).map(|v| v.get().to_string())
    }

    /// A JSON array of names (such as `after`'s job ids), each checked as `name` checks one.
    pub fn list(&self, key: &str) -> Result<Option<Vec<String>>> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => name(&format!("option \"{key}\": an id"), &Val::Text(s.clone())),
                    v => bail!("option \"{key}\" must hold ids as text, not {}", json_kind(v)),
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => bail!("option \"{key}\" must be an array of job ids like [\"a\", \"b\"], not {}", json_kind(v)),
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
        // Text needs a unit here: a bare number could be meant as a time or as ms from now.
        let has_unit = s.trim().ends_with(|c: char| c.is_ascii_alphabetic());
        match time::parse_duration(&text) {
            Ok(d) if has_unit => Ok(Some(Moment::After(d))),
            _ => bail!(
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

/// A JSON object read key by key, so that a key given twice is seen (serde_json keeps the last).
struct Keys {
    map: Map<String, Value>,
    twice: Option<String>,
}

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Keys, D::Error> {
        struct KeysVisitor;
        impl<'de> Visitor<'de> for KeysVisitor {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> std::result::Result<Keys, A::Error> {
                let mut keys = Keys { map: Map::new(), twice: None };
                while let Some((k, v)) = a.next_entry::<String, Value>()? {
                    if keys.map.insert(k.clone(), v).is_some() && keys.twice.is_none() {
                        keys.twice = Some(k);
                    }
                }
                Ok(keys)
            }
        }
        d.deserialize_map(KeysVisitor)
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

pub use crate::text::{clip, quote};

/// The step a woken job finds the payload under is this and the signal's name (workflows/signals.rs).
pub const STEP_PREFIX: &str = "signal:";

/// A required name (id, queue, group, step, worker): non-empty text up to MAX_NAME bytes.
pub fn name(what: &str, v: &Val) -> Result<String> {
    name_of_most(what, v, MAX_NAME)
}

/// A step's name: a name, or `signal:` and a signal's name (workflows/signals.rs), which may be a
/// name of MAX_NAME bytes itself.
pub fn step_name(what: &str, v: &Val) -> Result<String> {
    let most = match v {
        Val::Text(s) if s.starts_with(STEP_PREFIX) => MAX_NAME + STEP_PREFIX.len(),
        _ => MAX_NAME,
    };
    name_of_most(what, v, most)
}

fn name_of_most(what: &str, v: &Val, most: usize) -> Result<String> {
    match v {
        Val::Text(s) if s.is_empty() => bail!("{what} must not be empty"),
        Val::Text(s) if s.len() > most => bail!("{what} is longer than {most} bytes"),
        Val::Text(s) if s.contains('\0') => bail!("{what} must not contain a NUL character"),
        Val::Text(s) => Ok(s.clone()),
        Val::Blob(_) => bail!("{what} must be valid UTF-8 text, not a blob"),
        Val::BadText(_) => bail!("{what} must be valid UTF-8 text: its bytes are not"),
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
            Err(_) if s.trim().parse::<i128>().is_ok() => {
                bail!("{what} must be from {lo} to {hi}, not {}", clip(s.trim()))
            }
            Err(_) => bail!("{what} must be an integer, not {}", quote(s)),
        },
        Val::Real(f) if f.fract() == 0.0 => bail!("{what} must be from {lo} to {hi}, not {f}"),
        other => bail!("{what} must be an integer, not {}", other.kind()),
    }
}

/// A value kept as data (payload, result, progress, step answer): text or a number.
pub fn data(what: &str, v: &Val, allow_null: bool) -> Result<Val> {
    match v {
        Val::Null if allow_null => Ok(Val::Null),
        Val::Null => bail!("{what} must not be NULL (use '{{}}' for an empty payload)"),
        Val::Blob(_) => bail!("{what} must be text or a number, not a blob"),
        // JSON has no Infinity: it would be stored, then shown as null.
        Val::Real(f) if !f.is_finite() => bail!("{what} must be a finite number, not {f}"),
        Val::BadText(_) => bail!("{what} must be valid UTF-8 text: its bytes are not"),
        v => Ok(v.clone()),
    }
}
