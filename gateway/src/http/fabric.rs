//! `/v1/fabric`: how SDK clients reach the fast path.

use axum::extract::State;
use axum::Json;
use base64::prelude::*;
use rasa_fastpath::fabric::plan::is_shm;
use rasa_fastpath::local::HostIdentity;
use rasa_openapi::{FabricEndpoint, FabricHost, FabricInfo};
use std::sync::OnceLock;

use super::AppState;
use crate::store::Store;

/// Describe the gateway's fabric endpoints.
///
/// SDK clients fetch this once per gateway. A gateway may serve several providers at once
/// (`endpoints`: e.g. `shm` for readers on its host, with `host` saying how they can tell,
/// beside `tcp;ofi_rxm` or `efa` for the others). While `enabled` is `false` (fast path off or
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
    let Some(fabrics) = store.fabric() else {
        return FabricInfo {
            enabled: false,
            provider: None,
            address: None,
            address_format: None,
            virtual_addressing: None,
            incarnation,
            endpoints: Vec::new(),
            host: None,
        };
    };
    let endpoints: Vec<FabricEndpoint> = fabrics
        .servers()
        .iter()
        .map(|f| FabricEndpoint {
            provider: f.node().provided().provider().to_owned(),
            address: BASE64_STANDARD.encode(f.address()),
            address_format: f.node().provided().address_format(),
            virtual_addressing: f.node().provided().virtual_addressing(),
        })
        .collect();
    let shm = endpoints.iter().any(|e| is_shm(&e.provider));
    let first = endpoints[0].clone();
    FabricInfo {
        enabled: true,
        provider: Some(first.provider),
        address: Some(first.address),
        address_format: Some(first.address_format),
        virtual_addressing: Some(first.virtual_addressing),
        host: shm.then(|| host(&incarnation)).flatten(),
        incarnation,
        endpoints,
    }
}

/// This gateway's host for `shm` readers: its identity, pid, and the probe they read with
/// `process_vm_readv` to know cross-memory attach works (`rasa_fastpath::local`).
fn host(incarnation: &str) -> Option<FabricHost> {
    static PROBE: OnceLock<&'static str> = OnceLock::new();
    let probe: &'static str =
        PROBE.get_or_init(|| Box::leak(format!("rasa-probe {incarnation}").into_boxed_str()));
    let here = HostIdentity::here()?;
    Some(FabricHost {
        boot_id: here.boot_id,
        pid_namespace: here.pid_namespace,
        pid: std::process::id(),
        probe_addr: probe.as_ptr() as u64,
        probe: probe.to_owned(),
    })
}
