//! Bugs planted on purpose (`--test-plant`, accepted only with `--test-hooks`): the chaos
//! runs (`tests/chaos`) show that their linearizability checker finds each one. Never in
//! production: a planted bug breaks the consistency contract (`docs/design/consistency.md`).

use std::sync::OnceLock;

/// A bug that can be planted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Bug {
    /// A held copy is served as current without checking the owner it is tied to.
    UntiedCopy,
    /// A write is acknowledged before the near copies of its key are revoked (they are
    /// revoked a moment later).
    EarlyAck,
}

static PLANTED: OnceLock<Bug> = OnceLock::new();

/// Plants `bug` for the life of the process (once; later calls change nothing).
pub fn plant(bug: Option<Bug>) {
    if let Some(b) = bug {
        if PLANTED.set(b).is_ok() {
            tracing::warn!(bug = ?b, "a bug is planted on purpose (--test-plant): never in production");
        }
    }
}

/// Whether `bug` is planted.
pub fn planted(bug: Bug) -> bool {
    PLANTED.get() == Some(&bug)
}
