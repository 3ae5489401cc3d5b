//! Member records that prove themselves and expire: the MAC covers the record's key, its
//! contents, the etcd lease it was written under and a time after which it is no longer
//! honoured. A record saved from etcd and written back after its member left — without
//! a lease, under another lease, or under a lease granted again with the same id after
//! the record's time — owns no key and is sent nothing.
//!
//! A member writes its record again every [`REFRESH_EVERY_TTLS`] of its TTL, each time
//! valid for [`VALID_FOR_TTLS`] TTLs: members' clocks may differ by up to the difference
//! (two TTLs) before a live member's record is taken for an expired one.

use rasa_openapi::ClusterMember;

use super::{now_ms, ClusterSecret};

/// A record is written again after this many TTLs of its member's lease.
pub const REFRESH_EVERY_TTLS: u32 = 1;

/// A record is honoured for this many TTLs after it was written.
pub const VALID_FOR_TTLS: u32 = 3;

/// A member's record as it is kept in etcd: the record and, in a cluster with a secret,
/// the lease it was written under, when it stops being honoured, and its MAC over all
/// of them (an older reader ignores the extra fields).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Signed {
    /// The member.
    #[serde(flatten)]
    pub member: ClusterMember,
    /// The etcd lease the record was written under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
    /// When it stops being honoured (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// The MAC, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// A record that checks out: the member, and when its record stops being honoured.
pub struct Honoured {
    /// The member.
    pub member: ClusterMember,
    /// When the record stops being honoured (Unix milliseconds; `None` without a secret).
    pub expires_ms: Option<u64>,
}

impl ClusterSecret {
    fn record_mac(
        &self,
        key: &str,
        member: &ClusterMember,
        lease: i64,
        expires_ms: u64,
    ) -> hmac::Hmac<sha2::Sha256> {
        let body = serde_json::to_vec(member).expect("a member serializes");
        let (lease, expires) = (lease.to_be_bytes(), expires_ms.to_be_bytes());
        self.mac(&[b"rasa-member-v2", key.as_bytes(), &body, &lease, &expires])
    }

    /// The MAC of `member`'s record under etcd key `key`, written under `lease` and
    /// honoured until `expires_ms`.
    pub fn sign_record(
        &self,
        key: &str,
        member: &ClusterMember,
        lease: i64,
        expires_ms: u64,
    ) -> String {
        let tag = self.record_mac(key, member, lease, expires_ms);
        hex::encode(hmac::Mac::finalize(tag).into_bytes())
    }

    /// Whether `mac` is the MAC of `member`'s record under `key`, `lease` and
    /// `expires_ms` (compared in constant time).
    pub fn verify_record(
        &self,
        key: &str,
        member: &ClusterMember,
        lease: i64,
        expires_ms: u64,
        mac: &str,
    ) -> bool {
        let Ok(mac) = hex::decode(mac) else {
            return false;
        };
        hmac::Mac::verify_slice(self.record_mac(key, member, lease, expires_ms), &mac).is_ok()
    }
}

/// Why a member record in etcd is not honoured.
#[derive(Debug, thiserror::Error)]
pub enum RecordRefused {
    /// It does not parse.
    #[error("it does not parse ({0})")]
    Parse(#[source] serde_json::Error),
    /// It names another node than the key it is under.
    #[error("it names node {0:?} under another node's key")]
    OtherNode(String),
    /// It has no MAC though the cluster has a secret.
    #[error("it carries no MAC over its lease and time (this cluster has --cluster-secret-file)")]
    NoMac,
    /// Its MAC does not verify.
    #[error("its MAC does not verify under --cluster-secret-file")]
    Mac,
    /// It is held under another etcd lease than the one it was signed for.
    #[error("it was signed for etcd lease {signed:x} but is held under {} (written back after its member left?)", if *held == 0 { "no lease".to_owned() } else { format!("lease {held:x}") })]
    OtherLease {
        /// The lease it was signed for.
        signed: i64,
        /// The lease it is held under (0: none).
        held: i64,
    },
    /// Its time has passed.
    #[error("it expired {ms_ago} ms ago (its member stopped writing it, or their clocks differ by more than {} TTLs)", VALID_FOR_TTLS - REFRESH_EVERY_TTLS)]
    Expired {
        /// How long ago.
        ms_ago: u64,
    },
}

/// The record `value` kept at etcd key `key` under the etcd lease `kv_lease` (0: none),
/// or why it is not honoured: it does not parse, names another node than its key, or —
/// under `secret` — carries no valid MAC, was written back under another lease than the
/// one it was signed for, or its time has passed.
pub fn check(
    secret: Option<&ClusterSecret>,
    key: &str,
    value: &[u8],
    kv_lease: i64,
) -> Result<Honoured, RecordRefused> {
    let node = key.rsplit('/').next().unwrap_or_default();
    let r = serde_json::from_slice::<Signed>(value).map_err(RecordRefused::Parse)?;
    if r.member.node_id != node {
        return Err(RecordRefused::OtherNode(r.member.node_id));
    }
    let Some(secret) = secret else {
        return Ok(Honoured {
            member: r.member,
            expires_ms: None,
        });
    };
    let (Some(mac), Some(lease), Some(expires_ms)) = (&r.mac, r.lease, r.expires_ms) else {
        return Err(RecordRefused::NoMac);
    };
    if !secret.verify_record(key, &r.member, lease, expires_ms, mac) {
        return Err(RecordRefused::Mac);
    }
    if kv_lease != lease {
        return Err(RecordRefused::OtherLease {
            signed: lease,
            held: kv_lease,
        });
    }
    let now = now_ms();
    if expires_ms <= now {
        return Err(RecordRefused::Expired {
            ms_ago: now - expires_ms,
        });
    }
    Ok(Honoured {
        member: r.member,
        expires_ms: Some(expires_ms),
    })
}
