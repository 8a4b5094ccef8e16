//! A throwaway etcd for tests and the cluster example: `etcd` (Debian's `etcd-server`, or
//! the binary `ETCD_BIN` names) on free loopback ports with a temporary data dir, stopped and
//! removed on drop. Where etcd is not installed, starting it panics with how to install it:
//! a test that needs etcd fails, it never passes without it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd may take to answer its health check after starting.
const READY: Duration = Duration::from_secs(30);

/// A running etcd.
#[derive(Debug)]
pub struct LocalEtcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

fn bin() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into())
}

impl LocalEtcd {
    /// Starts etcd on free loopback ports (from `free_port`) and waits until it is healthy.
    ///
    /// # Panics
    /// If etcd is not installed (the message says how to install it) or does not become
    /// healthy.
    pub fn start(free_port: impl Fn() -> u16) -> LocalEtcd {
        let client_port = free_port();
        let peer_port = free_port();
        let dir =
            std::env::temp_dir().join(format!("ascend-etcd-{}-{client_port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary etcd data dir");
        let mut e = LocalEtcd {
            child: None,
            dir,
            client_port,
            peer_port,
        };
        e.restart();
        e
    }

    /// The client URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Kills etcd (SIGKILL, as a crash) and waits for it; the data dir stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts etcd again on the same ports and data dir (after [`LocalEtcd::stop`]) and waits
    /// until it is healthy.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "etcd is running");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("the etcd log file");
        let spawned = Command::new(bin())
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={}", self.url()))
            .arg(format!("--advertise-client-urls={}", self.url()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the etcd log file"))
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "etcd is not installed ({} not found): these tests need a real etcd. Install it \
                 with `apt-get install etcd-server` (Debian/Ubuntu), or set ETCD_BIN to an etcd binary",
                bin()
            ),
            Err(e) => panic!("cannot start {}: {e}", bin()),
        };
        self.child = Some(child);
        self.wait_healthy();
    }

    fn wait_healthy(&mut self) {
        let t0 = Instant::now();
        loop {
            if self.healthy() {
                return;
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "etcd exited with {st} before it was healthy; log:\n{}",
                    self.log()
                );
            }
            assert!(
                t0.elapsed() < READY,
                "etcd not healthy after {READY:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether etcd's `/health` says so.
    fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.client_port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        let mut body = String::new();
        s.write_all(req.as_bytes()).is_ok()
            && s.read_to_string(&mut body).is_ok()
            && body.contains("\"health\":\"true\"")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl LocalEtcd {
    /// Writes `value` at `key` directly (etcd's JSON gateway, `/v3/kv/put`), as an operator or
    /// a foreign writer would: for entries no publisher would write.
    pub fn put_raw(&self, key: &str, value: &[u8]) {
        let body = format!(
            "{{\"key\":\"{}\",\"value\":\"{}\"}}",
            base64(key.as_bytes()),
            base64(value)
        );
        self.post("/v3/kv/put", &body);
    }

    /// The lease `key` is attached to, as etcd's JSON gateway writes it (a decimal string).
    pub fn lease_of(&self, key: &str) -> String {
        let body = format!("{{\"key\":\"{}\"}}", base64(key.as_bytes()));
        let resp = self.post("/v3/kv/range", &body);
        let at = resp.find("\"lease\":\"").expect("the key has a lease") + 9;
        resp[at..].split('"').next().unwrap().to_owned()
    }

    /// Revokes lease `id` (as an operator would; its keys go at once).
    pub fn revoke_lease(&self, id: &str) {
        self.post("/v3/lease/revoke", &format!("{{\"ID\":\"{id}\"}}"));
    }

    /// POSTs `body` to etcd's JSON gateway at `path`; the response body.
    fn post(&self, path: &str, body: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.client_port)).expect("etcd answers");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        assert!(
            resp.starts_with("HTTP/1.0 200") || resp.starts_with("HTTP/1.1 200"),
            "{path}: {resp}"
        );
        resp
    }
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
