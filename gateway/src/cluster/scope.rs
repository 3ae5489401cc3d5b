//! A key as the near-copy and replica protocols name it, between members and in their
//! grants, revocations and replicas: a key of the default namespace as it is; a key of
//! another namespace as the namespace's name, [`SEP`] and the key. No key and no
//! namespace name may hold a control character, so the two never meet: `train`'s `a` and
//! the default namespace's `a` are told apart, while placement (by the key alone) is the
//! same for both.

use std::borrow::Cow;

/// Between a namespace's name and its key (U+001F, a control character).
pub const SEP: char = '\u{1f}';

/// How the protocols name `key` of namespace `ns` (`None`: the default one).
pub fn scoped<'k>(ns: Option<&str>, key: &'k str) -> Cow<'k, str> {
    match ns {
        None => Cow::Borrowed(key),
        Some(ns) => Cow::Owned(format!("{ns}{SEP}{key}")),
    }
}

/// The namespace (`None`: the default one) and the key a [`scoped`] name names.
pub fn split(name: &str) -> (Option<&str>, &str) {
    match name.split_once(SEP) {
        Some((ns, key)) => (Some(ns), key),
        None => (None, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespaces_key_is_named_apart_from_the_default_ones_and_split_back() {
        assert_eq!(scoped(None, "a/b"), "a/b");
        let named = scoped(Some("train"), "a/b");
        assert_ne!(named, "a/b");
        assert_ne!(named, scoped(Some("web"), "a/b"));
        assert_eq!(split(&named), (Some("train"), "a/b"));
        assert_eq!(split("a/b"), (None, "a/b"));
        // Keys may hold what namespaces file lines and URLs hold, but no control character.
        assert!(crate::key::validate(&named).is_err());
    }
}
