//! What `Client` and `AsyncClient` share: their configuration and the Rust SDK client
//! made from it — one per process. A client inherited through `fork()` is left alone
//! (its connections and fabric endpoint belong to the parent; closing them from the
//! child would disturb the parent's) and a new one is made on first use in the child.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rasa_client::FastPath;

use crate::errors::IntoPy;
use crate::runtime::runtime;

/// A client's settings (what pickling keeps), as given to `Client(...)`.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) endpoint: String,
    pub(crate) fast_path: String,
    pub(crate) token: Option<String>,
    pub(crate) ca_file: Option<String>,
    /// The most a call may take in all (`None`: no total limit).
    pub(crate) timeout: Option<f64>,
    pub(crate) read_timeout: f64,
    pub(crate) connect_timeout: f64,
    pub(crate) verify_sha256: bool,
    pub(crate) fabric_addr: Option<String>,
    pub(crate) fabric_provider: Option<String>,
    pub(crate) retries_when_busy: u32,
    pub(crate) discover_cluster: bool,
    pub(crate) namespace: Option<String>,
    /// Whether writes ask for a leased descriptor (`None`: when the fast path is not off).
    pub(crate) lease_puts: Option<bool>,
}

/// How long an HTTP exchange may go without progress when `timeout=None` (no total limit).
const NO_PROGRESS: Duration = Duration::from_secs(30);

/// A positive, finite number of seconds named `what`.
fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    if !(s.is_finite() && s > 0.0) {
        return Err(PyValueError::new_err(format!(
            "{what} must be a positive number of seconds, not {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

impl Config {
    /// The settings, if they make sense (a `ValueError` naming the one that does not).
    pub(crate) fn checked(self) -> PyResult<Self> {
        self.mode()?;
        self.deadline()?;
        seconds("read_timeout", self.read_timeout)?;
        seconds("connect_timeout", self.connect_timeout)?;
        // A bad endpoint is refused here, not at the first call as a builder error.
        let mut b = rasa_client::Client::builder(self.endpoint.clone());
        if let Some(ns) = &self.namespace {
            b = b.namespace(ns.clone());
        }
        b.check().py()?;
        Ok(self)
    }

    /// The most a call may take in all: `timeout`, unless it is `None`.
    pub(crate) fn deadline(&self) -> PyResult<Option<Duration>> {
        self.timeout.map(|t| seconds("timeout", t)).transpose()
    }

    fn mode(&self) -> PyResult<FastPath> {
        match self.fast_path.as_str() {
            "auto" => Ok(FastPath::Auto),
            "off" => Ok(FastPath::Off),
            "required" => Ok(FastPath::Required),
            other => Err(PyValueError::new_err(format!(
                "fast_path must be \"auto\", \"off\" or \"required\", not {other:?}"
            ))),
        }
    }

    fn build(&self) -> PyResult<rasa_client::Client> {
        let mut b = rasa_client::Client::builder(self.endpoint.clone())
            .fast_path(self.mode()?)
            .timeout(self.deadline()?.unwrap_or(NO_PROGRESS))
            .read_timeout(seconds("read_timeout", self.read_timeout)?)
            .connect_timeout(seconds("connect_timeout", self.connect_timeout)?)
            .verify_sha256(self.verify_sha256)
            .retries_when_busy(self.retries_when_busy)
            .discover_cluster(self.discover_cluster);
        if let Some(t) = &self.token {
            b = b.token(t.clone());
        }
        if let Some(f) = &self.ca_file {
            b = b.ca_file(f.clone());
        }
        if let Some(a) = &self.fabric_addr {
            b = b.fabric_addr(a.clone());
        }
        if let Some(p) = &self.fabric_provider {
            b = b.fabric_provider(p.clone());
        }
        if let Some(ns) = &self.namespace {
            b = b.namespace(ns.clone());
        }
        if let Some(on) = self.lease_puts {
            b = b.lease_puts(on);
        }
        b.build().py()
    }

    /// The keyword arguments that make this configuration again (for pickling).
    pub(crate) fn kwargs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("endpoint", &self.endpoint)?;
        d.set_item("fast_path", &self.fast_path)?;
        d.set_item("token", &self.token)?;
        d.set_item("ca_file", &self.ca_file)?;
        d.set_item("timeout", self.timeout)?;
        d.set_item("read_timeout", self.read_timeout)?;
        d.set_item("connect_timeout", self.connect_timeout)?;
        d.set_item("verify_sha256", self.verify_sha256)?;
        d.set_item("fabric_addr", &self.fabric_addr)?;
        d.set_item("fabric_provider", &self.fabric_provider)?;
        d.set_item("retries_when_busy", self.retries_when_busy)?;
        d.set_item("discover_cluster", self.discover_cluster)?;
        d.set_item("namespace", &self.namespace)?;
        d.set_item("lease_puts", self.lease_puts)?;
        Ok(d)
    }

    /// `Client('http://…', fast_path='auto')`, for `repr`.
    pub(crate) fn repr(&self, class: &str) -> String {
        format!(
            "{class}({:?}, fast_path={:?})",
            self.endpoint, self.fast_path
        )
    }
}

/// The configuration and this process's SDK client.
pub(crate) struct Core {
    pub(crate) config: Config,
    client: Mutex<Option<(u32, rasa_client::Client)>>,
    closed: AtomicBool,
}

impl Core {
    /// A client of `config`, connected on first use.
    pub(crate) fn new(config: Config) -> Self {
        Self {
            config,
            client: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// The most one call may take (checked when the client was made).
    pub(crate) fn limit(&self) -> Option<Duration> {
        self.config.deadline().ok().flatten()
    }

    /// The SDK client of this process (made now if this process has none).
    pub(crate) fn sdk(&self) -> PyResult<rasa_client::Client> {
        if self.closed.load(Ordering::Acquire) {
            return Err(crate::errors::RasaError::new_err((
                "the client is closed",
                None::<u16>,
                "closed",
                "the client is closed",
                None::<u64>,
            )));
        }
        let pid = std::process::id();
        let mut slot = self.client.lock().unwrap_or_else(|e| e.into_inner());
        match slot.take() {
            Some((owner, c)) if owner == pid => {
                *slot = Some((owner, c.clone()));
                return Ok(c);
            }
            // Made before a fork: the parent's to close, not ours.
            Some(inherited) => std::mem::forget(inherited),
            None => {}
        }
        let _in_runtime = runtime().enter();
        let c = self.config.build()?;
        *slot = Some((pid, c.clone()));
        Ok(c)
    }

    /// Closes the connections and the fabric endpoint; later calls raise.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let taken = self.client.lock().unwrap_or_else(|e| e.into_inner()).take();
        match taken {
            Some((owner, c)) if owner == std::process::id() => {
                let _in_runtime = runtime().enter();
                drop(c);
            }
            Some(inherited) => std::mem::forget(inherited),
            None => {}
        }
    }

    /// The read counters, as a dict.
    pub(crate) fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.sdk()?.stats();
        let d = PyDict::new(py);
        d.set_item("fabric_reads", s.fabric_reads)?;
        d.set_item("http_reads", s.http_reads)?;
        d.set_item("fabric_batches", s.fabric_batches)?;
        d.set_item("fabric_writes", s.fabric_writes)?;
        d.set_item("http_writes", s.http_writes)?;
        d.set_item("busy_retries", s.busy_retries)?;
        d.set_item("bytes_copied", s.bytes_copied)?;
        d.set_item("fabric_provider", s.fabric_provider)?;
        d.set_item("cluster_members", s.cluster_members)?;
        let f = PyDict::new(py);
        for (why, n) in s.fallbacks {
            f.set_item(why, n)?;
        }
        d.set_item("fallbacks", f)?;
        Ok(d)
    }
}

/// The condition of a `put` from its keyword arguments (a `ValueError` for what makes no
/// sense: both at once, or an `if_none_match` other than `"*"`).
pub(crate) fn condition(
    if_match: Option<String>,
    if_none_match: Option<String>,
) -> PyResult<Option<rasa_client::Condition>> {
    match (if_match, if_none_match) {
        (None, None) => Ok(None),
        (Some(etag), None) => Ok(Some(rasa_client::Condition::IfMatch(etag))),
        (None, Some(star)) if star == "*" => Ok(Some(rasa_client::Condition::IfAbsent)),
        (None, Some(other)) => Err(PyValueError::new_err(format!(
            "if_none_match takes only \"*\" (store only if the key has no current version), not {other:?}"
        ))),
        (Some(_), Some(_)) => Err(PyValueError::new_err(
            "give if_match or if_none_match, not both",
        )),
    }
}
