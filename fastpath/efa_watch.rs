//! What the build scripts watch for AWS's EFA installer (shared by `build.rs` and
//! `efa_rpath.rs`).

/// Tells cargo to run the build script again when the EFA installer's tree under
/// `/opt/amazon/efa` changes: the deepest of `/opt/amazon/efa` and `/opt/amazon` that
/// exists is watched. Where neither does, only the package's own `Cargo.toml` is: cargo
/// treats a watched path that is missing as changed on every build, which rebuilt this
/// crate and all that use it on every cargo command. (Installing EFA on a machine without
/// `/opt/amazon` after a build: `touch fastpath/build.rs fastpath/efa_rpath.rs`.)
pub fn watch_efa_install() {
    let watched = ["/opt/amazon/efa", "/opt/amazon"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("Cargo.toml");
    println!("cargo:rerun-if-changed={watched}");
}
