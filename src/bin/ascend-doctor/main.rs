//! `ascend-doctor`: what this machine's Ascend runtime offers, whether a program's needs are
//! met, and what to fix when they are not.
//!
//! ```text
//! ascend-doctor [--json] [--need fabric,symwin,...] [--device N] [--etcd URL] [--ports P,...]
//! ```
//! Exit status: 0 when nothing failed; 1 when a needed feature is missing or a check failed;
//! 2 when the runtime cannot be opened at all (or the command line is wrong).

mod checks;
mod output;

use std::process::ExitCode;

use ascend::fabric::{EngineCapabilities, Need};
use ascend::Runtime;
use clap::Parser;

use checks::{Check, Status};

/// Prints the Ascend runtime's capabilities with how each was found, checks the environment
/// a multi-host run needs, and says what to fix.
#[derive(Debug, Parser)]
#[command(name = "ascend-doctor", version)]
struct Args {
    /// One JSON object on standard output instead of the text report.
    #[arg(long)]
    json: bool,
    /// Features the program needs, comma-separated (vmm, nouc, retain, share-v2, batch,
    /// values, host-values, hccl, symwin, peer-pointers, fabric, hixlcs, fabricmem); a
    /// missing one fails with its fix.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_need)]
    need: Vec<Need>,
    /// The device to probe (default 0).
    #[arg(long, value_name = "N")]
    device: Option<i32>,
    /// Check that etcd answers at this client URL (`http://HOST:PORT` or `HOST:PORT`).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Ports that must be free on 127.0.0.1 (default: the examples' 26000, 26001, 26110).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    ports: Vec<u16>,
}

fn parse_need(s: &str) -> Result<Need, String> {
    Need::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Need::all().into_iter().map(Need::name).collect();
        format!("{s:?} is not a feature; valid names: {}", names.join(", "))
    })
}

/// One need's outcome.
#[derive(Debug)]
pub struct NeedResult {
    name: &'static str,
    missing: Option<ascend::Missing>,
}

/// Everything the report says.
#[derive(Debug, Default)]
pub struct Report {
    backend: Option<String>,
    emulated: bool,
    library: Option<String>,
    build: Option<String>,
    runtime_version: Option<String>,
    caps: Option<EngineCapabilities>,
    checks: Vec<Check>,
    needs: Vec<NeedResult>,
    error: Option<String>,
}

impl Report {
    fn ok(&self) -> bool {
        self.error.is_none()
            && self.checks.iter().all(|c| c.status != Status::Fail)
            && self.needs.iter().all(|n| n.missing.is_none())
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
    match (&report.error, report.ok()) {
        (Some(_), _) => ExitCode::from(2),
        (None, true) => ExitCode::SUCCESS,
        (None, false) => ExitCode::from(1),
    }
}

fn examine(args: &Args) -> Report {
    let mut r = Report {
        build: ascend::build_info().map(|b| b.to_string()),
        ..Report::default()
    };
    let rt = match Runtime::from_env_or_emulator() {
        Ok(rt) => rt,
        Err(e) => {
            r.error = Some(e.to_string());
            r.checks = checks::cann_folders(false);
            return r;
        }
    };
    r.emulated = rt.backend().is_emulator();
    r.backend = Some(rt.backend().to_string());
    let caps = match args.device {
        Some(d) => EngineCapabilities::probe_on(&rt, d).ok(),
        None => Some(EngineCapabilities::probe(&rt)),
    };
    let mem = rt.capabilities();
    r.library = Some(mem.library().to_string());
    r.runtime_version = mem.runtime_version().value.clone();
    r.checks
        .push(versions(r.runtime_version.as_deref(), r.emulated));
    r.checks.extend(checks::cann_folders(r.emulated));
    r.checks
        .extend(checks::devices(mem.device_count(), args.device));
    let (ports, named) = match args.ports.is_empty() {
        true => (checks::EXAMPLE_PORTS.to_vec(), false),
        false => (args.ports.clone(), true),
    };
    r.checks.extend(checks::ports(&ports, named));
    if let Some(url) = &args.etcd {
        r.checks.push(checks::etcd(url));
    }
    if let Some(c) = &caps {
        r.needs = args
            .need
            .iter()
            .map(|n| NeedResult {
                name: n.name(),
                missing: c.check(*n).err(),
            })
            .collect();
    }
    r.caps = caps;
    r
}

/// The CANN this build found against the one loaded: the same release (major.minor), or a
/// warning with the fix.
fn versions(loaded: Option<&str>, emulated: bool) -> Check {
    let built = ascend::build_info().and_then(|b| b.cann_version());
    let release = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    let (status, detail, fix) = match (built, loaded) {
        (Some(b), Some(l)) if release(b) == release(l) => {
            (Status::Ok, format!("built against {b}, loaded {l}"), None)
        }
        (Some(b), Some(l)) => (
            Status::Warn,
            format!("built against {b}, loaded {l}"),
            Some("rebuild with ASCEND_HOME_PATH pointing at the loaded CANN".to_string()),
        ),
        (b, l) => (
            Status::Ok,
            format!(
                "not comparable: built against {}, loaded {}{}",
                b.unwrap_or("no CANN toolkit"),
                l.unwrap_or("an unknown version"),
                if emulated { " (emulated)" } else { "" }
            ),
            None,
        ),
    };
    Check {
        name: "CANN version".into(),
        status,
        detail,
        fix,
    }
}
