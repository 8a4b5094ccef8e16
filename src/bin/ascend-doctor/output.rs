//! The report as text (a header, the capability table, check lines) or as one JSON object.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::checks::{Check, Status};
use crate::{NeedResult, Report};

/// The text report.
pub fn text(r: &Report) -> String {
    let mut out = header(r);
    if let Some(caps) = &r.caps {
        out.push('\n');
        out.push_str(&table(&caps.rows()));
    }
    out.push_str("\nchecks\n");
    for c in &r.checks {
        out.push_str(&check_line(c));
    }
    if !r.needs.is_empty() {
        out.push_str("\nneeds\n");
        for n in &r.needs {
            out.push_str(&need_line(n));
        }
    }
    out.push('\n');
    out.push_str(&verdict(r));
    out.push('\n');
    out
}

/// What serves, what it was built against and loaded, and how the two compare.
fn header(r: &Report) -> String {
    let mut out = String::new();
    let mut line = |key: &str, value: &str| {
        let _ = writeln!(out, "{key:<16} {value}");
    };
    match &r.backend {
        Some(b) => line("backend", &b.to_string()),
        None => line("backend", "none: the runtime did not open"),
    }
    if r.emulated() {
        line("", "emulator: no NPU; the values below are emulated");
    }
    if let Some(caps) = &r.caps {
        line("library", caps.mem().library());
    }
    line("build", &build_text(r));
    if r.caps.is_some() {
        let version = r.runtime_version().unwrap_or("unknown");
        match r.emulated() {
            true => line("runtime version", &format!("{version} (emulated)")),
            false => line("runtime version", version),
        }
    }
    line("CANN versions", &r.comparison.detail);
    if let Some(caps) = &r.caps {
        match caps.mem().probed_device() {
            Some(d) => line("probed on", &format!("device {d}")),
            None => line("probed on", "no device (the probes did not run)"),
        }
    }
    if let Some(fix) = r.comparison.fix {
        out.push_str(&check_line(&Check {
            name: "CANN version".into(),
            status: Status::Warn,
            detail: r.comparison.detail.clone(),
            fix: Some(fix.into()),
        }));
    }
    if let Some(e) = &r.error {
        let _ = writeln!(out, "\nFAIL  the runtime did not open:");
        for l in e.lines() {
            let _ = writeln!(out, "      {l}");
        }
    }
    out
}

fn build_text(r: &Report) -> String {
    match &r.build {
        Some(b) => format!("built against {b}"),
        None => "built without a CANN toolkit".into(),
    }
}

/// The capability rows in three aligned columns.
fn table(rows: &[ascend::CapRow]) -> String {
    let w = rows.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let v = rows.iter().map(|c| c.value.len()).max().unwrap_or(0);
    let mut out = format!("{:w$}  {:v$}  how found\n", "capability", "value");
    for c in rows {
        let _ = writeln!(out, "{:w$}  {:v$}  {}", c.name, c.value, c.how);
    }
    out
}

/// `ok|warn|FAIL  name: detail  (fix: ...)`.
fn check_line(c: &Check) -> String {
    let mut out = format!("{:4}  {}: {}", c.status.label(), c.name, c.detail);
    if let Some(f) = &c.fix {
        let _ = write!(out, "  (fix: {f})");
    }
    out.push('\n');
    out
}

fn need_line(n: &NeedResult) -> String {
    match &n.missing {
        None => format!("ok    need {}\n", n.name),
        Some(m) => format!("FAIL  need {}: {} (fix: {})\n", n.name, m.why, m.fix),
    }
}

fn verdict(r: &Report) -> String {
    let failed = r.checks.iter().filter(|c| c.status == Status::Fail).count()
        + r.needs.iter().filter(|n| n.missing.is_some()).count();
    match (&r.error, failed) {
        (Some(_), _) => "not ok: the runtime did not open (see FAIL above)".into(),
        (None, 0) => "ok: nothing failed".into(),
        (None, n) => format!("not ok: {n} failed (see FAIL above)"),
    }
}

/// The JSON report: always one valid object, whatever failed.
pub fn json(r: &Report) -> Value {
    let checks: Vec<Value> = r
        .checks
        .iter()
        .map(|c| {
            let status = c.status.label().to_ascii_lowercase();
            json!({"name": c.name, "status": status, "detail": c.detail, "fix": c.fix})
        })
        .collect();
    let needs: Vec<Value> = r
        .needs
        .iter()
        .map(|n| {
            let (why, fix) = match &n.missing {
                Some(m) => (Some(&m.why), Some(&m.fix)),
                None => (None, None),
            };
            json!({"name": n.name, "ok": n.missing.is_none(), "why": why, "fix": fix})
        })
        .collect();
    let caps = r.caps.as_ref();
    json!({
        "backend": r.backend.as_ref().map(|b| b.to_string()),
        "emulated": r.emulated(),
        "library": caps.map(|c| c.mem().library()),
        "build": r.build.map(|b| json!({
            "cann_version": b.cann_version(),
            "cann_home": b.cann_home().display().to_string(),
        })),
        "runtime_version": r.runtime_version(),
        "comparison": {
            "result": r.comparison.result,
            "detail": r.comparison.detail,
            "fix": r.comparison.fix,
        },
        "probed_device": caps.and_then(|c| c.mem().probed_device()),
        "capabilities": caps.map(ascend::report::capabilities_json),
        "checks": checks,
        "needs": needs,
        "error": r.error,
        "ok": r.ok(),
    })
}
