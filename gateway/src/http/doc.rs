//! The OpenAPI document, assembled from the handlers' annotations.

use axum::http::Method;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{
    Content, HeaderBuilder, Object, OpenApi as Document, PathItem, Ref, ResponseBuilder,
    SecurityRequirement,
};
use utoipa::{Modify, OpenApi};

use super::{route_table, Access, HttpConfig};

/// Rasa's HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Rasa gateway",
        description = "Object-store-style HTTP gateway with an RDMA fast path. Every PUT stores a new immutable version and returns a descriptor (address, remote key, length, checksums, lease) that libfabric clients can read one-sided; every other client reads the same bytes over HTTP.\n\nUpdates and deletes are lazy for one-sided readers: a reader holding a descriptor may read the version it names until the descriptor's lease ends. HTTP readers always see the current version.\n\nErrors are `application/problem+json` (RFC 9457) with a stable `code`.\n\n**Authentication.** A gateway started with `--token-file` requires `Authorization: Bearer <token>` on every `/v1` route (scope `read` for reads and descriptors, `write` for PUT and DELETE, `admin` for everything including `/metrics`) and answers `401` (missing or unknown token, with `WWW-Authenticate`) or `403` (scope too small). `/healthz`, `/readyz`, `/openapi.json` and `/docs` are always public. In Swagger UI, use **Authorize** to send a token.\n\n**Namespaces.** With `--namespaces`, each namespace has its own memory quota and its own arenas (a descriptor opens only its namespace's memory) and its routes under `/v1/ns/{ns}/` (`/v1/ns/{ns}/objects/{key}`, `/v1/ns/{ns}/descriptors/{key}`, …); `/v1/objects/…` is the `default` namespace. A token's scopes are for every namespace (`read`) or for one (`ns:read`); a token without `read` in the namespace gets no remote key with its PUT answer. An unknown namespace is `404` (`no_such_namespace`).\n\n**Limits.** Excess concurrent `/v1` requests get `503` (`overloaded`) with `Retry-After`; a request head larger than the limit gets `431`; a body that stalls gets `408`.\n\n**Clusters.** Gateways started with `--cluster` share keys by rendezvous hashing over the members `GET /v1/cluster` lists. A request for a key another member owns is forwarded to it (the answer carries `Rasa-Served-By`) or, with `--cluster-routing redirect`, answered `307`. A request carrying `Rasa-Hop` is served by the node that receives it.",
        license(name = "Apache-2.0"),
    ),
    paths(
        super::objects::put_object,
        super::objects::get_object,
        super::objects::head_object,
        super::objects::delete_object,
        super::objects::list_objects,
        super::batch::put_batch,
        super::batch::upload::reserve_upload,
        super::batch::upload::commit_upload,
        super::batch::delete::delete_batch,
        super::batch::exists::exists_batch,
        super::descriptors::get_descriptor,
        super::descriptors::batch_descriptors,
        super::fabric::get_fabric,
        super::cluster::get_cluster,
        super::stats::get_stats,
        super::ops::healthz,
        super::ops::readyz,
        super::ops::metrics,
        super::ops::openapi_json,
    ),
    components(schemas(rasa_openapi::Problem, rasa_openapi::ProblemCode)),
    modifiers(&InNamespaces, &BearerAuth, &Rules),
    tags(
        (name = "objects", description = "Store and read values over HTTP."),
        (name = "descriptors", description = "Resolve keys to descriptors for one-sided reads."),
        (name = "fabric", description = "The fast-path endpoint."),
        (name = "cluster", description = "The members of a cluster of gateways (`--cluster`)."),
        (name = "operations", description = "Health, metrics, the status page's figures and documentation."),
    )
)]
pub struct ApiDoc;

/// The object and descriptor routes again under `/v1/ns/{ns}`: the same operations in
/// namespace `ns` (`--namespaces`), each with the `ns` path parameter and its `404`.
struct InNamespaces;

impl Modify for InNamespaces {
    fn modify(&self, doc: &mut Document) {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        use utoipa::openapi::Required;
        let ns = ParameterBuilder::new()
            .name("ns")
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some(
                "A namespace of the gateway's --namespaces file (`default` is the default namespace, also served without /v1/ns/{ns}).",
            ))
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(crate::key::NAMESPACE_PATTERN))
                    .min_length(Some(3))
                    .max_length(Some(63)),
            ))
            .build();
        let missing = ResponseBuilder::new()
            .description("No object, or (`no_such_namespace`) no such namespace.")
            .content(
                rasa_openapi::PROBLEM_JSON,
                Content::new(Some(Ref::from_schema_name("Problem"))),
            )
            .build();
        let copies: Vec<(String, PathItem)> = doc
            .paths
            .paths
            .iter()
            .filter(|(path, _)| super::namespaced(path))
            .map(|(path, item)| {
                let mut item = item.clone();
                for op in operations(&mut item) {
                    op.operation_id = op
                        .operation_id
                        .take()
                        .map(|id| format!("{id}_in_namespace"));
                    op.parameters
                        .get_or_insert_with(Vec::new)
                        .insert(0, ns.clone());
                    let responses = &mut op.responses.responses;
                    responses.insert("404".into(), missing.clone().into());
                }
                let rest = path.strip_prefix("/v1").unwrap_or(path);
                (format!("/v1/ns/{{ns}}{rest}"), item)
            })
            .collect();
        doc.paths.paths.extend(copies);
    }
}

/// Declares the bearer scheme and, from the router's own route table, which scope each
/// operation needs, with its `401` and `403` answers.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut Document) {
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.description = Some(
            "A token from the gateway's token file (`rasa-gateway token new`). Needed only when the gateway runs with `--token-file`.".into(),
        );
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(SCHEME, SecurityScheme::Http(bearer));
        let problem = || Content::new(Some(Ref::from_schema_name("Problem")));
        let challenge = || {
            HeaderBuilder::new()
                .schema(Object::with_type(utoipa::openapi::schema::Type::String))
                .description(Some(
                    "`Bearer realm=\"rasa\"`, with `error` and `scope` as RFC 6750 describes.",
                ))
                .build()
        };
        for route in route_table(&HttpConfig::new(0, 1)) {
            let (Some(method), Access::Scope(scope)) = (&route.method, route.access) else {
                continue;
            };
            let path = route.path.replace("{*key}", "{key}");
            let Some(op) = doc
                .paths
                .paths
                .get_mut(&path)
                .and_then(|item| operation(item, method))
            else {
                continue;
            };
            op.security = Some(vec![SecurityRequirement::new(SCHEME, [scope.as_str()])]);
            let responses = &mut op.responses.responses;
            responses.entry("401".into()).or_insert_with(|| {
                ResponseBuilder::new()
                    .description("No bearer token, or one the gateway does not know.")
                    .content(rasa_openapi::PROBLEM_JSON, problem())
                    .header("WWW-Authenticate", challenge())
                    .build()
                    .into()
            });
            responses.entry("403".into()).or_insert_with(|| {
                ResponseBuilder::new()
                    .description(format!("The token lacks scope `{scope}`."))
                    .content(rasa_openapi::PROBLEM_JSON, problem())
                    .header("WWW-Authenticate", challenge())
                    .build()
                    .into()
            });
            if route.path.starts_with("/v1/") {
                responses.entry("503".into()).or_insert_with(|| {
                    ResponseBuilder::new()
                        .description("Overloaded (too many concurrent requests); retry after `Retry-After` seconds.")
                        .content(rasa_openapi::PROBLEM_JSON, problem())
                        .build()
                        .into()
                });
            }
        }
    }
}

/// Writes the rules the server enforces on parameters into the document, from the same
/// constants the server checks with: the key's pattern and length, the version id's
/// pattern, the listing's `limit` bounds, the entity-tag list syntax of `If-Match` and
/// `If-None-Match`. Generated clients and Swagger UI then learn them without a `400`.
struct Rules;

impl Modify for Rules {
    fn modify(&self, doc: &mut Document) {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let text = |pattern: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(pattern))
        };
        for item in doc.paths.paths.values_mut() {
            for op in operations(item) {
                for p in op.parameters.iter_mut().flatten() {
                    let schema = match (&p.parameter_in, p.name.as_str()) {
                        (ParameterIn::Path, "key") => text(crate::key::KEY_PATTERN)
                            .min_length(Some(1))
                            .max_length(Some(crate::key::MAX_KEY_LEN))
                            .description(Some(
                                "1 to 1024 bytes of UTF-8 (the length counts bytes, not characters)",
                            )),
                        (ParameterIn::Query, "version") => {
                            text(crate::store::VERSION_PATTERN).min_length(Some(16)).max_length(Some(16))
                        }
                        (ParameterIn::Query, "limit") => ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .minimum(Some(1))
                            .maximum(Some(super::objects::MAX_LIST_LIMIT as u64)),
                        (ParameterIn::Header, name)
                            if name.eq_ignore_ascii_case("if-match")
                                || name.eq_ignore_ascii_case("if-none-match") =>
                        {
                            text(super::preconditions::ENTITY_TAGS_PATTERN).examples([
                                serde_json::json!("*"),
                                serde_json::json!("\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\""),
                            ])
                        }
                        _ => continue,
                    };
                    p.schema = Some(schema.build().into());
                }
            }
        }
    }
}

/// The name of the bearer security scheme in the document.
const SCHEME: &str = "bearer";

/// Every operation of `item` (the methods the API uses).
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        item.get.as_mut(),
        item.head.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
    ]
    .into_iter()
    .flatten()
}

fn operation<'a>(
    item: &'a mut PathItem,
    method: &Method,
) -> Option<&'a mut utoipa::openapi::path::Operation> {
    match *method {
        Method::GET => item.get.as_mut(),
        Method::HEAD => item.head.as_mut(),
        Method::PUT => item.put.as_mut(),
        Method::POST => item.post.as_mut(),
        Method::DELETE => item.delete.as_mut(),
        _ => None,
    }
}

/// The document as pretty JSON with a final newline, exactly as checked in at
/// `openapi/openapi.json`.
pub fn openapi_json() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    s.push('\n');
    s
}
