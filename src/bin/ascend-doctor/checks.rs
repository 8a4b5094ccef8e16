//! The environment checks: the backend asked for, the CANN folders and library, device
//! visibility, the examples' ports, etcd; and the CANN built against against the one loaded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use ascend::{Backend, BackendChoice};

/// How a check came out.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    /// `ok`, `warn` or `FAIL`, as the text report prints it.
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

/// What serves this process, as far as the checks care.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// The emulator: a missing or broken CANN install is only worth a note.
    Emulator,
    /// A CANN runtime.
    Cann,
    /// Nothing: the runtime did not open, and the checks explain why.
    Nothing,
}

impl Served {
    /// What a runtime's backend is to the checks (`None`: no runtime).
    pub fn of(backend: Option<&Backend>) -> Served {
        match backend {
            Some(b) if b.is_emulator() => Served::Emulator,
            Some(_) => Served::Cann,
            None => Served::Nothing,
        }
    }
}

const INSTALL: &str = "install the CANN toolkit and `source <install>/set_env.sh`, or use the \
                       emulator (ASCEND_MEM_BACKEND=sim)";

/// `ASCEND_MEM_BACKEND`: what was asked for (as ascend-mem reads it:
/// [`BackendChoice::from_env`]), and what it gave (`None`: nothing opened).
pub fn backend_choice(backend: Option<&Backend>) -> Check {
    const NAME: &str = BackendChoice::VAR;
    let choice = BackendChoice::from_env();
    // The value as set, for the report; what it means is `choice`.
    let asked = std::env::var(NAME).unwrap_or_default();
    let shown = match choice {
        Ok(BackendChoice::Unset) => "unset",
        _ => asked.trim(),
    };
    let sim = matches!(choice, Ok(BackendChoice::Emulator));
    let check = |status, detail: String, fix| Check::new(NAME, status, detail, fix);
    match backend {
        None if choice.is_err() => check(
            Status::Fail,
            format!("{shown:?} is not a backend"),
            Some("set it to cann or sim, or unset it"),
        ),
        None if sim => check(
            Status::Fail,
            format!("{shown}: the emulator did not open"),
            None,
        ),
        None => check(
            Status::Fail,
            format!("{shown}: CANN did not open (the error above says why)"),
            Some("fix the load error above, or use the emulator (ASCEND_MEM_BACKEND=sim)"),
        ),
        Some(Backend::EmulatorInProcess) if matches!(choice, Ok(BackendChoice::Unset)) => check(
            Status::Warn,
            "unset and no CANN runtime was found, so the emulator serves".into(),
            Some(
                "for the NPU: install CANN and `source <install>/set_env.sh`; \
                 ASCEND_MEM_BACKEND=cann makes a missing CANN an error listing every path tried",
            ),
        ),
        Some(b) if b.is_emulator() && !sim => check(
            Status::Ok,
            format!("{shown}: the emulator's library was loaded in CANN's place"),
            None,
        ),
        Some(b) if b.is_emulator() => check(Status::Ok, format!("{shown}: the emulator"), None),
        Some(_) => check(Status::Ok, format!("{shown}: CANN"), None),
    }
}

/// `ASCEND_HOME_PATH` (set, a folder with a `lib64`), and `ASCEND_TOOLKIT_HOME` and
/// `ASCEND_ACL_LIB` when set. On the emulator a missing or broken toolkit is only a note.
pub fn cann_install(served: Served) -> Vec<Check> {
    let emulated = served == Served::Emulator;
    let bad = if emulated { Status::Warn } else { Status::Fail };
    let mut out = Vec::new();
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        match std::env::var_os(var).filter(|v| !v.is_empty()) {
            Some(v) => out.push(toolkit_folder(var, Path::new(&v), bad)),
            None if var == "ASCEND_TOOLKIT_HOME" => {}
            None if emulated => out.push(Check::new(
                var,
                Status::Ok,
                "not set (the emulator needs no CANN)",
                None,
            )),
            None if served == Served::Cann => {
                out.push(Check::new(var, Status::Warn, "not set", Some(INSTALL)))
            }
            None => out.push(Check::new(var, Status::Fail, "not set", Some(INSTALL))),
        }
    }
    if let Some(lib) = std::env::var_os("ASCEND_ACL_LIB").filter(|v| !v.is_empty()) {
        let lib = Path::new(&lib);
        out.push(if lib.is_file() {
            Check::new(
                "ASCEND_ACL_LIB",
                Status::Ok,
                lib.display().to_string(),
                None,
            )
        } else {
            Check::new(
                "ASCEND_ACL_LIB",
                bad,
                format!("{} is not a file", lib.display()),
                Some("name the ACL library file (libascendcl.so), or unset it"),
            )
        });
    }
    out
}

fn toolkit_folder(var: &str, dir: &Path, bad: Status) -> Check {
    let shown = dir.display();
    if !dir.is_dir() {
        Check::new(var, bad, format!("{shown} does not exist"), Some(INSTALL))
    } else if !dir.join("lib64").is_dir() {
        Check::new(
            var,
            bad,
            format!("{shown} has no lib64 (not a CANN toolkit folder)"),
            Some("point it at the toolkit folder that holds lib64: `source <install>/set_env.sh`"),
        )
    } else {
        Check::new(var, Status::Ok, format!("{shown} (with lib64)"), None)
    }
}

/// The devices this process sees, and the one `--device` asked for.
pub fn devices(count: Option<u32>, device: Option<i32>) -> Vec<Check> {
    let visible = match std::env::var("ASCEND_RT_VISIBLE_DEVICES") {
        Ok(v) => format!("ASCEND_RT_VISIBLE_DEVICES={v}"),
        Err(_) => "ASCEND_RT_VISIBLE_DEVICES unset (every device)".into(),
    };
    let fix = Some("check the driver (`npu-smi info`) and ASCEND_RT_VISIBLE_DEVICES");
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
            format!("the runtime did not say how many; {visible}"),
            fix,
        ),
    }];
    if let Some(d) = device {
        let n = count.unwrap_or(0);
        let (status, detail, fix) = match u32::try_from(d) {
            Ok(d) if d < n => (Status::Ok, format!("device {d} is visible"), None),
            _ => (
                Status::Fail,
                format!("device {d} is not one of the {n} visible"),
                Some(
                    "name a device below the count, or make it visible (ASCEND_RT_VISIBLE_DEVICES)",
                ),
            ),
        };
        out.push(Check::new("--device", status, detail, fix));
    }
    out
}

/// The ports the examples listen on by default: fabric_transfer's server and client,
/// kv_service_tokio's decode engine.
pub const EXAMPLE_PORTS: [u16; 3] = [26000, 26001, 26110];

/// Each port free to bind on the loopback address. A taken default port is a warning (only
/// the example that uses it cannot run as written); a port named with `--ports` that is
/// taken is a failure.
pub fn ports(ports: &[u16], named: bool) -> Vec<Check> {
    let taken = if named { Status::Fail } else { Status::Warn };
    ports
        .iter()
        .map(|p| match TcpListener::bind(("127.0.0.1", *p)) {
            Ok(_) => Check::new(&format!("port {p}"), Status::Ok, "free on 127.0.0.1", None),
            Err(e) => Check::new(
                &format!("port {p}"),
                taken,
                format!("cannot be bound on 127.0.0.1: {e}"),
                Some("stop what holds it (`ss -ltnp`), or give the program another address"),
            ),
        })
        .collect()
}

/// How long the etcd check waits for the connect, and then for the answer.
const ETCD_WAIT: Duration = Duration::from_secs(3);

/// etcd's client endpoint (`http://HOST:PORT`, `HOST:PORT`, or `HOST` for port 2379): a TCP
/// connect, then `GET /version`, whose answer names etcd's version. Over `https` only the
/// connect is tried (there is no TLS here), which is a warning.
pub fn etcd(url: &str) -> Check {
    let fix = Some("start etcd, or name its client URL (--etcd http://HOST:2379)");
    let (tls, hostport) = match etcd_endpoint(url) {
        Ok(e) => e,
        Err(e) => return Check::new("etcd", Status::Fail, format!("{url}: {e}"), fix),
    };
    let answer = connect(&hostport).and_then(|s| match tls {
        true => Ok(None),
        false => etcd_version(s, &hostport).map(Some),
    });
    match answer {
        Ok(Some(v)) => Check::new("etcd", Status::Ok, format!("{hostport}: etcd {v}"), None),
        Ok(None) => Check::new(
            "etcd",
            Status::Warn,
            format!("{hostport}: reachable; over https its version is not read"),
            Some("check it with `etcdctl --endpoints URL endpoint health`"),
        ),
        Err(e) => Check::new("etcd", Status::Fail, format!("{hostport}: {e}"), fix),
    }
}

/// Whether the URL is https, and its `host:port`.
fn etcd_endpoint(url: &str) -> Result<(bool, String), String> {
    let url = url.trim();
    let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if url.contains("://") {
        return Err("not an http:// or https:// URL".into());
    } else {
        (false, url)
    };
    let hostport = rest.split('/').next().unwrap_or_default();
    if hostport.is_empty() {
        return Err("no host".into());
    }
    // A port after the host (after the brackets of an IPv6 address), or etcd's 2379.
    let has_port = hostport[hostport.rfind(']').unwrap_or(0)..].contains(':');
    Ok(match has_port {
        true => (tls, hostport.to_string()),
        false => (tls, format!("{hostport}:2379")),
    })
}

fn connect(hostport: &str) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = hostport
        .to_socket_addrs()
        .map_err(|e| format!("not an address: {e}"))?
        .collect();
    let mut last = "the name has no address".to_string();
    for a in addrs {
        match TcpStream::connect_timeout(&a, ETCD_WAIT) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("not reachable ({a}): {e}"),
        }
    }
    Err(last)
}

/// `GET /version` on a connected stream; etcd answers `{"etcdserver":"3.5.9",
/// "etcdcluster":"3.5.0"}`.
fn etcd_version(mut s: TcpStream, hostport: &str) -> Result<String, String> {
    let io = |e: std::io::Error| format!("no answer to GET /version: {e}");
    s.set_read_timeout(Some(ETCD_WAIT)).map_err(io)?;
    s.set_write_timeout(Some(ETCD_WAIT)).map_err(io)?;
    write!(s, "GET /version HTTP/1.0\r\nHost: {hostport}\r\n\r\n").map_err(io)?;
    let mut answer = Vec::new();
    s.take(64 << 10).read_to_end(&mut answer).map_err(io)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("not etcd: GET /version answered {status:?}"));
    }
    let json: serde_json::Value = serde_json::from_str(body)
        .map_err(|_| format!("not etcd: GET /version answered {:?}", clip(body)))?;
    let server = json["etcdserver"]
        .as_str()
        .ok_or_else(|| format!("not etcd: no etcdserver in {:?}", clip(body)))?;
    Ok(match json["etcdcluster"].as_str() {
        Some(c) => format!("{server} (cluster {c})"),
        None => server.to_string(),
    })
}

fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The CANN the crate was built against beside the one loaded.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// `same`, `different` or `not comparable`.
    pub result: &'static str,
    pub detail: String,
    pub fix: Option<&'static str>,
}

/// Compares the release (major.minor) built against with the one loaded.
pub fn compare(built: Option<&str>, loaded: Option<&str>, served: Served) -> Comparison {
    let release = |v: &str| {
        let parts: Vec<String> = v.split('.').take(2).map(str::to_ascii_lowercase).collect();
        (parts.len() == 2).then(|| parts.join("."))
    };
    let not = |detail: String| Comparison {
        result: "not comparable",
        detail: format!("not comparable: {detail}"),
        fix: None,
    };
    let (b, l) = match (built, loaded) {
        _ if served == Served::Nothing => return not("no runtime was loaded".into()),
        _ if served == Served::Emulator => {
            let reports = loaded.map(|l| format!(" (it reports {l})"));
            return not(format!(
                "the loaded runtime is the emulator{}",
                reports.unwrap_or_default()
            ));
        }
        (None, _) => return not("built without a CANN toolkit version".into()),
        (_, None) => return not("the loaded runtime does not report its version".into()),
        (Some(b), Some(l)) => (b, l),
    };
    match (release(b), release(l)) {
        (Some(rb), Some(rl)) if rb == rl => Comparison {
            result: "same",
            detail: format!("same release ({rb}): built against {b}, loaded {l}"),
            fix: None,
        },
        (Some(_), Some(_)) => Comparison {
            result: "different",
            detail: format!("different releases: built against {b}, loaded {l}"),
            fix: Some("rebuild with ASCEND_HOME_PATH pointing at the loaded CANN"),
        },
        _ => not(format!("built against {b}, loaded {l}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_compare_by_major_and_minor() {
        let c = |b, l| compare(b, l, Served::Cann);
        let same = c(Some("9.1.0"), Some("9.1.2"));
        assert_eq!((same.result, same.fix), ("same", None));
        assert_eq!(c(Some("8.0.RC1"), Some("8.0.rc1.alpha")).result, "same");
        let diff = c(Some("8.5.0"), Some("9.1.0"));
        assert_eq!(diff.result, "different");
        assert_eq!(
            diff.fix,
            Some("rebuild with ASCEND_HOME_PATH pointing at the loaded CANN")
        );
        assert_eq!(c(None, Some("9.1.0")).result, "not comparable");
        assert_eq!(c(Some("9.1.0"), None).result, "not comparable");
        assert_eq!(c(Some("9"), Some("9.1.0")).result, "not comparable");
        let emu = compare(Some("9.1.0"), Some("9.1.0"), Served::Emulator);
        assert!(emu.detail.contains("emulator"), "{}", emu.detail);
        assert_eq!(
            compare(None, None, Served::Nothing).result,
            "not comparable"
        );
    }

    #[test]
    fn etcd_endpoints_default_to_port_2379() {
        let e = |u| etcd_endpoint(u);
        assert_eq!(e("http://h:1/"), Ok((false, "h:1".into())));
        assert_eq!(e("https://h"), Ok((true, "h:2379".into())));
        assert_eq!(e("h"), Ok((false, "h:2379".into())));
        assert_eq!(e("[::1]"), Ok((false, "[::1]:2379".into())));
        assert_eq!(e("[::1]:5"), Ok((false, "[::1]:5".into())));
        assert!(e("unix:///x").is_err() && e("http://").is_err());
    }
}
