//! Multipart uploads (aws-cli and boto3 switch to them above 8 MiB): parts are staged in
//! memory outside the store, under their own budget (`--multipart-memory`) and expiry
//! (`--multipart-expiry`; abandoned uploads are reaped), bound to the access key that
//! created the upload. CompleteMultipartUpload checks part order, ETags and sizes, then
//! writes the parts as one contiguous immutable version.

use crate::catalog::S3_MULTIPART_REFUSED;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::conditions::WriteIf;
use super::digest::Integrity;
use super::objects::{publish, store_error};
use super::S3Front;

/// The smallest part but the last, as S3 requires.
const MIN_PART: u64 = 5 << 20;
/// Part numbers S3 allows.
const PART_NUMBERS: std::ops::RangeInclusive<i32> = 1..=10_000;

/// A staged part.
struct Part {
    data: Bytes,
    md5: [u8; 16],
    at: SystemTime,
}

/// What an upload's record costs besides its parts (the record, its id and keys in the
/// table), charged to `--multipart-memory` so that empty uploads are bounded too.
const RECORD: u64 = 1024;

/// An upload in progress.
struct Staged {
    bucket: String,
    s3_key: String,
    key: String,
    content_type: String,
    /// User metadata and headers the object will carry.
    headers: crate::store::ObjectHeaders,
    owner: Option<String>,
    started: Instant,
    initiated: SystemTime,
    parts: BTreeMap<i32, Part>,
}

impl Staged {
    /// Bytes of `--multipart-memory` this upload holds: its parts and its record.
    fn held(&self) -> u64 {
        RECORD
            + (self.bucket.len() + self.s3_key.len() + self.key.len()) as u64
            + self.headers.metadata_len() as u64
            + self
                .parts
                .values()
                .map(|p| p.data.len() as u64)
                .sum::<u64>()
    }
}

/// The multipart uploads in progress, and the memory their parts hold.
#[derive(Debug)]
pub struct Uploads {
    budget: u64,
    expiry: Duration,
    max_uploads: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: u64,
    uploads: HashMap<String, Staged>,
    /// Uploads completed lately (at most `max_uploads`, none older than the expiry), so
    /// that a Complete retried after a lost answer gets the same answer while the version
    /// it wrote is current — not `NoSuchUpload` for a write that succeeded.
    completed: HashMap<String, Completed>,
    completed_order: std::collections::VecDeque<(Instant, String)>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("used", &self.used)
            .field("uploads", &self.uploads.len())
            .finish()
    }
}

impl Uploads {
    /// No uploads yet; at most `max_uploads` at once, whose records and parts may hold
    /// `budget` bytes in all; an upload untouched for `expiry` is reaped.
    pub fn new(budget: u64, expiry: Duration, max_uploads: usize) -> Self {
        Self {
            budget,
            expiry,
            max_uploads,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes staged now.
    pub fn staged_bytes(&self) -> u64 {
        self.state().used
    }

    /// Uploads in progress now.
    pub fn len(&self) -> usize {
        self.state().uploads.len()
    }

    /// Whether no upload is in progress.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` unless `bucket` has uploads in progress (`None` then), with no upload
    /// created meanwhile.
    pub fn unless_uploading<T>(&self, bucket: &str, f: impl FnOnce() -> T) -> Option<T> {
        let st = self.state();
        if st.uploads.values().any(|u| u.bucket == bucket) {
            return None;
        }
        let out = f();
        drop(st);
        Some(out)
    }

    /// Drops uploads older than the expiry; returns how many.
    pub fn reap(&self) -> usize {
        let mut st = self.state();
        let expired: Vec<String> = st
            .uploads
            .iter()
            .filter(|(_, u)| u.started.elapsed() >= self.expiry)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            if let Some(u) = st.uploads.remove(id) {
                st.used -= u.held();
                tracing::info!(upload = %id, key = %u.key, parts = u.parts.len(), "abandoned multipart upload reaped");
            }
        }
        st.reaped(expired.len());
        expired.len()
    }

    /// Reaps expired uploads every quarter of the expiry, for ever.
    pub async fn run_reaper(self: Arc<Self>) {
        let mut tick = tokio::time::interval((self.expiry / 4).max(Duration::from_millis(100)));
        loop {
            tick.tick().await;
            self.reap();
        }
    }
}

mod completed;
mod listing;
use completed::{completed_again, completion, Completed};
pub(in crate::s3) use listing::{list_parts, list_uploads};

/// The upload `id` of `bucket`/`s3_key` may be used by `who`.
fn check_owner(
    st: &State,
    id: &str,
    bucket: &str,
    s3_key: &str,
    who: Option<&str>,
) -> S3Result<()> {
    let Some(u) = st.uploads.get(id) else {
        return Err(s3_error!(NoSuchUpload));
    };
    if u.bucket != bucket || u.s3_key != s3_key {
        return Err(s3_error!(NoSuchUpload, "the upload is of another key"));
    }
    if u.owner.is_some() && u.owner.as_deref() != who {
        return Err(s3_error!(
            AccessDenied,
            "the upload belongs to another access key"
        ));
    }
    Ok(())
}

fn who<T>(req: &S3Request<T>) -> Option<String> {
    req.credentials.as_ref().map(|c| c.access_key.clone())
}

pub(super) async fn create(
    front: &S3Front,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let owner = who(&req);
    let i = req.input;
    let key = front.key(&i.bucket, &i.key)?.key;
    let headers = super::headers::headers_of!(i)?;
    let id = hex::encode(rand::random::<[u8; 16]>());
    let staged = Staged {
        bucket: i.bucket.clone(),
        s3_key: i.key.clone(),
        key,
        headers,
        content_type: i
            .content_type
            .unwrap_or_else(|| crate::media::DEFAULT_CONTENT_TYPE.to_owned()),
        owner,
        started: Instant::now(),
        initiated: SystemTime::now(),
        parts: BTreeMap::new(),
    };
    let uploads = &front.uploads;
    let mut st = uploads.state();
    // Again under the lock: DeleteBucket removes a bucket only under it too.
    front.key(&i.bucket, &i.key)?;
    let held = staged.held();
    if st.uploads.len() >= uploads.max_uploads || st.used + held > uploads.budget {
        S3_MULTIPART_REFUSED.counter().increment(1);
        return Err(s3_error!(
            SlowDown,
            "{} multipart uploads are in progress holding {} bytes (--multipart-max-uploads {}, --multipart-memory {}); complete or abort some, or retry later",
            st.uploads.len(),
            st.used,
            uploads.max_uploads,
            uploads.budget
        ));
    }
    st.used += held;
    st.uploads.insert(id.clone(), staged);
    st.report();
    drop(st);
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(i.bucket),
        key: Some(i.key),
        upload_id: Some(id),
        ..Default::default()
    }))
}

pub(super) async fn upload_part(
    front: &S3Front,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let owner = who(&req);
    let trailers = req.trailing_headers;
    let headers = req.headers;
    let i = req.input;
    if !PART_NUMBERS.contains(&i.part_number) {
        return Err(s3_error!(InvalidArgument, "part numbers are 1 to 10000"));
    }
    let len = super::payload_length(i.content_length, &headers)?;
    let uploads = &front.uploads;
    {
        let mut st = uploads.state();
        check_owner(&st, &i.upload_id, &i.bucket, &i.key, owner.as_deref())?;
        if st.used + len > uploads.budget {
            return Err(s3_error!(
                SlowDown,
                "multipart staging memory is full (--multipart-memory {} bytes); retry later",
                uploads.budget
            ));
        }
        st.used += len; // reserved now, so concurrent parts cannot overshoot
    }
    let release = |n: u64| {
        let mut st = uploads.state();
        st.used -= n;
    };
    let mut integrity = match Integrity::new(super::digest::claims!(i), false) {
        Ok(x) => x,
        Err(e) => {
            release(len);
            return Err(e);
        }
    };
    let mut data = BytesMut::with_capacity(len as usize);
    let mut md5 = Md5::new();
    if let Some(mut body) = i.body {
        let pace = front.pace();
        loop {
            let chunk = match front.next_chunk(&mut body, &pace, data.len() as u64).await {
                Ok(None) => break,
                Ok(Some(c)) if (data.len() + c.len()) as u64 <= len => c,
                Ok(Some(_)) => {
                    release(len);
                    return Err(s3_error!(
                        IncompleteBody,
                        "the part is longer than its Content-Length"
                    ));
                }
                Err(e) => {
                    release(len);
                    return Err(e);
                }
            };
            integrity.update(&chunk);
            md5.update(&chunk);
            data.extend_from_slice(&chunk);
        }
    }
    if data.len() as u64 != len {
        release(len);
        return Err(s3_error!(
            IncompleteBody,
            "the part is shorter than its Content-Length"
        ));
    }
    let trailers = trailers.and_then(|t| t.take());
    if let Err(e) = integrity.verify(trailers.as_ref()) {
        release(len);
        return Err(e);
    }
    let md5: [u8; 16] = md5.finalize().into();
    let mut st = uploads.state();
    // Aborted or reaped meanwhile: the part has nowhere to go.
    if let Err(e) = check_owner(&st, &i.upload_id, &i.bucket, &i.key, owner.as_deref()) {
        st.used -= len;
        return Err(e);
    }
    let part = Part {
        data: data.freeze(),
        md5,
        at: SystemTime::now(),
    };
    let upload = st.uploads.get_mut(&i.upload_id).expect("checked above");
    let replaced = upload.parts.insert(i.part_number, part);
    if let Some(old) = replaced {
        st.used -= old.data.len() as u64;
    }
    st.report();
    Ok(S3Response::new(UploadPartOutput {
        e_tag: Some(ETag::Strong(hex::encode(md5))),
        ..Default::default()
    }))
}

pub(super) async fn complete(
    front: &S3Front,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let owner = who(&req);
    let i = req.input;
    let asked: Vec<CompletedPart> = i.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
    if asked.is_empty() {
        return Err(s3_error!(MalformedXML, "no parts listed"));
    }
    // Take the upload out while it is assembled: a second Complete finds nothing.
    let again = {
        let st = front.uploads.state();
        match st.uploads.contains_key(&i.upload_id) {
            true => None,
            false => st.completed.get(&i.upload_id).cloned(),
        }
    };
    if let Some(done) = again {
        return completed_again(front, &done, &i.bucket, &i.key, owner.as_deref()).await;
    }
    let staged = {
        let mut st = front.uploads.state();
        check_owner(&st, &i.upload_id, &i.bucket, &i.key, owner.as_deref())?;
        st.uploads.remove(&i.upload_id).expect("checked above")
    };
    let staged_bytes = staged.held();
    let result = assemble(
        front,
        &staged,
        &asked,
        &WriteIf::new(i.if_match.as_ref(), i.if_none_match.as_ref()),
    )
    .await;
    match result {
        Ok(v) => {
            let done = Completed {
                bucket: i.bucket,
                s3_key: i.key,
                key: staged.key,
                owner: staged.owner,
                version: v.version().to_string(),
                etag: front.etag(&v),
            };
            let answer = completion(&done);
            let mut st = front.uploads.state();
            st.used -= staged_bytes;
            st.report();
            let (max, expiry) = (front.uploads.max_uploads, front.uploads.expiry);
            st.remember(i.upload_id, done, max, expiry);
            drop(st);
            Ok(answer)
        }
        Err(e) => {
            // A list the client can fix (or a busy store): the upload stays.
            front
                .uploads
                .state()
                .uploads
                .insert(i.upload_id.clone(), staged);
            Err(e)
        }
    }
}

/// Checks the listed parts against the staged ones and writes them as one version.
async fn assemble(
    front: &S3Front,
    staged: &Staged,
    asked: &[CompletedPart],
    cond: &WriteIf,
) -> S3Result<Arc<crate::store::StoredVersion>> {
    // Order first (S3 reports a misordered list before anything about its parts).
    let numbers: Vec<i32> = asked
        .iter()
        .map(|p| {
            p.part_number
                .ok_or_else(|| s3_error!(InvalidPart, "a part has no number"))
        })
        .collect::<S3Result<_>>()?;
    if numbers.windows(2).any(|w| w[1] <= w[0]) {
        return Err(s3_error!(
            InvalidPartOrder,
            "parts must be listed in ascending order"
        ));
    }
    let mut parts = Vec::with_capacity(asked.len());
    for (n, (p, number)) in asked.iter().zip(&numbers).enumerate() {
        let Some(part) = staged.parts.get(number) else {
            return Err(s3_error!(InvalidPart, "part {number} was not uploaded"));
        };
        let etag = p
            .e_tag
            .as_ref()
            .map(|e| e.value().trim_matches('"').to_owned());
        if etag.as_deref() != Some(&hex::encode(part.md5)[..]) {
            return Err(s3_error!(
                InvalidPart,
                "part {number}'s ETag does not match"
            ));
        }
        if n + 1 < asked.len() && (part.data.len() as u64) < MIN_PART {
            return Err(s3_error!(
                EntityTooSmall,
                "part {number} is under 5 MiB and not the last"
            ));
        }
        parts.push(part);
    }
    let total: u64 = parts.iter().map(|p| p.data.len() as u64).sum();
    if total > front.limits.max_object_size {
        return Err(s3_error!(
            EntityTooLarge,
            "{total} bytes is over the gateway's maximum object size"
        ));
    }
    let at = super::Located {
        objects: front.objects_of(&staged.bucket)?,
        key: staged.key.clone(),
    };
    let mut upload = at
        .store()
        .writes()
        .begin(&at.key, &staged.content_type, total)
        .await
        .map_err(store_error)?;
    let mut md5s = Md5::new();
    for p in &parts {
        upload.write(&p.data).map_err(store_error)?;
        md5s.update(p.md5);
    }
    // S3's multipart ETag: the MD5 of the parts' MD5s, and their count.
    upload.set_s3_etag(Some(format!(
        "{}-{}",
        hex::encode(md5s.finalize()),
        parts.len()
    )));
    upload.set_headers(staged.headers.clone());
    let sealed = at.store().writes().seal(upload).map_err(store_error)?;
    publish(&at, sealed, cond).await
}

pub(super) async fn abort(
    front: &S3Front,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let owner = who(&req);
    let i = req.input;
    let mut st = front.uploads.state();
    check_owner(&st, &i.upload_id, &i.bucket, &i.key, owner.as_deref())?;
    let u = st.uploads.remove(&i.upload_id).expect("checked above");
    st.used -= u.held();
    st.report();
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}
