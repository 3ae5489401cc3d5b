//! Editing the namespaces file for S3's CreateBucket and DeleteBucket: a line added or
//! removed, then put in force as a SIGHUP would; on any refusal the file is as it was.
//!
//! A line CreateBucket adds ends with [`MADE_BY_S3`]; DeleteBucket removes only such
//! lines. The operator's namespaces (every other line) cannot be deleted through S3 by
//! anyone, whatever their key's scopes.

use std::path::Path;

use super::{check_name, Namespaces, NamespacesError};

/// The comment that ends a line CreateBucket added to the namespaces file: only such
/// namespaces may be removed by DeleteBucket.
pub const MADE_BY_S3: &str = "# made by S3 CreateBucket";

/// Why a namespace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Not a namespace name.
    #[error(transparent)]
    Name(#[from] rasa_openapi::key::BadNamespace),
    /// Namespaces are the operator's here, or the file could not be changed.
    #[error(transparent)]
    Refused(#[from] NamespacesError),
}

/// Why a namespace could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// There is no such namespace.
    #[error("no namespace {0:?}")]
    NotFound(String),
    /// It still holds values.
    #[error("namespace {0:?} holds values: delete them first")]
    NotEmpty(String),
    /// The namespace is the operator's (its line was not added by CreateBucket).
    #[error("namespace {0:?} is the operator's; it cannot be deleted through S3")]
    Operator(String),
    /// Namespaces are the operator's here, or the file could not be changed.
    #[error(transparent)]
    Refused(#[from] NamespacesError),
}

impl Namespaces {
    /// The namespaces file, which the gateway may edit ([`Namespaces::create`]).
    fn owned_file(&self) -> Result<&Path, NamespacesError> {
        match &self.file {
            Some((path, _)) => Ok(path),
            None => Err(NamespacesError::NoFile),
        }
    }

    /// Adds namespace `name` with `quota` to the namespaces file and puts it in force (as a
    /// SIGHUP would); `Ok(false)` when it exists already. On any refusal (no file, a bad
    /// name, quotas beyond `--memory`) the file is as it was.
    pub fn create(&self, name: &str, quota: u64) -> Result<bool, CreateError> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        if self.get(name).is_some() {
            return Ok(false);
        }
        let path = self.owned_file()?;
        check_name(name)?;
        let before = crate::credfile::read(path).map_err(NamespacesError::from)?;
        let sep = if before.is_empty() || before.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        let quota_text = match quota % (1 << 20) {
            0 => format!("{}MiB", quota >> 20),
            _ => quota.to_string(),
        };
        let after = format!("{before}{sep}{name} {quota_text} {MADE_BY_S3}\n");
        crate::credfile::rewrite(path, &after).map_err(NamespacesError::from)?;
        if let Err(e) = self.reload() {
            let _ = crate::credfile::rewrite(path, &before);
            return Err(e.into());
        }
        Ok(true)
    }

    /// Removes namespace `name`, which must hold no value and must have been made by
    /// [`Namespaces::create`] (its line ends with [`MADE_BY_S3`]), from the file and from
    /// force; the operator's namespaces are refused ([`RemoveError::Operator`]) and the
    /// file is left as it was.
    pub fn remove(&self, name: &str) -> Result<(), RemoveError> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let ns = self
            .current()
            .get(name)
            .cloned()
            .ok_or_else(|| RemoveError::NotFound(name.to_owned()))?;
        if !ns.objects.store().list("", None, 1).0.is_empty() {
            return Err(RemoveError::NotEmpty(name.to_owned()));
        }
        let path = self.owned_file()?;
        let before = crate::credfile::read(path).map_err(NamespacesError::from)?;
        let made_by_s3 = before.lines().any(|line| {
            let fields = line.split('#').next().unwrap_or_default();
            fields.split_whitespace().next() == Some(name) && line.trim_end().ends_with(MADE_BY_S3)
        });
        if !made_by_s3 {
            return Err(RemoveError::Operator(name.to_owned()));
        }
        let after = crate::credfile::without_name(&before, name, "namespace")
            .map_err(NamespacesError::from)?;
        crate::credfile::rewrite(path, &after).map_err(NamespacesError::from)?;
        if let Err(e) = self.reload() {
            let _ = crate::credfile::rewrite(path, &before);
            return Err(RemoveError::Refused(e));
        }
        Ok(())
    }
}
