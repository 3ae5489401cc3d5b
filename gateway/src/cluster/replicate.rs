//! Replicas between members ([`super::replicas`]): whether this member serves a key as
//! one of its replicas, and the owner's word to its replicas after a write.

use std::sync::Arc;
use std::time::Duration;

use rasa_openapi::ClusterMember;

use super::replicas::{is_replica, REPLICA_PATH};
use super::Peers;

/// The owner of `key` of namespace `ns` (`None`: the default one) when this member is one
/// of the key's replicas by its view (`None`: the key has no replicas, or this member is
/// not one of them).
pub fn owner_of_replica(peers: &Peers, ns: Option<&str>, key: &str) -> Option<ClusterMember> {
    let replicas = peers.near()?.replicas()?;
    let owner = peers.cluster().owner(key)?;
    let n = replicas.rules().count(ns, key, Some(&owner));
    is_replica(peers.cluster(), key, n).then_some(owner)
}

/// This member's replicas, when it keeps any.
fn replicas_of(peers: &Peers) -> Option<&super::replicas::Replicas> {
    peers.near()?.replicas()
}

/// As the owner of `key` of namespace `ns` (`None`: the default one), a read of it
/// answered with the value: counted towards the key's demand ([`super::hot`]).
pub fn read_at_owner(peers: &Peers, ns: Option<&str>, key: &str) {
    if let Some(replicas) = replicas_of(peers) {
        replicas.demanded(ns, key, 1);
    }
}

/// As one of the replicas of `key` of namespace `ns`, a read of it served from the
/// replica: reported to the owner at the next renewal ([`super::hot`]).
pub fn read_at_replica(peers: &Peers, ns: Option<&str>, key: &str) {
    if let Some(replicas) = replicas_of(peers) {
        replicas.served(ns, key);
    }
}

/// Whether a replica of the key `name` names ([`super::scope`]) copied from the owner
/// `owner_tag` may still be held here: this member is still one of the key's replicas,
/// and that owner still owns it.
pub fn still_replica(peers: &Peers, name: &str, owner_tag: u64) -> bool {
    let (ns, key) = super::scope::split(name);
    owner_of_replica(peers, ns, key).is_some_and(|o| super::peers::tag_of(&o) == owner_tag)
}

/// Longest wait for a replica to take an owner's word that a key was written.
const NUDGE_WITHIN: Duration = Duration::from_secs(2);

/// As the owner, after a write of `key` of namespace `ns` was published: tells the key's
/// replicas to copy it now, in the background (a replica that does not hear it copies the
/// key at its next read).
pub fn nudge(peers: &Arc<Peers>, ns: Option<&str>, key: &str) {
    let Some(replicas) = replicas_of(peers) else {
        return;
    };
    let n = replicas
        .rules()
        .count(ns, key, peers.cluster().owner(key).as_ref());
    if n < 2 || !peers.owns(key) {
        return;
    }
    let me = peers.cluster().node_id().to_owned();
    let others: Vec<ClusterMember> = super::replicas::holders(peers.cluster(), key, n)
        .into_iter()
        .filter(|m| m.node_id != me)
        .collect();
    let name = super::scope::scoped(ns, key);
    let (peers, body) = (Arc::clone(peers), format!("{name}\n"));
    tokio::spawn(async move {
        let sends = others.iter().map(|m| {
            let url = format!("{}{REPLICA_PATH}", m.url.trim_end_matches('/'));
            let (peers, body) = (&peers, body.clone());
            async move {
                let Ok(url) = reqwest::Url::parse(&url) else {
                    return;
                };
                let covered = super::secret::HopBody::of(&[body.as_bytes()]);
                let headers = peers.hop_headers(&m.node_id, &http::Method::POST, &url, &covered);
                let sent = peers.client().post(url).headers(headers).body(body).send();
                if !matches!(tokio::time::timeout(NUDGE_WITHIN, sent).await, Ok(Ok(r)) if r.status().is_success()) {
                    tracing::debug!(member = %m.node_id, "a replica did not take the word of a write");
                }
            }
        });
        futures_util::future::join_all(sends).await;
    });
}
