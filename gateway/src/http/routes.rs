//! Every route the gateway serves, declared once with the [`Access`] it demands: the
//! router, the authorisation matrix test and the OpenAPI security requirements are all
//! derived from this list.

use axum::http::Method;
use axum::routing::{delete, get, head, on, post, put, MethodFilter, MethodRouter};

use super::{
    batch, cluster, descriptors, fabric, objects, ops, stats, test_hooks, ui, Access, AppState,
    HttpConfig,
};
use crate::tokens;

/// One route as declared: method, path and who may call it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteInfo {
    /// The method; `None` for a route that answers every method.
    pub method: Option<Method>,
    /// The path pattern, as axum writes it (`/v1/objects/{*key}`).
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
}

pub(super) struct RouteSpec {
    pub(super) info: RouteInfo,
    pub(super) handler: MethodRouter<AppState>,
}

/// Every route the gateway serves, with its access, in one list.
pub(super) fn route_specs(test_hooks: bool) -> Vec<RouteSpec> {
    use tokens::Scope::{Admin, Metrics, Read, Write};
    use Access::{AnyToken, Public, Scope};
    let r = spec;
    let mut routes = vec![
        r(
            Some(Method::GET),
            "/v1/objects",
            Scope(Read),
            get(objects::list_objects),
        ),
        r(
            None,
            "/v1/objects/",
            AnyToken,
            on(every_method(), objects::empty_key),
        ),
        r(
            Some(Method::PUT),
            "/v1/objects/{*key}",
            Scope(Write),
            put(objects::put_object),
        ),
        r(
            Some(Method::GET),
            "/v1/objects/{*key}",
            Scope(Read),
            get(objects::get_object),
        ),
        r(
            Some(Method::HEAD),
            "/v1/objects/{*key}",
            Scope(Read),
            head(objects::head_object),
        ),
        r(
            Some(Method::DELETE),
            "/v1/objects/{*key}",
            Scope(Write),
            delete(objects::delete_object),
        ),
        r(
            Some(Method::POST),
            "/v1/descriptors",
            Scope(Read),
            post(descriptors::batch_descriptors),
        ),
        r(
            None,
            "/v1/descriptors/",
            AnyToken,
            on(every_method(), objects::empty_key),
        ),
        r(
            Some(Method::GET),
            "/v1/descriptors/{*key}",
            Scope(Read),
            get(descriptors::get_descriptor),
        ),
        r(
            Some(Method::GET),
            "/v1/fabric",
            Scope(Read),
            get(fabric::get_fabric),
        ),
        r(
            Some(Method::GET),
            "/v1/stats",
            Scope(Admin),
            get(stats::get_stats),
        ),
        r(Some(Method::GET), "/ui", Public, get(ui::page)),
        r(Some(Method::GET), "/ui/{file}", Public, get(ui::asset)),
        r(Some(Method::GET), "/healthz", Public, get(ops::healthz)),
        r(Some(Method::GET), "/readyz", Public, get(ops::readyz)),
        r(
            Some(Method::GET),
            "/metrics",
            Scope(Metrics),
            get(ops::metrics),
        ),
        r(
            Some(Method::GET),
            "/openapi.json",
            Public,
            get(ops::openapi_json),
        ),
    ];
    routes.extend(batch_routes());
    routes.extend(cluster_routes());
    if test_hooks {
        routes.extend(test_hook_routes());
    }
    routes
}

/// One route's declaration.
fn spec(
    method: Option<Method>,
    path: &'static str,
    access: Access,
    handler: MethodRouter<AppState>,
) -> RouteSpec {
    RouteSpec {
        info: RouteInfo {
            method,
            path,
            access,
        },
        handler,
    }
}

/// Batches: many values stored, many keys deleted or checked, in one request.
fn batch_routes() -> Vec<RouteSpec> {
    use tokens::Scope::{Read, Write};
    use Access::Scope;
    vec![
        spec(
            Some(Method::POST),
            "/v1/batch/exists",
            Scope(Read),
            post(batch::exists_batch),
        ),
        spec(
            Some(Method::POST),
            "/v1/batch/put",
            Scope(Write),
            post(batch::put_batch),
        ),
        spec(
            Some(Method::POST),
            "/v1/batch/reserve",
            Scope(Write),
            post(batch::reserve_upload),
        ),
        spec(
            Some(Method::POST),
            "/v1/batch/commit/{upload}",
            Scope(Write),
            post(batch::commit_upload),
        ),
        spec(
            Some(Method::POST),
            "/v1/batch/delete",
            Scope(Write),
            post(batch::delete_batch),
        ),
    ]
}

/// The cluster's members, for clients; and near copies revoked, between members.
fn cluster_routes() -> Vec<RouteSpec> {
    use tokens::Scope::Read;
    use Access::{Public, Scope};
    vec![
        spec(
            Some(Method::GET),
            "/v1/cluster",
            Scope(Read),
            get(cluster::get_cluster),
        ),
        // Between members, who hold no client token: a proven hop marker instead
        // (`403` without one). Not in the API's documentation.
        spec(
            Some(Method::POST),
            crate::cluster::near::REVOKE_PATH,
            Public,
            post(cluster::revoke_near),
        ),
        spec(
            Some(Method::POST),
            crate::cluster::replicas::REPLICA_PATH,
            Public,
            post(super::replica::nudge),
        ),
        spec(
            Some(Method::GET),
            "/v1/cluster/replica/{*key}",
            Public,
            get(super::replica::frame),
        ),
    ]
}

/// The routes of `--test-hooks` (never in production).
fn test_hook_routes() -> Vec<RouteSpec> {
    use tokens::Scope::Admin;
    use Access::Scope;
    let r = spec;
    vec![
        r(
            Some(Method::POST),
            "/v1/_test/revoke/{*key}",
            Scope(Admin),
            post(test_hooks::revoke),
        ),
        r(
            Some(Method::POST),
            "/v1/_test/corrupt/{*key}",
            Scope(Admin),
            post(test_hooks::corrupt),
        ),
        r(
            Some(Method::GET),
            "/v1/_test/region/{*key}",
            Scope(Admin),
            get(test_hooks::region),
        ),
        r(
            Some(Method::POST),
            "/v1/_test/panic",
            Scope(Admin),
            post(test_hooks::panic),
        ),
    ]
}

/// Every method axum routes by (a route answering all of them still gets route layers,
/// which `any` would not).
fn every_method() -> MethodFilter {
    [
        MethodFilter::HEAD,
        MethodFilter::PUT,
        MethodFilter::POST,
        MethodFilter::DELETE,
        MethodFilter::PATCH,
        MethodFilter::OPTIONS,
        MethodFilter::TRACE,
        MethodFilter::CONNECT,
    ]
    .into_iter()
    .fold(MethodFilter::GET, MethodFilter::or)
}

/// The routes `config` serves and who may call each: the list the router is built from,
/// plus Swagger UI's public `/docs`. `/metrics` is public under `--public-metrics`.
pub fn route_table(config: &HttpConfig) -> Vec<RouteInfo> {
    let mut table: Vec<RouteInfo> = route_specs(config.test_hooks)
        .into_iter()
        .map(|s| effective(s.info, config))
        .collect();
    // The namespaced ones again under /v1/ns/{ns}, with the same access (in that namespace).
    let nested: Vec<RouteInfo> = table
        .iter()
        .filter(|r| super::namespaced(r.path))
        .map(|r| RouteInfo {
            path: super::in_namespace(r.path),
            ..r.clone()
        })
        .collect();
    table.extend(nested);
    table.push(RouteInfo {
        method: Some(Method::GET),
        path: "/docs/",
        access: Access::Public,
    });
    table
}

pub(super) fn effective(mut info: RouteInfo, config: &HttpConfig) -> RouteInfo {
    if info.path == "/metrics" && config.public_metrics {
        info.access = Access::Public;
    }
    info
}
