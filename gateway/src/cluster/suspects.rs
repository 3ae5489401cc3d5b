//! Members this node failed to reach a moment ago: requests for their keys go straight to
//! the next choice for a short while instead of each waiting out the same failure (a
//! crashed or frozen member stays in the view until its lease ends, up to a TTL).

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
    /// Marks `member` (this incarnation of it) as not answering, for [`SUSPECT_FOR`].
    pub fn suspect(&self, member: &ClusterMember) {
        let until = Instant::now() + SUSPECT_FOR;
        self.table()
            .insert(member.node_id.clone(), (member.incarnation.clone(), until));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, incarnation: &str) -> ClusterMember {
        ClusterMember {
            node_id: id.into(),
            incarnation: incarnation.into(),
            url: "http://127.0.0.1:1".into(),
            state: rasa_openapi::MemberState::Serving,
            weight: 1,
            s3_url: None,
            fabric: rasa_openapi::FabricInfo {
                enabled: false,
                provider: None,
                address: None,
                address_format: None,
                virtual_addressing: None,
                incarnation: incarnation.into(),
                endpoints: Vec::new(),
                host: None,
            },
        }
    }

    #[test]
    fn a_suspect_is_passed_over_until_it_restarts() {
        let s = Suspects::default();
        let old = member("g2", "a");
        assert!(!s.holds(&old));
        s.suspect(&old);
        assert!(s.holds(&old));
        let left = s.remaining(&old).unwrap();
        assert!(left <= SUSPECT_FOR && left > SUSPECT_FOR - Duration::from_secs(1));
        assert!(!s.holds(&member("g3", "a")));
        assert!(!s.holds(&member("g2", "b")), "a new incarnation is tried");
        assert!(!s.holds(&old), "forgotten once a new incarnation was seen");
    }
}
