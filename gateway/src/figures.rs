//! The figures `/v1/stats` and the status page read, as numbers: a second recorder beside
//! the Prometheus one (both behind `metrics_util`'s fan-out) keeps every counter and gauge
//! in an atomic and every histogram as its sum and count, so the stats read typed values
//! by the catalog's constants instead of parsing `/metrics` back from text.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder};
use metrics::{SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::layers::{Fanout, FanoutBuilder};
use metrics_util::registry::{Registry, Storage};

use crate::catalog::Metric;

/// A histogram's sum and count (what the stats read of it; the buckets are Prometheus's).
#[derive(Debug, Default)]
pub struct SumCount {
    sum_bits: AtomicU64,
    count: AtomicU64,
}

impl HistogramFn for SumCount {
    fn record(&self, value: f64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }
}

/// How the registry keeps each kind.
#[derive(Debug)]
struct Atomics;

impl Storage<Key> for Atomics {
    type Counter = Arc<AtomicU64>;
    type Gauge = Arc<AtomicU64>;
    type Histogram = Arc<SumCount>;

    fn counter(&self, _: &Key) -> Self::Counter {
        Arc::default()
    }

    fn gauge(&self, _: &Key) -> Self::Gauge {
        Arc::default()
    }

    fn histogram(&self, _: &Key) -> Self::Histogram {
        Arc::default()
    }
}

/// The recorder that keeps the figures; cloning shares them.
#[derive(Clone)]
pub struct Figures {
    registry: Arc<Registry<Key, Atomics>>,
}

impl std::fmt::Debug for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Figures")
    }
}

impl Default for Figures {
    fn default() -> Self {
        Self {
            registry: Arc::new(Registry::new(Atomics)),
        }
    }
}

impl Recorder for Figures {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.registry.get_or_create_counter(key, Arc::clone))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.registry.get_or_create_gauge(key, Arc::clone))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.registry.get_or_create_histogram(key, Arc::clone))
    }
}

/// A series' labels, `(name, value)` in the order recorded.
pub type Labels = Vec<(String, String)>;

/// The figures at one moment, by metric name.
#[derive(Debug, Default)]
pub struct Snapshot {
    series: HashMap<String, Vec<(Labels, f64)>>,
}

impl Figures {
    /// Every series now (a histogram as its `_sum` and `_count`).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        let mut put = |name: String, key: &Key, v: f64| {
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            s.series.entry(name).or_default().push((labels, v));
        };
        self.registry
            .visit_counters(|k, c| put(k.name().to_owned(), k, c.load(Ordering::Relaxed) as f64));
        self.registry.visit_gauges(|k, g| {
            put(
                k.name().to_owned(),
                k,
                f64::from_bits(g.load(Ordering::Relaxed)),
            )
        });
        self.registry.visit_histograms(|k, h| {
            let sum = f64::from_bits(h.sum_bits.load(Ordering::Relaxed));
            put(format!("{}_sum", k.name()), k, sum);
            put(
                format!("{}_count", k.name()),
                k,
                h.count.load(Ordering::Relaxed) as f64,
            );
        });
        s
    }
}

impl Snapshot {
    /// Every series of `m`: its labels and value.
    pub fn each(&self, m: &Metric) -> impl Iterator<Item = (&Labels, f64)> {
        self.named(m.name)
    }

    /// The sum of `m` over its series, as a count (0 when it has none yet).
    pub fn total(&self, m: &Metric) -> u64 {
        count(self.each(m).map(|(_, v)| v).sum())
    }

    /// The value of `m`'s series whose label `label` is `value`, as a count.
    pub fn with(&self, m: &Metric, label: &str, value: &str) -> u64 {
        let matches = |ls: &Labels| ls.iter().any(|(k, v)| k == label && v == value);
        count(
            self.each(m)
                .filter(|(ls, _)| matches(ls))
                .map(|(_, v)| v)
                .sum(),
        )
    }

    /// A histogram's sum and count over its series.
    pub fn sum_count(&self, m: &Metric) -> (f64, u64) {
        let sum = self.named(&format!("{}_sum", m.name)).map(|(_, v)| v).sum();
        let n = self
            .named(&format!("{}_count", m.name))
            .map(|(_, v)| v)
            .sum();
        (sum, count(n))
    }

    /// The value of a gauge with one series (0 when it has none yet).
    pub fn value(&self, m: &Metric) -> f64 {
        self.each(m).map(|(_, v)| v).sum()
    }

    fn named(&self, name: &str) -> impl Iterator<Item = (&Labels, f64)> {
        self.series
            .get(name)
            .into_iter()
            .flatten()
            .map(|(ls, v)| (ls, *v))
    }
}

/// A value as a count (negative and not-a-number read as 0).
fn count(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v as u64
    } else {
        0
    }
}

/// The process's two recorders: Prometheus text for `/metrics`, numbers for `/v1/stats`.
#[derive(Clone, Debug)]
pub struct Recorders {
    /// Renders `/metrics`.
    pub exposition: PrometheusHandle,
    /// The same metrics as numbers.
    pub figures: Figures,
}

/// The metrics recorder could not be installed (another one is: a library embedding the
/// gateway installed its own).
#[derive(Debug, thiserror::Error)]
#[error("cannot install the metrics recorder: {0}")]
pub struct RecorderError(String);

/// Latency buckets (seconds) of every `*_seconds` histogram: 100 µs to 10 s, so
/// Prometheus and Grafana can take p50 and p99 across a whole cluster.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

impl Recorders {
    /// Both recorders, not installed (a test records into them with
    /// `metrics::with_local_recorder(&recorders.fanout(), …)`).
    pub fn build() -> (Self, Fanout) {
        let prometheus = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
            .expect("the latency buckets are not empty")
            .build_recorder();
        let figures = Figures::default();
        let me = Self {
            exposition: prometheus.handle(),
            figures: figures.clone(),
        };
        let fanout = FanoutBuilder::default()
            .add_recorder(prometheus)
            .add_recorder(figures)
            .build();
        (me, fanout)
    }

    /// Installs both as the process's recorder, and describes every catalogued metric
    /// (registering unlabelled counters at 0).
    pub fn install() -> Result<Self, RecorderError> {
        let (me, fanout) = Self::build();
        metrics::set_global_recorder(fanout).map_err(|e| RecorderError(e.to_string()))?;
        crate::catalog::describe();
        Ok(me)
    }
}
