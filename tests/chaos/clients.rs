//! The clients: each issues PUT, GET and DELETE on a few keys, one at a time, through the
//! native HTTP API (a member picked at random each time), the Rust SDK (cluster-aware,
//! reading one-sided) or the S3 listener (a member at random), and records every
//! operation: its invocation, its completion, its outcome. A value is written once: its
//! body names it and is checked whole when read.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_s3::config::http::HttpResponse;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rasa_client::{Client, FastPath};
use rasa_tests::history::{Event, Op, Outcome};

use crate::fleet::{Fleet, BUCKET};

/// What a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `PUT/GET/DELETE /v1/objects/{key}` with reqwest, at a random member.
    Http,
    /// The Rust SDK: owners found from the view, reads one-sided.
    Sdk,
    /// aws-sdk-s3 against a random member's S3 listener.
    S3,
}

/// Every operation of a run, with its key.
pub struct Recorder {
    t0: Instant,
    events: Mutex<Vec<(String, Event)>>,
    /// Reads that failed.
    pub failed_reads: Mutex<Vec<FailedRead>>,
    /// Reads whose body was not a value as written (torn, mixed, corrupt).
    pub bad_bodies: Mutex<Vec<String>>,
    /// Operations that outlived their timeout by more than 10 %.
    pub late: Mutex<Vec<String>>,
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Recorder {
        Recorder {
            t0: Instant::now(),
            events: Mutex::default(),
            failed_reads: Mutex::default(),
            bad_bodies: Mutex::default(),
            late: Mutex::default(),
        }
    }

    /// Nanoseconds from the start of the run to `t`.
    pub fn at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.t0).as_nanos() as u64
    }

    /// The events, by key.
    pub fn by_key(&self) -> std::collections::BTreeMap<String, Vec<Event>> {
        let mut out: std::collections::BTreeMap<String, Vec<Event>> = Default::default();
        for (k, e) in self.events.lock().unwrap().iter() {
            out.entry(k.clone()).or_default().push(e.clone());
        }
        out
    }

    fn record(&self, key: &str, e: Event) {
        self.events.lock().unwrap().push((key.to_owned(), e));
    }
}

/// The body of value `v`: a line naming it, repeated to a length of its own.
pub fn body_of(v: u64) -> Vec<u8> {
    let line = format!("rasa chaos value {v:016x}\n");
    let len = 64 + (v.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % 24_000;
    line.bytes().cycle().take(len).collect()
}

/// The value a body names, if it is that value's body whole.
pub fn value_of(body: &[u8]) -> Result<u64, String> {
    let head = body
        .get(17..33)
        .ok_or("shorter than a value's first line")?;
    let v = std::str::from_utf8(head)
        .ok()
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or("no value named in its first line")?;
    if body_of(v) == body {
        Ok(v)
    } else {
        Err(format!(
            "a body of {} bytes naming {v:x} is not its value ({} bytes)",
            body.len(),
            body_of(v).len()
        ))
    }
}

/// A read that got no answer.
#[derive(Clone)]
pub struct FailedRead {
    /// The member it was sent to (`None`: the SDK chose).
    pub member: Option<usize>,
    /// When it was sent and when it failed.
    pub between: (Instant, Instant),
    /// What, when and why.
    pub line: String,
}

/// What one operation came to, before it is recorded.
enum Got {
    Done,
    Read(Vec<u8>),
    Missing,
    /// Certainly without effect (a 4xx).
    Refused(String),
    /// No answer, or one that leaves the outcome open (a 5xx).
    Open(String),
}

/// One client: its kind, its connections, its random choices.
pub struct Worker {
    /// Its number (values it writes carry it).
    pub id: usize,
    kind: Kind,
    rng: StdRng,
    sdk: Option<Client>,
    s3: Vec<aws_sdk_s3::Client>,
    http: reqwest::Client,
    bases: Vec<String>,
    timeout: Duration,
    seq: u64,
}

impl Worker {
    /// A client of `kind` on `fleet`, its choices drawn from `seed`.
    pub fn new(id: usize, kind: Kind, fleet: &Fleet, seed: u64, timeout: Duration) -> Worker {
        let mut rng = StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x51_7cc1));
        let bases: Vec<String> = fleet.members.iter().map(|m| m.base()).collect();
        let sdk = (kind == Kind::Sdk).then(|| {
            Client::builder(bases[rng.random_range(0..bases.len())].clone())
                .fast_path(FastPath::Auto)
                .timeout(timeout)
                .connect_timeout(timeout)
                .build()
                .expect("an SDK client")
        });
        let s3 = match kind {
            Kind::S3 => fleet
                .members
                .iter()
                .map(|m| s3_client(&m.s3_base(), &fleet.s3_key, timeout))
                .collect(),
            _ => Vec::new(),
        };
        Worker {
            id,
            kind,
            rng,
            sdk,
            s3,
            http: rasa_tests::http(),
            bases,
            timeout,
            seq: 0,
        }
    }

    /// Issues operations on `keys` until `until`, recording each in `rec`.
    pub async fn run(mut self, keys: Vec<String>, until: Instant, rec: &Recorder) {
        // For a one-sided reader: when each of its reads of each key since its last write
        // of it started and ended (a read may fetch a descriptor the next reads within a
        // lease use).
        let mut reads_of: HashMap<String, Vec<(Instant, Instant)>> = HashMap::new();
        while Instant::now() < until {
            // A pause between operations, as a program doing work between them would.
            let pause = self.rng.random_range(5..40);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let key = keys[self.rng.random_range(0..keys.len())].clone();
            let op = match self.rng.random_range(0..20) {
                0..=6 => {
                    self.seq += 1;
                    Op::Put(((self.id as u64 + 1) << 32) | self.seq)
                }
                7..=8 => Op::Delete,
                _ => Op::Get,
            };
            let member = self.rng.random_range(0..self.bases.len());
            let started = Instant::now();
            let got = self.issue(&key, op, member).await;
            let ended = Instant::now();
            let took = ended - started;
            let via = match self.kind {
                Kind::Sdk => "sdk".to_owned(),
                Kind::Http => format!("http g{}", member + 1),
                Kind::S3 => format!("s3 g{}", member + 1),
            };
            if took > self.timeout + self.timeout / 10 {
                rec.late.lock().unwrap().push(format!(
                    "{op:?} of {key} via {via} took {took:?} (timeout {:?})",
                    self.timeout
                ));
            }
            let outcome = match (op, got) {
                (Op::Get, Got::Read(body)) => match value_of(&body) {
                    Ok(v) => Outcome::Read(Some(v)),
                    Err(e) => {
                        rec.bad_bodies
                            .lock()
                            .unwrap()
                            .push(format!("GET {key} via {via}: {e}"));
                        Outcome::Failed
                    }
                },
                (Op::Get, Got::Missing) => Outcome::Read(None),
                (Op::Get, Got::Refused(why) | Got::Open(why)) => {
                    rec.failed_reads.lock().unwrap().push(FailedRead {
                        member: (self.kind != Kind::Sdk).then_some(member),
                        between: (started, ended),
                        line: format!(
                            "{:.1} s: GET {key} via {via} after {took:?}: {why}",
                            rec.at(started) as f64 / 1e9
                        ),
                    });
                    Outcome::Failed
                }
                (Op::Delete, Got::Missing) => Outcome::Done,
                (_, Got::Done) => Outcome::Done,
                (_, Got::Refused(_)) => Outcome::Failed,
                (_, _) => Outcome::Unknown,
            };
            // A one-sided reader may hold a descriptor it got at an earlier read of the key,
            // within a lease, and read the version it names (the consistency page): its
            // read counts from the start of the first of its reads of the key that ended
            // within a lease before it — a descriptor is granted at some moment of the read
            // that fetched it, its end at the latest (a read that waited 1.6 s for a frozen
            // owner, then held its descriptor for a lease from its end, was counted from
            // its start: its reuse 0.4 s later looked like a read back in time). Its own
            // writes of the key drop the descriptor.
            let start = match (self.kind, op) {
                (Kind::Sdk, Op::Get) => {
                    let reads = reads_of.entry(key.clone()).or_default();
                    reads.retain(|(_, end)| {
                        started.saturating_duration_since(*end) < crate::fleet::LEASE
                    });
                    reads.push((started, ended));
                    reads[0].0
                }
                (Kind::Sdk, _) => {
                    reads_of.remove(&key);
                    started
                }
                _ => started,
            };
            rec.record(
                &key,
                Event {
                    client: self.id,
                    op,
                    start: rec.at(start),
                    end: rec.at(ended),
                    outcome,
                    via,
                },
            );
        }
    }

    async fn issue(&mut self, key: &str, op: Op, member: usize) -> Got {
        match self.kind {
            Kind::Http => self.over_http(key, op, member).await,
            Kind::Sdk => self.over_sdk(key, op).await,
            // aws-sdk-s3's operation timeout ends at the answer's head: a body that stops
            // (its member frozen in between) is the caller's deadline to cut, as here.
            Kind::S3 => {
                match tokio::time::timeout(self.timeout, self.over_s3(key, op, member)).await {
                    Ok(got) => got,
                    Err(_) => Got::Open(format!("no whole answer within {:?}", self.timeout)),
                }
            }
        }
    }

    async fn over_http(&self, key: &str, op: Op, member: usize) -> Got {
        let url = format!("{}/v1/objects/{key}", self.bases[member]);
        let req = match op {
            Op::Put(v) => self.http.put(url).body(body_of(v)),
            Op::Delete => self.http.delete(url),
            Op::Get => self.http.get(url),
        };
        let resp = match req.timeout(self.timeout).send().await {
            Ok(r) => r,
            Err(e) => return Got::Open(error_line(&e)),
        };
        let status = resp.status().as_u16();
        let body = resp.bytes().await;
        match (status, body) {
            (404, _) => Got::Missing,
            (200..=299, Ok(b)) if op == Op::Get => Got::Read(b.to_vec()),
            (200..=299, Ok(_)) => Got::Done,
            (400..=499 | 503, b) => Got::Refused(format!("{status} {}", text(b))),
            (_, b) => Got::Open(format!("{status} {}", text(b))),
        }
    }

    async fn over_sdk(&self, key: &str, op: Op) -> Got {
        let c = self.sdk.as_ref().expect("an SDK worker has a client");
        let result = match op {
            Op::Put(v) => c.put(key, body_of(v)).await.map(|_| Got::Done),
            Op::Delete => c.delete(key).await.map(|_| Got::Done),
            Op::Get => c.get(key).await.map(|o| Got::Read(o.bytes.to_vec())),
        };
        match result {
            Ok(g) => g,
            Err(rasa_client::Error::Problem(p)) if p.status == 404 => Got::Missing,
            Err(rasa_client::Error::Problem(p)) if refused(p.status) => {
                Got::Refused(format!("{} {}", p.status, p.detail))
            }
            Err(e) => Got::Open(e.to_string()),
        }
    }

    async fn over_s3(&self, key: &str, op: Op, member: usize) -> Got {
        let c = &self.s3[member];
        match op {
            Op::Put(v) => match c
                .put_object()
                .bucket(BUCKET)
                .key(key)
                .body(body_of(v).into())
                .send()
                .await
            {
                Ok(_) => Got::Done,
                Err(e) => s3_failure(status(&e), &e),
            },
            Op::Delete => match c.delete_object().bucket(BUCKET).key(key).send().await {
                Ok(_) => Got::Done,
                Err(e) => s3_failure(status(&e), &e),
            },
            Op::Get => match c.get_object().bucket(BUCKET).key(key).send().await {
                Ok(o) => match o.body.collect().await {
                    Ok(b) => Got::Read(b.into_bytes().to_vec()),
                    Err(e) => Got::Open(format!("body: {e}")),
                },
                Err(e) => match status(&e) {
                    Some(404) => Got::Missing,
                    s => s3_failure(s, &e),
                },
            },
        }
    }
}

/// The HTTP status of an S3 call's failure, when an answer came.
fn status<E>(e: &aws_sdk_s3::error::SdkError<E, HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

/// An error and its causes, on one line.
fn error_line(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Whether an answer with `status` says the operation took no effect: a `4xx`, or a `503`
/// (the gateway answers `503` only when it did nothing: overloaded, fenced, or the key's
/// owner not reached; a write that reached the owner unanswered is a `504`).
fn refused(status: u16) -> bool {
    (400..500).contains(&status) || status == 503
}

fn s3_failure(status: Option<u16>, e: &dyn std::error::Error) -> Got {
    let why = format!("{status:?} {}", error_line(e));
    match status {
        Some(s) if refused(s) => Got::Refused(why),
        _ => Got::Open(why),
    }
}

fn text(b: reqwest::Result<bytes::Bytes>) -> String {
    match b {
        Ok(b) => String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned(),
        Err(e) => format!("(body: {e})"),
    }
}

/// An S3 client of `endpoint` signing with `key`: one attempt per call (no retries, so an
/// operation is one request), ending within `timeout`.
fn s3_client(endpoint: &str, key: &(String, String), timeout: Duration) -> aws_sdk_s3::Client {
    use aws_sdk_s3::config::{retry::RetryConfig, timeout::TimeoutConfig};
    let signed = rasa_tests::s3_client_with(endpoint, &key.0, &key.1);
    let conf = signed
        .config()
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(timeout)
                .connect_timeout(timeout)
                .build(),
        )
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}
