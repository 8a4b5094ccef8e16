//! `ascend-doctor` as a user runs it: on the emulator every capability with how it was found
//! and exit 0, as text and as JSON; CANN asked for and not there, exit 2 with the fix; needs
//! the runtime lacks, exit 1 naming each with its fix; an unknown need, a usage error; a bad
//! `--device`, a taken port, etcd unreachable, not etcd, and a real etcd started here.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

use ascend::fabric::{EngineCapabilities, Need};
use ascend::{CapRow, Runtime};
use ascend_testkit::etcd::{self, LocalEtcd};
use serde_json::Value;

/// The doctor on the emulator; the rest of the environment is the test's (the in-process
/// emulator the rows are compared with reads the same `ASCEND_SIM_*` variables).
fn doctor(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ascend-doctor"));
    c.args(args).env("ASCEND_MEM_BACKEND", "sim");
    c
}

/// How a run ended: its exit code and what it printed.
struct Run {
    code: Option<i32>,
    out: String,
    err: String,
}

fn run(c: &mut Command) -> Run {
    let o = c.output().expect("ascend-doctor runs");
    Run {
        code: o.status.code(),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.out)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{}", self.out))
    }

    /// The line starting with `prefix`.
    fn line(&self, prefix: &str) -> &str {
        self.out
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in\n{}", self.out))
    }
}

fn emulated_rows() -> Vec<CapRow> {
    EngineCapabilities::probe(&Runtime::emulated().expect("the emulator")).rows()
}

/// Whether `line` is the table row of `r`: its name, its value and how it was found, the
/// columns apart by two spaces or more.
fn is_row(line: &str, r: &CapRow) -> bool {
    line.strip_prefix(&r.name)
        .filter(|rest| rest.starts_with("  "))
        .and_then(|rest| rest.trim_start().strip_prefix(&r.value))
        .is_some_and(|how| how.starts_with("  ") && how.trim() == r.how.trim())
}

#[test]
fn on_the_emulator_every_capability_is_shown_with_how_it_was_found() {
    let r = run(&mut doctor(&[]));
    assert_eq!(r.code, Some(0), "{}", r.out);
    assert!(
        r.out
            .contains("emulator: no NPU; the values below are emulated"),
        "{}",
        r.out
    );
    assert!(
        r.line("CANN versions").contains("not comparable"),
        "{}",
        r.out
    );
    let table: Vec<&str> = r
        .out
        .lines()
        .skip_while(|l| !l.starts_with("capability "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let rows = emulated_rows();
    assert_eq!(table.len(), rows.len(), "{}", r.out);
    for row in &rows {
        assert!(
            table.iter().any(|l| is_row(l, row)),
            "no row {row:?} in\n{}",
            r.out
        );
    }
    assert!(!r.out.contains("FAIL"), "{}", r.out);
}

#[test]
fn json_has_every_capability_row_and_says_ok() {
    let j = run(&mut doctor(&["--json"])).json();
    assert_eq!(
        (&j["ok"], &j["emulated"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    assert!(j["backend"].as_str().unwrap().contains("emulator"), "{j}");
    let caps = j["capabilities"].as_array().expect("capabilities");
    let rows = emulated_rows();
    assert_eq!(caps.len(), rows.len(), "{j}");
    for (row, c) in rows.iter().zip(caps) {
        assert_eq!(
            (c["name"].as_str(), c["value"].as_str(), c["how"].as_str()),
            (Some(&*row.name), Some(&*row.value), Some(&*row.how))
        );
    }
    for c in j["checks"].as_array().expect("checks") {
        let status = c["status"].as_str().expect("a status");
        assert!(status == "ok" || status == "warn", "{c}");
        assert!(c["name"].is_string() && c["detail"].is_string(), "{c}");
    }
}

#[test]
fn cann_asked_for_and_missing_exits_2_naming_what_and_the_fix() {
    let cann = |args: &[&str]| {
        let mut c = doctor(args);
        c.env("ASCEND_MEM_BACKEND", "cann")
            .env("ASCEND_HOME_PATH", "/nonexistent")
            .env("LD_LIBRARY_PATH", "")
            .env_remove("ASCEND_ACL_LIB")
            .env_remove("ASCEND_TOOLKIT_HOME");
        run(&mut c)
    };
    let j = cann(&["--json"]).json();
    let home = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ASCEND_HOME_PATH")
        .expect("the ASCEND_HOME_PATH check")
        .clone();
    assert_eq!(
        (home["status"].as_str(), home["detail"].as_str()),
        (Some("fail"), Some("/nonexistent does not exist"))
    );
    assert_eq!(j["ok"], false);
    let r = cann(&[]);
    if !j["backend"].is_null() {
        // A CANN runtime was found elsewhere (the toolkit this crate was built against, or the
        // loader's cache): it opened, and the broken ASCEND_HOME_PATH still fails.
        assert_eq!((j["emulated"].as_bool(), r.code), (Some(false), Some(1)));
        return;
    }
    assert_eq!(r.code, Some(2), "{}", r.out);
    assert!(
        j["error"].as_str().unwrap().contains("/nonexistent/lib64"),
        "the load error lists every path tried: {j}"
    );
    let line = r.line("FAIL  ASCEND_HOME_PATH: /nonexistent does not exist");
    assert!(
        line.contains("set_env.sh") && line.contains("ASCEND_MEM_BACKEND=sim"),
        "{line}"
    );
    assert!(
        r.out.contains("/nonexistent/lib64/libascendcl.so"),
        "{}",
        r.out
    );
}

#[test]
fn on_the_emulator_a_broken_cann_folder_is_only_a_warning() {
    let r = run(doctor(&[]).env("ASCEND_HOME_PATH", "/nonexistent"));
    assert_eq!(r.code, Some(0), "{}", r.out);
    r.line("warn  ASCEND_HOME_PATH: /nonexistent does not exist");
}

#[test]
fn needs_an_a2_lacks_fail_with_their_fixes_and_an_a3_has_them() {
    let a2 = || {
        let mut c = doctor(&["--need", "fabric,symwin,vmm"]);
        c.env("ASCEND_SIM_SOC", "A2");
        c
    };
    let r = run(&mut a2());
    assert_eq!(r.code, Some(1), "{}", r.out);
    for need in ["fabric", "symwin"] {
        let line = r.line(&format!("FAIL  need {need}: "));
        assert!(line.ends_with(')') && line.contains(" (fix: "), "{line}");
    }
    assert!(
        r.line("FAIL  need symwin: ").contains("run on Atlas A3"),
        "{}",
        r.out
    );
    r.line("ok    need vmm");
    let j = run(a2().arg("--json")).json();
    let needs = j["needs"].as_array().unwrap();
    assert_eq!(needs.len(), 3);
    for n in &needs[..2] {
        assert_eq!(n["ok"], false, "{n}");
        assert!(!n["why"].as_str().unwrap().is_empty() && !n["fix"].as_str().unwrap().is_empty());
    }
    assert_eq!(
        (&needs[2]["ok"], &j["ok"]),
        (&Value::Bool(true), &Value::Bool(false))
    );

    let r = run(doctor(&["--need", "fabric,symwin"]).env_remove("ASCEND_SIM_SOC"));
    assert_eq!(r.code, Some(0), "{}", r.out);
    r.line("ok    need fabric");
    r.line("ok    need symwin");
}

#[test]
fn an_unknown_need_is_a_usage_error_listing_the_valid_names() {
    let r = run(&mut doctor(&["--need", "fabric,warp-drive"]));
    assert_eq!(r.code, Some(2), "{}", r.err);
    assert!(
        r.err.contains("\"warp-drive\" is not a feature"),
        "{}",
        r.err
    );
    for n in Need::all() {
        assert!(
            r.err.contains(n.name()),
            "{} not listed: {}",
            n.name(),
            r.err
        );
    }
    assert!(r.out.is_empty(), "{}", r.out);
}

#[test]
fn a_device_beyond_the_count_fails_and_one_below_is_probed() {
    let r = run(doctor(&["--device", "2"]).env("ASCEND_SIM_DEVICES", "2"));
    assert_eq!(r.code, Some(1), "{}", r.out);
    r.line("FAIL  --device: device 2 is not one of the 2 visible");
    let r = run(doctor(&["--device", "1", "--json"]).env("ASCEND_SIM_DEVICES", "2"));
    assert_eq!(r.code, Some(0), "{}", r.out);
    assert_eq!(r.json()["probed_device"], 1);
}

#[test]
fn a_named_port_that_is_taken_fails() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let r = run(&mut doctor(&["--ports", &port]));
    assert_eq!(r.code, Some(1), "{}", r.out);
    r.line(&format!("FAIL  port {port}: cannot be bound on 127.0.0.1"));
}

#[test]
fn etcd_unreachable_or_not_etcd_fails() {
    let port = ascend_testkit::free_port();
    let r = run(&mut doctor(&["--etcd", &format!("127.0.0.1:{port}")]));
    assert_eq!(r.code, Some(1), "{}", r.out);
    let line = r.line(&format!("FAIL  etcd: 127.0.0.1:{port}: not reachable"));
    assert!(line.contains("(fix: start etcd"), "{line}");

    // Something listens, but answers /version as etcd does not.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let url = format!("http://{addr}");
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut request = String::new();
        let mut rd = BufReader::new(s.try_clone().unwrap());
        while rd.read_line(&mut request).unwrap() > 2 {}
        s.write_all(b"HTTP/1.0 404 Not Found\r\n\r\nno").unwrap();
        request
    });
    let r = run(&mut doctor(&["--etcd", &url]));
    // Had the doctor not connected, this connection ends the accept (and the check below
    // fails); had it, the server answered it before the doctor exited.
    let _ = TcpStream::connect(addr);
    assert!(server.join().unwrap().starts_with("GET /version HTTP/1."));
    assert_eq!(r.code, Some(1), "{}", r.out);
    assert!(r.line("FAIL  etcd: ").contains("not etcd"), "{}", r.out);
}

#[test]
fn a_real_etcd_is_found_with_its_version() {
    if !etcd::available() {
        return;
    }
    let version = Command::new(etcd::bin()).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("etcd Version: "))
        .expect("etcd --version names its version")
        .trim()
        .to_string();
    let e = LocalEtcd::start(ascend_testkit::free_port);
    let r = run(&mut doctor(&["--etcd", &e.url()]));
    assert_eq!(r.code, Some(0), "{}", r.out);
    let line = r.line(&format!("ok    etcd: 127.0.0.1:{}: etcd ", e.client_port()));
    assert!(line.contains(&format!("etcd {version}")), "{line}");
}
