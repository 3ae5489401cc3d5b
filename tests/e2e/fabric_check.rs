//! `rasa-gateway fabric check` and `rasa fabric check`: what an operator runs on a host
//! before going live, tested on the providers this machine has (`tcp;ofi_rxm`, `sockets`),
//! on one it has not (`efa`), and under a lowered locked-memory limit.

use std::process::{Command, Output};

use rasa_tests::{gateway_bin, workspace_bin};
use serde_json::Value;

fn report(out: &Output) -> Vec<Value> {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["items"].as_array().expect("items").clone()
}

fn find<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("no item {name:?} in {items:?}"))
}

fn gateway_check(args: &[&str]) -> Output {
    Command::new(gateway_bin())
        .args(args)
        .args(["fabric", "check", "--json"])
        .output()
        .expect("run rasa-gateway fabric check")
}

#[test]
fn the_software_providers_pass_and_say_what_was_chosen() {
    for provider in ["tcp;ofi_rxm", "sockets"] {
        let out = gateway_check(&["--fabric-provider", provider, "--listen", "127.0.0.1:0"]);
        assert!(
            out.status.success(),
            "{provider}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let items = report(&out);
        let chosen = find(&items, "chosen provider");
        assert_eq!(chosen["verdict"], "ok");
        assert!(
            chosen["value"].as_str().unwrap().starts_with(provider),
            "{chosen}"
        );
        let version = find(&items, "libfabric version")["value"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(version.starts_with("runtime "), "{version}");
        assert!(find(&items, "libfabric library")["value"]
            .as_str()
            .unwrap()
            .contains("libfabric.so"));
        let providers = find(&items, "providers")["value"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(providers.contains(provider), "{providers}");
        for i in &items {
            assert!(i["verdict"] != "fail", "{i}");
        }
    }
}

#[test]
fn a_low_locked_memory_limit_draws_a_warning_with_the_fix() {
    let out = Command::new("prlimit")
        .args(["--memlock=65536:65536"])
        .arg(gateway_bin())
        .args(["--memory", "1GiB", "fabric", "check", "--json"])
        .output()
        .expect("run prlimit (util-linux)");
    let items = report(&out);
    let memlock = find(&items, "locked memory (RLIMIT_MEMLOCK)");
    assert_eq!(memlock["verdict"], "warn", "{memlock}");
    let value = memlock["value"].as_str().unwrap();
    assert!(value.starts_with("65536 bytes"), "{value}");
    assert!(
        value.contains("2147483648"),
        "twice the budget while keys refresh: {value}"
    );
    assert!(
        memlock["fix"].as_str().unwrap().contains("memlock=-1"),
        "{memlock}"
    );
    // A budget within the limit: fine.
    let out = Command::new("prlimit")
        .args(["--memlock=8388608:8388608"])
        .arg(gateway_bin())
        .args([
            "--memory",
            "1MiB",
            "--arena-size",
            "64KiB",
            "--max-object-size",
            "64KiB",
        ])
        .args(["fabric", "check", "--json"])
        .output()
        .unwrap();
    let items = report(&out);
    assert_eq!(
        find(&items, "locked memory (RLIMIT_MEMLOCK)")["verdict"],
        "ok",
        "{items:?}"
    );
}

#[test]
fn efa_on_a_host_without_it_fails_with_the_reasons() {
    let out = gateway_check(&["--fabric-provider", "efa", "--fabric-addr", "10.0.0.5"]);
    assert!(!out.status.success());
    let items = report(&out);
    assert_eq!(find(&items, "chosen provider")["verdict"], "fail");
    assert_eq!(find(&items, "providers")["verdict"], "fail");
    // Debian's libfabric is older than the API EFA needs for device RDMA read.
    assert_eq!(find(&items, "libfabric version")["verdict"], "fail");
}

#[test]
fn the_client_checks_its_own_host_too() {
    let out = Command::new(workspace_bin("rasa"))
        .args([
            "--endpoint",
            "http://127.0.0.1:9",
            "--timeout",
            "1s",
            "--json",
        ])
        .args(["fabric", "check", "--provider", "sockets"])
        .output()
        .expect("run rasa fabric check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let items = report(&out);
    assert!(find(&items, "chosen provider")["value"]
        .as_str()
        .unwrap()
        .starts_with("sockets"));
    // Without --provider and no gateway to ask, it says so and checks the default.
    let out = Command::new(workspace_bin("rasa"))
        .args(["--endpoint", "http://127.0.0.1:9", "--timeout", "1s"])
        .args(["fabric", "check"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("checking tcp;ofi_rxm"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("chosen provider: tcp;ofi_rxm"));
}
