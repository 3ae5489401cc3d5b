//! Sizes the style guide sets, checked rather than kept by hand: no source file over
//! [`MOST_LINES`] lines (tests included), no function of the crates over
//! [`MOST_FUNCTION_LINES`] (a test scenario, which reads top to bottom as its story, is
//! not held to it: `tests/e2e` and the `tests.rs` files).

use std::path::Path;

use rasa_tests::rust_files;

/// Longest source file, in lines.
const MOST_LINES: usize = 500;
/// Longest function, in lines (from its `fn` line to its closing brace).
const MOST_FUNCTION_LINES: usize = 100;

/// Where the rules hold: every crate's sources and the tests'.
const DIRS: &[&str] = &[
    "gateway/src",
    "fastpath/src",
    "client-sdk/src",
    "cli/src",
    "openapi/src",
    "python/src",
    "nixl-plugin/src",
    "tests/src",
    "tests/e2e",
];

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in DIRS {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        for f in files {
            let rel = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
            out.push((
                rel,
                std::fs::read_to_string(&f).expect("read a source file"),
            ));
        }
    }
    out
}

#[test]
fn no_source_file_is_over_500_lines() {
    let over: Vec<String> = sources()
        .into_iter()
        .map(|(name, text)| (name, text.lines().count()))
        .filter(|(_, n)| *n > MOST_LINES)
        .map(|(name, n)| format!("{name}: {n} lines"))
        .collect();
    assert!(over.is_empty(), "files to split:\n{}", over.join("\n"));
}

/// `(name, lines)` of every function in `text` whose body is a block: from the line with
/// `fn name` to the first line after it that closes at the `fn` line's indentation.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = fn_name(lines[i]) else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - lines[i].trim_start().len();
        // A declaration without a body (a trait's, an extern's) ends with `;` first.
        let opens = lines[i..]
            .iter()
            .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'));
        match opens {
            Some(o) if lines[i + o].trim_end().ends_with('{') => {
                let close = lines[i + o + 1..].iter().position(|l| {
                    l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}')
                });
                match close {
                    Some(c) => {
                        out.push((name, o + c + 2));
                        i += o + c + 2;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// The function a line declares, if it does.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    if rest.starts_with("//") {
        return None;
    }
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let after = rest.strip_prefix("fn ")?;
    let name: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[test]
fn no_function_is_over_about_100_lines() {
    let scenario = |f: &str| f.starts_with("tests/e2e/") || f.ends_with("tests.rs");
    let mut over = Vec::new();
    for (file, text) in sources().into_iter().filter(|(f, _)| !scenario(f)) {
        for (name, n) in functions(&text) {
            if n > MOST_FUNCTION_LINES {
                over.push(format!("{file}: {name} ({n} lines)"));
            }
        }
    }
    assert!(over.is_empty(), "functions to split:\n{}", over.join("\n"));
}

#[test]
fn the_function_measure_counts_a_body() {
    let text = "fn a() {\n    let x = 1;\n}\n\nimpl X {\n    pub async fn b(\n        y: u8,\n    ) -> u8 {\n        y\n    }\n    fn decl(&self);\n}\n";
    assert_eq!(functions(text), [("a".to_owned(), 3), ("b".to_owned(), 5)]);
}
