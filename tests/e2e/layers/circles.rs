//! No circles between files, across folders too: the graph of which file uses which (a
//! path `crate::a::b::C` or `super::x` resolved to the most specific file that exists) has
//! no cycle. A module's files using their own parent (`super::Type` to the `mod.rs` that
//! declares them) are not edges: a `mod.rs` and its children are one unit; a parent using
//! its children is an edge, so a circle through a parent is found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rasa_tests::rust_files;

/// The module path (from the crate root) a file is: `s3/cluster/peers.rs` → `[s3, cluster,
/// peers]`, `s3/cluster/mod.rs` → `[s3, cluster]`, `lib.rs` → `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !["mod", "lib", "main"].contains(&stem) {
        parts.push(stem.to_owned());
    }
    parts
}

/// The most specific file for `path` (module segments, then maybe an item).
fn resolve(src: &Path, path: &[String]) -> Option<PathBuf> {
    let mut dir = src.to_path_buf();
    let mut found = None;
    for seg in path {
        let file = dir.join(format!("{seg}.rs"));
        let sub = dir.join(seg);
        if sub.join("mod.rs").is_file() {
            found = Some(sub.join("mod.rs"));
            dir = sub;
        } else if file.is_file() {
            found = Some(file);
            if sub.is_dir() {
                dir = sub;
            } else {
                break;
            }
        } else {
            break;
        }
    }
    found.or_else(|| {
        ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.is_file())
    })
}

/// Every path (as segments from the crate root) `code` names with `crate::`, `super::`,
/// `self::` or a child module's name (`children`: the `mod x;` of the file), including
/// each member of a `{…}` group. `me` is the file's module path.
fn paths(code: &str, me: &[String], children: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let boundary = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let rest = &code[i..];
        let child = children
            .iter()
            .find(|c| rest.starts_with(c.as_str()) && rest[c.len()..].starts_with("::"));
        let start = if !boundary {
            None
        } else if let Some(after) = rest.strip_prefix("crate::") {
            Some((Vec::new(), after))
        } else if rest.starts_with("super::") || rest.starts_with("self::") {
            Some((me.to_vec(), rest))
        } else {
            child.map(|_| (me.to_vec(), rest))
        };
        let Some((mut base, mut tail)) = start else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        loop {
            if let Some(after) = tail.strip_prefix("super::") {
                base.pop();
                tail = after;
            } else if let Some(after) = tail.strip_prefix("self::") {
                tail = after;
            } else {
                break;
            }
        }
        // `a::b::{c, d::e}`: the path's own segments, then each member of its group.
        let own = segments(tail);
        base.extend(own.iter().cloned());
        let consumed: usize = own.iter().map(|s| s.len() + 2).sum();
        match tail
            .get(consumed.min(tail.len())..)
            .and_then(|t| t.strip_prefix('{'))
        {
            Some(group) if consumed > 0 || tail.starts_with('{') => {
                let end = group.find('}').unwrap_or(group.len());
                for member in group[..end].split(',') {
                    let mut p = base.clone();
                    p.extend(segments(member.trim()));
                    out.push(p);
                }
            }
            _ => out.push(base),
        }
        i = code.len() - tail.len() + tail.chars().next().map_or(1, char::len_utf8);
    }
    out
}

fn segments(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for seg in s.split("::") {
        let name: String = seg
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || name == "self" {
            break;
        }
        out.push(name.clone());
        if name.len() != seg.len() {
            break;
        }
    }
    out
}

/// The files of `src` and the files each uses (edges to its own ancestors' `mod.rs` left
/// out).
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in &files {
        let me = module_path(src, f);
        let text = std::fs::read_to_string(f).expect("read a source file");
        let children: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let l = l
                    .trim_start()
                    .trim_start_matches("pub ")
                    .trim_start_matches("pub(crate) ");
                l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
            })
            .collect();
        let mut used = BTreeSet::new();
        for line in text.lines() {
            // An inline test module ends what the file itself uses.
            if line.starts_with("mod tests") {
                break;
            }
            let code = line.split("//").next().unwrap_or_default();
            for p in paths(code, &me, &children) {
                let Some(target) = resolve(src, &p) else {
                    continue;
                };
                let ancestor = target.parent().is_some_and(|d| f.starts_with(d))
                    && target.file_name().is_some_and(|n| {
                        ["mod.rs", "lib.rs", "main.rs"].contains(&n.to_string_lossy().as_ref())
                    });
                if target != *f && !ancestor {
                    used.insert(target);
                }
            }
        }
        edges.insert(f.clone(), used);
    }
    edges
}

/// The cycles of `edges` (Tarjan's strongly connected components of more than one file).
fn cycles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let Some((w, _)) = self.edges.get_key_value(w) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

#[test]
fn no_circles_between_files_across_folders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in [
        "gateway",
        "fastpath",
        "client-sdk",
        "cli",
        "openapi",
        "python",
        "nixl-plugin",
    ] {
        let src = root
            .join(krate)
            .join("src")
            .canonicalize()
            .expect("a crate's src");
        for scc in cycles(&graph(&src)) {
            let names: Vec<String> = scc
                .iter()
                .map(|p| p.strip_prefix(&src).unwrap_or(p).display().to_string())
                .collect();
            found.push(format!("{krate}: {}", names.join(" → ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that use each other, in a circle:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_check_finds_a_circle_through_a_parent() {
    let dir = rasa_tests::temp_dir("circles");
    std::fs::create_dir_all(dir.join("reader")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod local;\nmod reader;\n").unwrap();
    std::fs::write(dir.join("local.rs"), "use crate::reader::Reader;\n").unwrap();
    std::fs::write(dir.join("reader/mod.rs"), "mod engine;\npub use engine::Engine;\nfn f() { engine::run() }\nuse self::engine::x;\nuse super::local::Y;\n").unwrap();
    std::fs::write(
        dir.join("reader/engine.rs"),
        "use super::Reader;\nuse crate::local::Local;\n",
    )
    .unwrap();
    let src = dir.canonicalize().unwrap();
    let found = cycles(&graph(&src));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].len(), 3, "{found:?}");
}
