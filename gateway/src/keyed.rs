//! One value per key while anyone holds it: the table behind every per-key wait in the
//! gateway — writes' order (`objects::order`), origin fetches (`origin::flight`), reads from
//! the disk tier (`store::disk::tier`). A key's entry is made by its first holder and
//! removed when its last [`Entry`] is dropped (a request that gives up waiting included),
//! so the table holds only keys something is happening to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Each key's value and how many hold it.
type Table<T> = Arc<Mutex<HashMap<String, (Arc<T>, usize)>>>;

/// Values by key, each shared by its holders.
#[derive(Debug)]
pub struct Keyed<T> {
    table: Table<T>,
}

impl<T> Default for Keyed<T> {
    fn default() -> Self {
        Self {
            table: Arc::default(),
        }
    }
}

/// A hold on a key's value: the value while it lives, the key's entry freed with the last.
#[derive(Debug)]
pub struct Entry<T> {
    table: Table<T>,
    key: String,
    value: Arc<T>,
}

impl<T: Default> Keyed<T> {
    /// Holds `key`'s value, made (`T::default()`) if nobody holds it.
    pub fn enter(&self, key: &str) -> Entry<T> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let (value, holders) = table.entry(key.to_owned()).or_default();
        *holders += 1;
        Entry {
            table: Arc::clone(&self.table),
            key: key.to_owned(),
            value: Arc::clone(value),
        }
    }
}

impl<T> Keyed<T> {
    /// `key`'s value if somebody holds it, without holding it.
    pub fn peek(&self, key: &str) -> Option<Arc<T>> {
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        table.get(key).map(|(value, _)| Arc::clone(value))
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Entry<T> {
    /// The shared value, to keep beyond this hold (e.g. a lock to wait on).
    pub fn value(&self) -> &Arc<T> {
        &self.value
    }
}

impl<T> std::ops::Deref for Entry<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Clone for Entry<T> {
    fn clone(&self) -> Self {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, holders)) = table.get_mut(&self.key) {
            *holders += 1;
        }
        Entry {
            table: Arc::clone(&self.table),
            key: self.key.clone(),
            value: Arc::clone(&self.value),
        }
    }
}

impl<T> Drop for Entry<T> {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, holders)) = table.get_mut(&self.key) {
            *holders -= 1;
            if *holders == 0 {
                table.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_share_a_value_and_the_last_frees_the_key() {
        let keyed: Keyed<std::sync::atomic::AtomicUsize> = Keyed::default();
        let a = keyed.enter("k");
        let b = keyed.enter("k");
        a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(b.load(std::sync::atomic::Ordering::SeqCst), 1, "one value");
        let c = b.clone();
        drop((a, b));
        assert_eq!(keyed.len(), 1, "c still holds k");
        assert!(keyed.peek("k").is_some());
        drop(c);
        assert!(keyed.is_empty());
        assert_eq!(
            keyed.enter("k").load(std::sync::atomic::Ordering::SeqCst),
            0,
            "a fresh value once freed"
        );
    }
}
