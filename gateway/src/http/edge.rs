//! What every request passes once, around the router: the edge checks and error
//! documents ([`Edge`], a router layer, since it reads the matched route), and outside
//! the router as one concrete stack ([`Outer`]), the panic guard, request tracing and the
//! redaction of credentials in logs.
//!
//! Layers given to `Router::layer` wrap every route in a boxed service of its own, and
//! a request clones each box it passes (each box cloning the ones inside it), so the
//! layers that need nothing from routing sit outside it: measured on a 1 KiB GET, 70
//! allocations a request with all five inside the router.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::Response;
use rasa_openapi::{ProblemCode, PROBLEM_JSON};
use tower::ServiceBuilder;
use tower_http::catch_panic::{CatchPanic, CatchPanicLayer};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::sensitive_headers::{SetSensitiveRequestHeaders, SetSensitiveRequestHeadersLayer};
use tower_http::trace::{Trace, TraceLayer};

use super::{auth, error, limits, requests};

/// What answers a panic: an internal-error problem document.
type PanicAnswer = fn(Box<dyn std::any::Any + Send + 'static>) -> Response;

/// The layers every request passes outside routing: the panic guard, request tracing
/// and the redaction of credentials in logs.
pub type Outer<S> = SetSensitiveRequestHeaders<
    Trace<CatchPanic<S, PanicAnswer>, SharedClassifier<ServerErrorsAsFailures>>,
>;

/// `inner` inside the [`Outer`] layers.
pub(super) fn outer<S>(inner: S) -> Outer<S> {
    ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            header::PROXY_AUTHORIZATION,
            header::COOKIE,
        ]))
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::custom(panic_to_problem as PanicAnswer))
        .service(inner)
}

fn panic_to_problem(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let p = error::problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        ProblemCode::Internal,
        "internal error; the gateway's log has details",
    );
    error::problem_response(&p)
}

/// Whether `resp` is an error that is not a problem document yet.
fn wants_problem(resp: &Response) -> bool {
    let status = resp.status();
    let is_problem = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    (status.is_client_error() || status.is_server_error()) && !is_problem
}

/// Turns any error response that is not already a problem document (axum's 405, an
/// extractor's rejection, a body limit) into one, keeping its status and headers (such as
/// `Allow`) and using its text as the detail.
async fn problem_for_every_error(method: Method, uri: Uri, resp: Response) -> Response {
    let status = resp.status();
    let what = format!("{method} {}", uri.path());
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let code = match status {
        StatusCode::NOT_FOUND => ProblemCode::NoSuchRoute,
        StatusCode::METHOD_NOT_ALLOWED => ProblemCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ProblemCode::PayloadTooLarge,
        StatusCode::SERVICE_UNAVAILABLE => ProblemCode::Unavailable,
        s if s.is_server_error() => ProblemCode::Internal,
        _ => ProblemCode::InvalidRequest,
    };
    let detail = match parts.headers.get(header::ALLOW) {
        Some(allow) if status == StatusCode::METHOD_NOT_ALLOWED => format!(
            "{what}: method not allowed; allowed: {}",
            allow.to_str().unwrap_or_default()
        ),
        _ if text.is_empty() => format!("{what}: {}", status.canonical_reason().unwrap_or("error")),
        _ => text,
    };
    let fresh = error::problem_response(&error::problem(status, code, detail));
    let (fresh_parts, body) = fresh.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        fresh_parts.headers[header::CONTENT_TYPE].clone(),
    );
    Response::from_parts(parts, body)
}

/// What the outermost middleware checks before a request goes further.
#[derive(Clone)]
pub(super) struct EdgeChecks {
    pub(super) max_header_size: usize,
    /// `Some` when the gateway is open (no token file): the names it answers to.
    pub(super) open_hosts: Option<Arc<crate::browser::HostPolicy>>,
}

impl<S> tower::Layer<S> for EdgeChecks {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            checks: self.clone(),
            route: None,
            inner,
        }
    }
}

impl EdgeChecks {
    /// [`Edge`] around a route reached without the router: `route` names it in metrics.
    pub(super) fn around<S>(&self, route: &'static str, inner: S) -> Edge<S> {
        Edge {
            checks: self.clone(),
            route: Some(route),
            inner,
        }
    }
}

/// The outermost layer of every route: refuses request heads over `--max-header-size`
/// with `431` and, when open, what only a web page would send
/// ([`auth::refuse_web_page`]); makes every other error a problem document
/// ([`problem_for_every_error`]); marks stored values as such for browsers; and counts
/// requests by route, method and status, and their latency. A named future: no
/// allocation a request but for an error to rewrite.
#[derive(Clone)]
pub struct Edge<S> {
    checks: EdgeChecks,
    /// The route's pattern when the router did not match it (its `MatchedPath` otherwise).
    route: Option<&'static str>,
    inner: S,
}

impl<S> tower::Service<Request> for Edge<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let seen = Seen {
            start: Instant::now(),
            route: match self.route {
                Some(fixed) => Some(Route::Fixed(fixed)),
                None => req
                    .extensions()
                    .get::<MatchedPath>()
                    .cloned()
                    .map(Route::Matched),
            },
            method: req.method().clone(),
            // For an error's detail only: cloning a URI shares its bytes.
            uri: req.uri().clone(),
        };
        let checks = &self.checks;
        let refused = limits::refuse_oversized_head(&req, checks.max_header_size).or_else(|| {
            checks
                .open_hosts
                .as_ref()
                .and_then(|hosts| auth::refuse_web_page(hosts, &req))
        });
        let stage = match refused {
            Some(refusal) => Stage::Refused {
                refusal: Some(refusal),
            },
            None => Stage::Serving {
                serving: self.inner.call(req),
            },
        };
        EdgeFuture { seen, stage }
    }
}

/// The route a request took, for its metrics.
enum Route {
    /// As the router matched it.
    Matched(MatchedPath),
    /// Reached without the router.
    Fixed(&'static str),
}

impl Route {
    /// The route's pattern, as metrics name it.
    fn name(&self) -> &str {
        match self {
            Route::Matched(m) => m.as_str(),
            Route::Fixed(f) => f,
        }
    }
}

/// What the edge noted of a request on its way in.
struct Seen {
    start: Instant,
    route: Option<Route>,
    method: Method,
    uri: Uri,
}

impl Seen {
    /// The response as it leaves: marked when it is a stored value, and counted.
    fn leave(&self, refused: bool, mut resp: Response) -> Response {
        if !refused && self.uri.path().starts_with("/v1/objects/") {
            crate::browser::stored_value_headers(resp.headers_mut());
        }
        if let Some(Route::Fixed(_)) = self.route {
            resp = as_routed(&self.method, resp);
        }
        requests::count(
            self.route.as_ref().map(Route::name),
            &self.method,
            resp.status(),
            self.start.elapsed(),
        );
        resp
    }
}

/// What the router does to every answer of a route it matched, done for a route reached
/// without it: a `Content-Length` from a body of known size, and no body for `HEAD`.
fn as_routed(method: &Method, mut resp: Response) -> Response {
    use http_body::Body as _;
    if !resp.headers().contains_key(header::CONTENT_LENGTH) {
        if let Some(n) = resp.body().size_hint().exact() {
            resp.headers_mut()
                .insert(header::CONTENT_LENGTH, header::HeaderValue::from(n));
        }
    }
    if *method == Method::HEAD {
        *resp.body_mut() = axum::body::Body::empty();
    }
    resp
}

pin_project_lite::pin_project! {
    /// A request passing [`Edge`].
    pub struct EdgeFuture<F> {
        seen: Seen,
        #[pin]
        stage: Stage<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StageProj]
    enum Stage<F> {
        Refused { refusal: Option<Response> },
        Serving { #[pin] serving: F },
        Rewriting { rewriting: Pin<Box<dyn Future<Output = Response> + Send>> },
    }
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let resp = match this.stage.as_mut().project() {
                StageProj::Refused { refusal } => {
                    let refusal = refusal
                        .take()
                        .expect("an edge future polled after it ended");
                    return Poll::Ready(Ok(this.seen.leave(true, refusal)));
                }
                StageProj::Serving { serving } => match ready!(serving.poll(cx)) {
                    Ok(resp) => resp,
                },
                StageProj::Rewriting { rewriting } => {
                    let resp = ready!(rewriting.as_mut().poll(cx));
                    return Poll::Ready(Ok(this.seen.leave(false, resp)));
                }
            };
            if !wants_problem(&resp) {
                return Poll::Ready(Ok(this.seen.leave(false, resp)));
            }
            let rewriting = Box::pin(problem_for_every_error(
                this.seen.method.clone(),
                this.seen.uri.clone(),
                resp,
            ));
            this.stage.set(Stage::Rewriting { rewriting });
        }
    }
}
