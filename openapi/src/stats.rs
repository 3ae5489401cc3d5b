//! `GET /v1/stats`: the figures behind the status page (`/ui`), as compact JSON.
//!
//! Every figure is read from the same Prometheus exposition `/metrics` serves, so the page
//! and a Grafana dashboard over `/metrics` can never disagree. Counters are totals since
//! the gateway started; a reader computes rates from two samples.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ClusterView;

/// The gateway's figures now, and a sample a second over the last few minutes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Stats {
    /// The gateway's version.
    #[schema(example = "0.1.0")]
    pub version: String,
    /// Seconds since the gateway started.
    pub uptime_seconds: u64,
    /// How often the gateway takes a sample for `history`, in milliseconds.
    pub interval_ms: u64,
    /// How many samples the gateway keeps (`interval_ms` apart).
    pub history_len: usize,
    /// The figures at the time of this answer.
    pub now: StatsSample,
    /// Earlier samples, oldest first: all that are kept, or only those taken after
    /// `?since=`.
    pub history: Vec<StatsSample>,
    /// The cluster's members as this gateway sees them (`enabled: false` for a single
    /// gateway).
    pub cluster: ClusterView,
    /// Every namespace (`--namespaces`; the default one first): quota and memory now.
    #[serde(default)]
    pub namespaces: Vec<NamespaceStats>,
}

/// One namespace's memory at the time of the answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NamespaceStats {
    /// Its name (`default` for the default namespace).
    pub name: String,
    /// Bytes of arena memory it may hold (the default one: what the others leave).
    pub quota_bytes: u64,
    /// Bytes of arena memory it holds.
    pub allocated_bytes: u64,
    /// Bytes of its current versions.
    pub live_bytes: u64,
    /// Current versions it evicted to stay within its quota (a counter).
    pub evictions: u64,
}

/// The figures at one moment. Counters are totals since start; gauges are current.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatsSample {
    /// When the sample was taken, in milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Requests answered, by route and status class (counters).
    pub requests: Vec<RouteRequests>,
    /// Cache hits and misses (counters) and what is stored.
    pub cache: CacheStats,
    /// Fetches from the origin (counters), when the gateway has one.
    pub origin: OriginStats,
    /// The memory budget and the arenas (gauges), and evictions (counter).
    pub memory: MemoryStats,
    /// Bytes served over HTTP and advertised for one-sided reads (counters).
    pub traffic: TrafficStats,
    /// Descriptors and remote keys (counters).
    pub fast_path: FastPathStats,
    /// The disk tier (`--disk`): what it holds (gauges), its traffic (counters).
    #[serde(default)]
    pub disk: DiskStats,
}

/// The disk tier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DiskStats {
    /// `--disk-size` (0: no disk tier).
    pub budget_bytes: u64,
    /// Bytes of segment files.
    pub bytes: u64,
    /// Values held.
    pub values: u64,
    /// Memory of its index.
    pub index_bytes: u64,
    /// Reads answered from disk (counter).
    pub hits: u64,
    /// Evicted values written to disk (counter).
    pub spills: u64,
    /// Values admitted from disk into memory (counter).
    pub promotions: u64,
    /// Values deleted with the oldest segment to make room (counter).
    pub evictions: u64,
    /// Milliseconds recovery took at start.
    pub recovery_ms: u64,
}

/// The requests one route answered, by status class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RouteRequests {
    /// The method (`*` for the S3 listener's requests, counted together).
    #[schema(example = "GET")]
    pub method: String,
    /// The route's path pattern, `unmatched`, or `S3 listener`.
    #[schema(example = "/v1/objects/{*key}")]
    pub route: String,
    /// `1xx` and `2xx` answers.
    pub ok: u64,
    /// `3xx` answers (such as `304 Not Modified`).
    pub redirect: u64,
    /// `4xx` answers.
    pub client_error: u64,
    /// `5xx` answers (such as `503` when the memory budget or the request slots are full).
    pub server_error: u64,
}

/// Hits, misses and what the cache holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CacheStats {
    /// Reads answered from memory.
    pub hits: u64,
    /// Reads that found nothing in memory (then asked the origin, if any).
    pub misses: u64,
    /// Reads answered `404` from a remembered origin miss.
    pub negative_hits: u64,
    /// Reads answered with a stale version while the origin was asked again.
    pub stale_served: u64,
    /// Versions stored (by PUT or by a fill from the origin).
    pub versions_stored: u64,
    /// Bytes stored.
    pub bytes_stored: u64,
}

/// Fetches from the origin (S3).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OriginStats {
    /// Whether the gateway has an origin.
    pub enabled: bool,
    /// Objects fetched.
    pub fetches: u64,
    /// Fetches that failed.
    pub errors: u64,
    /// Bytes fetched.
    pub bytes: u64,
    /// Sum of the fetches' latencies, in seconds (with `fetch_count`, the mean).
    pub fetch_seconds_sum: f64,
    /// Fetches timed.
    pub fetch_count: u64,
    /// Fetches under way now (gauge).
    pub in_flight: u64,
}

/// The memory budget and its arenas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemoryStats {
    /// `--memory`.
    pub budget_bytes: u64,
    /// Bytes of arena memory allocated (and registered).
    pub allocated_bytes: u64,
    /// Bytes of versions still readable (current, or under a lease).
    pub live_bytes: u64,
    /// Arenas being filled.
    pub arenas_open: u64,
    /// Full arenas.
    pub arenas_sealed: u64,
    /// Arenas whose versions are all dead, waiting for their last lease and key.
    pub arenas_draining: u64,
    /// Arenas ready for reuse.
    pub arenas_free: u64,
    /// Arenas holding at least one version under a lease.
    pub arenas_leased: u64,
    /// Versions evicted to make room (counter).
    pub evictions: u64,
}

/// Bytes out, by path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TrafficStats {
    /// Bytes of values served over HTTP by the API.
    pub http_bytes: u64,
    /// Bytes of values served by the S3 listener.
    pub s3_bytes: u64,
    /// Bytes of values advertised in descriptors for one-sided reads (the reads
    /// themselves never touch the gateway's CPU, so they are counted when handed out).
    pub one_sided_bytes: u64,
}

/// Descriptors handed out and remote keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FastPathStats {
    /// Descriptors handed out.
    pub descriptors: u64,
    /// Leases granted.
    pub leases_granted: u64,
    /// Remote keys rotated.
    pub keys_rotated: u64,
    /// Remote keys revoked.
    pub keys_revoked: u64,
}
