//! Members that prove themselves (`--cluster-secret-file`): whoever can write etcd cannot
//! join, and no client can pass its request off as forwarded.
//!
//! - A member's record in etcd carries a MAC (HMAC-SHA-256 under the shared secret) over
//!   its key and contents ([`ClusterSecret::sign_record`]); a record without a valid one is
//!   ignored — it owns no key and is sent nothing — logged once and counted
//!   (`rasa_cluster_records_rejected_total`).
//! - A request one member sends another carries, beside the hop marker, a proof
//!   ([`PROOF_HEADER`]: the sender, the time, a nonce and a MAC over them with the method
//!   and the path). A hop marker without a valid proof — forged, replayed, too old — is
//!   taken off ([`ClusterSecret::admit`]): the request is a client's like any other,
//!   forwarded to the owner, never stored aside.
//!
//! Without a secret every member trusts etcd and the hop marker, as before, and the
//! gateway warns at start that anyone who can write etcd can join.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderValue, Method};
use rasa_openapi::cluster::PEER_FILL_HEADER;
use rasa_openapi::{ClusterMember, HOP_HEADER};
use sha2::Sha256;

/// The header that proves a hop marker: `<node-id> <unix-ms> <nonce> <mac>`.
pub const PROOF_HEADER: &str = "rasa-hop-proof";

/// How far a proof's time may be from this member's clock (members' clocks are kept by
/// NTP; a captured request replayed later than this is refused).
pub const PROOF_WITHIN: Duration = Duration::from_secs(60);

/// Shortest secret accepted: 16 bytes (128 bits).
const MIN_SECRET: usize = 16;

/// The shared secret, and the nonces of the proofs seen within [`PROOF_WITHIN`].
pub struct ClusterSecret {
    key: Vec<u8>,
    seen: Mutex<HashMap<u64, u64>>,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

/// A member's record as it is kept in etcd: the record and, in a cluster with a secret,
/// its MAC (an older reader ignores the extra field).
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Signed {
    #[serde(flatten)]
    pub(super) member: ClusterMember,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) mac: Option<String>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ClusterSecret {
    /// The secret in `path`: one line (trailing newline ignored), at least 16 bytes,
    /// in a file no other user may read.
    pub fn load(path: &Path) -> Result<Self, String> {
        let what = format!("--cluster-secret-file {}", path.display());
        if let Some(why) = crate::credfile::loose_permissions(path) {
            return Err(format!("{what}: {why}"));
        }
        let mut key = std::fs::read(path).map_err(|e| format!("{what}: {e}"))?;
        while key.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            key.pop();
        }
        if key.len() < MIN_SECRET {
            return Err(format!(
                "{what}: the secret has {} bytes; at least {MIN_SECRET} are needed (e.g. `openssl rand -hex 32 > FILE`)",
                key.len()
            ));
        }
        Ok(Self {
            key,
            seen: Mutex::default(),
        })
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        for p in parts {
            mac.update(&(p.len() as u64).to_be_bytes());
            mac.update(p);
        }
        mac
    }

    /// The MAC of `member`'s record under etcd key `key`.
    pub fn sign_record(&self, key: &str, member: &ClusterMember) -> String {
        let body = serde_json::to_vec(member).expect("a member serializes");
        let tag = self.mac(&[b"rasa-member-v1", key.as_bytes(), &body]);
        hex::encode(tag.finalize().into_bytes())
    }

    /// Whether `mac` is the MAC of `member`'s record under `key` (compared in constant
    /// time).
    pub fn verify_record(&self, key: &str, member: &ClusterMember, mac: &str) -> bool {
        let Ok(mac) = hex::decode(mac) else {
            return false;
        };
        let body = serde_json::to_vec(member).expect("a member serializes");
        self.mac(&[b"rasa-member-v1", key.as_bytes(), &body])
            .verify_slice(&mac)
            .is_ok()
    }

    /// The proof of a request `node_id` sends another member: `method` on
    /// `path_and_query` (as the receiver will see it).
    pub fn proof(&self, node_id: &str, method: &Method, path_and_query: &str) -> HeaderValue {
        let (at, nonce) = (now_ms(), rand::random::<u64>());
        let tag = self.hop_mac(node_id, at, nonce, method, path_and_query);
        let text = format!(
            "{node_id} {at} {nonce:016x} {}",
            hex::encode(tag.finalize().into_bytes())
        );
        HeaderValue::from_str(&text).expect("node ids are header-safe")
    }

    fn hop_mac(
        &self,
        node: &str,
        at: u64,
        nonce: u64,
        method: &Method,
        path: &str,
    ) -> Hmac<Sha256> {
        let (at, nonce) = (at.to_be_bytes(), nonce.to_be_bytes());
        let parts: [&[u8]; 6] = [
            b"rasa-hop-v1",
            node.as_bytes(),
            &at,
            &nonce,
            method.as_str().as_bytes(),
            path.as_bytes(),
        ];
        self.mac(&parts)
    }

    /// Why `proof` does not prove a hop of `method` on `path_and_query`, or `None` when it
    /// does (its nonce is then spent: the same proof is refused a second time).
    pub fn check(&self, proof: &str, method: &Method, path_and_query: &str) -> Option<String> {
        let mut it = proof.split(' ');
        let (Some(node), Some(at), Some(nonce), Some(tag), None) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            return Some("a malformed proof".into());
        };
        let (Ok(at), Ok(nonce), Ok(tag)) = (
            at.parse::<u64>(),
            u64::from_str_radix(nonce, 16),
            hex::decode(tag),
        ) else {
            return Some("a malformed proof".into());
        };
        let now = now_ms();
        let window = PROOF_WITHIN.as_millis() as u64;
        if at.abs_diff(now) > window {
            return Some(format!(
                "a proof {} s away from this member's clock",
                at.abs_diff(now) / 1000
            ));
        }
        // Compared in constant time.
        let same = self
            .hop_mac(node, at, nonce, method, path_and_query)
            .verify_slice(&tag);
        if same.is_err() {
            return Some("a proof that does not verify under --cluster-secret-file".into());
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|_, t| t.abs_diff(now) <= window);
        if seen.insert(nonce, at).is_some() {
            return Some("a proof already used (a replay)".into());
        }
        None
    }

    /// Takes the hop marker (and the peer-fill marker it carries) off `headers` unless a
    /// valid proof comes with it; `true` when a marker was taken off. (The proof header
    /// stays: an S3 signature may cover it. It is spent, and a member passing the request
    /// on replaces it.)
    pub fn admit(&self, headers: &mut HeaderMap, method: &Method, path_and_query: &str) -> bool {
        let proof = headers.get(PROOF_HEADER);
        if !headers.contains_key(HOP_HEADER) {
            return false;
        }
        let why = match proof.as_ref().map(|p| p.to_str()) {
            None => "no proof".to_owned(),
            Some(Err(_)) => "a malformed proof".to_owned(),
            Some(Ok(p)) => match self.check(p, method, path_and_query) {
                None => return false,
                Some(why) => why,
            },
        };
        headers.remove(HOP_HEADER);
        headers.remove(PEER_FILL_HEADER);
        metrics::counter!("rasa_cluster_hops_rejected_total").increment(1);
        tracing::warn!(
            %method, path = path_and_query,
            "cluster: a request marked as forwarded came with {why}; served as a client's request"
        );
        true
    }
}

#[cfg(test)]
mod tests;
