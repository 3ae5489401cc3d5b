//! Every metric the gateway exports, in one list.
//!
//! At start, each is described (the `# HELP` lines of `/metrics`) and each unlabelled
//! counter is registered at 0, so rates and alerts work from the first scrape rather than
//! from the first event. Tests check that the source emits no metric missing here, that
//! nothing here is stale, and that the Grafana dashboard (`docker/grafana/rasa.json`)
//! queries only metrics listed here.

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

use Kind::{Counter as C, Gauge as G, Histogram as H};

/// Every metric, by area.
#[rustfmt::skip]
pub const METRICS: &[Metric] = &[
    // HTTP API
    m("rasa_http_requests_total", C, &["route", "method", "status"], "HTTP requests answered."),
    m("rasa_http_request_duration_seconds", H, &["route", "method"], "Time to answer an HTTP request (to its head; bodies stream after)."),
    m("rasa_http_bytes_served_total", C, &[], "Bytes of values served over HTTP."),
    m("rasa_http_requests_active", G, &[], "Requests holding one of the --max-concurrent-requests slots."),
    m("rasa_http_max_concurrent_requests", G, &[], "--max-concurrent-requests."),
    m("rasa_http_requests_shed_total", C, &[], "Requests answered 503 because every slot was taken."),
    m("rasa_http_requests_refused_total", C, &["reason"], "Requests refused before routing (e.g. a head over --max-header-size)."),
    m("rasa_http_auth_failures_total", C, &["reason"], "Requests refused for a missing or invalid token, or too small a scope."),
    m("rasa_http_send_timeouts_total", C, &[], "Connections closed because the client stopped reading an answer."),
    m("rasa_connections_open", G, &["listener"], "Connections open on a listener (http, s3)."),
    m("rasa_connections_refused_total", C, &["listener"], "Connections accepted past --max-connections (served from the reserve, or closed)."),
    m("rasa_connections_closed_total", C, &["listener", "reason"], "Connections closed before their first byte: first_byte_timeout, or displaced by a newer one at --max-connections."),
    m("rasa_http_batch_items_total", C, &["op", "result"], "Values of put batches and keys of delete batches: done (stored, deleted) or refused (each with its own problem in the answer)."),
    m("rasa_http_uploads_too_slow_total", C, &[], "PUT bodies ended with 408 for arriving slower than --min-upload-rate."),
    m("rasa_http_chunked_upload_bytes", G, &[], "Memory held gathering bodies sent without Content-Length."),
    m("rasa_token_reloads_total", C, &["result"], "Token file reloads (SIGHUP)."),
    m("rasa_namespace_reloads_total", C, &["result"], "Namespaces file reloads (SIGHUP)."),
    m("rasa_namespace_quota_bytes", G, &["namespace"], "A namespace's quota (the default one: what --memory leaves after the others)."),
    m("rasa_namespace_bytes_allocated", G, &["namespace"], "Arena memory a namespace holds."),
    m("rasa_namespace_live_bytes", G, &["namespace"], "Bytes of a namespace's current versions."),
    m("rasa_namespace_evictions_total", C, &["namespace"], "Current versions a namespace evicted to stay within its quota."),
    m("rasa_namespace_disk_quota_bytes", G, &["namespace"], "A namespace's disk quota (the default one: --disk-size)."),
    m("rasa_namespace_disk_bytes", G, &["namespace"], "Bytes of a namespace's disk tier."),
    m("rasa_namespace_disk_values", G, &["namespace"], "Values on a namespace's disk tier."),
    // Store
    m("rasa_cache_hits_total", C, &[], "Reads answered from memory."),
    m("rasa_cache_misses_total", C, &[], "Reads that found nothing in memory."),
    m("rasa_versions_stored_total", C, &[], "Versions stored (PUTs and fills from the origin)."),
    m("rasa_bytes_stored_total", C, &[], "Bytes of versions stored."),
    m("rasa_uploads_abandoned_total", C, &[], "Uploads that ended without storing a version."),
    m("rasa_upload_bytes_in_progress", G, &[], "Body bytes received by uploads that have not finished yet."),
    m("rasa_leases_granted_total", C, &[], "Descriptor leases granted."),
    m("rasa_memory_budget_bytes", G, &[], "--memory: the budget for arena memory."),
    m("rasa_arena_bytes_allocated", G, &[], "Arena memory allocated and registered."),
    m("rasa_live_bytes", G, &[], "Bytes of versions still readable (current or under a lease)."),
    m("rasa_arenas", G, &["state"], "Arenas by state: open, sealed, draining, free."),
    m("rasa_arenas_leased", G, &[], "Arenas holding a version under a lease."),
    m("rasa_arenas_created_total", C, &[], "Arenas allocated and registered."),
    m("rasa_arenas_recycled_total", C, &[], "Arenas reused under a new remote key."),
    m("rasa_evictions_total", C, &[], "Versions evicted to make room."),
    m("rasa_compacted_total", C, &[], "Versions moved out of sparse arenas."),
    // Disk tier (--disk)
    m("rasa_unready", G, &["reason"], "1 while /readyz answers 503 for that reason (fenced: a cluster member whose etcd lease was lost or not renewed; draining: a member leaving on SIGTERM), else 0."),
    m("rasa_disk_values", G, &[], "Values on the disk tier (or queued for it)."),
    m("rasa_disk_bytes", G, &[], "Bytes of the disk tier's segment files."),
    m("rasa_disk_budget_bytes", G, &[], "--disk-size."),
    m("rasa_disk_foreign_files_total", C, &[], "Files in a disk tier's directory that are not its own (a link, another user's, no segment header of this directory): reported and left alone."),
    m("rasa_disk_index_bytes", G, &[], "Memory of the disk tier's index."),
    m("rasa_disk_recovery_seconds", G, &[], "How long recovering the disk tier took at start."),
    m("rasa_disk_recovered_values", G, &[], "Values the disk tier recovered at start."),
    m("rasa_disk_torn_bytes", G, &[], "Bytes cut off torn segment tails at start."),
    m("rasa_disk_spills_total", C, &[], "Evicted values written to the disk tier."),
    m("rasa_disk_spilled_bytes_total", C, &[], "Bytes of values written to the disk tier."),
    m("rasa_disk_dropped_total", C, &[], "Evicted values the disk tier could not keep (too large, or a write failed)."),
    m("rasa_disk_evictions_total", C, &[], "Values deleted with the disk tier's oldest segment to make room."),
    m("rasa_disk_reads_total", C, &[], "Records read from the disk tier (one per key however many requests wait)."),
    m("rasa_disk_hits_total", C, &[], "Reads answered from the disk tier."),
    m("rasa_disk_promotions_total", C, &["reason"], "Values admitted from disk into memory: first_hit, second_hit (--disk-admit) or descriptor."),
    m("rasa_disk_promotions_skipped_total", C, &[], "Admissions into memory that found no room within a lease plus twice the grace (the value stays on disk)."),
    m("rasa_disk_corrupt_total", C, &[], "Disk records that failed validation when read (dropped, never served)."),
    m("rasa_keys_rotated_total", C, &[], "Remote keys replaced (an arena's versions all dead)."),
    m("rasa_keys_revoked_total", C, &[], "Remote keys revoked (closed) after their last lease."),
    m("rasa_keys_refreshed_total", C, &[], "Remote keys re-issued for arenas whose key is older than --key-lifetime."),
    m("rasa_keys_retired_total", C, &[], "Old remote keys closed after a refresh."),
    m("rasa_fabric_progress_wakeups_total", C, &[], "Times the fast path's progress thread woke."),
    m("rasa_fabric_progress_errors_total", C, &[], "Errors the fast path's progress thread read from its queues."),
    // Fast path
    m("rasa_descriptors_total", C, &["path"], "Descriptors handed out: path fabric (one-sided) or http (fast path off)."),
    m("rasa_fastpath_bytes_advertised_total", C, &[], "Bytes of values in descriptors for one-sided reads."),
    // Origin (read-through)
    m("rasa_origin_fetches_total", C, &[], "Objects fetched from the origin."),
    m("rasa_origin_fetch_seconds", H, &[], "Time to fetch an object from the origin (to its first bytes)."),
    m("rasa_origin_bytes_total", C, &[], "Bytes fetched from the origin."),
    m("rasa_origin_errors_total", C, &["kind"], "Origin fetches that failed: timeout, denied, failed."),
    m("rasa_origin_heads_total", C, &[], "HEAD requests sent to the origin."),
    m("rasa_origin_fetches_in_flight", G, &[], "Origin fetches under way."),
    m("rasa_origin_pass_through_total", C, &[], "Objects streamed from the origin without being stored."),
    m("rasa_origin_pass_through_bytes_total", C, &[], "Bytes streamed from the origin without being stored."),
    m("rasa_origin_remembered_bytes", G, &[], "Memory held remembering the origin's \"not found\" and \"too large\" answers (at most --negative-cache-size)."),
    m("rasa_origin_remembered_evictions_total", C, &[], "Remembered origin answers forgotten early to stay within --negative-cache-size."),
    m("rasa_cache_negative_hits_total", C, &[], "Reads answered 404 from a remembered origin miss."),
    m("rasa_cache_stale_served_total", C, &[], "Stale versions served because the origin failed."),
    m("rasa_cache_untied_refused_total", C, &[], "Reads refused because a copy made under another owner of the key could not be confirmed with the origin (never served: it may be older than a write acknowledged elsewhere)."),
    m("rasa_cache_revalidate_all_total", C, &[], "Times every held version was marked for revalidation (a cluster member back after its lease was lost)."),
    m("rasa_singleflight_joins_total", C, &[], "Misses that joined a fetch already under way."),
    m("rasa_cold_streams_total", C, &[], "Cold objects streamed to a client while they filled."),
    // Cluster
    m("rasa_cluster_members", G, &["state"], "Cluster members by state: serving, draining."),
    m("rasa_cluster_fenced", G, &[], "1 while this member has not renewed its etcd lease for nine tenths of --member-ttl and does not act as owner."),
    m("rasa_cluster_revision", G, &[], "The etcd revision of this node's member list."),
    m("rasa_cluster_forwards_total", C, &["result"], "Requests forwarded to a key's owner."),
    m("rasa_cluster_redirects_total", C, &[], "Requests redirected (307) to a key's owner."),
    m("rasa_cluster_near_total", C, &["result"], "Near copies (--cluster-near-cache): hit (a read served from one), kept (an owner's answer kept), waited_out (a holder the owner could not tell, its lease waited out before a write was acknowledged)."),
    m("rasa_peer_fills_total", C, &["result"], "Misses asked of the key's previous owner: hit, miss, unreachable; stale (a copy the origin's HEAD did not confirm, fetched instead)."),
    m("rasa_cluster_records_rejected_total", C, &[], "Member records in etcd ignored: not parsing, under another node's key, or without a valid MAC under --cluster-secret-file."),
    m("rasa_cluster_hops_rejected_total", C, &[], "Requests marked as forwarded without a valid proof (--cluster-secret-file), served as clients' requests."),
    // S3 listener
    m("rasa_s3_requests_total", C, &["status"], "Requests the S3 listener answered."),
    m("rasa_s3_requests_refused_total", C, &["reason"], "S3 requests refused before parsing: headers_too_large, foreign_origin (open listener), not_implemented (server-side encryption, POST form uploads)."),
    m("rasa_s3_uploads_too_slow_total", C, &[], "S3 upload bodies ended with RequestTimeout for arriving slower than --min-upload-rate."),
    m("rasa_s3_requests_shed_total", C, &[], "S3 requests answered 503 SlowDown (every slot taken)."),
    m("rasa_s3_panics_total", C, &[], "S3 requests whose handler panicked (answered 500)."),
    m("rasa_s3_forwards_total", C, &["result"], "Keyed S3 requests forwarded to the key's owner in a cluster: ok, owner_unreachable."),
    m("rasa_s3_member_parts_total", C, &["result"], "Parts of S3 requests that span members (listings, DeleteObjects, copy sources) asked of other members: ok, unreachable."),
    m("rasa_s3_bytes_served_total", C, &[], "Bytes of values served by the S3 listener."),
    m("rasa_s3_objects_stored_total", C, &[], "Objects stored through the S3 listener."),
    m("rasa_s3_multipart_refused_total", C, &[], "CreateMultipartUpload answered 503 SlowDown (--multipart-max-uploads or --multipart-memory reached)."),
    m("rasa_s3_multipart_bytes", G, &[], "Memory held by unfinished multipart uploads."),
    m("rasa_s3_multipart_reaped_total", C, &[], "Multipart uploads dropped after --multipart-expiry."),
];

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
        match m.kind {
            Kind::Counter => {
                metrics::describe_counter!(m.name, m.help);
                if m.labels.is_empty() {
                    metrics::counter!(m.name).absolute(0);
                }
            }
            Kind::Gauge => metrics::describe_gauge!(m.name, m.help),
            Kind::Histogram => metrics::describe_histogram!(m.name, m.help),
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
