//! Tests of the configuration file ([`super::file`], [`super::describe`]).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

use super::describe::{default_of, example, example_of, reference, show};
use super::file::{load, options, LoadError, Loaded};

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rasa-config-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rasa.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn load_with(text: &str, name: &str, flags: &[&str]) -> Result<Loaded, String> {
    let path = write(name, text);
    let mut argv: Vec<OsString> = vec!["rasa-gateway".into(), "--config".into(), path.into()];
    argv.extend(flags.iter().map(OsString::from));
    load(argv).map_err(|e| match e {
        LoadError::Line(e) => e.to_string(),
        LoadError::File(why) => why.to_string(),
    })
}

/// Args without the name of the file they came from.
fn settings(l: &Loaded) -> String {
    let mut args = l.args.clone();
    args.config = None;
    format!("{args:?}")
}

#[test]
fn the_example_is_complete_and_means_the_defaults() {
    let from_example = load_with(&example(), "example", &[]).unwrap();
    from_example.args.validate().unwrap();
    let plain = load(vec!["rasa-gateway".into()]).map_err(|_| ()).unwrap();
    assert_eq!(settings(&from_example), settings(&plain));
    // Every option is in it, set or commented out.
    let text = example();
    for o in options() {
        let set = format!("\n{} = ", o.key);
        let commented = format!("\n# {} = ", o.key);
        assert!(
            text.contains(&set) || text.contains(&commented),
            "{} missing from the example",
            o.key
        );
    }
}

#[test]
fn every_option_has_one_place_and_an_example_or_a_default() {
    let opts = options();
    let mut seen = BTreeSet::new();
    for o in &opts {
        assert!(
            seen.insert(o.key.clone()),
            "{} twice in the configuration",
            o.key
        );
        assert!(
            default_of(o).is_some() || example_of(&o.key).is_some(),
            "{} has neither a default nor an example value",
            o.key
        );
        assert!(o.arg.get_help().is_some(), "{} has no help", o.key);
    }
    assert!(opts.len() >= 60, "only {} options", opts.len());
    for section in [
        "server",
        "memory",
        "limits",
        "fast_path",
        "origin",
        "tls",
        "disk",
        "cluster",
        "s3",
    ] {
        assert!(opts.iter().any(|o| o.section == section), "no [{section}]");
    }
}

#[test]
fn file_values_apply_and_flags_win() {
    let text = "[memory]\nmemory = \"2GiB\"\nlease = \"3s\"\n[limits]\nmax_batch_keys = 7\nallowed_host = [\"a.example\", \"b.example\"]\n[server]\npublic_metrics = true\n";
    let l = load_with(text, "apply", &["--memory", "3GiB"]).unwrap();
    assert_eq!(l.args.memory, 3 << 30, "the flag wins");
    assert_eq!(l.args.lease, std::time::Duration::from_secs(3));
    assert_eq!(l.args.max_batch_keys, 7);
    assert_eq!(l.args.edge.allowed_hosts, ["a.example", "b.example"]);
    assert!(l.args.public_metrics);
    let shown = show(&l);
    assert!(
        shown.contains("memory = \"3GiB\"  # flag --memory"),
        "{shown}"
    );
    assert!(shown.contains("lease = \"3s\"  # file"), "{shown}");
    assert!(
        shown.contains("arena_size = \"64MiB\"  # default"),
        "{shown}"
    );
    assert!(shown.contains("# origin is not set"), "{shown}");
}

#[test]
fn the_file_can_meet_what_a_flag_requires() {
    // --s3-endpoint requires --origin: either may come from the file.
    let text = "[origin]\norigin = \"s3://bucket/prefix\"\n";
    let l = load_with(text, "requires", &["--s3-endpoint", "http://127.0.0.1:9"]).unwrap();
    assert_eq!(l.args.s3_endpoint.as_deref(), Some("http://127.0.0.1:9"));
    assert!(l.args.origin.is_some());
}

#[test]
fn unknown_keys_and_bad_values_are_named_by_line() {
    let text = "[memory]\nmemory = \"2GiB\"\nmemroy = \"1GiB\"\n\n[limits]\nlease = \"1s\"\nmax_batch_keys = \"many\"\n[fastpath]\nfast_path = \"on\"\n[origin]\norigin_fill = \"half\"\n[server]\npublic_metrics = \"yes\"\n";
    let why = load_with(text, "bad", &[]).unwrap_err();
    let lines: Vec<&str> = why.lines().collect();
    assert_eq!(lines.len(), 6, "{why}");
    assert!(
        lines[0]
            .ends_with(":3: unknown key `memroy` in [memory]: did you mean `memory` in [memory]?"),
        "{why}"
    );
    assert!(
        lines[1].ends_with(":6: `lease` belongs in [memory], not [limits]"),
        "{why}"
    );
    assert!(
        lines[2].contains(
            ":7: limits.max_batch_keys: invalid value 'many': invalid digit found in string"
        ),
        "{why}"
    );
    assert!(
        lines[3].contains("[fastpath] is not a section: did you mean [fast_path]?"),
        "{why}"
    );
    assert!(
        lines[4]
            .contains("origin.origin_fill: invalid value 'half' (possible values: whole, range)"),
        "{why}"
    );
    assert!(
        lines[5].ends_with(":13: server.public_metrics: give true or false"),
        "{why}"
    );
    let why = load_with("[server]\npublic_metrics = \"yes\"\n", "switch", &[]).unwrap_err();
    assert!(
        why.ends_with(":2: server.public_metrics: give true or false"),
        "{why}"
    );
    let why = load_with("memory = \"1GiB\"\n", "top", &[]).unwrap_err();
    assert!(why.ends_with(":1: `memory` belongs in [memory]"), "{why}");
    let why = load_with("[memory\n", "syntax", &[]).unwrap_err();
    assert!(why.contains(":1: "), "{why}");
}

#[test]
fn constraints_between_file_values_are_checked_at_start() {
    let l = load_with(
        "[memory]\nmemory = \"1MiB\"\narena_size = \"4MiB\"\n",
        "together",
        &[],
    )
    .unwrap();
    let why = l.args.validate().unwrap_err();
    assert!(
        why.to_string()
            .contains("--arena-size 4.0 MiB does not fit in --memory 1.0 MiB"),
        "{why}"
    );
    let why = load_with("[origin]\ns3_endpoint = \"http://x:1\"\n", "needs", &[]).unwrap_err();
    assert!(why.contains("--origin"), "{why}");
}

#[test]
fn the_reference_in_docs_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == reference(),
        "docs/configuration.md is stale: run `make docs` (rasa-gateway config reference > docs/configuration.md)"
    );
}

/// Review III, finding 7: `config show` printed credentials inside URLs.
#[test]
fn show_masks_credentials_inside_urls() {
    let text = "[origin]\norigin = \"s3://bucket/prefix\"\ns3_endpoint = \"http://AKID:SECRET@127.0.0.1:9000/x\"\n";
    let l = load_with(text, "masked", &[]).unwrap();
    let shown = show(&l);
    for secret in ["AKID", "SECRET"] {
        assert!(!shown.contains(secret), "{secret} in:\n{shown}");
    }
    assert!(
        shown.contains("s3_endpoint = \"http://********@127.0.0.1:9000/x\""),
        "{shown}"
    );
    assert_eq!(
        masked("etcd://u:pw@10.0.0.2:2379"),
        "etcd://********@10.0.0.2:2379"
    );
    use super::describe::without_url_credentials as masked;
    assert_eq!(
        masked("http://h:1/a@b"),
        "http://h:1/a@b",
        "an @ after the host"
    );
    assert_eq!(masked("plain@text"), "plain@text");
}
