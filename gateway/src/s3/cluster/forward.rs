//! The S3 listener's side of keyed requests for keys another member owns: the key a
//! request names (path or virtual-host style), the request passed on as it came — the
//! caller's signature intact, so `Host` stays and the body keeps its length — through
//! [`crate::cluster::Peers::forward`], and each outcome as S3 answers it (`503 SlowDown`
//! with `Retry-After` for a write no owner took).

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{header, HeaderValue, Method, StatusCode};
use rasa_openapi::HOP_HEADER;

use super::super::edge::xml_error;
use super::super::S3Front;
use crate::cluster::{Forwarded, Outgoing, Route, Wire};

/// A request this member serves: the request, and the namespace (`None`: the default
/// one, a bucket of `--s3-bucket`) and key it reads as the key's owner (counted towards
/// the key's demand, `--cluster-hot-reads`, when answered with the value), if it does.
pub(crate) type Here = (Request, Option<(Option<String>, String)>);

/// `req` to serve here, or the answer of the key's owner it was forwarded to (`domains`:
/// the `--s3-domain` names, for virtual-host-style buckets).
pub(crate) async fn to_owner(
    front: &S3Front,
    domains: &[String],
    req: Request,
) -> Result<Here, Response> {
    let Some(wide) = front.wide.as_ref() else {
        return Ok((req, None));
    };
    let Some((bucket, key)) = bucket_and_key(&req, domains) else {
        return Ok((req, None)); // a bucket's request: listings and DeleteObjects span members
    };
    let Ok(b) = front.bucket(&bucket) else {
        return Ok((req, None)); // refused here, by the handler
    };
    // A bucket of --s3-bucket is in the default namespace; a namespace's is its own.
    let ns = matches!(b, std::borrow::Cow::Owned(_)).then(|| bucket.clone());
    let Some(rasa_key) = b.rasa_key(&key) else {
        return Ok((req, None));
    };
    let write = !matches!(*req.method(), Method::GET | Method::HEAD);
    let hopped = req.headers().contains_key(HOP_HEADER);
    let route = wide.peers.route(&rasa_key, Wire::S3, hopped, write);
    tracing::debug!(key = rasa_key, hopped, write, ?route, "cluster route (S3)");
    let owner = match route {
        Route::Here => return Ok((req, (!write).then_some((ns, rasa_key)))),
        Route::Fenced(why) => return Err(slow_down(&why, 1)),
        Route::Redirect(owner) | Route::Forward(owner) => owner,
    };
    let (parts, body) = req.into_parts();
    let mut headers = parts.headers.clone();
    // `Host` stays as the caller sent it: the signature covers it (over HTTP/2 the caller
    // sent it as the `:authority`).
    if let (false, Some(a)) = (headers.contains_key(header::HOST), parts.uri.authority()) {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            headers.insert(header::HOST, v);
        }
    }
    let out = Outgoing {
        method: parts.method.clone(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned(),
        headers,
        // With its length, when the caller said it: S3 wants `Content-Length`.
        body: write.then(|| reqwest::Body::wrap(Sized(std::sync::Mutex::new(body)))),
    };
    match wide.peers.forward(Wire::S3, &rasa_key, &owner, out).await {
        Forwarded::Answer(resp) => Err(resp),
        Forwarded::ServeHere => Ok((Request::from_parts(parts, Body::empty()), None)),
        Forwarded::Unknown(why) => Err(xml_error(
            StatusCode::GATEWAY_TIMEOUT,
            "GatewayTimeout",
            &why,
        )),
        Forwarded::Refused { why, retry_after } => Err(slow_down(&why, retry_after)),
    }
}

/// `503 SlowDown` saying `why`, to be retried after `retry_after` seconds.
fn slow_down(why: &str, retry_after: u64) -> Response {
    let mut r = xml_error(StatusCode::SERVICE_UNAVAILABLE, "SlowDown", why);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    r
}

/// A request body passed on with its size hint (a stream alone would go out chunked).
struct Sized(std::sync::Mutex<Body>);

impl http_body::Body for Sized {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let body = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        std::pin::Pin::new(body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.lock().map(|b| b.is_end_stream()).unwrap_or(false)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.lock().map(|b| b.size_hint()).unwrap_or_default()
    }
}

/// The bucket and (percent-decoded) key a request names: virtual-host style when its
/// `Host` is a subdomain of one of `domains`, else path style; `None` for a request without
/// a key (the service's or a bucket's).
fn bucket_and_key(req: &Request, domains: &[String]) -> Option<(String, String)> {
    let path = req.uri().path();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .map(|h| match h.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => h,
        });
    let virtual_bucket = host.and_then(|h| {
        domains.iter().find_map(|d| {
            let b = h.strip_suffix(d.as_str())?.strip_suffix('.')?;
            (!b.is_empty()).then_some(b)
        })
    });
    let (bucket, key) = match virtual_bucket {
        Some(b) => (b, path.strip_prefix('/').unwrap_or(path)),
        None => path.strip_prefix('/')?.split_once('/')?,
    };
    if key.is_empty() {
        return None;
    }
    let key = percent_encoding::percent_decode_str(key)
        .decode_utf8()
        .ok()?
        .into_owned();
    Some((bucket.to_owned(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: &str, path: &str) -> Request {
        Request::builder()
            .uri(path)
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap()
    }

    #[test]
    fn bucket_and_key_in_both_styles() {
        let d = vec!["s3.local".to_owned()];
        let bk = |h: &str, p: &str| bucket_and_key(&req(h, p), &d);
        assert_eq!(
            bk("127.0.0.1:9000", "/data/a/b%20c?x=1"),
            Some(("data".into(), "a/b c".into()))
        );
        assert_eq!(bk("127.0.0.1:9000", "/data/"), None);
        assert_eq!(bk("127.0.0.1:9000", "/data"), None);
        assert_eq!(bk("127.0.0.1:9000", "/"), None);
        assert_eq!(
            bk("data.s3.local:9000", "/k%2Fx"),
            Some(("data".into(), "k/x".into()))
        );
        assert_eq!(bk("data.s3.local", "/"), None);
        assert_eq!(bk("s3.local", "/data/k"), Some(("data".into(), "k".into())));
    }
}
