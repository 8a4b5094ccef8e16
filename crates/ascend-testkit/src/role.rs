//! Child processes of the current test binary, each in a named role.
//!
//! The protocol: a parent test re-runs this binary filtered to exactly one test (normally
//! itself, see [`test_name!`](crate::test_name)) with [`ROLE_VAR`] naming the role; that test
//! sees [`role()`] return the role and runs the child's side instead of the parent's. A test
//! spawned so runs its child side only; run directly it is the parent and checks what its
//! children report, so no test passes without checking anything. Children report through
//! `RESULT ...` lines on stdout ([`crate::result`]) and may take commands on stdin.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

/// Env var naming the role of a child process.
pub const ROLE_VAR: &str = "ASCEND_TEST_ROLE";

/// The role this process was spawned in, if it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE_VAR).ok().filter(|r| !r.is_empty())
}

/// The libtest name of the test function `f` of the calling module (its path without the
/// crate), to hand to [`Spawn::new`]; naming a function that does not exist does not compile.
#[macro_export]
macro_rules! test_name {
    ($f:ident) => {{
        let _: fn() = $f;
        $crate::role::libtest_name(concat!(module_path!(), "::", stringify!($f)))
    }};
}

/// `path` without its first segment (the test crate's name).
pub fn libtest_name(path: &str) -> &str {
    path.split_once("::").map_or(path, |(_, rest)| rest)
}

/// A child of this test binary being set up.
#[derive(Debug)]
pub struct Spawn {
    cmd: Command,
}

impl Spawn {
    /// This test binary running only the test named `test` (exactly, one thread, output not
    /// captured) in `role`.
    pub fn new(test: &str, role: &str) -> Spawn {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
        cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, role);
        Spawn { cmd }
    }

    /// Sets an environment variable of the child.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Spawn {
        self.cmd.env(key, value);
        self
    }

    /// Sets several environment variables of the child.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(mut self, vars: &[(K, V)]) -> Spawn {
        for (k, v) in vars {
            self.cmd.env(k, v);
        }
        self
    }

    /// The command itself, for anything else (pipes, removed variables).
    pub fn command(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// The command, for a caller that starts it itself (a launcher that takes commands).
    pub fn into_command(self) -> Command {
        self.cmd
    }

    /// Runs the child to its end with stdout and stderr captured.
    pub fn output(mut self) -> Output {
        self.cmd.output().expect("spawn a child of the test binary")
    }

    /// Starts the child with stdin and stdout piped (stderr goes to the parent's).
    pub fn spawn(mut self) -> Child {
        self.cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a child of the test binary")
    }

    /// Starts the child for a line dialogue.
    pub fn start(self) -> ChildProc {
        let mut child = self.spawn();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        ChildProc {
            child,
            stdin,
            stdout,
        }
    }
}

/// A running child with line I/O: commands on its stdin, answers on its stdout.
#[derive(Debug)]
pub struct ChildProc {
    /// The process (to kill it, or to wait for it).
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl ChildProc {
    /// The rest of the next stdout line containing `prefix`, trimmed (other lines skipped;
    /// libtest may print `test name ... ` before it on the same line). Panics if the child
    /// closes stdout first.
    #[track_caller]
    pub fn expect_line(&mut self, prefix: &str) -> String {
        loop {
            let mut l = String::new();
            let n = self
                .stdout
                .read_line(&mut l)
                .expect("read the child's stdout");
            assert!(n > 0, "the child exited before printing {prefix:?}");
            if let Some(i) = l.find(prefix) {
                return l[i + prefix.len()..].trim().to_string();
            }
        }
    }

    /// Writes one line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let s = self.stdin.as_mut().expect("the child's stdin is open");
        writeln!(s, "{line}").expect("write to the child");
        s.flush().expect("flush the child's stdin");
    }

    /// Sends a line and returns the answer line containing `prefix`.
    #[track_caller]
    pub fn ask(&mut self, line: &str, prefix: &str) -> String {
        self.send(line);
        self.expect_line(prefix)
    }

    /// Closes the child's stdin (its end of input) and waits for it: its exit status and its
    /// RESULT line (or, without one, the rest of its stdout).
    pub fn wait_result(mut self) -> (bool, String) {
        drop(self.stdin.take());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut rest);
        let status = self.child.wait().expect("wait for the child");
        let line = crate::result_line(&rest).map(str::to_string);
        (status.success(), line.unwrap_or(rest))
    }

    /// Closes stdin and waits; asserts a `RESULT ok` line and a successful exit.
    #[track_caller]
    pub fn finish(self) {
        let (ok, result) = self.wait_result();
        assert_eq!(result, "ok", "the child's result");
        assert!(ok, "the child failed after reporting ok");
    }
}

/// Waits for `child` (started with stdout and stderr piped) and asserts it exited successfully,
/// naming it `who` and showing what it printed otherwise; returns its output.
#[track_caller]
pub fn wait_success(child: Child, who: &str) -> Output {
    let out = child.wait_with_output().expect("wait for the child");
    assert!(
        out.status.success(),
        "{who} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One line of this process's stdin without its line end (None at its end).
pub fn read_stdin_line() -> Option<String> {
    let mut s = String::new();
    match std::io::stdin().lock().read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s.trim_end().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_name_drops_the_crate() {
        assert_eq!(libtest_name("all::sharing::export"), "sharing::export");
        assert_eq!(libtest_name("lonely"), "lonely");
    }

    /// Parent and child in one test: the child echoes its stdin lines upper-cased.
    #[test]
    fn a_child_runs_its_role_and_answers() {
        if let Some(r) = role() {
            assert_eq!(r, "echo");
            println!("READY {}", std::env::var("TESTKIT_GREETING").unwrap());
            while let Some(l) = read_stdin_line() {
                println!("ECHO {}", l.to_uppercase());
            }
            println!("RESULT ok");
            return;
        }
        let mut c = Spawn::new(test_name!(a_child_runs_its_role_and_answers), "echo")
            .env("TESTKIT_GREETING", "hello")
            .start();
        assert_eq!(c.expect_line("READY "), "hello");
        assert_eq!(c.ask("abc", "ECHO "), "ABC");
        c.finish();
    }

    #[test]
    #[should_panic(expected = "the child failed")]
    fn a_failed_child_is_reported_with_its_output() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo said-this; exit 3"])
            .stdout(Stdio::piped());
        wait_success(c.spawn().unwrap(), "the child");
    }

    #[test]
    fn a_child_filtered_to_no_test_reports_nothing() {
        let out = Spawn::new("no_such_test", "echo").output();
        assert!(out.status.success());
        let r = crate::result_of(&out);
        assert!(r.starts_with("no RESULT line"), "{r}");
        assert!(r.contains("0 passed"), "{r}");
    }
}
