//! What every read route shares: the key from the path, the version a request asks for
//! (through the origin on a miss), and the descriptor — a lease — of a version.

use crate::catalog;
use std::sync::Arc;

use rasa_fastpath::frame::{self, CHECKSUM_ALGORITHM, FRAME_FORMAT, HEADER_LEN};
use rasa_openapi::{Descriptor, RemoteRegion};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{ApiError, AppState};
use crate::key;
use crate::objects::Objects;
use crate::store::{Store, StoredVersion, VersionId};

/// The key part of `/v1/objects/{key}` or `/v1/descriptors/{key}`, decoded and validated.
pub(crate) fn key_from_uri(path: &str, prefix: &str) -> Result<String, ApiError> {
    let raw = path.strip_prefix(prefix).unwrap_or_default();
    Ok(key::from_path(raw)?)
}

/// Query parameters of object and descriptor reads.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionQuery {
    /// A specific version id (16 hex digits) instead of the current version. Served while
    /// the version is retained; `404` once it is reclaimed or its key deleted.
    pub version: Option<String>,
}

/// The version `?version=` names, if any.
pub(crate) fn parse_version(q: &VersionQuery) -> Result<Option<VersionId>, ApiError> {
    q.version
        .as_deref()
        .map(|raw| {
            raw.parse()
                .map_err(|_| ApiError::InvalidVersion(raw.to_owned()))
        })
        .transpose()
}

/// Looks up the version a descriptor names (through the origin on a miss, when there is
/// one; admitted into memory from the disk tier).
pub(crate) async fn lookup(
    objects: &Objects,
    key: &str,
    q: &VersionQuery,
) -> Result<Arc<StoredVersion>, ApiError> {
    Ok(objects.resident(key, parse_version(q)?).await?)
}

fn rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// The descriptor of `v` (a version of `store`), granting a lease on it (recorded on its
/// arena).
pub fn descriptor(st: &AppState, store: &Store, v: &StoredVersion) -> Descriptor {
    descriptor_of(st, store, v, true)
}

/// The descriptor of `v`; with `remote` false (a caller that may not read, a PUT that
/// did not ask for one) without the address and key that would open its memory
/// one-sided. Only a descriptor that carries them is leased: a version nobody holds an
/// address of can be reclaimed as soon as it is replaced or evicted.
pub fn descriptor_of(st: &AppState, store: &Store, v: &StoredVersion, remote: bool) -> Descriptor {
    let mut tally = Tally::default();
    let d = tally.descriptor_of(st, store, v, remote);
    tally.count();
    d
}

/// Descriptors handed out, counted into the metrics once ([`Tally::count`]): a batch's
/// together, rather than a lookup in the metrics registry for each.
#[derive(Debug, Default)]
pub struct Tally {
    /// Descriptors with a remote address (each a lease).
    fabric: u64,
    /// Descriptors without one.
    http: u64,
    /// Bytes the fabric ones name.
    bytes: u64,
}

impl Tally {
    /// [`descriptor`], counted here.
    pub fn descriptor(&mut self, st: &AppState, store: &Store, v: &StoredVersion) -> Descriptor {
        self.descriptor_of(st, store, v, true)
    }

    /// [`descriptor_of`], counted here.
    pub fn descriptor_of(
        &mut self,
        st: &AppState,
        store: &Store,
        v: &StoredVersion,
        remote: bool,
    ) -> Descriptor {
        let remote = store.remote(v).filter(|_| remote);
        let (lease_ms, deadline) = match remote {
            Some(_) => (store.config().lease.as_millis() as u64, store.lease(v)),
            None => (0, std::time::SystemTime::now()),
        };
        if remote.is_some() {
            self.fabric += 1;
            self.bytes += v.len();
        } else {
            self.http += 1;
        }
        build(st, store, v, remote, lease_ms, deadline)
    }

    /// Records what was counted: descriptors by path, leases granted, the bytes handed to
    /// the fast path (served by the NIC, invisible to the gateway after).
    pub fn count(self) {
        if self.fabric > 0 {
            catalog::FASTPATH_BYTES_ADVERTISED
                .counter()
                .increment(self.bytes);
            catalog::DESCRIPTORS
                .counter_by(&[("path", "fabric")])
                .increment(self.fabric);
            catalog::LEASES_GRANTED.counter().increment(self.fabric);
        }
        if self.http > 0 {
            catalog::DESCRIPTORS
                .counter_by(&[("path", "http")])
                .increment(self.http);
        }
    }
}

/// The descriptor itself, its lease (if any) granted.
fn build(
    st: &AppState,
    store: &Store,
    v: &StoredVersion,
    remote: Option<Vec<(u64, u64)>>,
    lease_ms: u64,
    deadline: std::time::SystemTime,
) -> Descriptor {
    Descriptor {
        key: v.key().to_string(),
        version: v.version().to_string(),
        length: v.len(),
        // Known, or empty: a version written one-sided whose SHA-256 no reader has needed
        // yet (one-sided readers check the frame checksum; HTTP and S3 readers get the
        // SHA-256 as their entity tag, computed then).
        sha256: v.sha256_known().map(hex::encode).unwrap_or_default(),
        checksum: format!("{:016x}", v.checksum()),
        checksum_algorithm: CHECKSUM_ALGORITHM.to_owned(),
        content_type: v.content_type().to_owned(),
        created_at: rfc3339(v.created()),
        lease_ms,
        lease_expires_at: rfc3339(deadline),
        addr: remote.as_ref().map(|r| r[0].0),
        rkey: remote.as_ref().map(|r| r[0].1),
        frame_header_len: HEADER_LEN as u32,
        frame_format: FRAME_FORMAT,
        block_size: v.block_size(),
        block_table_offset: (v.block_size() > 0).then(|| frame::table_at(v.len())),
        incarnation: format!("{:016x}", store.incarnation()),
        node_id: st.cluster().map(|c| c.node_id().to_owned()),
        endpoints: remote
            .iter()
            .flatten()
            .skip(1)
            .map(|&(addr, rkey)| RemoteRegion { addr, rkey })
            .collect(),
    }
}

/// Whether a PUT asks for a descriptor it can read one-sided (`?lease=true`, `?lease=1`
/// or a bare `?lease`; `false`/`0` or no `lease`: no): the new version is then leased for
/// `--lease`. Any other value is refused (`400`), before the body is read.
pub(crate) fn wants_lease(uri: &http::Uri) -> Result<bool, ApiError> {
    let Some(query) = uri.query() else {
        return Ok(false);
    };
    let mut wants = false;
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, "true"));
        if name != "lease" {
            continue;
        }
        wants = match value {
            "true" | "1" => true,
            "false" | "0" => false,
            other => {
                return Err(ApiError::InvalidRequest(format!(
                    "lease must be true or false, not {other:?}"
                )))
            }
        };
    }
    Ok(wants)
}
