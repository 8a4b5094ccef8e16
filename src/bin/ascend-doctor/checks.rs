//! The environment checks: the CANN folders, device visibility, the examples' ports, etcd.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

/// How a check came out.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One check: what, how it came out, what was seen, and the fix when it is not ok.
#[derive(Clone, Debug)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    fn new(name: &str, status: Status, detail: impl Into<String>, fix: Option<&str>) -> Check {
        Check {
            name: name.to_string(),
            status,
            detail: detail.into(),
            fix: fix.map(str::to_string),
        }
    }
}

const SET_ENV: &str =
    "install the CANN toolkit and `source <install>/set_env.sh`, or use the emulator (ASCEND_MEM_BACKEND=sim)";

/// `ASCEND_HOME_PATH` and `ASCEND_TOOLKIT_HOME`: set, a folder, with a `lib64`. On the
/// emulator a missing toolkit is only a note.
pub fn cann_folders(emulated: bool) -> Vec<Check> {
    let missing = if emulated { Status::Ok } else { Status::Warn };
    let bad = if emulated { Status::Warn } else { Status::Fail };
    let mut out = Vec::new();
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        let value = std::env::var_os(var).filter(|v| !v.is_empty());
        let check = match value {
            None if var == "ASCEND_TOOLKIT_HOME" => continue,
            None if emulated => {
                Check::new(var, missing, "not set (the emulator needs no CANN)", None)
            }
            None => Check::new(var, missing, "not set", Some(SET_ENV)),
            Some(v) => {
                let dir = Path::new(&v);
                let shown = dir.display();
                if !dir.is_dir() {
                    Check::new(var, bad, format!("{shown} does not exist"), Some(SET_ENV))
                } else if !dir.join("lib64").is_dir() {
                    Check::new(var, bad, format!("{shown} has no lib64"), Some(SET_ENV))
                } else {
                    Check::new(var, Status::Ok, format!("{shown}"), None)
                }
            }
        };
        out.push(check);
    }
    out
}

/// The devices this process sees, and the one asked for.
pub fn devices(count: Option<u32>, device: Option<i32>) -> Vec<Check> {
    let visible = std::env::var("ASCEND_RT_VISIBLE_DEVICES")
        .map(|v| format!("ASCEND_RT_VISIBLE_DEVICES={v}"))
        .unwrap_or_else(|_| "ASCEND_RT_VISIBLE_DEVICES unset (all devices)".into());
    let fix = Some("check the driver (npu-smi info) and ASCEND_RT_VISIBLE_DEVICES");
    let mut out = vec![match count {
        Some(n) if n > 0 => Check::new(
            "devices",
            Status::Ok,
            format!("{n} visible; {visible}"),
            None,
        ),
        Some(_) => Check::new(
            "devices",
            Status::Fail,
            format!("none visible; {visible}"),
            fix,
        ),
        None => Check::new(
            "devices",
            Status::Fail,
            format!("the count is unknown; {visible}"),
            fix,
        ),
    }];
    if let (Some(d), Some(n)) = (device, count) {
        if d < 0 || d as u32 >= n {
            out.push(Check::new(
                "--device",
                Status::Fail,
                format!("device {d} is not one of the {n} visible"),
                Some("name a device below the count"),
            ));
        }
    }
    out
}

/// The ports the examples listen on by default (fabric_transfer, kv_service_tokio).
pub const EXAMPLE_PORTS: [u16; 3] = [26000, 26001, 26110];

/// Each port free to bind on the loopback address. A taken default port is a warning; a
/// port named with `--ports` that is taken is a failure.
pub fn ports(ports: &[u16], named: bool) -> Vec<Check> {
    let taken = if named { Status::Fail } else { Status::Warn };
    ports
        .iter()
        .map(|p| match TcpListener::bind(("127.0.0.1", *p)) {
            Ok(_) => Check::new(&format!("port {p}"), Status::Ok, "free", None),
            Err(e) => Check::new(
                &format!("port {p}"),
                taken,
                format!("cannot be bound: {e}"),
                Some("stop what holds it, or give the example another address"),
            ),
        })
        .collect()
}

/// etcd's client endpoint: a TCP connect and `GET /version`.
pub fn etcd(endpoint: &str) -> Check {
    let hostport = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let fix = Some("start etcd, or name its client URL (--etcd http://HOST:2379)");
    match etcd_version(&hostport) {
        Ok(v) => Check::new("etcd", Status::Ok, format!("{hostport}: etcd {v}"), None),
        Err(e) => Check::new("etcd", Status::Fail, format!("{hostport}: {e}"), fix),
    }
}

fn etcd_version(hostport: &str) -> Result<String, String> {
    const WAIT: Duration = Duration::from_secs(3);
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("not an address: {e}"))?
        .next()
        .ok_or("the name has no address")?;
    let mut s =
        TcpStream::connect_timeout(&addr, WAIT).map_err(|e| format!("not reachable: {e}"))?;
    s.set_read_timeout(Some(WAIT)).map_err(|e| e.to_string())?;
    write!(s, "GET /version HTTP/1.0\r\nHost: {hostport}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .map_err(|e| format!("no answer: {e}"))?;
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|_| format!("not etcd's answer: {answer:.80}"))?;
    json.get("etcdserver")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("no etcdserver version in {body:.80}"))
}
