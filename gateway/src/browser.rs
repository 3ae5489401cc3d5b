//! What web pages may do to an open gateway (one without tokens or S3 credentials).
//!
//! Two attacks need no credentials at all, only a browser that can reach the gateway:
//!
//! - **Cross-site requests.** A page on another site can send a "simple" request (a
//!   `POST` with `Content-Type: text/plain`, no preflight) to `http://127.0.0.1:8080`. Such
//!   requests carry the page's `Origin`; a state-changing request (`PUT`, `POST`,
//!   `DELETE`, `PATCH`) whose `Origin` is not the gateway itself, or that the browser marks
//!   `Sec-Fetch-Site: cross-site`/`same-site`, is refused.
//! - **DNS rebinding.** A page on `evil.example` whose name then resolves to `127.0.0.1`
//!   reads and writes the gateway as its own origin; the only trace is `Host:
//!   evil.example`. So `Host` must name the gateway: an IP literal, a name without a dot
//!   (`localhost`, `rasa`: resolved only locally, never through an attacker's zone), the
//!   machine's host name, a host of `--advertise-url`, an `--allowed-host`, or (on the S3
//!   listener) an `--s3-domain` or a bucket under one.
//!
//! With credentials neither applies: the page has no token to send.
//!
//! Stored values are served, on both listeners, with `X-Content-Type-Options: nosniff`
//! and a sandboxing `Content-Security-Policy` ([`stored_value_headers`]): an uploaded
//! `text/html` value shares its origin with `/ui` and `/docs` and must not run there.

use http::{header, HeaderMap, Method, Uri};

/// The host names an open gateway answers to.
#[derive(Clone, Debug, Default)]
pub struct HostPolicy {
    /// Exact names, lowercase, without port.
    names: Vec<String>,
    /// Domains whose subdomains are accepted too (virtual-hosted S3 buckets).
    domains: Vec<String>,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` names something else (DNS rebinding).
    Host(String),
    /// A state-changing request from another site.
    Origin(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Host(h) => write!(
                f,
                "Host '{h}' is not a name of this gateway (it has no credentials configured, so it answers only to its IP addresses, localhost, its host name and --allowed-host names)"
            ),
            Self::Origin(o) => write!(
                f,
                "a state-changing request from the web page at '{o}', another site: refused because this gateway has no credentials configured"
            ),
        }
    }
}

/// The host part of `host[:port]` or `[v6]:port`, as written.
fn host_part(authority: &str) -> &str {
    let a = authority.trim();
    let host = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        a.rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(a, |(h, _)| h)
    };
    host.trim_end_matches('.')
}

/// [`host_part`], lowercase.
fn hostname(authority: &str) -> String {
    host_part(authority).to_ascii_lowercase()
}

/// Whether `host` ends with `.suffix`, ignoring ASCII case.
fn has_suffix(host: &str, suffix: &str) -> bool {
    host.len() > suffix.len()
        && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

/// `host` and port of `authority` (the port defaulted from `scheme`).
fn host_and_port(authority: &str, scheme: &str) -> (String, u16) {
    let default = if scheme == "https" { 443 } else { 80 };
    let port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").and_then(|(_, p)| p.parse().ok()),
        None => authority.rsplit_once(':').and_then(|(_, p)| p.parse().ok()),
    }
    .unwrap_or(default);
    (hostname(authority), port)
}

impl HostPolicy {
    /// Accepts `names` (host names or `host:port`, the port ignored) and the subdomains of
    /// `domains`, besides IP literals, `localhost` and this machine's host name.
    pub fn new(names: &[String], domains: &[String]) -> Self {
        let mut all: Vec<String> = names.iter().map(|n| hostname(n)).collect();
        all.push("localhost".into());
        if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            all.push(h.trim().to_ascii_lowercase());
        }
        all.retain(|n| !n.is_empty());
        all.sort();
        all.dedup();
        Self {
            names: all,
            domains: domains.iter().map(|d| hostname(d)).collect(),
        }
    }

    /// Whether `Host` (or HTTP/2's `:authority`) names this gateway.
    pub fn allows_host(&self, authority: &str) -> bool {
        // On every request of an open gateway: no allocation.
        let host = host_part(authority);
        // A name without a dot (`rasa`, `gw1`: a compose service, a LAN host) resolves
        // only through local files and search domains, never an attacker's zone.
        !host.contains('.')
            || host.parse::<std::net::IpAddr>().is_ok()
            || has_suffix(host, "localhost")
            || self.names.iter().any(|n| n.eq_ignore_ascii_case(host))
            || self
                .domains
                .iter()
                .any(|d| d.eq_ignore_ascii_case(host) || has_suffix(host, d))
    }

    /// Checks a request to an open gateway: its `Host`, and for state-changing methods its
    /// `Origin` and `Sec-Fetch-Site`.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| uri.authority().map(|a| a.as_str()));
        // HTTP/1.0 without Host: no browser sends that.
        if let Some(host) = host {
            if !self.allows_host(host) {
                return Err(Refusal::Host(host.to_owned()));
            }
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Ok(());
        }
        if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
            if site == "cross-site" || site == "same-site" {
                let origin = headers
                    .get(header::ORIGIN)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(site);
                return Err(Refusal::Origin(origin.to_owned()));
            }
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(()); // not a browser's cross-origin request
        };
        let origin = origin.to_str().unwrap_or("null");
        let same = origin.split_once("://").is_some_and(|(scheme, authority)| {
            host.is_some_and(|h| host_and_port(authority, scheme) == host_and_port(h, scheme))
        });
        if same {
            Ok(())
        } else {
            Err(Refusal::Origin(origin.to_owned()))
        }
    }
}

/// Headers that keep a stored value inert in a browser, whatever `Content-Type` its
/// uploader gave it: it is served on the same origin as `/ui` and `/docs`, so an
/// `text/html` value must not run scripts there (`sandbox` gives it an opaque origin) or be
/// sniffed into something executable.
pub fn stored_value_headers(h: &mut HeaderMap) {
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static(STORED_VALUE_CSP),
    );
}

/// The `Content-Security-Policy` of stored values (native and S3 listeners).
pub const STORED_VALUE_CSP: &str = "sandbox; default-src 'none'; frame-ancestors 'none'";

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, headers: &[(&str, &str)]) -> (Method, Uri, HeaderMap) {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        (method, Uri::from_static("/v1/objects/k"), h)
    }

    #[test]
    fn hosts_an_open_gateway_answers_to() {
        let p = HostPolicy::new(&["cache.internal:8080".into()], &["s3.local".into()]);
        for ok in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.0.0.5",
            "localhost:8080",
            "app.localhost",
            "cache.internal",
            "CACHE.internal:9",
            "bucket.s3.local:9000",
            "s3.local",
            "rasa:8080",
        ] {
            assert!(p.allows_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
        ] {
            assert!(!p.allows_host(bad), "{bad}");
        }
    }

    #[test]
    fn cross_site_writes_are_refused_same_origin_ones_are_not() {
        let p = HostPolicy::new(&[], &[]);
        let host = ("host", "127.0.0.1:8080");
        let check = |m, h: &[(&str, &str)]| {
            let (m, u, h) = req(m, h);
            p.check(&m, &u, &h)
        };
        assert!(
            check(Method::POST, &[host]).is_ok(),
            "no Origin: not a browser"
        );
        assert!(check(Method::PUT, &[host, ("origin", "http://127.0.0.1:8080")]).is_ok());
        assert!(check(Method::GET, &[host, ("origin", "https://evil.example")]).is_ok());
        for bad in [
            vec![host, ("origin", "https://evil.example")],
            vec![host, ("origin", "http://127.0.0.1:9999")],
            vec![host, ("origin", "null")],
            vec![host, ("sec-fetch-site", "cross-site")],
        ] {
            assert!(
                matches!(check(Method::POST, &bad), Err(Refusal::Origin(_))),
                "{bad:?}"
            );
            assert!(
                matches!(check(Method::DELETE, &bad), Err(Refusal::Origin(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            check(Method::GET, &[("host", "evil.example:8080")]),
            Err(Refusal::Host(_))
        ));
    }
}
