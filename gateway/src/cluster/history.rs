//! The views this member published, numbered in order (issue 65). A copy is tied to its
//! key's owner and to the view it was written, fetched or confirmed under; it is served
//! as current only while that owner owned the key in every view since. A member that
//! lost a key to another (which may have acknowledged writes of it) and owns it again
//! cannot know what that owner stored: its older copy is not current (confirmed with the
//! origin, or without one not served). The owner's tag alone does not show it: the same
//! member, the same incarnation, owns the key before and after.
//!
//! Every view is recorded, those a batch of etcd events passes through included (only
//! the batch's end is published: a member acts on the present, not on a state already
//! past, such as a member away between its record's expiry and its return); after
//! a gap (a new list of the members replaced a watch etcd had compacted past), the views
//! before are forgotten and every copy is confirmed again.

use std::collections::VecDeque;
use std::sync::Arc;

use rasa_openapi::ClusterMember;

use super::peers::Peers;

/// Views kept. A copy not read across this many view changes is confirmed again (without
/// an origin, no longer served): a read checks only the views since the copy's last check
/// and moves its tie to the newest.
pub(super) const KEPT: usize = 1024;

/// The views published, oldest first, each with its number.
#[derive(Debug, Default)]
pub(crate) struct History {
    views: VecDeque<(u64, Arc<Vec<ClusterMember>>)>,
    last: u64,
}

impl History {
    /// Records `members` unless they are the last view recorded.
    pub(super) fn push_if_new(&mut self, members: &Arc<Vec<ClusterMember>>) {
        if self.views.back().is_none_or(|(_, last)| last != members) {
            self.push(Arc::clone(members));
        }
    }

    /// Records `members`, the view just published.
    pub(super) fn push(&mut self, members: Arc<Vec<ClusterMember>>) {
        self.last += 1;
        self.views.push_back((self.last, members));
        if self.views.len() > KEPT {
            self.views.pop_front();
        }
    }

    /// Forgets every view but `members` (the current one): what happened before it is
    /// unknown.
    pub(super) fn restart(&mut self, members: Arc<Vec<ClusterMember>>) {
        self.views.clear();
        self.push(members);
    }

    /// The current view's number (0 before the first).
    pub(super) fn now(&self) -> u64 {
        self.last
    }

    /// Whether node `owner` owned `key` in view `since` and every view after it, all of
    /// them known.
    pub(super) fn owned_throughout(&self, key: &str, owner: &str, since: u64) -> bool {
        let Some((oldest, _)) = self.views.front() else {
            return false;
        };
        since >= *oldest
            && self
                .views
                .iter()
                .rev()
                .take_while(|(n, _)| *n >= since)
                .all(|(_, members)| {
                    rasa_openapi::cluster::owner(key, members).is_some_and(|m| m.node_id == owner)
                })
    }
}

/// What a copy of `key` made now is tied to: the key's owner as this member sees it
/// ([`Peers::owner_tag`]) and the view that says so.
pub fn tie_now(peers: &Peers, key: &str) -> (u64, u64) {
    let cluster = peers.cluster();
    let history = cluster.history.read().unwrap_or_else(|e| e.into_inner());
    (peers.owner_tag(cluster.owner(key).as_ref()), history.now())
}

/// Whether a copy of `key` tied to owner `tag` in view `at` is still current as far as
/// ownership goes: the same owner (incarnation, and for this member its registration),
/// which owned the key in that view and every one since — a member that lost the key and
/// owns it again has not seen what the other owner stored. `Some(view)` to record that
/// the tie held up to `view`; `None`: the copy must be confirmed again (without an
/// origin, not served).
pub fn still_tied(peers: &Peers, key: &str, tag: u64, at: u64) -> Option<u64> {
    let cluster = peers.cluster();
    let history = cluster.history.read().unwrap_or_else(|e| e.into_inner());
    let owner = cluster.owner(key);
    let node = owner.as_ref().map_or(cluster.node_id(), |m| &m.node_id);
    (tag == peers.owner_tag(owner.as_ref()) && history.owned_throughout(key, node, at))
        .then(|| history.now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(nodes: &[&str]) -> Arc<Vec<ClusterMember>> {
        Arc::new(
            nodes
                .iter()
                .map(|n| crate::cluster::view::test_member(n, "1"))
                .collect(),
        )
    }

    /// A key `a` owns among {a, c} and `b` among {a, b, c}.
    fn moving_key() -> String {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| {
                rasa_openapi::cluster::owner(k, &view(&["a", "c"]))
                    .unwrap()
                    .node_id
                    == "a"
                    && rasa_openapi::cluster::owner(k, &view(&["a", "b", "c"]))
                        .unwrap()
                        .node_id
                        == "b"
            })
            .unwrap()
    }

    #[test]
    fn an_owner_that_lost_its_key_between_owns_it_no_longer_throughout() {
        let key = moving_key();
        let mut h = History::default();
        h.push(view(&["a", "c"]));
        let tied = h.now();
        assert!(h.owned_throughout(&key, "a", tied));
        h.push(view(&["a", "b", "c"]));
        h.push(view(&["a", "c"]));
        assert!(
            !h.owned_throughout(&key, "a", tied),
            "lost between, owned again"
        );
        assert!(h.owned_throughout(&key, "a", h.now()), "tied again now");
    }

    #[test]
    fn views_forgotten_leave_nothing_owned_throughout() {
        let key = moving_key();
        let mut h = History::default();
        h.push(view(&["a", "c"]));
        let tied = h.now();
        h.restart(view(&["a", "c"]));
        assert!(!h.owned_throughout(&key, "a", tied), "after a gap");
        for _ in 0..=KEPT {
            h.push(view(&["a", "c"]));
        }
        let before = h.now() - KEPT as u64;
        assert!(
            !h.owned_throughout(&key, "a", before),
            "older than every view kept"
        );
        assert!(h.owned_throughout(&key, "a", before + 1));
    }
}
