//! `scripts/setup.sh` detects each dependency the way the build uses it. It once took
//! `libclang-cpp.so.14` (LLVM's C++ library) for libclang, skipped `libclang-dev`, and
//! `make run` failed on a fresh machine. These tests run its `--dry-run` over fake
//! system trees (`RASA_SETUP_SYSROOT`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/setup.sh")
}

/// The Debian packages `setup.sh --dry-run` would install with `root` as the system tree.
fn would_install(root: &Path) -> Vec<String> {
    let out = Command::new("bash")
        .arg(script())
        .arg("--dry-run")
        .env("RASA_SETUP_SYSROOT", root)
        .env_remove("LIBCLANG_PATH")
        .output()
        .expect("run scripts/setup.sh --dry-run");
    assert!(
        out.status.success(),
        "setup.sh --dry-run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("package names are text")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn tree(files: &[&str]) -> PathBuf {
    let dir = rasa_tests::temp_dir("setup-sysroot");
    for f in files {
        let path = dir.join(f);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, b"").expect("touch");
    }
    dir
}

#[test]
fn libclang_cpp_alone_is_not_libclang() {
    let root = tree(&["usr/lib/llvm-14/lib/libclang-cpp.so.14"]);
    let pkgs = would_install(&root);
    assert!(pkgs.iter().any(|p| p == "libclang-dev"), "{pkgs:?}");
}

#[test]
fn a_real_libclang_is_found_where_clang_sys_looks() {
    for lib in [
        "usr/lib/llvm-14/lib/libclang.so.1",
        "usr/lib/llvm-14/lib/libclang-14.so.1",
        "usr/lib/x86_64-linux-gnu/libclang-14.so.14",
        "usr/lib/libclang.so",
    ] {
        let root = tree(&["usr/lib/llvm-14/lib/libclang-cpp.so.14", lib]);
        let pkgs = would_install(&root);
        assert!(!pkgs.iter().any(|p| p == "libclang-dev"), "{lib}: {pkgs:?}");
    }
}

#[test]
fn libfabric_needs_its_pkg_config_file_and_its_header() {
    let pc = "usr/lib/x86_64-linux-gnu/pkgconfig/libfabric.pc";
    let header = "usr/include/rdma/fabric.h";
    let root = tree(&[header]);
    assert!(would_install(&root).contains(&"libfabric-dev".to_owned()));
    let root = tree(&[pc, header]);
    std::fs::write(
        root.join(pc),
        "prefix=/usr\nincludedir=${prefix}/include\n\nName: libfabric\nDescription: x\nVersion: 1.17.0\nLibs: -lfabric\nCflags:\n",
    )
    .expect("write the .pc file");
    assert!(!would_install(&root).contains(&"libfabric-dev".to_owned()));
    std::fs::remove_file(root.join(header)).expect("rm header");
    assert!(would_install(&root).contains(&"libfabric-dev".to_owned()));
}

#[test]
fn the_efa_installers_libfabric_counts_as_libfabric() {
    let pc = "opt/amazon/efa/lib64/pkgconfig/libfabric.pc";
    let header = "opt/amazon/efa/include/rdma/fabric.h";
    let root = tree(&[pc, header]);
    std::fs::write(
        root.join(pc),
        "prefix=/opt/amazon/efa\nincludedir=${prefix}/include\n\nName: libfabric\nDescription: x\nVersion: 2.3.0\nLibs: -lfabric\nCflags: -I${includedir}\n",
    )
    .expect("write the .pc file");
    assert!(!would_install(&root).contains(&"libfabric-dev".to_owned()));
}

#[test]
fn clang_headers_are_needed_besides_the_library() {
    let root = tree(&["usr/lib/llvm-14/lib/libclang.so.1"]);
    assert!(would_install(&root).contains(&"clang".to_owned()));
    let root = tree(&[
        "usr/lib/llvm-14/lib/libclang.so.1",
        "usr/lib/llvm-14/lib/clang/14.0.6/include/stddef.h",
    ]);
    assert!(!would_install(&root).contains(&"clang".to_owned()));
}

/// etcd-client's build compiles etcd's `.proto` files, which import Google's well-known
/// protos: `protobuf-compiler` alone (installed without recommends) is not enough.
#[test]
fn protoc_needs_the_well_known_protos() {
    let root = tree(&[]);
    let pkgs = would_install(&root);
    assert!(pkgs.contains(&"protobuf-compiler".to_owned()), "{pkgs:?}");
    assert!(pkgs.contains(&"libprotobuf-dev".to_owned()), "{pkgs:?}");
    let root = tree(&["usr/bin/protoc"]);
    std::fs::set_permissions(
        root.join("usr/bin/protoc"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let pkgs = would_install(&root);
    assert!(!pkgs.contains(&"protobuf-compiler".to_owned()), "{pkgs:?}");
    assert!(pkgs.contains(&"libprotobuf-dev".to_owned()), "{pkgs:?}");
    std::fs::create_dir_all(root.join("usr/include/google/protobuf")).expect("mkdir");
    std::fs::write(
        root.join("usr/include/google/protobuf/descriptor.proto"),
        b"",
    )
    .expect("touch");
    let pkgs = would_install(&root);
    assert!(!pkgs.iter().any(|p| p.contains("protobuf")), "{pkgs:?}");
}

/// On this machine, as the build runs it: protoc compiles a file importing the
/// well-known protos (so a fresh machine's `make test` got what it needs).
#[test]
fn this_machines_protoc_has_the_well_known_protos() {
    let out = Command::new("bash")
        .arg(script())
        .arg("--dry-run")
        .output()
        .expect("run scripts/setup.sh --dry-run");
    let pkgs = String::from_utf8_lossy(&out.stdout);
    assert!(
        !pkgs.contains("protobuf"),
        "setup.sh would still install: {pkgs}"
    );
}

/// `setup.sh --dry-run` (with `args`) on a machine whose `PATH` holds only the shell
/// tools the script itself runs: what it would install, packages and other steps.
fn on_a_bare_machine(args: &[&str]) -> (Vec<String>, String) {
    let bin = rasa_tests::temp_dir("setup-bin");
    for tool in [
        "bash", "sed", "grep", "mktemp", "rm", "cat", "find", "dirname", "ls", "head", "tr", "id",
        "env", "sort",
    ] {
        let Some(path) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(tool))
            .find(|p| p.exists())
        else {
            continue;
        };
        std::os::unix::fs::symlink(path, bin.join(tool)).expect("link a tool");
    }
    let out = Command::new(bin.join("bash"))
        .arg(script())
        .args(args)
        .arg("--dry-run")
        .env("PATH", &bin)
        .env("RASA_SETUP_SYSROOT", tree(&[]))
        .env_remove("LIBCLANG_PATH")
        .env_remove("RASA_SETUP_SKIP_TEST_TOOLS")
        .output()
        .expect("run scripts/setup.sh --dry-run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pkgs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    (pkgs, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn make_run_installs_only_what_running_needs() {
    const TEST_ONLY: [&str; 6] = [
        "etcd-server",
        "chromium",
        "rclone",
        "kubernetes-client",
        "python3-venv",
        "openssl",
    ];
    let (run, run_steps) = on_a_bare_machine(&["--run"]);
    for p in [
        "libfabric-dev",
        "libclang-dev",
        "clang",
        "build-essential",
        "protobuf-compiler",
    ] {
        assert!(
            run.iter().any(|x| x == p),
            "--run must install {p}: {run:?}"
        );
    }
    assert!(
        !run.iter().any(|p| TEST_ONLY.contains(&p.as_str())),
        "{run:?}"
    );
    assert!(
        !run_steps.contains("s3s-fs") && !run_steps.contains("mdbook"),
        "{run_steps}"
    );
    let (all, steps) = on_a_bare_machine(&[]);
    for p in TEST_ONLY {
        assert!(
            all.iter().any(|x| x == p),
            "make test must install {p}: {all:?}"
        );
    }
    assert!(
        steps.contains("s3s-fs") && steps.contains("mdbook"),
        "{steps}"
    );
}
