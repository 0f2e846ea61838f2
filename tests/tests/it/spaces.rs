//! Spaces: a machine reached over SSH brought in as a home. The tests talk to a real `sshd`
//! on a loopback port (`kiki_tests::sshd`), through the system's `ssh`, host keys checked.

use std::process::Command;

use kiki_tests::sshd::Sshd;

/// `ssh` with the test server's client config, running `command` there.
fn ssh(sshd: &Sshd, command: &str) -> std::process::Output {
    Command::new("ssh")
        .arg("-F")
        .arg(sshd.config())
        .args(["-o", "BatchMode=yes"])
        .arg(sshd.url())
        .arg(command)
        .output()
        .expect("ssh")
}

/// The test server is a real SSH server: reached with its host key trusted, refused when the
/// key is unknown or another.
#[test]
fn the_test_sshd_is_reached_only_with_its_host_key_trusted() {
    let sshd = Sshd::start();
    let out = ssh(&sshd, "echo hello");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    sshd.forget();
    let unknown = ssh(&sshd, "echo hello");
    assert!(!unknown.status.success(), "an unknown host key is refused");
    sshd.distrust();
    let changed = ssh(&sshd, "echo hello");
    assert!(!changed.status.success(), "a changed host key is refused");
    let said = String::from_utf8_lossy(&changed.stderr);
    assert!(
        said.contains("HOST IDENTIFICATION HAS CHANGED") || said.contains("verification failed"),
        "{said}"
    );
}
