//! Object keys: what a valid key is, and how one is read out of a request path.

use percent_encoding::percent_decode_str;

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

/// Percent-decodes the raw (still encoded) key part of a request path and validates it.
pub fn from_path(raw: &str) -> Result<String, KeyError> {
    let bytes: Vec<u8> = percent_decode_str(raw).collect();
    let key = String::from_utf8(bytes).map_err(|_| KeyError::NotUtf8)?;
    validate(&key)?;
    Ok(key)
}

pub use rasa_openapi::key_to_path as to_path;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The pattern in the OpenAPI document accepts exactly the keys [`validate`] accepts
        /// (length aside, which the document states separately).
        #[test]
        fn the_documented_key_pattern_is_the_servers_rule(s in "[a./é𝄞\\x00\\x1f\\x7f\\x85\\x9f\\xa0]{1,10}") {
            let pattern = regex::Regex::new(KEY_PATTERN).unwrap();
            prop_assert_eq!(pattern.is_match(&s), validate(&s).is_ok(), "{:?}", s);
        }
    }

    #[test]
    fn table() {
        let cases: &[(&str, Result<&str, KeyError>)] = &[
            ("photos/cat.jpg", Ok("photos/cat.jpg")),
            ("a%2Fb", Ok("a/b")),
            ("caf%C3%A9", Ok("café")),
            ("a//b", Ok("a//b")),
            ("...", Ok("...")),
            ("", Err(KeyError::Empty)),
            ("a/./b", Err(KeyError::DotSegment)),
            ("..", Err(KeyError::DotSegment)),
            ("a/%2E%2E", Err(KeyError::DotSegment)),
            ("a%00b", Err(KeyError::ControlCharacter(0))),
            ("a%0Ab", Err(KeyError::ControlCharacter(10))),
            ("a%C2%85", Err(KeyError::ControlCharacter(0x85))),
            ("%FF", Err(KeyError::NotUtf8)),
        ];
        for (raw, want) in cases {
            assert_eq!(
                from_path(raw).as_deref().map_err(Clone::clone),
                want.clone(),
                "{raw}"
            );
        }
        assert_eq!(from_path(&"k".repeat(1024)).unwrap().len(), 1024);
        assert_eq!(from_path(&"k".repeat(1025)), Err(KeyError::TooLong(1025)));
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_paths(raw in ".{0,300}") {
            let _ = from_path(&raw);
        }

        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let raw: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
            if let Ok(key) = from_path(&raw) {
                prop_assert_eq!(key.as_bytes(), &bytes[..]);
            }
        }

        #[test]
        fn encoding_round_trips_every_valid_key(key in "[^\\p{Cc}]{1,200}") {
            prop_assume!(validate(&key).is_ok());
            prop_assert_eq!(from_path(&to_path(&key)).unwrap(), key);
        }
    }
}
