//! What a read resolves to. A front says what the request asks ([`ReadIntent`]); the
//! service decides where the bytes come from ([`Read`]), which is cache policy:
//!
//! - a pinned version, or another member filling its cache from this one: memory only;
//! - a plain HEAD that misses: the origin's HEAD, without fetching the object;
//! - a plain ranged GET that misses: the fill under way when it has reached the range,
//!   else the origin's range (and, with `--origin-fill whole`, a background fill);
//! - a plain GET that misses: streamed as it fills when the object is large enough;
//! - an object too large to cache: passed through from the origin;
//! - anything else: the stored version (filled, or revalidated, first).

use crate::catalog;
use std::sync::Arc;

use futures_util::StreamExt;

use super::{ObjectError, Objects};
use crate::origin::filling::Filling;
use crate::origin::readthrough::{FetchError, Lookup, ReadThrough};
use crate::origin::{Fetch, OriginError, OriginHead, OriginObject};
use crate::range::{self, RangeOutcome};
use crate::store::{StoredVersion, VersionId};

/// What a read asks, in terms both fronts can state.
#[derive(Debug, Clone, Copy)]
pub struct ReadIntent<'a> {
    /// The key.
    pub key: &'a str,
    /// A pinned version, instead of the current one.
    pub version: Option<VersionId>,
    /// Whether the body is wanted (GET) or only what describes it (HEAD).
    pub body: bool,
    /// The request's `Range` value, as sent.
    pub range: Option<&'a str>,
    /// Whether an `If-Range` came with it.
    pub if_range: bool,
    /// Whether any precondition (`If-Match`, `If-None-Match`, `If-(Un)Modified-Since`)
    /// came: then the answer must be a stored version, which has validators.
    pub conditional: bool,
    /// Another cluster member filling its cache from this one: memory only.
    pub peer_fill: bool,
}

impl<'a> ReadIntent<'a> {
    /// A plain read of the current version of `key`: the whole body, no conditions.
    pub fn get(key: &'a str) -> Self {
        Self {
            key,
            version: None,
            body: true,
            range: None,
            if_range: false,
            conditional: false,
            peer_fill: false,
        }
    }

    /// Whether only the current version would do and nothing asks for validators: the
    /// reads that may be answered from the origin without storing first.
    fn plain(&self) -> bool {
        self.version.is_none() && !self.conditional && !self.peer_fill
    }
}

/// What a read resolved to.
#[derive(Debug)]
pub enum Read {
    /// A stored version: the front applies preconditions and ranges to it.
    Stored(Arc<StoredVersion>),
    /// The whole object, streamed as it fills from the origin (no version yet).
    Filling(Arc<Filling>),
    /// Bytes `first..=last` of an object filling from the origin, which has reached
    /// `first`.
    FillingRange {
        /// The fill.
        fill: Arc<Filling>,
        /// The range's first byte.
        first: u64,
        /// Its last byte.
        last: u64,
    },
    /// What the origin says of a key not held here (a HEAD that missed).
    OriginHead(OriginHead),
    /// The origin's answer streamed through, never stored (too large to cache, or a cold
    /// range); partial when it carries a `Content-Range`.
    PassThrough(OriginObject),
}

impl Objects {
    /// Resolves a read (see the module's list).
    pub async fn read(&self, r: &ReadIntent<'_>) -> Result<Read, ObjectError> {
        let key = r.key;
        if r.peer_fill && r.version.is_none() {
            let v = self.store.current(key);
            return v
                .map(Read::Stored)
                .ok_or_else(|| ObjectError::NotFound(key.to_owned()));
        }
        let (Some(rt), true) = (&self.origin, r.plain()) else {
            return self.lookup(key, r.version).await.map(Read::Stored);
        };
        let cold = || self.store.current(key).is_none() && !self.store.tier().on_disk(key);
        match (r.body, r.range) {
            // A HEAD while a fill is under way waits for it (below): answered from the
            // version it stores, as a GET after it would be, not from a second request.
            (false, _) if cold() && rt.filling(key).is_none() => {
                return match rt.head(key).await? {
                    Some(head) => Ok(Read::OriginHead(head)),
                    None => Err(ObjectError::NotFound(key.to_owned())),
                };
            }
            (true, Some(range)) if cold() => {
                return self.cold_range(rt, key, range, r.if_range).await
            }
            (true, None) => {
                return match rt.lookup(key, true).await {
                    Ok(Lookup::Stored(v)) => Ok(Read::Stored(v)),
                    Ok(Lookup::Filling(f)) => {
                        catalog::COLD_STREAMS.counter().increment(1);
                        Ok(Read::Filling(f))
                    }
                    Ok(Lookup::Missing) => Err(ObjectError::NotFound(key.to_owned())),
                    Err(FetchError::TooLarge { .. }) => self.pass_through(rt, key, None).await,
                    Err(e) => Err(e.into()),
                };
            }
            _ => {}
        }
        match self.lookup(key, None).await {
            Err(ObjectError::Fetch(FetchError::TooLarge { .. })) => {
                self.pass_through(rt, key, r.range).await
            }
            found => found.map(Read::Stored),
        }
    }

    /// A ranged GET of `key`, which is not stored: from the fill under way when it has
    /// reached the range's first byte (the rest follows as it arrives, no second request to
    /// the origin), else the origin's range, starting a whole-object fill with
    /// `--origin-fill whole`.
    async fn cold_range(
        &self,
        rt: &Arc<ReadThrough>,
        key: &str,
        range: &str,
        if_range: bool,
    ) -> Result<Read, ObjectError> {
        // A fill has no validators yet to hold an If-Range against.
        if let Some(fill) = rt.filling(key).filter(|_| !if_range) {
            if let RangeOutcome::Partial(first, last) = range::resolve(range, fill.length) {
                if first <= fill.received() {
                    catalog::COLD_STREAMS.counter().increment(1);
                    return Ok(Read::FillingRange { fill, first, last });
                }
            }
        }
        rt.range_missed(key);
        self.pass_through(rt, key, Some(range)).await
    }

    /// `key` (or its `range`, a `bytes=` value) straight from the origin, never stored.
    async fn pass_through(
        &self,
        rt: &ReadThrough,
        key: &str,
        range: Option<&str>,
    ) -> Result<Read, ObjectError> {
        let fetched = match range.filter(|r| r.starts_with("bytes=")) {
            Some(r) => rt.origin().get_range(key, r).await,
            None => rt.origin().get(key, None).await,
        }?;
        let mut obj = match fetched {
            Fetch::Found(obj) => obj,
            Fetch::NotFound => return Err(ObjectError::NotFound(key.to_owned())),
            Fetch::NotModified => {
                return Err(ObjectError::Origin(OriginError::Failed(
                    "it answered 304 to an unconditional request".into(),
                )))
            }
        };
        catalog::ORIGIN_PASS_THROUGH.counter().increment(1);
        obj.body = Box::pin(obj.body.map(|chunk| {
            chunk.inspect(|c| {
                catalog::ORIGIN_PASS_THROUGH_BYTES
                    .counter()
                    .increment(c.len() as u64);
            })
        }));
        Ok(Read::PassThrough(obj))
    }
}
