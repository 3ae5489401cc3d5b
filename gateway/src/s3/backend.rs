//! The `s3s::S3` implementation: each supported operation handed to the file that does it;
//! everything else answers `NotImplemented` (the trait's default).

use std::sync::Arc;

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};

use super::{batch, buckets, copy, listing, multipart, objects, S3Front};

/// Rasa as an S3 service.
#[derive(Debug, Clone)]
pub(super) struct Rasa(pub(super) Arc<S3Front>);

type Answer<T> = S3Result<S3Response<T>>;

/// Whether the access check found the caller may make and remove buckets.
fn may_make_buckets<T>(req: &S3Request<T>) -> bool {
    req.extensions
        .get::<super::keys::BucketRights>()
        .is_some_and(|r| r.0)
}

#[async_trait::async_trait]
impl S3 for Rasa {
    async fn get_object(&self, req: S3Request<GetObjectInput>) -> Answer<GetObjectOutput> {
        objects::get_object(&self.0, req).await
    }
    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> Answer<HeadObjectOutput> {
        objects::head_object(&self.0, req).await
    }
    async fn put_object(&self, req: S3Request<PutObjectInput>) -> Answer<PutObjectOutput> {
        objects::put_object(&self.0, req).await
    }
    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> Answer<DeleteObjectOutput> {
        objects::delete_object(&self.0, req).await
    }
    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> Answer<DeleteObjectsOutput> {
        batch::delete_objects(&self.0, req).await
    }
    async fn copy_object(&self, req: S3Request<CopyObjectInput>) -> Answer<CopyObjectOutput> {
        copy::copy_object(&self.0, req).await
    }
    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> Answer<ListObjectsV2Output> {
        listing::list_objects_v2(&self.0, req).await
    }
    async fn list_objects(&self, req: S3Request<ListObjectsInput>) -> Answer<ListObjectsOutput> {
        listing::list_objects(&self.0, req).await
    }
    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> Answer<ListObjectVersionsOutput> {
        super::versions::list_object_versions(&self.0, req).await
    }
    async fn list_buckets(&self, _: S3Request<ListBucketsInput>) -> Answer<ListBucketsOutput> {
        Ok(buckets::list_buckets(&self.0))
    }
    async fn delete_bucket(&self, req: S3Request<DeleteBucketInput>) -> Answer<DeleteBucketOutput> {
        buckets::delete_bucket(&self.0, &req.input.bucket, may_make_buckets(&req))
    }
    async fn create_bucket(&self, req: S3Request<CreateBucketInput>) -> Answer<CreateBucketOutput> {
        buckets::create_bucket(&self.0, &req.input.bucket, may_make_buckets(&req))
    }
    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> Answer<HeadBucketOutput> {
        buckets::head_bucket(&self.0, &req.input.bucket)
    }
    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> Answer<GetBucketLocationOutput> {
        buckets::get_bucket_location(&self.0, &req.input.bucket)
    }
    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> Answer<GetBucketVersioningOutput> {
        buckets::get_bucket_versioning(&self.0, &req.input.bucket)
    }
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> Answer<CreateMultipartUploadOutput> {
        multipart::create(&self.0, req).await
    }
    async fn upload_part(&self, req: S3Request<UploadPartInput>) -> Answer<UploadPartOutput> {
        multipart::upload_part(&self.0, req).await
    }
    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> Answer<CompleteMultipartUploadOutput> {
        multipart::complete(&self.0, req).await
    }
    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> Answer<AbortMultipartUploadOutput> {
        multipart::abort(&self.0, req).await
    }
    async fn list_parts(&self, req: S3Request<ListPartsInput>) -> Answer<ListPartsOutput> {
        multipart::list_parts(&self.0, req).await
    }
    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> Answer<ListMultipartUploadsOutput> {
        multipart::list_uploads(&self.0, req).await
    }
    /// POST (browser form) uploads are refused: their policy is not checked here, and
    /// the trait's default would store them as a PutObject.
    async fn post_object(&self, _: S3Request<PostObjectInput>) -> Answer<PostObjectOutput> {
        Err(s3s::s3_error!(
            NotImplemented,
            "POST (browser form) uploads are not supported; nothing was stored"
        ))
    }
}
