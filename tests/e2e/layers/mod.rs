//! The gateway's layers point one way (`main`/`server`/`config` → `http` and `s3` →
//! `objects` → `origin` → `store` → leaf modules → `rasa-fastpath`), the files inside a
//! module form no circle, and the fronts leave lookups and writes to the object service. Checked over the source text, so a new upward `use` fails here before review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rasa_tests::rust_files;

/// Rank of each top-level module of `rasa-gateway`: a module may use modules of a lower
/// rank (and itself), never a higher or equal one.
const GATEWAY_LAYERS: &[(&str, u32)] = &[
    ("browser", 0),
    ("catalog", 0),
    ("figures", 1),
    ("credfile", 0),
    ("front", 1),
    ("key", 0),
    ("keyed", 0),
    ("media", 0),
    ("net", 0),
    ("pace", 0),
    ("planted", 0),
    ("range", 0),
    ("reload", 0),
    ("slots", 0),
    ("units", 0),
    ("setting", 0),
    ("store", 1),
    ("grants", 1),
    ("tokens", 2),
    ("cluster", 1),
    ("origin", 2),
    ("objects", 3),
    ("http", 4),
    ("s3", 4),
    ("certs", 5),
    ("config", 5),
    ("server", 5),
    ("builder", 6),
    ("credentials", 6),
    ("main", 7),
    ("lib", 7),
];

/// `foo` in every `crate::foo` of `text` outside comments.
fn crate_refs(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let after = &rest[i + prefix.len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
            rest = after;
        }
    }
    out
}

/// Also counts `use super::x` in a top-level file as `crate::x`, and a nested file's
/// `super::super::x`; enough for this crate's style.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_owned()
}

#[test]
fn no_gateway_module_imports_from_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src");
    let rank: BTreeMap<&str, u32> = GATEWAY_LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = Vec::new();
    for f in &files {
        let module = module_of(&src, f);
        let Some(&mine) = rank.get(module.as_str()) else {
            panic!(
                "{}: module {module} has no layer in GATEWAY_LAYERS; give it one",
                f.display()
            );
        };
        let text = std::fs::read_to_string(f).expect("read a source file");
        for used in crate_refs(&text, "crate::") {
            if used == module {
                continue;
            }
            match rank.get(used.as_str()) {
                Some(&theirs) if theirs < mine => {}
                Some(_) => upward.push(format!("{} uses crate::{used}", f.display())),
                None => {}
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports from a layer above (or beside):\n{}",
        upward.join("\n")
    );
}

/// Sibling files of one directory (other than `mod.rs`/`lib.rs`, which declare them) must
/// not use each other both ways.
fn assert_no_circles(dir: &Path, crate_prefix: &str) {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).expect("read a module directory") {
        let p = e.expect("an entry").path();
        let stem = p
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if p.extension().is_some_and(|x| x == "rs")
            && !["mod", "lib", "main"].contains(&stem.as_str())
        {
            files.push((stem, std::fs::read_to_string(&p).expect("read")));
        }
    }
    let names: BTreeSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let mut uses: BTreeSet<(String, String)> = BTreeSet::new();
    for (name, text) in &files {
        let mut refs = crate_refs(text, "super::");
        refs.extend(crate_refs(text, crate_prefix));
        for r in refs {
            if r != *name && names.contains(r.as_str()) {
                uses.insert((name.clone(), r));
            }
        }
    }
    let circles: Vec<String> = uses
        .iter()
        .filter(|(a, b)| a < b && uses.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{}: {a}.rs ↔ {b}.rs", dir.display()))
        .collect();
    assert!(
        circles.is_empty(),
        "files that use each other:\n{}",
        circles.join("\n")
    );
}

#[test]
fn no_circles_between_the_files_of_a_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (dir, prefix) in [
        ("gateway/src/http", "crate::http::"),
        ("gateway/src/s3", "crate::s3::"),
        ("gateway/src/s3/multipart", "crate::s3::multipart::"),
        ("gateway/src/objects", "crate::objects::"),
        ("gateway/src/store", "crate::store::"),
        ("gateway/src/origin", "crate::origin::"),
        ("client-sdk/src", "crate::"),
        ("fastpath/src", "crate::"),
        ("fastpath/src/fabric", "crate::fabric::"),
        ("fastpath/src/reader", "crate::reader::"),
        ("cli/src", "crate::"),
    ] {
        assert_no_circles(&root.join(dir), prefix);
    }
}

/// The SDK carries no dependency of the `rasa` command (which is its own crate, `cli/`):
/// a program that uses `rasa-client` does not build clap, indicatif, humantime or bytesize.
#[test]
fn the_sdk_has_no_cli_dependencies() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../client-sdk/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("read client-sdk/Cargo.toml");
    for cli_only in ["clap", "indicatif", "humantime", "bytesize"] {
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with(cli_only)),
            "rasa-client depends on {cli_only}"
        );
    }
    assert!(!text.contains("[[bin]]"), "rasa-client builds a binary");
}

/// What the fronts (`http/`, `s3/`) must leave to the object service (`objects/`): looking
/// a key up in the store or the origin, publishing, deleting, and talking to the origin
/// about objects. Written once there, so a change to lookup or write order is one change.
#[test]
fn the_fronts_leave_lookups_and_writes_to_the_object_service() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src");
    let forbidden = [
        ".publish(",
        ".read_current(",
        ".from_disk(",
        "store().current(",
        "store().delete(",
        "store().version(",
        "origin().get(",
        "origin().get_range(",
        "origin().put(",
        "origin().delete(",
        "origin().head(",
        "readthrough::Lookup",
    ];
    let mut found = Vec::new();
    for front in ["http", "s3"] {
        let mut files = Vec::new();
        rust_files(&root.join(front), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read a source file");
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for call in forbidden.iter().filter(|c| code.contains(**c)) {
                    found.push(format!("{}:{}: {call}", f.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a front does the object service's work:\n{}",
        found.join("\n")
    );
}

/// In the fast path only `fabric/` and `library.rs` touch the raw bindings (`sys`): the
/// reader and the server post reads and reap completions through `fabric::queue`.
#[test]
fn only_the_fabric_layer_touches_the_raw_bindings() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fastpath/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut raw = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .into_owned();
        if rel.starts_with("fabric/") || rel.starts_with("sys/") || rel == "library.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains("sys::") || code.contains("crate::sys") {
                raw.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        raw.is_empty(),
        "raw libfabric calls outside fabric/:\n{}",
        raw.join("\n")
    );
}

/// No type has more than [`MOST_METHODS`] methods (its inherent `impl` blocks, across
/// files, counted crate by crate): a type that does more is split into components.
const MOST_METHODS: usize = 20;

#[test]
fn no_type_has_more_than_about_25_methods() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut over = Vec::new();
    for krate in [
        "gateway",
        "client-sdk",
        "fastpath",
        "openapi",
        "cli",
        "python",
        "nixl-plugin",
    ] {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        let mut methods: BTreeMap<String, usize> = BTreeMap::new();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read a source file");
            let mut current: Option<String> = None;
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("impl") {
                    // `impl Trait for Type` blocks are the trait's; count inherent ones.
                    current = (!line.contains(" for ") && rest.starts_with([' ', '<']))
                        .then(|| inherent_type(rest));
                    continue;
                }
                if line.starts_with('}') {
                    current = None;
                }
                let item = line.strip_prefix("    ").unwrap_or_default();
                let item = item
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub(super) ")
                    .trim_start_matches("pub ")
                    .trim_start_matches("async ")
                    .trim_start_matches("unsafe ")
                    .trim_start_matches("const ");
                if let (Some(ty), true) = (&current, item.starts_with("fn ")) {
                    *methods.entry(ty.clone()).or_default() += 1;
                }
            }
        }
        for (ty, n) in methods.into_iter().filter(|(_, n)| *n > MOST_METHODS) {
            over.push(format!("{krate}: {ty} has {n} methods"));
        }
    }
    assert!(over.is_empty(), "types to split:\n{}", over.join("\n"));
}

/// The type an `impl` line names (after `impl`): `<'a> Memory<'a> {` → `Memory`.
fn inherent_type(rest: &str) -> String {
    let rest = rest.trim_start();
    let rest = match rest.strip_prefix('<') {
        Some(generics) => {
            let mut depth = 1;
            let end = generics
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '<' => 1,
                        '>' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(0, |(i, _)| i + 1);
            &generics[end..]
        }
        None => rest,
    };
    let name: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    name.rsplit("::").next().unwrap_or_default().to_owned()
}

mod circles;
mod room;
mod sizes;
mod wiring;
