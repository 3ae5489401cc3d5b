//! The metric catalog, the Grafana dashboard and `/metrics` agree: the source emits no
//! metric the catalog lacks, the dashboard queries none the gateway does not export, and
//! a running gateway exports only catalogued metrics, each with its help text, with
//! latency histograms in buckets (for p50/p99 across a cluster).

use std::collections::BTreeSet;

use rasa_gateway::catalog::{self, Kind};
use rasa_tests::{pattern, rust_files, workspace_dir, Gateway, S3Server};
use serde_json::Value;

/// The catalog's constants: `(IDENT, metric name)` as `gateway/src/catalog.rs` declares
/// them (`IDENT = "rasa_…", …;`).
fn constants() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(workspace_dir().join("gateway/src/catalog.rs"))
        .expect("read the catalog");
    text.lines()
        .filter_map(|l| {
            let (ident, rest) = l.trim().split_once(" = \"")?;
            let name = rest.split('"').next()?;
            (name.starts_with("rasa_")
                && ident
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .then(|| (ident.to_owned(), name.to_owned()))
        })
        .collect()
}

/// Every metric `text` records through a catalog constant (`catalog::X.counter()`,
/// `.gauge_by(…)`, `.histogram()`), with the kind of handle it takes.
fn emitted(text: &str, consts: &[(String, String)]) -> Vec<(String, Kind)> {
    let mut out = Vec::new();
    for (ident, name) in consts {
        for (at, _) in text.match_indices(ident.as_str()) {
            let before = text[..at].chars().next_back().unwrap_or(' ');
            if before.is_alphanumeric() || before == '_' {
                continue; // a longer name ending in this one
            }
            let after = text[at + ident.len()..].trim_start();
            for (method, kind) in [
                (".counter", Kind::Counter),
                (".gauge", Kind::Gauge),
                (".histogram", Kind::Histogram),
            ] {
                if after.starts_with(method) {
                    out.push((name.clone(), kind));
                }
            }
        }
    }
    out
}

/// Metric names written as literals in a metrics macro (`counter!("rasa_…"`): a name
/// written a second time, outside the catalog.
fn literal_names(text: &str) -> Vec<String> {
    ["counter!(", "gauge!(", "histogram!("]
        .iter()
        .flat_map(|mac| text.match_indices(mac))
        .filter_map(|(at, mac)| {
            let rest = text[at + mac.len()..].trim_start().strip_prefix('"')?;
            let name = &rest[..rest.find('"')?];
            name.starts_with("rasa_").then(|| name.to_owned())
        })
        .collect()
}

/// The catalogued metric a series name belongs to (`_bucket`, `_sum`, `_count` of a
/// histogram), if any.
fn base_of(series: &str) -> Option<&'static catalog::Metric> {
    catalog::find(series).or_else(|| {
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let m = catalog::find(series.strip_suffix(suffix)?)?;
            (m.kind == Kind::Histogram).then_some(m)
        })
    })
}

#[test]
fn the_catalog_lists_every_metric_the_source_emits_and_nothing_stale() {
    let mut files = Vec::new();
    rust_files(&workspace_dir().join("gateway/src"), &mut files);
    rust_files(&workspace_dir().join("fastpath/src"), &mut files);
    let consts = constants();
    assert_eq!(
        consts.len(),
        catalog::METRICS.len(),
        "one constant per metric"
    );
    let mut seen = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read a source file");
        if !f.ends_with("catalog.rs") {
            let twice = literal_names(&text);
            assert!(
                twice.is_empty(),
                "{} writes metric names the catalog declares: {twice:?} (record through catalog::…)",
                f.display()
            );
        }
        for (name, kind) in emitted(&text, &consts) {
            let m = catalog::find(&name).expect("a catalogued name");
            assert_eq!(m.kind, kind, "{name} in {}", f.display());
            seen.insert(name);
        }
    }
    for m in catalog::METRICS {
        assert!(
            seen.contains(m.name),
            "{} is catalogued but never emitted",
            m.name
        );
        assert!(!m.help.is_empty(), "{} has no help text", m.name);
        assert_eq!(
            m.kind == Kind::Counter,
            m.name.ends_with("_total"),
            "{}: counters, and only counters, end in _total",
            m.name
        );
    }
}

/// Every `expr` in the dashboard's panels.
fn exprs(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        if p["type"] == "row" {
            continue;
        }
        let title = p["title"].as_str().expect("a panel title").to_owned();
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title:?} queries nothing");
        for t in targets {
            let e = t["expr"].as_str().expect("an expr");
            assert!(!e.trim().is_empty(), "panel {title:?} has an empty query");
            out.push((title.clone(), e.to_owned()));
        }
    }
    out
}

fn metric_names(expr: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("rasa_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(&tail[..len]);
        rest = &tail[len..];
    }
    out
}

#[test]
fn the_dashboard_is_valid_and_queries_only_exported_metrics() {
    let path = workspace_dir().join("docker/grafana/rasa.json");
    let text = std::fs::read_to_string(&path).expect("docker/grafana/rasa.json");
    let d: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(d["uid"], "rasa-gateway");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .expect("template variables")
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["datasource", "instance"]);
    for p in d["panels"].as_array().unwrap() {
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(x + w <= 24, "panel {} overflows the grid", p["title"]);
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    let mut used = BTreeSet::new();
    for (title, e) in exprs(&d) {
        let names = metric_names(&e);
        assert!(
            !names.is_empty(),
            "panel {title:?} queries no Rasa metric: {e}"
        );
        for n in names {
            assert!(
                base_of(n).is_some(),
                "panel {title:?} queries {n}, which the gateway does not export"
            );
            assert!(
                e.contains("$instance"),
                "panel {title:?} ignores the instance filter: {e}"
            );
            used.insert(n.to_owned());
        }
    }
    // The figures an operator watches, and the p50/p99 the histograms give.
    for must in [
        "rasa_http_requests_total",
        "rasa_http_request_duration_seconds_bucket",
        "rasa_cache_hits_total",
        "rasa_cache_misses_total",
        "rasa_origin_fetch_seconds_bucket",
        "rasa_memory_budget_bytes",
        "rasa_arena_bytes_allocated",
        "rasa_arenas",
        "rasa_evictions_total",
        "rasa_fastpath_bytes_advertised_total",
        "rasa_http_bytes_served_total",
        "rasa_descriptors_total",
        "rasa_keys_rotated_total",
        "rasa_keys_revoked_total",
        "rasa_cluster_members",
    ] {
        assert!(used.contains(must), "the dashboard shows no {must}");
    }
}

#[tokio::test]
async fn a_gateway_exports_only_catalogued_metrics_with_help_and_buckets() {
    let s3 = S3Server::start();
    let args = s3.gateway_args("pre");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_with_s3(&args);
    let c = rasa_tests::http();
    // Before any traffic: unlabelled counters are already there, at 0.
    let fresh = rasa_tests::text_of(c.get(gw.url("/metrics"))).await;
    for m in catalog::METRICS {
        if m.kind == Kind::Counter && m.labels.is_empty() {
            assert!(
                fresh.lines().any(|l| l == format!("{} 0", m.name)),
                "{} is not exported at 0 from the start",
                m.name
            );
        }
    }
    s3.put_file("pre/cold", &pattern(5000, 3));
    let r = c.put(gw.url("/v1/objects/m/a")).body(pattern(100, 1));
    assert_eq!(r.send().await.unwrap().status(), 201);
    for path in ["/v1/objects/m/a", "/v1/objects/cold", "/v1/descriptors/m/a"] {
        let r = c.get(gw.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let text = rasa_tests::text_of(c.get(gw.url("/metrics"))).await;
    let mut names = BTreeSet::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let series = l.split(['{', ' ']).next().unwrap();
        let m = base_of(series).unwrap_or_else(|| panic!("/metrics has {series}, uncatalogued"));
        names.insert(m.name);
    }
    for n in &names {
        let help = format!("# HELP {n} {}", catalog::find(n).unwrap().help);
        assert!(text.contains(&help), "no {help:?} in /metrics");
    }
    for bucketed in [
        "rasa_http_request_duration_seconds_bucket{",
        "rasa_origin_fetch_seconds_bucket{",
    ] {
        assert!(text.contains(bucketed), "no {bucketed}…}} in /metrics");
    }
}
