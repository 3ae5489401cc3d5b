//! Bearer tokens with scopes, loaded from a token file that holds only hashes.
//!
//! The token file (`--token-file`) has one token per line: a name, its scopes, and the
//! SHA-256 of its secret. Blank lines and `#` comments are ignored.
//!
//! ```text
//! # name      scopes        sha256 of the secret
//! uploader    read,write    sha256:5f1c…(64 hex digits)
//! prometheus  admin         sha256:9a07…
//! trainer     ml:read       sha256:0c4e…
//! ```
//!
//! Scopes are for every namespace or, as `NAMESPACE:SCOPE`, for one ([`crate::grants`]).
//!
//! `rasa-gateway token new NAME --scopes read,write --file FILE` makes a secret, appends
//! its line to the file and prints the secret once. Secrets are 256 random bits, so a
//! plain SHA-256 is enough to store them (a slow password hash protects guessable
//! secrets, which these are not). A presented secret is hashed and compared with every
//! stored hash in constant time; the secret itself is never stored or logged.

use std::path::Path;

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::credfile::FileError;
use crate::grants::{GrantError, Grants};

/// Prefix of every secret the gateway makes, so secret scanners can recognise them.
pub const SECRET_PREFIX: &str = "rasa_";

pub use crate::grants::Scope;

/// One token: who it is and what it may do. The secret is not here, only its hash.
#[derive(Clone, Debug)]
pub struct Token {
    /// The name logs and errors use for this token.
    pub name: String,
    /// Its scopes, each for every namespace or for one.
    pub scopes: Grants,
    hash: [u8; 32],
}

impl Token {
    /// Whether this token may act with `scope` gateway-wide (`admin` may do everything).
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.allows(scope)
    }
}

/// What is wrong with a token's entry (a line of the token file) or a new token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// A name outside the allowed characters or length.
    #[error("token name '{0}' must be 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'")]
    Name(String),
    /// Scopes that do not parse.
    #[error(transparent)]
    Grants(#[from] GrantError),
    /// No scope for a new token or key.
    #[error("a {0} needs at least one scope")]
    NoScope(&'static str),
    /// The hash field does not start `sha256:`.
    #[error("the third field must be 'sha256:' and 64 hex digits (the hash of the secret, never the secret)")]
    HashPrefix,
    /// The hash field's digits are not 64 hex digits.
    #[error("the hash must be 'sha256:' followed by 64 hex digits")]
    HashDigits,
    /// A second token of the same name.
    #[error("the name '{0}' is used twice")]
    NameTwice(String),
    /// A second token with the same secret.
    #[error("the same secret hash appears twice")]
    SecretTwice,
    /// A file with no token.
    #[error("no tokens (an empty token file would lock every client out)")]
    Empty,
}

/// The tokens the gateway accepts.
#[derive(Clone, Debug, Default)]
pub struct TokenSet {
    tokens: Vec<Token>,
}

impl TokenSet {
    /// Reads and parses a token file; the error names the file and line.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        let text = crate::credfile::read(path)?;
        Self::parse(&text).map_err(|e| e.in_file("token file", path))
    }

    /// Parses the token file format (see the module documentation).
    pub fn parse(text: &str) -> Result<Self, FileError> {
        let mut tokens: Vec<Token> = Vec::new();
        for entry in crate::credfile::entries::<3>(text, "NAME SCOPES sha256:HEX") {
            let (n, [name, scopes, hash]) = entry?;
            let at = |why: TokenError| FileError::line(n, why);
            check_name(name).map_err(at)?;
            let scopes: Grants = scopes.parse().map_err(|e| at(TokenError::Grants(e)))?;
            let hash = parse_hash(hash).map_err(at)?;
            if tokens.iter().any(|t| t.name == name) {
                return Err(at(TokenError::NameTwice(name.to_owned())));
            }
            if tokens.iter().any(|t| t.hash == hash) {
                return Err(at(TokenError::SecretTwice));
            }
            tokens.push(Token {
                name: name.to_owned(),
                scopes,
                hash,
            });
        }
        if tokens.is_empty() {
            return Err(FileError::Whole(Box::new(TokenError::Empty)));
        }
        Ok(Self { tokens })
    }

    /// The token named `name`.
    pub fn get(&self, name: &str) -> Option<&Token> {
        self.tokens.iter().find(|t| t.name == name)
    }

    /// The tokens, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Token> {
        self.tokens.iter()
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The token whose secret is `secret`, if any. Every stored hash is compared, in
    /// constant time, whatever matches.
    pub fn authenticate(&self, secret: &str) -> Option<&Token> {
        let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.hash.ct_eq(&presented)) {
                found = Some(t);
            }
        }
        found
    }
}

/// A token name: 1–64 of `A-Z a-z 0-9 . _ -`.
pub fn check_name(name: &str) -> Result<(), TokenError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(TokenError::Name(name.to_owned()))
    }
}

fn parse_hash(s: &str) -> Result<[u8; 32], TokenError> {
    let hex_digits = s.strip_prefix("sha256:").ok_or(TokenError::HashPrefix)?;
    let mut hash = [0u8; 32];
    hex::decode_to_slice(hex_digits, &mut hash).map_err(|_| TokenError::HashDigits)?;
    Ok(hash)
}

/// The tokens in force, and the file they came from: [`TokenFile::reload`] (on SIGHUP)
/// swaps in a new set without a restart, so a token can be added or revoked while the
/// gateway keeps its values. A file that fails to parse changes nothing.
#[derive(Debug)]
pub struct TokenFile {
    path: std::path::PathBuf,
    current: std::sync::RwLock<std::sync::Arc<TokenSet>>,
}

impl TokenFile {
    /// Loads `path` (warning when other users may read it).
    pub fn load(path: &Path) -> Result<Self, FileError> {
        crate::credfile::warn_if_loose(path);
        Ok(Self {
            current: std::sync::RwLock::new(std::sync::Arc::new(TokenSet::load(path)?)),
            path: path.to_owned(),
        })
    }

    /// The tokens in force now.
    pub fn current(&self) -> std::sync::Arc<TokenSet> {
        let guard = self.current.read().unwrap_or_else(|e| e.into_inner());
        std::sync::Arc::clone(&guard)
    }

    /// Reads the file again and, if it parses, puts its tokens in force; returns how many.
    /// On error the tokens in force stay.
    pub fn reload(&self) -> Result<usize, FileError> {
        let fresh = TokenSet::load(&self.path)?;
        let n = fresh.len();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(fresh);
        Ok(n)
    }
}

/// A new secret: the prefix and 256 random bits, base64url.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!(
        "{SECRET_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The token file line for a token named `name` with `scopes` and `secret`.
pub fn file_line(name: &str, scopes: &Grants, secret: &str) -> Result<String, TokenError> {
    check_name(name)?;
    if scopes.is_empty() {
        return Err(TokenError::NoScope("token"));
    }
    Ok(format!(
        "{name} {scopes} sha256:{}",
        hex::encode(Sha256::digest(secret.as_bytes()))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_round_trips_through_its_file_line() {
        let secret = new_secret();
        assert!(secret.starts_with(SECRET_PREFIX) && secret.len() == 5 + 43);
        let line = file_line(
            "ci",
            &Grants::everywhere(&[Scope::Read, Scope::Write]),
            &secret,
        )
        .unwrap();
        assert!(
            !line.contains(&secret[5..]),
            "the line must not hold the secret"
        );
        let set = TokenSet::parse(&format!("# comment\n\n{line}  # trailing\n")).unwrap();
        let t = set.authenticate(&secret).expect("the secret authenticates");
        assert_eq!(t.name, "ci");
        assert!(t.allows(Scope::Read) && t.allows(Scope::Write) && !t.allows(Scope::Admin));
        assert!(set.authenticate(&new_secret()).is_none());
        assert!(set.authenticate("").is_none());
    }

    #[test]
    fn a_reload_swaps_tokens_and_a_broken_file_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("rasa-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(
            &path,
            file_line("a", &Grants::everywhere(&[Scope::Read]), "first").unwrap(),
        )
        .unwrap();
        let file = TokenFile::load(&path).unwrap();
        assert!(file.current().authenticate("first").is_some());
        std::fs::write(
            &path,
            file_line("b", &Grants::everywhere(&[Scope::Read]), "second").unwrap(),
        )
        .unwrap();
        assert_eq!(file.reload().ok(), Some(1));
        assert!(
            file.current().authenticate("first").is_none(),
            "revoked by the reload"
        );
        assert!(file.current().authenticate("second").is_some());
        std::fs::write(&path, "garbage").unwrap();
        assert!(file.reload().is_err());
        assert!(
            file.current().authenticate("second").is_some(),
            "kept on a bad file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn admin_implies_every_scope() {
        let line = file_line("ops", &Grants::everywhere(&[Scope::Admin]), "s").unwrap();
        let set = TokenSet::parse(&line).unwrap();
        let t = set.authenticate("s").unwrap();
        assert!(t.allows(Scope::Read) && t.allows(Scope::Write) && t.allows(Scope::Admin));
    }

    #[test]
    fn bad_files_are_refused_with_the_line() {
        let good = file_line("a", &Grants::everywhere(&[Scope::Read]), "x").unwrap();
        let hash = good.split(' ').nth(2).unwrap();
        for (text, needle) in [
            ("", "no tokens"),
            ("a read", "line 1: expected"),
            (&format!("a read,fly {hash}"), "unknown scope 'fly'"),
            (&format!("a read {}", &hash[7..]), "sha256:"),
            ("a read sha256:abc", "64 hex"),
            (&format!("a/b read {hash}"), "token name"),
            (
                &format!("{good}\n{good}"),
                "line 2: the name 'a' is used twice",
            ),
            (
                &format!("{good}\nb write {hash}"),
                "line 2: the same secret hash",
            ),
        ] {
            let err = TokenSet::parse(text).unwrap_err();
            assert!(err.to_string().contains(needle), "{text:?}: {err}");
        }
    }
}
