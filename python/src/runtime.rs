//! The tokio runtime calls run on: one per process, made on first use — a forked child
//! makes its own, since the parent's worker threads do not exist in it — and how a
//! blocking call waits on it with the GIL released.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3_async_runtimes::generic::{ContextExt, JoinError, Runtime};
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::Runtime as Tokio;

/// How often a blocking call looks for a pending signal (Ctrl-C) while it waits.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The runtime and the process it belongs to.
static RUNTIME: Mutex<Option<(u32, &'static Tokio)>> = Mutex::new(None);

/// This process's runtime. A runtime inherited through `fork()` has no threads: it is
/// left alone (leaked, never shut down) and a new one is made.
pub(crate) fn runtime() -> &'static Tokio {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    match *slot {
        Some((owner, rt)) if owner == pid => rt,
        _ => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("rasa-client")
                .build()
                .expect("the tokio runtime of rasa_client could not start");
            let rt: &'static Tokio = Box::leak(Box::new(rt));
            *slot = Some((pid, rt));
            rt
        }
    }
}

/// Runs `fut` to completion with the GIL released, checking for signals every
/// [`SIGNAL_CHECK`] so that Ctrl-C interrupts the call (its `KeyboardInterrupt` is
/// raised; the work in flight is dropped).
pub(crate) fn wait<T: Send>(py: Python<'_>, fut: impl Future<Output = T> + Send) -> PyResult<T> {
    let rt = runtime();
    py.detach(|| {
        rt.block_on(async move {
            tokio::pin!(fut);
            let mut tick = tokio::time::interval(SIGNAL_CHECK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    out = &mut fut => return Ok(out),
                    _ = tick.tick() => Python::attach(|py| py.check_signals())?,
                }
            }
        })
    })
}

/// `fut`, or the `Timeout` a Python caller expects once `limit` (the client's `timeout`,
/// the most a whole call may take) has passed; the work in flight is dropped.
pub(crate) async fn within<T>(
    limit: Option<Duration>,
    fut: impl Future<Output = PyResult<T>>,
) -> PyResult<T> {
    match limit {
        None => fut.await,
        Some(limit) => tokio::time::timeout(limit, fut)
            .await
            .unwrap_or_else(|_| Err(crate::errors::call_timed_out(limit))),
    }
}

/// [`runtime`] as `pyo3-async-runtimes` sees it: coroutines of `AsyncClient` run their
/// futures there.
pub(crate) struct Rasa;

tokio::task_local! {
    static TASK_LOCALS: std::cell::OnceCell<TaskLocals>;
}

/// A failed task, as `pyo3-async-runtimes` asks of it.
pub(crate) struct TaskFailed(tokio::task::JoinError);

impl JoinError for TaskFailed {
    fn is_panic(&self) -> bool {
        self.0.is_panic()
    }
    fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        self.0.into_panic()
    }
}

/// A spawned task's handle.
pub(crate) struct Handle(tokio::task::JoinHandle<()>);

impl Future for Handle {
    type Output = Result<(), TaskFailed>;
    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map_err(TaskFailed)
    }
}

impl Runtime for Rasa {
    type JoinError = TaskFailed;
    type JoinHandle = Handle;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Handle(runtime().spawn(fut))
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        Handle(runtime().spawn_blocking(f))
    }
}

impl ContextExt for Rasa {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = std::cell::OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|c| c.get().cloned())
            .unwrap_or_default()
    }
}

/// `fut` as a Python awaitable running on [`runtime`].
pub(crate) fn coroutine<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<Rasa, F, T>(py, fut)
}
