//! Keys hot by demand (`--cluster-hot-reads`): a key's owner counts its reads — HTTP
//! reads and descriptors it serves, and the reads its replicas report when they renew
//! their lease — over a window (`--cluster-hot-window`), a namespace's keys by their
//! [`super::scope`] name (each namespace's `a` its own key). A key read more often than the
//! threshold is **promoted**: the owner lists it in its member record (`hot`), and every
//! member and client then treats it as a key with replicas (`--cluster-hot-replicas`
//! members hold it, [`rasa_openapi::cluster::holder_count`]). A hot key whose reads over
//! the last two windows fall below half the threshold (hysteresis: a key near the
//! threshold does not flap; two windows: its replicas report their reads about once a
//! second, not on the window's beat) is **demoted**; its replicas go when their
//! member's view drops it.
//!
//! The record is the owner's word, signed with it under `--cluster-secret-file`, and
//! gone with its lease: a departed owner's hot keys go with it, and a key's new owner
//! measures it afresh. Consistency does not rest on the list: a replica serves only
//! under a grant the owner revokes before any write of the key is acknowledged.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use rasa_openapi::HotKey;

use super::Peers;
use crate::catalog;

/// At most this many keys are hot at one owner (the most read first): each costs a line
/// of its member record, which every member and client reads.
pub const MOST_HOT: usize = 256;

/// At most this many keys are counted in one window: a key first read after that many
/// others in a window is not counted in it (a hot key is read early in any window).
const MOST_COUNTED: usize = 64 << 10;

/// When keys become hot (`--cluster-hot-*`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HotRule {
    /// Reads per second that make a key hot.
    pub reads: u32,
    /// How many members hold a hot key, its owner included.
    pub replicas: u32,
    /// The window reads are counted over.
    pub window: Duration,
}

/// What a window's end changed.
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    /// The keys hot now, to list in this member's record.
    pub hot: Vec<HotKey>,
    /// How many keys became hot.
    pub promoted: usize,
    /// How many keys stopped being hot.
    pub demoted: usize,
}

/// An owner's count of its keys' reads, and the keys it found hot.
#[derive(Debug)]
pub struct Demand {
    rule: HotRule,
    counts: Mutex<HashMap<String, u64>>,
    /// The hot keys: how many members hold each, and its reads in the last window.
    hot: Mutex<BTreeMap<String, (u32, u64)>>,
}

impl Demand {
    /// Counts by `rule`.
    pub fn new(rule: HotRule) -> Self {
        Self {
            rule,
            counts: Mutex::default(),
            hot: Mutex::default(),
        }
    }

    /// The window reads are counted over.
    pub fn window(&self) -> Duration {
        self.rule.window
    }

    /// Counts `n` reads of the key `name` names ([`super::scope::scoped`]).
    pub fn read(&self, name: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = counts.get_mut(name) {
            *c += n;
        } else if counts.len() < MOST_COUNTED {
            counts.insert(name.to_owned(), n);
        }
    }

    /// Ends a window: keys read at least the threshold's rate in it become hot (the most
    /// read first, up to [`MOST_HOT`]), hot keys read less than half of it over this
    /// window and the one before — or no longer owned here (`owns`, given the key without
    /// its namespace: placement is by the key alone) — stop being hot. The change, when
    /// there is one.
    pub fn close_window(&self, owns: impl Fn(&str) -> bool) -> Option<Change> {
        let counts = std::mem::take(&mut *self.counts.lock().unwrap_or_else(|e| e.into_inner()));
        let secs = self.rule.window.as_secs_f64();
        let count = |key: &str| counts.get(key).copied().unwrap_or(0);
        let rate = |key: &str| count(key) as f64 / secs;
        let promote_at = f64::from(self.rule.reads);
        let mut hot = self.hot.lock().unwrap_or_else(|e| e.into_inner());
        let before = hot.len();
        hot.retain(|key, (_, last)| {
            let two = (*last + count(key)) as f64 / (2.0 * secs);
            *last = count(key);
            two >= promote_at / 2.0 && owns(super::scope::split(key).1)
        });
        let demoted = before - hot.len();
        let mut rising: Vec<(&String, u64)> = counts
            .iter()
            .filter(|(k, _)| {
                !hot.contains_key(*k) && rate(k) >= promote_at && owns(super::scope::split(k).1)
            })
            .map(|(k, c)| (k, *c))
            .collect();
        rising.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let room = MOST_HOT.saturating_sub(hot.len());
        let promoted = rising.len().min(room);
        for (key, c) in rising.into_iter().take(room) {
            hot.insert(key.clone(), (self.rule.replicas, c));
        }
        catalog::CLUSTER_HOT_KEYS.gauge().set(hot.len() as f64);
        (promoted + demoted > 0).then(|| Change {
            hot: hot
                .iter()
                .map(|(name, &(count, _))| {
                    let (ns, key) = super::scope::split(name);
                    HotKey {
                        namespace: ns.map(str::to_owned),
                        key: key.to_owned(),
                        count,
                    }
                })
                .collect(),
            promoted,
            demoted,
        })
    }
}

/// Ends a window of `peers`' demand every window, publishing each change in this member's
/// record, for as long as `peers` lives.
pub async fn follow(peers: Weak<Peers>, window: Duration) {
    let mut tick = tokio::time::interval(window);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(peers) = peers.upgrade() else {
            return;
        };
        let Some(demand) = peers.near().and_then(|n| n.replicas()?.demand()) else {
            return;
        };
        let Some(change) = demand.close_window(|k| peers.owns(k)) else {
            continue;
        };
        catalog::CLUSTER_HOT_PROMOTIONS
            .counter()
            .increment(change.promoted as u64);
        catalog::CLUSTER_HOT_DEMOTIONS
            .counter()
            .increment(change.demoted as u64);
        tracing::info!(
            promoted = change.promoted,
            demoted = change.demoted,
            hot = change.hot.len(),
            "cluster: hot keys changed"
        );
        publish(peers.cluster(), change.hot).await;
    }
}

/// Longest wait for etcd to take a record with a new list of hot keys.
const RECORD_WITHIN: Duration = Duration::from_secs(5);

/// Lists `hot` in `cluster`'s record of this member and writes it again (a record etcd
/// does not take in time keeps the list for its next write).
pub async fn publish(cluster: &super::Cluster, hot: Vec<HotKey>) {
    cluster.me.lock().unwrap_or_else(|e| e.into_inner()).hot = hot;
    match tokio::time::timeout(RECORD_WITHIN, super::membership::write_record(cluster)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cluster: etcd refused the record listing hot keys")
        }
        Err(_) => tracing::warn!(
            within = ?RECORD_WITHIN,
            "cluster: etcd did not take the record listing hot keys in time"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand() -> Demand {
        Demand::new(HotRule {
            reads: 10,
            replicas: 3,
            window: Duration::from_secs(2),
        })
    }

    fn keys(c: &Change) -> Vec<&str> {
        c.hot.iter().map(|h| h.key.as_str()).collect()
    }

    #[test]
    fn a_key_read_past_the_threshold_is_promoted_and_demoted_below_half_of_it() {
        let d = demand();
        d.read("a", 20);
        d.read("b", 19);
        let c = d.close_window(|_| true).expect("a promotion");
        assert_eq!((keys(&c), c.promoted, c.demoted), (vec!["a"], 1, 0));
        assert_eq!(c.hot[0].count, 3);
        // Between half the threshold and the threshold: stays hot, nothing changes.
        d.read("a", 10);
        assert_eq!(d.close_window(|_| true), None);
        d.read("a", 9);
        let c = d.close_window(|_| true).expect("a demotion");
        assert_eq!((keys(&c), c.promoted, c.demoted), (vec![], 0, 1));
        assert_eq!(d.close_window(|_| true), None, "nothing read, nothing hot");
    }

    #[test]
    fn a_hot_key_survives_one_quiet_window_not_two() {
        let d = demand();
        d.read("a", 40);
        assert_eq!(d.close_window(|_| true).map(|c| c.promoted), Some(1));
        // Its replicas' report came a moment late: none in this window.
        assert_eq!(d.close_window(|_| true), None, "still hot");
        d.read("a", 30);
        assert_eq!(d.close_window(|_| true), None, "still hot");
        assert_eq!(d.close_window(|_| true), None, "30 over two windows");
        let c = d.close_window(|_| true).expect("two quiet windows");
        assert_eq!(c.demoted, 1);
    }

    #[test]
    fn a_key_not_owned_here_is_neither_promoted_nor_kept() {
        let d = demand();
        d.read("a", 100);
        d.read("b", 100);
        let c = d.close_window(|k| k == "a").expect("a promotion");
        assert_eq!(keys(&c), vec!["a"]);
        d.read("a", 100);
        let c = d.close_window(|_| false).expect("a demotion");
        assert_eq!((c.hot.len(), c.demoted), (0, 1));
    }

    /// A namespace's key is counted apart from the default namespace's key of the same
    /// text, listed with its namespace, and owned as that key is (placement by the key).
    #[test]
    fn a_namespaces_key_is_hot_apart_from_the_default_ones() {
        let d = demand();
        let train_a = crate::cluster::scope::scoped(Some("train"), "a");
        d.read(&train_a, 15);
        d.read("a", 15);
        assert_eq!(
            d.close_window(|_| true),
            None,
            "15 and 15 reads: neither hot"
        );
        d.read(&train_a, 25);
        d.read("a", 5);
        let c = d.close_window(|k| k == "a").expect("a promotion");
        let want = HotKey {
            namespace: Some("train".into()),
            key: "a".into(),
            count: 3,
        };
        assert_eq!((c.hot, c.promoted), (vec![want], 1));
    }

    #[test]
    fn at_most_so_many_keys_are_hot_the_most_read_first() {
        let d = demand();
        for i in 0..MOST_HOT + 10 {
            d.read(&format!("k{i:04}"), 100 + i as u64);
        }
        let c = d.close_window(|_| true).expect("promotions");
        assert_eq!((c.hot.len(), c.promoted), (MOST_HOT, MOST_HOT));
        assert!(!keys(&c).contains(&"k0000"), "the least read left out");
        assert!(keys(&c).contains(&format!("k{:04}", MOST_HOT + 9).as_str()));
    }
}
