//! The suite checking itself: a capability the runtime lacks is reported as a skip naming
//! it. On the emulator this binary runs again as an Atlas A2 (`ASCEND_SIM_SOC=A2`: no FABRIC
//! handles, no symmetric windows) on a few tests that need those, and its report must show
//! each of them skipped with that capability, and no failure.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::ctx::{ensure, Ctx, Peer, Res, NESTED, ROLE};
use crate::harness::Outcome;

/// The tests the A2 run selects, and the capability each must be skipped for.
const EXPECTED: [(&str, &str); 5] = [
    ("sharing::fabric_import", "fabric"),
    ("sharing::allow_list", "fabric"),
    ("symwin::all_gather", "symwin"),
    ("onesided::put_signal", "symwin"),
    ("engine::d2rd", "fabricmem"),
];

/// Checks the A2 run's report: the five tests, each a skip naming its capability.
fn check_report(j: &Value) -> Res<()> {
    ensure(
        j["emulator"] == true,
        "the A2 report does not say it ran on the emulator",
    )?;
    let tests = j["tests"].as_array().ok_or("the A2 report has no tests")?;
    ensure(
        tests.len() == EXPECTED.len(),
        format!(
            "the A2 run ran {} tests, not {}",
            tests.len(),
            EXPECTED.len()
        ),
    )?;
    for (name, capability) in EXPECTED {
        let t = tests
            .iter()
            .find(|t| t["name"] == name)
            .ok_or_else(|| format!("{name} is not in the A2 report"))?;
        let reason = t["reason"].as_str().unwrap_or_default();
        ensure(
            t["result"] == "skip" && t["capability"] == capability && !reason.is_empty(),
            format!("{name} in the A2 report: {t}"),
        )?;
    }
    ensure(j["counts"]["failed"] == 0, "the A2 run has failures")
}

/// Runs the selected tests as an A2 and checks what it prints and reports.
pub fn skips_are_reported(ctx: &Ctx) -> Res<Outcome> {
    crate::report::check_utc()?;
    if !ctx.emulated() {
        return Ok(Outcome::skip(
            "emulator",
            "emulator only: it runs the suite on an emulated Atlas A2 (ASCEND_SIM_SOC=A2)",
        ));
    }
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.subsec_nanos();
    let dir = std::env::temp_dir().join(format!("npu-a2-{}-{nanos}", std::process::id()));
    let devices: Vec<String> = ctx.devices.iter().map(|d| d.to_string()).collect();
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("--exact")
        .args(EXPECTED.iter().map(|(name, _)| *name))
        .env_remove(ROLE)
        .env(NESTED, "1")
        .env("ASCEND_MEM_BACKEND", "sim")
        .env("ASCEND_SIM_SOC", "A2")
        .env("ASCEND_TEST_DEVICES", devices.join(","))
        .env("ASCEND_TEST_REPORT_DIR", &dir);
    let mut child = Peer::spawn("the A2 run".into(), cmd)?;
    let printed = EXPECTED.iter().try_for_each(|(name, capability)| {
        let line = child.expect(&format!("test {name} ... "))?;
        ensure(
            line.starts_with(&format!("skipped: {capability}: ")),
            format!("the A2 run printed {name} ... {line}"),
        )
    });
    let finished = printed.and_then(|()| child.wait());
    let report = std::fs::read_to_string(dir.join("npu-report.json"));
    let _ = std::fs::remove_dir_all(&dir);
    finished?;
    check_report(&serde_json::from_str(&report?)?)?;
    Ok(Outcome::Pass)
}
