//! `ascend-doctor` as a user runs it: on the emulator every capability with how it was found
//! and exit 0; CANN asked for and not there, exit 2 with the fix; needs the runtime lacks,
//! exit 1 naming them; an unknown need, a usage error; etcd unreachable and reachable (a real
//! etcd started here).

use std::process::{Command, Output};

use ascend::fabric::EngineCapabilities;
use ascend::Runtime;

#[path = "../crates/ascend-fabric/tests/directory_util/etcd_server.rs"]
#[allow(dead_code)]
mod etcd_server;

fn doctor(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ascend-doctor"));
    c.args(args)
        .env("ASCEND_MEM_BACKEND", "sim")
        .env_remove("ASCEND_SIM_SOC");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("ascend-doctor runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

#[test]
fn on_the_emulator_every_capability_is_shown_with_how_it_was_found() {
    let o = doctor(&[], &[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("values below are emulated"), "{text}");
    let rows = EngineCapabilities::probe(&Runtime::emulated().unwrap()).rows();
    for r in &rows {
        let line = text
            .lines()
            .skip_while(|l| !l.starts_with("capability "))
            .find(|l| l.starts_with(&r.name) && l.contains(&r.value))
            .unwrap_or_else(|| panic!("no row {} = {} in\n{text}", r.name, r.value));
        assert!(
            line.trim_end().ends_with(r.how.trim_end()),
            "{line} / {}",
            r.how
        );
    }
}

#[test]
fn json_has_every_row_and_says_ok() {
    let o = doctor(&["--json", "--need", "fabric,fabricmem,hixlcs"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let j = json(&o);
    assert_eq!(j["ok"], true);
    assert_eq!(j["emulated"], true);
    let rows = EngineCapabilities::probe(&Runtime::emulated().unwrap()).rows();
    let caps = j["capabilities"].as_array().expect("capabilities");
    assert_eq!(caps.len(), rows.len());
    for (r, c) in rows.iter().zip(caps) {
        assert_eq!(
            (c["name"].as_str(), c["how"].as_str()),
            (Some(&*r.name), Some(&*r.how))
        );
    }
    assert_eq!(j["needs"].as_array().unwrap().len(), 3);
}

#[test]
fn cann_asked_for_and_missing_exits_2_naming_the_fix() {
    let env = [
        ("ASCEND_MEM_BACKEND", "cann"),
        ("ASCEND_HOME_PATH", "/nonexistent"),
    ];
    let run = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ascend-doctor"));
        c.args(args)
            .envs(env)
            .env_remove("ASCEND_ACL_LIB")
            .env_remove("ASCEND_TOOLKIT_HOME")
            .env("LD_LIBRARY_PATH", "");
        c.output().unwrap()
    };
    let o = run(&[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(
        text.contains("FAIL  ASCEND_HOME_PATH: /nonexistent does not exist"),
        "{text}"
    );
    assert!(
        text.contains("set_env.sh") && text.contains("ASCEND_MEM_BACKEND=sim"),
        "{text}"
    );
    let o = run(&["--json"]);
    assert_eq!(o.status.code(), Some(2));
    let j = json(&o);
    assert_eq!(
        (j["ok"].as_bool(), j["backend"].is_null()),
        (Some(false), true)
    );
    assert!(
        j["error"].as_str().unwrap().contains("/nonexistent/lib64"),
        "{j}"
    );
}

#[test]
fn needs_a2_lacks_fail_with_their_fixes() {
    let o = doctor(
        &["--need", "fabric,symwin,vmm"],
        &[("ASCEND_SIM_SOC", "A2")],
    );
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  need fabric: ") && text.contains("FAIL  need symwin: "),
        "{text}"
    );
    assert!(text.contains("run on Atlas A3"), "{text}");
    assert!(text.contains("ok    need vmm"), "{text}");
    assert_eq!(
        doctor(&["--need", "fabric,symwin"], &[]).status.code(),
        Some(0)
    );
}

#[test]
fn an_unknown_need_is_a_usage_error_listing_the_names() {
    let o = doctor(&["--need", "warp-drive"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warp-drive") && err.contains("fabricmem"),
        "{err}"
    );
}

#[test]
fn etcd_unreachable_fails_and_a_real_one_is_found() {
    let port = ascend_testkit::free_port().to_string();
    let o = doctor(&["--etcd", &format!("127.0.0.1:{port}")], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("FAIL  etcd: "), "{}", stdout(&o));
    let etcd = etcd_server::LocalEtcd::start(ascend_testkit::free_port);
    let o = doctor(&["--etcd", &etcd.url()], &[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("ok    etcd: ") && text.contains(": etcd 3."),
        "{text}"
    );
}
