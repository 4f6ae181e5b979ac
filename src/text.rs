//! How messages show a user's text: cut to a bounded length, and quoted.

/// The first characters of a long text, for messages.
pub fn clip(s: &str) -> String {
    if s.chars().count() <= 60 {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(60).collect::<String>())
    }
}

/// A text value as messages show it: quoted, and cut to a bounded length.
pub fn quote(s: &str) -> String {
    format!("'{}'", clip(s))
}
