//! One run: a fleet set up as asked, clients of every kind on a few fresh keys, a fault
//! schedule from the seed; then every key's history checked, and what went wrong printed
//! (a smallest failing history per key, bodies that were not values, reads that failed or
//! outlived their timeout).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use rasa_tests::history::{check, shrink, Model, Shown, Verdict};

use crate::clients::{Kind, Recorder, Worker};
use crate::fleet::{Fleet, Setup};
use crate::nemesis::{self, Faults};

/// What a read says when the test origin's object was half written as it streamed.
const TORN_AT_ORIGIN: &str = "the origin failed: reading the body: streaming error";

/// Each client's timeout: every operation ends within it (+10 %).
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// What runs came to.
#[derive(Default, Debug)]
pub struct Report {
    /// Operations checked.
    pub ops: usize,
    /// Faults injected.
    pub faults: usize,
    /// Keys whose history is not linearizable, and bodies that were no value.
    pub anomalies: usize,
}

impl Report {
    /// Adds `r`'s counts.
    pub fn add(&mut self, r: Report) {
        self.ops += r.ops;
        self.faults += r.faults;
        self.anomalies += r.anomalies;
    }

    /// `checked N operations, F faults, A anomalies`.
    pub fn line(&self) -> String {
        format!(
            "checked {} operations, {} faults, {} anomalies",
            self.ops, self.faults, self.anomalies
        )
    }
}

/// One run of `secs` with `seed`: its report, or why it failed (anomalies, failed or late
/// reads), with the fault log and the members' last log lines.
pub async fn run(setup: Setup, seed: u64, secs: Duration) -> Result<Report, String> {
    println!("run: seed {seed}, {setup}, {secs:?}");
    let fleet = Arc::new(Fleet::start(3, setup, "chaos").await);
    let keys: Vec<String> = (0..setup.keys)
        .map(|i| format!("chaos-{seed:x}/k{i}"))
        .collect();
    let rec = Arc::new(Recorder::new());
    let faults = Arc::new(Faults::default());
    let t0 = Instant::now();
    if std::env::var_os("CHAOS_MEMBER_LOG").is_some() {
        // The members' logs are stamped in UTC: time 0 of the report, in their terms.
        let at = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        println!("  time 0 is {at} in the members' logs");
    }
    let until = t0 + secs;
    let kinds = [
        Kind::Http,
        Kind::Sdk,
        Kind::S3,
        Kind::Http,
        Kind::Sdk,
        Kind::S3,
    ];
    let mut tasks: Vec<(String, tokio::task::JoinHandle<()>)> = Vec::new();
    for (i, &k) in kinds.iter().enumerate() {
        let w = Worker::new(i, k, &fleet, seed, TIMEOUT);
        let (keys, rec) = (keys.clone(), Arc::clone(&rec));
        let task = tokio::spawn(async move { w.run(keys, until, &rec).await });
        tasks.push((format!("client {i} ({k:?})"), task));
    }
    let target = setup
        .on_owner
        .then(|| owner_of_most(&keys, fleet.members.len()));
    let (f, fl) = (Arc::clone(&faults), Arc::clone(&fleet));
    let schedule = tokio::spawn(async move {
        let choices = (StdRng::seed_from_u64(seed), setup.faults, target);
        nemesis::run(&fl, choices, t0, until, &f).await
    });
    tasks.push(("the faults".to_owned(), schedule));
    // Every client's operations end within their timeout, and the faults heal: all is
    // done shortly after the run's end, or the run failed (and says what was still busy).
    let done_by = tokio::time::Instant::from_std(until) + Duration::from_secs(45);
    for (what, task) in tasks {
        match tokio::time::timeout_at(done_by, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("seed {seed}: {what} failed: {e}\n{}", fleet.postmortem())),
            Err(_) => {
                return Err(format!(
                    "seed {seed}: {what} still busy 45 s after the run's end (faults so far:\n  {})\n{}",
                    faults.log.lock().unwrap().join("\n  "),
                    fleet.postmortem()
                ))
            }
        }
    }

    let model = if setup.origin {
        Model::Register
    } else {
        Model::CacheRegister
    };
    let mut report = Report {
        faults: faults.count(),
        ..Report::default()
    };
    let mut problems = Vec::new();
    for (key, history) in rec.by_key() {
        report.ops += history.len();
        let started = Instant::now();
        let verdict = check(model, &history, 5_000_000);
        let took = started.elapsed();
        if verdict != Verdict::Linearizable {
            let file = std::env::temp_dir()
                .join(format!("chaos-{seed}-{}.history", key.replace('/', "-")));
            let _ = std::fs::write(&file, Shown(&history).to_string());
            println!("  the whole history of {key}: {}", file.display());
        }
        match verdict {
            Verdict::Linearizable => {}
            Verdict::NotLinearizable => {
                report.anomalies += 1;
                let small = shrink(model, &history);
                problems.push(format!(
                    "anomaly: the history of {key} ({} operations) is not linearizable \
                     ({model:?}); a smallest failing part:\n{}",
                    history.len(),
                    Shown(&small)
                ));
            }
            Verdict::GaveUp => problems.push(format!(
                "the checker gave up on the history of {key} ({} operations) after {took:?}",
                history.len()
            )),
        }
        println!(
            "  {key}: {} operations, checked in {took:?}: {verdict:?}",
            history.len()
        );
    }
    let bad = rec.bad_bodies.lock().unwrap().clone();
    report.anomalies += bad.len();
    problems.extend(bad.into_iter().map(|b| format!("anomaly: {b}")));
    // A read sent to a member that could not be reached then had no one to answer it.
    let (excused, failed): (Vec<_>, Vec<_>) = rec
        .failed_reads
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .partition(|f| {
            f.member
                .is_some_and(|m| faults.unreachable_between(m, f.between.0, f.between.1))
        });
    // The test origin (s3s-fs) writes an object, then its checksum: a fetch in between
    // fails as the body streams (a real S3 replaces an object at once). Those reads are
    // listed, not counted against the gateway.
    let (torn, failed): (Vec<String>, Vec<String>) = failed
        .into_iter()
        .map(|f| f.line)
        .partition(|l| l.contains(TORN_AT_ORIGIN));
    for t in &torn {
        println!("  failed on the test origin: {t}");
    }
    let late = rec.late.lock().unwrap().clone();
    let fault_log = faults.log.lock().unwrap().join("\n  ");
    println!("  faults:\n  {fault_log}");
    println!(
        "  {} reads failed ({} more were sent to a member no one could reach, {} failed on the test origin's half-written object), {} operations late",
        failed.len(),
        excused.len(),
        torn.len(),
        late.len()
    );
    problems.extend(late.iter().map(|l| format!("late: {l}")));
    problems.extend(failed.iter().map(|f| format!("failed read: {f}")));
    println!("  {}", report.line());
    if problems.is_empty() {
        Ok(report)
    } else {
        Err(format!(
            "seed {seed} ({setup}): {}\n{}\nfaults:\n  {fault_log}\n{}",
            report.line(),
            problems.join("\n"),
            fleet.postmortem()
        ))
    }
}

/// The index of the member (of `n`, named `g1`, `g2`, …, equal weights) that owns most of
/// `keys` while all serve.
fn owner_of_most(keys: &[String], n: usize) -> usize {
    let mut owned = vec![0usize; n];
    for key in keys {
        let owner = (0..n)
            .max_by_key(|i| rasa_openapi::cluster::rendezvous_hash(key, &format!("g{}", i + 1)))
            .expect("members");
        owned[owner] += 1;
    }
    (0..n).max_by_key(|&i| owned[i]).expect("members")
}

/// Checks a history a run wrote (`CHAOS_HISTORY=FILE`, with `CHAOS_MODEL=cache` for a run
/// without an origin) and prints a smallest failing part: for a person chasing an anomaly.
pub fn recheck(file: &str) {
    use rasa_tests::history::{Event, Op, Outcome};
    let text = std::fs::read_to_string(file).expect("the history file");
    let ms = |s: &str| (s.parse::<f64>().expect("a time in ms") * 1e6) as u64;
    let history: Vec<Event> = text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // client N [ start .. end ] ms op [value] out [value] via ...
            let client = w.get(1)?.parse().ok()?;
            let (start, end) = (w[3], w[5].trim_end_matches(']'));
            let op = match w[7] {
                "put" => Op::Put(u64::from_str_radix(w[8], 16).ok()?),
                "delete" => Op::Delete,
                _ => Op::Get,
            };
            let rest = &w[if matches!(op, Op::Put(_)) { 9 } else { 8 }..];
            let outcome = match rest[0] {
                "ok" => Outcome::Done,
                "unknown" => Outcome::Unknown,
                "failed" => Outcome::Failed,
                _ if rest[1] == "none" => Outcome::Read(None),
                _ => Outcome::Read(Some(u64::from_str_radix(rest[1], 16).ok()?)),
            };
            let end = if end == "?" { u64::MAX } else { ms(end) };
            let via = l.split(" via ").nth(1).unwrap_or_default().to_owned();
            Some(Event {
                client,
                op,
                start: ms(start),
                end,
                outcome,
                via,
            })
        })
        .collect();
    let model = match std::env::var("CHAOS_MODEL").as_deref() {
        Ok("cache") => Model::CacheRegister,
        _ => Model::Register,
    };
    println!(
        "{} operations: {:?}",
        history.len(),
        check(model, &history, 5_000_000)
    );
    // The earliest moment by which the history already fails: operations answered by
    // then as they were, those still running then unknown.
    let by = |t: u64| -> Vec<Event> {
        history
            .iter()
            .filter(|e| e.start <= t)
            .map(|e| match e.end <= t {
                true => e.clone(),
                false => Event {
                    outcome: match e.op {
                        Op::Get => Outcome::Failed,
                        _ => Outcome::Unknown,
                    },
                    ..e.clone()
                },
            })
            .collect()
    };
    let fails = |t: u64| check(model, &by(t), 2_000_000) == Verdict::NotLinearizable;
    let mut hi = history
        .iter()
        .map(|e| e.end.min(u64::MAX / 2))
        .max()
        .unwrap_or(0);
    let mut lo = 0u64;
    if fails(hi) {
        while hi - lo > 1_000_000 {
            let mid = lo + (hi - lo) / 2;
            if fails(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        println!(
            "fails by {:.3} s; the operations of the second before:",
            hi as f64 / 1e9
        );
        let near: Vec<Event> = by(hi)
            .into_iter()
            .filter(|e| e.end.saturating_add(1_000_000_000) >= hi || e.outcome == Outcome::Unknown)
            .collect();
        println!("{}", Shown(&near));
        let small = shrink(model, &by(hi));
        println!(
            "a smallest failing part ({} operations):\n{}",
            small.len(),
            Shown(&small)
        );
    }
}
