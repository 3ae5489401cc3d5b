//! `/v1/fabric`: how SDK clients reach the fast path.

use axum::extract::State;
use axum::Json;
use base64::prelude::*;
use rasa_openapi::FabricInfo;

use super::AppState;
use crate::store::Store;

/// Describe the gateway's fabric endpoint.
///
/// SDK clients fetch this once per gateway. While `enabled` is `false` (fast path off or
/// not built), every read goes over HTTP.
#[utoipa::path(
    get, path = "/v1/fabric", tag = "fabric", operation_id = "get_fabric",
    responses((status = 200, description = "The fabric endpoint, or that there is none.", body = FabricInfo))
)]
pub async fn get_fabric(State(st): State<AppState>) -> Json<FabricInfo> {
    Json(info(st.store()))
}

/// How clients reach `store`'s fast path (what `GET /v1/fabric` answers).
pub fn info(store: &Store) -> FabricInfo {
    let incarnation = format!("{:016x}", store.incarnation());
    match store.fabric() {
        Some(f) => FabricInfo {
            enabled: true,
            provider: Some(f.node().provider().to_owned()),
            address: Some(BASE64_STANDARD.encode(f.address())),
            address_format: Some(f.node().address_format()),
            virtual_addressing: Some(f.node().virtual_addressing()),
            incarnation,
        },
        None => FabricInfo {
            enabled: false,
            provider: None,
            address: None,
            address_format: None,
            virtual_addressing: None,
            incarnation,
        },
    }
}
