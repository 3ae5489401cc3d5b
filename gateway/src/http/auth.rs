//! Authorisation: which token a route needs, checked before its handler runs.
//!
//! Every route is declared with an [`Access`] in `route_specs`; the router is
//! built from that list, so a route cannot exist without one. Without a token file every
//! route is open. With one, a request to a protected route needs
//! `Authorization: Bearer <secret>`:
//!
//! - missing or unknown token: `401`, `WWW-Authenticate: Bearer realm="rasa"` (with
//!   `error="invalid_token"` when a token was sent but is not known);
//! - known token without the scope: `403`, `WWW-Authenticate` with
//!   `error="insufficient_scope"` and the scope needed (RFC 6750 §3.1).
//!
//! The secret is never logged: the header is marked sensitive for the trace layer, and
//! messages name the token by its name only.

use crate::catalog;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::tokens::{Scope, TokenFile};

/// What a route demands of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health, readiness, the OpenAPI document, the docs).
    Public,
    /// Any known token, whatever its scopes (routes that only explain a mistake).
    AnyToken,
    /// A token with this scope.
    Scope(Scope),
}

impl Access {
    /// The scope a token needs, when one is needed.
    pub fn scope(self) -> Option<Scope> {
        match self {
            Self::Scope(s) => Some(s),
            _ => None,
        }
    }
}

/// What the guard of one route knows.
/// What an authorised request's caller may do beyond the route's own scope, for the
/// handlers that answer differently (a request extension; absent when the gateway is open,
/// where everyone may read).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    /// Whether the caller may read: only then does an answer carry a remote key.
    pub reads: bool,
}

impl Caller {
    /// Whether the caller of `req` may read (yes on an open gateway).
    pub(crate) fn reads(req: &http::request::Parts) -> bool {
        req.extensions.get::<Caller>().is_none_or(|c| c.reads)
    }
}

#[derive(Clone)]
pub(crate) struct Guard {
    pub tokens: Arc<TokenFile>,
    pub access: Access,
    /// Whether the route acts in a namespace: then the scope is needed there; otherwise
    /// `admin` is needed gateway-wide and other scopes in some namespace.
    pub namespaced: bool,
}

/// The realm named in `WWW-Authenticate`.
const REALM: &str = "rasa";

/// Lets the request through when its token satisfies the route's [`Access`].
pub(crate) async fn authorize(
    State(guard): State<Guard>,
    mut req: Request,
    next: Next,
) -> Response {
    match admit(&guard, &mut req) {
        None => next.run(req).await,
        Some(refusal) => refusal,
    }
}

/// Marks `req` with its [`Caller`] when its token satisfies `guard`; the refusal
/// otherwise.
pub(crate) fn admit(guard: &Guard, req: &mut Request) -> Option<Response> {
    if guard.access == Access::Public {
        return None;
    }
    let what = || {
        let uri = req
            .extensions()
            .get::<axum::extract::OriginalUri>()
            .map_or(req.uri(), |o| &o.0);
        format!("{} {}", req.method(), uri.path())
    };
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        catalog::HTTP_AUTH_FAILURES
            .counter_by(&[("reason", "missing")])
            .increment(1);
        let needs = match guard.access.scope() {
            Some(s) => format!("a bearer token with scope '{s}'"),
            None => "a bearer token".to_owned(),
        };
        return Some(
            ApiError::Unauthorized {
                detail: format!("{} needs {needs} (Authorization: Bearer …)", what()),
                challenge: format!("Bearer realm=\"{REALM}\""),
            }
            .into_response(),
        );
    };
    let tokens = guard.tokens.current();
    let token = bearer_secret(value).and_then(|secret| tokens.authenticate(secret));
    let Some(token) = token else {
        catalog::HTTP_AUTH_FAILURES
            .counter_by(&[("reason", "invalid")])
            .increment(1);
        tracing::info!(request = %what(), "refused an unknown or malformed bearer token");
        return Some(
            ApiError::Unauthorized {
                detail: format!(
                    "{}: the bearer token is malformed or not known to this gateway",
                    what()
                ),
                challenge: format!("Bearer realm=\"{REALM}\", error=\"invalid_token\""),
            }
            .into_response(),
        );
    };
    let ns = super::NamespaceName::of(req.extensions());
    if let Some(scope) = guard.access.scope() {
        let allowed = match (guard.namespaced, scope) {
            (true, _) => token.scopes.allows_in(ns, scope),
            (false, Scope::Admin) => token.allows(scope),
            (false, _) => token.scopes.allows_somewhere(scope),
        };
        if !allowed {
            catalog::HTTP_AUTH_FAILURES
                .counter_by(&[("reason", "scope")])
                .increment(1);
            tracing::info!(request = %what(), token = %token.name, needs = %scope, "refused: scope too small");
            let place = match guard.namespaced {
                true => format!(" in namespace '{ns}'"),
                false if scope == Scope::Admin => " gateway-wide".to_owned(),
                false => String::new(),
            };
            return Some(
                ApiError::Forbidden {
                    detail: format!(
                        "{}: token '{}' lacks scope '{scope}'{place} (it has {})",
                        what(),
                        token.name,
                        token.scopes
                    ),
                    challenge: format!(
                        "Bearer realm=\"{REALM}\", error=\"insufficient_scope\", scope=\"{scope}\""
                    ),
                }
                .into_response(),
            );
        }
    }
    tracing::debug!(token = %token.name, "authorised");
    let caller = Caller {
        reads: token.scopes.allows_in(ns, Scope::Read),
    };
    req.extensions_mut().insert(caller);
    None
}

/// The secret in `Bearer <secret>` (scheme case-insensitive, RFC 9110 §11.1).
fn bearer_secret(value: &HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    let (scheme, secret) = value.split_once(' ')?;
    let secret = secret.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !secret.is_empty()).then_some(secret)
}

/// In open mode (no token file), the refusal of what only a web page would send: a
/// `Host` that does not name the gateway (DNS rebinding) and state-changing requests from
/// another site (see [`crate::browser`]); `403 forbidden`.
pub(crate) fn refuse_web_page(
    policy: &crate::browser::HostPolicy,
    req: &Request,
) -> Option<Response> {
    let why = policy.check(req.method(), req.uri(), req.headers()).err()?;
    catalog::HTTP_REQUESTS_REFUSED
        .counter_by(&[(
            "reason",
            match why {
                crate::browser::Refusal::Host(_) => "foreign_host",
                crate::browser::Refusal::Origin(_) => "foreign_origin",
            },
        )])
        .increment(1);
    Some(super::error::problem_response(&super::error::problem(
        StatusCode::FORBIDDEN,
        rasa_openapi::ProblemCode::Forbidden,
        why.to_string(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive_and_needs_a_secret() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert_eq!(bearer_secret(&v("Bearer abc")), Some("abc"));
        assert_eq!(bearer_secret(&v("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_secret(&v("Basic abc")), None);
        assert_eq!(bearer_secret(&v("Bearer ")), None);
        assert_eq!(bearer_secret(&v("Bearer")), None);
    }
}
