//! Members that prove themselves (`--cluster-secret-file`): whoever can write etcd cannot
//! join, and no client can pass its request off as forwarded.
//!
//! - A member's record in etcd carries a MAC (HMAC-SHA-256 under the shared secret) over
//!   its key, its contents, the etcd lease it lives under and a time it expires
//!   ([`record`]); a record without a valid one, held under another lease, or past its
//!   time is ignored — it owns no key and is sent nothing — logged once and counted
//!   (`rasa_cluster_records_rejected_total`).
//! - A request one member sends another carries, beside the hop marker, a proof
//!   ([`PROOF_HEADER`]: the sender, the receiver, the time, a nonce and what the body
//!   is, under a MAC with the method and the path) ([`hop`]); a streamed body is sealed by
//!   a trailer over its digest ([`seal`]), checked before anything is stored. A hop
//!   marker without a valid proof — forged, replayed, too old, for another member — is
//!   taken off ([`ClusterSecret::admit`]): the request is a client's like any other,
//!   forwarded to the owner, never stored aside; a body the proof does not cover breaks
//!   off, and a request whose body breaks off stores nothing.
//!
//! Without a secret every member trusts etcd and the hop marker, as before, and the
//! gateway warns at start that anyone who can write etcd can join.

pub mod hop;
pub mod record;
pub mod seal;

use crate::setting::SettingError;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub use hop::{HopBody, PROOF_HEADER, PROOF_WITHIN};
pub use record::Signed;

/// Shortest secret accepted: 16 bytes (128 bits).
const MIN_SECRET: usize = 16;

/// The shared secret, and the nonces of the proofs seen lately.
pub struct ClusterSecret {
    key: Vec<u8>,
    seen: Mutex<hop::Nonces>,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

/// The time now, in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ClusterSecret {
    /// The secret in `path`: one line (trailing newline ignored), at least 16 bytes,
    /// in a file no other user may read.
    pub fn load(path: &Path) -> Result<Self, SettingError> {
        let what = format!("--cluster-secret-file {}", path.display());
        if let Some(why) = crate::credfile::loose_permissions(path) {
            return Err(SettingError::said(format!("{what}: {why}")));
        }
        let mut key =
            std::fs::read(path).map_err(|e| SettingError::said(format!("{what}: {e}")))?;
        while key.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            key.pop();
        }
        if key.len() < MIN_SECRET {
            return Err(SettingError::said(format!(
                "{what}: the secret has {} bytes; at least {MIN_SECRET} are needed (e.g. `openssl rand -hex 32 > FILE`)",
                key.len()
            )));
        }
        Ok(Self {
            key,
            seen: Mutex::default(),
        })
    }

    /// The MAC of `parts`, each preceded by its length.
    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        for p in parts {
            mac.update(&(p.len() as u64).to_be_bytes());
            mac.update(p);
        }
        mac
    }
}

#[cfg(test)]
mod tests;
