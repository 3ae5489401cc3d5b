//! Every metric the gateway exports, in one list.
//!
//! At start, each is described (the `# HELP` lines of `/metrics`) and each unlabelled
//! counter is registered at 0, so rates and alerts work from the first scrape rather than
//! from the first event. Tests check that the source emits no metric missing here, that
//! nothing here is stale, and that the Grafana dashboard (`docker/grafana/rasa.json`)
//! queries only metrics listed here.
//!
//! Each metric is a constant ([`HTTP_REQUESTS`], …) written once, with its name, kind,
//! labels and help; the source records through it (`catalog::CACHE_HITS.counter()`)
//! and `/v1/stats` reads its figures by it ([`crate::figures`]).

use metrics::IntoLabels;

/// What kind of metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution, exported with buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

/// One exported metric.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// Its name in `/metrics`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its labels (none: one series).
    pub labels: &'static [&'static str],
    /// What it counts, for `# HELP`.
    pub help: &'static str,
}

const fn m(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        labels,
        help,
    }
}

impl Metric {
    /// This counter's one series (it has no labels).
    pub fn counter(&'static self) -> metrics::Counter {
        self.counter_by(Vec::<metrics::Label>::new())
    }

    /// This counter's series with `labels` (the catalogued label names, in order).
    pub fn counter_by(&'static self, labels: impl IntoLabels) -> metrics::Counter {
        metrics::counter!(self.checked(Kind::Counter), labels)
    }

    /// This gauge's one series (it has no labels).
    pub fn gauge(&'static self) -> metrics::Gauge {
        self.gauge_by(Vec::<metrics::Label>::new())
    }

    /// This gauge's series with `labels` (the catalogued label names, in order).
    pub fn gauge_by(&'static self, labels: impl IntoLabels) -> metrics::Gauge {
        metrics::gauge!(self.checked(Kind::Gauge), labels)
    }

    /// This histogram's one series (it has no labels).
    pub fn histogram(&'static self) -> metrics::Histogram {
        self.histogram_by(Vec::<metrics::Label>::new())
    }

    /// This histogram's series with `labels` (none: its one series).
    pub fn histogram_by(&'static self, labels: impl IntoLabels) -> metrics::Histogram {
        metrics::histogram!(self.checked(Kind::Histogram), labels)
    }

    /// Gives the installed recorder this metric's help text (its `# HELP` line).
    pub fn describe(&self) {
        match self.kind {
            Kind::Counter => metrics::describe_counter!(self.name, self.help),
            Kind::Gauge => metrics::describe_gauge!(self.name, self.help),
            Kind::Histogram => metrics::describe_histogram!(self.name, self.help),
        }
    }

    /// The name, for a handle of `kind` (a mismatch is a bug: a debug build panics).
    fn checked(&'static self, kind: Kind) -> &'static str {
        debug_assert_eq!(self.kind, kind, "{} is not a {kind:?}", self.name);
        self.name
    }
}

use Kind::{Counter as C, Gauge as G, Histogram as H};

/// Declares each metric once: a constant of that name (its documentation, its help text)
/// and its place in [`METRICS`].
macro_rules! catalog {
    ($($id:ident = $name:literal, $kind:ident, [$($label:literal),*], $help:literal;)*) => {
        $(
            #[doc = $help]
            pub const $id: Metric = m($name, $kind, &[$($label),*], $help);
        )*
        /// Every metric, by area.
        pub const METRICS: &[Metric] = &[$($id),*];
    };
}

#[rustfmt::skip]
catalog! {
    // HTTP API
    HTTP_REQUESTS = "rasa_http_requests_total", C, ["route", "method", "status"], "HTTP requests answered.";
    HTTP_REQUEST_DURATION_SECONDS = "rasa_http_request_duration_seconds", H, ["route", "method"], "Time to answer an HTTP request (to its head; bodies stream after).";
    HTTP_BYTES_SERVED = "rasa_http_bytes_served_total", C, [], "Bytes of values served over HTTP.";
    HTTP_REQUESTS_ACTIVE = "rasa_http_requests_active", G, [], "Requests holding one of the --max-concurrent-requests slots.";
    HTTP_MAX_CONCURRENT_REQUESTS = "rasa_http_max_concurrent_requests", G, [], "--max-concurrent-requests.";
    HTTP_REQUESTS_SHED = "rasa_http_requests_shed_total", C, [], "Requests answered 503 because every slot was taken.";
    HTTP_REQUESTS_REFUSED = "rasa_http_requests_refused_total", C, ["reason"], "Requests refused before routing (e.g. a head over --max-header-size).";
    HTTP_AUTH_FAILURES = "rasa_http_auth_failures_total", C, ["reason"], "Requests refused for a missing or invalid token, or too small a scope.";
    HTTP_SEND_TIMEOUTS = "rasa_http_send_timeouts_total", C, [], "Connections closed because the client stopped reading an answer.";
    CONNECTIONS_OPEN = "rasa_connections_open", G, ["listener"], "Connections open on a listener (http, s3).";
    CONNECTIONS_REFUSED = "rasa_connections_refused_total", C, ["listener"], "Connections accepted past --max-connections (served from the reserve, or closed).";
    CONNECTIONS_CLOSED = "rasa_connections_closed_total", C, ["listener", "reason"], "Connections closed before their first byte: first_byte_timeout, or displaced by a newer one at --max-connections.";
    HTTP_BATCH_ITEMS = "rasa_http_batch_items_total", C, ["op", "result"], "Values of put batches and keys of delete batches: done (stored, deleted) or refused (each with its own problem in the answer).";
    HTTP_UPLOADS_TOO_SLOW = "rasa_http_uploads_too_slow_total", C, [], "PUT bodies ended with 408 for arriving slower than --min-upload-rate.";
    HTTP_CHUNKED_UPLOAD_BYTES = "rasa_http_chunked_upload_bytes", G, [], "Memory held gathering bodies sent without Content-Length.";
    TOKEN_RELOADS = "rasa_token_reloads_total", C, ["result"], "Token file reloads (SIGHUP).";
    NAMESPACE_RELOADS = "rasa_namespace_reloads_total", C, ["result"], "Namespaces file reloads (SIGHUP).";
    NAMESPACE_QUOTA_BYTES = "rasa_namespace_quota_bytes", G, ["namespace"], "A namespace's quota (the default one: what --memory leaves after the others).";
    NAMESPACE_BYTES_ALLOCATED = "rasa_namespace_bytes_allocated", G, ["namespace"], "Arena memory a namespace holds.";
    NAMESPACE_LIVE_BYTES = "rasa_namespace_live_bytes", G, ["namespace"], "Bytes of a namespace's current versions.";
    NAMESPACE_EVICTIONS = "rasa_namespace_evictions_total", C, ["namespace"], "Current versions a namespace evicted to stay within its quota.";
    NAMESPACE_DISK_QUOTA_BYTES = "rasa_namespace_disk_quota_bytes", G, ["namespace"], "A namespace's disk quota (the default one: --disk-size).";
    NAMESPACE_DISK_BYTES = "rasa_namespace_disk_bytes", G, ["namespace"], "Bytes of a namespace's disk tier.";
    NAMESPACE_DISK_VALUES = "rasa_namespace_disk_values", G, ["namespace"], "Values on a namespace's disk tier.";
    // Store
    CACHE_HITS = "rasa_cache_hits_total", C, [], "Reads answered from memory.";
    CACHE_MISSES = "rasa_cache_misses_total", C, [], "Reads that found nothing in memory.";
    VERSIONS_STORED = "rasa_versions_stored_total", C, [], "Versions stored (PUTs and fills from the origin).";
    BYTES_STORED = "rasa_bytes_stored_total", C, [], "Bytes of versions stored.";
    ROOM_WAITS = "rasa_room_waits_total", C, ["outcome"], "Writes (and admissions from disk) that found memory full of values still leased or being written and waited for reclamation: room (it came in time) or busy (answered 503 with Retry-After).";
    ROOM_WAIT_SECONDS = "rasa_room_wait_seconds", H, [], "How long a write waited for memory held by leases or uploads (see rasa_room_waits_total).";
    ONE_SIDED_UPLOADS = "rasa_one_sided_uploads_total", C, ["outcome"], "One-sided uploads (values written over the fabric into an upload region): reserved, committed, or expired (reclaimed uncommitted at their lease's end, or committed too late).";
    ONE_SIDED_VALUES = "rasa_one_sided_values_total", C, ["outcome"], "Values of committed one-sided uploads: sealed, or refused because the bytes in memory do not hash to the checksum the client computed (checksum_mismatch).";
    SHA256_DEFERRED = "rasa_sha256_deferred_total", C, [], "SHA-256 digests of one-sided writes computed later, when a reader first needed one (an HTTP or S3 entity tag, write-through).";
    UPLOADS_ABANDONED = "rasa_uploads_abandoned_total", C, [], "Uploads that ended without storing a version.";
    UPLOAD_BYTES_IN_PROGRESS = "rasa_upload_bytes_in_progress", G, [], "Body bytes received by uploads that have not finished yet.";
    LEASES_GRANTED = "rasa_leases_granted_total", C, [], "Descriptor leases granted.";
    MEMORY_BUDGET_BYTES = "rasa_memory_budget_bytes", G, [], "--memory: the budget for arena memory.";
    ARENA_BYTES_ALLOCATED = "rasa_arena_bytes_allocated", G, [], "Arena memory allocated and registered.";
    ARENA_BYTES_WARM = "rasa_arena_bytes_warm", G, [], "Spare arena memory faulted in ahead of writes (part of the allocated memory; --warm-memory).";
    ARENA_BYTES_FROM_WARM = "rasa_arena_bytes_from_warm_total", C, [], "Bytes of arenas and upload regions cut out of spare memory (their pages already faulted in).";
    ARENA_BYTES_COLD = "rasa_arena_bytes_cold_total", C, [], "Bytes of arenas and upload regions mapped fresh (their first writes fault each page in): more than a little means --warm-memory is too small for the write rate.";
    LIVE_BYTES = "rasa_live_bytes", G, [], "Bytes of versions still readable (current or under a lease).";
    ARENAS = "rasa_arenas", G, ["state"], "Arenas by state: open, sealed, draining, free.";
    ARENAS_LEASED = "rasa_arenas_leased", G, [], "Arenas holding a version under a lease.";
    ARENAS_CREATED = "rasa_arenas_created_total", C, [], "Arenas allocated and registered.";
    ARENAS_RECYCLED = "rasa_arenas_recycled_total", C, [], "Arenas reused under a new remote key.";
    EVICTIONS = "rasa_evictions_total", C, [], "Versions evicted to make room.";
    COMPACTED = "rasa_compacted_total", C, [], "Versions moved out of sparse arenas.";
    // Disk tier (--disk)
    UNREADY = "rasa_unready", G, ["reason"], "1 while /readyz answers 503 for that reason (fenced: a cluster member whose etcd lease was lost or not renewed; draining: a member leaving on SIGTERM), else 0.";
    DISK_VALUES = "rasa_disk_values", G, [], "Values on the disk tier (or queued for it).";
    DISK_BYTES = "rasa_disk_bytes", G, [], "Bytes of the disk tier's segment files.";
    DISK_BUDGET_BYTES = "rasa_disk_budget_bytes", G, [], "--disk-size.";
    DISK_FOREIGN_FILES = "rasa_disk_foreign_files_total", C, [], "Files in a disk tier's directory that are not its own (a link, another user's, no segment header of this directory): reported and left alone.";
    DISK_INDEX_BYTES = "rasa_disk_index_bytes", G, [], "Memory of the disk tier's index.";
    DISK_RECOVERY_SECONDS = "rasa_disk_recovery_seconds", G, [], "How long recovering the disk tier took at start.";
    DISK_RECOVERED_VALUES = "rasa_disk_recovered_values", G, [], "Values the disk tier recovered at start.";
    DISK_TORN_BYTES = "rasa_disk_torn_bytes", G, [], "Bytes cut off torn segment tails at start.";
    DISK_SPILLS = "rasa_disk_spills_total", C, [], "Evicted values written to the disk tier.";
    DISK_SPILLED_BYTES = "rasa_disk_spilled_bytes_total", C, [], "Bytes of values written to the disk tier.";
    DISK_DROPPED = "rasa_disk_dropped_total", C, [], "Evicted values the disk tier could not keep (too large, or a write failed).";
    DISK_EVICTIONS = "rasa_disk_evictions_total", C, [], "Values deleted with the disk tier's oldest segment to make room.";
    DISK_READS = "rasa_disk_reads_total", C, [], "Records read from the disk tier (one per key however many requests wait).";
    DISK_HITS = "rasa_disk_hits_total", C, [], "Reads answered from the disk tier.";
    DISK_PROMOTIONS = "rasa_disk_promotions_total", C, ["reason"], "Values admitted from disk into memory: first_hit, second_hit (--disk-admit) or descriptor.";
    DISK_PROMOTIONS_SKIPPED = "rasa_disk_promotions_skipped_total", C, [], "Admissions into memory that found no room within a lease plus twice the grace (the value stays on disk).";
    DISK_CORRUPT = "rasa_disk_corrupt_total", C, [], "Disk records that failed validation when read (dropped, never served).";
    KEYS_ROTATED = "rasa_keys_rotated_total", C, [], "Remote keys replaced (an arena's versions all dead).";
    KEYS_REVOKED = "rasa_keys_revoked_total", C, [], "Remote keys revoked (closed) after their last lease.";
    KEYS_REFRESHED = "rasa_keys_refreshed_total", C, [], "Remote keys re-issued for arenas whose key is older than --key-lifetime.";
    KEYS_RETIRED = "rasa_keys_retired_total", C, [], "Old remote keys closed after a refresh.";
    FABRIC_PROGRESS_WAKEUPS = "rasa_fabric_progress_wakeups_total", C, [], "Times the fast path's progress thread woke.";
    FABRIC_PROGRESS_ERRORS = "rasa_fabric_progress_errors_total", C, [], "Errors the fast path's progress thread read from its queues.";
    // Fast path
    DESCRIPTORS = "rasa_descriptors_total", C, ["path"], "Descriptors handed out: path fabric (one-sided) or http (fast path off).";
    FASTPATH_BYTES_ADVERTISED = "rasa_fastpath_bytes_advertised_total", C, [], "Bytes of values in descriptors for one-sided reads.";
    // Origin (read-through)
    ORIGIN_FETCHES = "rasa_origin_fetches_total", C, [], "Objects fetched from the origin.";
    ORIGIN_FETCH_SECONDS = "rasa_origin_fetch_seconds", H, [], "Time to fetch an object from the origin (to its first bytes).";
    ORIGIN_BYTES = "rasa_origin_bytes_total", C, [], "Bytes fetched from the origin.";
    ORIGIN_ERRORS = "rasa_origin_errors_total", C, ["kind"], "Origin fetches that failed: timeout, denied, failed.";
    ORIGIN_HEADS = "rasa_origin_heads_total", C, [], "HEAD requests sent to the origin.";
    ORIGIN_FETCHES_IN_FLIGHT = "rasa_origin_fetches_in_flight", G, [], "Origin fetches under way.";
    ORIGIN_PASS_THROUGH = "rasa_origin_pass_through_total", C, [], "Objects streamed from the origin without being stored.";
    ORIGIN_PASS_THROUGH_BYTES = "rasa_origin_pass_through_bytes_total", C, [], "Bytes streamed from the origin without being stored.";
    ORIGIN_REMEMBERED_BYTES = "rasa_origin_remembered_bytes", G, [], "Memory held remembering the origin's \"not found\" and \"too large\" answers (at most --negative-cache-size).";
    ORIGIN_REMEMBERED_EVICTIONS = "rasa_origin_remembered_evictions_total", C, [], "Remembered origin answers forgotten early to stay within --negative-cache-size.";
    CACHE_NEGATIVE_HITS = "rasa_cache_negative_hits_total", C, [], "Reads answered 404 from a remembered origin miss.";
    CACHE_STALE_SERVED = "rasa_cache_stale_served_total", C, [], "Stale versions served because the origin failed.";
    CACHE_UNTIED_REFUSED = "rasa_cache_untied_refused_total", C, [], "Reads refused because a copy made under another owner of the key could not be confirmed with the origin (never served: it may be older than a write acknowledged elsewhere).";
    CACHE_REVALIDATE_ALL = "rasa_cache_revalidate_all_total", C, [], "Times every held version was marked for revalidation (a cluster member back after its lease was lost).";
    SINGLEFLIGHT_JOINS = "rasa_singleflight_joins_total", C, [], "Misses that joined a fetch already under way.";
    COLD_STREAMS = "rasa_cold_streams_total", C, [], "Cold objects streamed to a client while they filled.";
    // Cluster
    CLUSTER_MEMBERS = "rasa_cluster_members", G, ["state"], "Cluster members by state: serving, draining.";
    CLUSTER_FENCED = "rasa_cluster_fenced", G, [], "1 while this member has not renewed its etcd lease for nine tenths of --member-ttl and does not act as owner.";
    CLUSTER_REVISION = "rasa_cluster_revision", G, [], "The etcd revision of this node's member list.";
    CLUSTER_FORWARDS = "rasa_cluster_forwards_total", C, ["result"], "Requests forwarded to a key's owner.";
    CLUSTER_REDIRECTS = "rasa_cluster_redirects_total", C, [], "Requests redirected (307) to a key's owner.";
    CLUSTER_NEAR = "rasa_cluster_near_total", C, ["result"], "Near copies (--cluster-near-cache): hit (a read served from one), kept (an owner's answer kept), waited_out (a holder the owner could not tell, its lease waited out before a write was acknowledged).";
    CLUSTER_REPLICA_COPIES = "rasa_cluster_replica_copies_total", C, ["result"], "Replicas (--cluster-replicas) asked of their owner: copied (a new version's frame), renewed (the owner's 304: the lease renewed, no bytes moved), failed (no copy: the read went to the owner).";
    CLUSTER_REPLICA_READS = "rasa_cluster_replica_reads_total", C, [], "Reads (HTTP and descriptors) a replica served from its own memory.";
    CLUSTER_REPLICAS = "rasa_cluster_replicas", G, [], "Replicas of other members' keys held here (--cluster-replicas).";
    CLUSTER_REPLICA_BYTES = "rasa_cluster_replica_bytes", G, [], "Bytes those replicas take of this member's memory: at most --cluster-replica-memory.";
    CLUSTER_HOT_KEYS = "rasa_cluster_hot_keys", G, [], "Keys this member owns that are hot by demand (--cluster-hot-reads): held by --cluster-hot-replicas members.";
    CLUSTER_HOT_PROMOTIONS = "rasa_cluster_hot_promotions_total", C, [], "Keys this member owns that became hot: read more than --cluster-hot-reads times a second over a window.";
    CLUSTER_HOT_DEMOTIONS = "rasa_cluster_hot_demotions_total", C, [], "Hot keys that stopped being hot: read less than half --cluster-hot-reads a second over a window, or no longer owned here.";
    PEER_FILLS = "rasa_peer_fills_total", C, ["result"], "Misses asked of the key's previous owner: hit, miss, unreachable (no answer within 500 ms: it is then a suspect until it answers); suspect (not asked); stale (a copy the origin's HEAD did not confirm, fetched instead).";
    CLUSTER_RECORDS_REJECTED = "rasa_cluster_records_rejected_total", C, [], "Member records in etcd ignored: not parsing, under another node's key, or without a valid MAC under --cluster-secret-file.";
    CLUSTER_HOPS_REJECTED = "rasa_cluster_hops_rejected_total", C, [], "Requests marked as forwarded without a valid proof (--cluster-secret-file), served as clients' requests.";
    // S3 listener
    S3_REQUESTS = "rasa_s3_requests_total", C, ["status"], "Requests the S3 listener answered.";
    S3_REQUESTS_REFUSED = "rasa_s3_requests_refused_total", C, ["reason"], "S3 requests refused before parsing: headers_too_large, foreign_origin (open listener), not_implemented (server-side encryption, POST form uploads).";
    S3_UPLOADS_TOO_SLOW = "rasa_s3_uploads_too_slow_total", C, [], "S3 upload bodies ended with RequestTimeout for arriving slower than --min-upload-rate.";
    S3_REQUESTS_SHED = "rasa_s3_requests_shed_total", C, [], "S3 requests answered 503 SlowDown (every slot taken).";
    S3_PANICS = "rasa_s3_panics_total", C, [], "S3 requests whose handler panicked (answered 500).";
    S3_FORWARDS = "rasa_s3_forwards_total", C, ["result"], "Keyed S3 requests forwarded to the key's owner in a cluster: ok, owner_unreachable.";
    S3_MEMBER_PARTS = "rasa_s3_member_parts_total", C, ["result"], "Parts of S3 requests that span members (listings, DeleteObjects, copy sources) asked of other members: ok, unreachable.";
    S3_BYTES_SERVED = "rasa_s3_bytes_served_total", C, [], "Bytes of values served by the S3 listener.";
    S3_OBJECTS_STORED = "rasa_s3_objects_stored_total", C, [], "Objects stored through the S3 listener.";
    S3_MULTIPART_REFUSED = "rasa_s3_multipart_refused_total", C, [], "CreateMultipartUpload answered 503 SlowDown (--multipart-max-uploads or --multipart-memory reached).";
    S3_MULTIPART_BYTES = "rasa_s3_multipart_bytes", G, [], "Memory held by unfinished multipart uploads.";
    S3_MULTIPART_REAPED = "rasa_s3_multipart_reaped_total", C, [], "Multipart uploads dropped after --multipart-expiry.";
}

/// The metric named `name`, if the gateway exports it.
pub fn find(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.name == name)
}

/// The reference of every metric (Markdown) that `docs/reference/metrics.md` holds
/// (`rasa-gateway metrics`, hidden; `make docs` writes it, a test keeps it current).
pub fn reference() -> String {
    let mut out = String::from(
        "<!-- Generated by `rasa-gateway metrics` (make docs); a test keeps it current. -->\n\
         # Metrics reference\n\n\
         Every metric the gateway exports at `/metrics` (Prometheus text format), from the \
         one list in `gateway/src/catalog.rs`. Unlabelled counters start at 0. Histograms \
         export `_bucket`, `_sum` and `_count`.\n\n\
         | Metric | Kind | Labels | Meaning |\n|---|---|---|---|\n",
    );
    for m in METRICS {
        let kind = match m.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let labels = m
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let help = m.help.replace('|', "\\|");
        out.push_str(&format!("| `{}` | {kind} | {labels} | {help} |\n", m.name));
    }
    out
}

/// Describes every metric to the installed recorder and registers unlabelled counters at 0.
pub fn describe() {
    for m in METRICS {
        m.describe();
        if m.kind == Kind::Counter && m.labels.is_empty() {
            m.counter().absolute(0);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_metrics_reference_in_docs_is_current() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/metrics.md");
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == super::reference(),
            "docs/reference/metrics.md is stale: run `make docs`"
        );
        for m in super::METRICS {
            assert!(on_disk.contains(&format!("| `{}` |", m.name)), "{}", m.name);
        }
    }
}
