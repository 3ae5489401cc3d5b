//! Which of a gateway's fabric endpoints a client reads through.
//!
//! A gateway may serve several providers at once (`GET /v1/fabric`'s `endpoints`): `shm`
//! for readers on its host, `efa` or `tcp;ofi_rxm` for the others. A client takes `shm`
//! when the gateway is on its host and cross-memory attach works from here (the gateway's
//! published host identity matches this process's, and its probe reads back with
//! `process_vm_readv`: `rasa_fastpath::local`), else the first other endpoint, else HTTP.
//! A provider asked for by name ([`crate::ClientBuilder::fabric_provider`]) is taken or
//! refused, never swapped for another.

use rasa_fastpath::fabric::plan::is_shm;
use rasa_fastpath::local::{self, HostIdentity};
use rasa_openapi::{FabricEndpoint, FabricInfo};

/// The endpoints `info` lists (a gateway that lists none has only its top-level one).
pub(crate) fn endpoints(info: &FabricInfo) -> Vec<FabricEndpoint> {
    if !info.enabled {
        return Vec::new();
    }
    if !info.endpoints.is_empty() {
        return info.endpoints.clone();
    }
    match (&info.provider, &info.address) {
        (Some(provider), Some(address)) => vec![FabricEndpoint {
            provider: provider.clone(),
            address: address.clone(),
            address_format: info.address_format.clone().unwrap_or_default(),
            virtual_addressing: info.virtual_addressing.unwrap_or(true),
        }],
        _ => Vec::new(),
    }
}

/// Whether this process can read `info`'s gateway over `shm` (why not, if it cannot). A
/// gateway that publishes no host (older ones) is tried.
fn local(info: &FabricInfo) -> Result<(), String> {
    let Some(h) = &info.host else {
        return Ok(());
    };
    let gateway = HostIdentity {
        boot_id: h.boot_id.clone(),
        pid_namespace: h.pid_namespace.clone(),
    };
    local::probe(&gateway, h.pid, h.probe_addr, h.probe.as_bytes()).map_err(|e| e.to_string())
}

/// The endpoint to read through: its index in [`endpoints`] and the endpoint, or why
/// there is none (reads then go over HTTP). `wanted` names a provider to insist on.
pub(crate) fn choose(
    info: &FabricInfo,
    wanted: Option<&str>,
) -> Result<(usize, FabricEndpoint), String> {
    let all = endpoints(info);
    if all.is_empty() {
        return Err("the gateway's fast path is off".into());
    }
    if let Some(wanted) = wanted {
        let Some(i) = all.iter().position(|e| e.provider == wanted) else {
            let has: Vec<&str> = all.iter().map(|e| e.provider.as_str()).collect();
            return Err(format!(
                "the gateway serves no {wanted} endpoint (it has: {})",
                has.join(", ")
            ));
        };
        if is_shm(wanted) {
            local(info).map_err(|why| format!("shm asked for, but: {why}"))?;
        }
        return Ok((i, all[i].clone()));
    }
    let mut not_shm = None;
    if let Some(i) = all.iter().position(|e| is_shm(&e.provider)) {
        match local(info) {
            Ok(()) => return Ok((i, all[i].clone())),
            Err(why) => not_shm = Some(why),
        }
    }
    match all.iter().position(|e| !is_shm(&e.provider)) {
        Some(i) => {
            if let Some(why) = &not_shm {
                tracing::debug!(%why, provider = %all[i].provider, "not reading over shm");
            }
            Ok((i, all[i].clone()))
        }
        None => Err(format!(
            "the gateway serves only shm, which cannot be used from here: {}",
            not_shm.unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rasa_openapi::FabricHost;

    fn info(providers: &[&str], host: Option<FabricHost>) -> FabricInfo {
        let endpoints: Vec<FabricEndpoint> = providers
            .iter()
            .map(|p| FabricEndpoint {
                provider: (*p).into(),
                address: "AA==".into(),
                address_format: "FI_ADDR_STR".into(),
                virtual_addressing: true,
            })
            .collect();
        FabricInfo {
            enabled: true,
            provider: Some(providers[0].into()),
            address: Some("AA==".into()),
            address_format: None,
            virtual_addressing: Some(true),
            incarnation: "0".into(),
            endpoints,
            host,
        }
    }

    /// A host that is this process itself, so the probe reads back.
    fn this_host() -> FabricHost {
        let probe: &'static str = Box::leak("rasa-probe test".to_owned().into_boxed_str());
        let here = HostIdentity::here().unwrap();
        FabricHost {
            boot_id: here.boot_id,
            pid_namespace: here.pid_namespace,
            pid: std::process::id(),
            probe_addr: probe.as_ptr() as u64,
            probe: probe.into(),
        }
    }

    #[test]
    fn shm_is_taken_on_the_gateways_host_and_the_remote_provider_elsewhere() {
        let both = info(&["tcp;ofi_rxm", "shm"], Some(this_host()));
        assert_eq!(choose(&both, None).unwrap().0, 1);
        let mut elsewhere = this_host();
        elsewhere.boot_id = "another machine".into();
        let remote = info(&["tcp;ofi_rxm", "shm"], Some(elsewhere.clone()));
        assert_eq!(choose(&remote, None).unwrap().0, 0);
        let only_shm = info(&["shm"], Some(elsewhere));
        let why = choose(&only_shm, None).unwrap_err();
        assert!(why.contains("another host"), "{why}");
    }

    #[test]
    fn a_provider_asked_for_is_taken_or_refused_never_swapped() {
        let both = info(&["tcp;ofi_rxm", "shm"], Some(this_host()));
        assert_eq!(choose(&both, Some("tcp;ofi_rxm")).unwrap().0, 0);
        let why = choose(&both, Some("efa")).unwrap_err();
        assert!(why.contains("no efa endpoint"), "{why}");
        let mut wrong = this_host();
        wrong.probe = "rasa-probe other".into();
        let why = choose(&info(&["tcp;ofi_rxm", "shm"], Some(wrong)), Some("shm")).unwrap_err();
        assert!(why.contains("not the gateway"), "{why}");
    }
}
