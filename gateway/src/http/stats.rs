//! `GET /v1/stats`: the status page's figures, read from the same exposition `/metrics`
//! serves, with a sample a second kept for the last few minutes.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::response::Response;
use http::StatusCode;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use rasa_openapi::stats::{RouteRequests, Stats, StatsSample};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{exposition, json_response, ApiError, AppState};

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

/// Latency buckets (seconds) of every `*_seconds` histogram: 100 µs to 10 s, so
/// Prometheus and Grafana can take p50 and p99 across a whole cluster.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Installs the process's metrics recorder: Prometheus text for `/metrics` (histograms
/// with [`LATENCY_BUCKETS`]), which `/v1/stats` reads back.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
        .and_then(|b| b.install_recorder())
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))
        .inspect(|_| crate::catalog::describe())
}

/// Takes a sample every interval of `st.stats`, for as long as the process runs.
pub async fn sample_forever(st: AppState) {
    let mut tick = tokio::time::interval(st.stats.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        st.stats.push(sample(&st));
    }
}

/// The figures now.
pub(crate) fn sample(st: &AppState) -> StatsSample {
    let text = super::ops::render(st);
    let t_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut s = read(&text, t_ms);
    s.origin.enabled = st.objects.read_through().is_some();
    s
}

/// A sample from an exposition.
fn read(text: &str, t_ms: u64) -> StatsSample {
    let mut s = StatsSample {
        t_ms,
        ..StatsSample::default()
    };
    let mut routes: BTreeMap<(String, String), RouteRequests> = BTreeMap::new();
    for l in exposition::parse(text) {
        let n = l.count();
        match l.name {
            "rasa_http_requests_total" => {
                let r = route_of(&mut routes, l.label("route"), l.label("method"));
                count_status(r, &l.label("status"), n);
            }
            "rasa_s3_requests_total" => {
                let r = route_of(&mut routes, "S3 listener".into(), "*".into());
                count_status(r, &l.label("status"), n);
            }
            "rasa_s3_bytes_served_total" => s.traffic.s3_bytes = n,
            "rasa_cache_hits_total" => s.cache.hits = n,
            "rasa_cache_misses_total" => s.cache.misses = n,
            "rasa_cache_negative_hits_total" => s.cache.negative_hits = n,
            "rasa_cache_stale_served_total" => s.cache.stale_served = n,
            "rasa_versions_stored_total" => s.cache.versions_stored = n,
            "rasa_bytes_stored_total" => s.cache.bytes_stored = n,
            "rasa_origin_fetches_total" => s.origin.fetches = n,
            "rasa_origin_errors_total" => s.origin.errors += n,
            "rasa_origin_bytes_total" => s.origin.bytes = n,
            "rasa_origin_fetch_seconds_sum" => s.origin.fetch_seconds_sum = l.value,
            "rasa_origin_fetch_seconds_count" => s.origin.fetch_count = n,
            "rasa_origin_fetches_in_flight" => s.origin.in_flight = n,
            "rasa_memory_budget_bytes" => s.memory.budget_bytes = n,
            "rasa_arena_bytes_allocated" => s.memory.allocated_bytes = n,
            "rasa_live_bytes" => s.memory.live_bytes = n,
            "rasa_arenas_leased" => s.memory.arenas_leased = n,
            "rasa_arenas" => match l.label("state").as_str() {
                "open" => s.memory.arenas_open = n,
                "sealed" => s.memory.arenas_sealed = n,
                "draining" => s.memory.arenas_draining = n,
                "free" => s.memory.arenas_free = n,
                _ => {}
            },
            "rasa_evictions_total" => s.memory.evictions = n,
            "rasa_http_bytes_served_total" => s.traffic.http_bytes = n,
            "rasa_fastpath_bytes_advertised_total" => s.traffic.one_sided_bytes = n,
            "rasa_descriptors_total" => s.fast_path.descriptors += n,
            "rasa_leases_granted_total" => s.fast_path.leases_granted = n,
            "rasa_keys_rotated_total" => s.fast_path.keys_rotated = n,
            "rasa_keys_revoked_total" => s.fast_path.keys_revoked = n,
            "rasa_disk_budget_bytes" => s.disk.budget_bytes = n,
            "rasa_disk_bytes" => s.disk.bytes = n,
            "rasa_disk_values" => s.disk.values = n,
            "rasa_disk_index_bytes" => s.disk.index_bytes = n,
            "rasa_disk_hits_total" => s.disk.hits = n,
            "rasa_disk_spills_total" => s.disk.spills = n,
            "rasa_disk_promotions_total" => s.disk.promotions += n,
            "rasa_disk_evictions_total" => s.disk.evictions = n,
            "rasa_disk_recovery_seconds" => s.disk.recovery_ms = (l.value * 1000.0) as u64,
            _ => {}
        }
    }
    s.requests = routes.into_values().collect();
    s
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
/// Read from the same exposition `/metrics` serves. Counters are totals since start; a
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
        let text = "\
rasa_http_requests_total{route=\"/v1/objects/{*key}\",method=\"GET\",status=\"200\"} 5
rasa_http_requests_total{route=\"/v1/objects/{*key}\",method=\"GET\",status=\"206\"} 2
rasa_http_requests_total{route=\"/v1/objects/{*key}\",method=\"GET\",status=\"304\"} 1
rasa_http_requests_total{route=\"/v1/objects/{*key}\",method=\"GET\",status=\"404\"} 3
rasa_http_requests_total{route=\"/v1/objects/{*key}\",method=\"PUT\",status=\"503\"} 4
rasa_descriptors_total{path=\"fabric\"} 6
rasa_descriptors_total{path=\"http\"} 1
rasa_arenas{state=\"sealed\"} 2
rasa_origin_fetch_seconds_sum 0.5
";
        let s = read(text, 7);
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
        assert_eq!(s.origin.fetch_seconds_sum, 0.5);
    }

    #[test]
    fn history_keeps_the_newest_and_answers_since() {
        let h = History::new(Duration::from_secs(1), 3);
        for t in 1..=5 {
            h.push(read("", t));
        }
        let all: Vec<u64> = h.since(0).iter().map(|s| s.t_ms).collect();
        assert_eq!(all, [3, 4, 5]);
        let newer: Vec<u64> = h.since(4).iter().map(|s| s.t_ms).collect();
        assert_eq!(newer, [5]);
        assert!(h.since(5).is_empty());
    }
}
