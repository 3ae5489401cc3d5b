//! Chaos runs (issue 65): clients of every kind read and write a few keys through random
//! members while faults are injected, every operation is recorded, and each key's history
//! is checked against the register model of `docs/design/consistency.md` with the
//! linearizability checker of `rasa_tests::history`.
//!
//! - `cargo test -p rasa-tests --test chaos`: a run with a fixed seed (`chaos::fixed`), one
//!   with a random seed (`chaos::random`, printed; `CHAOS_SEED=N` repeats it), and runs with
//!   each planted bug until the checker finds it (`chaos::planted::untied_copy`,
//!   `chaos::planted::early_ack`; `CHAOS_PLANT_SECONDS`, 25 s by default; `CHAOS_NO_PLANT=1`
//!   runs their schedules without the bug) — all in `make test`; `CHAOS_ROUND_SECONDS` sets
//!   the other runs' length, 40 s by default;
//!   `CHAOS_NO_FAULTS=1` runs the clients alone;
//!   `CHAOS_FAULTS=kill,freeze,etcd-cut,cut,etcd-pause,etcd-drop,drop` injects only those
//!   kinds (`etcd-drop` and `drop`, silent partitions that hold a member's bytes instead of
//!   refusing them, only when named);
//!   `CHAOS_SETUP=origin|origin-disk|near|near-disk` is the random seed's set-up;
//!   `CHAOS_MEMBER_LOG` is the members' `RUST_LOG`, their logs named in the output;
//!   `CHAOS_CLIENT_LOG` is the clients' own, to stderr).
//! - `make chaos` (`CHAOS_SECONDS=600` by default): runs of many seeds and set-ups (origin
//!   or not, disk tier or not, near copies or not), every kind of fault, the silent
//!   partitions included, until the time is up.
//!
//! The last line reads `checked N operations, F faults, A anomalies`.

mod clients;
mod fleet;
mod nemesis;
mod runs;

use std::time::Duration;

use fleet::Setup;
use runs::{run, Report};

/// A named test of this harness.
struct Case {
    name: &'static str,
    body: fn(&tokio::runtime::Runtime) -> Result<Report, String>,
}

const CASES: &[Case] = &[
    Case {
        name: "chaos::fixed",
        body: fixed,
    },
    Case {
        name: "chaos::random",
        body: random,
    },
    Case {
        name: "chaos::planted::untied_copy",
        body: planted_untied_copy,
    },
    Case {
        name: "chaos::planted::early_ack",
        body: planted_early_ack,
    },
    Case {
        name: "chaos::long",
        body: long,
    },
];

const WITH_ORIGIN: Setup = Setup {
    origin: true,
    disk: false,
    near: false,
    plant: None,
    faults: None,
    on_owner: false,
    keys: 4,
};

/// The set-ups' names, as `CHAOS_SETUP` takes them.
const SETUP_NAMES: [&str; 4] = ["origin", "origin-disk", "near", "near-disk"];

/// The set-ups runs rotate through.
const SETUPS: [Setup; 4] = [
    WITH_ORIGIN,
    Setup {
        disk: true,
        ..WITH_ORIGIN
    },
    Setup {
        origin: false,
        near: true,
        ..WITH_ORIGIN
    },
    Setup {
        origin: false,
        near: true,
        disk: true,
        plant: None,
        faults: None,
        on_owner: false,
        keys: 4,
    },
];

fn seconds(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

/// The fixed seed (1), with an origin and a disk tier: a run of `CHAOS_ROUND_SECONDS`
/// (40 s). `make test` runs it.
fn fixed(rt: &tokio::runtime::Runtime) -> Result<Report, String> {
    let secs = seconds("CHAOS_ROUND_SECONDS", 40);
    let setup = Setup {
        disk: true,
        ..WITH_ORIGIN
    };
    rt.block_on(run(setup, 1, secs))
}

/// A random seed (printed; `CHAOS_SEED=N` repeats it) on the set-up it picks, or on
/// `CHAOS_SETUP` (one of [`SETUP_NAMES`]): a run of `CHAOS_ROUND_SECONDS` (40 s).
fn random(rt: &tokio::runtime::Runtime) -> Result<Report, String> {
    let secs = seconds("CHAOS_ROUND_SECONDS", 40);
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u32>) as u64;
    let setup = match std::env::var("CHAOS_SETUP") {
        Ok(name) => match SETUP_NAMES.iter().position(|n| *n == name) {
            Some(i) => SETUPS[i],
            None => {
                return Err(format!(
                    "CHAOS_SETUP is one of {SETUP_NAMES:?}, not {name:?}"
                ))
            }
        },
        Err(_) => SETUPS[seed as usize % SETUPS.len()],
    };
    rt.block_on(run(setup, seed, secs))
}

/// A copy served without checking the owner it is tied to: must be caught. Only the tie
/// guards a copy its member made while it owned the key, kept while another member owned
/// it and took writes, and served once the key came back: a member cut from etcd past the
/// TTL gives its keys to the next choice, which holds copies of them from then on, and
/// takes them back when it returns. So the faults are cuts from etcd alone, every one of
/// the member owning most keys: from its second cut on, each shows the next choice its old
/// copies again (the other guards — a member back from a lost lease revalidates what it
/// holds, a member serving a key it does not own confirms its copy — hold otherwise).
fn planted_untied_copy(rt: &tokio::runtime::Runtime) -> Result<Report, String> {
    let setup = Setup {
        disk: true,
        faults: Some("etcd-cut"),
        on_owner: true,
        keys: 16,
        ..WITH_ORIGIN
    };
    planted(rt, "untied-copy", setup, &[2, 1, 3, 4, 5])
}

/// A write acknowledged before the near copies of its key are revoked: must be caught.
fn planted_early_ack(rt: &tokio::runtime::Runtime) -> Result<Report, String> {
    let setup = Setup {
        origin: false,
        near: true,
        ..WITH_ORIGIN
    };
    planted(rt, "early-ack", setup, &[1, 2, 3, 4, 5])
}

/// Runs with `bug` planted until the checker reports an anomaly (up to five seeds, in
/// the order given), each of `CHAOS_PLANT_SECONDS` (25 s). `CHAOS_NO_PLANT=1` runs the same
/// schedules without the bug: the control, which must find nothing.
fn planted(
    rt: &tokio::runtime::Runtime,
    bug: &'static str,
    setup: Setup,
    seeds: &[u64],
) -> Result<Report, String> {
    let secs = seconds("CHAOS_PLANT_SECONDS", 25);
    if std::env::var_os("CHAOS_NO_PLANT").is_some() {
        let mut total = Report::default();
        for &seed in seeds {
            total.add(rt.block_on(run(setup, seed, secs))?);
        }
        println!("without the bug '{bug}', its schedules: {}", total.line());
        return Ok(total);
    }
    let setup = Setup {
        plant: Some(bug),
        ..setup
    };
    for &seed in seeds {
        match rt.block_on(run(setup, seed, secs)) {
            Err(e) if e.contains("\nanomaly: ") => {
                println!("planted bug '{bug}' found (seed {seed}):\n{e}");
                return Ok(Report::default());
            }
            Err(e) => {
                println!("planted bug '{bug}' not found with seed {seed}, other failures:\n{e}")
            }
            Ok(_) => println!("planted bug '{bug}' not found with seed {seed}"),
        }
    }
    Err(format!(
        "the checker did not find the planted bug '{bug}' in {} runs",
        seeds.len()
    ))
}

/// Runs of many seeds until `CHAOS_SECONDS` is up, rotating through the set-ups.
fn long(rt: &tokio::runtime::Runtime) -> Result<Report, String> {
    let total_time = seconds("CHAOS_SECONDS", 0);
    let round = seconds("CHAOS_ROUND_SECONDS", 40);
    let started = std::time::Instant::now();
    let base = rand::random::<u32>() as u64;
    let mut total = Report::default();
    let mut failures = Vec::new();
    let mut i = 0u64;
    // Every kind of fault, the silent partitions included, unless CHAOS_FAULTS says.
    let faults = match std::env::var_os("CHAOS_FAULTS") {
        Some(_) => None,
        None => Some(nemesis::ALL_KINDS),
    };
    while started.elapsed() + round / 2 < total_time {
        let seed = base + i;
        let setup = Setup {
            faults,
            ..SETUPS[i as usize % SETUPS.len()]
        };
        match rt.block_on(run(setup, seed, round)) {
            Ok(r) => total.add(r),
            Err(e) => {
                println!("{e}");
                failures.push(seed);
                total.anomalies += 1;
            }
        }
        i += 1;
    }
    println!("seeds {base}..{}; failed seeds: {failures:?}", base + i);
    if failures.is_empty() {
        Ok(total)
    } else {
        Err(total.line())
    }
}

fn main() {
    if let Ok(file) = std::env::var("CHAOS_HISTORY") {
        runs::recheck(&file);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let (mut list, mut exact) = (false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => list = true,
            "--exact" => exact = true,
            "--skip" => skips.extend(it.next().cloned()),
            "--test-threads" | "--format" | "--color" | "-Z" => {
                it.next();
            }
            s if s.starts_with('-') => {}
            s => filters.push(s.to_owned()),
        }
    }
    let long_run = std::env::var_os("CHAOS_SECONDS").is_some();
    let chosen: Vec<&Case> = CASES
        .iter()
        .filter(|c| (c.name == "chaos::long") == long_run)
        .filter(|c| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        c.name == f
                    } else {
                        c.name.contains(f.as_str())
                    }
                })
        })
        .filter(|c| !skips.iter().any(|s| c.name.contains(s.as_str())))
        .collect();
    if list {
        for c in &chosen {
            println!("{}: test", c.name);
        }
        return;
    }
    if let Ok(filter) = std::env::var("CHAOS_CLIENT_LOG") {
        // The clients' own logs (the Rust SDK's failovers), to stderr, stamped in UTC.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut total = Report::default();
    let mut failed = Vec::new();
    for c in &chosen {
        println!("test {} ...", c.name);
        match (c.body)(&rt) {
            Ok(r) => {
                println!("test {} ... ok", c.name);
                total.add(r);
            }
            Err(e) => {
                println!("test {} ... FAILED\n{e}", c.name);
                failed.push(c.name);
            }
        }
    }
    if !chosen.is_empty() {
        println!("failed: {failed:?}");
        println!("{}", total.line());
    }
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
