//! Bucket operations: ListBuckets, CreateBucket and DeleteBucket (buckets are the
//! operator's `--s3-bucket` ones and namespaces; with `--s3-create-buckets` CreateBucket
//! makes a namespace), HeadBucket, GetBucketLocation, GetBucketVersioning.

use s3s::dto::*;
use s3s::{s3_error, S3Response, S3Result};

use super::listing::owner;
use super::S3Front;
use crate::objects::namespaces::CreateError;

pub(super) fn list_buckets(front: &S3Front) -> S3Response<ListBucketsOutput> {
    let namespaces = front.namespaces.all();
    let named = namespaces
        .iter()
        .filter(|ns| ns.name != crate::objects::namespaces::DEFAULT)
        .map(|ns| ns.name.clone());
    let buckets = front
        .buckets
        .iter()
        .map(|b| b.name.clone())
        .chain(named)
        .map(|name| s3s::dto::Bucket {
            name: Some(name),
            creation_date: Some(Timestamp::from(front.started)),
            ..Default::default()
        })
        .collect();
    S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        owner: Some(owner()),
        ..Default::default()
    })
}

/// CreateBucket: a bucket that exists (a `--s3-bucket`, a namespace's) succeeds, as S3
/// answers its owner (tools such as rclone create the bucket before copying); with
/// `--s3-create-buckets` another becomes a new namespace for a caller that `may` (the
/// `buckets` scope, or `admin`); else it is refused, saying why.
pub(super) fn create_bucket(
    front: &S3Front,
    bucket: &str,
    may: bool,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let made = || {
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{bucket}")),
        }))
    };
    if front.bucket(bucket).is_ok() {
        return made();
    }
    let Some(quota) = front.bucket_quota else {
        return Err(s3_error!(
            AccessDenied,
            "this gateway serves the buckets its operator configured (--s3-bucket, and a namespace of --namespaces each); {bucket:?} is not one of them, and it runs without --s3-create-buckets"
        ));
    };
    if !may {
        return Err(no_bucket_rights("CreateBucket"));
    }
    match front.namespaces.create(bucket, quota) {
        Ok(_) => made(),
        Err(why @ CreateError::Name(_)) => Err(s3_error!(InvalidBucketName, "{why}")),
        Err(why) => Err(s3_error!(
            TooManyBuckets,
            "{bucket:?} cannot be made: {why}"
        )),
    }
}

/// DeleteBucket: removes an empty bucket made by CreateBucket (`--s3-create-buckets`),
/// for a caller that `may`; one with multipart uploads in progress is not empty (as S3
/// answers), so no staged part is stranded. The operator's buckets (`--s3-bucket`) and
/// namespaces (lines of `--namespaces` that CreateBucket did not add) stay, for anyone.
pub(super) fn delete_bucket(
    front: &S3Front,
    bucket: &str,
    may: bool,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    use crate::objects::namespaces::RemoveError;
    if front.buckets.iter().any(|b| b.name == bucket) || front.bucket_quota.is_none() {
        front.bucket(bucket)?;
        return Err(s3_error!(
            AccessDenied,
            "{bucket:?} is one of the operator's buckets; it cannot be deleted through S3"
        ));
    }
    if !may {
        return Err(no_bucket_rights("DeleteBucket"));
    }
    // Under the uploads' lock: no upload can start in the bucket while it is removed.
    let removed = front
        .uploads
        .unless_uploading(bucket, || front.namespaces.remove(bucket));
    match removed {
        Some(Ok(())) => Ok(S3Response::new(DeleteBucketOutput::default())),
        None => Err(s3_error!(
            BucketNotEmpty,
            "{bucket:?} has multipart uploads in progress: complete or abort them first (ListMultipartUploads, AbortMultipartUpload)"
        )),
        Some(Err(RemoveError::NotFound(_))) => Err(s3_error!(NoSuchBucket)),
        Some(Err(RemoveError::NotEmpty(_))) => Err(s3_error!(BucketNotEmpty)),
        Some(Err(RemoveError::Operator(_))) => Err(s3_error!(
            AccessDenied,
            "{bucket:?} is one of the operator's namespaces (--namespaces); only buckets made by CreateBucket can be deleted through S3"
        )),
        Some(Err(RemoveError::Refused(why))) => Err(s3_error!(InternalError, "{why}")),
    }
}

fn no_bucket_rights(op: &str) -> s3s::S3Error {
    s3_error!(
        AccessDenied,
        "{op} makes or removes a namespace: it needs an access key with the 'buckets' scope (or 'admin'); 'write' is not enough"
    )
}

pub(super) fn head_bucket(front: &S3Front, bucket: &str) -> S3Result<S3Response<HeadBucketOutput>> {
    front.bucket(bucket)?;
    Ok(S3Response::new(HeadBucketOutput::default()))
}

pub(super) fn get_bucket_location(
    front: &S3Front,
    bucket: &str,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    front.bucket(bucket)?;
    Ok(S3Response::new(GetBucketLocationOutput::default()))
}

pub(super) fn get_bucket_versioning(
    front: &S3Front,
    bucket: &str,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    front.bucket(bucket)?;
    // Not enabled: old versions vanish when reclaimed, which is not S3 versioning.
    Ok(S3Response::new(GetBucketVersioningOutput::default()))
}
