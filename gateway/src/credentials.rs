//! The credentials subcommands, for both kinds of file: `rasa-gateway token new|list|revoke`
//! (bearer tokens, stored as hashes) and `rasa-gateway s3-key new|list|revoke` (S3 access
//! keys, whose secrets SigV4 needs in the clear). Both files are written 0600 through
//! [`crate::credfile`]; both are read again by a running gateway on SIGHUP.

use std::io::Write;
use std::path::Path;

use crate::config::TokenCommand;
use crate::credfile::FileError;
use crate::grants::Grants;
use crate::s3::args::S3KeyCommand;
use crate::s3::keys::{self, S3Key, S3Keys};
use crate::tokens::{self, TokenError, TokenSet};

/// Why a credentials subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file: unreadable, unwritable, or holding an error.
    #[error(transparent)]
    File(#[from] FileError),
    /// The new entry asked for.
    #[error(transparent)]
    Entry(#[from] TokenError),
    /// The listing could not be written.
    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] std::io::Error),
}

/// Runs a `token` subcommand.
pub fn token(cmd: &TokenCommand) -> Result<(), CredentialsError> {
    match cmd {
        TokenCommand::New { name, scopes, file } => new_token(name, scopes, file),
        TokenCommand::List { file } => list_tokens(file),
        TokenCommand::Revoke { name, file } => revoke(file, name, "token", |_| Ok(())),
    }
}

/// Runs an `s3-key` subcommand.
pub fn s3_key(cmd: &S3KeyCommand) -> Result<(), CredentialsError> {
    match cmd {
        S3KeyCommand::New { name, scopes, file } => new_s3_key(name, scopes, file),
        S3KeyCommand::List { file } => list_s3_keys(file),
        S3KeyCommand::Revoke { name, file } => {
            revoke(file, name, "S3 key", |left| keys::parse(left).map(drop))
        }
    }
}

/// `token new`: appends the token's line to `file` (created 0600 if missing) and prints
/// the secret, once, on stdout.
fn new_token(name: &str, scopes: &Grants, file: &Path) -> Result<(), CredentialsError> {
    let secret = tokens::new_secret();
    let line = tokens::file_line(name, scopes, &secret)?;
    if file.exists() {
        // Refuse to append to a file the gateway would refuse, or a duplicate name.
        let existing = TokenSet::load(file)?;
        if existing.get(name).is_some() {
            return Err(taken(file, "token", name));
        }
    }
    crate::credfile::append_line(file, &line)?;
    eprintln!(
        "rasa-gateway: added token '{name}' to {}; its secret (shown only now) follows",
        file.display()
    );
    println!("{secret}");
    Ok(())
}

/// `token list`: names and scopes, one token per line.
fn list_tokens(file: &Path) -> Result<(), CredentialsError> {
    let set = TokenSet::load(file)?;
    let mut out = std::io::stdout().lock();
    for t in set.iter() {
        writeln!(out, "{}\t{}", t.name, t.scopes).map_err(CredentialsError::Stdout)?;
    }
    Ok(())
}

/// `s3-key new`: appends a new key's line to `file` (created 0600 if missing) and prints
/// its id and secret, once, on stdout.
fn new_s3_key(name: &str, scopes: &Grants, file: &Path) -> Result<(), CredentialsError> {
    if scopes.is_empty() {
        return Err(TokenError::NoScope("key").into());
    }
    tokens::check_name(name)?; // the same rules for names
    if file.exists() {
        let existing = S3Keys::read(file)?;
        if existing.values().any(|k| k.name == name) {
            return Err(taken(file, "key", name));
        }
    }
    let (id, secret) = (keys::new_key_id(), keys::new_secret());
    let line = format!("{name} {scopes} {id} {secret}");
    crate::credfile::append_line(file, &line)?;
    eprintln!(
        "rasa-gateway: added S3 key '{name}' to {}; its access key id and secret (shown only now) follow",
        file.display()
    );
    println!("{id} {secret}");
    Ok(())
}

/// `s3-key list`: name, scopes and access key id of each key (never the secret), one per
/// line, by name.
fn list_s3_keys(file: &Path) -> Result<(), CredentialsError> {
    let keys = S3Keys::read(file)?;
    let mut keys: Vec<&S3Key> = keys.values().collect();
    keys.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = std::io::stdout().lock();
    for k in keys {
        writeln!(out, "{}\t{}\t{}", k.name, k.scopes, k.id).map_err(CredentialsError::Stdout)?;
    }
    Ok(())
}

/// The error for a `what` named `name` that `file` has already.
fn taken(file: &Path, what: &'static str, name: &str) -> CredentialsError {
    CredentialsError::File(FileError::NameTaken {
        path: file.to_owned(),
        what,
        name: name.to_owned(),
    })
}

/// `token revoke` and `s3-key revoke`: rewrites `file` without the `what` named `name`,
/// once `check` accepts what is left; a running gateway drops it on SIGHUP.
fn revoke(
    file: &Path,
    name: &str,
    what: &'static str,
    check: impl Fn(&str) -> Result<(), FileError>,
) -> Result<(), CredentialsError> {
    let text = crate::credfile::read(file)?;
    let left = crate::credfile::without_name(&text, name, what).map_err(|e| e.in_file("", file))?;
    check(&left).map_err(|e| e.in_file("", file))?;
    crate::credfile::rewrite(file, &left)?;
    eprintln!(
        "rasa-gateway: removed {what} '{name}' from {}; send SIGHUP to a running gateway (kill -HUP <pid>) to put it in force",
        file.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoking_removes_exactly_that_line() {
        let a = tokens::file_line("a", &"read".parse().unwrap(), "1").unwrap();
        let ab = tokens::file_line("ab", &"write".parse().unwrap(), "2").unwrap();
        let text = format!("# tokens\n{a}\n{ab} # uploader\n");
        let left = crate::credfile::without_name(&text, "a", "token").unwrap();
        assert_eq!(left, format!("# tokens\n{ab} # uploader\n"));
        assert!(TokenSet::parse(&left).unwrap().get("ab").is_some());
        assert!(crate::credfile::without_name(&text, "zz", "token")
            .unwrap_err()
            .to_string()
            .contains("no token named 'zz'"));
    }
}
