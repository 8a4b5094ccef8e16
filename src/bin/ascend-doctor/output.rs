//! The report as text (a table and check lines) or as one JSON object.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::Report;

/// The text report.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    match &r.backend {
        Some(b) if r.emulated => {
            let _ = writeln!(
                out,
                "backend: {b}\n  emulator: no NPU; the values below are emulated"
            );
        }
        Some(b) => {
            let _ = writeln!(out, "backend: {b}");
        }
        None => {
            let _ = writeln!(out, "backend: none: the runtime did not open");
        }
    }
    let _ = writeln!(out, "library: {}", shown(&r.library));
    let built = r
        .build
        .clone()
        .unwrap_or_else(|| "no CANN toolkit found".into());
    let _ = writeln!(out, "built against: {built}");
    let _ = writeln!(out, "runtime version: {}", shown(&r.runtime_version));
    if let Some(e) = &r.error {
        let _ = writeln!(out, "\nFAIL  the runtime did not open:\n{e}");
    }
    if let Some(caps) = &r.caps {
        let rows = caps.rows();
        let w = rows.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let v = rows.iter().map(|c| c.value.len()).max().unwrap_or(0);
        let _ = writeln!(out, "\n{:w$}  {:v$}  how found", "capability", "value");
        for c in rows {
            let _ = writeln!(out, "{:w$}  {:v$}  {}", c.name, c.value, c.how);
        }
    }
    out.push('\n');
    for c in &r.checks {
        let _ = write!(out, "{:4}  {}: {}", c.status.label(), c.name, c.detail);
        if let Some(f) = &c.fix {
            let _ = write!(out, "  (fix: {f})");
        }
        out.push('\n');
    }
    for n in &r.needs {
        let _ = match &n.missing {
            None => writeln!(out, "ok    need {}", n.name),
            Some(m) => writeln!(out, "FAIL  need {}: {} (fix: {})", n.name, m.why, m.fix),
        };
    }
    let _ = writeln!(
        out,
        "\n{}",
        if r.ok() {
            "ok"
        } else {
            "not ok: see FAIL above"
        }
    );
    out
}

/// The JSON report: always one valid object.
pub fn json(r: &Report) -> Value {
    let checks: Vec<Value> = r
        .checks
        .iter()
        .map(|c| json!({"name": c.name, "status": c.status.label().to_lowercase(), "detail": c.detail, "fix": c.fix}))
        .collect();
    let needs: Vec<Value> = r
        .needs
        .iter()
        .map(|n| match &n.missing {
            None => json!({"name": n.name, "ok": true}),
            Some(m) => json!({"name": n.name, "ok": false, "why": m.why, "fix": m.fix}),
        })
        .collect();
    json!({
        "backend": r.backend,
        "emulated": r.emulated,
        "library": r.library,
        "build": r.build,
        "runtime_version": r.runtime_version,
        "capabilities": r.caps.as_ref().map(ascend::report::capabilities_json),
        "checks": checks,
        "needs": needs,
        "error": r.error,
        "ok": r.ok(),
    })
}
