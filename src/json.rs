//! JSON out: the objects tq_get and tq_schedule_get return, with every stored value (a
//! payload, a result, progress, meta) written as it is stored, byte for byte, when it is
//! JSON text: re-encoding it would round big numbers, drop duplicate keys and refuse deep
//! nesting, so what a tool reads back and writes again would differ from what was stored.

use crate::sqlite::Val;

/// The deepest stored JSON that is embedded as JSON. JSON readers stop near 1000 levels
/// (SQLite's json functions at 1000 since 3.45, Python's json module near its recursion
/// limit), and tq_get's object adds one: deeper JSON text is shown as text, a JSON string
/// holding it exactly, so that every reader can still read the whole object.
const MAX_DEPTH: usize = 500;

/// How `embed` shows a stored value, for tq_get's `payload_type`: `json` (JSON text, as
/// stored), `text` (other text, or JSON nested past MAX_DEPTH: a JSON string holding it),
/// `integer` or `real` (numbers; NULL and blobs as null).
pub fn kind(v: &Val) -> &'static str {
    match v {
        Val::Text(s) if is_json(s) => "json",
        Val::Text(_) => "text",
        Val::Int(_) => "integer",
        Val::Real(_) => "real",
        Val::Null => "null",
        // text that is not UTF-8 cannot be embedded as text: it is shown as a blob is
        Val::Blob(_) | Val::BadText(_) => "blob",
    }
}

/// `v` as JSON text: JSON text as stored, other text as a JSON string, numbers as numbers.
pub fn embed(v: &Val) -> String {
    match v {
        Val::Text(s) if is_json(s) => s.clone(),
        Val::Text(s) => serde_json::Value::from(s.as_str()).to_string(),
        Val::Int(i) => i.to_string(),
        Val::Real(f) => serde_json::Number::from_f64(*f).map_or("null".into(), |n| n.to_string()),
        Val::Null | Val::Blob(_) | Val::BadText(_) => "null".into(),
    }
}

/// The text of a JSON object: the members of `fields` (an object) as serde_json writes
/// them, and `stored` as `embed` writes them, in serde_json's key order.
pub fn object(fields: serde_json::Value, stored: &[(&str, &Val)]) -> String {
    let mut members: Vec<(String, String)> = match fields {
        serde_json::Value::Object(map) => map.into_iter().map(|(k, v)| (k, v.to_string())).collect(),
        _ => vec![],
    };
    members.extend(stored.iter().map(|(k, v)| ((*k).to_string(), embed(v))));
    members.sort_by(|a, b| a.0.cmp(&b.0));
    let body: Vec<String> = members.into_iter().map(|(k, v)| format!("{}:{v}", serde_json::Value::from(k))).collect();
    format!("{{{}}}", body.join(","))
}

/// Is `s` exactly one JSON value (RFC 8259) nested at most MAX_DEPTH deep? Iterative, with
/// an explicit stack, so that no input can exhaust the C stack (ERR-02).
pub fn is_json(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let mut open: Vec<u8> = vec![]; // b'{' or b'[' for each container entered
    loop {
        // A value starts at i (after spaces).
        ws(b, &mut i);
        match b.get(i) {
            Some(b'{' | b'[') if open.len() == MAX_DEPTH => return false,
            Some(b'{') => {
                i += 1;
                ws(b, &mut i);
                if b.get(i) == Some(&b'}') {
                    i += 1;
                } else {
                    if !key(b, &mut i) {
                        return false;
                    }
                    open.push(b'{');
                    continue;
                }
            }
            Some(b'[') => {
                i += 1;
                ws(b, &mut i);
                if b.get(i) == Some(&b']') {
                    i += 1;
                } else {
                    open.push(b'[');
                    continue;
                }
            }
            Some(b'"') => {
                if !string(b, &mut i) {
                    return false;
                }
            }
            Some(b'-' | b'0'..=b'9') => {
                if !number(b, &mut i) {
                    return false;
                }
            }
            _ => {
                let word = ["true", "false", "null"].into_iter().find(|w| b[i..].starts_with(w.as_bytes()));
                let Some(word) = word else { return false };
                i += word.len();
            }
        }
        // After a value: close what ends here, then expect the next member or the end.
        loop {
            ws(b, &mut i);
            let Some(&inside) = open.last() else { return i == b.len() };
            match b.get(i) {
                Some(b',') => {
                    i += 1;
                    if inside == b'{' && !key(b, &mut i) {
                        return false;
                    }
                    break;
                }
                Some(b'}') if inside == b'{' => {
                    i += 1;
                    open.pop();
                }
                Some(b']') if inside == b'[' => {
                    i += 1;
                    open.pop();
                }
                _ => return false,
            }
        }
    }
}

fn ws(b: &[u8], i: &mut usize) {
    while matches!(b.get(*i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        *i += 1;
    }
}

/// A member's key and its colon.
fn key(b: &[u8], i: &mut usize) -> bool {
    ws(b, i);
    if b.get(*i) != Some(&b'"') || !string(b, i) {
        return false;
    }
    ws(b, i);
    if b.get(*i) != Some(&b':') {
        return false;
    }
    *i += 1;
    true
}

/// A string, from its opening quote to after its closing one.
fn string(b: &[u8], i: &mut usize) -> bool {
    *i += 1;
    while let Some(&c) = b.get(*i) {
        *i += 1;
        match c {
            b'"' => return true,
            b'\\' => match b.get(*i) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => *i += 1,
                Some(b'u') if b.len() > *i + 4 && b[*i + 1..*i + 5].iter().all(u8::is_ascii_hexdigit) => *i += 5,
                _ => return false,
            },
            c if c < 0x20 => return false,
            _ => {}
        }
    }
    false
}

fn number(b: &[u8], i: &mut usize) -> bool {
    let digits = |i: &mut usize| {
        let from = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > from
    };
    if b.get(*i) == Some(&b'-') {
        *i += 1;
    }
    match b.get(*i) {
        Some(b'0') => *i += 1,
        Some(b'1'..=b'9') => {
            digits(i);
        }
        _ => return false,
    }
    if b.get(*i) == Some(&b'.') {
        *i += 1;
        if !digits(i) {
            return false;
        }
    }
    if matches!(b.get(*i), Some(b'e' | b'E')) {
        *i += 1;
        if matches!(b.get(*i), Some(b'+' | b'-')) {
            *i += 1;
        }
        if !digits(i) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_as_rfc_8259_reads_it() {
        for ok in [
            "0",
            "-0",
            "12345678901234567890123",
            "1.5e-3",
            "-2E+10",
            "\"\"",
            "\"a\\u00e9\\n\"",
            "true",
            "null",
            "[]",
            "{}",
            " [1, [2, {\"a\": [3]}], \"x\"] ",
            "{\"a\":1,\"a\":2}",
            "{\"k\" : {\"k\" : null}}",
        ] {
            assert!(is_json(ok), "{ok}");
            assert!(serde_json::from_str::<serde_json::Value>(ok).is_ok(), "serde agrees on {ok}");
        }
        for bad in [
            "",
            " ",
            "hello",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "[1,]",
            "[,1]",
            "{\"a\"}",
            "{\"a\":}",
            "{1:2}",
            "{\"a\":1,}",
            "[1 2]",
            "\"unterminated",
            "\"bad \\x escape\"",
            "\"tab\there\"",
            "NaN",
            "Infinity",
            "tru",
            "nulls",
            "[1]]",
            "{}{}",
            "[",
            "{\"a\":1",
            "\"\\u12\"",
        ] {
            assert!(!is_json(bad), "{bad}");
        }
    }

    #[test]
    fn depth_to_500_is_json_and_any_depth_is_no_danger() {
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert!(is_json(&nested(128)) && is_json(&nested(MAX_DEPTH)));
        assert!(!is_json(&nested(MAX_DEPTH + 1)));
        assert!(is_json(&("{\"a\":".repeat(MAX_DEPTH) + "1" + &"}".repeat(MAX_DEPTH))));
        assert!(!is_json(&nested(100_000)));
        assert!(!is_json(&"[".repeat(100_000)));
        assert_eq!(kind(&Val::Text(nested(600))), "text");
        assert_eq!(embed(&Val::Text(nested(600))), serde_json::Value::from(nested(600)).to_string());
    }

    #[test]
    fn objects_embed_stored_values_as_stored() {
        let payload = Val::Text("{\"n\": 12345678901234567890123, \"n\": 2}".into());
        let text = Val::Text("hello".into());
        let out = object(serde_json::json!({"id": "a", "zz": null}), &[("payload", &payload), ("result", &text)]);
        assert_eq!(
            out,
            "{\"id\":\"a\",\"payload\":{\"n\": 12345678901234567890123, \"n\": 2},\"result\":\"hello\",\"zz\":null}"
        );
        assert_eq!(embed(&Val::Int(42)), "42");
        assert_eq!(embed(&Val::Text("42".into())), "42");
        assert_eq!((kind(&Val::Int(42)), kind(&Val::Text("42".into()))), ("integer", "json"));
        assert_eq!(embed(&Val::Real(f64::NAN)), "null");
    }
}
