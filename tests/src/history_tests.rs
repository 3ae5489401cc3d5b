//! The checker on its own: histories known to be linearizable and known not to be, and
//! agreement with `stateright`'s linearizability tester on thousands of random ones.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use stateright::semantics::register::{Register, RegisterOp, RegisterRet};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester};

use super::*;

fn ev(client: usize, op: Op, start: u64, end: u64, outcome: Outcome) -> Event {
    Event {
        client,
        op,
        start,
        end,
        outcome,
        via: "test".into(),
    }
}

use Op::{Delete, Get, Put};
use Outcome::{Done, Failed, Read, Unknown};

#[test]
fn a_known_linearizable_history_passes() {
    // Two concurrent writes; reads after both may see either — but then agree.
    let h = [
        ev(0, Put(1), 0, 10, Done),
        ev(1, Put(2), 2, 12, Done),
        ev(2, Get, 3, 4, Read(Some(2))),
        ev(2, Get, 13, 14, Read(Some(1))),
        ev(0, Get, 15, 16, Read(Some(1))),
        ev(1, Delete, 20, 30, Done),
        ev(0, Get, 31, 32, Read(None)),
        // A write that timed out and was seen later: it took effect after all.
        ev(0, Put(3), 40, 45, Unknown),
        ev(1, Get, 50, 51, Read(None)),
        ev(2, Get, 60, 61, Read(Some(3))),
        // A refused write is left out.
        ev(1, Put(4), 62, 63, Failed),
    ];
    assert!(linearizable(Model::Register, &h));
}

#[test]
fn known_non_linearizable_histories_fail_and_shrink() {
    // A read after an acknowledged write returns the older value: going back in time.
    let stale = [
        ev(0, Put(1), 0, 10, Done),
        ev(0, Put(2), 11, 20, Done),
        ev(1, Get, 5, 6, Read(None)),
        ev(1, Get, 21, 22, Read(Some(1))),
        ev(2, Get, 23, 24, Read(Some(2))),
    ];
    assert!(!linearizable(Model::Register, &stale));
    let small = shrink(Model::Register, &stale);
    assert_eq!(
        small.iter().map(|e| e.op).collect::<Vec<_>>(),
        [Put(1), Put(2), Get],
        "{}",
        Shown(&small)
    );
    // Two readers disagree on the order of two writes.
    let split = [
        ev(0, Put(1), 0, 100, Done),
        ev(1, Put(2), 0, 100, Done),
        ev(2, Get, 10, 20, Read(Some(1))),
        ev(2, Get, 30, 40, Read(Some(2))),
        ev(3, Get, 10, 20, Read(Some(2))),
        ev(3, Get, 30, 40, Read(Some(1))),
    ];
    assert!(!linearizable(Model::Register, &split));
    // A delete acknowledged, then the value again.
    let resurrected = [
        ev(0, Put(1), 0, 10, Done),
        ev(0, Delete, 11, 20, Done),
        ev(1, Get, 21, 22, Read(Some(1))),
    ];
    assert!(!linearizable(Model::Register, &resurrected));
    assert!(
        !linearizable(Model::CacheRegister, &resurrected),
        "a cache may miss, never resurrect"
    );
    // A cache register may miss where a register may not.
    let missed = [ev(0, Put(1), 0, 10, Done), ev(1, Get, 11, 12, Read(None))];
    assert!(!linearizable(Model::Register, &missed));
    assert!(linearizable(Model::CacheRegister, &missed));
    // A value no write wrote.
    assert!(!linearizable(
        Model::Register,
        &[ev(0, Get, 0, 1, Read(Some(9)))]
    ));
}

/// A random history of `n` operations by `clients` clients on one register, each taking
/// effect at a moment inside its interval (so an honest history is linearizable); a read is
/// wrong (an older value, or none) with probability `wrong`.
fn random_history(rng: &mut StdRng, clients: usize, n: usize, wrong: f64) -> Vec<Event> {
    let mut free_at = vec![0u64; clients];
    let mut written: Vec<u64> = Vec::new();
    let mut value: Option<u64> = None;
    let mut out = Vec::new();
    let mut now = 10u64;
    for id in 1..=n as u64 {
        now += rng.random_range(1..4);
        let idle: Vec<usize> = (0..clients).filter(|&c| free_at[c] <= now).collect();
        if idle.is_empty() {
            continue;
        }
        let c = idle[rng.random_range(0..idle.len())];
        let start = now - rng.random_range(0..=(now - free_at[c]).min(6));
        let end = now + rng.random_range(0..8);
        free_at[c] = end + 1;
        let (op, outcome) = match rng.random_range(0..10) {
            0..=3 => {
                written.push(id);
                value = Some(id);
                let outcome = if rng.random_bool(0.1) { Unknown } else { Done };
                (Put(id), outcome)
            }
            4 => {
                value = None;
                (Delete, Done)
            }
            _ => {
                let seen = if rng.random_bool(wrong) && !written.is_empty() {
                    Some(written[rng.random_range(0..written.len())])
                } else {
                    value
                };
                (Get, Read(seen))
            }
        };
        out.push(ev(c, op, start, end, outcome));
    }
    out
}

/// `stateright`'s verdict on `history`: its events replayed in time order (calls first on a
/// tie, as the checker orders them); an unknown operation stays in flight.
fn stateright_says(history: &[Event]) -> bool {
    let mut t: LinearizabilityTester<usize, Register<Option<u64>>> =
        LinearizabilityTester::new(Register(None));
    let mut events: Vec<(u64, bool, usize)> = Vec::new();
    for (i, e) in history.iter().enumerate() {
        events.push((e.start, false, i));
        if e.outcome != Unknown {
            events.push((e.end, true, i));
        }
    }
    events.sort();
    for (_, is_ret, i) in events {
        let e = &history[i];
        if !is_ret {
            let op = match e.op {
                Put(v) => RegisterOp::Write(Some(v)),
                Delete => RegisterOp::Write(None),
                Get => RegisterOp::Read,
            };
            t.on_invoke(e.client, op)
                .expect("one operation per client at a time");
        } else {
            let ret = match e.outcome {
                Read(v) => RegisterRet::ReadOk(v),
                _ => RegisterRet::WriteOk,
            };
            t.on_return(e.client, ret)
                .expect("a return of an invoked operation");
        }
    }
    t.is_consistent()
}

#[test]
fn the_checker_agrees_with_stateright_on_random_histories() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let (mut yes, mut no) = (0, 0);
    for round in 0..3000 {
        let h = random_history(&mut rng, 3, 4 + round % 9, 0.3);
        // Only histories whose clients' unknown operations come last (stateright keeps at
        // most one operation in flight per client, and it never returns).
        let mut h2 = Vec::new();
        let mut gone = std::collections::HashSet::new();
        for e in h {
            if gone.contains(&e.client) {
                continue;
            }
            if e.outcome == Unknown {
                gone.insert(e.client);
            }
            h2.push(e);
        }
        let ours = linearizable(Model::Register, &h2);
        assert_eq!(
            ours,
            stateright_says(&h2),
            "round {round}: the checkers disagree on\n{}",
            Shown(&h2)
        );
        if ours {
            yes += 1
        } else {
            no += 1
        }
    }
    assert!(yes > 300 && no > 300, "both kinds were tried: {yes} / {no}");
}

#[test]
fn a_long_history_with_unknown_writes_is_checked_quickly() {
    let mut rng = StdRng::seed_from_u64(7);
    // An honest register's history: 6 clients, 5,000 operations, some writes unknown.
    let h = random_history(&mut rng, 6, 5000, 0.0);
    let started = std::time::Instant::now();
    assert!(linearizable(Model::Register, &h));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}
