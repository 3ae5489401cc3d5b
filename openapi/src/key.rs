//! What a valid object key is: one rule for the gateway, which refuses other keys with
//! `400 invalid_key`, and for the SDK, which refuses them the same way before sending (an
//! HTTP client's URL layer would otherwise rewrite `a/../b` into `b`).

/// Longest key accepted, in bytes of UTF-8 (the same limit as S3).
pub const MAX_KEY_LEN: usize = 1024;

/// A key as a regular expression (ECMA-262 and Rust `regex` alike), for the OpenAPI
/// document: no control character (U+0000–U+001F, U+007F–U+009F), and no `.` or `..`
/// segment — each `/`-separated segment is empty, holds a character other than `.`, or is
/// three or more dots. [`validate`] is the rule; a test checks this pattern agrees with it.
/// The length (1 to [`MAX_KEY_LEN`] bytes of UTF-8) is not in the pattern.
pub const KEY_PATTERN: &str = concat!(
    r"^(?:[^/\x00-\x1f\x7f-\x9f]*[^/.\x00-\x1f\x7f-\x9f][^/\x00-\x1f\x7f-\x9f]*|\.{3,})?",
    r"(?:/(?:[^/\x00-\x1f\x7f-\x9f]*[^/.\x00-\x1f\x7f-\x9f][^/\x00-\x1f\x7f-\x9f]*|\.{3,})?)*$"
);

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Nothing after the route prefix.
    #[error("the key is empty")]
    Empty,
    /// Longer than [`MAX_KEY_LEN`] bytes.
    #[error("the key is {0} bytes long; the limit is {MAX_KEY_LEN}")]
    TooLong(usize),
    /// Percent-decoding produced bytes that are not UTF-8.
    #[error("the key is not valid UTF-8 once percent-decoded")]
    NotUtf8,
    /// A control character (U+0000–U+001F, U+007F–U+009F).
    #[error("the key contains a control character (U+{0:04X})")]
    ControlCharacter(u32),
    /// A `.` or `..` path segment, which proxies and clients would rewrite.
    #[error("the key contains a '.' or '..' segment")]
    DotSegment,
}

/// Checks a decoded key.
pub fn validate(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong(key.len()));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(KeyError::ControlCharacter(c as u32));
    }
    if key.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(KeyError::DotSegment);
    }
    Ok(())
}

/// The pattern of a namespace name ([`check_namespace`]).
pub const NAMESPACE_PATTERN: &str = "^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$";

/// A namespace name that is not one (see [`check_namespace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadNamespace(pub String);

impl std::fmt::Display for BadNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "namespace name {:?} must be 3 to 63 characters of a-z, 0-9, '-' and '.', starting and ending with a letter or digit, without '..' and not like an IP address",
            self.0
        )
    }
}

impl std::error::Error for BadNamespace {}

/// A namespace name, usable as an S3 bucket name too: 3 to 63 characters of `a-z`, `0-9`,
/// `-` and `.`, starting and ending with a letter or digit, no `..`, `.-` or `-.` (S3's rules, less
/// names that look like IP addresses, which are refused too). The gateway and the SDK
/// check names with this.
pub fn check_namespace(name: &str) -> Result<(), BadNamespace> {
    let ip_like = name.split('.').count() == 4
        && name
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.'])
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && !ip_like;
    if ok {
        Ok(())
    } else {
        Err(BadNamespace(name.to_owned()))
    }
}
