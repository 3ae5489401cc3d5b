//! The credentials subcommands, for both kinds of file: `rasa-gateway token new|list|revoke`
//! (bearer tokens, stored as hashes) and `rasa-gateway s3-key new|list|revoke` (S3 access
//! keys, whose secrets SigV4 needs in the clear). Both files are written 0600 through
//! [`crate::credfile`]; both are read again by a running gateway on SIGHUP.

use std::io::Write;
use std::path::Path;

use crate::config::TokenCommand;
use crate::s3::args::S3KeyCommand;
use crate::tokens::{self, Scope, TokenSet};

/// Runs a `token` subcommand.
pub fn token(cmd: &TokenCommand) -> Result<(), String> {
    match cmd {
        TokenCommand::New { name, scopes, file } => new_token(name, &scopes.0, file),
        TokenCommand::List { file } => list_tokens(file),
        TokenCommand::Revoke { name, file } => revoke_token(name, file),
    }
}

/// Runs an `s3-key` subcommand.
pub fn s3_key(cmd: &S3KeyCommand) -> Result<(), String> {
    use crate::s3::keys;
    match cmd {
        S3KeyCommand::New { name, scopes, file } => keys::new_key(name, &scopes.0, file),
        S3KeyCommand::List { file } => keys::list_keys(file),
        S3KeyCommand::Revoke { name, file } => keys::revoke_key(name, file),
    }
}

/// `token new`: appends the token's line to `file` (created 0600 if missing) and prints
/// the secret, once, on stdout.
fn new_token(name: &str, scopes: &[Scope], file: &Path) -> Result<(), String> {
    let secret = tokens::new_secret();
    let line = tokens::file_line(name, scopes, &secret)?;
    if file.exists() {
        // Refuse to append to a file the gateway would refuse, or a duplicate name.
        let existing = TokenSet::load(file)?;
        if existing.get(name).is_some() {
            return Err(format!(
                "{} already has a token named '{name}'",
                file.display()
            ));
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
fn list_tokens(file: &Path) -> Result<(), String> {
    let set = TokenSet::load(file)?;
    let mut out = std::io::stdout().lock();
    for t in set.iter() {
        let scopes: Vec<&str> = t.scopes.iter().map(|s| s.as_str()).collect();
        writeln!(out, "{}\t{}", t.name, scopes.join(",")).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `token revoke`: rewrites the file without the token.
fn revoke_token(name: &str, file: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let left = crate::credfile::without_name(&text, name, "token")
        .map_err(|e| format!("{}: {e}", file.display()))?;
    crate::credfile::rewrite(file, &left)?;
    eprintln!(
        "rasa-gateway: removed token '{name}' from {}; send SIGHUP to a running gateway (kill -HUP <pid>) to put it in force",
        file.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoking_removes_exactly_that_line() {
        let a = tokens::file_line("a", &[Scope::Read], "1").unwrap();
        let ab = tokens::file_line("ab", &[Scope::Write], "2").unwrap();
        let text = format!("# tokens\n{a}\n{ab} # uploader\n");
        let left = crate::credfile::without_name(&text, "a", "token").unwrap();
        assert_eq!(left, format!("# tokens\n{ab} # uploader\n"));
        assert!(TokenSet::parse(&left).unwrap().get("ab").is_some());
        assert!(crate::credfile::without_name(&text, "zz", "token")
            .unwrap_err()
            .contains("no token named 'zz'"));
    }
}
