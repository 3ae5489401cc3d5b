//! The HTTP API: one file per resource, one router shared by the binary and the tests.
//!
//! | file | routes |
//! | --- | --- |
//! | [`objects`] | `PUT/GET/HEAD/DELETE /v1/objects/{key}`, `GET /v1/objects` |
//! | [`descriptors`] | `GET /v1/descriptors/{key}`, `POST /v1/descriptors` |
//! | [`fabric`] | `GET /v1/fabric` |
//! | [`cluster`] | `GET /v1/cluster` |
//! | [`stats`] | `GET /v1/stats` (the status page's figures) |
//! | [`ui`] | `GET /ui` (the status page) |
//! | [`ops`] | `/healthz`, `/readyz`, `/metrics`, `/openapi.json`, `/docs` |
//!
//! In a cluster, [`forward`] sends requests for keys another member owns to that member.
//!
//! Every route is declared once, with the [`auth::Access`] it demands, in [`routes`];
//! the router, the authorisation matrix test and the OpenAPI security requirements are
//! all derived from that list.
//!
//! Every error leaves as `application/problem+json` ([`error`]); responses produced below
//! the handlers (unknown route, wrong method, rejected extractor, panic) are turned into
//! problem documents by one middleware, so no plain-text error escapes.

pub mod auth;
pub mod batch;
pub mod cluster;
pub mod descriptors;
pub mod doc;
mod edge;
pub mod error;
pub mod fabric;
mod fanout;
pub mod forward;
mod hot;
pub mod limits;
pub mod objects;
pub mod ops;
pub mod passthrough;
mod preconditions;
mod replica;
mod requests;
mod resolve;
mod routes;
pub mod stats;
mod test_hooks;
pub mod ui;

use std::sync::Arc;

use crate::figures::Recorders;
use axum::extract::Request;
use axum::http::Method;
use axum::http::{StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rasa_openapi::ProblemCode;
use tower::ServiceBuilder;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::objects::namespaces::{Namespaces, DEFAULT as DEFAULT_NAMESPACE};
use crate::slots::Slots;
use crate::store::Store;
use crate::tokens::TokenFile;
pub use auth::Access;
pub use error::ApiError;
pub use hot::App;
use routes::{effective, route_specs};
pub use routes::{route_table, RouteInfo};

/// Settings the HTTP layer needs beyond the store's.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// What both fronts enforce (the S3 listener is given the same value).
    pub limits: crate::front::Limits,
    /// Most keys in one batch request (descriptors, puts, deletes).
    pub max_batch_keys: usize,
    /// Most bytes of values in one put batch.
    pub max_batch_size: u64,
    /// Serve the `/v1/_test/*` routes (fast-path test suite only).
    pub test_hooks: bool,
    /// The accepted bearer tokens; `None` serves every route openly.
    pub tokens: Option<Arc<TokenFile>>,
    /// Serve `/metrics` without a token even when tokens are configured.
    pub public_metrics: bool,
    /// Memory for gathering bodies sent without `Content-Length`, all uploads together.
    pub chunked_upload_memory: u64,
    /// The host names the gateway answers to when open (no tokens; see [`crate::browser`]).
    pub hosts: Arc<crate::browser::HostPolicy>,
}

impl HttpConfig {
    /// Open (no tokens), with the default limits, for `max_object_size` and
    /// `max_batch_keys`.
    pub fn new(max_object_size: u64, max_batch_keys: usize) -> Self {
        Self {
            limits: crate::front::Limits::new(max_object_size),
            max_batch_keys,
            max_batch_size: 256 << 20,
            test_hooks: false,
            tokens: None,
            public_metrics: false,
            chunked_upload_memory: 256 << 20,
            hosts: Arc::new(crate::browser::HostPolicy::new(&[], &[])),
        }
    }
}

/// What every handler can reach: one shared [`Shared`], so that handing it to a request
/// (axum clones the state for every handler call and layer) costs one reference count, not
/// one per field. Built whole ([`AppState::build`]) and never changed after: reads go
/// through `Deref`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What an [`AppState`] is built from beyond its object service and limits (each absent
/// by default: a single gateway, one namespace, no metrics recorder).
#[derive(Default)]
pub struct Wiring {
    /// Every namespace, the default one included (`None`: the default one alone).
    pub namespaces: Option<Arc<Namespaces>>,
    /// Renders `/metrics` and keeps the figures `/v1/stats` reads.
    pub metrics: Option<Recorders>,
    /// The way to the other members, in a cluster.
    pub peers: Option<Arc<crate::cluster::Peers>>,
}

/// The fields of [`AppState`].
pub struct Shared {
    /// The object service of the default namespace: the versions, and the origin behind
    /// them.
    pub objects: Arc<crate::objects::Objects>,
    /// Every namespace (`/v1/ns/{ns}/…`), the default one included.
    pub namespaces: Arc<Namespaces>,
    /// HTTP limits.
    pub config: Arc<HttpConfig>,
    /// Renders `/metrics` and keeps the figures `/v1/stats` reads; `None` when no recorder is installed (then `/metrics` is empty).
    pub metrics: Option<Recorders>,
    /// The OpenAPI document, serialized once.
    pub openapi_json: Arc<String>,
    /// The way to the other members, and this node's membership (`--cluster`); `None`
    /// for a single gateway.
    pub peers: Option<Arc<crate::cluster::Peers>>,
    /// What the `/v1/_test/*` hooks keep: only with `--test-hooks`.
    pub(crate) test_hooks: Option<Arc<test_hooks::TestHooks>>,
    /// The `/v1` request slots (`--max-concurrent-requests`); `/metrics` reports how many
    /// are taken, so requests pay nothing for the count.
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
    /// `--chunked-upload-memory`, in KiB permits.
    pub(crate) chunked_budget: Arc<tokio::sync::Semaphore>,
    /// The samples behind `/v1/stats` (taken by [`stats::sample_forever`]).
    pub stats: Arc<stats::History>,
}

impl Shared {
    /// This node's cluster membership (`--cluster`); `None` for a single gateway.
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::Cluster>> {
        self.peers.as_deref().map(crate::cluster::Peers::cluster)
    }

    /// The versions of the default namespace.
    pub fn store(&self) -> &Arc<Store> {
        self.objects.store()
    }

    /// The object service of the namespace a request is in (`/v1/ns/{ns}/…`, the default
    /// one otherwise); `404 no_such_namespace` when it names none.
    pub(crate) fn objects_in(
        &self,
        ext: &axum::http::Extensions,
    ) -> Result<Arc<crate::objects::Objects>, ApiError> {
        self.objects_of(ext.get::<NamespaceName>())
    }

    /// The object service of namespace `ns` (`None`: the default one).
    pub(crate) fn objects_of(
        &self,
        ns: Option<&NamespaceName>,
    ) -> Result<Arc<crate::objects::Objects>, ApiError> {
        match ns {
            None => Ok(Arc::clone(&self.objects)),
            Some(NamespaceName(name)) => self
                .namespaces
                .get(name)
                .map(|ns| Arc::clone(&ns.objects))
                .ok_or_else(|| ApiError::NoSuchNamespace(name.to_string())),
        }
    }
}

/// The namespace `/v1/ns/{ns}/…` names: a request extension, set before authorisation
/// (absent on the default namespace's routes).
#[derive(Clone, Debug)]
pub struct NamespaceName(pub Arc<str>);

impl NamespaceName {
    /// The namespace a request is in, by name.
    pub(crate) fn of(ext: &axum::http::Extensions) -> &str {
        ext.get::<Self>().map_or(DEFAULT_NAMESPACE, |n| &n.0)
    }

    /// Where the routes of a request's namespace are: `/v1/ns/{ns}` (its `objects`,
    /// `descriptors`, …), or `/v1` for the default one.
    pub(crate) fn api_root(ext: &axum::http::Extensions) -> String {
        Self::api_root_of(ext.get::<Self>())
    }

    /// Where the routes of namespace `ns` are (`None`, the default one: `/v1`).
    pub(crate) fn api_root_of(ns: Option<&Self>) -> String {
        ns.map_or_else(|| "/v1".to_owned(), |n| format!("/v1/ns/{}", n.0))
    }
}

/// The pattern of a namespaced route under `/v1/ns/{ns}`: `/v1/objects/{*key}` →
/// `/v1/ns/{ns}/objects/{*key}` (made once per route when the router is built).
pub(crate) fn in_namespace(path: &'static str) -> &'static str {
    static MADE: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    let wanted = format!("/v1/ns/{{ns}}{rest}");
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = made.iter().find(|p| **p == wanted) {
        return p;
    }
    let p: &'static str = Box::leak(wanted.into_boxed_str());
    made.push(p);
    p
}

/// Names the request's namespace (`/v1/ns/{ns}/…`) and gives the handlers the path they
/// parse, as on the default namespace's routes (`/v1/…`); `OriginalUri` keeps the path sent.
async fn name_namespace(mut req: Request, next: Next) -> Response {
    let uri = req.uri();
    let Some(rest) = uri.path().strip_prefix("/v1/ns/") else {
        return next.run(req).await;
    };
    let (ns, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let ns = NamespaceName(Arc::from(ns));
    let mut path = format!("/v1/{tail}");
    if let Some(q) = uri.query() {
        path.push('?');
        path.push_str(q);
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path.parse().ok();
    if let Ok(stripped) = Uri::from_parts(parts) {
        *req.uri_mut() = stripped;
    }
    req.extensions_mut().insert(ns);
    next.run(req).await
}

/// Whether a route acts in a namespace (and is served under `/v1/ns/{ns}` too).
pub(crate) fn namespaced(path: &str) -> bool {
    ["/v1/objects", "/v1/descriptors", "/v1/batch/", "/v1/_test/"]
        .iter()
        .any(|p| path.starts_with(p))
        && path != "/v1/_test/panic"
}

impl AppState {
    /// State over `objects` with `config`: a single gateway, one namespace, no metrics
    /// recorder.
    pub fn new(objects: Arc<crate::objects::Objects>, config: HttpConfig) -> Self {
        Self::build(objects, config, Wiring::default())
    }

    /// State over `objects` with `config` and what `wiring` gives.
    pub fn build(
        objects: Arc<crate::objects::Objects>,
        config: HttpConfig,
        wiring: Wiring,
    ) -> Self {
        let Wiring {
            namespaces,
            metrics,
            peers,
        } = wiring;
        let test_hooks = config.test_hooks.then(Arc::default);
        Self(Arc::new(Shared {
            namespaces: namespaces.unwrap_or_else(|| Namespaces::single(Arc::clone(&objects))),
            objects,
            slots: Arc::new(tokio::sync::Semaphore::new(
                config.limits.max_concurrent_requests,
            )),
            chunked_budget: Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(config.chunked_upload_memory.div_ceil(1024))
                    .unwrap_or(usize::MAX)
                    .min(tokio::sync::Semaphore::MAX_PERMITS),
            )),
            config: Arc::new(config),
            metrics,
            openapi_json: Arc::new(doc::openapi_json()),
            peers,
            test_hooks,
            stats: Arc::default(),
        }))
    }
}

/// The gateway's router: every route, the docs, and the error and metrics middleware.
pub fn app(state: AppState) -> App {
    let config = Arc::clone(&state.config);
    let mut api = Router::new();
    // The namespaced routes twice: as they are (the default namespace) and under
    // /v1/ns/{ns} (each built with its own layers).
    let specs = route_specs(config.test_hooks)
        .into_iter()
        .map(|s| (s, false))
        .chain(
            route_specs(config.test_hooks)
                .into_iter()
                .filter(|s| namespaced(s.info.path))
                .map(|s| (s, true)),
        );
    // What the read route is built from (its guards and slots), for reaching it without
    // the router (`hot`); not in a cluster, where reads pass the forwarding layers.
    let direct_reads = state.peers.is_none();
    let (mut read_get, mut read_head, mut read_slots) = (None, None, None);
    for (spec, nested) in specs {
        let info = effective(spec.info, &config);
        // Without a token file every route is open, and public routes always are: no guard.
        let guard = config
            .tokens
            .clone()
            .filter(|_| info.access != Access::Public)
            .map(|tokens| auth::Guard {
                tokens,
                access: info.access,
                namespaced: namespaced(info.path),
            });
        // One layer stack per route (each route layer costs an allocation per request):
        // authorise, then take a slot (`/v1` only, but for the member list), then time the
        // body (routes that read one only).
        // `/v1/cluster` takes no slot: its long polls wait for minutes by design, and
        // clients must learn the members even when the gateway is busy; nor does
        // `/v1/stats`: a busy gateway is when operators look at its status page.
        let slotless = ["/v1/cluster", "/v1/cluster/near", "/v1/stats"].contains(&info.path);
        let limit = (info.path.starts_with("/v1/") && !slotless)
            .then(|| Slots::new(Arc::clone(&state.slots), limits::overloaded));
        let body_timeout = matches!(info.method, Some(Method::PUT | Method::POST))
            .then(|| RequestBodyTimeoutLayer::new(config.limits.body_timeout));
        // In a cluster, keyed requests go to the key's owner (after authorisation, before
        // a slot is taken here).
        let to_owner = (state.peers.is_some() && info.path.ends_with("{*key}"))
            .then(|| middleware::from_fn_with_state(state.clone(), forward::to_owner));
        // The read route reached without the router (`hot`) is built from the same pieces
        // (guard, slots; no namespace, forwarding or body timeout apply to it there): a
        // layer added here is added there too.
        if direct_reads && !nested && info.path == hot::READ_ROUTE {
            match info.method {
                Some(Method::GET) => (read_get, read_slots) = (Some(guard.clone()), limit.clone()),
                Some(Method::HEAD) => read_head = Some(guard.clone()),
                _ => {}
            }
        }
        // Under /v1/ns/{ns}: the namespace named first, and the path the handlers parse.
        let in_ns = nested.then(|| middleware::from_fn(name_namespace));
        let handler = spec.handler.route_layer(
            ServiceBuilder::new()
                .option_layer(in_ns)
                .option_layer(guard.map(|g| middleware::from_fn_with_state(g, auth::authorize)))
                .option_layer(to_owner)
                .option_layer(limit)
                .option_layer(body_timeout),
        );
        let path = match nested {
            true => in_namespace(info.path),
            false => info.path,
        };
        api = api.route(path, handler);
    }
    let peers = state.peers.clone();
    let read = match (read_get, read_head, read_slots) {
        (Some(get), Some(head), Some(slots)) => Some(hot::ReadRoute {
            get,
            head,
            slots,
            state: state.clone(),
        }),
        _ => None,
    };
    let mut api = api.fallback(no_such_route).with_state(state);
    if let Some(peers) = peers {
        api = api.layer(middleware::from_fn_with_state(peers, forward::admit_hop));
    }
    let edge_checks = edge::EdgeChecks {
        max_header_size: config.limits.max_header_size,
        // Open: no token stops a web page, so Host and Origin must.
        open_hosts: config.tokens.is_none().then(|| Arc::clone(&config.hosts)),
    };
    App::new(api.merge(ops::swagger_ui()), edge_checks, read)
}

async fn no_such_route(req: Request) -> Response {
    let p = error::problem(
        StatusCode::NOT_FOUND,
        ProblemCode::NoSuchRoute,
        format!("no route for {} {}", req.method(), req.uri().path()),
    );
    error::problem_response(&p)
}

/// A JSON response with a status.
pub(crate) fn json_response<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    (status, axum::Json(value)).into_response()
}
#[cfg(test)]
mod lanes;
#[cfg(test)]
mod tests;
