//! Uploads completed lately, remembered so that a CompleteMultipartUpload retried after a
//! lost answer gets the same answer while the version it wrote is current.

use std::time::{Duration, Instant};

use s3s::dto::{CompleteMultipartUploadOutput, ETag};
use s3s::{s3_error, S3Response, S3Result};

use super::State;
use crate::s3::S3Front;

/// What a completed upload wrote.
#[derive(Clone)]
pub(super) struct Completed {
    pub(super) bucket: String,
    pub(super) s3_key: String,
    pub(super) key: String,
    pub(super) owner: Option<String>,
    pub(super) version: String,
    pub(super) etag: String,
}

impl State {
    /// Sets the gauge of the memory unfinished uploads hold (after `used` changed).
    pub(super) fn report(&self) {
        crate::catalog::S3_MULTIPART_BYTES
            .gauge()
            .set(self.used as f64);
    }

    /// Reports `n` uploads reaped (after they were dropped).
    pub(super) fn reaped(&self, n: usize) {
        self.report();
        crate::catalog::S3_MULTIPART_REAPED
            .counter()
            .increment(n as u64);
    }

    /// Remembers a completed upload, forgetting the oldest beyond `max` or `expiry`.
    pub(super) fn remember(&mut self, id: String, done: Completed, max: usize, expiry: Duration) {
        self.completed_order.push_back((Instant::now(), id.clone()));
        self.completed.insert(id, done);
        while let Some((at, old)) = self.completed_order.front() {
            if self.completed_order.len() <= max && at.elapsed() < expiry {
                break;
            }
            self.completed.remove(old);
            self.completed_order.pop_front();
        }
    }
}

/// The answer of a completed upload.
pub(super) fn completion(done: &Completed) -> S3Response<CompleteMultipartUploadOutput> {
    S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(done.bucket.clone()),
        key: Some(done.s3_key.clone()),
        e_tag: Some(ETag::Strong(done.etag.clone())),
        version_id: Some(done.version.clone()),
        ..Default::default()
    })
}

/// A Complete of an upload already completed (a retry after a lost answer): the same
/// answer, if it is the same key and owner and the version it wrote is still current.
pub(super) async fn completed_again(
    front: &S3Front,
    done: &Completed,
    bucket: &str,
    s3_key: &str,
    who: Option<&str>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    if done.bucket != bucket || done.s3_key != s3_key || done.owner.as_deref() != who {
        return Err(s3_error!(NoSuchUpload));
    }
    let still_current = front
        .objects_of(bucket)?
        .precheck(&done.key, |cur| match cur {
            Some(v) if v.version().to_string() == done.version => Ok(()),
            _ => Err(crate::store::StoreError::PreconditionFailed(String::new())),
        })
        .await;
    if still_current.is_err() {
        return Err(s3_error!(
            NoSuchUpload,
            "the upload was completed, and the version it wrote has since been replaced"
        ));
    }
    Ok(completion(done))
}
