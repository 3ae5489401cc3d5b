//! The slowest upload accepted (`--min-upload-rate`).
//!
//! `--body-timeout` bounds the pause between two chunks, so a client sending one byte
//! every 29 s kept an upload (and its memory) forever. An upload must also keep an
//! average pace: after a grace of `--body-timeout`, it must have received at least
//! `min_rate` bytes for every second since its body began (as Apache's `MinRate`): the
//! next chunk is awaited until `start + grace + received / min_rate` at the latest.

use std::time::{Duration, Instant};

/// One upload's pace.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    start: Instant,
    grace: Duration,
    min_rate: u64,
}

impl Pace {
    /// An upload starting now, allowed `grace` before the rate counts; `min_rate` bytes a
    /// second (0: no minimum).
    pub fn new(grace: Duration, min_rate: u64) -> Self {
        Self {
            start: Instant::now(),
            grace,
            min_rate,
        }
    }

    /// When the upload falls behind with `received` bytes in, if it has a minimum rate.
    pub fn deadline(&self, received: u64) -> Option<Instant> {
        (self.min_rate > 0).then(|| {
            let earned = Duration::from_secs_f64(received as f64 / self.min_rate as f64);
            self.start + self.grace + earned
        })
    }

    /// The minimum rate, bytes a second.
    pub fn min_rate(&self) -> u64 {
        self.min_rate
    }

    /// Waits for `next` until the upload, with `received` bytes in, falls behind; `None`
    /// when it did.
    pub async fn within<F: std::future::Future>(
        &self,
        received: u64,
        next: F,
    ) -> Option<F::Output> {
        match self.deadline(received) {
            Some(at) => tokio::time::timeout_at(at.into(), next).await.ok(),
            None => Some(next.await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_moves_with_the_bytes_received() {
        let p = Pace::new(Duration::from_secs(10), 1000);
        let d0 = p.deadline(0).unwrap();
        let d = p.deadline(5000).unwrap();
        assert_eq!(d - d0, Duration::from_secs(5));
        assert!(Pace::new(Duration::from_secs(1), 0).deadline(0).is_none());
    }

    #[tokio::test]
    async fn a_stalled_upload_falls_behind_after_the_grace() {
        let p = Pace::new(Duration::from_millis(100), 1 << 20);
        assert_eq!(p.within(0, async { 7 }).await, Some(7));
        let t = Instant::now();
        // 100 ms of grace and 100 ms earned by the 100 KiB received.
        assert_eq!(
            p.within(100 << 10, std::future::pending::<()>()).await,
            None
        );
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
