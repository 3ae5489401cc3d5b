//! This node's record in etcd, under its own lease, and the watch on everyone's.
//!
//! - **Register**: grant a lease (TTL `--member-ttl`), then in one transaction create
//!   `/rasa/<name>/members/<node-id>` only if absent. A record already there belongs to a
//!   live node (refuse to start, naming it), to this node's previous process (it names
//!   the URL whose port this process now holds: take it over at once), or to a crashed
//!   one elsewhere whose lease has not yet ended (wait for it, at most one TTL).
//! - **Keep**: renew the lease every third of its TTL; if etcd answers that the lease is
//!   gone (the node was cut off longer than the TTL), register again.
//! - **Watch**: list the prefix, then watch it from the next revision; after a lost
//!   stream, watch again from where it stopped (list again if etcd compacted past it).
//! - Under a secret, a record names its lease and a time it is honoured until
//!   ([`super::secret::record`]): the node writes it again every TTL, and a record whose
//!   time passes without a new one leaves the view then, etcd or not.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use rasa_openapi::ClusterMember;

use super::error::MembershipError;
use super::secret::record::REFRESH_EVERY_TTLS;
use super::view::{next_expiry, parse, passed, publish, Records};
use super::{members_prefix, Cluster, ClusterConfig};

/// Longest wait for one etcd call at start-up.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A client for `config.etcd`, checked by one call (a client connects lazily).
pub(super) async fn connect(
    config: &ClusterConfig,
) -> Result<etcd_client::Client, MembershipError> {
    let urls = config.access.endpoints(&config.etcd);
    let endpoints = urls.join(",");
    let options = config.access.apply(
        ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(CALL_TIMEOUT)
            .with_keep_alive(config.member_ttl / 3, config.member_ttl / 3),
    );
    let unreachable = |e: &str| MembershipError::Unreachable {
        endpoints: endpoints.clone(),
        cause: e.to_owned(),
        hint: config.access.hint(e).to_string(),
    };
    let mut client = tokio::time::timeout(
        CALL_TIMEOUT,
        etcd_client::Client::connect(&urls, Some(options)),
    )
    .await
    .map_err(|_| unreachable("no answer within 5s"))?
    .map_err(|e| unreachable(&crate::net::error_chain(&e)))?;
    // A call that needs the member's rights (a status call is answered to anyone with a
    // connection): etcd refuses an unauthenticated or unknown user here.
    tokio::time::timeout(
        CALL_TIMEOUT,
        client.get(
            members_prefix(&config.name),
            Some(GetOptions::new().with_prefix().with_count_only()),
        ),
    )
    .await
    .map_err(|_| unreachable("no answer within 5s"))?
    .map_err(|e| unreachable(&crate::net::error_chain(&e)))?;
    if !config.access.tls() {
        tracing::warn!(
            etcd = %endpoints,
            "etcd is reached without TLS (--etcd-ca-file): whoever can reach it, or the network between, can read and change the member list"
        );
    }
    Ok(client)
}

/// Creates this node's record under a new lease. When another record holds the id, waits
/// up to one TTL for it to go (a crashed predecessor's does); a holder that answers as a
/// live gateway is refused at once.
pub(super) async fn register(cluster: &Cluster) -> Result<(), MembershipError> {
    let key = cluster.key();
    let ttl = cluster.config.member_ttl;
    let deadline = tokio::time::Instant::now() + ttl + Duration::from_secs(2);
    let mut etcd = cluster.etcd.clone();
    let mut announced = false;
    loop {
        // Before the request: the lease cannot have started earlier than this.
        let asked = std::time::Instant::now();
        let lease = grant(&mut etcd, ttl).await?;
        if !cluster.config.register_pause.is_zero() {
            tokio::time::sleep(cluster.config.register_pause).await; // tests only
        }
        let value = cluster.record_value(lease);
        let absent = Compare::create_revision(key.as_str(), CompareOp::Equal, 0);
        let resp = put_record(
            &mut etcd,
            &key,
            &value,
            lease,
            absent,
            "create the member record",
        )
        .await?;
        if resp.succeeded() {
            // Joining, then the lease (from `asked`): fenced until the join grace after the
            // record is visible. Counted before the record existed, a member back from a
            // lost lease owned its keys by its stale view meanwhile (issue 65).
            super::registered_now(cluster);
            cluster.renewed(asked);
            cluster.lease.store(lease, Ordering::Release);
            tracing::info!(key, lease, ttl = ?ttl, "cluster: registered");
            return Ok(());
        }
        let held = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| {
                let member = serde_json::from_slice::<ClusterMember>(kv.value()).ok();
                (member, kv.mod_revision(), kv.lease())
            }),
            _ => None,
        });
        let Some((holder, revision, old_lease)) = held else {
            let _ = etcd.lease_revoke(lease).await;
            continue; // gone between the compare and the get: try again
        };
        let held_by = holder.as_ref().map_or_else(
            || "an unreadable record".to_owned(),
            |h| format!("the gateway at {} (incarnation {})", h.url, h.incarnation),
        );
        if let Some(h) = &holder {
            if answers_as(cluster, h).await {
                let _ = etcd.lease_revoke(lease).await;
                return Err(MembershipError::InUse {
                    node: cluster.config.node_id.clone(),
                    held_by,
                });
            }
            // This process holds the port the record names, so the gateway that wrote it
            // is gone (a restart): take its record over now instead of waiting a TTL.
            if h.url == cluster.config.advertise_url {
                let unchanged = Compare::mod_revision(key.as_str(), CompareOp::Equal, revision);
                let what = "take over the member record";
                let taken = put_record(&mut etcd, &key, &value, lease, unchanged, what).await?;
                if taken.succeeded() {
                    cluster.renewed(asked);
                    // Its lease ends now, not a TTL later (best effort: it holds no record).
                    let _ = etcd.lease_revoke(old_lease).await;
                    cluster.lease.store(lease, Ordering::Release);
                    tracing::info!(
                        key,
                        lease,
                        predecessor = %h.incarnation,
                        "cluster: registered, taking over the record of this node's previous process"
                    );
                    return Ok(());
                }
                let _ = etcd.lease_revoke(lease).await;
                continue; // the record changed meanwhile: look again
            }
        }
        let _ = etcd.lease_revoke(lease).await;
        if !announced {
            tracing::warn!(
                node = %cluster.config.node_id,
                %held_by,
                "cluster: this node id is still registered (a crashed predecessor?); waiting up to one TTL for its record to expire"
            );
            announced = true;
        }
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if remaining.is_zero() || !record_gone(cluster, &key, remaining).await {
            return Err(MembershipError::Held {
                node: cluster.config.node_id.clone(),
                held_by,
            });
        }
    }
}

/// A new lease of `ttl`, within [`CALL_TIMEOUT`].
async fn grant(etcd: &mut etcd_client::Client, ttl: Duration) -> Result<i64, MembershipError> {
    tokio::time::timeout(CALL_TIMEOUT, etcd.lease_grant(ttl.as_secs() as i64, None))
        .await
        .map_err(|_| MembershipError::TimedOut {
            what: "lease grant",
            within: CALL_TIMEOUT,
        })?
        .map(|l| l.id())
        .map_err(|e| MembershipError::Refused {
            what: "a lease",
            cause: e.to_string(),
        })
}

/// Puts `value` at `key` under `lease` if `when` holds, else reads what is there: one
/// transaction, within [`CALL_TIMEOUT`] (`what` names it in the error).
async fn put_record(
    etcd: &mut etcd_client::Client,
    key: &str,
    value: &str,
    lease: i64,
    when: Compare,
    what: &'static str,
) -> Result<etcd_client::TxnResponse, MembershipError> {
    let txn = Txn::new()
        .when([when])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    tokio::time::timeout(CALL_TIMEOUT, etcd.txn(txn))
        .await
        .map_err(|_| MembershipError::TimedOut {
            what,
            within: CALL_TIMEOUT,
        })?
        .map_err(|e| MembershipError::Refused {
            what: "the member record",
            cause: e.to_string(),
        })
}

/// Whether `member` answers at its URL as the same gateway process.
async fn answers_as(cluster: &Cluster, member: &ClusterMember) -> bool {
    let ca = cluster.config.ca_file.as_deref();
    let Ok(client) = super::peer_client(Duration::from_secs(1), Duration::from_secs(1), ca) else {
        return false;
    };
    let url = format!("{}/v1/fabric", member.url.trim_end_matches('/'));
    match client.get(url).timeout(Duration::from_secs(2)).send().await {
        Ok(r) => r
            .json::<rasa_openapi::FabricInfo>()
            .await
            .is_ok_and(|f| f.incarnation == member.incarnation),
        Err(_) => false,
    }
}

/// Waits (at most `wait`) until `key` is deleted; whether it was.
async fn record_gone(cluster: &Cluster, key: &str, wait: Duration) -> bool {
    let mut etcd = cluster.etcd.clone();
    let watched = async {
        let mut stream = etcd.watch(key, None).await.ok()?;
        // The record may have gone between the transaction and the watch.
        let now = etcd.get(key, None).await.ok()?;
        if now.kvs().is_empty() {
            return Some(());
        }
        while let Ok(Some(resp)) = stream.message().await {
            if resp
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return Some(());
            }
        }
        None
    };
    matches!(tokio::time::timeout(wait, watched).await, Ok(Some(())))
}

/// Writes this node's record again (its state changed, or its time is renewed), under
/// its lease.
pub(super) async fn write_record(cluster: &Cluster) -> Result<(), etcd_client::Error> {
    let lease = cluster.lease.load(Ordering::Acquire);
    let value = cluster.record_value(lease);
    cluster
        .etcd
        .clone()
        .put(
            cluster.key(),
            value,
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .map(|_| ())
}

/// Renews the lease every third of its TTL, for as long as the process lives; registers
/// again when etcd says the lease is gone (after calling `on_rejoin`).
pub(super) async fn keep_lease(
    cluster: Arc<Cluster>,
    on_rejoin: Option<Box<dyn Fn() + Send + Sync>>,
) {
    let ttl = cluster.config.member_ttl;
    let every = ttl / 3;
    let mut failing = false;
    loop {
        let lease = cluster.lease.load(Ordering::Acquire);
        let mut etcd = cluster.etcd.clone();
        let lost = match etcd.lease_keep_alive(lease).await {
            // etcd answered: the lease is gone (it expired while etcd was away or this
            // node was cut off). Not an outage: register again at once.
            Err(e) if lease_expired(&e) => true,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cluster: cannot renew this node's lease; serving with the last view");
                }
                failing = true;
                false
            }
            Ok((mut keeper, mut answers)) => {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let asked = std::time::Instant::now();
                    if keeper.keep_alive().await.is_err() {
                        break false;
                    }
                    match tokio::time::timeout(every, answers.message()).await {
                        Ok(Ok(Some(r))) if r.ttl() > 0 => {
                            cluster.renewed(asked);
                            if failing {
                                tracing::info!("cluster: etcd reachable again; lease renewed");
                            }
                            failing = false;
                        }
                        Ok(Ok(Some(_))) => break true,
                        Ok(Err(e)) if lease_expired(&e) => break true,
                        _ => {
                            if !failing {
                                tracing::warn!("cluster: etcd did not renew this node's lease; serving with the last view");
                            }
                            failing = true;
                            break false;
                        }
                    }
                }
            }
        };
        if lost {
            tracing::warn!(
                lease,
                "cluster: this node's lease expired (cut off from etcd longer than --member-ttl); registering again"
            );
            // What it holds is now tied to an earlier owner (see `Peers::owner_tag`).
            cluster.rejoins.fetch_add(1, Ordering::AcqRel);
            if let Some(f) = &on_rejoin {
                f();
            }
            if let Err(e) = register(&cluster).await {
                tracing::error!(error = %e, "cluster: cannot register again; will retry");
            } else {
                continue;
            }
        }
        tokio::time::sleep(every).await; // retry interval while etcd is away
    }
}

/// Under a secret, writes this node's record again every [`REFRESH_EVERY_TTLS`] TTLs,
/// for as long as the process lives, each write within a third of the TTL: a signed
/// record is honoured for a few TTLs only. A failure is logged once until a write works
/// again (while etcd is away, [`keep_lease`] says so too).
pub(super) async fn keep_record(cluster: Arc<Cluster>) {
    let ttl = cluster.config.member_ttl;
    let within = ttl / 3;
    let mut failing = false;
    loop {
        tokio::time::sleep(ttl * REFRESH_EVERY_TTLS).await;
        let why = match tokio::time::timeout(within, write_record(&cluster)).await {
            Ok(Ok(())) => {
                failing = false;
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("etcd did not take it within {within:?}"),
        };
        if !failing {
            tracing::warn!(error = %why, "cluster: could not renew this node's record");
        }
        failing = true;
    }
}

/// Whether etcd's answer says the lease does not exist (any more): etcd-client reports it
/// as `LeaseKeepAliveError("lease not found")` when opening the keep-alive, and the server
/// as a gRPC status ("etcdserver: requested lease not found") on a running stream.
fn lease_expired(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(why) => why.contains("not found"),
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease not found"),
        _ => false,
    }
}

/// Reads every member record; sets the view; returns its revision and the records.
pub(super) async fn list(cluster: &Cluster) -> Result<(i64, Records), MembershipError> {
    let prefix = members_prefix(&cluster.config.name);
    let resp = tokio::time::timeout(
        CALL_TIMEOUT,
        cluster
            .etcd
            .clone()
            .get(prefix, Some(GetOptions::new().with_prefix())),
    )
    .await
    .map_err(|_| MembershipError::TimedOut {
        what: "list the members",
        within: CALL_TIMEOUT,
    })?
    .map_err(|e| MembershipError::Refused {
        what: "to list the members",
        cause: e.to_string(),
    })?;
    let revision = resp.header().map_or(0, |h| h.revision());
    let mut records: Records = resp
        .kvs()
        .iter()
        .filter_map(|kv| parse(cluster, kv.key(), kv.value(), kv.lease()))
        .map(|r| (r.member.node_id.clone(), r))
        .collect();
    publish(cluster, revision, &mut records);
    // What happened between the last view and this list is unknown (at start, nothing).
    let current = Arc::clone(&cluster.view.borrow().members);
    cluster
        .history
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .restart(current);
    Ok((revision, records))
}

/// Follows the member prefix from `revision` on, for as long as the process lives. While
/// etcd is away the last view stays.
pub(super) async fn watch_members(cluster: Arc<Cluster>, mut revision: i64, mut records: Records) {
    let prefix = members_prefix(&cluster.config.name);
    let mut failing = false;
    loop {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let mut etcd = cluster.etcd.clone();
        match etcd.watch(prefix.as_str(), Some(options)).await {
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cluster: lost the member watch; serving with the last view");
                }
                failing = true;
            }
            Ok(mut stream) => loop {
                // Woken when the next record's time passes, if no event comes first.
                let resp = match tokio::time::timeout(next_expiry(&records), stream.message()).await
                {
                    Err(_) => {
                        publish(&cluster, revision, &mut records);
                        continue;
                    }
                    Ok(Ok(Some(resp))) => resp,
                    Ok(Ok(None) | Err(_)) => break,
                };
                failing = false;
                if resp.canceled() {
                    // Compacted past our revision: start over from a fresh list.
                    if let Ok((r, fresh)) = list(&cluster).await {
                        (revision, records) = (r, fresh);
                    }
                    break;
                }
                if resp.events().is_empty() {
                    continue;
                }
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    let node = String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned();
                    records.remove(&node);
                    if event.event_type() == EventType::Put {
                        if let Some(r) = parse(&cluster, kv.key(), kv.value(), kv.lease()) {
                            records.insert(node, r);
                        }
                    }
                    revision = revision.max(kv.mod_revision());
                    // Each view a batch of events passes through is recorded (a member
                    // that registered and left between two reads owned keys meanwhile);
                    // only the batch's end is published.
                    passed(&cluster, &records);
                }
                if let Some(h) = resp.header() {
                    revision = revision.max(h.revision());
                }
                publish(&cluster, revision, &mut records);
            },
        }
        tokio::time::sleep(Duration::from_secs(1)).await; // retry interval while etcd is away
    }
}
