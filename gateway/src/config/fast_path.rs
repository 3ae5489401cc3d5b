//! Opening the fast path the flags ask for, at start-up: the locked-memory check, the
//! endpoints of `--fabric-provider`, and what `fabric check` checks (the same target).

use crate::setting::SettingError;
use std::sync::Arc;

use rasa_fastpath::fabrics::Fabrics;

use super::{Args, FastPathMode};

impl Args {
    /// What `fabric check` and start-up check: the fabric as configured, the whole memory
    /// budget registered (twice while keys refresh).
    pub fn fabric_target(&self) -> rasa_fastpath::check::Target {
        rasa_fastpath::check::Target {
            fabric: self.fabric_config(),
            registered: self.memory,
            key_refresh: !self.key_lifetime.is_zero(),
        }
    }

    /// Refuses (`--fast-path on`) or skips (`auto`) the fast path when the locked-memory limit
    /// cannot hold the registered budget on a provider that pins memory; warns where it would
    /// only matter on such a provider.
    fn check_memlock(&self, efa: bool) -> Result<bool, SettingError> {
        use rasa_fastpath::check::{memlock_limit, memlock_verdict, Verdict};
        let target = self.fabric_target();
        let needed =
            rasa_fastpath::fabric::plan::locked_bytes(target.registered, target.key_refresh);
        let limit = memlock_limit();
        match memlock_verdict(limit, needed, efa) {
            Verdict::Fail => {
                let why = format!(
                    "RLIMIT_MEMLOCK is {} bytes but registering --memory needs up to {needed} (twice the budget while keys refresh): raise it (docker run --ulimit memlock=-1, systemd LimitMEMLOCK=infinity)",
                    limit.unwrap_or(0)
                );
                if self.fast_path == FastPathMode::On {
                    return Err(SettingError::said(format!(
                        "cannot start the fast path: {why}"
                    )));
                }
                tracing::warn!("fast path unavailable; serving HTTP only: {why}");
                Ok(false)
            }
            Verdict::Warn => {
                tracing::info!(
                    limit = limit.unwrap_or(0),
                    needed,
                    "RLIMIT_MEMLOCK is below what --memory registers: fine for this software provider, fatal on a NIC that pins memory (EFA); raise it with --ulimit memlock=-1 or LimitMEMLOCK=infinity"
                );
                Ok(true)
            }
            _ => Ok(true),
        }
    }

    /// Opens the fabric endpoints `--fast-path` and `--fabric-provider` ask for: `None` when
    /// it is off, or unavailable under `auto`; an error under `on`.
    pub fn start_fast_path(&self) -> Result<Option<Arc<Fabrics>>, SettingError> {
        if self.fast_path == FastPathMode::Off {
            tracing::info!("fast path off: serving HTTP only");
            return Ok(None);
        }
        let configs = self.fabric_configs();
        let pins = configs
            .iter()
            .any(|c| rasa_fastpath::fabric::plan::is_efa(&c.provider));
        if !self.check_memlock(pins)? {
            return Ok(None);
        }
        match Fabrics::start(&configs) {
            Ok(fabrics) => {
                for server in fabrics.servers() {
                    let node = server.node();
                    if node.emulated_read() == Some(true) {
                        tracing::warn!(
                            provider = node.provided().provider(),
                            "the provider emulates RDMA read in software: one-sided reads cost this gateway's CPU (see rasa-gateway fabric check)"
                        );
                    }
                    tracing::info!(
                        provider = node.provided().provider(),
                        fabric = node.provided().fabric_name(),
                        domain = node.provided().domain_name(),
                        libfabric = %rasa_fastpath::check::versions(),
                        library = rasa_fastpath::library::loaded().map_or("", |l| l.path.as_str()),
                        address_format = %node.provided().address_format(),
                        virtual_addressing = node.provided().virtual_addressing(),
                        provider_keys = node.provided().provider_keys(),
                        progress = if node.waitable() { "blocking" } else { "polling" },
                        "fast path on"
                    );
                }
                Ok(Some(Arc::new(fabrics)))
            }
            Err(e) if self.fast_path == FastPathMode::Auto => {
                tracing::warn!(error = %e, "fast path unavailable; serving HTTP only (use --fast-path on to make this fatal)");
                Ok(None)
            }
            Err(e) => Err(SettingError::said(format!(
                "cannot start the fast path (--fast-path on): {e}"
            ))),
        }
    }
}
