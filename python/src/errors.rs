//! SDK errors as the exceptions of `rasa_client._errors` (defined in Python, so that they
//! can derive from both `RasaError` and the built-in they resemble: `NotFound` is a
//! `KeyError`, `Timeout` a `TimeoutError`, …). Built lazily: no GIL is needed to make one.

use pyo3::prelude::*;
use rasa_client::{Error, ProblemCode, TimeoutKind};

pyo3::import_exception!(rasa_client._errors, RasaError);
pyo3::import_exception!(rasa_client._errors, NotFound);
pyo3::import_exception!(rasa_client._errors, InvalidRequest);
pyo3::import_exception!(rasa_client._errors, PreconditionFailed);
pyo3::import_exception!(rasa_client._errors, PayloadTooLarge);
pyo3::import_exception!(rasa_client._errors, RangeNotSatisfiable);
pyo3::import_exception!(rasa_client._errors, InsufficientStorage);
pyo3::import_exception!(rasa_client._errors, Busy);
pyo3::import_exception!(rasa_client._errors, Unauthorized);
pyo3::import_exception!(rasa_client._errors, Forbidden);
pyo3::import_exception!(rasa_client._errors, OriginError);
pyo3::import_exception!(rasa_client._errors, Unreachable);
pyo3::import_exception!(rasa_client._errors, Timeout);
pyo3::import_exception!(rasa_client._errors, FastPathUnavailable);
pyo3::import_exception!(rasa_client._errors, ProtocolError);
pyo3::import_exception!(rasa_client._errors, ConfigError);
pyo3::import_exception!(rasa_client._errors, BufferTooSmall);

/// The arguments every exception of `rasa_client._errors` takes:
/// `(message, status, code, detail, needed)`.
type Args = (String, Option<u16>, String, String, Option<u64>);

/// `e` as the exception a Python caller catches.
pub(crate) fn to_py(e: Error) -> PyErr {
    // With every cause: "Connection refused", not only "error sending request".
    let message = rasa_client::with_causes(&e);
    let args = |status: Option<u16>, code: &str, detail: String| -> Args {
        (message.clone(), status, code.to_owned(), detail, None)
    };
    match e {
        Error::Problem(p) => {
            let a = args(Some(p.status), p.code.as_str(), p.detail.clone());
            match p.code {
                ProblemCode::NotFound => NotFound::new_err(a),
                ProblemCode::InvalidKey
                | ProblemCode::InvalidVersion
                | ProblemCode::InvalidRequest
                | ProblemCode::TooManyKeys
                | ProblemCode::DigestMismatch
                | ProblemCode::IncompleteBody => InvalidRequest::new_err(a),
                ProblemCode::PreconditionFailed => PreconditionFailed::new_err(a),
                ProblemCode::PayloadTooLarge => PayloadTooLarge::new_err(a),
                ProblemCode::RangeNotSatisfiable => RangeNotSatisfiable::new_err(a),
                ProblemCode::InsufficientStorage => InsufficientStorage::new_err(a),
                ProblemCode::Overloaded | ProblemCode::Unavailable => Busy::new_err(a),
                ProblemCode::Unauthorized => Unauthorized::new_err(a),
                ProblemCode::Forbidden => Forbidden::new_err(a),
                ProblemCode::OriginUnavailable | ProblemCode::OriginTimeout => {
                    OriginError::new_err(a)
                }
                _ => RasaError::new_err(a),
            }
        }
        Error::Timeout {
            ref endpoint,
            kind,
            after,
        } => {
            // Named as a Python user sets it, not as the Rust builder does.
            let setting = match kind {
                TimeoutKind::Connect => "connect_timeout=",
                TimeoutKind::Request => "timeout=",
                TimeoutKind::FastPathRead => "read_timeout=",
            };
            let text = format!(
                "timed out waiting for {endpoint}: nothing for {after:?} (the client's {setting})"
            );
            let a: Args = (text.clone(), None, "timeout".to_owned(), text, None);
            Timeout::new_err(a)
        }
        Error::Http(_) => Unreachable::new_err(args(None, "unreachable", message.clone())),
        Error::FastPath(ref why) => {
            FastPathUnavailable::new_err(args(None, "fast_path_unavailable", why.clone()))
        }
        Error::Protocol(ref why) => ProtocolError::new_err(args(None, "protocol", why.clone())),
        Error::Config(ref why) => ConfigError::new_err(args(None, "config", why.clone())),
        Error::InvalidRange { .. } => pyo3::exceptions::PyValueError::new_err(message.clone()),
        Error::BufferTooSmall { needed, .. } => {
            let mut a = args(None, "buffer_too_small", message.clone());
            a.4 = needed;
            BufferTooSmall::new_err(a)
        }
        Error::Input(_) | Error::Output(_) | Error::Incomplete { .. } => {
            RasaError::new_err(args(None, "io", message.clone()))
        }
    }
}

/// The `Timeout` of a call that took longer than the client's `timeout` in all.
pub(crate) fn call_timed_out(limit: std::time::Duration) -> PyErr {
    let text = format!(
        "the call took longer than the client's timeout={} s in all (the most a call may take; timeout=None for no limit)",
        limit.as_secs_f64()
    );
    Timeout::new_err((
        text.clone(),
        None::<u16>,
        "timeout".to_owned(),
        text,
        None::<u64>,
    ))
}

/// `Err(to_py(e))` for `?` in functions that return `PyResult`.
pub(crate) trait IntoPy<T> {
    /// The result with its error as a Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
