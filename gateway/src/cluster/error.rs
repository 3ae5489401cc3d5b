//! What can keep a node from joining or staying in its cluster, as types: the builder and
//! the binary report them (their text names the flag or the cause), and a caller can
//! tell them apart (etcd out of reach, a call that timed out, a refusal, an id in use).

use std::time::Duration;

/// Why this node could not join its cluster, or register again.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// etcd could not be reached (or refused this node's rights) at start.
    #[error("cannot reach etcd at {endpoints} (--cluster): {cause}{hint}")]
    Unreachable {
        /// The endpoints tried, comma-separated.
        endpoints: String,
        /// What the client said.
        cause: String,
        /// A hint about TLS or credentials, when the cause suggests one (else empty).
        hint: String,
    },
    /// An etcd call did not answer in time.
    #[error("etcd did not answer ({what}) within {within:?}")]
    TimedOut {
        /// The call.
        what: &'static str,
        /// How long it was given.
        within: Duration,
    },
    /// etcd answered with an error.
    #[error("etcd refused {what}: {cause}")]
    Refused {
        /// What was asked.
        what: &'static str,
        /// What etcd said.
        cause: String,
    },
    /// Another gateway, alive, holds this node's id.
    #[error(
        "--node-id {node} is in use by a live gateway: {held_by}; stop it or choose another id"
    )]
    InUse {
        /// This node's id.
        node: String,
        /// Who holds it.
        held_by: String,
    },
    /// A record under this node's id stayed longer than its lease could last.
    #[error("--node-id {node} is held by {held_by}, whose lease etcd keeps renewing; stop it or choose another id")]
    Held {
        /// This node's id.
        node: String,
        /// Who holds it.
        held_by: String,
    },
}
