//! `fabric check`: what an operator runs on the target host before going live — the
//! libfabric found (versions, where it came from), the providers and domains it offers, the
//! one Rasa would choose and how it registers memory, whether RDMA read is native, and the
//! memory limits that registration runs into. Each item has a verdict and, when it is not
//! fine, the fix.

use std::path::Path;

use serde::Serialize;

use crate::fabric::plan::{self, Plan};
use crate::fabric::{FabricConfig, Node};

/// How an item looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Fine.
    Ok,
    /// Works, but not as it should in production.
    Warn,
    /// Will not work.
    Fail,
    /// For information.
    Info,
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Item {
    /// What was checked.
    pub name: &'static str,
    /// What was found.
    pub value: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What to do about it, when the verdict is not `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Every item, in order.
    pub items: Vec<Item>,
}

impl Report {
    /// Whether any item failed.
    pub fn failed(&self) -> bool {
        self.items.iter().any(|i| i.verdict == Verdict::Fail)
    }

    /// One line per item: `verdict  name: value` and the fix indented below.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for i in &self.items {
            let tag = match i.verdict {
                Verdict::Ok => "ok  ",
                Verdict::Warn => "WARN",
                Verdict::Fail => "FAIL",
                Verdict::Info => "info",
            };
            out.push_str(&format!("{tag}  {}: {}\n", i.name, i.value));
            if let Some(fix) = &i.fix {
                out.push_str(&format!("      fix: {fix}\n"));
            }
        }
        out
    }
}

/// What the host is checked for.
#[derive(Clone, Debug)]
pub struct Target {
    /// Provider, local address and domain, as the gateway or client would open them.
    pub fabric: FabricConfig,
    /// Bytes of memory that will be registered (the gateway's budget; a client's scratch).
    pub registered: u64,
    /// Whether keys are refreshed (each arena then registered twice for a while).
    pub key_refresh: bool,
}

fn item(name: &'static str, value: String, verdict: Verdict, fix: Option<String>) -> Item {
    Item {
        name,
        value,
        verdict,
        fix,
    }
}

/// `runtime X.Y, headers X.Y` of the libfabric in use.
pub fn versions() -> String {
    match crate::fabric::library_versions() {
        Ok((runtime, header)) => format!(
            "runtime {}, headers {}",
            plan::version_text(runtime),
            plan::version_text(header)
        ),
        Err(why) => why,
    }
}

/// Runs every check for `target`.
pub fn run(target: &Target) -> Report {
    let mut items = Vec::new();
    let (runtime, header) = match crate::fabric::library_versions() {
        Ok(v) => v,
        Err(why) => {
            items.push(item(
                "libfabric library",
                why,
                Verdict::Fail,
                Some(format!(
                    "install libfabric (Debian/Ubuntu: apt-get install libfabric1; AWS: the EFA installer), or set {} to its path",
                    crate::library::ENV
                )),
            ));
            return Report { items };
        }
    };
    let efa = plan::is_efa(&target.fabric.provider);
    let chosen = Plan::new(&target.fabric, header, runtime);
    let version_verdict = if runtime < plan::MIN_API && efa {
        Verdict::Fail
    } else if runtime < plan::MIN_API {
        Verdict::Info
    } else {
        Verdict::Ok
    };
    items.push(item(
        "libfabric version",
        format!(
            "runtime {}, headers {}, API requested {}",
            plan::version_text(runtime),
            plan::version_text(header),
            plan::version_text(chosen.api_version)
        ),
        version_verdict,
        (version_verdict == Verdict::Fail).then(|| {
            "install AWS's EFA software (libfabric under /opt/amazon/efa); below API 1.18 EFA emulates RDMA read on p4d/p5".to_owned()
        }),
    ));
    let library = loaded_library().unwrap_or_else(|| "(not found in /proc/self/maps)".into());
    let from_efa_installer = library.starts_with("/opt/amazon/efa");
    let efa_installed =
        Path::new("/opt/amazon/efa/lib").exists() || Path::new("/opt/amazon/efa/lib64").exists();
    items.push(item(
        "libfabric library",
        format!(
            "{library} ({})",
            if from_efa_installer {
                "AWS EFA installer"
            } else {
                "distribution or other"
            }
        ),
        if efa && !from_efa_installer {
            Verdict::Warn
        } else {
            Verdict::Ok
        },
        (efa && !from_efa_installer).then(|| {
            if efa_installed {
                "the EFA installer's libfabric exists but another was loaded: unset RASA_LIBFABRIC, or set it to /opt/amazon/efa/lib64/libfabric.so.1".to_owned()
            } else {
                "install the AWS EFA software (aws-efa-installer), whose libfabric has the current efa provider".to_owned()
            }
        }),
    ));
    items.push(providers_item(chosen.api_version, &target.fabric.provider));
    match Node::open(&target.fabric) {
        Ok(node) => chosen_items(&mut items, &node, &chosen, efa),
        Err(e) => items.push(item(
            "chosen provider",
            format!("{}: cannot open: {e}", target.fabric.provider),
            Verdict::Fail,
            Some(if efa {
                "check the security group allows all traffic from itself, that the instance type has EFA, and --fabric-domain (see the domains above)".into()
            } else {
                "pick a provider from the list above with --fabric-provider, or --fabric-addr a local address".into()
            }),
        )),
    }
    items.push(memlock_item(target, efa));
    items.push(huge_pages_item(efa));
    Report { items }
}

/// The path of the libfabric this process loaded.
fn loaded_library() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libfabric.so"))
        .map(str::to_owned)
}

fn providers_item(api_version: u32, wanted: &str) -> Item {
    let list = crate::fabric::offered(api_version);
    // provider → its domains (NICs), in the order libfabric ranks them.
    let mut grouped: Vec<(&str, Vec<&str>)> = Vec::new();
    for (p, _, d) in &list {
        match grouped.iter_mut().find(|(q, _)| q == p) {
            Some((_, ds)) if !ds.contains(&d.as_str()) => ds.push(d),
            Some(_) => {}
            None => grouped.push((p, vec![d])),
        }
    }
    let value = if list.is_empty() {
        "none offers RMA reads on RDM endpoints".to_owned()
    } else {
        grouped
            .iter()
            .map(|(p, ds)| format!("{p} [domains: {}]", ds.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let first = wanted.split(';').next().unwrap_or(wanted);
    let found = list
        .iter()
        .any(|(p, _, _)| p == wanted || p.split(';').any(|part| part == first));
    item(
        "providers",
        value,
        if found { Verdict::Ok } else { Verdict::Fail },
        (!found).then(|| {
            format!("provider {wanted:?} is not offered here: choose one of these with --fabric-provider")
        }),
    )
}

fn chosen_items(items: &mut Vec<Item>, node: &Node, chosen: &Plan, efa: bool) {
    let why = if efa {
        "fabric name efa asked for (never efa-direct), no local address (EFA devices are chosen by domain)"
    } else {
        "bound to the configured local address"
    };
    let wrong_fabric = efa && node.provided().fabric_name() != "efa";
    items.push(item(
        "chosen provider",
        format!(
            "{} on fabric {}, domain {} ({why}{})",
            node.provided().provider(),
            node.provided().fabric_name(),
            node.provided().domain_name(),
            chosen
                .ignored_node
                .as_deref()
                .map(|n| format!("; --fabric-addr {n} ignored"))
                .unwrap_or_default()
        ),
        if wrong_fabric {
            Verdict::Fail
        } else {
            Verdict::Ok
        },
        wrong_fabric.then(|| {
            "the efa fabric was not chosen: report this with the output of fi_info -p efa"
                .to_owned()
        }),
    ));
    items.push(item(
        "memory registration",
        format!(
            "mr_mode {:#x}: {} addresses, {} keys ({} bytes)",
            node.provided().mr_mode(),
            if node.provided().virtual_addressing() {
                "virtual"
            } else {
                "offset"
            },
            if node.provided().provider_keys() {
                "provider-chosen"
            } else {
                "requested (unpredictable, never reused)"
            },
            node.provided().key_size()
        ),
        Verdict::Info,
        None,
    ));
    let (value, verdict, fix) = match node.emulated_read() {
        Some(false) => ("native (device RDMA read)".to_owned(), Verdict::Ok, None),
        Some(true) => (
            "EMULATED in software: reads cost the gateway's CPU".to_owned(),
            Verdict::Warn,
            Some("use an instance type with RDMA read (p4d, p5, trn1, …), one device generation on both sides, and API ≥ 1.18".to_owned()),
        ),
        None if efa => (
            "unknown (the provider did not say)".to_owned(),
            Verdict::Warn,
            Some("upgrade libfabric (the EFA installer's)".to_owned()),
        ),
        None => (
            "software provider: reads are served by the gateway's progress thread".to_owned(),
            Verdict::Info,
            None,
        ),
    };
    items.push(item("RDMA read", value, verdict, fix));
}

/// `RLIMIT_MEMLOCK` (soft limit; `None`: unlimited).
pub fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return None;
    }
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Whether `limit` (`None`: unlimited) lets `needed` bytes be registered, on a provider that
/// pins registered memory (`pins`).
pub fn memlock_verdict(limit: Option<u64>, needed: u64, pins: bool) -> Verdict {
    match limit {
        None => Verdict::Ok,
        Some(l) if l >= needed => Verdict::Ok,
        Some(_) if pins => Verdict::Fail,
        // Software providers do not pin, so it works here, but not on a NIC that does.
        Some(_) => Verdict::Warn,
    }
}

fn memlock_item(target: &Target, efa: bool) -> Item {
    let limit = memlock_limit();
    let needed = plan::locked_bytes(target.registered, target.key_refresh);
    let verdict = memlock_verdict(limit, needed, efa);
    let shown = limit.map_or("unlimited".to_owned(), |l| format!("{l} bytes"));
    item(
        "locked memory (RLIMIT_MEMLOCK)",
        format!(
            "{shown}; registration needs up to {needed} bytes{}",
            if efa {
                ""
            } else {
                " (this software provider does not pin memory; a NIC's provider does)"
            }
        ),
        verdict,
        (verdict != Verdict::Ok).then(|| {
            "raise it: docker run --ulimit memlock=-1, systemd LimitMEMLOCK=infinity, or /etc/security/limits.conf `* - memlock unlimited`".to_owned()
        }),
    )
}

fn huge_pages_item(efa: bool) -> Item {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let usable = thp == "always" || thp == "madvise";
    item(
        "huge pages",
        format!("transparent huge pages: {thp}; arenas that are a multiple of 2 MiB are mapped on 2 MiB boundaries and advised MADV_HUGEPAGE"),
        match (usable, efa) {
            (true, _) => Verdict::Ok,
            (false, true) => Verdict::Warn,
            (false, false) => Verdict::Info,
        },
        (!usable && efa).then(|| {
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (4 KiB pages exhaust the NIC's ~24 M page-table entries near 95 GB)".to_owned()
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_fails_only_where_registration_pins_memory() {
        assert_eq!(memlock_verdict(None, 1 << 40, true), Verdict::Ok);
        assert_eq!(memlock_verdict(Some(1 << 30), 1 << 30, true), Verdict::Ok);
        assert_eq!(
            memlock_verdict(Some(64 << 10), 1 << 30, true),
            Verdict::Fail
        );
        assert_eq!(
            memlock_verdict(Some(64 << 10), 1 << 30, false),
            Verdict::Warn
        );
    }

    #[test]
    fn the_report_on_this_machine_names_the_software_provider_and_passes() {
        let report = run(&Target {
            fabric: FabricConfig::new("tcp;ofi_rxm", Some("127.0.0.1".into())),
            registered: 64 << 20,
            key_refresh: true,
        });
        let text = report.text();
        assert!(!report.failed(), "{text}");
        assert!(text.contains("libfabric version: runtime "), "{text}");
        assert!(text.contains("chosen provider: tcp;ofi_rxm"), "{text}");
        assert!(text.contains("libfabric.so"), "{text}");
        let bogus = run(&Target {
            fabric: FabricConfig::new("no-such-provider", None),
            registered: 0,
            key_refresh: false,
        });
        assert!(bogus.failed(), "{}", bogus.text());
    }
}
