//! # rasa-py — the Python SDK for Rasa (`import rasa_client`)
//!
//! A thin pyo3 layer over the Rust SDK (`rasa-client`): no second implementation of the
//! protocol. What it adds is what Python callers need:
//!
//! - every wait runs with the GIL released (other Python threads go on), and a blocking
//!   call still answers Ctrl-C ([`runtime::wait`]);
//! - reads fill memory the caller owns through the buffer protocol, with one copy
//!   ([`buffer::Out`]), or none one-sided into a [`registered::RegisteredBuffer`]
//!   (`Client.register`), and [`types::Object`] hands the SDK's bytes to Python without
//!   copying;
//! - `AsyncClient`'s methods are coroutines on the SDK's own tokio runtime
//!   (`pyo3-async-runtimes`);
//! - fork safety: the runtime and each client's connections and fabric endpoint belong to
//!   the process that made them; a forked child builds its own on first use
//!   ([`core::Core`]);
//! - SDK errors become exceptions of `rasa_client._errors` ([`errors`]).
//!
//! The pure-Python half of the package (`python/rasa_client/`) adds context managers,
//! `from_env`, pickling and key iteration, and carries the type stubs.

mod buffer;
mod clients;
mod core;
mod errors;
mod files;
mod ops;
mod registered;
mod runtime;
mod types;

use pyo3::prelude::*;

/// The extension module `rasa_client._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Smaller libfabric queues for this process, when it imports us with a single thread
    // (changing the environment is unsafe otherwise; then it stays as it is).
    let _ = rasa_client::apply_provider_defaults();
    m.add_class::<clients::Client>()?;
    m.add_class::<clients::AsyncClient>()?;
    m.add_class::<types::Object>()?;
    m.add_class::<registered::RegisteredBuffer>()?;
    m.add_class::<types::Descriptor>()?;
    m.add_class::<types::Meta>()?;
    m.add_class::<types::ObjectSummary>()?;
    m.add_class::<types::ObjectList>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
