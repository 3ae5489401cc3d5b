//! Build script of the binaries (`rasa-gateway`, `rasa`): when AWS's EFA installer put its
//! libfabric under /opt/amazon/efa, link with an rpath to it, so the binaries load that one
//! (with the current `efa` provider) rather than the distribution's. Elsewhere: nothing.

#[path = "efa_watch.rs"]
mod efa_watch;

fn main() {
    efa_watch::watch_efa_install();
    for dir in ["/opt/amazon/efa/lib64", "/opt/amazon/efa/lib"] {
        if std::path::Path::new(dir).join("libfabric.so").exists() {
            println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
            return;
        }
    }
}
