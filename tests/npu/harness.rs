//! The runner: the command line (filters as libtest takes them), the tests run one after
//! another on this thread, each timed, with a panic or an error as its failure.

use std::cell::RefCell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::ctx::{Ctx, Res};
use crate::report::{self, Setup};

/// How a test that did not fail ended. Failures are the test's `Err` or its panic.
#[derive(Debug)]
pub enum Outcome {
    /// Everything it checked held.
    Pass,
    /// It did not run: the runtime lacks `capability`, and `why` says what and how to get it.
    Skip { capability: String, why: String },
}

impl Outcome {
    pub fn skip(capability: impl Into<String>, why: impl Into<String>) -> Outcome {
        Outcome::Skip {
            capability: capability.into(),
            why: why.into(),
        }
    }
}

impl From<ascend::Missing> for Outcome {
    fn from(m: ascend::Missing) -> Outcome {
        Outcome::skip(m.feature, format!("{}; {}", m.why, m.fix))
    }
}

/// One entry of the suite's table.
pub struct Test {
    pub name: &'static str,
    pub run: fn(&Ctx) -> Res<Outcome>,
}

/// How a test ended, as the report shows it.
#[derive(Clone, Debug)]
pub enum Verdict {
    Pass,
    Skip { capability: String, why: String },
    Fail(String),
}

impl Verdict {
    /// `pass`, `skip` or `fail`.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Skip { .. } => "skip",
            Verdict::Fail(_) => "fail",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Pass => f.write_str("ok"),
            Verdict::Skip { capability, why } => write!(f, "skipped: {capability}: {why}"),
            Verdict::Fail(m) => write!(f, "FAILED: {m}"),
        }
    }
}

/// A test that ran.
#[derive(Clone, Debug)]
pub struct Ran {
    pub name: &'static str,
    pub verdict: Verdict,
    pub time: Duration,
}

/// What the command line asks for. Positional arguments are filters (a test runs when its
/// name contains one, or equals one with `--exact`); libtest's other flags are accepted so
/// `cargo test` can pass them to every test binary, and ignored.
#[derive(Debug, Default)]
pub struct Args {
    pub filters: Vec<String>,
    pub skip: Vec<String>,
    pub exact: bool,
    pub list: bool,
    /// `--ignored`: only ignored tests, and this suite has none.
    pub ignored_only: bool,
}

/// libtest flags that take a value (as the next argument when not written `--flag=value`).
const WITH_VALUE: [&str; 7] = [
    "--test-threads",
    "--skip",
    "--color",
    "--format",
    "--logfile",
    "--shuffle-seed",
    "-Z",
];

impl Args {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Args {
        let mut a = Args::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            if !arg.starts_with('-') {
                a.filters.push(arg);
                continue;
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let value = match inline {
                Some(v) => Some(v),
                None if WITH_VALUE.contains(&flag.as_str()) => it.next(),
                None => None,
            };
            match flag.as_str() {
                "--list" => a.list = true,
                "--exact" => a.exact = true,
                "--ignored" => a.ignored_only = true,
                "--skip" => a.skip.extend(value),
                _ => {}
            }
        }
        a
    }

    /// Whether `name` is selected.
    pub fn selects(&self, name: &str) -> bool {
        let hit = |f: &String| {
            if self.exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        };
        !self.ignored_only
            && (self.filters.is_empty() || self.filters.iter().any(hit))
            && !self.skip.iter().any(hit)
    }
}

thread_local! {
    /// The last panic of this thread: its message and where it happened.
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records panics of the thread that runs the tests (they become the failure message)
/// instead of printing them; other threads' panics print as usual.
pub fn capture_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() != Some("main") {
            return default(info);
        }
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC.with(|p| *p.borrow_mut() = Some(format!("panicked{at}: {msg}")));
    }));
}

/// Runs one test, timed: its outcome, its error, or its panic.
fn run_one(ctx: &Ctx, t: &Test) -> Ran {
    let start = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(|| (t.run)(ctx)));
    let time = start.elapsed();
    let verdict = match r {
        Ok(Ok(Outcome::Pass)) => Verdict::Pass,
        Ok(Ok(Outcome::Skip { capability, why })) => Verdict::Skip { capability, why },
        Ok(Err(e)) => Verdict::Fail(e.to_string()),
        Err(_) => Verdict::Fail(
            PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "panicked".into()),
        ),
    };
    Ran {
        name: t.name,
        verdict,
        time,
    }
}

/// The longest one test may take: every wait in a test has its own deadline, so this only
/// ends a hang inside a runtime call.
const TEST_LIMIT: Duration = Duration::from_secs(300);

/// What the runner tells the hang guard.
enum Step {
    /// A test starts.
    Start(&'static str),
    /// A test ended so.
    End(Ran),
}

/// A thread that ends the process when a test runs past [`TEST_LIMIT`], with the report
/// written first ([`give_up`]): it is told each test as it starts and each result as it
/// ends, and stops when the sender is dropped.
fn hang_guard(setup: Setup) -> Sender<Step> {
    let (tx, rx) = channel::<Step>();
    std::thread::spawn(move || {
        let (mut ran, mut current) = (Vec::new(), None);
        loop {
            match rx.recv_timeout(TEST_LIMIT) {
                Ok(Step::Start(name)) => current = Some((name, Instant::now())),
                Ok(Step::End(r)) => {
                    current = None;
                    ran.push(r);
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    if let Some((name, start)) = current {
                        give_up(&setup, ran, name, start.elapsed());
                    }
                }
            }
        }
    });
    tx
}

/// Ends the process for test `name`, still running after `time` (the thread that runs it
/// is stuck in it): prints it failed, writes the report with it failed after the results
/// so far (`ran`; the tests after it are not in it), and exits with status 2.
fn give_up(setup: &Setup, mut ran: Vec<Ran>, name: &'static str, time: Duration) -> ! {
    let verdict = Verdict::Fail(format!("timed out after {} s", TEST_LIMIT.as_secs()));
    println!(
        "test {name} ... {verdict} ({} ms); the suite stops",
        time.as_millis()
    );
    ran.push(Ran {
        name,
        verdict,
        time,
    });
    let (passed, skipped, failed) = counts(&ran);
    println!("\nnpu: {passed} passed; {skipped} skipped; {failed} failed");
    // The filters the report names, read as `main` reads them.
    let filters = Args::parse(std::env::args().skip(1)).filters;
    match report::write_setup(setup, &filters, &ran) {
        Ok([md, json]) => println!("npu: report in {} and {}", md.display(), json.display()),
        Err(e) => eprintln!("npu: the report could not be written: {e}"),
    }
    std::process::exit(2);
}

/// Runs the selected tests in table order, printing a line for each as it ends.
pub fn run(ctx: &Ctx, tests: &[&Test]) -> Vec<Ran> {
    println!("\nrunning {} tests", tests.len());
    let guard = hang_guard(Setup::opened(ctx));
    tests
        .iter()
        .map(|t| {
            let _ = guard.send(Step::Start(t.name));
            let ran = run_one(ctx, t);
            println!(
                "test {} ... {} ({} ms)",
                ran.name,
                ran.verdict,
                ran.time.as_millis()
            );
            let _ = guard.send(Step::End(ran.clone()));
            ran
        })
        .collect()
}

/// Passed, skipped and failed tests.
pub fn counts(ran: &[Ran]) -> (usize, usize, usize) {
    let n = |w: &str| ran.iter().filter(|r| r.verdict.word() == w).count();
    (n("pass"), n("skip"), n("fail"))
}
