//! Names the commit the `basalt` binary is built from (`basalt --version`, the OSDs'
//! liveness records, `/metrics`): `BASALT_COMMIT`, or "unknown" outside a git checkout.

use std::path::Path;
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = root.join(".git");
    // Rebuild (this crate only) when HEAD moves: HEAD itself, the branch it names, packed refs.
    println!("cargo:rerun-if-changed={}", git.join("HEAD").display());
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed={}", git.join(branch).display());
        }
    }
    println!(
        "cargo:rerun-if-changed={}",
        git.join("packed-refs").display()
    );
    let commit = Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BASALT_COMMIT={commit}");
}
