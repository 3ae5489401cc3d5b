//! What a credential (a bearer token or an S3 key) may do, and where: scopes, each for
//! every namespace or for one.
//!
//! Written as credentials files and `--scopes` write them, comma-separated:
//!
//! ```text
//! read,write              read and write in every namespace (as before namespaces)
//! admin                   the operator: everything, everywhere, /metrics and /v1/stats
//! train:read,train:write        read and write in namespace `train` only
//! train:admin,web:read       read and write in `train`, read in `web`
//! ```
//!
//! A namespace's `admin` is its `read` and `write`; only a bare `admin` reaches the
//! gateway-wide operator routes. `buckets` (bare only) lets an S3 key create and delete
//! buckets (namespaces, with `--s3-create-buckets`); `admin` may too.

use std::fmt;

/// What a credential may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// GET/HEAD objects, list, descriptors, the fabric address.
    Read,
    /// PUT and DELETE objects.
    Write,
    /// `/metrics` (unless public) and operator routes; implies `read`, `write` and
    /// `buckets`.
    Admin,
    /// S3 CreateBucket of a new bucket and DeleteBucket (`--s3-create-buckets`): making
    /// and removing namespaces. Gateway-wide only.
    Buckets,
    /// `/metrics` only: what a Prometheus scraper is given (no value, no operator route).
    /// Gateway-wide only.
    Metrics,
}

impl Scope {
    /// The scope's name in token files and `WWW-Authenticate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
            Self::Buckets => "buckets",
            Self::Metrics => "metrics",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scope or grant that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// Not one of the scopes.
    #[error("unknown scope '{0}' (scopes are read, write, admin, buckets, metrics)")]
    UnknownScope(String),
    /// `buckets` given for one namespace.
    #[error(
        "'{0}': buckets is a gateway-wide scope (it makes and removes namespaces); write it alone"
    )]
    BucketsInNamespace(String),
    /// No scope at all.
    #[error("at least one scope is needed")]
    None,
    /// A namespace name that is not one.
    #[error(transparent)]
    Namespace(#[from] rasa_openapi::key::BadNamespace),
}

impl std::str::FromStr for Scope {
    type Err = GrantError;
    fn from_str(s: &str) -> Result<Self, GrantError> {
        match s {
            "read" => Ok(Self::Read),
            "write" => Ok(Self::Write),
            "admin" => Ok(Self::Admin),
            "buckets" => Ok(Self::Buckets),
            "metrics" => Ok(Self::Metrics),
            other => Err(GrantError::UnknownScope(other.to_owned())),
        }
    }
}

/// One scope, for every namespace (`namespace: None`) or for one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    /// The namespace it is for; `None`: every namespace.
    pub namespace: Option<String>,
    /// The scope.
    pub scope: Scope,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}:{}", self.scope),
            None => f.write_str(self.scope.as_str()),
        }
    }
}

impl std::str::FromStr for Grant {
    type Err = GrantError;
    fn from_str(s: &str) -> Result<Self, GrantError> {
        let s = s.trim();
        match s.rsplit_once(':') {
            Some((ns, scope)) => {
                crate::key::check_namespace(ns)?;
                let scope = scope.parse()?;
                if scope == Scope::Buckets {
                    return Err(GrantError::BucketsInNamespace(s.to_owned()));
                }
                Ok(Self {
                    namespace: Some(ns.to_owned()),
                    scope,
                })
            }
            None => Ok(Self {
                namespace: None,
                scope: s.parse()?,
            }),
        }
    }
}

/// A credential's grants, sorted, without repeats (at least one when parsed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants(pub Vec<Grant>);

impl Grants {
    /// Every-namespace grants of `scopes` (what a credential without namespaces holds).
    pub fn everywhere(scopes: &[Scope]) -> Self {
        let mut g: Vec<Grant> = scopes
            .iter()
            .map(|&scope| Grant {
                namespace: None,
                scope,
            })
            .collect();
        g.sort();
        g.dedup();
        Self(g)
    }

    /// Whether these grants allow `scope` gateway-wide: a bare grant of it, or a bare
    /// `admin` (which may do everything).
    pub fn allows(&self, scope: Scope) -> bool {
        self.0
            .iter()
            .any(|g| g.namespace.is_none() && (g.scope == scope || g.scope == Scope::Admin))
    }

    /// Whether these grants allow `scope` in namespace `ns`: gateway-wide, or granted
    /// there (a namespace's `admin` is its `read` and `write`, never the operator's routes).
    pub fn allows_in(&self, ns: &str, scope: Scope) -> bool {
        self.allows(scope)
            || self.0.iter().any(|g| {
                g.namespace.as_deref() == Some(ns) && (g.scope == scope || g.scope == Scope::Admin)
            })
    }

    /// Whether these grants allow `scope` in at least one namespace (routes that serve
    /// every namespace's readers, such as the fabric address).
    pub fn allows_somewhere(&self, scope: Scope) -> bool {
        self.0
            .iter()
            .any(|g| g.scope == scope || g.scope == Scope::Admin)
    }

    /// Whether there are no grants.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Grants {
    type Err = GrantError;
    /// Parses `read,train:write` (at least one grant; repeats folded).
    fn from_str(s: &str) -> Result<Self, GrantError> {
        let mut g = s
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<Grant>, GrantError>>()?;
        g.sort();
        g.dedup();
        if g.is_empty() {
            return Err(GrantError::None);
        }
        Ok(Self(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_print_and_decide() {
        let g: Grants = "train:write,read,train:read".parse().unwrap();
        assert_eq!(g.to_string(), "read,train:read,train:write");
        assert!(g.allows(Scope::Read) && !g.allows(Scope::Write));
        assert!(g.allows_in("train", Scope::Write) && !g.allows_in("web", Scope::Write));
        assert!(g.allows_in("web", Scope::Read));
        let ns_admin: Grants = "train:admin".parse().unwrap();
        assert!(
            ns_admin.allows_in("train", Scope::Read) && ns_admin.allows_in("train", Scope::Write)
        );
        assert!(!ns_admin.allows(Scope::Admin) && !ns_admin.allows_in("web", Scope::Read));
        assert!(ns_admin.allows_somewhere(Scope::Read));
        let op: Grants = "admin".parse().unwrap();
        assert!(op.allows(Scope::Admin) && op.allows_in("any", Scope::Write));
        let maker: Grants = "read,write,buckets".parse().unwrap();
        assert!(maker.allows(Scope::Buckets) && !maker.allows(Scope::Admin));
        assert!(op.allows(Scope::Buckets), "admin may make buckets");
        let writer: Grants = "read,write".parse().unwrap();
        assert!(!writer.allows(Scope::Buckets), "write alone may not");
        for bad in [
            "",
            "fly",
            "train:fly",
            "Bad Name:read",
            ":read",
            "train:buckets",
        ] {
            assert!(bad.parse::<Grants>().is_err(), "{bad}");
        }
    }
}
