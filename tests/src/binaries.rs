//! The real `kikid` and `kiki` binaries, for the smoke tier. They are built by
//! `cargo test --workspace` (or `cargo build --workspace`) into the same target directory
//! as this test binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>/NAME`, found from the running test executable (`…/deps/test-hash`), or
/// `$KIKI_BINARIES/NAME` if that is set (a bench comparing two builds).
pub fn binary(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("KIKI_BINARIES") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(path.is_file(), "{} is missing: run `cargo build --workspace --bins` first", path.display());
    path
}

/// Runs `kiki --home HOME ARGS…` and returns its output.
pub fn kiki(home: &Path, args: &[&str]) -> Output {
    kiki_with_env(home, args, &[])
}

pub fn kiki_with_env(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(binary("kiki"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("KIKI_TOKEN")
        .envs(env.iter().copied())
        .output()
        .expect("run kiki")
}

/// Runs `kiki --json …`, asserts success and parses its one JSON document.
pub fn kiki_json(home: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = kiki(home, &all);
    assert!(
        out.status.success(),
        "kiki {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kiki {args:?} printed no single JSON document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
