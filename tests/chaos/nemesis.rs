//! The faults: a schedule drawn from the run's seed, one fault at a time, each healed
//! before the next — a member killed (SIGKILL) and started again over its disk tier, frozen
//! (SIGSTOP) for less or more than the member TTL, cut from etcd, cut from everyone (its
//! peers and clients), and etcd itself paused past the TTL.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;

use crate::fleet::{Fleet, TTL};

/// What the faults did: one line each, with the time from the run's start.
#[derive(Default)]
pub struct Faults {
    /// One line per fault.
    pub log: Mutex<Vec<String>>,
    /// When each member could not be reached at all (killed, frozen, cut from everyone):
    /// (member index, from, to).
    pub unreachable: Mutex<Vec<(usize, Instant, Instant)>>,
}

impl Faults {
    /// How many faults were injected.
    pub fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// Whether member `m` could not be reached at some moment between `from` and `to`.
    pub fn unreachable_between(&self, m: usize, from: Instant, to: Instant) -> bool {
        self.unreachable
            .lock()
            .unwrap()
            .iter()
            .any(|&(who, a, b)| who == m && a <= to && from <= b)
    }
}

/// The kinds of fault, as `CHAOS_FAULTS` names them.
const KINDS: [&str; 5] = ["kill", "freeze", "etcd-cut", "cut", "etcd-pause"];

/// Every kind, the silent partitions included: `etcd-drop` and `drop` hold a member's
/// bytes (to etcd; from its peers and clients) instead of refusing them, as a firewall
/// dropping packets does. Injected only when named (`make chaos` names them).
pub const ALL_KINDS: &str = "kill,freeze,etcd-cut,cut,etcd-pause,etcd-drop,drop";

/// The kinds asked for: `kinds` (a set-up's), else `CHAOS_FAULTS` (separated by commas);
/// `None`: every default kind.
fn named(kinds: Option<&str>) -> Option<String> {
    kinds
        .map(str::to_owned)
        .or_else(|| std::env::var("CHAOS_FAULTS").ok())
}

/// Whether `kinds` (as [`named`] reads them) names a silent partition.
fn silent_named(kinds: Option<&str>) -> bool {
    named(kinds).is_some_and(|v| {
        v.split(',')
            .any(|k| matches!(k.trim(), "etcd-drop" | "drop"))
    })
}

/// Whether faults of `kind` are injected: those [`named`], or all when none are.
fn chosen(kind: &str, kinds: Option<&str>) -> bool {
    named(kinds).is_none_or(|v| v.split(',').any(|k| k.trim() == kind))
}

fn ms(min: u64, max: u64, rng: &mut StdRng) -> Duration {
    Duration::from_millis(rng.random_range(min..=max))
}

/// Injects faults (of `kinds`, when given; on member `target` alone, when given) into
/// `fleet` until `until`, then leaves it whole again.
pub async fn run(
    fleet: &Fleet,
    (mut rng, kinds, target): (StdRng, Option<&str>, Option<usize>),
    t0: Instant,
    until: Instant,
    faults: &Faults,
) {
    let ttl = TTL.as_millis() as u64;
    if std::env::var_os("CHAOS_NO_FAULTS").is_some() {
        return;
    }
    loop {
        tokio::time::sleep(ms(500, 2000, &mut rng)).await;
        if Instant::now() + Duration::from_secs(6) > until {
            break;
        }
        let n = fleet.members.len();
        let which = target.unwrap_or(rng.random_range(0..n));
        let m = &fleet.members[which];
        let began = Instant::now();
        let at = t0.elapsed().as_secs_f64();
        let kind = rng.random_range(0..KINDS.len());
        // A cut is silent half the time when silent partitions are named (a draw only
        // then: other schedules stay what their seeds made them).
        let silent = matches!(kind, 2 | 3) && silent_named(kinds) && rng.random_bool(0.5);
        let name = match (kind, silent) {
            (2, true) => "etcd-drop",
            (3, true) => "drop",
            _ => KINDS[kind],
        };
        if !chosen(name, kinds) {
            continue;
        }
        println!("  {at:.1} s: fault on {}", m.id);
        let line = match kind {
            0 => {
                let down = ms(300, ttl + 1000, &mut rng);
                m.kill();
                tokio::time::sleep(down).await;
                restart(m).await;
                format!("{at:.1} s: {} killed, started again after {down:?}", m.id)
            }
            1 => {
                let frozen = ms(1000, ttl * 2, &mut rng);
                m.signal("STOP");
                tokio::time::sleep(frozen).await;
                m.signal("CONT");
                format!("{at:.1} s: {} frozen for {frozen:?}", m.id)
            }
            2 => {
                let away = ms(ttl + 500, ttl * 2, &mut rng);
                cut_or_silence(&m.etcd_link, silent);
                tokio::time::sleep(away).await;
                m.etcd_link.heal();
                format!("{at:.1} s: {} {} etcd for {away:?}", m.id, how(silent))
            }
            3 => {
                let away = ms(1000, ttl * 2, &mut rng);
                cut_or_silence(&m.front, silent);
                cut_or_silence(&m.s3_front, silent);
                tokio::time::sleep(away).await;
                m.front.heal();
                m.s3_front.heal();
                format!(
                    "{at:.1} s: {} {} its peers and clients for {away:?}",
                    m.id,
                    how(silent)
                )
            }
            _ => {
                let paused = ms(ttl + 500, ttl * 2, &mut rng);
                fleet.etcd.signal("STOP");
                tokio::time::sleep(paused).await;
                fleet.etcd.signal("CONT");
                format!("{at:.1} s: etcd paused for {paused:?}")
            }
        };
        if matches!(kind, 0 | 1 | 3) {
            let window = (which, began, Instant::now());
            faults.unreachable.lock().unwrap().push(window);
        }
        println!("  {line}");
        faults.log.lock().unwrap().push(line);
        // Whole again before the next fault (members back from a lost lease register anew).
        fleet.wait_whole(Duration::from_secs(30)).await;
    }
}

/// Cuts `link` (connections refused), or silences it (bytes held).
fn cut_or_silence(link: &rasa_tests::relay::Relay, silent: bool) {
    if silent {
        link.silence();
    } else {
        link.cut();
    }
}

/// How a partition was made, for the fault log.
fn how(silent: bool) -> &'static str {
    if silent {
        "silenced (bytes held) from"
    } else {
        "cut from"
    }
}

/// Starts `m` again (its first line may take a moment: off the runtime's threads).
async fn restart(m: &crate::fleet::Member) {
    tokio::task::block_in_place(|| m.start());
}
