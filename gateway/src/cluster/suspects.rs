//! Members this node failed to reach a moment ago: requests for their keys go straight to
//! the next choice instead of each waiting out the same failure (a crashed or frozen
//! member stays in the view until its lease ends, up to a TTL). A suspect is probed
//! ([`probe`]) until it answers again — then it is trusted at once — or leaves the view;
//! until then it stays suspect, not just for [`SUSPECT_FOR`] (issue 65: survivors kept
//! sending a frozen member a request every few seconds, each waiting for its answer).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rasa_openapi::ClusterMember;

/// How long a member that did not answer is passed over before it is tried again.
pub const SUSPECT_FOR: Duration = Duration::from_secs(3);

/// Members (by node id and incarnation) not to forward to until an instant.
#[derive(Debug, Default)]
pub struct Suspects {
    until: Mutex<HashMap<String, (String, Instant)>>,
}

impl Suspects {
    /// Marks `member` (this incarnation of it) as not answering, for [`SUSPECT_FOR`] (a
    /// probe extends it); true when it was not suspect already (then start a probe).
    pub fn suspect(&self, member: &ClusterMember) -> bool {
        let until = Instant::now() + SUSPECT_FOR;
        let before = self
            .table()
            .insert(member.node_id.clone(), (member.incarnation.clone(), until));
        !matches!(before, Some((i, t)) if i == member.incarnation && t > Instant::now())
    }

    /// Trusts `member` again (it answered).
    pub fn clear(&self, member: &ClusterMember) {
        let mut t = self.table();
        if t.get(&member.node_id)
            .is_some_and(|(i, _)| *i == member.incarnation)
        {
            t.remove(&member.node_id);
        }
    }

    /// Whether `member` failed to answer within the last [`SUSPECT_FOR`]. A new
    /// incarnation of it (a restart) is not suspect.
    pub fn holds(&self, member: &ClusterMember) -> bool {
        self.remaining(member).is_some()
    }

    /// How much longer `member` is passed over, if it is.
    pub fn remaining(&self, member: &ClusterMember) -> Option<Duration> {
        let mut t = self.table();
        match t.get(&member.node_id) {
            Some((incarnation, until)) if *incarnation == member.incarnation => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    t.remove(&member.node_id);
                    return None;
                }
                Some(left)
            }
            Some(_) => {
                t.remove(&member.node_id);
                None
            }
            None => None,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Instant)>> {
        self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How often a suspect is asked whether it answers again.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);
/// How long a probe waits for its answer.
const PROBE_WITHIN: Duration = Duration::from_millis(500);

/// Asks the suspect `member` (`GET {url}/healthz` through `client`) every [`PROBE_EVERY`]:
/// it stays suspect while it does not answer and is trusted again once it does; the
/// probe ends then, or when the member left `cluster`'s view (or restarted as another
/// incarnation), or the cluster is gone.
pub async fn probe(
    cluster: std::sync::Weak<super::Cluster>,
    client: reqwest::Client,
    member: ClusterMember,
) {
    let url = format!("{}/healthz", member.url.trim_end_matches('/'));
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(c) = cluster.upgrade() else { return };
        if !c.has_member(&member) {
            c.suspects().clear(&member);
            return;
        }
        drop(c);
        let answered = matches!(
            client.get(&url).timeout(PROBE_WITHIN).send().await,
            Ok(r) if r.status().is_success()
        );
        let Some(c) = cluster.upgrade() else { return };
        if answered {
            tracing::info!(node = %member.node_id, "cluster: a suspect member answers again");
            c.suspects().clear(&member);
            return;
        }
        c.suspects().suspect(&member);
    }
}

/// Makes `member` a suspect of `peers`' cluster (a request to it went unanswered) and,
/// unless it already was one, probes it until it answers again.
pub(super) fn suspect_and_probe(peers: &super::peers::Peers, member: &ClusterMember) {
    if peers.cluster().suspects().suspect(member) {
        tokio::spawn(probe(
            std::sync::Arc::downgrade(peers.cluster()),
            peers.client().clone(),
            member.clone(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cluster::view::test_member as member;

    #[test]
    fn a_suspect_is_passed_over_until_it_restarts() {
        let s = Suspects::default();
        let old = member("g2", "a");
        assert!(!s.holds(&old));
        assert!(s.suspect(&old), "newly suspect: probe it");
        assert!(!s.suspect(&old), "suspect already: probed already");
        assert!(s.holds(&old));
        let left = s.remaining(&old).unwrap();
        assert!(left <= SUSPECT_FOR && left > SUSPECT_FOR - Duration::from_secs(1));
        assert!(!s.holds(&member("g3", "a")));
        assert!(!s.holds(&member("g2", "b")), "a new incarnation is tried");
        assert!(!s.holds(&old), "forgotten once a new incarnation was seen");
        s.suspect(&old);
        s.clear(&member("g2", "b"));
        assert!(s.holds(&old), "another incarnation's answer clears nothing");
        s.clear(&old);
        assert!(!s.holds(&old), "trusted again once it answered");
    }
}
