//! What the SDK benchmarks share: their arguments and the gateway's CPU time.

/// The arguments `ENDPOINT [GATEWAY_PID]` (default endpoint `http://127.0.0.1:8080`).
pub fn endpoint_and_pid() -> (String, Option<u32>) {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080".into());
    (endpoint, args.next().and_then(|p| p.parse().ok()))
}

/// User plus system CPU seconds `pid` has used so far (0 without a PID).
pub fn cpu_seconds(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces): utime is 14th, stime 15th.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}
