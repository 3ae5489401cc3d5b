//! Per-key write order: writes of one key pass the origin and the store one at a time, in
//! the order they arrived, so that what the origin holds last is what the gateway
//! publishes last. Without it two write-through PUTs of a key could reach the origin as
//! A, B and be published as B, A: the origin keeps B, the gateway serves A.
//!
//! Keys are independent: a slow origin write of one key never delays another. A key's
//! entry lives only while a write of it runs or waits.

use tokio::sync::OwnedMutexGuard;

use crate::keyed::{Entry, Keyed};

/// The keys being written now, each with the lock its writers queue on (held from a
/// writer's arrival until its turn ends, so that one that gives up waiting — its request
/// went away — is counted out too).
#[derive(Debug, Default)]
pub struct KeyOrder {
    keys: Keyed<tokio::sync::Mutex<()>>,
}

/// A writer's turn at a key: other writes of the key wait until it is dropped.
#[derive(Debug)]
pub struct Turn {
    _held: OwnedMutexGuard<()>,
    _writer: Entry<tokio::sync::Mutex<()>>,
}

impl KeyOrder {
    /// Waits for the turn at `key` (tokio's mutex is fair: first come, first served).
    pub async fn turn(&self, key: &str) -> Turn {
        let writer = self.keys.enter(key);
        Turn {
            _held: std::sync::Arc::clone(writer.value()).lock_owned().await,
            _writer: writer,
        }
    }

    /// Keys with a write running or waiting.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no write is running or waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn writes_of_a_key_take_turns_in_arrival_order_and_leave_no_entry() {
        let order = Arc::new(KeyOrder::default());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let first = order.turn("k").await;
        let mut waiting = Vec::new();
        for n in 0..5 {
            let (order, seen) = (Arc::clone(&order), Arc::clone(&seen));
            let (queued, is_queued) = tokio::sync::oneshot::channel();
            waiting.push(tokio::spawn(async move {
                let turn = order.turn("k");
                tokio::pin!(turn);
                // Polled once so it is in the queue before the next writer arrives.
                assert!(turn.as_mut().now_or_never().is_none());
                queued.send(()).unwrap();
                let _t = turn.await;
                seen.lock().unwrap().push(n);
            }));
            is_queued.await.unwrap();
        }
        // Another key is not held up by "k".
        drop(order.turn("other").await);
        assert_eq!(order.len(), 1);
        // A writer that gives up waiting is counted out.
        {
            let gave_up = order.turn("k");
            tokio::pin!(gave_up);
            assert!(gave_up.as_mut().now_or_never().is_none());
        }
        drop(first);
        for w in waiting {
            w.await.unwrap();
        }
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert!(order.is_empty(), "no entry outlives its writers");
    }
}
