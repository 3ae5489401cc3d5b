//! The S3 listener in a cluster: every member serves S3, and each key's requests are served
//! by the key's owner, as on the native API.
//!
//! - **Keyed requests** (objects, multipart uploads and their parts) are forwarded to the
//!   owner's S3 listener as they came, one hop ([`forward`]): the signature still holds (the
//!   same method, path, query, `Host` and signed headers; the body streamed as it arrives),
//!   so the owner checks the caller's own credentials. A multipart upload is staged at its
//!   key's owner and completed there.
//! - **Requests that span keys** — listings, `DeleteObjects`, a copy whose source another
//!   member owns — ask the other members' listeners for their part ([`peers`]), acting as
//!   the caller: signed with the caller's own access key (every member has the same
//!   credentials file), so no member can do there what the caller could not.
//!
//! A request from another member carries the hop marker and is answered from this member
//! alone, whatever its view says, so two members whose views differ never bounce a request.
//!
//! Who owns what, forwarding, failing over and asking every member at once are the
//! cluster's ([`crate::cluster::Peers`], the same for the native API); what is here is the
//! S3 wire: which key a request names, S3 clients acting as the caller, S3 errors.

pub(super) mod forward;
pub(super) mod peers;

use std::sync::Arc;

use rasa_openapi::{ClusterMember, HOP_HEADER};

use super::S3Front;
use crate::cluster::{Peers, Wire};

/// A member's view of the cluster, for its S3 listener.
#[derive(Debug)]
pub struct Wide {
    /// The way to the other members.
    pub peers: Arc<Peers>,
    /// The HTTP client of the S3 clients that ask other members as the caller (the same
    /// certificate authorities trusted; its connections kept for the next ask).
    pub s3_http: aws_sdk_s3::config::SharedHttpClient,
}

impl Wide {
    /// The S3 listener's view of the cluster `peers` reach; S3 clients of the other
    /// members trust, besides the system's certificate authorities, those in `ca_file`.
    pub fn new(
        peers: Arc<Peers>,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, crate::setting::SettingError> {
        use aws_smithy_http_client::tls;
        let mut trust = tls::TrustStore::default().with_native_roots(true);
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                crate::setting::SettingError::said(format!(
                    "--cluster-ca-file {}: {e}",
                    path.display()
                ))
            })?;
            trust = trust.with_pem_certificate(pem);
        }
        let context = tls::TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .map_err(|e| crate::setting::SettingError::said(format!("--cluster-ca-file: {e}")))?;
        let s3_http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::AwsLc,
            ))
            .tls_context(context)
            .build_https();
        Ok(Self { peers, s3_http })
    }

    /// The member that owns Rasa key `key` when it is another one (with an S3 listener).
    pub(crate) fn remote_owner(&self, key: &str) -> Option<ClusterMember> {
        self.peers.remote_owner(key, Wire::S3)
    }
}

/// Who a request that spans members is made for, at the other members: the caller's
/// credentials (`None`: anonymous, on an open listener).
pub(crate) struct Caller<'a> {
    pub(crate) wide: &'a Wide,
    pub(crate) credentials: Option<s3s::auth::Credentials>,
}

impl S3Front {
    /// The cluster, when a request with `headers` is to be answered for the whole cluster
    /// (this node is a member and another member did not send it).
    pub(crate) fn wide(&self, headers: &http::HeaderMap) -> Option<&Wide> {
        self.wide
            .as_ref()
            .filter(|_| !headers.contains_key(HOP_HEADER))
    }

    /// A request's input and, when it spans members, its caller (to ask the others for
    /// their part); `None` when this member answers alone.
    pub(crate) fn take<T>(&self, req: s3s::S3Request<T>) -> (T, Option<Caller<'_>>) {
        let wide = self.wide(&req.headers);
        caller_of(wide, req)
    }

    /// [`S3Front::take`] for a request that reads another key than its own (a copy's
    /// source): the caller even when another member forwarded the request here, since the
    /// source's owner is asked with the hop marker, answers from its own memory, and
    /// nothing goes round.
    pub(crate) fn take_for_source<T>(&self, req: s3s::S3Request<T>) -> (T, Option<Caller<'_>>) {
        caller_of(self.wide.as_ref(), req)
    }
}

/// `req`'s input, and its caller at the members of `wide`.
fn caller_of<T>(wide: Option<&Wide>, req: s3s::S3Request<T>) -> (T, Option<Caller<'_>>) {
    let caller = wide.map(|wide| Caller {
        wide,
        credentials: req.credentials,
    });
    (req.input, caller)
}
