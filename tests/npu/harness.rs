//! The suite's runner: a table of tests run one after another, each timed, a panic or an
//! error a failure, a [`Skip`] a skip with the capability's name and the reason.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use crate::ctx::Ctx;

/// Why a test did not run: the capability it needs and what is missing.
#[derive(Debug)]
pub struct Skip {
    pub capability: String,
    pub why: String,
}

/// What a test ends with: `Ok(None)` passed, `Ok(Some(skip))` skipped, `Err` failed.
pub type Outcome = Result<Option<Skip>, Box<dyn std::error::Error>>;

/// One test of the table.
pub struct Test {
    pub name: &'static str,
    pub run: fn(&Ctx) -> Outcome,
}

/// How a test ended.
#[derive(Debug)]
pub enum Verdict {
    Pass,
    Skip(Skip),
    Fail(String),
}

/// One test's line of the report.
#[derive(Debug)]
pub struct Ran {
    pub name: &'static str,
    pub verdict: Verdict,
    pub millis: u128,
}

/// Runs the tests whose names contain one of `filters` (all without filters).
pub fn run(ctx: &Ctx, tests: &[Test], filters: &[String]) -> Vec<Ran> {
    let chosen = tests
        .iter()
        .filter(|t| filters.is_empty() || filters.iter().any(|f| t.name.contains(f.as_str())));
    let mut out = Vec::new();
    for t in chosen {
        let t0 = Instant::now();
        let verdict = match catch_unwind(AssertUnwindSafe(|| (t.run)(ctx))) {
            Ok(Ok(None)) => Verdict::Pass,
            Ok(Ok(Some(s))) => Verdict::Skip(s),
            Ok(Err(e)) => Verdict::Fail(e.to_string()),
            Err(p) => Verdict::Fail(panic_text(&p)),
        };
        let millis = t0.elapsed().as_millis();
        match &verdict {
            Verdict::Pass => println!("test {} ... ok ({millis} ms)", t.name),
            Verdict::Skip(s) => {
                println!("test {} ... skipped: {}: {}", t.name, s.capability, s.why)
            }
            Verdict::Fail(m) => println!("test {} ... FAILED ({millis} ms): {m}", t.name),
        }
        out.push(Ran {
            name: t.name,
            verdict,
            millis,
        });
    }
    out
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}
