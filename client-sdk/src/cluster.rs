//! Clusters: which members there are (learnt from `GET /v1/cluster` and followed by long
//! polls), which member owns a key (rendezvous hashing, the same function the gateways
//! use), and failing over to a key's next choice when a member does not answer.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use rasa_openapi::{ClusterMember, ClusterView};

use crate::stats::Counters;
use crate::{Client, ClientBuilder, Error};

/// How long a member that did not answer is tried last.
const SUSPECT_FOR: Duration = Duration::from_secs(10);
/// How many members one request tries, owner first.
const MAX_TRIES: usize = 3;
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
                        Arc::clone(&self.held),
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
        self.counters
            .members(st.members.iter().map(|m| m.node_id.clone()).collect());
    }

    /// `key`'s members in order of preference: serving members by rendezvous hashing,
    /// then members that left the view a moment ago (by the same hashing), suspects last.
    /// A member that is not the key's owner passes a request on to it, so asking one the
    /// view no longer lists is safe; it is only asked when the view's members do not
    /// answer.
    fn order(&self, key: &str) -> Vec<(String, Client)> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut out: Vec<(String, Client)> = rasa_openapi::cluster::placement(key, &st.members)
            .into_iter()
            .filter_map(|m| {
                let (_, c) = st.nodes.get(&m.node_id)?;
                Some((m.node_id.clone(), c.clone()))
            })
            .collect();
        let departed: Vec<ClusterMember> =
            st.departed(now).map(|(_, d)| d.member.clone()).collect();
        for m in rasa_openapi::cluster::placement(key, &departed) {
            if let Some(d) = st.departed.get(&m.node_id) {
                out.push((m.node_id.clone(), d.client.clone()));
            }
        }
        out.sort_by_key(|(id, _)| st.suspect(id, now));
        out
    }

    /// The member to send `key` to first.
    pub(crate) fn first(&self, key: &str) -> Option<Client> {
        self.order(key).into_iter().next().map(|(_, c)| c)
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

    /// `keys` grouped by owner (indices into `keys`); `None` when some key has no serving
    /// owner.
    pub(crate) fn by_owner(&self, keys: &[&str]) -> Option<Vec<(Client, Vec<usize>)>> {
        let mut groups: Vec<(Client, Vec<usize>)> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let owner = self.first(k)?;
            match groups
                .iter_mut()
                .find(|(c, _)| Arc::ptr_eq(&c.inner, &owner.inner))
            {
                Some((_, idx)) => idx.push(i),
                None => groups.push((owner, vec![i])),
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
            Error::Http(e) => e.is_connect() || e.is_timeout() || e.is_request() || e.is_body(),
            Error::Timeout { .. } => true,
            _ => false,
        }
    }
}

/// Runs `op` on the client of `key`'s owner; when the owner does not answer, on the
/// key's next choices — unmarked: the member asked passes the request on to the owner when
/// it answers it (its own view of who answers is kept fresh by probes), else serves a
/// read from the key's next choice or refuses a write. So a client that suspects an owner
/// for longer than it is away (or cannot reach it when the members can) never reads a
/// copy older than a write the owner acknowledged, and never stores a write aside (issue
/// 65). When this client does not talk to a cluster (or no member is serving), on this
/// client.
pub(crate) async fn on_owner<T, Fut>(
    client: &Client,
    key: &str,
    op: impl Fn(Client) -> Fut,
) -> Result<T, Error>
where
    Fut: Future<Output = Result<T, Error>>,
{
    on_members(client, key, false, op).await
}

/// [`on_owner`] for a write: on the key's next choices only when nothing reached the
/// member tried (its connection was refused or not made in time). A write that was sent
/// and got no answer may have been stored, and sent again through another member it could
/// take effect twice — after a later write of the key, bringing back what that replaced
/// (issue 65). Its error is the caller's, outcome unknown. Each attempt has the whole time
/// left.
pub(crate) async fn on_owner_write<T, Fut>(
    client: &Client,
    key: &str,
    op: impl Fn(Client) -> Fut,
) -> Result<T, Error>
where
    Fut: Future<Output = Result<T, Error>>,
{
    on_members(client, key, true, op).await
}

/// [`on_owner`] (`write`: [`on_owner_write`]).
async fn on_members<T, Fut>(
    client: &Client,
    key: &str,
    write: bool,
    op: impl Fn(Client) -> Fut,
) -> Result<T, Error>
where
    Fut: Future<Output = Result<T, Error>>,
{
    crate::timeouts::call_scope(async {
        let Some(topology) = client.inner.topology().await else {
            return op(client.clone()).await;
        };
        let order = topology.order(key);
        if order.is_empty() {
            return op(client.clone()).await; // no serving member: the seed serves it
        }
        let mut last = None;
        let timeout = client.inner.http.request_timeout;
        let tries = order.len().min(MAX_TRIES);
        for (i, (node, client)) in order.into_iter().take(MAX_TRIES).enumerate() {
            // Each member but the last gets half the time left for a read, so a frozen one
            // leaves the next time to answer within the call's timeout.
            let tried = op(client);
            let result = match !write && i + 1 < tries {
                true => crate::timeouts::attempt(timeout, 2, tried).await,
                false => tried.await,
            };
            match result {
                Err(e) if (write && e.nothing_sent()) || (!write && e.is_unreachable()) => {
                    tracing::debug!(key, node, error = %e, "cluster member did not answer; trying the key's next choice");
                    topology.suspect(&node);
                    last = Some(e);
                }
                other => return other,
            }
        }
        Err(last.expect("at least one member was tried"))
    })
    .await
}

/// Runs `batch` on each owner's client with its keys, all owners at once, when this
/// client talks to a cluster: one answer slot per key, `None` where the owner did not
/// answer (those keys then go their own way).
pub(crate) async fn per_owner<'k, T, Fut>(
    client: &Client,
    keys: &[&'k str],
    batch: impl Fn(Client, Vec<&'k str>) -> Fut,
) -> Option<Vec<Option<T>>>
where
    Fut: std::future::Future<Output = Result<Vec<T>, Error>>,
{
    let groups = client.inner.topology().await?.by_owner(keys)?;
    let mut out: Vec<Option<T>> = keys.iter().map(|_| None).collect();
    let answers = futures_util::future::join_all(groups.into_iter().map(|(c, idx)| {
        let sub: Vec<&str> = idx.iter().map(|&i| keys[i]).collect();
        let call = batch(c, sub);
        async move { (idx, call.await) }
    }))
    .await;
    for (idx, answer) in answers {
        if let Ok(results) = answer {
            for (i, r) in idx.into_iter().zip(results) {
                out[i] = Some(r);
            }
        }
    }
    Some(out)
}
