//! # rasa-client — the Rust SDK for Rasa
//!
//! Clients of a Rasa gateway speak its HTTP contract, whose wire types live in
//! [`rasa_openapi`] and are re-exported here. The SDK proper — `put`/`get`/`delete`/
//! `resolve` over HTTP, with `get` taking the one-sided fast path when it can and falling
//! back to HTTP when it cannot — is built on top of these types next.
//!
//! ## Consistency contract
//!
//! Values are immutable versions. A descriptor names one version and carries a lease: a
//! reader may read that version one-sided until the lease ends, even after the key was
//! overwritten or deleted; after that, the read fails cleanly and never returns other
//! bytes.

pub use rasa_openapi::{
    Descriptor, DescriptorBatchRequest, DescriptorBatchResponse, DescriptorResult, FabricInfo,
    ObjectList, ObjectSummary, Problem, ProblemCode,
};
