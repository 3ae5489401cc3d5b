//! Clusters: which members there are (learnt from `GET /v1/cluster` and followed by long
//! polls), which member owns a key (rendezvous hashing, the same function the gateways
//! use), and failing over to a key's next choice when a member does not answer.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use rasa_openapi::{ClusterMember, ClusterView, ReplicaRule};

use crate::stats::Counters;
use crate::{Client, ClientBuilder, Error};

mod calls;
mod split;
pub(crate) use calls::{on_owner, on_owner_write, per_owner, per_owner_write};

/// How long a member that did not answer is tried last.
const SUSPECT_FOR: Duration = Duration::from_secs(10);
/// How long one long poll for a membership change waits.
const POLL_WAIT: Duration = Duration::from_secs(25);
/// How long a member that left the view is still tried after the view's own members (and
/// asked for the next view): a view read while etcd was away can list too few members.
const DEPARTED_FOR: Duration = Duration::from_secs(30);

/// What a cluster client knows of the cluster.
pub(crate) struct Topology {
    seeds: Vec<String>,
    template: ClientBuilder,
    http: reqwest::Client,
    counters: Counters,
    /// The descriptors every member's client holds: one per key among them all.
    held: Arc<crate::cache::Held>,
    /// Whether the seeds are members of a cluster, once a seed has said so.
    clustered: tokio::sync::OnceCell<bool>,
    state: RwLock<State>,
    /// Told when a member becomes a suspect: the follower stops waiting on a long poll to
    /// it and asks another.
    suspected: Arc<tokio::sync::Notify>,
    /// This client's name among the readers of keys with replicas (random, fixed for the
    /// client's life): which of a key's holders it reads the key from is the rendezvous
    /// hash of the key on this name, so one reader's keys spread over the holders too.
    reader: String,
}

#[derive(Default)]
struct State {
    revision: i64,
    members: Vec<ClusterMember>,
    /// A client per member, by node id; replaced when the member's incarnation changes
    /// (its descriptors and fabric endpoint named the old process).
    nodes: HashMap<String, (String, Client)>,
    /// Members that did not answer, until when they are tried last.
    suspects: HashMap<String, Instant>,
    /// Members the last views dropped, still tried after the view's for [`DEPARTED_FOR`]:
    /// a view is one member's word, and right after an etcd outage may list only the
    /// members registered again so far — one, say, and none to ask when it goes.
    departed: HashMap<String, Departed>,
    /// Keys held by more than their owner (`--cluster-replicas`), as the view says.
    replicas: Vec<ReplicaRule>,
}

impl State {
    /// Whether `node` is a suspect at `now`.
    fn suspect(&self, node: &str, now: Instant) -> bool {
        self.suspects.get(node).is_some_and(|until| *until > now)
    }

    /// The members a view dropped that are still tried at `now`.
    fn departed(&self, now: Instant) -> impl Iterator<Item = (&String, &Departed)> {
        self.departed.iter().filter(move |(_, d)| d.until > now)
    }
}

/// A member a view dropped: its last record and client, tried until `until`.
struct Departed {
    member: ClusterMember,
    client: Client,
    until: Instant,
}

/// Why a view could not be read from a seed.
enum Fetch {
    /// The gateway answered that this client cannot use its cluster API (an older gateway,
    /// or a token without the `read` scope): the client talks to the seed.
    NoCluster,
    /// No answer: try another.
    Failed,
}

impl Topology {
    pub(crate) fn new(
        seeds: Vec<String>,
        template: ClientBuilder,
        http: reqwest::Client,
        counters: Counters,
        held: Arc<crate::cache::Held>,
    ) -> Self {
        Self {
            seeds,
            template,
            http,
            counters,
            held,
            clustered: tokio::sync::OnceCell::new(),
            state: RwLock::default(),
            suspected: Arc::default(),
            reader: {
                use std::hash::{BuildHasher, Hasher};
                let random = std::collections::hash_map::RandomState::new().build_hasher();
                format!("{:016x}", random.finish())
            },
        }
    }

    /// Whether the seeds are members of a cluster: asks them once (a seed that does not
    /// answer leaves the question open for the next call).
    pub(crate) async fn discover(self: &Arc<Self>) -> bool {
        let found = self
            .clustered
            .get_or_try_init(|| async {
                for seed in &self.seeds {
                    match fetch(&self.http, seed, None, self.template.timeouts()).await {
                        Ok(view) if view.enabled => {
                            self.apply(view);
                            let suspected = Arc::clone(&self.suspected);
                            tokio::spawn(follow(Arc::downgrade(self), suspected));
                            return Ok(true);
                        }
                        Ok(_) | Err(Fetch::NoCluster) => return Ok(false),
                        Err(Fetch::Failed) => continue,
                    }
                }
                Err(())
            })
            .await;
        found.copied().unwrap_or(false)
    }

    fn apply(&self, view: ClusterView) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        if view.revision < st.revision {
            return;
        }
        let mut nodes = HashMap::new();
        for m in &view.members {
            let kept = st
                .nodes
                .remove(&m.node_id)
                .filter(|(inc, c)| *inc == m.incarnation && c.inner.http.endpoint == m.url);
            let client = match kept {
                Some((_, c)) => c,
                None => {
                    tracing::debug!(node = %m.node_id, url = %m.url, incarnation = %m.incarnation, "cluster member (new, or a new process)");
                    self.template.assemble(
                        &m.url,
                        self.http.clone(),
                        self.counters.clone(),
                        None,
                        (Arc::clone(&self.held), Some(&m.node_id)),
                    )
                }
            };
            nodes.insert(m.node_id.clone(), (m.incarnation.clone(), client));
        }
        // Members this view drops are kept a while, tried after its own.
        let now = Instant::now();
        let old = std::mem::take(&mut st.members);
        for member in old {
            if let Some((_, client)) = st.nodes.remove(&member.node_id) {
                let until = now + DEPARTED_FOR;
                let node = member.node_id.clone();
                st.departed.insert(
                    node,
                    Departed {
                        member,
                        client,
                        until,
                    },
                );
            }
        }
        st.departed
            .retain(|node, d| d.until > now && !nodes.contains_key(node));
        st.nodes = nodes;
        st.revision = view.revision;
        st.members = view.members;
        st.replicas = view.replicas;
        self.counters
            .members(st.members.iter().map(|m| m.node_id.clone()).collect());
    }

    /// `key`'s members in order of preference: serving members by rendezvous hashing,
    /// then members that left the view a moment ago (by the same hashing), suspects last.
    /// A member that is not the key's owner passes a request on to it, so asking one the
    /// view no longer lists is safe; it is only asked when the view's members do not
    /// answer. For a `read` of a key with replicas, the key's holders come first, from the
    /// one this client reads the key from (by [`Topology::reader`]): each serves the key
    /// from its own memory, so readers, and one reader's keys, spread over them. With the
    /// order, how many of its first members are holders that are not suspects (at least
    /// 1: a key without replicas has its owner).
    fn order(&self, key: &str, read: bool) -> (Vec<(String, Client)>, usize) {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let placement = rasa_openapi::cluster::placement(key, &st.members);
        let owner = placement.first().copied();
        let mut out: Vec<(String, Client)> = placement
            .into_iter()
            .filter_map(|m| {
                let (_, c) = st.nodes.get(&m.node_id)?;
                Some((m.node_id.clone(), c.clone()))
            })
            .collect();
        let holders = rasa_openapi::cluster::holder_count(
            self.template.namespace.as_deref(),
            key,
            &st.replicas,
            owner,
        )
        .min(out.len());
        let mut holding: Vec<String> = Vec::new();
        if read && holders > 1 {
            let hash = rasa_openapi::cluster::rendezvous_hash(key, &self.reader);
            out[..holders].rotate_left((hash % holders as u64) as usize);
            holding = out[..holders].iter().map(|(id, _)| id.clone()).collect();
        }
        let departed: Vec<ClusterMember> =
            st.departed(now).map(|(_, d)| d.member.clone()).collect();
        for m in rasa_openapi::cluster::placement(key, &departed) {
            if let Some(d) = st.departed.get(&m.node_id) {
                out.push((m.node_id.clone(), d.client.clone()));
            }
        }
        out.sort_by_key(|(id, _)| st.suspect(id, now));
        let healthy = out
            .iter()
            .take_while(|(id, _)| holding.contains(id) && !st.suspect(id, now))
            .count();
        (out, healthy.max(1))
    }

    /// The member to send `key` to first (a `read`: for a key with replicas, the holder
    /// this client reads it from).
    pub(crate) fn first(&self, key: &str, read: bool) -> Option<Client> {
        self.order(key, read).0.into_iter().next().map(|(_, c)| c)
    }

    fn suspect(&self, node: &str) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        st.suspects
            .insert(node.to_owned(), Instant::now() + SUSPECT_FOR);
        drop(st);
        self.suspected.notify_waiters();
    }

    /// Whether the member at `url` is a suspect now.
    fn suspected_at(&self, url: &str) -> bool {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let departed = st.departed(now).map(|(_, d)| &d.member);
        for m in st.members.iter().chain(departed) {
            if m.url == url && st.suspect(&m.node_id, now) {
                return true;
            }
        }
        false
    }

    /// `keys` grouped by the member each goes to first (indices into `keys`); `None` when
    /// some key has no serving owner. For a `read`, a key with replicas goes to the holder
    /// with the fewest of the batch's keys so far (the one this client reads it from when
    /// several have as few, [`split::balanced`]): a fleet loading a checkpoint in batches
    /// loads from every holder evenly, not as its keys happen to hash.
    pub(crate) fn by_owner(&self, keys: &[&str], read: bool) -> Option<Vec<(Client, Vec<usize>)>> {
        let orders: Vec<(Vec<(String, Client)>, usize)> =
            keys.iter().map(|k| self.order(k, read)).collect();
        let choices: Vec<Vec<&str>> = orders
            .iter()
            .map(|(o, holders)| o.iter().take(*holders).map(|(id, _)| id.as_str()).collect())
            .collect();
        if choices.iter().any(Vec::is_empty) {
            return None;
        }
        let mut groups: Vec<(Client, Vec<usize>)> = Vec::new();
        for (i, pick) in split::balanced(&choices).into_iter().enumerate() {
            let member = &orders[i].0[pick].1;
            match groups
                .iter_mut()
                .find(|(c, _)| Arc::ptr_eq(&c.inner, &member.inner))
            {
                Some((_, idx)) => idx.push(i),
                None => groups.push((member.clone(), vec![i])),
            }
        }
        Some(groups)
    }

    pub(crate) fn node(&self, node: &str) -> Option<Client> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.nodes.get(node).map(|(_, c)| c.clone())
    }

    /// A client per member (serving or draining: both hold values).
    pub(crate) fn all(&self) -> Vec<Client> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        st.members
            .iter()
            .filter_map(|m| st.nodes.get(&m.node_id).map(|(_, c)| c.clone()))
            .collect()
    }

    /// The view this client holds: its revision, and whom to ask for the next one — the
    /// view's members, then members that left it a moment ago, then the seeds; suspects
    /// after the rest.
    fn where_to_ask(&self) -> (i64, Vec<String>) {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut urls: Vec<(bool, String)> = Vec::new();
        let members = st
            .members
            .iter()
            .map(|m| (m.node_id.as_str(), m.url.clone()));
        let departed = (st.departed(now)).map(|(node, d)| (node.as_str(), d.member.url.clone()));
        for (node, url) in members.chain(departed) {
            urls.push((st.suspect(node, now), url));
        }
        urls.extend(self.seeds.iter().map(|s| (false, s.clone())));
        urls.sort_by_key(|(suspect, _)| *suspect);
        let mut seen = std::collections::HashSet::new();
        let urls = (urls.into_iter())
            .filter_map(|(_, url)| seen.insert(url.clone()).then_some(url))
            .collect();
        (st.revision, urls)
    }
}

/// `GET {base}/v1/cluster` (a long poll past `after`).
async fn fetch(
    http: &reqwest::Client,
    base: &str,
    after: Option<i64>,
    timeout: Duration,
) -> Result<ClusterView, Fetch> {
    let mut req = http.get(format!("{base}/v1/cluster"));
    let limit = match after {
        Some(rev) => {
            req = req.query(&[("after", rev), ("wait", POLL_WAIT.as_secs() as i64)]);
            POLL_WAIT + Duration::from_secs(10)
        }
        None => timeout,
    };
    let resp = req.timeout(limit).send().await.map_err(|e| {
        if e.is_timeout() && after.is_none() {
            // Discovery waited the whole request timeout: the rest of the call does not
            // wait for this gateway again.
            let kind = if e.is_connect() {
                crate::TimeoutKind::Connect
            } else {
                crate::TimeoutKind::Request
            };
            crate::timeouts::mark_stalled(base, kind, timeout);
        }
        Fetch::Failed
    })?;
    // No cluster API (an older gateway), or not for this token (a write-only token may not
    // read the member list): talk to the seed, which forwards what it does not own.
    if resp.status().is_client_error() {
        return Err(Fetch::NoCluster);
    }
    if !resp.status().is_success() {
        return Err(Fetch::Failed);
    }
    resp.json().await.map_err(|_| Fetch::Failed)
}

/// Follows membership changes for as long as the client lives. A long poll waits on one
/// member; when that member becomes a suspect (a request to it went unanswered) the poll
/// is dropped and the next member asked, so a frozen member does not hide the view.
async fn follow(topology: Weak<Topology>, suspected: Arc<tokio::sync::Notify>) {
    loop {
        let Some(t) = topology.upgrade() else { return };
        let (revision, urls) = t.where_to_ask();
        let http = t.http.clone();
        let timeout = t.template.timeouts();
        drop(t);
        let mut got = None;
        for url in &urls {
            let poll = fetch(&http, url, Some(revision), timeout);
            tokio::pin!(poll);
            let answer = loop {
                let told = suspected.notified();
                tokio::select! {
                    answer = &mut poll => break answer.ok(),
                    () = told => {
                        let Some(t) = topology.upgrade() else { return };
                        if t.suspected_at(url) {
                            break None;
                        }
                    }
                }
            };
            if let Some(view) = answer {
                got = Some(view);
                break;
            }
        }
        let Some(t) = topology.upgrade() else { return };
        match got {
            Some(view) => t.apply(view),
            None => {
                drop(t);
                // No member answers: try again shortly (the requests themselves fail over).
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

impl Error {
    /// Whether nothing of the request reached the member: no connection was made.
    fn nothing_sent(&self) -> bool {
        match self {
            Error::Http(e) => e.is_connect(),
            Error::Timeout { kind, .. } => *kind == crate::TimeoutKind::Connect,
            _ => false,
        }
    }

    /// Whether the member did not answer (rather than answered no).
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            Error::Http(e) => {
                e.is_connect() || e.is_timeout() || e.is_request() || e.is_body() || cut_short(e)
            }
            Error::Timeout { .. } => true,
            _ => false,
        }
    }
}

/// Whether `e` is an answer whose body the connection ended before it was whole (a member
/// cut off mid-answer): reqwest calls that a decode error, as it does JSON that does not
/// parse — which is an answer, not its absence.
fn cut_short(e: &reqwest::Error) -> bool {
    use std::error::Error as _;
    if !e.is_decode() {
        return false;
    }
    let mut source = e.source();
    while let Some(s) = source {
        if s.is::<serde_json::Error>() {
            return false;
        }
        source = s.source();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The error of a JSON read of a member that answers `raw` and closes the connection.
    async fn json_error(raw: &'static [u8]) -> reqwest::Error {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = s.read(&mut request).await;
            s.write_all(raw).await.unwrap();
        });
        let tls = crate::tls::client_config(false, None).unwrap();
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .build();
        let resp = http
            .unwrap()
            .get(format!("http://{addr}/"))
            .send()
            .await
            .unwrap();
        resp.json::<serde_json::Value>().await.unwrap_err()
    }

    #[tokio::test]
    async fn an_answer_cut_short_is_no_answer_and_bad_json_is_one() {
        let cut = json_error(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"a\":").await;
        assert!(
            Error::Http(cut).is_unreachable(),
            "cut short: the next member is asked"
        );
        let bad = json_error(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc").await;
        assert!(
            !Error::Http(bad).is_unreachable(),
            "an answer, if a bad one"
        );
    }
}
