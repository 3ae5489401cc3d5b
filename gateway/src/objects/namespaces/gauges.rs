//! The namespaces' series in `/metrics`: the gateway-wide memory totals, and each
//! namespace's quota, memory, disk and evictions (labelled by name).
//!
//! The labelled series are recorded afresh for every scrape into a recorder of their own
//! ([`Namespaces::exposition`]), never into the process's: a namespace removed (SIGHUP,
//! S3 DeleteBucket) leaves no series behind, where the process's recorder would keep its
//! last values for ever.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusBuilder;

use super::{Namespace, Namespaces};
use crate::catalog::{Kind, METRICS};

impl Namespaces {
    /// Each namespace's series as of now, in the text exposition format (with their help
    /// text): quota, memory, disk tier and evictions, one series each per namespace that
    /// exists (at most [`super::MAX_NAMESPACES`] + 1). With named namespaces, also sets
    /// the process's memory gauges to the totals over all of them (the default store sets
    /// them alone): call it before rendering the process's exposition.
    pub fn exposition(&self) -> String {
        let all = self.all();
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let totals = metrics::with_local_recorder(&recorder, || {
            for m in METRICS.iter().filter(|m| m.labels == ["namespace"]) {
                match m.kind {
                    Kind::Counter => metrics::describe_counter!(m.name, m.help),
                    Kind::Gauge => metrics::describe_gauge!(m.name, m.help),
                    Kind::Histogram => metrics::describe_histogram!(m.name, m.help),
                }
            }
            record_each(&all)
        });
        if all.len() > 1 {
            let (budget, allocated, live) = totals;
            metrics::gauge!("rasa_memory_budget_bytes").set(budget as f64);
            metrics::gauge!("rasa_arena_bytes_allocated").set(allocated as f64);
            metrics::gauge!("rasa_live_bytes").set(live as f64);
        }
        handle.render()
    }
}

/// Records each namespace's series; the totals of their budgets, arena memory and live
/// bytes.
fn record_each(all: &[Arc<Namespace>]) -> (u64, u64, u64) {
    let (mut budget, mut allocated, mut live) = (0, 0, 0);
    for ns in all {
        let memory = ns.objects.store().memory();
        let name = ns.name.clone();
        let (b, a, l) = (memory.budget(), memory.allocated(), memory.live_bytes());
        (budget, allocated, live) = (budget + b, allocated + a, live + l);
        metrics::gauge!("rasa_namespace_quota_bytes", "namespace" => name.clone()).set(b as f64);
        metrics::gauge!("rasa_namespace_bytes_allocated", "namespace" => name.clone())
            .set(a as f64);
        metrics::gauge!("rasa_namespace_live_bytes", "namespace" => name.clone()).set(l as f64);
        if let Some(disk) = ns.objects.store().disk() {
            let (values, bytes, _) = disk.usage();
            metrics::gauge!("rasa_namespace_disk_quota_bytes", "namespace" => name.clone())
                .set(disk.size() as f64);
            metrics::gauge!("rasa_namespace_disk_bytes", "namespace" => name.clone())
                .set(bytes as f64);
            metrics::gauge!("rasa_namespace_disk_values", "namespace" => name.clone())
                .set(values as f64);
        }
        metrics::counter!("rasa_namespace_evictions_total", "namespace" => name)
            .absolute(memory.arena_stats().evicted.load(Ordering::Relaxed));
    }
    (budget, allocated, live)
}
