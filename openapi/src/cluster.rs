//! The cluster's wire types (`GET /v1/cluster`, the member records in etcd) and the
//! placement function every SDK must compute identically.
//!
//! ## Placement: rendezvous (highest-random-weight) hashing
//!
//! For a key `k` and a member with node id `n` and weight `w` (≥ 1):
//!
//! ```text
//! h      = xxh3_64(k, seed = xxh3_64(n, seed = 0))   // XXH3 64-bit over UTF-8 bytes
//! u      = ((h >> 11) + 0.5) / 2^53                  // in (0, 1)
//! score  = w / -ln(u)                                // IEEE-754 double
//! ```
//!
//! (In Python: `xxhash.xxh3_64_intdigest(k, seed=xxhash.xxh3_64_intdigest(n))`.)
//!
//! Members are ordered by `score` descending, then by `h` descending, then by node id
//! ascending; only `serving` members take part. The first is the key's **owner**, the
//! next its second choice (where a client goes when the owner does not answer, and where
//! a new owner looks first after a membership change). With equal weights the order is
//! that of `h` alone. Test vectors are in `docs/design/cluster.md` and in this module's tests.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::FabricInfo;

/// The header a gateway adds to a request it forwards to the key's owner (or, when the
/// owner does not answer, to the key's next choice): the receiver serves the request
/// itself, whatever its own view says, so differing views can never make requests loop.
/// SDKs do not set it: a member they ask instead of the owner passes the request on.
pub const HOP_HEADER: &str = "rasa-hop";

/// The milliseconds a client's call has left, on each request it sends: a member passing
/// a read on to an owner that does not answer gives up in time to ask the key's next
/// choice within the caller's timeout.
pub const TIMEOUT_HEADER: &str = "rasa-timeout-ms";

/// The header a member adds when it asks another for a key it now owns (after a
/// membership change): answer from memory only, never from the origin, and add the
/// origin's entity tag (`Rasa-Origin-ETag`) and `Age` to the answer.
pub const PEER_FILL_HEADER: &str = "rasa-peer-fill";

/// The response header that carries the origin's entity tag of a version, in answers to
/// [`PEER_FILL_HEADER`] requests.
pub const ORIGIN_ETAG_HEADER: &str = "rasa-origin-etag";

/// A member's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Takes part in placement.
    Serving,
    /// Leaving: serves what it holds (HTTP and one-sided) until its last lease ends, but
    /// owns no key.
    Draining,
}

/// One gateway of a cluster, as it registers itself in etcd.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ClusterMember {
    /// Stable node id (`--node-id`); placement hashes it, so restarts move no key.
    #[schema(example = "cache-a")]
    pub node_id: String,
    /// The gateway process's random incarnation (16 hex digits), new at every start.
    #[schema(example = "5f3a9c0e8b7d6a21")]
    pub incarnation: String,
    /// The base URL other gateways and clients use (`--advertise-url`).
    #[schema(example = "http://10.0.0.7:8080")]
    pub url: String,
    /// `serving` or `draining`.
    pub state: MemberState,
    /// Placement weight (default 1): a member of weight 2 owns about twice the keys.
    pub weight: u32,
    /// How clients reach this member's fast path (as `GET /v1/fabric` on it answers).
    pub fabric: FabricInfo,
    /// Where its S3 listener is reached (`--s3-advertise-url`), when it runs one: every
    /// member serves S3, forwarding keyed requests to the key's owner's listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "http://10.0.0.7:9000")]
    pub s3_url: Option<String>,
    /// Keys this member owns that became hot by demand (`--cluster-hot-reads`): each is
    /// held by the first `count` members of its placement, as if a replica rule named it.
    /// Only the key's owner's list counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hot: Vec<HotKey>,
}

/// A key its owner found hot: read more often than `--cluster-hot-reads` per second.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HotKey {
    /// The namespace of the key; absent: the default namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "train")]
    pub namespace: Option<String>,
    /// The key.
    #[schema(example = "checkpoints/shard-0")]
    pub key: String,
    /// How many members hold it, its owner included (≥ 2).
    #[schema(example = 3)]
    pub count: u32,
}

/// The members a gateway knows, at an etcd revision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ClusterView {
    /// Whether the gateway runs in a cluster (`--cluster`). A single gateway answers
    /// `false`, with itself as the only member.
    pub enabled: bool,
    /// The cluster's name (`--cluster-name`); empty for a single gateway.
    pub name: String,
    /// The etcd revision of this view; `?after=` it waits for the next change.
    pub revision: i64,
    /// The node that answered.
    pub this_node: String,
    /// Every registered member, serving or draining, in node id order.
    pub members: Vec<ClusterMember>,
    /// Keys served by more than their owner (`--cluster-replicas`, and `replicas=` in the
    /// namespaces file): a key under one of these prefixes of its namespace is held by
    /// the first `count` members of its placement order, each of which serves reads of
    /// it (HTTP and one-sided) from its own memory. Clients spread their reads of such a
    /// key over those members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaRule>,
}

/// Keys under `prefix` of a namespace (the default one when `namespace` is absent) are
/// held by `count` members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReplicaRule {
    /// The namespace the rule is for; absent: the default namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "train")]
    pub namespace: Option<String>,
    /// The keys' prefix (empty: every key).
    #[schema(example = "checkpoints/")]
    pub prefix: String,
    /// How many members hold each key, its owner included (≥ 1).
    #[schema(example = 3)]
    pub count: u32,
}

/// How many members hold `key` of namespace `ns` (`None`: the default one) under `rules`
/// (the longest matching prefix of the namespace's rules wins; 1 when none matches).
pub fn replica_count(ns: Option<&str>, key: &str, rules: &[ReplicaRule]) -> usize {
    rules
        .iter()
        .filter(|r| r.namespace.as_deref() == ns && key.starts_with(&r.prefix))
        .max_by_key(|r| r.prefix.len())
        .map_or(1, |r| r.count.max(1) as usize)
}

/// How many members hold `key` of namespace `ns`: by `rules`, or by the list of hot keys
/// of its `owner` (the first of its [`placement`], which callers have at hand),
/// whichever names more.
pub fn holder_count(
    ns: Option<&str>,
    key: &str,
    rules: &[ReplicaRule],
    owner: Option<&ClusterMember>,
) -> usize {
    let by_rule = replica_count(ns, key, rules);
    let hot = owner
        .and_then(|o| {
            o.hot
                .iter()
                .find(|h| h.key == key && h.namespace.as_deref() == ns)
        })
        .map_or(1, |h| h.count.max(1) as usize);
    by_rule.max(hot)
}

/// The 64-bit rendezvous hash of `key` on the node `node_id` (`h` above).
pub fn rendezvous_hash(key: &str, node_id: &str) -> u64 {
    xxh3_64_with_seed(key.as_bytes(), xxh3_64(node_id.as_bytes()))
}

/// The weighted score of a hash (`score` above).
pub fn rendezvous_score(hash: u64, weight: u32) -> f64 {
    let u = ((hash >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight.max(1)) / -u.ln()
}

/// How `a` ranks against `b` for one key: the better first (`Less`).
fn better(a: &(f64, u64, &ClusterMember), b: &(f64, u64, &ClusterMember)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0)
        .then(b.1.cmp(&a.1))
        .then_with(|| a.2.node_id.cmp(&b.2.node_id))
}

/// The serving members with their score and hash for `key`. With equal weights the
/// score (a logarithm) is left out: it orders exactly as the hash does.
fn scored<'a, 'k>(
    key: &'k str,
    members: &'a [ClusterMember],
) -> impl Iterator<Item = (f64, u64, &'a ClusterMember)> + use<'a, 'k> {
    let serving = |m: &&ClusterMember| m.state == MemberState::Serving;
    let first = members.iter().find(serving).map_or(1, |m| m.weight);
    let weighted = members.iter().filter(serving).any(|m| m.weight != first);
    members.iter().filter(serving).map(move |m| {
        let h = rendezvous_hash(key, &m.node_id);
        let score = if weighted {
            rendezvous_score(h, m.weight)
        } else {
            0.0
        };
        (score, h, m)
    })
}

/// `members` in `key`'s order of preference (owner first), serving members only.
pub fn placement<'a>(key: &str, members: &'a [ClusterMember]) -> Vec<&'a ClusterMember> {
    let mut ranked: Vec<(f64, u64, &ClusterMember)> = scored(key, members).collect();
    ranked.sort_by(better);
    ranked.into_iter().map(|(_, _, m)| m).collect()
}

/// The owner of `key` among `members`: the first in [`placement`] order (one pass, no
/// allocation).
pub fn owner<'a>(key: &str, members: &'a [ClusterMember]) -> Option<&'a ClusterMember> {
    scored(key, members).min_by(better).map(|(_, _, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, weight: u32) -> ClusterMember {
        ClusterMember {
            node_id: id.into(),
            incarnation: "0000000000000001".into(),
            url: format!("http://{id}"),
            state: MemberState::Serving,
            weight,
            s3_url: None,
            hot: Vec::new(),
            fabric: FabricInfo {
                enabled: false,
                provider: None,
                address: None,
                address_format: None,
                virtual_addressing: None,
                incarnation: "0000000000000001".into(),
                endpoints: Vec::new(),
                host: None,
            },
        }
    }

    /// The vectors published in docs/design/cluster.md: other SDKs check themselves against them.
    #[test]
    fn published_vectors() {
        assert_eq!(rendezvous_hash("", ""), 0x412f_1275_e100_17f3);
        assert_eq!(
            rendezvous_hash("photos/cat.jpg", "node-a"),
            0xa73d_497f_75da_28fb
        );
        assert_eq!(rendezvous_hash("k/1", "node-a"), 0x9d48_7504_2501_6a35);
        let three = [
            member("node-a", 1),
            member("node-b", 1),
            member("node-c", 1),
        ];
        let order = |k: &str| -> Vec<&str> {
            placement(k, &three)
                .iter()
                .map(|m| m.node_id.as_str())
                .collect()
        };
        assert_eq!(order("photos/cat.jpg"), ["node-a", "node-c", "node-b"]);
        assert_eq!(order("k/1"), ["node-b", "node-c", "node-a"]);
        assert_eq!(order("k/2"), ["node-c", "node-a", "node-b"]);
        assert_eq!(order("k/3"), ["node-a", "node-b", "node-c"]);
    }

    #[test]
    fn one_of_n_keys_move_when_a_member_leaves_or_joins() {
        let ten: Vec<ClusterMember> = (0..10).map(|i| member(&format!("n{i}"), 1)).collect();
        let nine = &ten[..9];
        let keys: Vec<String> = (0..20_000).map(|i| format!("k/{i}")).collect();
        let moved = keys
            .iter()
            .filter(|k| owner(k, &ten).unwrap().node_id != owner(k, nine).unwrap().node_id)
            .count();
        // Only n9's keys move (≈ 1/10), and all of them do.
        let n9 = keys
            .iter()
            .filter(|k| owner(k, &ten).unwrap().node_id == "n9")
            .count();
        assert_eq!(moved, n9);
        assert!((1_600..2_400).contains(&moved), "{moved} of 20000 moved");
    }

    #[test]
    fn weights_and_draining_members() {
        let mut ms = vec![member("a", 1), member("b", 3)];
        let keys: Vec<String> = (0..20_000).map(|i| format!("k{i}")).collect();
        let b = keys
            .iter()
            .filter(|k| owner(k, &ms).unwrap().node_id == "b")
            .count();
        assert!(
            (14_000..16_000).contains(&b),
            "weight 3 of 4 owns {b} of 20000"
        );
        ms[1].state = MemberState::Draining;
        assert!(keys.iter().all(|k| owner(k, &ms).unwrap().node_id == "a"));
        ms[0].state = MemberState::Draining;
        assert!(owner("k", &ms).is_none());
    }
}
