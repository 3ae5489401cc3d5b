//! Read-through: the store as a cache in front of an origin.
//!
//! - A miss fetches the object **once**, however many requests wait for it (single-flight,
//!   [`super::flight`]). The body streams from the origin straight into arena memory and becomes a normal
//!   version with its own SHA-256; the origin's entity tag and media type are kept.
//! - After `--origin-ttl` a hit is revalidated with a conditional request: unchanged keeps
//!   the version, changed becomes a new version, gone at the origin is deleted here. If the
//!   origin cannot answer, the cached version is served (stale beats unavailable).
//! - "Not found" answers are remembered for `--negative-ttl`, so a storm of misses for
//!   absent keys does not hammer the bucket ([`super::remembered`]).
//! - After a membership change, a miss is first filled from the key's previous owner
//!   ([`crate::cluster::Peers::copy`]).

use crate::catalog;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::filling::Filling;
pub use super::filling::Lookup;
use super::flight::{Flights, InFlight, Permit};
use super::remembered::{Remembered, Verdict};
use super::ties::Ties;
use super::{Fetch, Origin, OriginError};
use crate::store::disk::Want;
use crate::store::{FillTicket, Store, StoreError, StoredVersion};

pub use super::FetchError;

/// Objects at least this long stream to the first requests while they fill; shorter ones
/// are answered once stored.
pub const STREAM_AT: u64 = 1 << 20;

/// How long a fill whose body broke off waits before it fetches once more.
const REFETCH_AFTER: Duration = Duration::from_millis(100);

/// The store in front of an origin.
#[derive(Debug)]
pub struct ReadThrough {
    pub(super) origin: Arc<dyn Origin>,
    store: Arc<Store>,
    /// Revalidate hits older than this (`None`: never).
    ttl: Option<Duration>,
    max_object_size: u64,
    flights: Arc<Flights>,
    /// Keys the origin lately said it has not, or whose objects are too large to cache
    /// (their reads go straight to pass-through instead of opening the object first), for
    /// `--negative-ttl`, within `--negative-cache-size`.
    remembered: Remembered,
    /// Other cluster members to fill misses from before the origin.
    pub(super) peers: Option<Arc<crate::cluster::Peers>>,
    /// Whether a cold ranged read also fills the whole object (`--origin-fill`).
    range_fill: std::sync::atomic::AtomicBool,
    /// Whether a held copy may be served without asking the origin.
    ties: Ties,
}

impl ReadThrough {
    /// Read-through of `store` from `origin`; in a cluster, misses are filled from the
    /// key's next choice among `peers` before the origin.
    pub fn new(
        (origin, store): (Arc<dyn Origin>, Arc<Store>),
        ttl: Option<Duration>,
        negative_ttl: Duration,
        max_object_size: u64,
        remembered_bytes: u64,
        peers: Option<Arc<crate::cluster::Peers>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            origin,
            store,
            ttl,
            max_object_size,
            flights: Arc::default(),
            remembered: Remembered::new(remembered_bytes, negative_ttl),
            ties: Ties::new(peers.clone()),
            peers,
            range_fill: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The origin.
    pub fn origin(&self) -> &Arc<dyn Origin> {
        &self.origin
    }

    /// The current version of `key`, from memory or (on a miss or a stale hit) the origin.
    pub async fn current(
        self: &Arc<Self>,
        key: &str,
    ) -> Result<Option<Arc<StoredVersion>>, FetchError> {
        match self.lookup(key, false).await? {
            Lookup::Stored(v) => Ok(Some(v)),
            Lookup::Missing => Ok(None),
            Lookup::Filling(_) => unreachable!("only a streaming lookup answers a fill"),
        }
    }

    /// Like [`ReadThrough::current`]; with `stream`, a miss answers as soon as the object
    /// starts filling from the origin ([`Lookup::Filling`]) rather than once it is stored.
    pub async fn lookup(self: &Arc<Self>, key: &str, stream: bool) -> Result<Lookup, FetchError> {
        // Not the owner: nothing the origin said before this request arrived is its answer
        // (the owner may have acknowledged a write since, issue 65): no earlier fetch joined.
        let arrived = std::time::Instant::now();
        let since = |owns: bool| (!owns).then_some(arrived);
        let found = |v: Option<Arc<StoredVersion>>| v.map_or(Lookup::Missing, Lookup::Stored);
        let held = match self.store.current(key) {
            Some(v) => Some(v),
            None => self
                .store
                .tier()
                .from_disk(key, Want::Read)
                .await
                .ok()
                .flatten(),
        };
        if let Some(v) = held {
            // A copy made under another owner of the key than the one now (gone,
            // restarted, replaced) may be older than what that owner acknowledged since;
            // so may any copy a member that is not the owner serves (a read passed to it
            // because the owner did not answer someone: the owner may be back, answering
            // others and acknowledging writes, before everyone trusts it again) — both are
            // confirmed by the origin first (issue 65: a copy the next choice filled while
            // the owner was cut off was served after the owner, back, acknowledged a delete).
            let owns = self.ties.owns(key);
            let untied = self.ties.untied(key, &v) || !owns;
            let stale = untied
                || match (self.ttl, v.origin.age()) {
                    (Some(ttl), Some(age)) => age >= ttl,
                    _ => false,
                }
                || self.ties.confirmed_before_all_stale(&v);
            tracing::debug!(key, version = %v.version(), owns, untied, stale, "held copy");
            if !stale {
                catalog::CACHE_HITS.counter().increment(1);
                return Ok(Lookup::Stored(v));
            }
            return match self.flight(key, Some(v.clone()), since(owns)).0.await {
                Ok(v) => Ok(found(v)),
                Err(FetchError::Origin(e)) if untied => {
                    // Stale beats unavailable, but not older than a write acknowledged
                    // elsewhere: no answer rather than one that goes back in time.
                    tracing::warn!(key, error = %e, "a copy made under another owner could not be confirmed; not served");
                    catalog::CACHE_UNTIED_REFUSED.counter().increment(1);
                    Err(FetchError::Origin(e))
                }
                Err(FetchError::Origin(e)) => {
                    tracing::warn!(key, error = %e, "revalidation failed; serving the cached version");
                    catalog::CACHE_STALE_SERVED.counter().increment(1);
                    Ok(Lookup::Stored(v))
                }
                Err(e) => Err(e),
            };
        }
        // "Not found" is remembered by the key's owner only, while it has owned the key
        // since: elsewhere it may predate a write the owner acknowledged since.
        let remembered = self.remembered.not_found_tie(key);
        if remembered.is_some_and(|tie| self.ties.still_owner(key, tie)) {
            catalog::CACHE_NEGATIVE_HITS.counter().increment(1);
            return Ok(Lookup::Missing);
        }
        if let Some(length) = self.remembered.too_large(key) {
            return Err(FetchError::TooLarge {
                length,
                limit: self.max_object_size,
            });
        }
        catalog::CACHE_MISSES.counter().increment(1);
        let (flight, mut filling) = self.flight(key, None, since(self.ties.owns(key)));
        if !stream {
            return flight.await.map(found);
        }
        tokio::pin!(flight);
        loop {
            // Small objects are worth the wait for the stored version (its ETag, version and
            // ranges): they take about as long to store as to start streaming.
            if let Some(f) = filling
                .borrow_and_update()
                .clone()
                .filter(|f| f.length >= STREAM_AT)
            {
                return Ok(Lookup::Filling(f));
            }
            tokio::select! {
                done = &mut flight => return done.map(found),
                changed = filling.changed() => {
                    if changed.is_err() {
                        // The fill ended without streaming: its result is the answer.
                        return flight.await.map(found);
                    }
                }
            }
        }
    }

    /// Makes every version held now be revalidated with the origin on its next read (a
    /// conditional GET: unchanged keeps it, changed replaces it, gone deletes it): after
    /// this cluster member was out and other members may have written its keys.
    pub fn revalidate_all(&self) {
        self.ties.revalidate_all();
    }

    /// The fill of `key` under way, once it has started storing the object.
    pub fn filling(&self, key: &str) -> Option<Arc<Filling>> {
        self.flights.filling(key)
    }

    /// Sets what a cold ranged read does besides fetching its range.
    pub fn set_range_fill(&self, fill: super::RangeFill) {
        self.range_fill.store(
            fill == super::RangeFill::Whole,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// A ranged read missed: with `--origin-fill whole`, start (or join) storing the whole
    /// object in the background, so later reads hit. The range itself is served from the
    /// origin by the caller.
    pub fn range_missed(self: &Arc<Self>, key: &str) {
        let fill = self.range_fill.load(std::sync::atomic::Ordering::Relaxed);
        if fill && !self.remembered.not_found(key) && self.remembered.too_large(key).is_none() {
            catalog::CACHE_MISSES.counter().increment(1);
            drop(self.flight(key, None, None)); // it runs on its own task
        }
    }

    /// What the origin says of `key` (a HEAD, no body): for HEAD requests that miss, which
    /// need not fetch the object. "Not found" is remembered like a fetch's.
    pub async fn head(&self, key: &str) -> Result<Option<super::OriginHead>, FetchError> {
        let remembered = self.remembered.not_found_tie(key);
        if remembered.is_some_and(|tie| self.ties.still_owner(key, tie)) {
            catalog::CACHE_NEGATIVE_HITS.counter().increment(1);
            return Ok(None);
        }
        catalog::ORIGIN_HEADS.counter().increment(1);
        let head = self.origin.head(key).await?;
        if head.is_none() {
            self.remembered
                .remember(key, Verdict::NotFound, self.ties.tie_of(key));
        }
        Ok(head)
    }

    /// Origin fetches running now (one per key however many requests wait for it).
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// Before a write or delete of `key` is acknowledged: its fetch in flight barred, no "not found" kept.
    pub fn supersede(&self, key: &str) {
        self.flights.bar(key);
        self.remembered.forget(key);
    }

    /// Before a delete of `key` the origin took is acknowledged: its fetch in flight
    /// barred, and "not found" remembered as this member heard it (the origin has no such
    /// object now), so the next reads here are answered without asking anyone — nor
    /// adopting a copy the previous owner holds, which an origin whose answers lag its
    /// deletes (a HEAD still naming the deleted object's tag) would confirm.
    pub fn deleted(&self, key: &str) {
        self.flights.bar(key);
        self.remembered
            .remember(key, Verdict::NotFound, self.ties.tie_of(key));
    }

    /// Joins the fetch of `key` in flight (with `arrived`, one not sent before then), or
    /// starts one: its result, and the object it fills (once it starts storing one).
    fn flight(
        self: &Arc<Self>,
        key: &str,
        current: Option<Arc<StoredVersion>>,
        arrived: Option<std::time::Instant>,
    ) -> InFlight {
        self.flights.join_or_start(key, arrived, |permit| {
            let this = Arc::clone(self);
            let key = key.to_owned();
            Box::pin(async move {
                // Based on what the store holds as it starts: a fetch chained after another
                // starts once that one stored its (older) answer, not a write to give way to.
                let current = this.store.current(&key).or(current);
                let r = this.fill(&key, current, &permit).await;
                if let Ok(Some(v)) = &r {
                    this.ties.tie(&key, v); // fetched or confirmed under the owner now
                }
                // Done: later lookups see the store (or the remembered answer) instead.
                drop(permit);
                r
            })
        })
    }

    async fn fill(
        &self,
        key: &str,
        current: Option<Arc<StoredVersion>>,
        filling: &Permit,
    ) -> Result<Option<Arc<StoredVersion>>, FetchError> {
        // Taken before anything is fetched: a delete from now on is not undone by this fill.
        let ticket = self.store.fill_ticket();
        // Only a key's owner fills from a peer (its previous owner): a member serving a
        // key it does not own does so because the owner did not answer — not again.
        if current.is_none() && self.ties.owns(key) {
            if let Some(done) = self.fill_from_peer(key, (filling, &ticket)).await {
                return done;
            }
        }
        // A body that breaks off (the origin's object replaced as it was read, a connection
        // reset) is fetched once more, unless readers were streaming it already: the
        // readers waiting for it get the second try.
        match self
            .fetch_and_store(key, current.clone(), filling, &ticket)
            .await
        {
            Err(FetchError::Origin(OriginError::Failed(why))) if !filling.streamed(STREAM_AT) => {
                tracing::warn!(key, error = %why, "the origin failed; fetching once more");
                // A moment later: an object being replaced at the origin settles.
                tokio::time::sleep(REFETCH_AFTER).await;
                self.fetch_and_store(key, current, filling, &ticket).await
            }
            done => done,
        }
    }

    /// Fetches `key` from the origin (conditionally, when `current` is a copy of it) and
    /// stores what changed.
    async fn fetch_and_store(
        &self,
        key: &str,
        current: Option<Arc<StoredVersion>>,
        filling: &Permit,
        ticket: &FillTicket,
    ) -> Result<Option<Arc<StoredVersion>>, FetchError> {
        let started = Instant::now();
        let etag = current
            .as_ref()
            .and_then(|v| v.origin.etag().map(str::to_owned));
        catalog::ORIGIN_FETCHES.counter().increment(1);
        let fetched = self.origin.get(key, etag.as_deref()).await;
        let held = etag.as_deref().unwrap_or("-");
        // `said` is worked out only when the event is logged, not on every fetch.
        tracing::debug!(key, held, said = super::said(&fetched), "origin fetch");
        catalog::ORIGIN_FETCH_SECONDS
            .histogram()
            .record(started.elapsed().as_secs_f64());
        let fetched = fetched.inspect_err(|e| {
            let kind = match e {
                OriginError::Timeout(_) => "timeout",
                OriginError::Denied(_) => "denied",
                OriginError::Failed(_) => "failed",
            };
            catalog::ORIGIN_ERRORS
                .counter_by(&[("kind", kind)])
                .increment(1);
        })?;
        match fetched {
            Fetch::NotModified => {
                let v = current.expect("conditional fetches carry a current version");
                v.origin.touch();
                Ok(Some(v))
            }
            Fetch::NotFound => {
                self.remembered
                    .remember(key, Verdict::NotFound, self.ties.tie_of(key));
                if let Some(v) = current {
                    // Gone at the origin: drop the copy unless it was replaced meanwhile.
                    let _ = self.store.delete(key, |cur| match cur {
                        Some(c) if c.version() == v.version() => Ok(()),
                        _ => Err(StoreError::PreconditionFailed("replaced".into())),
                    });
                }
                Ok(None)
            }
            Fetch::Found(obj) => {
                // Some servers ignore If-None-Match: an unchanged entity tag is unchanged.
                if let (Some(v), Some(etag)) = (&current, &obj.etag) {
                    if v.origin.etag() == Some(etag.as_str()) {
                        v.origin.touch();
                        return Ok(current);
                    }
                }
                self.store_object(key, obj, current, (filling, ticket))
                    .await
            }
        }
    }

    /// Streams `obj` into a new version of `key`, unless a version other than `current`
    /// was written meanwhile (a newer PUT wins; then that one is the answer).
    pub(super) async fn store_object(
        &self,
        key: &str,
        mut obj: super::OriginObject,
        current: Option<Arc<StoredVersion>>,
        (filling, ticket): (&Permit, &FillTicket),
    ) -> Result<Option<Arc<StoredVersion>>, FetchError> {
        if obj.length > self.max_object_size {
            self.remembered
                .remember(key, Verdict::TooLarge(obj.length), self.ties.tie_of(key));
            return Err(FetchError::TooLarge {
                length: obj.length,
                limit: self.max_object_size,
            });
        }
        let ctype = obj
            .content_type
            .clone()
            .unwrap_or_else(|| crate::media::DEFAULT_CONTENT_TYPE.to_owned());
        let mut up = self.store.writes().begin(key, &ctype, obj.length).await?;
        up.from_origin(obj.etag.take());
        // Requests waiting for this object stream it from here on, as it arrives.
        let streamed = Arc::new(Filling::new(obj.length, ctype));
        filling.filling(Arc::clone(&streamed));
        let received: Result<(), FetchError> = async {
            while let Some(chunk) = obj.body.next().await {
                let chunk = chunk?;
                catalog::ORIGIN_BYTES
                    .counter()
                    .increment(chunk.len() as u64);
                // Streams first: copying and hashing into the arena need not delay them
                // (a write that fails ends them short, like a failed fetch).
                streamed.push(chunk.clone());
                up.write(&chunk)?;
            }
            Ok(())
        }
        .await;
        let received = received.and_then(|()| match up.written() {
            n if n == obj.length => Ok(()),
            n => Err(FetchError::Origin(OriginError::Failed(format!(
                "the origin's body ended after {n} of {} bytes",
                obj.length
            )))),
        });
        if let Err(e) = received {
            streamed.finish(Err(&e));
            return Err(e);
        }
        // Every byte arrived and was stored: streams end; the version is published next
        // (a stream already has all of it, whatever the commit decides).
        streamed.finish(Ok(()));
        // Don't replace a version written here meanwhile (a newer PUT wins), nor bring
        // back a key deleted meanwhile (the ticket).
        let base = current.as_ref().map(|v| v.version());
        let v = self.store.writes().commit_fill(up, ticket, |cur| {
            match (cur.map(|c| c.version()), base) {
                (a, b) if a == b => Ok(()),
                _ => Err(StoreError::PreconditionFailed(
                    "replaced while fetching".into(),
                )),
            }
        });
        match v {
            Ok(v) => Ok(Some(v)),
            Err(StoreError::PreconditionFailed(_)) => Ok(self.store.current(key)),
            Err(e) => Err(e.into()),
        }
    }
}
