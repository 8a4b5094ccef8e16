//! Helpers of the directory tests: a throwaway etcd (ascend-testkit's) and what the tests
//! write into it behind the directory's back, and waiting for directory events.
#![allow(dead_code)]

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use ascend_fabric::directory::DirectoryEvent;

pub use ascend_testkit::etcd::LocalEtcd;

/// Starts etcd on free loopback ports.
pub fn etcd() -> LocalEtcd {
    LocalEtcd::start(ascend_testkit::free_port)
}

/// What an operator or a foreign writer does to etcd directly, through its JSON gateway: for
/// entries no publisher would write and leases taken away.
pub trait EtcdGateway {
    /// Writes `value` at `key` (`/v3/kv/put`).
    fn put_raw(&self, key: &str, value: &[u8]);
    /// The lease `key` is attached to, as the gateway writes it (a decimal string).
    fn lease_of(&self, key: &str) -> String;
    /// Revokes lease `id` (its keys go at once).
    fn revoke_lease(&self, id: &str);
}

impl EtcdGateway for LocalEtcd {
    fn put_raw(&self, key: &str, value: &[u8]) {
        let body = format!(
            "{{\"key\":\"{}\",\"value\":\"{}\"}}",
            base64(key.as_bytes()),
            base64(value)
        );
        self.post("/v3/kv/put", &body);
    }

    fn lease_of(&self, key: &str) -> String {
        let body = format!("{{\"key\":\"{}\"}}", base64(key.as_bytes()));
        let resp = self.post("/v3/kv/range", &body);
        let at = resp.find("\"lease\":\"").expect("the key has a lease") + 9;
        resp[at..].split('"').next().unwrap().to_owned()
    }

    fn revoke_lease(&self, id: &str) {
        self.post("/v3/lease/revoke", &format!("{{\"ID\":\"{id}\"}}"));
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

/// Waits up to `within` for `name` to leave, skipping other events; the time it took.
pub fn wait_left(rx: &Receiver<DirectoryEvent>, name: &str, within: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        let left = within.checked_sub(t0.elapsed())?;
        match rx.recv_timeout(left).ok()? {
            DirectoryEvent::Left { name: n } if n == name => return Some(t0.elapsed()),
            _ => {}
        }
    }
}
