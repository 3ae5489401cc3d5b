//! DeleteObjects: up to 1,000 keys of a bucket, each deleted as DeleteObject would (with its
//! own conditions) and answered on its own. In a cluster each key is deleted at its owner:
//! the keys other members own go to each of them in one `DeleteObjects`, as the caller.

use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result};

use super::cluster::peers::{self, ToDelete};
use super::conditions::DeleteIf;
use super::objects::delete_key;
use super::S3Front;

/// Most keys one `DeleteObjects` request may name (S3's limit).
pub const MAX_DELETE_KEYS: usize = 1000;

pub(super) async fn delete_objects(
    front: &S3Front,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let (i, caller) = front.take(req);
    front.bucket(&i.bucket)?;
    if i.delete.objects.len() > MAX_DELETE_KEYS {
        return Err(s3s::s3_error!(
            MalformedXML,
            "a DeleteObjects request names {} keys; at most {MAX_DELETE_KEYS} are allowed",
            i.delete.objects.len()
        ));
    }
    let quiet = i.delete.quiet.unwrap_or(false);
    let mut done: Vec<(String, Result<(), S3Error>)> = Vec::new();
    // The keys other members own, by owner.
    let mut remote: Vec<(rasa_openapi::ClusterMember, Vec<ToDelete>)> = Vec::new();
    for o in i.delete.objects {
        let at = match front.key(&i.bucket, &o.key) {
            Ok(at) => at,
            Err(e) => {
                done.push((o.key, Err(e)));
                continue;
            }
        };
        if let Some(owner) = caller.as_ref().and_then(|c| c.wide.remote_owner(&at.key)) {
            let one = ToDelete {
                key: o.key,
                etag: o.e_tag.map(|e| e.value().to_owned()),
                last_modified: o
                    .last_modified_time
                    .map(|t| std::time::SystemTime::from(time::OffsetDateTime::from(t))),
                size: o.size,
            };
            match remote.iter_mut().find(|(m, _)| m.node_id == owner.node_id) {
                Some((_, keys)) => keys.push(one),
                None => remote.push((owner, vec![one])),
            }
            continue;
        }
        let cond = DeleteIf::new(
            o.e_tag.clone().map(ETagCondition::ETag),
            o.last_modified_time.as_ref(),
            o.size,
        );
        done.push((o.key, delete_key(&at, &cond).await));
    }
    if let Some(caller) = &caller {
        let asks = remote
            .iter()
            .map(|(m, keys)| peers::delete(caller, m, &i.bucket, keys));
        done.extend(
            futures_util::future::join_all(asks)
                .await
                .into_iter()
                .flatten(),
        );
    }
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for (key, r) in done {
        match r {
            Ok(()) if !quiet => deleted.push(DeletedObject {
                key: Some(key),
                ..Default::default()
            }),
            Ok(()) => {}
            Err(e) => errors.push(Error {
                code: Some(e.code().as_str().to_owned()),
                message: e.message().map(str::to_owned),
                key: Some(key),
                ..Default::default()
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: Some(errors),
        ..Default::default()
    }))
}
