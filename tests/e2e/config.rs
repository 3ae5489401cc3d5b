//! The configuration file (issue 44): a gateway started from `config example`'s output,
//! file values in force, flags and variables over the file, `config check` and a bad file.

use std::process::Command;

use rasa_tests::{gateway_bin, http, temp_dir, Gateway};

fn gateway(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(gateway_bin())
        .args(args)
        .env_remove("RASA_CONFIG")
        .envs(env.iter().copied())
        .output()
        .expect("run rasa-gateway")
}

/// The status of an 8 KiB PUT.
async fn put_8kib(gw: &Gateway) -> u16 {
    let put = http().put(gw.url("/v1/objects/k")).body(vec![7u8; 8192]);
    put.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_gateway_starts_from_the_example_and_the_file_is_in_force() {
    let dir = temp_dir("config-example");
    let example = gateway(&["config", "example"], &[]);
    assert!(example.status.success());
    let text = String::from_utf8(example.stdout).unwrap();
    let file = dir.join("rasa.toml");
    std::fs::write(&file, &text).unwrap();
    let check = gateway(&["config", "check", file.to_str().unwrap()], &[]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // The example as it is (the test binds port 0 with --listen: a flag over the file).
    let gw = Gateway::start(&["--config", file.to_str().unwrap()]);
    assert_eq!(put_8kib(&gw).await, 201);
    drop(gw);

    // One value changed in the file: the running gateway obeys it.
    let small = text.replace("max_object_size = \"256MiB\"", "max_object_size = \"4KiB\"");
    assert_ne!(small, text, "the example sets max_object_size");
    std::fs::write(&file, &small).unwrap();
    let gw = Gateway::start(&["--config", file.to_str().unwrap()]);
    assert_eq!(
        put_8kib(&gw).await,
        413,
        "the file's max_object_size is in force"
    );
    drop(gw);
    // A variable wins over the file.
    let gw = Gateway::start_env(
        &["--config", file.to_str().unwrap()],
        &[("RASA_MAX_OBJECT_SIZE", "16KiB")],
    );
    assert_eq!(
        put_8kib(&gw).await,
        201,
        "RASA_MAX_OBJECT_SIZE over the file"
    );

    let shown = gateway(
        &[
            "--config",
            file.to_str().unwrap(),
            "--lease",
            "3s",
            "config",
            "show",
        ],
        &[("RASA_MAX_OBJECT_SIZE", "16KiB")],
    );
    let shown = String::from_utf8(shown.stdout).unwrap();
    for line in [
        "max_object_size = \"16KiB\"  # variable RASA_MAX_OBJECT_SIZE",
        "lease = \"3s\"  # flag --lease",
        "memory = \"1GiB\"  # file",
    ] {
        assert!(shown.contains(line), "{line} not in:\n{shown}");
    }
}

#[test]
fn a_bad_file_is_refused_naming_the_line() {
    let dir = temp_dir("config-bad");
    let file = dir.join("rasa.toml");
    std::fs::write(
        &file,
        "[memory]\nmemory = \"1GiB\"\narena_szie = \"1MiB\"\n[disk]\ndisk_size = \"huge\"\n",
    )
    .unwrap();
    let check = gateway(&["config", "check", file.to_str().unwrap()], &[]);
    assert_eq!(check.status.code(), Some(1));
    let why = String::from_utf8_lossy(&check.stderr);
    assert!(why.contains("rasa.toml:3: unknown key `arena_szie` in [memory]: did you mean `arena_size` in [memory]?"), "{why}");
    assert!(
        why.contains("rasa.toml:5: disk.disk_size: invalid value 'huge'"),
        "{why}"
    );
    // The gateway does not start with it either (status 2, before binding anything).
    let start = gateway(
        &[
            "--config",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(start.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&start.stderr).contains("arena_szie"));
    // Values that parse but do not fit together: named as at start.
    std::fs::write(
        &file,
        "[memory]\nmemory = \"1MiB\"\narena_size = \"4MiB\"\n",
    )
    .unwrap();
    let check = gateway(&["config", "check", file.to_str().unwrap()], &[]);
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stderr).contains("does not fit in --memory"));
    let missing = gateway(
        &["config", "check", dir.join("nope.toml").to_str().unwrap()],
        &[],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.toml: No such file"));
}

/// An embedder (or a test) starts a gateway as the binary does: the configuration, then
/// [`rasa_gateway::Gateway::build`], then `serve_until` its own shutdown signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_built_in_process_serves_and_stops() {
    let argv = [
        "rasa-gateway",
        "--listen",
        "127.0.0.1:0",
        "--fast-path",
        "off",
        "--memory",
        "64MiB",
        "--arena-size",
        "4MiB",
        "--max-object-size",
        "1MiB",
        "--upload-staging-memory",
        "8MiB",
    ];
    let loaded = rasa_gateway::config::file::load(argv.iter().map(Into::into).collect())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let args = loaded.args;
    args.validate().unwrap();
    let gw = rasa_gateway::Gateway::build(args).await.unwrap();
    let base = format!("http://{}", gw.addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(gw.serve_until(async move {
        let _ = stopped.await;
    }));
    let put = http()
        .put(format!("{base}/v1/objects/k"))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let got = http()
        .get(format!("{base}/v1/objects/k"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.text().await.unwrap(), "hello");
    stop.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), served)
        .await
        .expect("the gateway stops within 10 s of its shutdown signal")
        .unwrap()
        .unwrap();
}
