//! Generates raw libfabric bindings with bindgen over the headers pkg-config finds, and
//! compiles the C shim that makes libfabric's `static inline` calls linkable.
//!
//! libfabric itself is **not linked**: the handful of its exported functions Rasa calls
//! (`fi_getinfo`, `fi_fabric`, …) are generated as a table that `crate::library` fills
//! with `dlopen` the first time the fast path is used. Everything else goes through the
//! shim's `static inline` wrappers, which call through the objects' operation tables.

use std::path::PathBuf;

#[path = "efa_watch.rs"]
mod efa_watch;

/// Where the AWS EFA installer puts libfabric's pkg-config file.
const EFA_PKGCONFIG: [&str; 2] = [
    "/opt/amazon/efa/lib64/pkgconfig",
    "/opt/amazon/efa/lib/pkgconfig",
];

/// libfabric's exported functions that Rasa calls (the rest are `static inline`).
const EXPORTED: &str = "fi_(getinfo|freeinfo|dupinfo|fabric|strerror|version)";

fn main() {
    println!("cargo:rerun-if-changed=src/sys/wrapper.h");
    println!("cargo:rerun-if-changed=src/sys/shim.h");
    println!("cargo:rerun-if-changed=src/sys/shim.c");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    efa_watch::watch_efa_install();

    // AWS's EFA installer puts a current libfabric (with the efa provider) under
    // /opt/amazon/efa, off pkg-config's default path: prefer it to the distribution's.
    for dir in EFA_PKGCONFIG {
        if std::path::Path::new(dir).join("libfabric.pc").exists() {
            let old = std::env::var("PKG_CONFIG_PATH").unwrap_or_default();
            let new = if old.is_empty() {
                dir.to_string()
            } else {
                format!("{dir}:{old}")
            };
            // The probe below reads it (a build script runs single-threaded).
            std::env::set_var("PKG_CONFIG_PATH", new);
            println!("cargo:warning=using the EFA installer's libfabric ({dir})");
            break;
        }
    }

    // Headers only: no -lfabric (the library is opened at run time).
    let lib = match pkg_config::Config::new()
        .atleast_version("1.17")
        .cargo_metadata(false)
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or_default().to_owned();
            eprintln!(
                "error: libfabric >= 1.17 not found ({first}): install it with `apt-get install libfabric-dev` (Debian/Ubuntu) or the AWS EFA installer, or run `make setup`"
            );
            std::process::exit(1);
        }
    };
    // Debian's .pc file gives no include path: fall back to /usr/include.
    let mut includes: Vec<PathBuf> = lib.include_paths.clone();
    if let Some(dir) = std::env::var_os("LIBFABRIC_INCLUDE_DIR") {
        includes.insert(0, dir.into());
    }
    if includes.is_empty() {
        includes.push("/usr/include".into());
    }

    let mut cc = cc::Build::new();
    cc.file("src/sys/shim.c").warnings(true);
    for dir in &includes {
        cc.include(dir);
    }
    cc.compile("rasa_fabric_shim");

    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // The functions libfabric exports, as a table loaded at run time.
    let mut dynamic = bindgen::Builder::default()
        .header("src/sys/wrapper.h")
        .clang_arg("-Isrc/sys")
        .allowlist_function(EXPORTED)
        .allowlist_recursively(false)
        .dynamic_library_name("LibFabric")
        .dynamic_link_require_all(true)
        .layout_tests(false)
        .generate_comments(false);
    for dir in &includes {
        dynamic = dynamic.clang_arg(format!("-I{}", dir.display()));
    }
    dynamic
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed over the libfabric headers: {e} (is libclang-dev installed? `make setup`)"))
        .write_to_file(out.join("dynamic.rs"))
        .expect("write the run-time bindings");

    let mut builder = bindgen::Builder::default()
        .header("src/sys/wrapper.h")
        .clang_arg("-Isrc/sys")
        .allowlist_function("rasa_fi_.*")
        .allowlist_type("fi_.*|fid_.*")
        .allowlist_var("FI_.*")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for dir in &includes {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    let bindings = builder
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed over the libfabric headers: {e} (is libclang-dev installed? `make setup`)"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings");
}
