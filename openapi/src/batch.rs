//! Batch writes: many values in one `POST /v1/batch/put`, many deletes in one
//! `POST /v1/batch/delete`.
//!
//! A put batch's body is framed so the gateway can stream every value straight into
//! memory: one line of JSON, the [`PutBatchManifest`] (keys, lengths, media types; JSON
//! escapes every newline inside it), a `\n`, then the values back to back in manifest
//! order, each exactly its `length` bytes. Nothing else follows the last value.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{DescriptorResult, Problem};

/// Media type of a put batch's body.
pub const BATCH_CONTENT_TYPE: &str = "application/vnd.rasa.batch";

/// The first line of a put batch's body: the values that follow, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBatchManifest {
    /// One entry per value, in the order the values follow.
    pub items: Vec<PutBatchItem>,
}

impl PutBatchManifest {
    /// The manifest of values with these keys and lengths (the default media type).
    pub fn of<'k>(values: impl IntoIterator<Item = (&'k str, u64)>) -> Self {
        let items = values
            .into_iter()
            .map(|(key, length)| PutBatchItem {
                key: key.to_owned(),
                length,
                content_type: None,
            })
            .collect();
        Self { items }
    }

    /// The manifest as a batch body's first line: its JSON and `\n`.
    pub fn line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("a manifest serializes");
        line.push(b'\n');
        line
    }
}

/// One value of a put batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBatchItem {
    /// The key to store the value under (as in `PUT /v1/objects/{key}`).
    #[schema(example = "kv/layer0/block7")]
    pub key: String,
    /// The value's length in bytes: exactly this many bytes of the body are this value.
    /// (An integral JSON number written with a fraction, `114.0`, is that integer, as
    /// JSON Schema's `integer` has it.)
    #[serde(deserialize_with = "whole_number")]
    pub length: u64,
    /// Stored and served back; default `application/octet-stream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

/// Answer to a put batch: one result per value, in manifest order, each a descriptor of
/// the new version or the problem that kept that value alone from being stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PutBatchResponse {
    /// One result per value, in manifest order.
    pub results: Vec<DescriptorResult>,
}

/// Keys to delete in one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteBatchRequest {
    /// The keys, deleted in this order (an absent key is deleted too).
    #[schema(example = json!(["kv/layer0/block7", "kv/layer0/block8"]))]
    pub keys: Vec<String>,
}

/// The answer for one key of a delete batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeleteResult {
    /// The key as requested.
    pub key: String,
    /// Why this key was not deleted; absent when it was (or was already absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

/// Answer to a [`DeleteBatchRequest`]: one result per key, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeleteBatchResponse {
    /// One result per key, in request order.
    pub results: Vec<DeleteResult>,
}

/// Keys whose presence to check in one request (`POST /v1/batch/exists`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExistsBatchRequest {
    /// The keys, answered in this order.
    #[schema(example = json!(["kv/layer0/block7", "kv/layer0/block8"]))]
    pub keys: Vec<String>,
}

/// The answer for one key of an exists batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExistsResult {
    /// The key as requested.
    pub key: String,
    /// Whether the key has a current version in the gateway's memory or disk tier (an
    /// object only the origin holds is not counted; no value is read).
    pub exists: bool,
    /// Why this key could not be checked (`exists` is then false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

/// Answer to an [`ExistsBatchRequest`]: one result per key, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExistsBatchResponse {
    /// One result per key, in request order.
    pub results: Vec<ExistsResult>,
}

/// An upload region (`POST /v1/batch/reserve`): memory of the gateway a client with the
/// fast path writes values into one-sided, then commits (`POST /v1/batch/commit/{upload}`).
/// The region's key allows remote writes only and is revoked at the commit; no descriptor
/// exposes the region while the upload is open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UploadRegion {
    /// The upload's id (16 hexadecimal digits), for its commit.
    #[schema(example = "9f1c2a7e55d03b41")]
    pub upload: String,
    /// Milliseconds from the answer within which the bytes must be written and the
    /// upload committed; after that it is reclaimed and its commit refused (`410`).
    pub lease_ms: u64,
    /// The region's start on each of the gateway's fabric endpoints, in the order of
    /// `GET /v1/fabric`'s `endpoints` (the primary first): address and write-only key.
    pub endpoints: Vec<crate::RemoteRegion>,
    /// One entry per value, in the order asked: where its bytes go.
    pub items: Vec<UploadSlot>,
}

/// Where one value of an upload region goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UploadSlot {
    /// The key.
    pub key: String,
    /// The version id the value will have (16 hexadecimal digits): the frame checksum
    /// the commit carries is computed with it.
    pub version: String,
    /// Where the value's first byte goes, in bytes from the region's start (add it to an
    /// endpoint's `addr`).
    pub offset: u64,
    /// The value's length in bytes.
    pub length: u64,
    /// Why this value got no room (then `version` is empty and nothing of it is written
    /// or committed: the commit's checksums are those of the values with room, in order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

/// The commit of an upload region: each value's frame checksum (XXH3-64 over the payload
/// and the frame header's identity, as a descriptor's `checksum`), computed by the client
/// from the bytes it wrote, in the order of the region's items that got room.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadCommit {
    /// One checksum per value with room (16 hexadecimal digits), in order; another
    /// number of them is `409` and stores nothing.
    pub checksums: Vec<String>,
    /// Compute each value's SHA-256 now and answer it in its descriptor (what a `PUT`
    /// answers, for a later `If-Match`); by default it is computed when a reader first
    /// needs it, off the write path, and the descriptors' `sha256` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sha256: bool,
}

/// A `u64` from JSON, also when written as an integral number with a fraction (`114.0`):
/// JSON Schema's `integer` admits it, and so does the OpenAPI document.
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    let n = serde_json::Number::deserialize(d)?;
    // At most i64::MAX, the document's bound (`int64`).
    let max = i64::MAX as u64;
    let whole = match (n.as_u64(), n.as_f64()) {
        (Some(u), _) => Some(u),
        (None, Some(f)) if f.fract() == 0.0 && (0.0..9.2e18).contains(&f) => Some(f as u64),
        _ => None,
    };
    whole.filter(|&u| u <= max).ok_or_else(|| {
        D::Error::custom(format!(
            "{n} is not a length in bytes (a whole number from 0 to {max})"
        ))
    })
}
