//! `ralph --version`: the version, the commit and the target, fixed at build
//! time into `RALPH_BUILD_VERSION`. The commit is read from the
//! `.cargo_vcs_info.json` that `cargo package` writes into a published crate
//! (a crate from crates.io has no `.git`), else from git in a clone; a build
//! with neither says `unknown commit`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").expect("set by cargo");
    let target = std::env::var("TARGET").expect("set by cargo");
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=build.rs");
    let commit = packaged_commit(&dir)
        .or_else(|| git_commit(&dir))
        .unwrap_or_else(|| "unknown commit".to_string());
    println!("cargo:rustc-env=RALPH_BUILD_VERSION={version} ({commit}, {target})");
}

/// The commit `cargo package` recorded: `{"git": {"sha1": "<40 hex>", ...}}`.
/// Read by hand rather than with serde_json, which would be compiled a
/// second time for the build script.
fn packaged_commit(dir: &Path) -> Option<String> {
    let path = dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&path).ok()?;
    println!("cargo:rerun-if-changed={}", path.display());
    let after = &text[text.find("\"sha1\"")? + "\"sha1\"".len()..];
    let start = after.find('"')? + 1;
    let sha: String = after[start..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    (sha.len() == 40).then(|| sha[..12].to_string())
}

/// HEAD of the clone, rebuilt when HEAD or the branch it names moves (its
/// folder is watched: a packed branch gets a file of its own when it moves).
fn git_commit(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let sha = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let ref_path = PathBuf::from(git(&["rev-parse", "--git-path", &branch])?);
        watched.push(ref_path.parent()?.display().to_string());
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"])?);
    for path in watched {
        let path = dir.join(path);
        // A path that does not exist would rerun the script on every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(sha)
}
