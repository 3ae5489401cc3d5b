//! `GET /v1/stats`: the status page's figures, read as numbers from the same metrics
//! `/metrics` exports (`crate::figures`), with a sample a second kept for the last few
//! minutes.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::response::Response;
use http::StatusCode;
use rasa_openapi::stats::{RouteRequests, Stats, StatsSample};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{json_response, ApiError, AppState};
use crate::catalog as c;
use crate::figures::{Labels, Snapshot};

/// The samples the gateway keeps for the status page's charts.
#[derive(Debug)]
pub struct History {
    started: Instant,
    interval: Duration,
    keep: usize,
    samples: Mutex<VecDeque<Arc<StatsSample>>>,
}

impl History {
    /// Keeps the last `keep` samples, taken every `interval`.
    pub fn new(interval: Duration, keep: usize) -> Self {
        Self {
            started: Instant::now(),
            interval,
            keep: keep.max(1),
            samples: Mutex::new(VecDeque::with_capacity(keep)),
        }
    }

    fn push(&self, s: StatsSample) {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.len() == self.keep {
            samples.pop_front();
        }
        samples.push_back(Arc::new(s));
    }

    fn since(&self, t_ms: u64) -> Vec<StatsSample> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let first = samples.partition_point(|s| s.t_ms <= t_ms);
        samples.range(first..).map(|s| (**s).clone()).collect()
    }
}

impl Default for History {
    /// Five minutes, a sample a second.
    fn default() -> Self {
        Self::new(Duration::from_secs(1), 300)
    }
}

/// Takes a sample every interval of `st.stats`, for as long as the process runs.
pub async fn sample_forever(st: AppState) {
    let mut tick = tokio::time::interval(st.stats.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        st.stats.push(sample(&st));
        // Prometheus's histograms hold every value recorded until they are folded into
        // their buckets: without a scrape, 8 bytes a request for ever (the misses test
        // saw 180,000 requests grow the gateway past 4 MiB). Fold them once a second.
        if let Some(r) = &st.metrics {
            r.exposition.run_upkeep();
        }
    }
}

/// The figures now.
pub(crate) fn sample(st: &AppState) -> StatsSample {
    super::ops::observe(st);
    let t_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let figures = st.metrics.as_ref().map(|r| r.figures.snapshot());
    let mut s = read(&figures.unwrap_or_default(), t_ms);
    s.origin.enabled = st.objects.read_through().is_some();
    s
}

/// A sample of the figures `f`.
fn read(f: &Snapshot, t_ms: u64) -> StatsSample {
    let mut s = StatsSample {
        t_ms,
        ..StatsSample::default()
    };
    let mut routes: BTreeMap<(String, String), RouteRequests> = BTreeMap::new();
    for (labels, n) in f.each(&c::HTTP_REQUESTS) {
        let r = route_of(&mut routes, label(labels, "route"), label(labels, "method"));
        count_status(r, &label(labels, "status"), n as u64);
    }
    for (labels, n) in f.each(&c::S3_REQUESTS) {
        let r = route_of(&mut routes, "S3 listener".into(), "*".into());
        count_status(r, &label(labels, "status"), n as u64);
    }
    s.requests = routes.into_values().collect();
    s.traffic.s3_bytes = f.total(&c::S3_BYTES_SERVED);
    s.traffic.http_bytes = f.total(&c::HTTP_BYTES_SERVED);
    s.traffic.one_sided_bytes = f.total(&c::FASTPATH_BYTES_ADVERTISED);
    s.cache.hits = f.total(&c::CACHE_HITS);
    s.cache.misses = f.total(&c::CACHE_MISSES);
    s.cache.negative_hits = f.total(&c::CACHE_NEGATIVE_HITS);
    s.cache.stale_served = f.total(&c::CACHE_STALE_SERVED);
    s.cache.versions_stored = f.total(&c::VERSIONS_STORED);
    s.cache.bytes_stored = f.total(&c::BYTES_STORED);
    s.origin.fetches = f.total(&c::ORIGIN_FETCHES);
    s.origin.errors = f.total(&c::ORIGIN_ERRORS);
    s.origin.bytes = f.total(&c::ORIGIN_BYTES);
    (s.origin.fetch_seconds_sum, s.origin.fetch_count) = f.sum_count(&c::ORIGIN_FETCH_SECONDS);
    s.origin.in_flight = f.total(&c::ORIGIN_FETCHES_IN_FLIGHT);
    memory(f, &mut s);
    s.fast_path.descriptors = f.total(&c::DESCRIPTORS);
    s.fast_path.leases_granted = f.total(&c::LEASES_GRANTED);
    s.fast_path.keys_rotated = f.total(&c::KEYS_ROTATED);
    s.fast_path.keys_revoked = f.total(&c::KEYS_REVOKED);
    s.disk.budget_bytes = f.total(&c::DISK_BUDGET_BYTES);
    s.disk.bytes = f.total(&c::DISK_BYTES);
    s.disk.values = f.total(&c::DISK_VALUES);
    s.disk.index_bytes = f.total(&c::DISK_INDEX_BYTES);
    s.disk.hits = f.total(&c::DISK_HITS);
    s.disk.spills = f.total(&c::DISK_SPILLS);
    s.disk.promotions = f.total(&c::DISK_PROMOTIONS);
    s.disk.evictions = f.total(&c::DISK_EVICTIONS);
    s.disk.recovery_ms = (f.value(&c::DISK_RECOVERY_SECONDS) * 1000.0) as u64;
    s
}

/// The memory figures of `f` into `s`.
fn memory(f: &Snapshot, s: &mut StatsSample) {
    let m = &mut s.memory;
    m.budget_bytes = f.total(&c::MEMORY_BUDGET_BYTES);
    m.allocated_bytes = f.total(&c::ARENA_BYTES_ALLOCATED);
    m.live_bytes = f.total(&c::LIVE_BYTES);
    m.arenas_leased = f.total(&c::ARENAS_LEASED);
    m.arenas_open = f.with(&c::ARENAS, "state", "open");
    m.arenas_sealed = f.with(&c::ARENAS, "state", "sealed");
    m.arenas_draining = f.with(&c::ARENAS, "state", "draining");
    m.arenas_free = f.with(&c::ARENAS, "state", "free");
    m.evictions = f.total(&c::EVICTIONS);
}

/// The value of label `name` in `labels` (`""` without it).
fn label(labels: &Labels, name: &str) -> String {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

fn route_of(
    routes: &mut BTreeMap<(String, String), RouteRequests>,
    route: String,
    method: String,
) -> &mut RouteRequests {
    routes
        .entry((route.clone(), method.clone()))
        .or_insert_with(|| RouteRequests {
            method,
            route,
            ..RouteRequests::default()
        })
}

fn count_status(r: &mut RouteRequests, status: &str, n: u64) {
    match status.as_bytes().first() {
        Some(b'1' | b'2') => r.ok += n,
        Some(b'3') => r.redirect += n,
        Some(b'4') => r.client_error += n,
        Some(b'5') => r.server_error += n,
        _ => {}
    }
}

/// Query of `GET /v1/stats`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// Only the samples taken after this time (milliseconds since the Unix epoch, the
    /// `t_ms` of the newest sample the caller has).
    #[param(minimum = 0)]
    pub since: Option<i64>,
}

/// The figures behind the status page (`/ui`): totals now, a sample a second for the
/// last five minutes, and the cluster's members.
///
/// The same figures `/metrics` exports. Counters are totals since start; a
/// reader computes rates between samples. With `?since=T`, `history` holds only the
/// samples taken after `T`, so a page polling every second or two fetches little.
#[utoipa::path(
    get, path = "/v1/stats", tag = "operations", operation_id = "get_stats",
    params(StatsQuery),
    responses(
        (status = 200, description = "The figures.", body = Stats),
        (status = 400, description = "A malformed query.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_stats(
    State(st): State<AppState>,
    Query(q): Query<StatsQuery>,
) -> Result<Response, ApiError> {
    let since = u64::try_from(q.since.unwrap_or(0))
        .map_err(|_| ApiError::InvalidRequest("since is a time: 0 or more".into()))?;
    let stats = Stats {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        uptime_seconds: st.stats.started.elapsed().as_secs(),
        interval_ms: st.stats.interval.as_millis() as u64,
        history_len: st.stats.keep,
        now: sample(&st),
        history: st.stats.since(since),
        cluster: super::cluster::view(&st),
        namespaces: st.namespaces.stats(),
    };
    Ok(json_response(StatusCode::OK, &stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_requests_by_route_and_status_class() {
        let (recorders, fanout) = crate::figures::Recorders::build();
        metrics::with_local_recorder(&fanout, || {
            let get = |status| {
                let l = [
                    ("route", "/v1/objects/{*key}"),
                    ("method", "GET"),
                    ("status", status),
                ];
                c::HTTP_REQUESTS.counter_by(&l)
            };
            get("200").increment(5);
            get("206").increment(2);
            get("304").increment(1);
            get("404").increment(3);
            let put = [
                ("route", "/v1/objects/{*key}"),
                ("method", "PUT"),
                ("status", "503"),
            ];
            c::HTTP_REQUESTS.counter_by(&put).increment(4);
            c::DESCRIPTORS
                .counter_by(&[("path", "fabric")])
                .increment(6);
            c::DESCRIPTORS.counter_by(&[("path", "http")]).increment(1);
            c::ARENAS.gauge_by(&[("state", "sealed")]).set(2.0);
            c::ORIGIN_FETCH_SECONDS.histogram().record(0.5);
        });
        let s = read(&recorders.figures.snapshot(), 7);
        assert_eq!(s.t_ms, 7);
        assert_eq!(s.requests.len(), 2);
        let get = &s.requests[0];
        assert_eq!((get.method.as_str(), get.ok, get.redirect), ("GET", 7, 1));
        assert_eq!((get.client_error, get.server_error), (3, 0));
        assert_eq!(
            (s.requests[1].method.as_str(), s.requests[1].server_error),
            ("PUT", 4)
        );
        assert_eq!(s.fast_path.descriptors, 7);
        assert_eq!(s.memory.arenas_sealed, 2);
        assert_eq!((s.origin.fetch_seconds_sum, s.origin.fetch_count), (0.5, 1));
        let text = recorders.exposition.render();
        assert!(text.contains("rasa_origin_fetch_seconds_bucket"), "{text}");
    }

    #[test]
    fn history_keeps_the_newest_and_answers_since() {
        let h = History::new(Duration::from_secs(1), 3);
        for t in 1..=5 {
            h.push(read(&Snapshot::default(), t));
        }
        let all: Vec<u64> = h.since(0).iter().map(|s| s.t_ms).collect();
        assert_eq!(all, [3, 4, 5]);
        let newer: Vec<u64> = h.since(4).iter().map(|s| s.t_ms).collect();
        assert_eq!(newer, [5]);
        assert!(h.since(5).is_empty());
    }
}
