//! Replicas (`--cluster-replicas PREFIX=N`, and `replicas=` in the namespaces file for a
//! namespace's keys): a key under a replicated prefix is held by the first N members of
//! its placement order — its owner, and N−1 **replicas** — each of
//! which serves reads of it (HTTP and one-sided, with a descriptor of its own memory).
//! A fleet loading one checkpoint then reads it from N members' NICs, not one.
//!
//! A replica is a near copy ([`super::near`]) kept in arena memory instead of a cache, and
//! follows the same protocol, so it never serves a version a write replaced once anyone
//! can read the write:
//!
//! - The replica **asks** its owner for the key's frame (`GET /v1/cluster/replica/{key}`,
//!   [`REPLICA_PATH`]), naming itself; the owner records a grant for it **before** it looks
//!   the key up, and answers with the frame (or `304` when the replica already holds that
//!   version) and the grant's lease ([`REPLICA_LEASE`]). The replica counts the
//!   lease from when it *sent* the request, so its lease ends before the owner's grant.
//! - A write of the key, **before** it publishes, takes the key's grants, tells each
//!   holder to drop its copy (`POST /v1/cluster/near`) and waits for the answer or for
//!   the holder's lease to end ([`super::peers::Peers::near_write`]). A replica that hears
//!   a revocation of the key while its request is on its way back keeps nothing from it
//!   ([`Replicas::ticket`]; other keys' revocations do not matter: a fleet reading a
//!   checkpoint while another replicated key is written keeps its leases).
//! - A replica whose lease ended asks again, with the version it holds: a `304` renews
//!   the lease without moving bytes. After each write the owner tells its replicas
//!   (`POST /v1/cluster/replica`), so they copy the new version before readers come.
//! - A replica is tied to its owner's tag (node id and incarnation) and served only while
//!   this member's view names that owner and this member among the key's first N.
//!
//! The replica's version keeps the owner's version id and frame (so its checksum and
//! entity tag are the owner's); in this member's index it is tied to no owner that can
//! ever match (`store::REPLICA_TIE`), so nothing but a replica read serves it as current.
//! Replicas take at most their budget (`--cluster-replica-memory`) of this member's
//! memory; past it a key is not replicated here.
//!
//! Grants, revocations and the replicas held here name a key of a namespace other than
//! the default one by [`super::scope::scoped`]; a replica lives in its namespace's arenas.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use rasa_openapi::{ClusterMember, ReplicaRule};

use super::Cluster;

/// The owner's frame route (`GET {REPLICA_PATH}/{key}`) and the replicas' nudge route
/// (`POST`, the keys one a line).
pub const REPLICA_PATH: &str = "/v1/cluster/replica";

/// Response header of the owner's frame route: the version's frame checksum (16 hex).
pub const CHECKSUM_HEADER: &str = "rasa-frame-checksum";

/// Response header of an answer a replica served (`hit`).
pub const REPLICA_HEADER: &str = "rasa-replica";

/// How long a replica's grant runs: longer than a near copy's, so that a renewal still
/// arrives in time across a link that a fleet's reads keep full (and a replica renews
/// once half of it is gone, while reads keep coming). A replica the owner cannot reach
/// holds a write of its key up for at most this long.
pub const REPLICA_LEASE: Duration = Duration::from_secs(2);

/// A replica not read for this long is dropped (its memory freed).
pub const IDLE: Duration = Duration::from_secs(60);

/// A replica held here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replica {
    /// The tag of the owner it was copied from.
    pub owner_tag: u64,
    /// Its version id (the owner's).
    pub version: u64,
    /// Its frame's size in memory.
    pub bytes: u64,
    /// Until when it may be served without asking the owner again.
    pub until: Instant,
    /// When it was last read.
    pub read_at: Instant,
}

/// What became of a copy a replica asked for ([`super::near::Near::keep_replica`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Kept {
    /// Kept, replacing the version named (to drop from memory), if another.
    Replacing(Option<u64>),
    /// Not kept: a revocation of its key came while it was on its way.
    Revoked,
}

#[derive(Default)]
struct Held {
    by_key: HashMap<String, Replica>,
    bytes: u64,
    /// Revocations heard lately, by key: the last one's number and when it came. A copy
    /// asked for before a revocation of its key is not kept (other keys' revocations do
    /// not matter to it). Forgotten after [`REMEMBER_REVOKED`]: a copy asked for that long
    /// ago has outlived its lease anyway.
    revoked: HashMap<String, (u64, Instant)>,
    revocations: u64,
    /// Bytes of copies on their way ([`Replicas::reserve`]).
    reserved: u64,
    /// Reads served from replicas since their owner was last told, by key (reported with
    /// the next renewal: the owner counts its keys' demand, [`super::hot`]).
    served: HashMap<String, u64>,
}

/// Whether `bytes` more for `key` fit in `budget` beside what `held` holds and has on its
/// way, counting what `key`'s replica now takes as freed.
fn fits(held: &Held, budget: u64, key: &str, bytes: u64) -> bool {
    let freed = held.by_key.get(key).map_or(0, |r| r.bytes);
    held.bytes + held.reserved - freed + bytes <= budget
}

/// Room in the replicas' budget taken for a copy on its way; given back when dropped.
pub struct Room<'r> {
    replicas: &'r Replicas,
    bytes: u64,
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        self.replicas.held().reserved -= self.bytes;
    }
}

/// How long a revocation is remembered (longer than any replica lease).
const REMEMBER_REVOKED: Duration = Duration::from_secs(5);

/// This member's replicas of keys other members own, and the rules saying which keys
/// have replicas.
pub struct Replicas {
    rules: Rules,
    budget: u64,
    demand: Option<super::hot::Demand>,
    held: Mutex<Held>,
    /// One copy of a key at a time.
    pub(crate) pulls: crate::keyed::Keyed<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("rules", &self.rules)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Replicas {
    /// Replicas by `rules` and, with `hot`, by demand, within `budget` bytes of this
    /// member's memory.
    pub fn new(rules: Vec<ReplicaRule>, budget: u64, hot: Option<super::hot::HotRule>) -> Self {
        Self {
            rules: Rules {
                of_flags: rules,
                of_namespaces: RwLock::default(),
                changes: tokio::sync::watch::Sender::new(0),
            },
            budget,
            demand: hot.map(super::hot::Demand::new),
            held: Mutex::default(),
            pulls: Default::default(),
        }
    }

    /// Which keys have replicas.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The count of this member's keys' reads, when keys become hot by demand.
    pub fn demand(&self) -> Option<&super::hot::Demand> {
        self.demand.as_ref()
    }

    /// As the owner of `key` of namespace `ns` (`None`: the default one): counts `n` reads
    /// of it (when keys become hot by demand and no rule replicates it already).
    pub fn demanded(&self, ns: Option<&str>, key: &str, n: u64) {
        if let Some(d) = &self.demand {
            if self.rules.count(ns, key, None) == 1 {
                d.read(&super::scope::scoped(ns, key), n);
            }
        }
    }

    /// As one of the replicas of `key` of namespace `ns`: a read served from it, told its
    /// owner at the next renewal (when keys become hot by demand).
    pub fn served(&self, ns: Option<&str>, key: &str) {
        if self.demand.is_some() {
            let name = super::scope::scoped(ns, key).into_owned();
            *self.held().served.entry(name).or_default() += 1;
        }
    }

    /// The reads of the key `name` names ([`super::scope`]) served here since the last
    /// call.
    pub fn take_served(&self, name: &str) -> u64 {
        self.held().served.remove(name).unwrap_or(0)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The version of `key` to serve here, if a replica of it copied from owner
    /// `owner_tag` is held and its lease runs, and until when the lease runs.
    pub fn live(&self, key: &str, owner_tag: u64) -> Option<(u64, Instant)> {
        let now = Instant::now();
        let mut held = self.held();
        let r = held.by_key.get_mut(key)?;
        (r.owner_tag == owner_tag && now < r.until).then(|| {
            r.read_at = now;
            (r.version, r.until)
        })
    }

    /// The replica of `key` held here from owner `owner_tag`, its lease running or not:
    /// what a renewal names.
    pub fn held_from(&self, key: &str, owner_tag: u64) -> Option<Replica> {
        let held = self.held();
        let r = held.by_key.get(key)?;
        (r.owner_tag == owner_tag).then_some(*r)
    }

    /// Whether `bytes` more fit in the budget, counting what `key`'s replica now takes as
    /// freed.
    pub fn room_for(&self, key: &str, bytes: u64) -> bool {
        fits(&self.held(), self.budget, key, bytes)
    }

    /// Takes room for a copy of `key` of `bytes` on its way, when it fits: copies of
    /// several keys at once cannot each find room that only one has. Given back when the
    /// [`Room`] drops (once the copy is kept, or not).
    pub fn reserve(&self, key: &str, bytes: u64) -> Option<Room<'_>> {
        let mut held = self.held();
        if !fits(&held, self.budget, key, bytes) {
            return None;
        }
        held.reserved += bytes;
        Some(Room {
            replicas: self,
            bytes,
        })
    }

    /// The number to give [`Replicas::keep`] for a copy of `key` about to be asked for.
    pub fn ticket(&self, key: &str) -> u64 {
        self.held().revoked.get(key).map_or(0, |(n, _)| *n)
    }

    /// Keeps `replica` as `key`'s (its lease renewed when it is the version held), when no
    /// revocation of `key` came since `ticket` was taken. A replica whose lease ended on
    /// the way (a large frame over a busy link) is kept but not served: a renewal (a
    /// `304`, no bytes) makes it live.
    pub fn keep(&self, key: &str, ticket: u64, replica: Replica) -> Kept {
        let mut held = self.held();
        let revoked = held.revoked.get(key).map_or(0, |(n, _)| *n);
        if revoked != ticket {
            return Kept::Revoked;
        }
        let old = held.by_key.insert(key.to_owned(), replica);
        held.bytes += replica.bytes;
        let Some(old) = old else {
            return Kept::Replacing(None);
        };
        held.bytes -= old.bytes;
        Kept::Replacing((old.version != replica.version).then_some(old.version))
    }

    /// Drops the replicas of `keys` (their owner writes them): what to drop from memory
    /// (key and version).
    pub(super) fn revoke<'k>(&self, keys: impl IntoIterator<Item = &'k str>) -> Vec<(String, u64)> {
        let now = Instant::now();
        let mut held = self.held();
        if held.revoked.len() >= 4096 {
            held.revoked
                .retain(|_, (_, at)| now.duration_since(*at) < REMEMBER_REVOKED);
        }
        let mut out = Vec::new();
        for key in keys {
            held.revocations += 1;
            let n = held.revocations;
            held.revoked.insert(key.to_owned(), (n, now));
            if let Some(r) = held.by_key.remove(key) {
                held.bytes -= r.bytes;
                out.push((key.to_owned(), r.version));
            }
        }
        out
    }

    /// Drops the replicas not read for [`IDLE`], and those `still_held` refuses (their
    /// owner changed, or this member is no longer among the key's holders): what to drop
    /// from memory.
    pub fn sweep(&self, still_held: impl Fn(&str, u64) -> bool) -> Vec<(String, u64)> {
        let now = Instant::now();
        let mut held = self.held();
        let gone: Vec<String> = held
            .by_key
            .iter()
            .filter(|(k, r)| now.duration_since(r.read_at) > IDLE || !still_held(k, r.owner_tag))
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for key in gone {
            held.served.remove(&key);
            if let Some(r) = held.by_key.remove(&key) {
                held.bytes -= r.bytes;
                out.push((key, r.version));
            }
        }
        out
    }

    /// How many replicas are held here, and their bytes.
    pub fn usage(&self) -> (usize, u64) {
        let held = self.held();
        (held.by_key.len(), held.bytes)
    }
}

/// Which keys have replicas: `--cluster-replicas`'s rules (the default namespace's) and
/// the namespaces file's (`replicas=`, replaced each time the file is read).
#[derive(Debug)]
pub struct Rules {
    of_flags: Vec<ReplicaRule>,
    of_namespaces: RwLock<Vec<ReplicaRule>>,
    /// Counts the changes of the namespaces file's rules: a long poll of the view ends
    /// on one, so clients learn new rules at once.
    changes: tokio::sync::watch::Sender<u64>,
}

impl Rules {
    /// How many members hold `key` of namespace `ns` (`None`: the default one; 1: no
    /// replicas), by the rules and the hot keys its `owner` lists.
    pub fn count(&self, ns: Option<&str>, key: &str, owner: Option<&ClusterMember>) -> usize {
        match ns {
            None => rasa_openapi::cluster::holder_count(None, key, &self.of_flags, owner),
            Some(_) => {
                let rules = self.of_namespaces.read().unwrap_or_else(|e| e.into_inner());
                rasa_openapi::cluster::holder_count(ns, key, &rules, owner)
            }
        }
    }

    /// Every rule in force: `--cluster-replicas`'s, then the namespaces file's.
    pub fn all(&self) -> Vec<ReplicaRule> {
        let named = self.of_namespaces.read().unwrap_or_else(|e| e.into_inner());
        self.of_flags.iter().chain(named.iter()).cloned().collect()
    }

    /// The namespaces file's rules, as it was read (again).
    pub fn set_namespaces(&self, rules: Vec<ReplicaRule>) {
        let mut named = self
            .of_namespaces
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if *named != rules {
            *named = rules;
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// Told each time the rules change (a reload of the namespaces file that changed
    /// them), from now on.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// The members holding `key` when `n` do (its first `n` in placement order), by
/// `cluster`'s view.
pub fn holders(cluster: &Cluster, key: &str, n: usize) -> Vec<ClusterMember> {
    let view = cluster.view.borrow();
    rasa_openapi::cluster::placement(key, &view.members)
        .into_iter()
        .take(n)
        .cloned()
        .collect()
}

/// Whether this member is one of `key`'s `n` holders but not its owner, by its view.
pub fn is_replica(cluster: &Cluster, key: &str, n: usize) -> bool {
    n > 1
        && !cluster.fenced()
        && holders(cluster, key, n)
            .iter()
            .skip(1)
            .any(|m| m.node_id == cluster.node_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(version: u64, bytes: u64) -> Replica {
        let now = Instant::now();
        Replica {
            owner_tag: 7,
            version,
            bytes,
            until: now + Duration::from_secs(1),
            read_at: now,
        }
    }

    #[test]
    fn replicas_stay_within_their_budget_and_a_revocation_frees_them() {
        let r = Replicas::new(
            vec![ReplicaRule {
                namespace: None,
                prefix: "ckpt/".into(),
                count: 3,
            }],
            100,
            None,
        );
        assert_eq!(r.rules().count(None, "ckpt/a", None), 3);
        assert_eq!(r.rules().count(None, "other", None), 1);
        assert_eq!(
            r.rules().count(Some("train"), "ckpt/a", None),
            1,
            "another namespace"
        );
        r.rules().set_namespaces(vec![ReplicaRule {
            namespace: Some("train".into()),
            prefix: String::new(),
            count: 2,
        }]);
        assert_eq!(r.rules().count(Some("train"), "other", None), 2);
        assert_eq!(r.rules().count(Some("web"), "other", None), 1);
        assert_eq!(r.rules().count(None, "other", None), 1);
        assert_eq!(r.rules().all().len(), 2);
        assert!(r.room_for("ckpt/a", 60));
        assert_eq!(r.keep("ckpt/a", 0, replica(1, 60)), Kept::Replacing(None));
        assert!(!r.room_for("ckpt/b", 60), "60 + 60 > 100");
        assert!(r.room_for("ckpt/a", 90), "the replica it replaces is freed");
        let on_its_way = r.reserve("ckpt/c", 30).expect("30 fit beside 60");
        assert!(
            r.reserve("ckpt/d", 30).is_none(),
            "60 + 30 on its way + 30 > 100"
        );
        drop(on_its_way);
        assert!(r.room_for("ckpt/d", 30), "given back");
        assert_eq!(
            r.keep("ckpt/a", 0, replica(2, 90)),
            Kept::Replacing(Some(1))
        );
        assert_eq!(r.usage(), (1, 90));
        assert_eq!(r.live("ckpt/a", 7).map(|(v, _)| v), Some(2));
        assert_eq!(r.live("ckpt/a", 9), None, "another owner's tag");
        let before = (r.ticket("ckpt/a"), r.ticket("ckpt/b"));
        assert_eq!(r.revoke(["ckpt/a"]), vec![("ckpt/a".to_owned(), 2)]);
        assert_eq!(r.usage(), (0, 0));
        assert_eq!(r.live("ckpt/a", 7), None);
        assert_eq!(
            r.keep("ckpt/a", before.0, replica(3, 10)),
            Kept::Revoked,
            "a copy asked for before its key's revocation"
        );
        assert_eq!(
            r.keep("ckpt/b", before.1, replica(3, 10)),
            Kept::Replacing(None),
            "another key's revocation does not matter"
        );
    }
}
