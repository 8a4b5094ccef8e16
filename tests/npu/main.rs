//! The hardware acceptance suite: every capability of the crates through their public API
//! only, on whatever backend `ASCEND_MEM_BACKEND` picks (CANN when it is `cann`, the emulator
//! when it is `sim`; unset, CANN if found, else the emulator). Nothing here reaches into the
//! emulator: what it checks is what a real runtime shows.
//!
//! ```text
//! ASCEND_MEM_BACKEND=cann ASCEND_TEST_DEVICES=0,1 cargo test --test npu [-- FILTER...]
//! ```
//! A test whose capability the runtime lacks is a skip naming the capability and the reason.
//! The report (`npu-report.md`, `npu-report.json`: capabilities, each test's result and
//! time) goes to `ASCEND_TEST_REPORT_DIR`, or `npu-report/` in the target folder.

mod ctx;
mod engine;
mod harness;
mod hixl_cs;
mod report;
mod sharing;
mod streams;
mod symwin;
mod vmm;

use std::process::{Command, ExitCode};

use ctx::{ensure, Ctx, Res, ROLE};
use harness::{Outcome, Skip, Test, Verdict};

const TESTS: &[Test] = &[
    Test {
        name: "vmm::roundtrip",
        run: vmm::roundtrip,
    },
    Test {
        name: "vmm::drop_orders",
        run: vmm::drop_orders,
    },
    Test {
        name: "vmm::host_memory",
        run: vmm::host_memory,
    },
    Test {
        name: "sharing::fabric_between_processes",
        run: sharing::fabric_between_processes,
    },
    Test {
        name: "streams::streams_and_events",
        run: streams::streams_and_events,
    },
    Test {
        name: "streams::stream_values",
        run: streams::stream_values,
    },
    Test {
        name: "streams::batch_copies",
        run: streams::batch_copies,
    },
    Test {
        name: "symwin::collectives",
        run: symwin::collectives,
    },
    Test {
        name: "symwin::put_signal",
        run: symwin::put_signal,
    },
    Test {
        name: "engine::directions",
        run: engine::directions,
    },
    Test {
        name: "engine::prepared_lists",
        run: engine::prepared_lists,
    },
    Test {
        name: "engine::cancellation",
        run: engine::cancellation,
    },
    Test {
        name: "engine::killed_peer",
        run: engine::killed_peer,
    },
    Test {
        name: "hixl_cs::put_get",
        run: hixl_cs::put_get,
    },
    Test {
        name: "suite::skips_are_reported",
        run: skips_are_reported,
    },
];

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(ROLE) {
        return match child(&role) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("npu child {role}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        TESTS.iter().for_each(|t| println!("{}: test", t.name));
        return ExitCode::SUCCESS;
    }
    let filters: Vec<String> = args.into_iter().filter(|a| !a.starts_with('-')).collect();
    match suite(&filters) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("npu: {e}");
            ExitCode::FAILURE
        }
    }
}

fn child(role: &str) -> Res<()> {
    match role {
        "fabric-import" => sharing::import_role(),
        "collectives" => symwin::collectives_role(),
        "onesided" => symwin::onesided_role(),
        "engine-peer" => engine::peer_role(),
        "hixl-server" => hixl_cs::server_role(),
        other => Err(format!("unknown role {other}").into()),
    }
}

fn suite(filters: &[String]) -> Res<bool> {
    let ctx = Ctx::open()?;
    println!("backend: {}; devices {:?}", ctx.rt.backend(), ctx.devices);
    if ctx.rt.backend().is_emulator() {
        println!("(the emulator: no NPU; set ASCEND_MEM_BACKEND=cann on an Ascend machine)");
    }
    let ran = harness::run(&ctx, TESTS, filters);
    let dir = report::write(&ctx, &ran)?;
    let failed = ran
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Fail(_)))
        .count();
    let skipped = ran
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Skip(_)))
        .count();
    println!(
        "\nnpu: {} passed, {skipped} skipped, {failed} failed; report in {}",
        ran.len() - failed - skipped,
        dir.display()
    );
    Ok(failed == 0)
}

/// This binary on the emulator as an Atlas A2 (no FABRIC handles, no symmetric windows):
/// the FABRIC and symmetric-window tests are reported as skips naming the capability, and
/// the run passes.
fn skips_are_reported(ctx: &Ctx) -> Outcome {
    if !ctx.rt.backend().is_emulator() {
        return Ok(Some(Skip {
            capability: "emulator".into(),
            why: "models another product with the emulator's ASCEND_SIM_SOC".into(),
        }));
    }
    let dir = std::env::temp_dir().join(format!("npu-skips-{}", std::process::id()));
    let out = Command::new(std::env::current_exe()?)
        .args(["sharing::", "symwin::collectives"])
        .env("ASCEND_MEM_BACKEND", "sim")
        .env("ASCEND_SIM_SOC", "A2")
        .env("ASCEND_TEST_REPORT_DIR", &dir)
        .output()?;
    let report = std::fs::read_to_string(dir.join("npu-report.json"));
    let _ = std::fs::remove_dir_all(&dir);
    ensure(
        out.status.success(),
        format!("the A2 run ended with {}", out.status),
    )?;
    let j: serde_json::Value = serde_json::from_str(&report?)?;
    let tests = j["tests"].as_array().ok_or("no tests in the report")?;
    ensure(
        tests.len() == 2,
        format!("{} tests ran, not 2", tests.len()),
    )?;
    for (name, capability) in [
        ("sharing::fabric_between_processes", "fabric"),
        ("symwin::collectives", "symwin"),
    ] {
        let t = tests.iter().find(|t| t["name"] == name).ok_or(name)?;
        let detail = t["detail"].as_str().unwrap_or_default();
        ensure(
            t["result"] == "skip" && detail.starts_with(&format!("{capability}: ")),
            format!("{name}: {t}"),
        )?;
    }
    Ok(None)
}
