//! Calls on a key's members: one request on the key's owner or, for a read of a key
//! with replicas, on the replica this client reads it from — failing over to the next
//! choices when a member does not answer — and batches split per member.

use std::future::Future;

use crate::{Client, Error};

/// How many members one request tries, owner first.
const MAX_TRIES: usize = 3;

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
        let (order, _) = topology.order(key, !write);
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

/// Runs `batch` on each member's client with its keys, all members at once, when this
/// client talks to a cluster: each key goes to its owner (a key with replicas to the
/// holder this client reads it from). One answer slot per key, `None` where the member
/// did not answer (those keys then go their own way).
pub(crate) async fn per_owner<'k, T, Fut>(
    client: &Client,
    keys: &[&'k str],
    batch: impl Fn(Client, Vec<&'k str>) -> Fut,
) -> Option<Vec<Option<T>>>
where
    Fut: Future<Output = Result<Vec<T>, Error>>,
{
    per_member(client, keys, true, batch).await
}

/// [`per_owner`] for a batch of writes: every key to its owner.
pub(crate) async fn per_owner_write<'k, T, Fut>(
    client: &Client,
    keys: &[&'k str],
    batch: impl Fn(Client, Vec<&'k str>) -> Fut,
) -> Option<Vec<Option<T>>>
where
    Fut: Future<Output = Result<Vec<T>, Error>>,
{
    per_member(client, keys, false, batch).await
}

async fn per_member<'k, T, Fut>(
    client: &Client,
    keys: &[&'k str],
    read: bool,
    batch: impl Fn(Client, Vec<&'k str>) -> Fut,
) -> Option<Vec<Option<T>>>
where
    Fut: Future<Output = Result<Vec<T>, Error>>,
{
    let groups = client.inner.topology().await?.by_owner(keys, read)?;
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
