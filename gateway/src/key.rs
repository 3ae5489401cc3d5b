//! Object keys: how one is read out of a request path (what a valid key is lives in
//! [`rasa_openapi::key`], shared with the SDK, which refuses the same keys before sending);
//! and what a valid namespace name is.

use percent_encoding::percent_decode_str;

pub use rasa_openapi::key::{validate, KeyError, KEY_PATTERN, MAX_KEY_LEN};

/// Percent-decodes the raw (still encoded) key part of a request path and validates it.
pub fn from_path(raw: &str) -> Result<String, KeyError> {
    let bytes: Vec<u8> = percent_decode_str(raw).collect();
    let key = String::from_utf8(bytes).map_err(|_| KeyError::NotUtf8)?;
    validate(&key)?;
    Ok(key)
}

pub use rasa_openapi::key_to_path as to_path;

pub use rasa_openapi::key::{check_namespace, NAMESPACE_PATTERN};

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
