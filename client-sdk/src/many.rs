//! Calls on many keys at once, through [`Client::many`]: stores, deletes, existence
//! checks, reads and descriptors, each in as few requests as the keys' members allow (one
//! batch request per member in a cluster), with a result per key. (The calls are written
//! next to their one-key forms: `batch.rs`, `routed.rs`, `into.rs`.)

use crate::Client;

/// A client's calls on many keys ([`Client::many`]).
#[derive(Clone, Copy, Debug)]
pub struct Many<'a>(pub(crate) &'a Client);

impl Client {
    /// Calls on many keys at once: `client.many().get(&keys)`, `.put(&items)`,
    /// `.delete(&keys)`, `.exists(&keys)`, `.get_into(…)`, `.resolve(&keys)`.
    pub fn many(&self) -> Many<'_> {
        Many(self)
    }
}
