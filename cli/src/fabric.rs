//! `rasa fabric check`: is this host ready to read one-sided?

use std::time::Duration;

use rasa_client::{with_causes, Client};

use crate::Cli;

/// `rasa fabric check`: the same report as `rasa-gateway fabric check`, for a client.
pub(crate) async fn check(
    cli: &Cli,
    provider: Option<String>,
    domain: Option<String>,
    largest: u64,
) -> Result<bool, String> {
    let provider = match provider {
        Some(p) => p,
        None => {
            let client = Client::builder(&cli.endpoint)
                .timeout(cli.timeout.min(Duration::from_secs(3)))
                .build()
                .map_err(|e| with_causes(&e))?;
            match client.fabric_info().await {
                Ok(info) => info.provider.unwrap_or_else(|| "tcp;ofi_rxm".into()),
                Err(e) => {
                    eprintln!(
                        "rasa: cannot ask {} for its provider ({}); checking tcp;ofi_rxm (--provider to choose)",
                        cli.endpoint,
                        with_causes(&e)
                    );
                    "tcp;ofi_rxm".into()
                }
            }
        }
    };
    let node = cli
        .fabric_addr
        .clone()
        .or_else(|| rasa_client::default_fabric_addr(&cli.endpoint));
    let target = rasa_fastpath::check::Target {
        fabric: rasa_fastpath::fabric::FabricConfig::new(provider, node).with_domain(domain),
        registered: largest.next_power_of_two(),
        key_refresh: false,
    };
    let report = tokio::task::spawn_blocking(move || rasa_fastpath::check::run(&target))
        .await
        .map_err(|e| format!("fabric check failed: {e}"))?;
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serializes")
        );
    } else {
        print!("{}", report.text());
    }
    Ok(!report.failed())
}
