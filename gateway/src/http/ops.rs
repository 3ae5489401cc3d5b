//! Operations: health, readiness, metrics, the OpenAPI document and its browser UI.

use crate::catalog;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use rasa_openapi::Health;
use utoipa_swagger_ui::SwaggerUi;

use super::AppState;

/// Liveness: the process answers HTTP.
#[utoipa::path(
    get, path = "/healthz", tag = "operations", operation_id = "healthz",
    responses((status = 200, description = "Alive.", body = Health))
)]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the gateway can serve requests. `503` (a problem document saying why)
/// while a cluster member is fenced (its etcd lease was lost or not renewed in time, so
/// it may not act as the owner of any key) or draining (leaving on SIGTERM): a load
/// balancer or a Kubernetes readiness probe then sends requests elsewhere. The gateway
/// listens only once its disk tier is recovered and it has joined its cluster, so it is
/// never reachable and unready for those. `/healthz` stays liveness only.
#[utoipa::path(
    get, path = "/readyz", tag = "operations", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready.", body = Health),
        (status = 503, description = "Not ready; `detail` says why.", body = rasa_openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(State(st): State<AppState>) -> Result<Json<Health>, super::ApiError> {
    let fenced = st.cluster().is_some_and(|c| c.fenced());
    let draining = st.cluster().is_some_and(|c| c.draining());
    catalog::UNREADY
        .gauge_by(&[("reason", "fenced")])
        .set(f64::from(u8::from(fenced)));
    catalog::UNREADY
        .gauge_by(&[("reason", "draining")])
        .set(f64::from(u8::from(draining)));
    let why = if draining {
        "not ready: this cluster member is draining (leaving on SIGTERM): it serves what it holds until its leases end, and owns no key"
    } else if fenced {
        "not ready: this cluster member is fenced (its etcd lease was lost or not renewed within --member-ttl), so it owns no key until etcd answers again"
    } else {
        return Ok(Json(Health {
            status: "ok".into(),
        }));
    };
    Err(super::ApiError::Unavailable {
        detail: why.into(),
        retry_after: 1,
    })
}

/// Prometheus metrics, in the text exposition format.
#[utoipa::path(
    get, path = "/metrics", tag = "operations", operation_id = "metrics",
    responses((status = 200, description = "Metrics.", body = String, content_type = "text/plain; version=0.0.4"))
)]
pub async fn metrics(State(st): State<AppState>) -> Response {
    let text = render(&st);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// Brings the gauges read at a scrape up to date: the memory totals (over every
/// namespace), slots held, bodies gathered, replicas held, origin fetches under way.
pub(crate) fn observe(st: &AppState) {
    st.store().memory().observe();
    st.namespaces.observe_totals();
    let max = st.config.limits.max_concurrent_requests;
    let active = max.saturating_sub(st.slots.available_permits());
    catalog::HTTP_REQUESTS_ACTIVE.gauge().set(active as f64);
    catalog::HTTP_MAX_CONCURRENT_REQUESTS
        .gauge()
        .set(max as f64);
    let budget_kib = st.config.chunked_upload_memory.div_ceil(1024) as usize;
    let gathered_kib = budget_kib.saturating_sub(st.chunked_budget.available_permits());
    catalog::HTTP_CHUNKED_UPLOAD_BYTES
        .gauge()
        .set((gathered_kib * 1024) as f64);
    if let Some(reps) = st.peers.as_ref().and_then(|p| p.near()?.replicas()) {
        let (count, bytes) = reps.usage();
        catalog::CLUSTER_REPLICAS.gauge().set(count as f64);
        catalog::CLUSTER_REPLICA_BYTES.gauge().set(bytes as f64);
    }
    if let Some(rt) = st.objects.read_through() {
        catalog::ORIGIN_FETCHES_IN_FLIGHT
            .gauge()
            .set(rt.in_flight() as f64);
    }
}

/// The exposition `/metrics` serves, gauges brought up to date first (empty without a
/// recorder).
pub(crate) fn render(st: &AppState) -> String {
    observe(st);
    let Some(recorders) = st.metrics.as_ref() else {
        return String::new();
    };
    // The namespaces' series come from a recorder of their own, made for this scrape:
    // those of removed namespaces are gone with them.
    let mut text = recorders.exposition.render();
    text.push_str(&st.namespaces.exposition());
    text
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(
    get, path = "/openapi.json", tag = "operations", operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI document.", body = Object, content_type = "application/json"))
)]
pub async fn openapi_json(State(st): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        st.openapi_json.as_str().to_owned(),
    )
        .into_response()
}

/// Swagger UI at `/docs`, served from assets compiled into the binary (no CDN).
pub fn swagger_ui() -> Router {
    Router::from(SwaggerUi::new("/docs").config(utoipa_swagger_ui::Config::new(["/openapi.json"])))
        .layer(axum::middleware::map_response(docs_headers))
}

/// The Swagger UI's policy: its own scripts and styles (it sets inline styles), its own
/// images and `data:` ones, the OpenAPI document from this origin; nothing else.
pub const DOCS_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

async fn docs_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(DOCS_CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// The routes a connection past `--max-connections` may still reach: health, readiness,
/// metrics and the status page's figures (see [`crate::server::gate`]).
pub fn is_health_or_admin(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/v1/stats")
}

/// The answer to any other request on such a connection.
pub fn connection_limit_refusal() -> Response {
    let mut r = super::ApiError::Unavailable {
        detail: "the gateway holds as many connections as --max-connections allows; this connection may reach only /healthz, /readyz and /metrics. Retry".into(),
        retry_after: 1,
    }
    .into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
