//! The gateway is wired in order (issue 62): every part gets its collaborators when it is
//! made — the cluster's `Peers`, the S3 listener's view of the cluster, the store's disk
//! tier, the rejoin hook — never set into a `OnceLock` afterwards; and the shared state
//! is built whole and never changed (no `DerefMut` on it). A `OnceLock` stays for what is
//! computed once on first use (a process-wide constant, a version's cached entity tag).
//! Each rule is run on a planted violation first, so a rule that finds nothing cannot
//! pass for a clean tree.

use std::path::Path;

use rasa_tests::rust_files;

/// Fields that hold a collaborator in a `OnceLock` (set after the part was made): the
/// `(line, text)` of each in `code`.
fn late_wiring(code: &str) -> Vec<(usize, String)> {
    code.lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let t = line.trim();
            let (name, ty) = t.split_once(':')?;
            let name = name
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if name.contains(' ') || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                return None; // not a field (a `static`, a `let`, an argument list …)
            }
            let ty = ty.trim().trim_end_matches(',');
            let inner = ty
                .strip_prefix("std::sync::OnceLock<")
                .or_else(|| ty.strip_prefix("OnceLock<"))?;
            let handle = inner.starts_with("Arc<")
                || inner.starts_with("std::sync::Arc<")
                || inner.starts_with("Box<dyn")
                || ["Peers", "Wide", "Cluster", "Disk"]
                    .iter()
                    .any(|h| inner.contains(h));
            handle.then(|| (n + 1, t.to_owned()))
        })
        .collect()
}

/// `impl … DerefMut for …` in `code`: state changed through a shared handle.
fn deref_mut(code: &str) -> Vec<(usize, String)> {
    code.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            t.starts_with("impl") && t.contains("DerefMut for")
        })
        .map(|(n, l)| (n + 1, l.trim().to_owned()))
        .collect()
}

fn gateway_files() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let name = f.strip_prefix(&src).unwrap_or(&f).display().to_string();
            (
                name,
                std::fs::read_to_string(&f).expect("read a source file"),
            )
        })
        .collect()
}

fn found(rule: fn(&str) -> Vec<(usize, String)>) -> Vec<String> {
    gateway_files()
        .iter()
        .flat_map(|(name, code)| {
            rule(code)
                .into_iter()
                .map(move |(n, t)| format!("gateway/src/{name}:{n}: {t}"))
        })
        .collect()
}

#[test]
fn no_collaborator_is_set_into_a_once_lock_after_it_was_made() {
    let planted = "pub struct Objects {\n    store: Arc<Store>,\n    peers: std::sync::OnceLock<Arc<crate::cluster::Peers>>,\n    pub wide: OnceLock<cluster::Wide>,\n    etag: std::sync::OnceLock<Box<str>>,\n}\nstatic PROBE: OnceLock<&'static str> = OnceLock::new();\n";
    let caught: Vec<usize> = late_wiring(planted).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        caught,
        [3, 4],
        "the rule finds the planted fields, and only them"
    );
    let late = found(late_wiring);
    assert!(
        late.is_empty(),
        "collaborators set after the part was made (pass them in when it is built):\n{}",
        late.join("\n")
    );
}

#[test]
fn the_shared_state_is_never_changed_through_deref_mut() {
    let planted =
        "impl std::ops::DerefMut for AppState {\n    fn deref_mut(&mut self) -> &mut Shared {\n";
    assert_eq!(
        deref_mut(planted).len(),
        1,
        "the rule finds the planted impl"
    );
    let found = found(deref_mut);
    assert!(
        found.is_empty(),
        "state changed through DerefMut (build it whole):\n{}",
        found.join("\n")
    );
}

/// `Result<…, String>` in `code` (outside comments): an error callers cannot match on.
fn string_errors(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("Result<") {
            let args = &rest[at + "Result<".len()..];
            let (mut depth, mut last_top_comma, mut end) = (1, None, None);
            for (i, c) in args.char_indices() {
                match c {
                    '<' | '(' => depth += 1,
                    '>' | ')' => depth -= 1,
                    ',' if depth == 1 => last_top_comma = Some(i),
                    _ => {}
                }
                if depth == 0 {
                    end = Some(i);
                    break;
                }
            }
            let (Some(end), Some(comma)) = (end, last_top_comma) else {
                break;
            };
            if args[comma + 1..end].trim() == "String" {
                out.push((n + 1, line.trim().to_owned()));
            }
            rest = &args[end..];
        }
    }
    out
}

/// At most this many `Result<…, String>` in the gateway: the CLI's top-level reporting
/// and tests comparing messages; every layer else has error types (issue 62).
const MOST_STRING_ERRORS: usize = 5;

#[test]
fn errors_are_types_not_strings() {
    let planted = "pub fn load(p: &Path) -> Result<Vec<Option<String>>, String> {\n    let r: Result<(), SettingError> = Ok(());\n    fn f() -> io::Result<String> { todo!() }\n";
    let caught: Vec<usize> = string_errors(planted).into_iter().map(|(n, _)| n).collect();
    assert_eq!(caught, [1], "the rule finds the planted one, and only it");
    let found = found(string_errors);
    assert!(
        found.len() <= MOST_STRING_ERRORS,
        "{} Result<_, String> in the gateway (at most {MOST_STRING_ERRORS}): give them error types:\n{}",
        found.len(),
        found.join("\n")
    );
}
