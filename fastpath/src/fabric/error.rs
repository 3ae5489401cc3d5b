//! Errors of libfabric calls: the call that failed, its errno and `fi_strerror` text.

use std::ffi::CStr;

/// A failed libfabric call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FabricError {
    /// A libfabric call returned an error code.
    #[error("{call} failed: {text} (errno {errno})")]
    Call {
        /// The libfabric function.
        call: &'static str,
        /// The (positive) error number.
        errno: i32,
        /// `fi_strerror` text.
        text: String,
    },
    /// A completion reported an error.
    #[error("{call} completed with an error: {text} (errno {errno}, provider errno {prov_errno}: {prov_text})")]
    Completion {
        /// The operation.
        call: &'static str,
        /// The (positive) error number.
        errno: i32,
        /// `fi_strerror` text.
        text: String,
        /// The provider's own error number.
        prov_errno: i32,
        /// `fi_cq_strerror` text.
        prov_text: String,
    },
    /// libfabric itself could not be loaded (see [`crate::library`]).
    #[error("{0}")]
    Library(String),
    /// The provider does not offer what Rasa needs.
    #[error("provider {provider:?} cannot serve Rasa: {why}")]
    Unsupported {
        /// Provider name.
        provider: String,
        /// What is missing.
        why: String,
    },
}

impl FabricError {
    /// The (positive) errno of the failure, when it has one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Call { errno, .. } | Self::Completion { errno, .. } => Some(*errno),
            Self::Unsupported { .. } | Self::Library(_) => None,
        }
    }
}

/// The text of a C string libfabric returned, `""` for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn c_text(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `fi_strerror` of a positive errno.
pub fn strerror(errno: i32) -> String {
    let Some(l) = crate::library::loaded() else {
        return std::io::Error::from_raw_os_error(errno).to_string();
    };
    // SAFETY: fi_strerror accepts any value and returns a pointer to a static string.
    let p = unsafe { l.lib.fi_strerror(errno) };
    if p.is_null() {
        return format!("error {errno}");
    }
    // SAFETY: non-null pointers from fi_strerror are NUL-terminated static strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub(crate) fn check(call: &'static str, ret: isize) -> Result<usize, FabricError> {
    if ret < 0 {
        let errno = (-ret) as i32;
        Err(FabricError::Call {
            call,
            errno,
            text: strerror(errno),
        })
    } else {
        Ok(ret as usize)
    }
}
