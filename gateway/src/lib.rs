//! # rasa-gateway
//!
//! The Rasa gateway: an object-store-style HTTP API whose every `PUT` stores a new
//! **immutable version** in arena memory laid out for one-sided RDMA reads, and answers
//! with a **descriptor** (address, remote key, length, checksums, lease).
//!
//! - [`store`]: keys → immutable versions in arenas, under a memory budget, and the disk
//!   tier beyond it (`store::disk`). Knows nothing of HTTP.
//! - [`objects`]: the object service both fronts call (lookups, reads, writes, deletes;
//!   one per namespace, `objects::namespaces`).
//! - [`grants`]: what a token or S3 key may do, and in which namespace.
//! - [`range`]: byte ranges, shared by the fronts and the object service.
//! - [`http`]: the axum router ([`http::app`]), one file per resource, errors as
//!   `application/problem+json`, the OpenAPI document and Swagger UI.
//! - [`key`]: what a valid object key is; [`media`]: default media types; [`units`]:
//!   sizes and durations as flags write them.
//! - [`origin`]: the S3 origin behind the store (read-through, write-through).
//! - [`s3`]: the S3-compatible listener (`--s3-listen`), on `s3s`, over the same store.
//! - [`config`]: flags, `RASA_*` environment variables and the configuration file
//!   (`--config`; `config::file`, `config::describe`), validated at start.
//! - [`builder`]: [`Gateway::build`] makes a gateway from its configuration in stages
//!   (storage, origin, object service and namespaces, fronts, cluster) and
//!   [`Gateway::serve`] runs it to a clean shutdown — as the binary does.
//! - [`credentials`]: the `token` and `s3-key` subcommands; [`credfile`]: writing those
//!   files 0600 and warning when one is readable by others.
//! - [`browser`]: what an open gateway refuses from web pages (foreign `Host`, cross-site
//!   writes), and the headers that keep stored values inert in a browser.
//! - [`server`]: serve a listener (plain or TLS) with connection limits until a shutdown
//!   signal.
//! - [`certs`]: `rasa-gateway tls self-signed`, a private CA and server certificate.
//! - [`tokens`]: bearer tokens with scopes, from a token file of hashes.
//! - [`cluster`]: membership in a cluster of gateways kept in etcd (`--cluster`, over TLS
//!   and as an etcd user when configured), and which member owns a key.
//! - [`keyed`]: one value per key while anyone holds it (every per-key wait: writes'
//!   order, origin fetches, disk reads).
//! - [`pace`]: the slowest upload accepted (`--min-upload-rate`); [`reload`]: files read
//!   again on SIGHUP.
//! - [`net`]: listening sockets with a backlog for bursts of connections.
//! - [`catalog`]: every metric the gateway exports, with its help text.
//!
//! ## The invariant
//!
//! Bytes at an advertised location never change while a lease on them is live, and the
//! remote key that advertised them is revoked before they change. This crate keeps it by
//! never writing into a published version (see [`store`]) and by recording on each arena
//! the latest lease deadline it handed out ([`store::arena::Arena::extend_lease`]); an
//! arena is reused only after that deadline.

pub mod browser;
pub mod builder;
pub mod catalog;
pub mod certs;
pub mod cluster;
pub mod config;
pub mod credentials;
pub mod credfile;
pub mod figures;
pub mod front;
pub mod grants;
pub mod http;
pub mod key;
pub mod keyed;
pub mod media;
pub mod net;
pub mod objects;
pub mod origin;
pub mod pace;
pub mod planted;
pub mod range;
pub mod reload;
pub mod s3;
pub mod server;
pub mod setting;
pub mod slots;
pub mod store;
pub mod tokens;
pub mod units;

pub use builder::Gateway;

/// What `--version` prints: this version and, in a release, the commit it was built from
/// (`make dist` builds with `RASA_BUILD` set to `VERSION (commit HASH)`).
pub const VERSION: &str = match option_env!("RASA_BUILD") {
    Some(build) => build,
    None => concat!(env!("CARGO_PKG_VERSION"), " (built from source)"),
};
