//! `ascend-doctor`: what this machine's Ascend runtime offers, whether a program's needs are
//! met, and what to fix when they are not.
//!
//! ```text
//! ascend-doctor [--json] [--need fabric,symwin,...] [--device N] [--etcd URL,...] [--ports P,...]
//! ```
//! Exit status: 0 when nothing failed; 1 when a needed feature is missing or a check failed;
//! 2 when the runtime cannot be opened at all (clap's usage errors exit 2 too).

mod checks;
mod output;

use std::panic::catch_unwind;
use std::process::ExitCode;

use ascend::fabric::{EngineCapabilities, Need};
use ascend::{BuildInfo, Missing, Runtime};
use clap::Parser;

use checks::{Check, Comparison, Served, Status};

/// Prints the Ascend runtime's capabilities with how each was found, compares the CANN the
/// crates were built against with the one loaded, checks the environment a multi-host run
/// needs, and says what to fix.
///
/// Exit status: 0 when nothing failed, 1 when a needed feature is missing or a check failed,
/// 2 when the runtime cannot be opened.
#[derive(Debug, Parser)]
#[command(name = "ascend-doctor", version)]
struct Args {
    /// One JSON object on standard output instead of the text report.
    #[arg(long)]
    json: bool,
    /// Features the program needs, comma-separated (vmm, nouc, retain, share-v2, batch,
    /// values, host-values, hccl, symwin, peer-pointers, fabric, hixlcs, fabricmem); each
    /// missing one fails with its fix.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_need)]
    need: Vec<Need>,
    /// The device to probe (default: device 0).
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    device: Option<i32>,
    /// Check that etcd answers at these client URLs, comma-separated (`http://HOST:PORT`,
    /// `HOST:PORT`, or `HOST` for port 2379).
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    etcd: Vec<String>,
    /// Ports that must be free on 127.0.0.1, comma-separated (default: the examples' 26000,
    /// 26001 and 26110, where a taken one is only a warning).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    ports: Vec<u16>,
}

fn parse_need(s: &str) -> Result<Need, String> {
    Need::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Need::all().into_iter().map(Need::name).collect();
        format!("{s:?} is not a feature; valid names: {}", names.join(", "))
    })
}

/// One need and, when it is not met, why and the fix.
#[derive(Debug)]
pub struct NeedResult {
    name: &'static str,
    missing: Option<Missing>,
}

/// Everything the report says.
#[derive(Debug)]
pub struct Report {
    /// The runtime's backend, when it opened.
    backend: Option<ascend::Backend>,
    build: Option<BuildInfo>,
    comparison: Comparison,
    caps: Option<EngineCapabilities>,
    checks: Vec<Check>,
    needs: Vec<NeedResult>,
    /// Why the runtime did not open.
    error: Option<String>,
}

impl Report {
    fn emulated(&self) -> bool {
        self.backend.as_ref().is_some_and(|b| b.is_emulator())
    }

    fn runtime_version(&self) -> Option<&str> {
        let caps = self.caps.as_ref()?;
        caps.mem().runtime_version().value.as_deref()
    }

    /// Nothing failed: the runtime opened, no check failed, every need is met.
    fn ok(&self) -> bool {
        self.error.is_none()
            && self.checks.iter().all(|c| c.status != Status::Fail)
            && self.needs.iter().all(|n| n.missing.is_none())
    }

    fn exit_code(&self) -> ExitCode {
        match (&self.error, self.ok()) {
            (Some(_), _) => ExitCode::from(2),
            (None, true) => ExitCode::SUCCESS,
            (None, false) => ExitCode::from(1),
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let report = examine(&args);
    if args.json {
        println!("{}", output::json(&report));
    } else {
        print!("{}", output::text(&report));
    }
    report.exit_code()
}

fn examine(args: &Args) -> Report {
    let (backend, caps, error) = match open(args.device) {
        Ok((rt, caps)) => (Some(rt.backend().clone()), Some(caps), None),
        Err(e) => (None, None, Some(e)),
    };
    let served = Served::of(backend.as_ref());
    let build = ascend::build_info();
    let loaded = caps
        .as_ref()
        .and_then(|c| c.mem().runtime_version().value.clone());
    Report {
        comparison: checks::compare(
            build.and_then(|b| b.cann_version()),
            loaded.as_deref(),
            served,
        ),
        checks: environment(args, backend.as_ref(), caps.as_ref()),
        needs: needs(&args.need, caps.as_ref()),
        backend,
        build,
        caps,
        error,
    }
}

/// Opens the runtime as the examples do and finds its capabilities on `device` (or the
/// default one when `device` is not one of the runtime's: the device check then fails). A
/// panic while probing is reported as the runtime failing to open, so the report is always
/// printed whole.
fn open(device: Option<i32>) -> Result<(Runtime, EngineCapabilities), String> {
    catch_unwind(|| {
        let rt = Runtime::from_env_or_emulator().map_err(|e| e.to_string())?;
        let caps = device
            .and_then(|d| EngineCapabilities::probe_on(&rt, d).ok())
            .unwrap_or_else(|| EngineCapabilities::probe(&rt));
        Ok((rt, caps))
    })
    .unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(format!("opening or probing the runtime panicked: {what}"))
    })
}

/// Every environment check, in the order the report prints them. Those that need the
/// runtime (the devices) are left out when it did not open.
fn environment(
    args: &Args,
    backend: Option<&ascend::Backend>,
    caps: Option<&EngineCapabilities>,
) -> Vec<Check> {
    let mut out = vec![checks::backend_choice(backend)];
    out.extend(checks::cann_install(Served::of(backend)));
    if let Some(c) = caps {
        out.extend(checks::devices(c.mem().device_count(), args.device));
    }
    match args.ports.is_empty() {
        true => out.extend(checks::ports(&checks::EXAMPLE_PORTS, false)),
        false => out.extend(checks::ports(&args.ports, true)),
    }
    out.extend(args.etcd.iter().map(|url| checks::etcd(url)));
    out
}

/// Each need's check; without a runtime none can be checked, and each says so.
fn needs(asked: &[Need], caps: Option<&EngineCapabilities>) -> Vec<NeedResult> {
    asked
        .iter()
        .map(|n| NeedResult {
            name: n.name(),
            missing: match caps {
                Some(c) => c.check(*n).err(),
                None => Some(Missing {
                    feature: n.name(),
                    why: "not checked: the runtime did not open".into(),
                    fix: "open the runtime first (see why it did not, above)".into(),
                }),
            },
        })
        .collect()
}
