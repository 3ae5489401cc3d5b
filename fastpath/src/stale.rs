//! Removing the `shm` regions of processes that are gone.
//!
//! Every `shm` endpoint is a file in `/dev/shm` (memory, not disk) named after Rasa's
//! endpoint name, `rasa-<pid>-<n>` ([`crate::fabric::plan::shm_name`]) plus libfabric's
//! suffix. libfabric unlinks it when the endpoint is closed, but not when its process is
//! killed, and libfabric 1.17 not at a normal exit either: each such file keeps its
//! pages (4–8 MiB of a 16 MiB region) until someone removes it. A gateway serving `shm`
//! removes, at start and then every [`SWEEP_EVERY`], the files of processes that no longer
//! exist, once they are older than [`MIN_AGE`] — by then any gateway has long handled
//! such a reader's first contact, which is when it opens the file (a gateway that finds it
//! gone then crashes on libfabric < 2.0: see `reader::contact`).

use std::path::Path;
use std::time::{Duration, SystemTime};

/// How old a dead process's region must be before it is removed.
pub const MIN_AGE: Duration = Duration::from_secs(60);
/// How often a gateway serving `shm` sweeps.
pub const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// The pid in a region file named `rasa-<pid>-<n>…`, if the name is one of Rasa's.
fn pid_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("rasa-")?;
    let (pid, tail) = rest.split_once('-')?;
    let n = tail.split(':').next()?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(())?;
    pid.parse().ok().filter(|p| *p > 0)
}

/// Whether process `pid` exists (here, in this PID namespace).
fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks that `pid` exists and may be
    // signalled. EPERM means it exists (another user's).
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes from `dir` (normally `/dev/shm`) the region files of processes that do not
/// exist, last changed more than `min_age` ago; returns how many were removed.
pub fn sweep(dir: &Path, min_age: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(pid_of) else {
            continue;
        };
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= min_age);
        if old && !alive(pid) && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_recognised_by_their_shape() {
        assert_eq!(pid_of("rasa-123-0:0:1"), Some(123));
        assert_eq!(pid_of("rasa-123-45"), Some(123));
        assert_eq!(pid_of("rasa-x-0:0:1"), None);
        assert_eq!(pid_of("rasa-123-:0"), None);
        assert_eq!(pid_of("other-123-0"), None);
        assert_eq!(pid_of("rasa-0-0"), None);
    }

    #[test]
    fn only_old_regions_of_dead_processes_go() {
        let dir = std::env::temp_dir().join(format!("rasa-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A pid that cannot exist (above the kernel's pid_max limit of 2^22).
        let dead = 4_194_304 + 7;
        let old = SystemTime::now() - Duration::from_secs(120);
        let make = |name: &str, when: SystemTime| {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            f.set_modified(when).unwrap();
        };
        make(&format!("rasa-{dead}-0:0:0"), old);
        make(&format!("rasa-{dead}-1:0:0"), SystemTime::now());
        make(&format!("rasa-{}-0:0:0", std::process::id()), old);
        make("unrelated", old);
        assert_eq!(sweep(&dir, MIN_AGE), 1);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(!left.contains(&format!("rasa-{dead}-0:0:0")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
