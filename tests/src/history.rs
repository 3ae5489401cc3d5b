//! Histories of concurrent operations on keys, and the linearizability checker the chaos
//! runs use (`tests/chaos`): each key is a register (`docs/design/consistency.md`) whose
//! values are written once each, so a read names the write it saw.
//!
//! The checker is Wing and Gong's search with Lowe's memo (as Porcupine and Knossos do):
//! take, in invocation order, an operation whose every predecessor in real time is already
//! placed and that the register allows next; back up when none fits. A state of the search
//! (the operations placed, the register's value) is visited once, so a history of a few
//! hundred operations with a handful of clients is checked in milliseconds. An operation
//! whose outcome is unknown (the client timed out) may have taken effect at any moment
//! after its invocation, or never: it has no return, and is placed last if nothing needs
//! it. A failure is shrunk to a smallest history that still fails (reads and unread writes
//! taken out one at a time), as a person would want to read it.

use std::collections::HashSet;
use std::fmt;

/// What a client asked of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Store value `v` (each value is written once in a history).
    Put(u64),
    /// Remove the key.
    Delete,
    /// Read the key.
    Get,
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A write or delete acknowledged.
    Done,
    /// A read's answer: the value it saw, or `None` for "no such key".
    Read(Option<u64>),
    /// It certainly had no effect (refused before anything was stored: a 4xx), or it is a
    /// read that got no answer (a read has no effect): left out of the check.
    Failed,
    /// No answer within the client's timeout: it may have taken effect, now or later.
    Unknown,
}

/// One operation of a history: who, what, when (nanoseconds from the run's start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The client (a client does one operation at a time).
    pub client: usize,
    /// The operation.
    pub op: Op,
    /// When it was invoked.
    pub start: u64,
    /// When its answer arrived (for `Unknown`, when the client gave up).
    pub end: u64,
    /// Its outcome.
    pub outcome: Outcome,
    /// Through what it went (for the report): the client kind and the member asked.
    pub via: String,
}

/// What a read may return besides the current value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// A linearizable register: a read returns the value of the last write placed before
    /// it (`None` after a delete or before any write).
    Register,
    /// A cache register: as `Register`, but a read may also miss (`None`) at any time — a
    /// cluster without an origin, where a member's death loses what it held.
    CacheRegister,
}

impl Model {
    /// The register's value after `op` ending in `outcome`, applied to `state`; `None`
    /// when the register cannot answer so.
    fn step(self, state: Option<u64>, op: Op, outcome: Outcome) -> Option<Option<u64>> {
        match (op, outcome) {
            (Op::Put(v), Outcome::Done | Outcome::Unknown) => Some(Some(v)),
            (Op::Delete, Outcome::Done | Outcome::Unknown) => Some(None),
            (Op::Get, Outcome::Read(seen)) if seen == state => Some(state),
            (Op::Get, Outcome::Read(None)) if self == Model::CacheRegister => Some(state),
            _ => None,
        }
    }
}

/// The operations a check considers: failed ones left out (and, in a cache register,
/// reads of nothing), unknown writes that no read saw left out (placing them last explains nothing and changes nothing), and an unknown
/// write that a read saw ending when the first such read ended (it took effect before
/// that read could see it: the same constraint, and a far smaller search).
fn relevant(model: Model, history: &[Event]) -> Vec<Event> {
    let mut seen: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for e in history {
        if let (Op::Get, Outcome::Read(Some(v))) = (e.op, e.outcome) {
            let end = seen.entry(v).or_insert(e.end);
            *end = (*end).min(e.end);
        }
    }
    history
        .iter()
        .filter_map(|e| match (e.op, e.outcome) {
            (_, Outcome::Failed) => None,
            (Op::Get, Outcome::Unknown) => None,
            // A cache may miss at any moment: a read of nothing constrains nothing, and a
            // delete that may not have happened explains no read (leaving it out is the
            // choice that it did not happen).
            (Op::Get, Outcome::Read(None)) if model == Model::CacheRegister => None,
            (Op::Delete, Outcome::Unknown) if model == Model::CacheRegister => None,
            (Op::Put(v), Outcome::Unknown) => seen.get(&v).map(|&end| Event {
                end: end.max(e.start),
                outcome: Outcome::Done,
                ..e.clone()
            }),
            _ => Some(e.clone()),
        })
        .collect()
}

/// What a check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An order of the operations exists that the register allows.
    Linearizable,
    /// None exists.
    NotLinearizable,
    /// The search visited its budget of states without an answer.
    GaveUp,
}

/// Whether `history` (one key's, starting from an absent key) is linearizable under `model`.
pub fn linearizable(model: Model, history: &[Event]) -> bool {
    check(model, history, usize::MAX) == Verdict::Linearizable
}

/// [`linearizable`], visiting at most `budget` states of the search.
pub fn check(model: Model, history: &[Event], budget: usize) -> Verdict {
    search(model, &relevant(model, history), budget)
}

/// The search over `ops` (all relevant; unknown ones never return).
fn search(model: Model, ops: &[Event], budget: usize) -> Verdict {
    let n = ops.len();
    if n == 0 {
        return Verdict::Linearizable;
    }
    // Entries: a call per operation, a return per known one, by time (calls first on a
    // tie: operations that touch in time count as concurrent).
    let mut entries: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, e) in ops.iter().enumerate() {
        entries.push((e.start, false, i));
        if e.outcome != Outcome::Unknown {
            entries.push((e.end.max(e.start), true, i));
        }
    }
    entries.sort();
    let mut list = Linked::new(entries.len());
    let mut ret_of = vec![None; n];
    for (at, &(_, is_ret, i)) in entries.iter().enumerate() {
        if is_ret {
            ret_of[i] = Some(at);
        }
    }
    let mut placed = vec![0u64; n.div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut state: Option<u64> = None;
    let mut cur = list.head();
    loop {
        let Some(at) = cur else {
            // Every entry left is placed: only unknown operations' calls can remain, and
            // those are placed at the end.
            return Verdict::Linearizable;
        };
        let (_, is_ret, i) = entries[at];
        if !is_ret {
            let next = model.step(state, ops[i].op, ops[i].outcome);
            if let Some(after) = next {
                placed[i / 64] |= 1 << (i % 64);
                if seen.len() >= budget {
                    return Verdict::GaveUp;
                }
                if seen.insert((placed.clone(), after)) {
                    stack.push((at, state));
                    state = after;
                    list.lift(at, ret_of[i]);
                    cur = list.head();
                    continue;
                }
                placed[i / 64] &= !(1 << (i % 64));
            }
            cur = list.next(at);
        } else {
            // A return before its call was placed: back up.
            let Some((call, before)) = stack.pop() else {
                return Verdict::NotLinearizable;
            };
            let i = entries[call].2;
            placed[i / 64] &= !(1 << (i % 64));
            state = before;
            list.unlift(call, ret_of[i]);
            cur = list.next(call);
        }
    }
}

/// A doubly linked list over entry indices, with entries taken out and put back in
/// last-out-first-in order (the search's backtracking).
struct Linked {
    prev: Vec<Option<usize>>,
    next: Vec<Option<usize>>,
    head: Option<usize>,
}

impl Linked {
    fn new(n: usize) -> Linked {
        Linked {
            prev: (0..n).map(|i| i.checked_sub(1)).collect(),
            next: (0..n).map(|i| (i + 1 < n).then_some(i + 1)).collect(),
            head: (n > 0).then_some(0),
        }
    }

    fn head(&self) -> Option<usize> {
        self.head
    }

    fn next(&self, at: usize) -> Option<usize> {
        self.next[at]
    }

    fn remove(&mut self, at: usize) {
        match self.prev[at] {
            Some(p) => self.next[p] = self.next[at],
            None => self.head = self.next[at],
        }
        if let Some(n) = self.next[at] {
            self.prev[n] = self.prev[at];
        }
    }

    fn restore(&mut self, at: usize) {
        match self.prev[at] {
            Some(p) => self.next[p] = Some(at),
            None => self.head = Some(at),
        }
        if let Some(n) = self.next[at] {
            self.prev[n] = Some(at);
        }
    }

    /// Takes a call (and its return, if any) out.
    fn lift(&mut self, call: usize, ret: Option<usize>) {
        self.remove(call);
        if let Some(r) = ret {
            self.remove(r);
        }
    }

    /// Puts back what [`Linked::lift`] took out.
    fn unlift(&mut self, call: usize, ret: Option<usize>) {
        if let Some(r) = ret {
            self.restore(r);
        }
        self.restore(call);
    }
}

/// A small sub-history of a failing `history` that still fails: blocks of operations,
/// halving in size, taken out while the rest still fails — reads, and writes no remaining
/// read saw, and deletes when no remaining read saw nothing (without a delete such a read
/// could fail), so the failure left is one the history had — for at most ten seconds.
pub fn shrink(model: Model, history: &[Event]) -> Vec<Event> {
    let mut h = relevant(model, history);
    h.sort_by_key(|e| e.start);
    let fails = |h: &[Event]| search(model, h, 200_000) == Verdict::NotLinearizable;
    if !fails(&h) {
        return h;
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut size = h.len().div_ceil(2);
    while size >= 1 && std::time::Instant::now() < until {
        let mut at = 0;
        while at < h.len() && std::time::Instant::now() < until {
            let end = (at + size).min(h.len());
            let seen: HashSet<u64> = h[..at]
                .iter()
                .chain(&h[end..])
                .filter_map(|e| match e.outcome {
                    Outcome::Read(Some(v)) => Some(v),
                    _ => None,
                })
                .collect();
            // The block, less its deletes while a remaining read saw nothing (taking one
            // out could make that read fail) and the writes a remaining read saw.
            let nothing_seen = model == Model::Register
                && h[..at]
                    .iter()
                    .chain(&h[end..])
                    .any(|e| e.outcome == Outcome::Read(None));
            let keep = |e: &Event| match e.op {
                Op::Put(v) => seen.contains(&v),
                Op::Delete => nothing_seen,
                Op::Get => false,
            };
            let without: Vec<Event> = h[..at]
                .iter()
                .chain(h[at..end].iter().filter(|e| keep(e)))
                .chain(&h[end..])
                .cloned()
                .collect();
            if without.len() < h.len() && fails(&without) {
                h = without;
            } else {
                at = end;
            }
        }
        if size == 1 {
            break;
        }
        size = size.div_ceil(2);
    }
    h
}

/// A history printed one operation a line, times in milliseconds (from the run's start).
pub struct Shown<'a>(pub &'a [Event]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |t: u64| t as f64 / 1e6;
        for e in self.0 {
            let end = match e.outcome {
                Outcome::Unknown => "?".to_owned(),
                _ => format!("{:.3}", ms(e.end)),
            };
            let op = match e.op {
                Op::Put(v) => format!("put {v:x}"),
                Op::Delete => "delete".to_owned(),
                Op::Get => "get".to_owned(),
            };
            let out = match e.outcome {
                Outcome::Done => "ok".to_owned(),
                Outcome::Read(Some(v)) => format!("-> {v:x}"),
                Outcome::Read(None) => "-> none".to_owned(),
                Outcome::Failed => "failed".to_owned(),
                Outcome::Unknown => "unknown".to_owned(),
            };
            writeln!(
                f,
                "  client {:>3}  [{:>11.3} .. {:>11}] ms  {op:<24} {out:<22} via {}",
                e.client,
                ms(e.start),
                end,
                e.via
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
