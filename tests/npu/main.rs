//! The hardware acceptance suite: every capability of the crates through their public API
//! only, on the backend `ASCEND_MEM_BACKEND` picks (`cann`: CANN or an error; `sim`: the
//! emulator; unset: CANN when found, else the emulator). Nothing here reaches into the
//! emulator: what a test checks is what a real runtime shows.
//!
//! ```text
//! ASCEND_MEM_BACKEND=cann ASCEND_TEST_DEVICES=0,1 cargo test --test npu [-- FILTER...]
//! ```
//!
//! A test whose capability the runtime lacks is skipped, naming the capability and why
//! (the capability API decides: `EngineCapabilities::check`), as is a test that needs more
//! devices than `ASCEND_TEST_DEVICES` lists. The run ends with a report in markdown and
//! JSON (see `report.rs` for where). Filters and `--list`, `--exact`, `--skip` work as in
//! libtest; libtest's other flags are accepted and ignored.
//!
//! Tests that need a second process run this executable again with `ASCEND_NPU_ROLE` set:
//! `main` then runs that role instead of the suite.

mod batch;
mod ctx;
mod engine;
mod harness;
mod hixl_cs;
mod onesided;
mod report;
mod sharing;
mod streams;
mod suite;
mod symwin;
mod vmm;

use std::process::ExitCode;

use ascend::fabric::Need;

use ctx::{Ctx, CHILD_LIMIT, NESTED, ROLE};
use harness::{Args, Test};

macro_rules! tests {
    ($($module:ident :: $f:ident),* $(,)?) => {
        &[$(Test { name: concat!(stringify!($module), "::", stringify!($f)), run: $module::$f }),*]
    };
}

/// Every test, in the order they run.
const TESTS: &[Test] = tests![
    vmm::map_copy_read,
    vmm::drop_orders,
    vmm::explicit_close,
    vmm::host_memory,
    sharing::fabric_import,
    sharing::allow_list,
    streams::copies_and_events,
    streams::stream_values,
    streams::host_value_write,
    streams::pool_and_waiter,
    batch::host_device_batches,
    batch::table_copies,
    symwin::all_gather,
    symwin::reduce_scatter,
    symwin::all_reduce,
    symwin::all_to_all,
    onesided::put_signal,
    onesided::get,
    engine::d2rd,
    engine::d2rh,
    engine::rh2d,
    engine::prepared_lists,
    engine::cancellation,
    engine::killed_peer,
    hixl_cs::put_get,
    suite::skips_are_reported,
];

fn main() -> ExitCode {
    // The emulator holds the suite to the import rule CANN documents: device memory is not
    // imported in the process that exported it (a real runtime never reads the variable).
    // Set before any thread starts or the runtime opens; the suite's children inherit it.
    if std::env::var_os("ASCEND_SIM_IMPORT").is_none() {
        std::env::set_var("ASCEND_SIM_IMPORT", "cross-process");
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if let Ok(role) = std::env::var(ROLE) {
        return child(&role);
    }
    if std::env::var_os(NESTED).is_some() {
        ascend_testkit::watchdog(CHILD_LIMIT);
        ctx::exit_with_parent();
    }
    let args = Args::parse(std::env::args().skip(1));
    let chosen: Vec<&Test> = TESTS.iter().filter(|t| args.selects(t.name)).collect();
    if args.list {
        chosen.iter().for_each(|t| println!("{}: test", t.name));
        println!("\n{} tests, 0 benchmarks", chosen.len());
        return ExitCode::SUCCESS;
    }
    if chosen.is_empty() {
        println!("\nrunning 0 tests\n\nnpu: no test selected; no report written");
        return ExitCode::SUCCESS;
    }
    harness::capture_panics();
    let ctx = Ctx::open().map_err(|e| e.to_string());
    let ran = match &ctx {
        Ok(c) => {
            print_setup(c);
            harness::run(c, &chosen)
        }
        Err(e) => {
            eprintln!("npu: the runtime did not open: {e}");
            Vec::new()
        }
    };
    let (passed, skipped, failed) = harness::counts(&ran);
    println!("\nnpu: {passed} passed; {skipped} skipped; {failed} failed");
    let written = report::write(&ctx, &args.filters, &ran);
    match &written {
        Ok([md, json]) => println!("npu: report in {} and {}", md.display(), json.display()),
        Err(e) => eprintln!("npu: the report could not be written: {e}"),
    }
    if ctx.is_ok() && failed == 0 && written.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The backend (the emulator said so), the devices, and which needs the runtime meets.
fn print_setup(ctx: &Ctx) {
    let backend = ctx.rt.backend();
    println!("npu: backend {backend}");
    if ctx.emulated() {
        println!("npu: this is the emulator, not an NPU (ASCEND_MEM_BACKEND=cann runs on CANN)");
    }
    println!("npu: devices {:?}", ctx.devices);
    let needs: Vec<String> = Need::all()
        .into_iter()
        .map(|n| match ctx.caps.check(n) {
            Ok(()) => n.to_string(),
            Err(_) => format!("{n} (missing)"),
        })
        .collect();
    println!("npu: capabilities: {}", needs.join(", "));
}

/// Runs this process's role as a child of the suite.
fn child(role: &str) -> ExitCode {
    ascend_testkit::watchdog(CHILD_LIMIT);
    let r = match role {
        "fabric-import" => sharing::import_role(),
        "engine-peer" => engine::peer_role(),
        "hixl-server" => hixl_cs::server_role(),
        "put-signal" => onesided::put_signal_role(),
        "get" => onesided::get_role(),
        _ => match role.strip_prefix("collective-") {
            Some(which) => symwin::rank_role(which),
            None => Err(format!("no role {role:?}").into()),
        },
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("npu {role}: {e}");
            ExitCode::FAILURE
        }
    }
}
