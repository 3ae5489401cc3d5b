//! What Rasa asks libfabric for, decided from the configuration and the library's versions
//! before any call is made: pure functions, so every rule is unit-tested here even where
//! the hardware (AWS EFA) is not.
//!
//! The EFA rules come from a review of the `efa` provider's source (libfabric v1.22–v2.6):
//! - the provider matches `node` against device GIDs (`inet_pton(AF_INET6, …)`), so an IPv4
//!   address finds no device: for `efa` no node is passed, and the NIC is chosen by domain
//!   name (`rdmapXsY-rdm`);
//! - from libfabric 2.1 the `efa-direct` fabric is listed first and needs the target to
//!   insert every reader's address before serving it, which a gateway never does: the
//!   fabric name `efa` is asked for explicitly;
//! - a receive-queue size hint caps the provider's internal receive pool: left unset;
//! - API versions below 1.18 switch device RDMA read off on p4d/p5: at least 1.18 is
//!   requested, capped at what the runtime library reports.

use super::FabricConfig;

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// `"major.minor"` of a packed libfabric version.
pub fn version_text(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

/// The lowest API version Rasa requests: below it the `efa` provider disables device RDMA
/// read on p4d/p5 and emulates reads in software.
pub const MIN_API: u32 = fi_version(1, 18);

/// The API version to request from `fi_getinfo`: at least [`MIN_API`] (and at least the
/// headers' version), never more than the runtime library implements.
pub fn requested_api(header: u32, runtime: u32) -> u32 {
    header.max(MIN_API).min(runtime)
}

/// Whether `provider` (a libfabric provider name or `;`-list, e.g. `tcp;ofi_rxm`) is AWS's
/// `efa`.
pub fn is_efa(provider: &str) -> bool {
    provider
        .split(';')
        .next()
        .is_some_and(|p| p.trim() == "efa")
}

/// Whether `provider` is layered over `ofi_rxm` (`tcp;ofi_rxm`, `verbs;ofi_rxm`).
pub fn is_rxm(provider: &str) -> bool {
    provider.split(';').any(|p| p.trim() == "ofi_rxm")
}

/// Whether `provider` is libfabric's shared-memory provider (`shm`).
pub fn is_shm(provider: &str) -> bool {
    provider
        .split(';')
        .next()
        .is_some_and(|p| p.trim() == "shm")
}

/// A shared-memory endpoint name no other endpoint on this host has: `shm` names each
/// endpoint's region after its source address, so two processes given the same one (the
/// SDK's `127.0.0.1` for a gateway on loopback, say) collide (`fi_enable`: EBUSY).
pub fn shm_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("rasa-{}-{n}", std::process::id())
}

/// The receive-queue size hint for software providers: Rasa only issues RMA reads and never
/// receives messages, so small queues keep them from preallocating tens of MiB.
pub const SOFTWARE_RX_SIZE: usize = 16;

/// The receive-queue size of a *serving* `shm` endpoint. shm sizes a region's command queue
/// by it, and every one-sided read takes a slot there (its completion notice) until the
/// gateway's progress thread frees it: with 16 slots, 16 concurrent readers ran out between
/// the progress thread's polls and waited for it (1 MiB reads from 16 readers at 1.8 GB/s,
/// p99 32 ms, gateway CPU 0.19 s per GB). 1024 slots take ~4 MiB more of the region (one
/// 4 KiB inject buffer per slot).
pub const SHM_SERVING_RX_SIZE: usize = 1024;

/// The hints and arguments of one `fi_getinfo` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The provider name to ask for.
    pub provider: String,
    /// Local address passed as `node` (with `FI_SOURCE`), if any.
    pub node: Option<String>,
    /// A configured local address that is *not* passed (for `efa`), to warn about.
    pub ignored_node: Option<String>,
    /// Fabric name to ask for (`efa` on EFA, never `efa-direct`).
    pub fabric_name: Option<&'static str>,
    /// Domain (NIC) name to ask for, e.g. `rdmap16s27-rdm`.
    pub domain_name: Option<String>,
    /// Receive-queue size hint; `None` leaves it to the provider.
    pub rx_size: Option<usize>,
    /// The API version to request.
    pub api_version: u32,
}

impl Plan {
    /// The plan for `cfg` with headers of version `header` and a runtime library of
    /// version `runtime`.
    pub fn new(cfg: &FabricConfig, header: u32, runtime: u32) -> Plan {
        let efa = is_efa(&cfg.provider);
        // shm addresses by name, not by IP: a unique one per endpoint.
        let node = match (efa, is_shm(&cfg.provider)) {
            (true, _) => None,
            (_, true) => Some(shm_name()),
            _ => cfg.node.clone(),
        };
        Plan {
            provider: cfg.provider.clone(),
            node,
            ignored_node: if efa { cfg.node.clone() } else { None },
            fabric_name: efa.then_some("efa"),
            domain_name: cfg.domain.clone(),
            rx_size: match (efa, is_shm(&cfg.provider) && cfg.serving) {
                (true, _) => None,
                (false, true) => Some(SHM_SERVING_RX_SIZE),
                (false, false) => Some(SOFTWARE_RX_SIZE),
            },
            api_version: requested_api(header, runtime),
        }
    }
}

/// How a failed read should be understood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFailure {
    /// The remote key was revoked or the range is outside the region: a stale descriptor.
    KeyRevoked,
    /// The connection to the gateway is gone; rebuild the endpoint.
    ConnectionLost,
    /// The target does not know this reader (`efa-direct` without address exchange): a
    /// configuration problem, not a network one.
    UnknownPeer,
    /// Anything else, local bugs included.
    Other,
}

/// Classifies a failed read by its error numbers. On `efa` the provider's own error number
/// says what happened (the generic errno folds a revoked key together with local bugs, and
/// an unknown peer together with a lost connection); elsewhere the generic errno does.
pub fn classify(efa: bool, errno: Option<i32>, prov_errno: Option<i32>) -> ReadFailure {
    if efa {
        if let Some(p) = prov_errno.filter(|p| *p > 0) {
            return match p {
                // The device's "remote bad address": a revoked key or a range outside
                // the region.
                7 => ReadFailure::KeyRevoked,
                // The target has no address for this reader (efa-direct).
                14 => ReadFailure::UnknownPeer,
                // The peer aborted or is unreachable, or (4124, 4126) the RDM layer gave up
                // on an unresponsive peer.
                13 | 15 | 4124 | 4126 => ReadFailure::ConnectionLost,
                // Invalid local key (4), invalid address handle (5) and the rest: local
                // bugs or unsupported operations, never "revoked".
                _ => ReadFailure::Other,
            };
        }
    }
    match errno {
        Some(
            libc::ECANCELED
            | libc::EACCES
            | libc::EINVAL
            | libc::EFAULT
            | libc::EPERM
            | libc::EKEYREJECTED,
        ) => ReadFailure::KeyRevoked,
        Some(
            libc::ENOTCONN
            | libc::ECONNRESET
            | libc::ECONNREFUSED
            | libc::ECONNABORTED
            | libc::EPIPE
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::ETIMEDOUT
            | libc::EIO
            | libc::ESHUTDOWN,
        ) => ReadFailure::ConnectionLost,
        _ => ReadFailure::Other,
    }
}

/// Whether an endpoint of `provider` stays usable after a read with a revoked key. On `efa`
/// (SRD) such a read is a per-request error, and `sockets` keeps its connection; on
/// `tcp;ofi_rxm` the connection is torn down, so the reader must open a new endpoint. `shm`
/// has no connection to lose (its fast path does not even look at the key).
pub fn survives_revoked_key(provider: &str) -> bool {
    is_efa(provider) || provider == "sockets" || is_shm(provider)
}

/// Whether `provider` verifies the remote key of a read. `shm`'s fast path copies with
/// `process_vm_readv` and never looks at the key, so rotating a key fences nothing there:
/// frame validation is the fence (a reused arena no longer holds the frame a descriptor
/// names), and any process allowed to ptrace the gateway can read its memory anyway.
pub fn checks_remote_keys(provider: &str) -> bool {
    !is_shm(provider)
}

/// Longest the progress thread sleeps between polls of a queue without a wait object. The
/// reads of most such providers wait on it (EFA's handshakes and emulated reads), so it
/// stays at a few microseconds; `shm`'s reads copy from the reader's side and only a new
/// peer's first contact waits on the gateway, so an idle `shm` gateway sleeps a
/// millisecond at a time instead of spinning a core.
pub fn max_idle_sleep(provider: &str) -> std::time::Duration {
    if is_shm(provider) {
        std::time::Duration::from_millis(1)
    } else {
        std::time::Duration::from_micros(5)
    }
}

/// Bytes a memory budget locks: every arena is registered once, and a key refresh registers
/// an arena a second time while its old region retires (at most every arena at once).
pub fn locked_bytes(budget: u64, key_refresh: bool) -> u64 {
    if key_refresh {
        budget.saturating_mul(2)
    } else {
        budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(provider: &str, node: Option<&str>) -> FabricConfig {
        FabricConfig::new(provider, node.map(str::to_owned))
    }

    #[test]
    fn efa_asks_for_the_efa_fabric_without_a_node_or_a_receive_size() {
        let p = Plan::new(
            &cfg("efa", Some("10.0.0.5")).with_domain(Some("rdmap16s27-rdm".into())),
            fi_version(1, 17),
            fi_version(2, 3),
        );
        assert_eq!(p.node, None);
        assert_eq!(p.ignored_node.as_deref(), Some("10.0.0.5"));
        let shm = |n: Option<&str>| Plan::new(&cfg("shm", n), fi_version(1, 17), fi_version(1, 17));
        let (a, b) = (shm(Some("127.0.0.1")), shm(Some("127.0.0.1")));
        assert!(a.node.as_deref().is_some_and(|n| n.starts_with("rasa-")));
        assert_ne!(a.node, b.node, "every shm endpoint has a name of its own");
        assert_eq!(p.fabric_name, Some("efa"));
        assert_eq!(p.domain_name.as_deref(), Some("rdmap16s27-rdm"));
        assert_eq!(p.rx_size, None);
        assert_eq!(p.api_version, fi_version(1, 18));
    }

    #[test]
    fn software_providers_bind_the_node_and_keep_small_queues() {
        for provider in ["tcp;ofi_rxm", "sockets", "tcp"] {
            let p = Plan::new(
                &cfg(provider, Some("127.0.0.1")),
                fi_version(1, 17),
                fi_version(1, 17),
            );
            assert_eq!(p.node.as_deref(), Some("127.0.0.1"), "{provider}");
            assert_eq!(p.ignored_node, None);
            assert_eq!(p.fabric_name, None);
            assert_eq!(p.rx_size, Some(SOFTWARE_RX_SIZE));
        }
    }

    #[test]
    fn the_api_version_is_at_least_1_18_but_never_beyond_the_runtime() {
        let v = fi_version;
        assert_eq!(requested_api(v(1, 17), v(1, 17)), v(1, 17));
        assert_eq!(requested_api(v(1, 17), v(1, 22)), v(1, 18));
        assert_eq!(requested_api(v(2, 3), v(2, 6)), v(2, 3));
        assert_eq!(requested_api(v(2, 3), v(2, 0)), v(2, 0));
        assert_eq!(version_text(v(2, 6)), "2.6");
    }

    #[test]
    fn efa_is_recognised_by_its_first_provider_name() {
        assert!(is_efa("efa"));
        assert!(is_efa("efa;ofi_rxm"));
        assert!(!is_efa("tcp;ofi_rxm"));
        assert!(!is_efa("efa-direct-ish"));
    }

    #[test]
    fn efa_failures_are_classified_by_the_providers_own_number() {
        use ReadFailure::*;
        let einval = Some(libc::EINVAL);
        let enotconn = Some(libc::ENOTCONN);
        // EFA folds all of these into EINVAL or ENOTCONN; only prov_errno tells them apart.
        assert_eq!(classify(true, einval, Some(7)), KeyRevoked);
        assert_eq!(classify(true, einval, Some(4)), Other);
        assert_eq!(classify(true, einval, Some(5)), Other);
        assert_eq!(classify(true, enotconn, Some(14)), UnknownPeer);
        for p in [13, 15, 4124, 4126] {
            assert_eq!(classify(true, enotconn, Some(p)), ConnectionLost, "{p}");
        }
        // Without a provider number, and on other providers, the errno decides.
        assert_eq!(classify(true, einval, None), KeyRevoked);
        assert_eq!(classify(false, einval, Some(4)), KeyRevoked);
        assert_eq!(classify(false, Some(libc::ECANCELED), Some(0)), KeyRevoked);
        assert_eq!(classify(false, enotconn, Some(14)), ConnectionLost);
        assert_eq!(classify(false, Some(libc::ENOMEM), None), Other);
    }

    #[test]
    fn only_rxm_loses_its_connection_on_a_revoked_key() {
        assert!(survives_revoked_key("efa"));
        assert!(survives_revoked_key("sockets"));
        assert!(!survives_revoked_key("tcp;ofi_rxm"));
        assert!(!survives_revoked_key("verbs;ofi_rxm"));
    }

    #[test]
    fn a_key_refresh_can_lock_the_budget_twice() {
        assert_eq!(locked_bytes(1 << 30, false), 1 << 30);
        assert_eq!(locked_bytes(1 << 30, true), 2 << 30);
    }
}
