//! Values in and out of tinyq's functions, owned and safe.

/// A SQL value, owned.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    /// Text whose bytes are not valid UTF-8: refused wherever text is read, and named so.
    BadText(Vec<u8>),
}

impl Val {
    pub fn is_null(&self) -> bool {
        matches!(self, Val::Null)
    }

    /// The name of this value's type, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Val::Null => "NULL",
            Val::Int(_) => "an integer",
            Val::Real(_) => "a real",
            Val::Text(_) => "text",
            Val::Blob(_) => "a blob",
            Val::BadText(_) => "text that is not valid UTF-8",
        }
    }

    /// This value as JSON: text that parses as JSON is embedded, other text is a string.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Val::Null | Val::Blob(_) | Val::BadText(_) => serde_json::Value::Null,
            Val::Int(i) => (*i).into(),
            Val::Real(f) => serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into),
            Val::Text(s) => serde_json::from_str(s).unwrap_or_else(|_| s.clone().into()),
        }
    }
}

/// What a scalar function returns.
pub enum Out {
    Null,
    Int(i64),
    Text(String),
    Val(Val),
}
