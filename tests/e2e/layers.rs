//! The gateway's layers point one way (`main`/`server`/`config` → `http` and `s3` → `origin` →
//! `store` → leaf modules → `rasa-fastpath`), and the files inside a module form no
//! circle. Checked over the source text, so a new upward `use` fails here before review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rasa_tests::rust_files;

/// Rank of each top-level module of `rasa-gateway`: a module may use modules of a lower
/// rank (and itself), never a higher or equal one.
const GATEWAY_LAYERS: &[(&str, u32)] = &[
    ("browser", 0),
    ("catalog", 0),
    ("credfile", 0),
    ("key", 0),
    ("media", 0),
    ("net", 0),
    ("pace", 0),
    ("units", 0),
    ("store", 1),
    ("tokens", 1),
    ("cluster", 1),
    ("origin", 2),
    ("http", 3),
    ("s3", 3),
    ("certs", 4),
    ("config", 4),
    ("server", 4),
    ("credentials", 5),
    ("main", 5),
    ("lib", 5),
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
        ("gateway/src/store", "crate::store::"),
        ("gateway/src/origin", "crate::origin::"),
        ("client-sdk/src", "crate::"),
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
