//! The status page (`/ui`) in a real browser: headless Chromium loads it from the gateway,
//! runs its script against `/v1/stats`, and the figures it shows are the ones `/v1/stats`
//! reports; with a token file, it asks for a token before making any request.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rasa_tests::{new_token, pattern, temp_dir, Gateway, S3Server};
use serde_json::Value;

/// Longest a page load (Chromium start, script, polls, DOM dump) may take.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);

/// What Chromium made of a page.
struct Loaded {
    /// The DOM after the script ran (`--dump-dom`).
    dom: String,
    /// Chromium's log: page console messages appear as `:CONSOLE` lines.
    log: String,
}

impl Loaded {
    /// The lines the page wrote to the console (errors, failed loads, uncaught exceptions).
    fn console(&self) -> Vec<&str> {
        self.log
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .collect()
    }

    /// Every `data-stat` element's figure: (path, raw value).
    fn figures(&self) -> Vec<(String, String)> {
        self.dom
            .split('<')
            .filter_map(|tag| {
                let tag = tag.split('>').next()?;
                Some((attr(tag, "data-stat")?, attr(tag, "data-value")?))
            })
            .collect()
    }

    /// The value of attribute `name` on the element whose tag starts with `tag`.
    fn attr_of(&self, tag: &str, name: &str) -> Option<String> {
        let at = self.dom.find(&format!("<{tag}"))?;
        let open = self.dom[at..].split('>').next()?;
        attr(open, name)
    }
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(tag[start..start + len].replace("&amp;", "&"))
}

/// Loads `url` in headless Chromium, letting the page run for `budget` of virtual time.
fn load(url: &str, budget: Duration) -> Loaded {
    let profile = temp_dir("chromium");
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox", // tests run as root in CI containers
            "--disable-gpu",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={}", budget.as_millis()))
        .arg("--dump-dom")
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run chromium (scripts/setup.sh installs it)");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let dom = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish loading {url} within {BROWSER_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let loaded = Loaded {
        dom: dom.join().unwrap(),
        log: log.join().unwrap(),
    };
    let _ = std::fs::remove_dir_all(profile);
    assert!(status.success(), "chromium failed on {url}: {}", loaded.log);
    loaded
}

fn pick<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| &v[k])
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// What the page should show for `path`, from a `/v1/stats` answer's `now`.
fn expected(now: &Value, path: &str) -> Option<f64> {
    let n = |p: &str| {
        pick(now, p)
            .as_f64()
            .unwrap_or_else(|| panic!("{p} in {now}"))
    };
    match path {
        "derived.requests_per_s" => None, // a rate between samples; checked elsewhere
        "derived.hit_ratio" => ratio(n("cache.hits"), n("cache.hits") + n("cache.misses")),
        "derived.fast_path_share" => ratio(
            n("traffic.one_sided_bytes"),
            n("traffic.one_sided_bytes") + n("traffic.http_bytes") + n("traffic.s3_bytes"),
        ),
        "derived.origin_mean_ms" => ratio(
            1000.0 * n("origin.fetch_seconds_sum"),
            n("origin.fetch_count"),
        ),
        p => Some(n(p)),
    }
}

async fn stats(gw: &Gateway, token: Option<&str>) -> Value {
    let mut req = rasa_tests::http().get(gw.url("/v1/stats"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// Hits, misses, origin fetches and descriptors, so no figure on the page is trivially 0.
async fn traffic(gw: &Gateway, s3: &S3Server, token: Option<&str>) {
    let c = rasa_tests::http();
    let auth = |r: reqwest::RequestBuilder| match token {
        Some(t) => r.bearer_auth(t),
        None => r,
    };
    s3.put_file("pre/cold", &pattern(3000, 1));
    for i in 0..5 {
        let key = format!("/v1/objects/page/{i}");
        let r = auth(c.put(gw.url(&key)).body(pattern(1000 + i, 2)));
        assert_eq!(r.send().await.unwrap().status(), 201);
        for _ in 0..3 {
            let r = auth(c.get(gw.url(&key))).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
        }
        let r = auth(c.get(gw.url(&format!("/v1/descriptors/page/{i}"))));
        assert_eq!(r.send().await.unwrap().status(), 200);
    }
    let r = auth(c.get(gw.url("/v1/objects/cold")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().len(), 3000);
    let r = auth(c.get(gw.url("/v1/objects/absent")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// A gateway reading through `s3` (prefix `pre`) whose figures stay still between requests:
/// no warm-up, which faults spare memory in a step at a time in the background, so
/// `memory.allocated_bytes` would move between the page's last poll and `/v1/stats`.
fn still_gateway(s3: &S3Server, extra: &[&str]) -> Gateway {
    let mut args = s3.gateway_args("pre");
    args.extend(
        ["--warm-memory", "0"]
            .iter()
            .chain(extra)
            .map(|a| a.to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_with_s3(&args)
}

/// The page ran, showed figures, and wrote nothing to the console.
fn assert_clean(page: &Loaded) {
    assert!(page.console().is_empty(), "console: {:?}", page.console());
    assert_eq!(page.attr_of("body", "data-errors").as_deref(), Some("0"));
}

/// Every figure the page shows is what `/v1/stats` says (totals do not move between the
/// page's last poll and this request: only `/v1/stats` itself and `/ui` are called, and
/// no warm-up runs in the background).
fn assert_figures_match(page: &Loaded, now: &Value) {
    let figures = page.figures();
    assert!(
        figures.len() >= 25,
        "too few figures on the page: {figures:?}"
    );
    for (path, shown) in &figures {
        let Some(want) = expected(now, path) else {
            continue;
        };
        let got: f64 = shown
            .parse()
            .unwrap_or_else(|_| panic!("{path} shows {shown:?}"));
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{path}: the page shows {got}, /v1/stats says {want}"
        );
    }
    let hits = expected(now, "cache.hits").unwrap();
    assert!(hits >= 15.0, "traffic made at least 15 hits: {now}");
    assert!(expected(now, "origin.fetches").unwrap() >= 1.0, "{now}");
}

#[tokio::test]
async fn the_status_page_shows_what_v1_stats_reports() {
    let s3 = S3Server::start();
    let gw = still_gateway(&s3, &[]);
    traffic(&gw, &s3, None).await;
    let url = gw.url("/ui");
    let page = tokio::task::spawn_blocking(move || load(&url, Duration::from_secs(5)))
        .await
        .unwrap();
    assert_clean(&page);
    assert!(page.attr_of("body", "data-shown").is_some(), "{}", page.dom);
    assert!(page.attr_of("main", "hidden").is_none(), "figures hidden");
    let now = stats(&gw, None).await["now"].clone();
    assert_figures_match(&page, &now);
    // Charts were drawn (uPlot canvases) and the cluster section says "single gateway".
    assert!(page.dom.matches("<canvas").count() >= 8, "{}", page.dom);
    assert!(page.dom.contains("A single gateway"));
}

#[tokio::test]
async fn with_tokens_the_page_asks_for_one_then_shows_the_figures() {
    let dir = temp_dir("ui-tokens");
    let file = dir.join("tokens");
    let admin = new_token(&file, "ops", "admin");
    let s3 = S3Server::start();
    let gw = still_gateway(&s3, &["--token-file", &file.display().to_string()]);
    traffic(&gw, &s3, Some(&admin)).await;

    // No token: the form, no figures, and no request refused on the way (no console line).
    let url = gw.url("/ui");
    let page = tokio::task::spawn_blocking(move || load(&url, Duration::from_secs(3)))
        .await
        .unwrap();
    assert_clean(&page);
    assert!(page.attr_of("form", "hidden").is_none(), "{}", page.dom);
    assert!(page.attr_of("main", "hidden").is_some(), "{}", page.dom);
    assert!(page.attr_of("body", "data-shown").is_none());

    // A token in the fragment (never sent to the server): the figures.
    let url = format!("{}#token={admin}", gw.url("/ui"));
    let page = tokio::task::spawn_blocking(move || load(&url, Duration::from_secs(5)))
        .await
        .unwrap();
    assert_clean(&page);
    assert!(page.attr_of("body", "data-shown").is_some(), "{}", page.dom);
    let now = stats(&gw, Some(&admin)).await["now"].clone();
    assert_figures_match(&page, &now);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn stats_history_grows_a_sample_a_second_and_since_returns_only_newer() {
    let gw = Gateway::start(&[]);
    let first = stats(&gw, None).await;
    assert_eq!(first["interval_ms"], 1000);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut all = first;
    while all["history"].as_array().unwrap().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "no 3 samples in 10 s: {}",
            all["history"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        all = stats(&gw, None).await;
    }
    let ts: Vec<u64> = all["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["t_ms"].as_u64().unwrap())
        .collect();
    assert!(ts.windows(2).all(|w| w[0] < w[1]), "{ts:?}");
    let since = ts[ts.len() - 2];
    let newer = rasa_tests::http()
        .get(gw.url(&format!("/v1/stats?since={since}")))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let newer: Vec<u64> = newer["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["t_ms"].as_u64().unwrap())
        .collect();
    assert!(
        !newer.is_empty() && newer.iter().all(|&t| t > since),
        "{newer:?}"
    );
    for bad in ["yesterday", "-1", "9223372036854775808"] {
        let r = rasa_tests::http()
            .get(gw.url(&format!("/v1/stats?since={bad}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "since={bad}");
        assert_eq!(r.headers()["content-type"], rasa_openapi::PROBLEM_JSON);
    }
}

#[tokio::test]
async fn in_a_cluster_the_page_lists_the_members_with_links_to_their_pages() {
    let etcd = rasa_tests::etcd::Etcd::start();
    let name = rasa_tests::etcd::cluster_name("ui");
    let gws = crate::cluster::fleet(&etcd, &name, 2, "5s", &[]);
    let view = crate::cluster::all_see(&[&gws[0], &gws[1]], 2).await;
    let url = gws[0].url("/ui");
    let page = tokio::task::spawn_blocking(move || load(&url, Duration::from_secs(3)))
        .await
        .unwrap();
    assert_clean(&page);
    assert!(page.attr_of("table", "hidden").is_none(), "{}", page.dom);
    for m in &view.members {
        let link = format!(
            "<a href=\"{}/ui\">{}",
            m.url.trim_end_matches('/'),
            m.node_id
        );
        assert!(page.dom.contains(&link), "no {link:?} in {}", page.dom);
    }
    assert_eq!(page.dom.matches("(this page)").count(), 1);
    assert_eq!(page.dom.matches("<tr class=\"serving\">").count(), 2);
}
