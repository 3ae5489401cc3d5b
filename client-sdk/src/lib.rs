//! # rasa-client — the Rust SDK for Rasa
//!
//! Talks to a Rasa gateway over HTTP and, where the gateway and this machine both speak
//! libfabric, reads values **one-sided** from the gateway's registered memory.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rasa_client::Error> {
//! use rasa_client::{Client, FastPath};
//! let client = Client::builder("http://127.0.0.1:8080").fast_path(FastPath::Auto).build()?;
//! client.put("photos/cat.jpg", b"...".to_vec()).await?;
//! let obj = client.get("photos/cat.jpg").await?;
//! println!("{} bytes via {:?}", obj.bytes.len(), obj.path);
//! # Ok(()) }
//! ```
//!
//! ## Consistency contract
//!
//! Values are immutable versions. A descriptor names one version and carries a lease; the
//! SDK computes the lease deadline from the moment it **sent** the resolve request (minus a
//! safety margin) and never starts a one-sided read after it. Every one-sided read is
//! validated (frame magic, key hash, version, length, frame checksum) before bytes are
//! returned; a stale, revoked, torn or timed-out read is retried once with a fresh
//! descriptor and then served over HTTP (unless [`FastPath::Required`]). The caller gets
//! correct bytes or an error, never wrong bytes. Overwrites and deletes are lazy for
//! one-sided readers: a read may return the version that was current when it resolved the
//! key, until that descriptor's lease ends.
//!
//! ## Clusters
//!
//! Given the URL of one or more members of a cluster of gateways (comma-separated), the
//! client learns the members from `GET /v1/cluster`, follows their changes, and sends each
//! key's requests — HTTP, descriptors and one-sided reads — to the key's owner, computed
//! with the same rendezvous hashing as the gateways
//! ([`rasa_openapi::cluster::placement`]). A member that does not answer (refused,
//! timed out) is tried last for a while, and the key's next choice serves the request.
//! Descriptors name the node and process that handed them out; one-sided reads go to that
//! node, and a node's new process (new incarnation) invalidates the old one's descriptors.
//!
//! ## Threads
//!
//! [`Client`] is cheap to clone and shareable; one-sided reads run on tokio's blocking
//! pool, as many at once as the client has fabric endpoints
//! ([`ClientBuilder::fabric_endpoints`], default 4, opened on demand); further reads wait
//! for one in turn.

mod batch;
mod builder;
mod cache;
mod choose;
mod client;
mod cluster;
mod descriptors;
mod error;
mod fabric;
mod files;
mod http;
mod into;
mod landmany;
mod many;
mod object;
mod onesided;
mod onesided_file;
mod range;
mod registered;
mod routed;
mod stats;
mod stream;
mod timeouts;
mod tls;
mod verify;
mod versions;

pub use batch::{Each, MAX_BATCH_BYTES, MAX_BATCH_VALUES};
pub use builder::{default_fabric_addr, ClientBuilder};
pub use client::Client;
pub use descriptors::{remote_frame, remote_frame_on};
pub use error::{with_causes, Error};
pub use files::FileTransfer;
pub use http::MAX_BUSY_WAIT;
pub use into::BufResult;
pub use many::Many;
pub use object::{FastPath, Meta, Object, ReadPath};
/// Smaller libfabric provider queues for this process (an idle fabric endpoint holds ~50 MB
/// less on `tcp;ofi_rxm`): call it first thing in `main`, before any thread starts; see
/// [`rasa_fastpath::library::PROVIDER_DEFAULTS`].
pub use rasa_fastpath::library::apply_provider_defaults;
pub use rasa_openapi::{
    Descriptor, DescriptorBatchRequest, DescriptorBatchResponse, DescriptorResult, FabricInfo,
    ObjectList, ObjectSummary, Problem, ProblemCode,
};
pub use registered::RegisteredBuffer;
pub use stats::{Fallback, Stats};
pub use stream::Written;
pub use timeouts::TimeoutKind;
pub use versions::{Condition, Versions};
