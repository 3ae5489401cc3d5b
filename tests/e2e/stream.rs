//! Large values streamed, not held: the SDK's `get_to`/`get_to_file` and `rasa get`, on
//! both paths, with bytes compared; a corrupted frame is never written out as a complete
//! value; an output that is a device is written, not replaced.

use std::process::Command;
use std::time::Instant;

use rasa_client::{Client, Error, FastPath, ReadPath};
use rasa_openapi::Descriptor;
use rasa_tests::{pattern, sha256_hex, temp_dir, workspace_bin, Gateway};

const BIG: usize = 64 << 20;

fn rasa(gw: &Gateway, args: &[&str]) -> std::process::Output {
    Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &gw.base])
        .args(args)
        .output()
        .expect("run rasa")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_value_streams_through_the_sdk_and_the_cli_on_both_paths() {
    let gw = Gateway::start(&["--fast-path", "on", "--test-hooks"]);
    let value = pattern(BIG, 64);
    let c = rasa_tests::http();
    let r = c
        .put(gw.url("/v1/objects/big"))
        .body(value.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let dir = temp_dir("stream");
    for (mode, path) in [
        (FastPath::Required, ReadPath::Fabric),
        (FastPath::Off, ReadPath::Http),
    ] {
        let client = Client::builder(&gw.base).fast_path(mode).build().unwrap();
        let mut out = Vec::new();
        let w = client.get_to("big", &mut out).await.unwrap();
        assert_eq!(w.path, path);
        assert_eq!(w.length, BIG as u64);
        assert!(out == value, "{mode:?}: streamed bytes differ");
        let file = dir.join(format!("sdk-{}", path.as_str()));
        let w = client.get_to_file("big", &file).await.unwrap();
        assert_eq!(
            (w.path, w.sha256.as_str()),
            (path, sha256_hex(&value).as_str())
        );
        assert!(std::fs::read(&file).unwrap() == value);
        let file = dir.join(format!("cli-{}", path.as_str()));
        let flag = if mode == FastPath::Off {
            "off"
        } else {
            "required"
        };
        let out = rasa(
            &gw,
            &[
                "get",
                "big",
                "-o",
                file.to_str().unwrap(),
                "--fast-path",
                flag,
                "--json",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["path"], path.as_str());
        assert_eq!(json["sha256"], sha256_hex(&value));
        assert!(std::fs::read(&file).unwrap() == value);
        // Standard output too.
        let out = rasa(&gw, &["get", "big", "--fast-path", flag]);
        assert!(out.status.success());
        assert!(out.stdout == value);
    }
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 4, "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_frame_is_never_written_out_as_a_complete_value() {
    let gw = Gateway::start(&["--fast-path", "on", "--test-hooks"]);
    let value = pattern(5 << 20, 9);
    let c = rasa_tests::http();
    c.put(gw.url("/v1/objects/v"))
        .body(value.clone())
        .send()
        .await
        .unwrap();
    // A descriptor of a copy with one byte flipped: the stream stops short of the end.
    let sent = Instant::now();
    let bad: Descriptor =
        rasa_tests::json_of(c.post(gw.url("/v1/_test/corrupt/v?serve=true"))).await;
    let client = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let mut out = Vec::new();
    let e = client
        .versions()
        .read_descriptor_to(&bad, sent, &mut out)
        .await
        .unwrap_err();
    assert!(
        out.len() < value.len(),
        "a rejected frame was written out whole"
    );
    assert!(
        matches!(e, Error::Incomplete { .. } | Error::FastPath(_)),
        "{e}"
    );

    // The key's descriptors now name the corrupt copy. Required: the call fails and no
    // file appears; auto: the read starts over on HTTP and the file is right.
    let dir = temp_dir("corrupt");
    let file = dir.join("v");
    let out = rasa(
        &gw,
        &[
            "get",
            "v",
            "-o",
            file.to_str().unwrap(),
            "--fast-path",
            "required",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("frame"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!file.exists(), "a failed read left a file");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "a temporary file was left"
    );
    let out = rasa(
        &gw,
        &[
            "get",
            "v",
            "-o",
            file.to_str().unwrap(),
            "--fast-path",
            "auto",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"path\":\"http\""));
    assert!(std::fs::read(&file).unwrap() == value);
}

#[tokio::test]
async fn an_output_that_is_a_device_is_written_not_replaced() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let c = rasa_tests::http();
    c.put(gw.url("/v1/objects/k"))
        .body(pattern(3 << 20, 1))
        .send()
        .await
        .unwrap();
    // A device node of our own (like /dev/null): renaming a file over it would replace it.
    let dev = temp_dir("dev").join("null");
    let made = Command::new("mknod")
        .arg(&dev)
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(made.success(), "mknod (tests run as root)");
    for mode in ["required", "off"] {
        let out = rasa(
            &gw,
            &["get", "k", "-o", dev.to_str().unwrap(), "--fast-path", mode],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kind = std::fs::symlink_metadata(&dev).unwrap().file_type();
        assert!(
            std::os::unix::fs::FileTypeExt::is_char_device(&kind),
            "{mode}: replaced"
        );
        // With --json, the SHA-256 is of the bytes written, not of reading the device back.
        let out = rasa(
            &gw,
            &[
                "get",
                "k",
                "-o",
                dev.to_str().unwrap(),
                "--fast-path",
                mode,
                "--json",
            ],
        );
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["sha256"], sha256_hex(&pattern(3 << 20, 1)), "{mode}");
        assert_eq!(v["length"], 3 << 20);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_is_put_streamed_with_its_length() {
    // Chunked uploads are gathered in 1 MiB at most here: only a body sent with its
    // length (streamed into arena memory) can be 64 MiB.
    let gw = Gateway::start(&["--chunked-upload-memory", "1MiB"]);
    let value = pattern(BIG, 65);
    let file = temp_dir("put").join("big");
    std::fs::write(&file, &value).unwrap();
    let out = rasa(
        &gw,
        &[
            "put",
            "big",
            file.to_str().unwrap(),
            "--content-type",
            "application/x-weights",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Descriptor = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (d.length, d.sha256.as_str()),
        (BIG as u64, sha256_hex(&value).as_str())
    );
    assert_eq!(d.content_type, "application/x-weights");
    let client = Client::builder(&gw.base).build().unwrap();
    let d = client.put_file("again", &file, None).await.unwrap();
    assert_eq!(d.sha256, sha256_hex(&value));
    let e = client
        .put_file("none", temp_dir("put").join("missing"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Input(_)), "{e}");
}
