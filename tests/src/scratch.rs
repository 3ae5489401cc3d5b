//! Scratch directories for tests, all under one directory per test process.
//!
//! A test's directory outlives the test (a failing test leaves its files to look at), so
//! instead of removing each one, the first test of a later process removes the whole
//! directory of every earlier test process that has ended: `/tmp/rasa-tests-<pid>` whose
//! process is gone and which belongs to this user. A run leaves at most its own files.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const PREFIX: &str = "rasa-tests-";

/// A fresh, empty directory under this test process's scratch directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = process_dir().join(format!(
        "rasa-{tag}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// `/tmp/rasa-tests-<pid>`, made on first use after sweeping ended processes' directories.
fn process_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::temp_dir();
        sweep(&base);
        let dir = base.join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create this test process's scratch directory");
        dir
    })
}

/// Removes `base/rasa-tests-<pid>` directories (not links) of this user whose process has
/// ended. Anything else, or anything that cannot be read, is left as it is.
fn sweep(base: &Path) {
    let Ok(me) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        if pid.parse::<u32>().is_err() || Path::new("/proc").join(pid).exists() {
            continue;
        }
        let path = entry.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() && m.uid() == me => {
                let _ = std::fs::remove_dir_all(&path);
            }
            _ => {}
        }
    }
}
