//! One-sided writes (`FabricPool::put_many`): a batch of values written straight into the
//! gateway's memory over the fabric. The gateway opens an upload region for the batch
//! (`POST /v1/batch/reserve`: a key that allows remote writes only), the values' bytes
//! are written one-sided (on the gateway's host by cross-memory attach, from the caller's
//! own memory; elsewhere with `fi_write`), and the commit (`POST /v1/batch/commit/{id}`)
//! carries each value's frame checksum, computed here from the bytes written: the gateway
//! stores a value only when the bytes in its memory hash to it.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rasa_fastpath::frame::{key_hash, FrameHasher, FrameIdentity};
use rasa_fastpath::reader::RemoteWrite;
use rasa_openapi::{
    Descriptor, PutBatchManifest, PutBatchResponse, UploadCommit, UploadRegion, UploadSlot,
};

use crate::batch::Each;
use crate::fabric::{FabricPool, FabricState};
use crate::{Error, ReadPath};

/// Batches smaller than this go over HTTP: a region's reservation and commit are two
/// round trips, which a small body's one does not pay.
pub const ONE_SIDED_MIN_BYTES: u64 = 64 << 10;

/// What is left of an upload's lease when its bytes must be written: a margin for the
/// commit to arrive in time.
const COMMIT_MARGIN: Duration = Duration::from_millis(500);

impl crate::client::Node {
    /// Whether a write of `bytes` bytes goes one-sided (the fast path not off, not known
    /// to be unavailable here, and enough bytes to be worth a region).
    pub(crate) fn writes_one_sided(&self, bytes: u64) -> bool {
        self.fast_path != crate::FastPath::Off
            && bytes >= ONE_SIDED_MIN_BYTES
            && !self.fabric.known_unavailable()
    }

    /// Stores one value in memory: one-sided when [`Node::writes_one_sided`] (over HTTP
    /// when no region could be had: nothing was stored), else with a `PUT`.
    pub(crate) async fn put_one(
        &self,
        key: &str,
        bytes: Bytes,
        content_type: Option<&str>,
    ) -> Result<Descriptor, Error> {
        rasa_openapi::key::validate(key).map_err(|why| Error::invalid_key(key, &why))?;
        if self.writes_one_sided(bytes.len() as u64) {
            let items = [(key, bytes.clone())];
            match self.put_one_sided(&items, content_type, true).await {
                // A member that does not own the key gives it no room (the owner, suspect
                // here, is asked through it over HTTP instead).
                Ok(mut one) => match one.pop().expect("one result") {
                    Err(p) if p.status == 421 => {
                        tracing::debug!(key, "not the key's owner; the value goes over HTTP");
                    }
                    r => return r.map_err(Error::Problem),
                },
                Err(Error::FastPath(why)) if self.fast_path != crate::FastPath::Required => {
                    tracing::debug!(%why, "one-sided write refused; the value goes over HTTP");
                }
                Err(e) => return Err(e),
            }
        }
        let d = self.http.put_typed(key, bytes, content_type).await?;
        self.counters.wrote(ReadPath::Http, 1);
        Ok(d)
    }

    /// Stores `items` one-sided: one result per item, as a put batch answers; with
    /// `sha256` (a lone `put`, whose answer names its value's SHA-256 as a PUT's does, for
    /// a later `If-Match`) the gateway hashes each value before it answers, where a
    /// batch's are left to the first reader that needs them. An
    /// `Error::FastPath` means nothing was stored (no region, or a write that failed: the
    /// region is reclaimed when its lease ends), so the caller may send the batch over
    /// HTTP instead.
    pub(crate) async fn put_one_sided(
        &self,
        items: &[(&str, Bytes)],
        content_type: Option<&str>,
        sha256: bool,
    ) -> Result<Vec<Each<Descriptor>>, Error> {
        let sizes = items.iter().map(|(k, v)| (*k, v.len() as u64));
        let region = self.reserve(sizes, content_type).await?;
        // The values the gateway refused get their problem; the others are written.
        let room: Vec<usize> = (0..items.len())
            .filter(|&i| region.items[i].error.is_none())
            .collect();
        let mut out: Vec<Option<Each<Descriptor>>> = region
            .items
            .iter()
            .map(|s| s.error.clone().map(Err))
            .collect();
        if room.is_empty() {
            return Ok(out.into_iter().map(|r| r.expect("refused")).collect());
        }
        let deadline = commit_deadline(&region);
        let slots: Vec<&UploadSlot> = room.iter().map(|&i| &region.items[i]).collect();
        let values: Vec<(&str, Bytes)> = room.iter().map(|&i| items[i].clone()).collect();
        let checksums = write_region(&self.fabric, &region, &slots, &values, deadline).await?;
        let keys: Vec<&str> = items.iter().map(|(k, _)| *k).collect();
        let results = self.commit(&region, &keys, checksums, sha256).await?;
        for (&i, r) in room.iter().zip(results) {
            out[i] = Some(r);
        }
        Ok(out
            .into_iter()
            .map(|r| r.expect("every value answered"))
            .collect())
    }

    /// Asks for an upload region for values of these keys and lengths; an
    /// `Error::FastPath` when there is none (nothing reserved).
    pub(crate) async fn reserve<'k>(
        &self,
        sizes: impl Iterator<Item = (&'k str, u64)>,
        content_type: Option<&str>,
    ) -> Result<UploadRegion, Error> {
        let http = &self.http;
        let mut manifest = PutBatchManifest::of(sizes);
        let n = manifest.items.len();
        for item in &mut manifest.items {
            item.content_type = content_type.map(str::to_owned);
        }
        let reserve = format!("{}/v1{}/batch/reserve", http.endpoint, http.space);
        let region: UploadRegion = match http.send(http.http.post(reserve).json(&manifest)).await {
            Ok(resp) => http
                .decode(resp)
                .await
                .map_err(|e| Error::FastPath(format!("no upload region: {e}")))?,
            Err(e) => return Err(Error::FastPath(format!("no upload region: {e}"))),
        };
        if region.items.len() != n {
            return Err(Error::Protocol(format!(
                "an upload region for {n} values named {}",
                region.items.len()
            )));
        }
        Ok(region)
    }

    /// Commits `region` (reserved for `keys`) with the frame checksums of the values that
    /// had room, in order: their results, counted. With `sha256`, each answer names its
    /// value's SHA-256.
    pub(crate) async fn commit(
        &self,
        region: &UploadRegion,
        keys: &[&str],
        checksums: Vec<String>,
        sha256: bool,
    ) -> Result<Vec<Each<Descriptor>>, Error> {
        let http = &self.http;
        let mut commit = format!(
            "{}/v1{}/batch/commit/{}",
            http.endpoint, http.space, region.upload
        );
        if http.lease_puts {
            commit.push_str("?lease=true");
        }
        let written = checksums.len();
        let body = UploadCommit { checksums, sha256 };
        let resp = http.send(http.http.post(commit).json(&body)).await;
        for k in keys {
            http.descriptors.forget(k);
        }
        let batch: PutBatchResponse = http.decode(resp?).await?;
        if batch.results.len() != written {
            return Err(Error::Protocol(format!(
                "a commit of {written} values answered with {} results",
                batch.results.len()
            )));
        }
        let out: Vec<Each<Descriptor>> =
            batch.results.into_iter().map(|r| r.into_result()).collect();
        self.fabric
            .counters
            .wrote(ReadPath::Fabric, out.iter().filter(|r| r.is_ok()).count());
        Ok(out)
    }
}

/// When the bytes of `region` must be written by: its lease, less a margin for the commit.
pub(crate) fn commit_deadline(region: &UploadRegion) -> Instant {
    Instant::now() + Duration::from_millis(region.lease_ms).saturating_sub(COMMIT_MARGIN)
}

/// The frame identity of the value of `key`, `length` bytes, that `slot` has room for;
/// an error when the slot names another value or a malformed version.
pub(crate) fn slot_identity(
    slot: &UploadSlot,
    key: &str,
    length: u64,
) -> Result<FrameIdentity, Error> {
    let version = u64::from_str_radix(&slot.version, 16)
        .map_err(|_| Error::Protocol(format!("bad version {:?}", slot.version)))?;
    if slot.key != key || slot.length != length {
        return Err(Error::Protocol(format!(
            "the upload region's slot for '{key}' names '{}' of {} bytes",
            slot.key, slot.length
        )));
    }
    Ok(FrameIdentity {
        key_hash: key_hash(key),
        version,
        payload_len: length,
    })
}

/// Where `region` starts on the gateway endpoint `state` is connected to.
pub(crate) fn region_on<'r>(
    region: &'r UploadRegion,
    state: &FabricState,
) -> Result<&'r rasa_openapi::RemoteRegion, Error> {
    let endpoint = match state {
        FabricState::Ready { endpoint, .. } => *endpoint,
        _ => 0,
    };
    region.endpoints.get(endpoint).ok_or_else(|| {
        Error::FastPath(format!(
            "the upload region names no address on the gateway's fabric endpoint {endpoint}"
        ))
    })
}

/// Writes `items` into their `slots` of `region` on `pool`'s endpoint before `deadline`,
/// and answers each value's frame checksum (hex) for the commit.
async fn write_region(
    pool: &FabricPool,
    region: &UploadRegion,
    slots: &[&UploadSlot],
    items: &[(&str, Bytes)],
    deadline: Instant,
) -> Result<Vec<String>, Error> {
    let state = pool.ready_endpoint(deadline).await?;
    let start = region_on(region, &state)?;
    let mut plan = Vec::with_capacity(items.len());
    for ((key, value), slot) in items.iter().zip(slots) {
        let id = slot_identity(slot, key, value.len() as u64)?;
        plan.push((start.addr + slot.offset, id, value.clone()));
    }
    let rkey = start.rkey;
    let timeout = deadline
        .saturating_duration_since(Instant::now())
        .min(pool.call_timeout.left());
    let (written, _) = pool
        .on_reader(state, plan, move |reader, plan| {
            let writes: Vec<RemoteWrite<'_>> = plan
                .iter()
                .map(|(addr, _, bytes)| RemoteWrite {
                    addr: *addr,
                    rkey,
                    bytes,
                })
                .collect();
            // Each checksum from the bytes as they are sent (the caller's own memory),
            // each piece hashed just before it is written, while in the cache.
            let hashers: Vec<Mutex<FrameHasher>> = plan
                .iter()
                .map(|_| Mutex::new(FrameHasher::new()))
                .collect();
            let seen = |i: usize, piece: &[u8]| {
                hashers[i]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .update(piece)
            };
            reader.write_many(&writes, &seen, timeout)?;
            Ok(hashers
                .into_iter()
                .zip(plan.iter())
                .map(|(h, (_, id, _))| {
                    let h = h.into_inner().unwrap_or_else(PoisonError::into_inner);
                    format!("{:016x}", h.seal(*id, 0).1)
                })
                .collect())
        })
        .await;
    written
}
