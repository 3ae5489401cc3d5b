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
use crate::catalog::{self, METRICS};

impl Namespaces {
    /// Each namespace's series as of now, in the text exposition format (with their help
    /// text): quota, memory, disk tier and evictions, one series each per namespace that
    /// exists (at most [`super::MAX_NAMESPACES`] + 1).
    pub fn exposition(&self) -> String {
        let all = self.all();
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            for m in METRICS.iter().filter(|m| m.labels == ["namespace"]) {
                m.describe();
            }
            record_each(&all);
        });
        handle.render()
    }

    /// With named namespaces, sets the process's memory gauges to the totals over all of
    /// them (the default store sets them alone when it is the only one).
    pub fn observe_totals(&self) {
        let all = self.all();
        if all.len() < 2 {
            return;
        }
        let (mut budget, mut allocated, mut live) = (0, 0, 0);
        for ns in &all {
            let memory = ns.objects.store().memory();
            budget += memory.budget();
            allocated += memory.allocated();
            live += memory.live_bytes();
        }
        catalog::MEMORY_BUDGET_BYTES.gauge().set(budget as f64);
        catalog::ARENA_BYTES_ALLOCATED.gauge().set(allocated as f64);
        catalog::LIVE_BYTES.gauge().set(live as f64);
    }
}

/// Records each namespace's series.
fn record_each(all: &[Arc<Namespace>]) {
    for ns in all {
        let memory = ns.objects.store().memory();
        let name = ns.name.clone();
        let (b, a, l) = (memory.budget(), memory.allocated(), memory.live_bytes());
        catalog::NAMESPACE_QUOTA_BYTES
            .gauge_by(&[("namespace", name.clone())])
            .set(b as f64);
        catalog::NAMESPACE_BYTES_ALLOCATED
            .gauge_by(&[("namespace", name.clone())])
            .set(a as f64);
        catalog::NAMESPACE_LIVE_BYTES
            .gauge_by(&[("namespace", name.clone())])
            .set(l as f64);
        if let Some(disk) = ns.objects.store().disk() {
            let (values, bytes, _) = disk.usage();
            catalog::NAMESPACE_DISK_QUOTA_BYTES
                .gauge_by(&[("namespace", name.clone())])
                .set(disk.size() as f64);
            catalog::NAMESPACE_DISK_BYTES
                .gauge_by(&[("namespace", name.clone())])
                .set(bytes as f64);
            catalog::NAMESPACE_DISK_VALUES
                .gauge_by(&[("namespace", name.clone())])
                .set(values as f64);
        }
        catalog::NAMESPACE_EVICTIONS
            .counter_by(&[("namespace", name)])
            .absolute(memory.arena_stats().evicted.load(Ordering::Relaxed));
    }
}
