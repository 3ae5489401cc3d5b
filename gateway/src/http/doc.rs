//! The OpenAPI document, assembled from the handlers' annotations.

use utoipa::OpenApi;

/// A body of raw bytes, of any media type.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct Binary(pub Vec<u8>);

/// Rasa's HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Rasa gateway",
        description = "Object-store-style HTTP gateway with an RDMA fast path. Every PUT stores a new immutable version and returns a descriptor (address, remote key, length, checksums, lease) that libfabric clients can read one-sided; every other client reads the same bytes over HTTP.\n\nUpdates and deletes are lazy for one-sided readers: a reader holding a descriptor may read the version it names until the descriptor's lease ends. HTTP readers always see the current version.\n\nErrors are `application/problem+json` (RFC 9457) with a stable `code`.",
        license(name = "Apache-2.0"),
    ),
    paths(
        super::objects::put_object,
        super::objects::get_object,
        super::objects::head_object,
        super::objects::delete_object,
        super::objects::list_objects,
        super::descriptors::get_descriptor,
        super::descriptors::batch_descriptors,
        super::fabric::get_fabric,
        super::ops::healthz,
        super::ops::readyz,
        super::ops::metrics,
        super::ops::openapi_json,
    ),
    components(schemas(rasa_openapi::Problem, rasa_openapi::ProblemCode)),
    tags(
        (name = "objects", description = "Store and read values over HTTP."),
        (name = "descriptors", description = "Resolve keys to descriptors for one-sided reads."),
        (name = "fabric", description = "The fast-path endpoint."),
        (name = "operations", description = "Health, metrics and documentation."),
    )
)]
pub struct ApiDoc;

/// The document as pretty JSON with a final newline, exactly as checked in at
/// `openapi/openapi.json`.
pub fn openapi_json() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    s.push('\n');
    s
}
