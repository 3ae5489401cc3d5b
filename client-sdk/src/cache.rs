//! The descriptors a client holds until their lease deadline (counted from when the request
//! was *sent*, minus a margin): what a read reuses instead of asking the gateway again, and
//! what this client's own writes drop.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use rasa_openapi::Descriptor;

/// Descriptors this client holds, each with the instant after which no read may start
/// (its lease, counted from when it was asked for, less a margin).
#[derive(Debug, Default)]
pub(crate) struct DescriptorCache {
    held: Mutex<HashMap<String, (Descriptor, Instant)>>,
}

impl DescriptorCache {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Descriptor, Instant)>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptor of `key` while a read may still start on it.
    pub(crate) fn fresh(&self, key: &str) -> Option<(Descriptor, Instant)> {
        let held = self.held();
        let (d, deadline) = held.get(key)?;
        (Instant::now() < *deadline).then(|| (d.clone(), *deadline))
    }

    /// Holds `d` for `key` until `deadline`.
    pub(crate) fn insert(&self, key: &str, d: Descriptor, deadline: Instant) {
        self.held().insert(key.to_owned(), (d, deadline));
    }

    /// Drops the descriptor of `key` (a read with it failed, or this client wrote the key).
    pub(crate) fn forget(&self, key: &str) {
        self.held().remove(key);
    }

    /// Drops every descriptor (they named a gateway process that is gone).
    pub(crate) fn clear(&self) {
        self.held().clear();
    }
}
