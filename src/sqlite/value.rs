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
}

/// What a scalar function returns.
pub enum Out {
    Null,
    Int(i64),
    Text(String),
    Val(Val),
}
