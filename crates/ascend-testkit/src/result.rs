//! The `RESULT ...` lines a child prints for its parent.

use std::process::Output;

/// The text after the first `RESULT ` in `stdout`, up to the end of that line (libtest may
/// print `test name ... ` before it on the same line).
pub fn result_line(stdout: &str) -> Option<&str> {
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.trim()))
}

/// The RESULT line of a finished child, or a description of what it printed instead (its
/// stdout and stderr) so a failing assertion on it shows why.
pub fn result_of(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    match result_line(&text) {
        Some(r) => r.to_string(),
        None => format!(
            "no RESULT line ({}); stdout: {text}; stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The RESULT line of a finished child as whitespace-separated numbers (panics, showing what
/// the child printed, if it has none or another word).
#[track_caller]
pub fn result_numbers(out: &Output) -> Vec<u64> {
    let line = result_of(out);
    line.split_whitespace()
        .map(|x| {
            x.parse()
                .unwrap_or_else(|_| panic!("not a number {x:?} in {line}"))
        })
        .collect()
}

/// Asserts a finished child reported `RESULT ok` and exited successfully (showing what it
/// printed otherwise).
#[track_caller]
pub fn assert_ok(out: &Output) {
    assert_eq!(result_of(out), "ok", "the child's result");
    assert!(
        out.status.success(),
        "the child failed after reporting ok: {out:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_result_line_after_libtest_noise() {
        let s = "running 1 test\ntest a::b ... RESULT ok 42\nRESULT later\n";
        assert_eq!(result_line(s), Some("ok 42"));
        assert_eq!(result_line("running 1 test\n"), None);
    }

    #[test]
    fn numbers_of_a_child_that_reported_them() {
        let out = std::process::Command::new("sh")
            .args(["-c", "echo 'test x ... RESULT 3 0 17'"])
            .output()
            .unwrap();
        assert_eq!(result_numbers(&out), [3, 0, 17]);
    }
}
