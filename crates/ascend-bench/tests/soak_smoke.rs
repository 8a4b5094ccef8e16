//! A short soak run through the binary: it ends cleanly (strict: the engine's ordering
//! guarantees count), its RESULT line adds up, and with stderr not a terminal its progress
//! comes as plain lines.

use std::process::Command;

fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} missing from {line:?}"))
        .parse()
        .unwrap()
}

#[test]
fn short_soak_is_clean() {
    let out = Command::new(env!("CARGO_BIN_EXE_ascend-bench"))
        .args([
            "soak",
            "--seconds",
            "4",
            "--seed",
            "3",
            "--peers",
            "1",
            "--strict",
        ])
        .output()
        .expect("run the bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "soak failed: {}\n{stdout}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("RESULT soak_seconds="), "{last:?}");
    assert_eq!(field(last, "soak_unexpected"), 0.0);
    assert_eq!(field(last, "soak_leaked"), 0.0);
    assert!(field(last, "soak_ops") > 0.0, "{last}");
    assert!(field(last, "soak_verified_bytes") > 0.0, "{last}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let progress = stderr.lines().filter(|l| l.contains("/4 s")).count();
    assert!(progress >= 1, "progress lines on stderr: {stderr}");
    assert!(
        !stderr.contains('\r'),
        "no terminal redraws in a log: {stderr:?}"
    );
}
