//! How a member proves itself to etcd: TLS with etcd's certificate authority
//! (`--etcd-ca-file`), a client certificate (`--etcd-cert-file`, `--etcd-key-file`) for an
//! etcd run with `--client-cert-auth`, and an etcd user (`--etcd-user`,
//! `--etcd-password-file`). Read once at start; a file that cannot be read, or a secret
//! other users may read, refuses the start with one line.

use crate::setting::SettingError;
use std::path::{Path, PathBuf};

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// The files the flags name.
#[derive(Clone, Debug, Default)]
pub struct EtcdAccessFiles {
    /// `--etcd-ca-file`.
    pub ca: Option<PathBuf>,
    /// `--etcd-cert-file` and `--etcd-key-file`.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// `--etcd-user` and `--etcd-password-file`.
    pub user: Option<(String, PathBuf)>,
}

/// What a member shows etcd, loaded.
#[derive(Clone, Default)]
pub struct EtcdAccess {
    tls: Option<TlsOptions>,
    /// Whether a client certificate goes with the TLS.
    identity: bool,
    user: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAccess")
            .field("tls", &self.tls.is_some())
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

fn read(what: &str, path: &Path) -> Result<Vec<u8>, SettingError> {
    std::fs::read(path)
        .map_err(|e| SettingError::said(format!("{what} {}: cannot read it: {e}", path.display())))
}

/// A secret file others may not read: refused, not warned about.
fn read_secret(what: &str, path: &Path) -> Result<Vec<u8>, SettingError> {
    if let Some(why) = crate::credfile::loose_permissions(path) {
        return Err(SettingError::said(format!("{what}: {why}")));
    }
    read(what, path)
}

impl EtcdAccess {
    /// Loads what `files` name.
    pub fn load(files: &EtcdAccessFiles) -> Result<Self, SettingError> {
        let tls = match &files.ca {
            None => None,
            Some(ca) => {
                let mut tls = TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(read("--etcd-ca-file", ca)?));
                if let Some((cert, key)) = &files.identity {
                    tls = tls.identity(Identity::from_pem(
                        read("--etcd-cert-file", cert)?,
                        read_secret("--etcd-key-file", key)?,
                    ));
                }
                Some(tls)
            }
        };
        let user = match &files.user {
            None => None,
            Some((name, file)) => {
                let text = read_secret("--etcd-password-file", file)?;
                let password = String::from_utf8(text).map_err(|_| {
                    SettingError::said(format!(
                        "--etcd-password-file {}: not UTF-8",
                        file.display()
                    ))
                })?;
                let password = password.trim_end_matches(['\r', '\n']).to_owned();
                if password.is_empty() {
                    return Err(SettingError::said(format!(
                        "--etcd-password-file {}: empty",
                        file.display()
                    )));
                }
                Some((name.clone(), password))
            }
        };
        Ok(Self {
            tls,
            identity: files.identity.is_some(),
            user,
        })
    }

    /// What to try when a connection failed below etcd's answers (`why`, the error
    /// chain): TLS where etcd may serve it, a client certificate where it may want one.
    pub fn hint(&self, why: &str) -> &'static str {
        if why.contains("etcdserver:") {
            ""
        } else if self.tls.is_none() {
            " (if etcd serves TLS, give --etcd-ca-file)"
        } else if !self.identity {
            " (if etcd requires client certificates, give --etcd-cert-file and --etcd-key-file)"
        } else {
            ""
        }
    }

    /// Whether etcd is reached over TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// `endpoints` (`http://HOST:PORT`) as this access reaches them (`https://` with TLS).
    pub fn endpoints(&self, endpoints: &[String]) -> Vec<String> {
        endpoints
            .iter()
            .map(|e| match (&self.tls, e.strip_prefix("http://")) {
                (Some(_), Some(rest)) => format!("https://{rest}"),
                _ => e.clone(),
            })
            .collect()
    }

    /// `options` with TLS and the user, when configured.
    pub fn apply(&self, mut options: ConnectOptions) -> ConnectOptions {
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone());
        }
        options
    }
}
