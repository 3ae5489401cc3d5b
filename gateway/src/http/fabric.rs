//! `/v1/fabric`: how SDK clients reach the fast path.

use axum::extract::State;
use axum::Json;
use rasa_openapi::FabricInfo;

use super::AppState;

/// Describe the gateway's fabric endpoint.
///
/// SDK clients fetch this once per gateway. While `enabled` is `false` (fast path off or
/// not built), every read goes over HTTP.
#[utoipa::path(
    get, path = "/v1/fabric", tag = "fabric", operation_id = "get_fabric",
    responses((status = 200, description = "The fabric endpoint, or that there is none.", body = FabricInfo))
)]
pub async fn get_fabric(State(st): State<AppState>) -> Json<FabricInfo> {
    Json(FabricInfo {
        enabled: false,
        provider: None,
        address: None,
        address_format: None,
        virtual_addressing: None,
        incarnation: format!("{:016x}", st.store.incarnation()),
    })
}
