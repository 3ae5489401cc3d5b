//! Membership in a cluster of gateways, kept in etcd (`--cluster`), and the placement of
//! keys over its members.
//!
//! etcd holds **membership only**: each gateway registers itself under
//! `/rasa/<name>/members/<node-id>` with its own lease ([`membership`]), and watches the
//! prefix. No per-key index lives anywhere central (a record lists at most its member's
//! few hot keys, [`hot`]), so losing a node or etcd loses no index. Every member, and every SDK, computes a key's owner from the same member list
//! with rendezvous hashing ([`rasa_openapi::cluster::placement`]).
//!
//! When etcd cannot be reached the gateway keeps its last view and keeps serving.
//!
//! Everything a member does with the others goes through [`Peers`], for both fronts and
//! the read-through origin: where a keyed request is served ([`peers`]), passing it to
//! the owner ([`forward`]), asking every member for its part of a listing or batch
//! ([`Peers::each_other`], [`Peers::by_owner`]), and filling a miss from the previous
//! owner ([`fill`]). The fronts only map each outcome to their wire format.

mod args;
pub mod error;
pub mod etcd_access;
pub mod fill;
pub mod forward;
mod history;
pub mod hot;
mod membership;
pub mod near;
pub mod peers;
pub mod replicas;
pub mod replicate;
pub mod scope;
pub mod secret;
pub mod suspects;
mod view;

use crate::catalog;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rasa_openapi::{ClusterMember, ClusterView, FabricInfo, MemberState};
use tokio::sync::watch;

pub use args::{ClusterArgs, EtcdEndpoints, Routing};
pub use forward::{Forwarded, Outgoing, SERVED_BY_HEADER};
pub use history::{still_tied, tie_now};
pub use peers::{NearWrite, Peers, Route, Wire};

/// The longest a member that registers waits before it owns keys: the others see its
/// record through their etcd watch within milliseconds; until then they still own its
/// keys (see [`Cluster::fenced`]).
pub const JOIN_GRACE: Duration = Duration::from_millis(300);

/// What this node needs to join a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// etcd client URLs.
    pub etcd: Vec<String>,
    /// The cluster's name.
    pub name: String,
    /// This node's id.
    pub node_id: String,
    /// The URL this node is reached at.
    pub advertise_url: String,
    /// TTL of this node's etcd lease.
    pub member_ttl: Duration,
    /// Tests only: a pause between the lease grant and the record when registering.
    pub register_pause: Duration,
    /// Keys held by more than their owner (`--cluster-replicas`).
    pub replicas: Vec<rasa_openapi::ReplicaRule>,
    /// Placement weight.
    pub weight: u32,
    /// Proxy or redirect requests for keys other members own.
    pub routing: Routing,
    /// Extra certificate authorities for other members' `https://` URLs.
    pub ca_file: Option<std::path::PathBuf>,
    /// The URL this node's S3 listener is reached at, when it runs one.
    pub s3_url: Option<String>,
    /// TLS and the user etcd is reached with.
    pub access: etcd_access::EtcdAccess,
    /// The secret members prove themselves with (`--cluster-secret-file`).
    pub secret: Option<Arc<secret::ClusterSecret>>,
}

/// The members a node knows, at an etcd revision.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// The etcd revision the view reflects.
    pub revision: i64,
    /// Every registered member, in node id order.
    pub members: Arc<Vec<ClusterMember>>,
}

/// This node's membership: its record in etcd, and the view of the others.
pub struct Cluster {
    config: ClusterConfig,
    /// The record this node keeps in etcd.
    me: Mutex<ClusterMember>,
    view: watch::Sender<View>,
    etcd: etcd_client::Client,
    /// The lease this node's record lives under (0 before registration).
    lease: std::sync::atomic::AtomicI64,
    /// When the lease was last renewed, at the latest (the instant the renewal that
    /// etcd confirmed was sent): the lease lasts at least its TTL from there.
    /// (Nanoseconds after `born`.) Read by every keyed request, so an atomic, not a lock.
    renewed: std::sync::atomic::AtomicU64,
    born: std::time::Instant,
    /// When this node last registered (nanoseconds after `born`; 0 before).
    registered: std::sync::atomic::AtomicU64,
    /// How many times this node's lease was lost and it registered again: each time, the
    /// others may have owned (and written) its keys meanwhile.
    rejoins: std::sync::atomic::AtomicU64,
    /// Members that did not answer a forward a moment ago.
    suspects: suspects::Suspects,
    /// Keys of member records ignored so far (each logged once).
    rejected: Mutex<std::collections::HashSet<String>>,
    /// The views published, to tell whether a key changed owners since a copy of it was
    /// made ([`history`]). Written with `view`, under this lock.
    history: std::sync::RwLock<history::History>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("config", &self.config)
            .field("revision", &self.view.borrow().revision)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// This node's membership, not yet in etcd: a client of etcd (checked by one call;
    /// refused when etcd cannot be reached or refuses this node's rights) and the record
    /// this node will register. Nothing is sent to it, and it owns nothing, until
    /// [`Cluster::join`].
    pub async fn connect(
        config: ClusterConfig,
        incarnation: String,
        fabric: FabricInfo,
    ) -> Result<Arc<Self>, error::MembershipError> {
        let me = ClusterMember {
            node_id: config.node_id.clone(),
            incarnation,
            url: config.advertise_url.clone(),
            state: MemberState::Serving,
            weight: config.weight,
            fabric,
            s3_url: config.s3_url.clone(),
            hot: Vec::new(),
        };
        let etcd = membership::connect(&config).await?;
        Ok(Arc::new(Self {
            me: Mutex::new(me),
            view: watch::Sender::new(View::default()),
            etcd,
            lease: Default::default(),
            renewed: std::sync::atomic::AtomicU64::new(0),
            born: std::time::Instant::now(),
            registered: Default::default(),
            rejoins: Default::default(),
            suspects: Default::default(),
            rejected: Mutex::default(),
            history: Default::default(),
            config,
        }))
    }

    /// Registers this node in etcd (refusing when a live node holds the same id), reads
    /// the member list, and keeps both up to date in the background. `on_rejoin` is
    /// called each time this node is about to register again after its lease was lost
    /// (it was away from etcd longer than its TTL, and the others served its keys
    /// meanwhile): what it holds may have been replaced elsewhere. Called before the
    /// record is back, so nobody forwards to this node before it has run.
    pub async fn join(
        self: &Arc<Self>,
        on_rejoin: Option<Box<dyn Fn() + Send + Sync>>,
    ) -> Result<(), error::MembershipError> {
        membership::register(self).await?;
        let (revision, records) = membership::list(self).await?;
        tokio::spawn(membership::keep_lease(Arc::clone(self), on_rejoin));
        if self.config.secret.is_some() {
            tokio::spawn(membership::keep_record(Arc::clone(self)));
        }
        tokio::spawn(membership::watch_members(
            Arc::clone(self),
            revision,
            records,
        ));
        tokio::spawn(watch_fence(Arc::downgrade(self)));
        Ok(())
    }

    /// The settings this node joined with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.config.node_id
    }

    /// Members that did not answer a forward a moment ago (passed over for a while).
    pub fn suspects(&self) -> &suspects::Suspects {
        &self.suspects
    }

    /// The current view, and changes to it.
    pub fn subscribe(&self) -> watch::Receiver<View> {
        self.view.subscribe()
    }

    /// Whether this node must not act as an owner: its lease was last renewed so long
    /// ago that etcd may have let it expire (a tenth of the TTL kept in reserve), so the
    /// others may already own its keys; or it registered a moment ago and the others may
    /// not have seen it yet, so they still own its keys. Lease-based self-fencing: at most
    /// one owner per key. Ends when a renewal (or a new registration, [`JOIN_GRACE`]
    /// later) succeeds.
    pub fn fenced(&self) -> bool {
        !self.sure_for(Duration::ZERO) || joining(self)
    }

    /// Whether this node's etcd lease surely runs for `d` more, a tenth of the TTL kept in
    /// reserve: no other member can own its keys before then.
    pub fn sure_for(&self, d: Duration) -> bool {
        let ttl = self.config.member_ttl;
        let renewed = Duration::from_nanos(self.renewed.load(Ordering::Acquire));
        self.born.elapsed().saturating_sub(renewed) + ttl / 10 + d < ttl
    }

    /// Records a renewal that etcd confirmed, sent at `asked`.
    fn renewed(&self, asked: std::time::Instant) {
        let at = asked.saturating_duration_since(self.born).as_nanos();
        self.renewed
            .fetch_max(u64::try_from(at).unwrap_or(u64::MAX), Ordering::AcqRel);
    }

    /// The member that owns `key` when it is another node; `None` when this node serves
    /// it (it is the owner, or no member is serving).
    pub fn owner(&self, key: &str) -> Option<ClusterMember> {
        let view = self.view.borrow();
        if self.fenced() {
            // The others have (or are about to have) removed this node: the key's owner
            // is the one among them.
            let others: Vec<ClusterMember> = view
                .members
                .iter()
                .filter(|m| m.node_id != self.config.node_id)
                .cloned()
                .collect();
            return rasa_openapi::cluster::owner(key, &others).cloned();
        }
        rasa_openapi::cluster::owner(key, &view.members)
            .filter(|m| m.node_id != self.config.node_id)
            .cloned()
    }

    /// The member to ask for `key` when its owner `owner` does not answer: the next in
    /// the key's placement order — `None` when that is this node (or there is none).
    pub fn next_choice(&self, key: &str, owner: &str) -> Option<ClusterMember> {
        let view = self.view.borrow();
        let next = rasa_openapi::cluster::placement(key, &view.members)
            .into_iter()
            .find(|m| m.node_id != owner)?;
        (next.node_id != self.config.node_id).then(|| next.clone())
    }

    /// Whether `m` (this incarnation of it) is in the current view.
    pub fn has_member(&self, m: &ClusterMember) -> bool {
        self.view
            .borrow()
            .members
            .iter()
            .any(|v| v.node_id == m.node_id && v.incarnation == m.incarnation)
    }

    /// `key`'s members in order of preference, without this node.
    pub fn others_for(&self, key: &str) -> Vec<ClusterMember> {
        let view = self.view.borrow();
        rasa_openapi::cluster::placement(key, &view.members)
            .into_iter()
            .filter(|m| m.node_id != self.config.node_id)
            .cloned()
            .collect()
    }

    /// The view as `GET /v1/cluster` answers it.
    pub fn snapshot(&self) -> ClusterView {
        let view = self.view.borrow();
        ClusterView {
            enabled: true,
            name: self.config.name.clone(),
            revision: view.revision,
            this_node: self.config.node_id.clone(),
            members: view.members.to_vec(),
            replicas: self.config.replicas.clone(),
        }
    }

    /// Whether this node is leaving (SIGTERM): it owns no key from then on, and serves
    /// only what it holds until its leases end.
    pub fn draining(&self) -> bool {
        self.me.lock().unwrap_or_else(|e| e.into_inner()).state == MemberState::Draining
    }

    /// Marks this node `draining` in etcd: it owns no key from then on, and keeps serving
    /// what it holds. Returns once etcd has the new record (or after `wait`).
    pub async fn drain(&self, wait: Duration) {
        self.me.lock().unwrap_or_else(|e| e.into_inner()).state = MemberState::Draining;
        match tokio::time::timeout(wait, membership::write_record(self)).await {
            Ok(Ok(())) => tracing::info!(node = %self.config.node_id, "cluster: draining"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cluster: could not mark this node draining in etcd")
            }
            Err(_) => tracing::warn!(
                ?wait,
                "cluster: etcd did not take the draining record in time; leaving anyway"
            ),
        }
    }

    /// Leaves the cluster: revokes this node's lease, which removes its record at once.
    pub async fn leave(&self, wait: Duration) {
        let lease = self.lease.load(std::sync::atomic::Ordering::Acquire);
        let mut etcd = self.etcd.clone();
        match tokio::time::timeout(wait, etcd.lease_revoke(lease)).await {
            Ok(Ok(_)) => tracing::info!(node = %self.config.node_id, "cluster: left"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cluster: lease not revoked; the record goes when its TTL ends")
            }
            Err(_) => tracing::warn!(
                ?wait,
                "cluster: etcd did not answer the lease revoke; the record goes when its TTL ends"
            ),
        }
    }

    fn record(&self) -> ClusterMember {
        self.me.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// This node's record as it is kept in etcd under `lease`: under a secret with the
    /// lease, its time ([`secret::record::VALID_FOR_TTLS`] TTLs from now) and its MAC.
    fn record_value(&self, lease: i64) -> String {
        let member = self.record();
        let key = self.key();
        let signed = match &self.config.secret {
            None => secret::Signed {
                member,
                lease: None,
                expires_ms: None,
                mac: None,
            },
            Some(s) => {
                let valid = self.config.member_ttl * secret::record::VALID_FOR_TTLS;
                let expires_ms = secret::now_ms() + valid.as_millis() as u64;
                let mac = s.sign_record(&key, &member, lease, expires_ms);
                secret::Signed {
                    member,
                    lease: Some(lease),
                    expires_ms: Some(expires_ms),
                    mac: Some(mac),
                }
            }
        };
        serde_json::to_string(&signed).expect("a member serializes")
    }

    fn key(&self) -> String {
        member_key(&self.config.name, &self.config.node_id)
    }
}

/// The HTTP client a node uses to reach its peers: the system's certificate authorities,
/// plus those in `ca_file`; the error names the file.
pub fn peer_client(
    connect_timeout: Duration,
    idle_timeout: Duration,
    ca_file: Option<&std::path::Path>,
) -> Result<reqwest::Client, crate::setting::SettingError> {
    use rustls::pki_types::pem::PemObject;
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                crate::setting::SettingError::said(format!(
                    "--cluster-ca-file {}: {e}",
                    path.display()
                ))
            })?;
        if certs.is_empty() {
            return Err(crate::setting::SettingError::said(format!(
                "--cluster-ca-file {}: no certificate in the file",
                path.display()
            )));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                crate::setting::SettingError::said(format!(
                    "--cluster-ca-file {}: {e}",
                    path.display()
                ))
            })?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the default TLS versions are supported")
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .connect_timeout(connect_timeout)
        .read_timeout(idle_timeout)
        .pool_idle_timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| {
            crate::setting::SettingError::said(format!("the client for other members: {e}"))
        })
}

/// Whether `c` registered (again) a moment ago: it owns keys only once the others have had
/// time to see its record ([`join_grace`]), and until then passes requests on to the owner
/// they still see, so that no key has two owners at once.
fn joining(c: &Cluster) -> bool {
    let registered = Duration::from_nanos(c.registered.load(Ordering::Acquire));
    registered > Duration::ZERO && c.born.elapsed() < registered + join_grace(c)
}

/// How long after registering `c` waits before it owns keys: a tenth of the TTL, at most
/// [`JOIN_GRACE`].
fn join_grace(c: &Cluster) -> Duration {
    (c.config.member_ttl / 10).min(JOIN_GRACE)
}

/// Since when `c` owns its keys, at the latest: [`join_grace`] after it last registered
/// (when it started owning again after a lost lease, or at start).
pub(super) fn owning_since(c: &Cluster) -> std::time::Instant {
    let registered = Duration::from_nanos(c.registered.load(Ordering::Acquire));
    c.born + registered + join_grace(c)
}

/// Records that `c`'s record was just created (it owns keys [`join_grace`] later).
fn registered_now(c: &Cluster) {
    let at = c.born.elapsed().as_nanos().max(1);
    c.registered
        .store(u64::try_from(at).unwrap_or(u64::MAX), Ordering::Release);
}

/// Says when this node starts and stops fencing itself ([`Cluster::fenced`]): a log line
/// each way and the `rasa_cluster_fenced` gauge, checked every tenth of the TTL.
async fn watch_fence(cluster: std::sync::Weak<Cluster>) {
    let mut was = false;
    loop {
        let Some(c) = cluster.upgrade() else { return };
        let every = c.config.member_ttl / 10;
        let now = c.fenced();
        if now != was {
            if now && joining(&c) {
                tracing::info!(
                    node = %c.config.node_id,
                    "cluster: registered; owning keys once the others have had {:?} to see this node",
                    join_grace(&c)
                );
            } else if now {
                tracing::warn!(
                    node = %c.config.node_id,
                    "cluster: lease not renewed for nine tenths of --member-ttl; this node stops acting as owner (its keys go to the others' owner, writes it would own are refused) until a renewal succeeds"
                );
            } else {
                tracing::info!(node = %c.config.node_id, "cluster: lease renewed; owning keys again");
            }
            catalog::CLUSTER_FENCED
                .gauge()
                .set(f64::from(u8::from(now)));
            was = now;
        }
        drop(c);
        tokio::time::sleep(every).await;
    }
}

fn members_prefix(name: &str) -> String {
    format!("/rasa/{name}/members/")
}

fn member_key(name: &str, node_id: &str) -> String {
    format!("{}{node_id}", members_prefix(name))
}
