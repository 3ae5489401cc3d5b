//! The `rasa-gateway` binary: parse flags, set up logs and metrics, serve until signalled.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rasa_gateway::cluster::Cluster;
use rasa_gateway::config::file::{self, LoadError, Loaded};
use rasa_gateway::config::{describe, Args, Command, ConfigCommand, FabricCommand, TlsCommand};
use rasa_gateway::http::{doc, AppState, HttpConfig};
use rasa_gateway::objects::namespaces::{self, Namespaces};
use rasa_gateway::objects::Objects;
use rasa_gateway::server::{self, ServeOptions};
use rasa_gateway::store::Store;
use rasa_gateway::tokens::TokenFile;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    log_panics();
    rasa_fastpath::report_fatal_signals("rasa-gateway");
    // Before any thread starts (the environment may only change then).
    let provider_defaults = rasa_fastpath::library::apply_provider_defaults();
    let loaded = match file::load(std::env::args_os().collect()) {
        Ok(loaded) => loaded,
        Err(LoadError::Line(e)) => e.exit(),
        Err(LoadError::File(why)) => {
            eprintln!("rasa-gateway: the configuration file is not right:\n{why}");
            return ExitCode::from(2);
        }
    };
    if let Some(Command::Config(cmd)) = &loaded.args.command {
        return config(cmd, &loaded);
    }
    let args = loaded.args;
    if let Err(why) = args.validate() {
        eprintln!("rasa-gateway: {why}");
        return ExitCode::from(2);
    }
    match &args.command {
        Some(Command::Openapi) => {
            print!("{}", doc::openapi_json());
            return ExitCode::SUCCESS;
        }
        Some(Command::Token(cmd)) => return exit(rasa_gateway::credentials::token(cmd)),
        Some(Command::S3Key(cmd)) => return exit(rasa_gateway::credentials::s3_key(cmd)),
        Some(Command::Fabric(FabricCommand::Check { json })) => {
            let report = rasa_fastpath::check::run(&args.fabric_target());
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("the report serializes")
                );
            } else {
                print!("{}", report.text());
            }
            return if report.failed() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
        Some(Command::Tls(TlsCommand::SelfSigned { hosts, out, days })) => {
            return exit(rasa_gateway::certs::self_signed(hosts, out, *days))
        }
        Some(Command::Config(_)) | None => {}
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: files, journald and container logs get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(why) = provider_defaults {
        tracing::warn!(%why, "libfabric provider defaults not applied");
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rasa-gateway: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rasa-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `rasa-gateway config …`.
fn config(cmd: &ConfigCommand, loaded: &Loaded) -> ExitCode {
    match cmd {
        ConfigCommand::Example => print!("{}", describe::example()),
        ConfigCommand::Reference => print!("{}", describe::reference()),
        ConfigCommand::Show => {
            if let Err(why) = loaded.args.validate() {
                eprintln!("rasa-gateway: {why}");
                return ExitCode::from(2);
            }
            print!("{}", describe::show(loaded));
        }
        ConfigCommand::Check { file } => match file::check(file) {
            Ok(()) => println!("{}: ok", file.display()),
            Err(why) => {
                eprintln!("{why}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}

/// Every panic is logged with its thread, location, message and a backtrace before the
/// default hook runs: a panic on a background thread (the fabric progress thread) or in a
/// request handler must never pass without a word. A panic on the main thread then ends the
/// process with status 101, and the last log line says why.
/// The exit code of a subcommand: failure with its reason on stderr.
fn exit(done: Result<(), String>) -> ExitCode {
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("rasa-gateway: {why}");
            ExitCode::FAILURE
        }
    }
}

fn log_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a non-text payload)".to_owned());
        let location = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            %location,
            backtrace = %std::backtrace::Backtrace::force_capture(),
            "panic: {message}"
        );
        default(info);
    }));
}

/// The read-through origin `cfg` names, in front of `store`.
async fn read_through(
    args: &Args,
    cfg: rasa_gateway::origin::s3::S3Config,
    store: &Arc<Store>,
) -> Arc<rasa_gateway::origin::readthrough::ReadThrough> {
    let origin = rasa_gateway::origin::s3::S3Origin::new(cfg).await;
    tracing::info!(
        origin = %rasa_gateway::origin::Origin::describe(&origin),
        write_policy = ?args.effective_write_policy(),
        ttl = ?args.origin_ttl,
        "read-through origin"
    );
    let rt = rasa_gateway::origin::readthrough::ReadThrough::new(
        Arc::new(origin),
        Arc::clone(store),
        (!args.origin_ttl.is_zero()).then_some(args.origin_ttl),
        args.negative_ttl,
        args.max_object_size,
        args.negative_cache_size,
    );
    rt.set_range_fill(args.origin_fill);
    rt
}

async fn serve(args: Args) -> Result<(), String> {
    let shutdown =
        server::shutdown_signal().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let tokens = match &args.token_file {
        Some(path) => Some(Arc::new(TokenFile::load(path)?)),
        None => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(server::tls_config(cert, key)?),
        _ => None,
    };
    if let Some(file) = &tokens {
        let file = Arc::clone(file);
        let count = |r| metrics::counter!("rasa_token_reloads_total", "result" => r).increment(1);
        reload_on_sighup("token file", count, move || file.reload())?;
    }
    let fabric = args.start_fast_path()?;
    let recorder = rasa_gateway::http::stats::install_recorder()?;
    let mut store_config = args.store_config();
    if let Some(file) = &args.namespaces {
        // The default namespace's arenas fit what the quotas leave it.
        let size = namespaces::default_arena_size(file, args.memory, args.arena_size)?;
        store_config.arena_size = size as usize;
    }
    let store = Arc::new(Store::new(store_config, fabric));
    let mut disk = args.disk.config();
    if let Some(config) = &mut disk {
        let member = args.cluster.etcd.is_some();
        if member && args.origin.is_none() {
            tracing::warn!("--disk in a --cluster without an --origin starts empty: its keys may have been written on other members while it was away, and nothing could check its old values");
            config.recover = false;
        }
        store
            .tier()
            .attach(rasa_gateway::store::disk::Disk::open(config.clone())?);
    }
    let tick = (args.lease_grace / 2).clamp(Duration::from_millis(10), Duration::from_millis(250));
    tokio::spawn(Arc::clone(&store).run_reclaimer(tick));
    let origin = match args.s3_config() {
        Some(cfg) => Some(read_through(&args, cfg, &store).await),
        None => None,
    };
    if let (Some(rt), Some(disk)) = (&origin, store.disk()) {
        let r = disk.recovered();
        if r.values > 0 && (args.cluster.etcd.is_some() || !r.clean) {
            // Other members may have written this member's keys while it was away, or a
            // crash lost writes not yet on disk: values back from disk are checked against
            // the origin on their next read. (After a clean stop a single gateway's are
            // revalidated after --origin-ttl, as any value: their confirmation time is kept.)
            rt.revalidate_all();
        }
    }
    let objects = Objects::new(store, origin, args.effective_write_policy());
    let namespaces = match &args.namespaces {
        None => Namespaces::single(Arc::clone(&objects)),
        Some(file) => {
            let ns =
                Namespaces::load_beside(Arc::clone(&objects), file, args.arena_size, tick, disk)?;
            let count =
                |r| metrics::counter!("rasa_namespace_reloads_total", "result" => r).increment(1);
            reload_on_sighup("namespaces file", count, {
                let ns = Arc::clone(&ns);
                move || ns.reload()
            })?;
            ns
        }
    };
    let mut state = AppState::new(
        Arc::clone(&objects),
        HttpConfig {
            test_hooks: args.test_hooks,
            tokens: tokens.clone(),
            public_metrics: args.public_metrics,
            max_concurrent_requests: args.max_concurrent_requests,
            max_header_size: args.max_header_size as usize,
            body_timeout: args.body_timeout,
            chunked_upload_memory: args.chunked_upload_memory,
            hosts: Arc::new(args.host_policy(&[])),
            min_upload_rate: args.edge.min_upload_rate,
            ..HttpConfig::new(args.max_object_size, args.max_batch_keys)
        },
    );
    state.metrics = Some(recorder);
    state.namespaces = Arc::clone(&namespaces);
    // Bound now (the port, and its number, are ours), listening only once the node can
    // serve: a cluster member joining refuses connections instead of leaving them queued.
    let socket = rasa_gateway::net::reserve(args.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = socket
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let s3 = rasa_gateway::s3::listener::prepare(
        &args.s3,
        rasa_gateway::s3::listener::Shared {
            objects: Arc::clone(&objects),
            namespaces: Arc::clone(&namespaces),
            origin_location: args.origin.clone(),
            max_object_size: args.max_object_size,
            max_concurrent_requests: args.max_concurrent_requests,
            body_timeout: args.body_timeout,
            max_header_size: args.max_header_size as usize,
            hosts: args.host_policy(&args.s3.s3_domains),
            min_upload_rate: args.edge.min_upload_rate,
        },
    )
    .await?;
    let s3_addr = match &s3 {
        Some(s3) => Some(
            s3.listener
                .local_addr()
                .map_err(|e| format!("cannot read the S3 address: {e}"))?,
        ),
        None => None,
    };
    let cluster = match args.cluster_config(addr, tls.is_some(), s3_addr)? {
        None => None,
        Some(config) => {
            let fabric = rasa_gateway::http::fabric::info(state.store());
            let incarnation = fabric.incarnation.clone();
            let peers = rasa_gateway::cluster::peer_client(
                Duration::from_secs(2),
                args.body_timeout,
                config.ca_file.as_deref(),
            )?;
            let cluster = Cluster::join(config, incarnation, fabric).await?;
            if let Some(rt) = objects.read_through() {
                // Back after its lease was lost: others may have written its keys.
                let stale = Arc::clone(rt);
                cluster.on_rejoin(move || stale.revalidate_all());
                rt.fill_from(rasa_gateway::origin::peers::Peers {
                    cluster: Arc::clone(&cluster),
                    client: peers.clone(),
                });
            }
            if let Some(s3) = &s3 {
                let wide = rasa_gateway::s3::cluster::Wide::new(
                    Arc::clone(&cluster),
                    peers.clone(),
                    args.cluster.cluster_ca_file.as_deref(),
                )?;
                let _ = s3.front.wide.set(wide);
            }
            state.peers = Some(peers);
            state.cluster = Some(Arc::clone(&cluster));
            Some(cluster)
        }
    };
    let listener = socket
        .listen(rasa_gateway::net::BACKLOG)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(
        %addr,
        memory = args.memory,
        arena_size = args.arena_size,
        max_object_size = args.max_object_size,
        lease_ms = args.lease.as_millis() as u64,
        tokens = tokens.as_ref().map_or(0, |t| t.current().len()),
        tls = tls.is_some(),
        max_concurrent_requests = args.max_concurrent_requests,
        "rasa-gateway ready"
    );
    if tokens.is_none() && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "listening beyond loopback with no --token-file: anyone who can reach this port can read, write and obtain descriptors"
        );
    }
    if tls.is_none() && tokens.is_some() && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "bearer tokens over plain HTTP beyond loopback: anyone on the path can copy them; use --tls-cert/--tls-key or a TLS proxy"
        );
    }
    // One line on stdout per listener, for people and for tests that bind port 0.
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "rasa-gateway listening on {scheme}://{addr}");
    if let Some(s3) = &s3 {
        let at = s3
            .listener
            .local_addr()
            .map_err(|e| format!("cannot read the S3 address: {e}"))?;
        if s3.open && !at.ip().is_loopback() {
            tracing::warn!(%at, "the S3 listener has no --s3-credentials-file: anyone who can reach it can read and write");
        }
        let _ = writeln!(out, "rasa-gateway S3 on {scheme}://{at}");
    }
    let _ = out.flush();
    drop(out);
    let listeners = 1 + usize::from(s3.is_some());
    let fd_limit = server::gate::raise_fd_limit();
    let options = ServeOptions {
        header_timeout: args.header_timeout,
        send_timeout: args.send_timeout,
        tls,
        first_byte_timeout: args.edge.first_byte_timeout,
        max_connections: args
            .edge
            .max_connections
            .unwrap_or_else(|| server::gate::default_max_connections(fd_limit, listeners)),
        listener: "http",
        reserve: server::Reserve {
            allowed: rasa_gateway::http::ops::is_health_or_admin,
            refuse: rasa_gateway::http::ops::connection_limit_refusal,
        },
    };
    if let Some(fabrics) = state.store().fabric() {
        server::sweeps::spawn(fabrics, args.edge.first_byte_timeout);
    }
    let store = Arc::clone(state.store());
    let leaving = cluster.clone();
    // Both listeners stop together: on the signal, after a cluster member's drain.
    let shutdown = futures_util::FutureExt::shared(Box::pin(async move {
        shutdown.await;
        if let Some(cluster) = &leaving {
            drain(cluster, &store, args.lease_grace).await;
        }
    }));
    let s3_served = s3.map(|s3| {
        let options = ServeOptions {
            listener: "s3",
            reserve: server::Reserve {
                allowed: |_| false,
                refuse: rasa_gateway::s3::listener::connection_limit_refusal,
            },
            ..options.clone()
        };
        tokio::spawn(server::run(s3.listener, s3.app, options, shutdown.clone()))
    });
    tokio::spawn(rasa_gateway::http::stats::sample_forever(state.clone()));
    let served = server::run(listener, rasa_gateway::http::app(state), options, shutdown)
        .await
        .map_err(|e| format!("server error: {e}"));
    if let Some(s3) = s3_served {
        match s3.await {
            Ok(Err(e)) => tracing::error!(error = %e, "S3 listener error"),
            Err(e) => tracing::error!(error = %e, "S3 listener task failed"),
            Ok(Ok(())) => {}
        }
    }
    if let Some(cluster) = cluster {
        cluster.leave(Duration::from_secs(5)).await;
    }
    write_down(&namespaces, args.disk.disk_shutdown_timeout).await;
    served
}

/// At a clean shutdown, writes the values still only in memory to each namespace's disk
/// tier, within `timeout` (none without one).
async fn write_down(namespaces: &Namespaces, timeout: Duration) {
    if timeout.is_zero() {
        return;
    }
    for ns in namespaces.all() {
        let store = Arc::clone(ns.objects.store());
        if store.disk().is_none() {
            continue;
        }
        let began = std::time::Instant::now();
        let done = tokio::task::spawn_blocking(move || store.tier().spill_all(timeout)).await;
        match done {
            Ok((values, true)) => {
                tracing::info!(namespace = %ns.name, values, took = ?began.elapsed(), "wrote memory's values to the disk tier")
            }
            Ok((values, false)) => {
                tracing::warn!(namespace = %ns.name, values, ?timeout, "the disk tier did not finish writing memory's values in --disk-shutdown-timeout")
            }
            Err(e) => tracing::error!(error = %e, "writing memory's values to disk failed"),
        }
    }
}

/// A cluster member's graceful exit: turn `draining` (other members stop sending it keys),
/// then keep serving HTTP and one-sided reads until the last lease it handed out, plus
/// the grace, has ended.
async fn drain(cluster: &Cluster, store: &Store, grace: Duration) {
    cluster.drain(Duration::from_secs(5)).await;
    let until = store.memory().leases_end() + grace;
    if let Ok(left) = until.duration_since(std::time::SystemTime::now()) {
        tracing::info!(
            ?left,
            "draining: serving until the last lease handed out ends"
        );
        tokio::time::sleep(left).await;
    }
}

/// Reads `what` again (`reload`, which answers how many entries it holds) on every SIGHUP
/// (add or revoke tokens, add or resize namespaces, without losing the values in memory).
/// A file that fails to parse changes nothing and is logged.
#[cfg(unix)]
fn reload_on_sighup(
    what: &'static str,
    count: fn(&'static str),
    reload: impl Fn() -> Result<usize, String> + Send + 'static,
) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup())
        .map_err(|e| format!("cannot install a SIGHUP handler: {e}"))?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            match reload() {
                Ok(n) => {
                    count("ok");
                    tracing::info!(entries = n, "SIGHUP: {what} reloaded");
                }
                Err(e) => {
                    count("error");
                    tracing::error!(error = %e, "SIGHUP: {what} not reloaded; what is in force stays");
                }
            }
        }
    });
    Ok(())
}

#[cfg(not(unix))]
fn reload_on_sighup(
    _: &'static str,
    _: fn(&'static str),
    _: impl Fn() -> Result<usize, String> + Send + 'static,
) -> Result<(), String> {
    Ok(())
}
