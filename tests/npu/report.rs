//! The report a user attaches to a bug report: `npu-report.md` and `npu-report.json`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::ctx::{Ctx, Res};
use crate::harness::{Ran, Verdict};

/// `ASCEND_TEST_REPORT_DIR`, else `npu-report/` in the target folder this binary was built in.
pub fn dir() -> PathBuf {
    match std::env::var_os("ASCEND_TEST_REPORT_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap_or(Path::new("."))
            .join("npu-report"),
    }
}

fn verdict(v: &Verdict) -> (&'static str, String) {
    match v {
        Verdict::Pass => ("pass", String::new()),
        Verdict::Skip(s) => ("skip", format!("{}: {}", s.capability, s.why)),
        Verdict::Fail(m) => ("fail", m.clone()),
    }
}

/// Writes both files; returns the folder.
pub fn write(ctx: &Ctx, ran: &[Ran]) -> Res<PathBuf> {
    let dir = dir();
    std::fs::create_dir_all(&dir)?;
    let secs = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let backend = ctx.rt.backend();
    let build = ascend::build_info().map(|b| b.to_string());
    let count = |k: &str| ran.iter().filter(|r| verdict(&r.verdict).0 == k).count();
    let tests: Vec<_> = ran
        .iter()
        .map(|r| {
            let (result, detail) = verdict(&r.verdict);
            json!({"name": r.name, "result": result, "ms": r.millis as u64, "detail": detail})
        })
        .collect();
    let j = json!({
        "unix_time": secs,
        "backend": backend.to_string(),
        "emulated": backend.is_emulator(),
        "devices": ctx.devices,
        "build": build,
        "capabilities": ascend::report::capabilities_json(&ctx.caps),
        "tests": tests,
        "passed": count("pass"), "skipped": count("skip"), "failed": count("fail"),
    });
    std::fs::write(
        dir.join("npu-report.json"),
        serde_json::to_string_pretty(&j)? + "\n",
    )?;
    let mut md = format!(
        "# Acceptance suite report\n\n- time: {secs} (seconds since 1970, UTC)\n- backend: {backend}{}\n- devices: {:?}\n- built against: {}\n\n## Capabilities\n\n{}\n## Tests\n\n| test | result | ms | detail |\n|---|---|---|---|\n",
        if backend.is_emulator() { " (emulator: no NPU)" } else { "" },
        ctx.devices,
        build.as_deref().unwrap_or("no CANN toolkit found at build time"),
        ascend::report::capabilities_markdown(&ctx.caps),
    );
    for r in ran {
        let (result, detail) = verdict(&r.verdict);
        md.push_str(&format!(
            "| {} | {result} | {} | {} |\n",
            r.name,
            r.millis,
            detail.replace('|', "\\|").replace('\n', " ")
        ));
    }
    md.push_str(&format!(
        "\n{} passed, {} skipped, {} failed\n",
        count("pass"),
        count("skip"),
        count("fail")
    ));
    std::fs::write(dir.join("npu-report.md"), md)?;
    Ok(dir)
}
