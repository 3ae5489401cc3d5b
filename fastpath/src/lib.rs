//! # rasa-fastpath
//!
//! The memory side of Rasa's RDMA fast path, and (in a later step) safe Rust over
//! libfabric. This is the only crate of the workspace allowed to use `unsafe` code; every
//! `unsafe` block carries a `// SAFETY:` comment, and its public API is safe.
//!
//! - [`buffer`]: [`ArenaBuffer`](buffer::ArenaBuffer), page-aligned memory that never
//!   moves, written append-only through exclusive slots and read through immutable
//!   extents. The gateway keeps its arenas in these so they can be registered with
//!   libfabric as they are.
//! - [`frame`]: the layout of one stored version (header + payload) and its validation,
//!   shared by the gateway (writer) and every fast-path reader.
//!
//! ## Invariant kept here
//!
//! Bytes become readable only once their writer has finished, and are never written again
//! until the whole buffer is reset, which the type system allows only when no local
//! reader remains. Remote readers are kept away from reused memory by leases and remote
//! key rotation, enforced by the gateway.

pub mod buffer;
pub mod fabric;
pub mod frame;
pub mod reader;
pub mod server;
mod sys;
