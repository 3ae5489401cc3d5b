//! One version for everything users install (issue 67): every crate, the wheel, the
//! release tarball (scripts/dist.sh reads the same line), the image and the manifests'
//! tag, and the changelog's newest entry. `make dist-check` tests the release itself.

use rasa_tests::{workspace_bin, workspace_dir};

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_dir().join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// `[workspace.package] version` in the root Cargo.toml.
fn workspace_version() -> String {
    let cargo = read("Cargo.toml");
    let section = cargo
        .split("[workspace.package]")
        .nth(1)
        .expect("a [workspace.package] section");
    let line = section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix("version = "))
        .expect("a version in [workspace.package]");
    line.trim_matches('"').to_owned()
}

#[test]
fn every_crate_takes_the_workspace_version() {
    let cargo = read("Cargo.toml");
    let members = cargo
        .lines()
        .find_map(|l| l.strip_prefix("members = "))
        .expect("the workspace's members");
    for member in members.trim_matches(['[', ']']).split(',') {
        let member = member.trim().trim_matches('"');
        let manifest = read(&format!("{member}/Cargo.toml"));
        assert!(
            manifest
                .lines()
                .any(|l| l.trim() == "version.workspace = true"),
            "{member}/Cargo.toml does not take the workspace's version"
        );
    }
    // maturin gives the wheel the crate's version: nothing may set another.
    let pyproject = read("python/pyproject.toml");
    assert!(
        pyproject.contains("dynamic = [\"version\"]"),
        "the wheel's version is not Cargo's"
    );
    assert!(
        !pyproject.lines().any(|l| l.starts_with("version")),
        "python/pyproject.toml sets a version of its own"
    );
}

#[test]
fn the_changelog_the_image_and_the_manifests_name_the_workspace_version() {
    let version = workspace_version();
    let changelog = read("CHANGELOG.md");
    let newest = changelog
        .lines()
        .find(|l| l.starts_with("## "))
        .expect("an entry in CHANGELOG.md");
    assert!(
        newest.starts_with(&format!("## {version} ")),
        "CHANGELOG.md's newest entry is '{newest}', the version {version}"
    );
    let dockerfile = read("docker/Dockerfile");
    assert!(
        dockerfile
            .lines()
            .any(|l| l == format!("ARG VERSION={version}")),
        "docker/Dockerfile's VERSION is not {version}"
    );
    let kustomization = read("deploy/kubernetes/base/kustomization.yaml");
    assert!(
        kustomization.contains(&format!("newTag: \"{version}\"")),
        "the manifests' image tag is not {version}"
    );
}

#[test]
fn a_source_build_says_its_version_and_that_it_is_one() {
    let version = workspace_version();
    for name in ["rasa-gateway", "rasa"] {
        let bin = workspace_bin(name);
        let out = std::process::Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("run {bin:?} --version: {e}"));
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{name} {version} (built from source)")
        );
    }
}
