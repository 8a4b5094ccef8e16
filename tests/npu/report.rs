//! The report a user attaches to a bug report: `npu-report.md` and `npu-report.json`, the
//! same facts in both (when, the backend, the devices, what the crate was built against, the
//! runtime's capabilities, each test's result and time, the counts).
//!
//! They go to `ASCEND_TEST_REPORT_DIR` when it is set, else to `npu-report/` in the cargo
//! target folder this binary was built in (the parent of cargo's `CARGO_TARGET_TMPDIR`,
//! which is `<target>/tmp`; so `target/npu-report/` in a plain checkout, and wherever
//! `CARGO_TARGET_DIR` points otherwise).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use ascend::fabric::Need;
use serde_json::{json, Value};

use crate::ctx::{Ctx, Res};
use crate::harness::{counts, Ran, Verdict};

/// Where the report goes.
pub fn dir() -> PathBuf {
    match std::env::var_os("ASCEND_TEST_REPORT_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .map_or_else(|| PathBuf::from("npu-report"), |t| t.join("npu-report")),
    }
}

/// `secs` since 1970 as `YYYY-MM-DD hh:mm:ss UTC` (the civil calendar from a day count).
fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, rem / 60 % 60, rem % 60);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02} UTC")
}

/// What the report says about the setup: from the opened context, or why it did not open.
pub struct Setup {
    backend: String,
    emulated: Option<bool>,
    devices: Vec<i32>,
    caps_json: Value,
    caps_md: String,
    /// Each need of the capability API: met, or why not and the fix.
    needs: Value,
    error: Option<String>,
}

/// Every need the capability API knows, each met or missing (with why and the fix).
fn needs(c: &Ctx) -> Value {
    Need::all()
        .into_iter()
        .map(|n| match c.caps.check(n) {
            Ok(()) => json!({ "need": n.name(), "met": true }),
            Err(m) => json!({ "need": n.name(), "met": false, "why": m.why, "fix": m.fix }),
        })
        .collect()
}

impl Setup {
    fn of(ctx: &Result<Ctx, String>) -> Setup {
        match ctx {
            Ok(c) => Setup::opened(c),
            Err(e) => Setup {
                backend: "unknown (the suite did not start: see the setup error)".into(),
                emulated: None,
                devices: Vec::new(),
                caps_json: Value::Null,
                caps_md: "(none: the suite did not start)\n".into(),
                needs: Value::Null,
                error: Some(e.clone()),
            },
        }
    }

    /// The setup of an opened context (taken before the tests run, for a report written
    /// while one of them still runs: see [`write_setup`]).
    pub fn opened(c: &Ctx) -> Setup {
        Setup {
            backend: c.rt.backend().to_string(),
            emulated: Some(c.emulated()),
            devices: c.devices.clone(),
            caps_json: ascend::report::capabilities_json(&c.caps),
            caps_md: ascend::report::capabilities_markdown(&c.caps),
            needs: needs(c),
            error: None,
        }
    }

    /// The backend line: the emulator said as such.
    fn backend_line(&self) -> String {
        match self.emulated {
            Some(true) => format!(
                "{} (the emulator: no NPU was used; set ASCEND_MEM_BACKEND=cann on an Ascend machine)",
                self.backend
            ),
            _ => self.backend.clone(),
        }
    }
}

fn test_json(r: &Ran) -> Value {
    let mut t = json!({
        "name": r.name,
        "result": r.verdict.word(),
        "ms": r.time.as_secs_f64() * 1000.0,
    });
    match &r.verdict {
        Verdict::Pass => {}
        Verdict::Skip { capability, why } => {
            t["capability"] = json!(capability);
            t["reason"] = json!(why);
        }
        Verdict::Fail(m) => t["message"] = json!(m),
    }
    t
}

fn json_report(s: &Setup, secs: u64, filters: &[String], ran: &[Ran]) -> Value {
    let (passed, skipped, failed) = counts(ran);
    json!({
        "suite": "ascend NPU acceptance suite",
        "unix_time": secs,
        "utc": utc(secs),
        "backend": s.backend,
        "emulator": s.emulated,
        "devices": s.devices,
        "crate_version": env!("CARGO_PKG_VERSION"),
        "built_against": ascend::build_info().map(|b| json!({
            "text": b.to_string(),
            "cann_home": b.cann_home().display().to_string(),
            "cann_version": b.cann_version(),
        })),
        "filters": filters,
        "setup_error": s.error,
        "capabilities": s.caps_json,
        "needs": s.needs,
        "tests": ran.iter().map(test_json).collect::<Vec<_>>(),
        "counts": { "passed": passed, "skipped": skipped, "failed": failed },
    })
}

/// One table cell: no line breaks, no bare `|`.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn markdown_report(s: &Setup, secs: u64, filters: &[String], ran: &[Ran]) -> String {
    let built = ascend::build_info().map_or_else(
        || "none (no CANN toolkit was found at build time)".to_string(),
        |b| b.to_string(),
    );
    let devices: Vec<String> = s.devices.iter().map(|d| d.to_string()).collect();
    let mut md = format!(
        "# ascend NPU acceptance report\n\n\
         - backend: {}\n- devices: {}\n- time: {} ({secs} s since 1970)\n\
         - crate: ascend {}\n- built against: {built}\n- filters: {}\n",
        s.backend_line(),
        devices.join(", "),
        utc(secs),
        env!("CARGO_PKG_VERSION"),
        if filters.is_empty() {
            "none (every test)".to_string()
        } else {
            filters.join(" ")
        },
    );
    if let Some(needs) = s.needs.as_array() {
        let missing: Vec<&str> = needs
            .iter()
            .filter(|n| n["met"] == false)
            .filter_map(|n| n["need"].as_str())
            .collect();
        let missing = if missing.is_empty() {
            "none".to_string()
        } else {
            missing.join(", ")
        };
        md.push_str(&format!("- capabilities missing: {missing}\n"));
    }
    if let Some(e) = &s.error {
        md.push_str(&format!("- setup error: {}\n", cell(e)));
    }
    md.push_str(&format!("\n## Capabilities\n\n{}\n## Tests\n\n", s.caps_md));
    md.push_str(
        "| test | result | ms | capability | reason or message |\n|---|---|---:|---|---|\n",
    );
    for r in ran {
        let (cap, detail) = match &r.verdict {
            Verdict::Pass => ("", String::new()),
            Verdict::Skip { capability, why } => (capability.as_str(), cell(why)),
            Verdict::Fail(m) => ("", cell(m)),
        };
        md.push_str(&format!(
            "| {} | {} | {} | {cap} | {detail} |\n",
            r.name,
            r.verdict.word(),
            r.time.as_millis()
        ));
    }
    let (passed, skipped, failed) = counts(ran);
    md.push_str(&format!(
        "\n{passed} passed, {skipped} skipped, {failed} failed\n"
    ));
    md
}

/// Writes both files; returns their paths.
pub fn write(ctx: &Result<Ctx, String>, filters: &[String], ran: &[Ran]) -> Res<[PathBuf; 2]> {
    write_setup(&Setup::of(ctx), filters, ran)
}

/// Writes both files for `setup`; returns their paths. Needs no context, so a thread other
/// than the one running the tests can write it (the hang guard, while a test hangs).
pub fn write_setup(setup: &Setup, filters: &[String], ran: &[Ran]) -> Res<[PathBuf; 2]> {
    let dir = dir();
    std::fs::create_dir_all(&dir)?;
    let secs = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let (md, js) = (dir.join("npu-report.md"), dir.join("npu-report.json"));
    std::fs::write(&md, markdown_report(setup, secs, filters, ran))?;
    let j = json_report(setup, secs, filters, ran);
    std::fs::write(&js, serde_json::to_string_pretty(&j)? + "\n")?;
    Ok([md, js])
}

/// Checks of the date formatting (run by the self-test, as this binary has no libtest).
pub fn check_utc() -> Res<()> {
    for (secs, want) in [
        (0, "1970-01-01 00:00:00 UTC"),
        (951_782_400, "2000-02-29 00:00:00 UTC"),
        (1_700_000_000, "2023-11-14 22:13:20 UTC"),
        (4_107_542_399, "2100-02-28 23:59:59 UTC"),
    ] {
        crate::ctx::ensure(
            utc(secs) == want,
            format!("utc({secs}) = {}, not {want}", utc(secs)),
        )?;
    }
    Ok(())
}
