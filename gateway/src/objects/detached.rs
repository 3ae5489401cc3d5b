//! A write's origin request runs to its end, whoever waits for it.
//!
//! With write-through a write goes to the origin first, then is published here. A client
//! that goes away (a connection cut, a timeout) used to drop the request to the origin
//! midway — an origin may then hold half of its bookkeeping (s3s-fs: the new object, the old
//! checksum; every read of it failing) — or to drop the write after the origin stored it
//! and before it was published here, so members that ask the origin and the owner that
//! answers from memory disagreed (found by the chaos runs, issue 65). Now the origin
//! request is a task of its own; when the write is abandoned, a clean-up waits for it to
//! end, still holding the key's turn, and drops this member's copy if it is still the
//! one the write meant to replace: the next read asks the origin.

use std::future::Future;
use std::sync::Arc;

use super::order::Turn;
use crate::origin::OriginError;
use crate::store::{Store, StoreError, VersionId};

/// An origin request of a write of `key`, run to its end as a task of its own.
pub(super) struct Detached {
    cleanup: Option<Cleanup>,
}

/// What an abandoned write leaves to do.
struct Cleanup {
    store: Arc<Store>,
    key: String,
    /// The version the write meant to replace (`None`: none).
    before: Option<VersionId>,
    turn: Turn,
    done: tokio::sync::oneshot::Receiver<()>,
}

impl Detached {
    /// Runs `request` (the origin request of a write of `key`, which holds `turn`) as a
    /// task; its result once it ends, with the turn back. Dropped before then (the write
    /// abandoned), the request still ends, and the copy of `key` here is dropped then if
    /// the write would have replaced it.
    pub(super) async fn run<T: Send + 'static>(
        store: &Arc<Store>,
        key: &str,
        turn: Turn,
        request: impl Future<Output = Result<T, OriginError>> + Send + 'static,
    ) -> (Result<T, OriginError>, Turn) {
        let (tx, done) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let r = request.await;
            let _ = tx.send(());
            r
        });
        let mut me = Detached {
            cleanup: Some(Cleanup {
                store: Arc::clone(store),
                key: key.to_owned(),
                before: store.current(key).map(|v| v.version()),
                turn,
                done,
            }),
        };
        let result = match task.await {
            Ok(r) => r,
            Err(e) => Err(OriginError::Failed(format!(
                "the origin request ended: {e}"
            ))),
        };
        let turn = me.cleanup.take().expect("set until now").turn;
        (result, turn)
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let Some(c) = self.cleanup.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let _ = c.done.await;
            let _ = c.store.delete(&c.key, |cur| match cur.map(|v| v.version()) {
                now if now == c.before => Ok(()),
                _ => Err(StoreError::PreconditionFailed("written since".into())),
            });
            tracing::debug!(key = %c.key, "an abandoned write's origin request ended; the copy here was dropped");
            drop(c.turn);
        });
    }
}
