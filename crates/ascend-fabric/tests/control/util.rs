//! Helpers of the control-plane tests: a handler offering real exported memory, connections
//! from chosen loopback source addresses, bounded waits.

use ascend_fabric::control::{ControlHandler, ControlServer, ServerConfig};
use ascend_fabric::wire::ShareHandleEntry;
use ascend_fabric::Addr;
use ascend_fabric::{Engine, EngineOptions, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, ExportFlags, FabricHandle, Runtime, ShareKind};
use parking_lot::Mutex;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Generous failure guard of every bounded wait.
pub const GUARD: Duration = Duration::from_secs(20);
pub const T: Duration = Duration::from_secs(5);
pub const MIB2: usize = 2 << 20;

/// Device 0 of the in-process emulator.
pub fn device() -> ascend_mem::Device {
    Runtime::emulated()
        .expect("the emulator opens")
        .device(0)
        .expect("device 0")
}

/// A handler that offers fixed entries and records session events.
#[derive(Default)]
pub struct Handler {
    pub entries: Vec<ShareHandleEntry>,
    pub events: Mutex<Vec<String>>,
    /// Makes each session callback take this long before it records its event (a slow
    /// handler, to show what a caller can rely on while one runs).
    pub slow: Mutex<Duration>,
}

impl Handler {
    fn record(&self, event: String) {
        let pause = *self.slow.lock();
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        self.events.lock().push(event);
    }
}

impl ControlHandler for Handler {
    fn share_handles(&self) -> Vec<ShareHandleEntry> {
        self.entries.clone()
    }
    fn session_opened(&self, id: &str) {
        self.record(format!("open {id}"));
    }
    fn session_closed(&self, id: &str) {
        self.record(format!("close {id}"));
    }
}

/// Fake entries (not importable): enough for raw control-plane tests.
pub fn fake_entries(n: usize) -> Vec<ShareHandleEntry> {
    (0..n)
        .map(|i| ShareHandleEntry {
            len: MIB2 as u64,
            share_handle: [i as u8; 128],
            va_addr: 0x4000_0000_0000 + (i as u64) * MIB2 as u64,
        })
        .collect()
}

/// A server on an ephemeral loopback port offering `entries`.
pub fn server(
    entries: Vec<ShareHandleEntry>,
    config: ServerConfig,
) -> (ControlServer, Arc<Handler>) {
    let h = Arc::new(Handler {
        entries,
        ..Default::default()
    });
    let s = ControlServer::start("127.0.0.1:0".parse().unwrap(), h.clone(), config).unwrap();
    (s, h)
}

/// Device memory exported as FABRIC, offered by a test server as one entry; what an engine
/// writes there can be read back.
pub struct Exported {
    pub buf: DeviceBuffer,
    _handle: FabricHandle,
    pub entry: ShareHandleEntry,
}

pub fn exported(dev: &ascend_mem::Device, len: usize) -> Exported {
    let buf = DeviceBuffer::new(dev, len).unwrap();
    buf.fill(0).unwrap();
    let handle = buf
        .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
        .unwrap();
    let entry = ShareHandleEntry {
        len: buf.len() as u64,
        share_handle: *handle.shared().raw_data(),
        va_addr: buf.addr().get(),
    };
    Exported {
        buf,
        _handle: handle,
        entry,
    }
}

/// `127.0.0.1:<a free port>`, for an engine that listens (the port is from outside the
/// ephemeral range, so no outgoing connection takes it before the engine binds it).
pub fn engine_addr() -> String {
    format!(
        "127.0.0.1:{}",
        ascend_launch::free_port().expect("a free loopback port")
    )
}

/// A port-less engine ("127.0.0.1"): it listens on nothing and connects as a client.
pub fn client_engine(dev: &ascend_mem::Device, secret: Option<&str>) -> Engine {
    let mut b = EngineOptions::builder()
        .task_stream_num(1)
        .heartbeat_interval(Duration::from_millis(200))
        .pool_capacity(64 << 30);
    if let Some(s) = secret {
        b = b.shared_secret(s);
    }
    Engine::new(dev, "127.0.0.1", b.build().unwrap()).unwrap()
}

pub use ascend_testkit::pattern;

/// `engine` connects to `server` and writes a pattern into `target` at `offset`; checks it
/// arrived.
pub fn connect_and_write(
    engine: &Engine,
    dev: &ascend_mem::Device,
    server: SocketAddr,
    target: &Exported,
    offset: usize,
    seed: u8,
) {
    let remote = server.to_string();
    engine.connect(&remote, T).expect("the real peer connects");
    let len = 64 << 10;
    let local = DeviceBuffer::new(dev, len).unwrap();
    let data = pattern(seed, len);
    local.write_from(&data, 0).unwrap();
    let _reg = engine.register(&local).unwrap();
    let d = TransferDesc::raw(local.addr(), Addr::new(target.entry.va_addr) + offset, len);
    engine
        .transfer_sync(&remote, TransferOp::Write, &[d], T)
        .expect("the real peer transfers");
    let mut back = vec![0u8; len];
    target.buf.read_into(&mut back, offset).unwrap();
    assert!(back == data, "the bytes written arrived");
}

/// A TCP connection to `to` from source address `from` (any loopback address works on Linux).
pub fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(from, 0).into())?;
    s.connect_timeout(&to.into(), T)?;
    Ok(s.into())
}

/// Waits (bounded by [`GUARD`]) until `f` holds; panics naming `what` otherwise.
#[track_caller]
pub fn wait_until(what: &str, f: impl FnMut() -> bool) {
    ascend_testkit::wait_until(what, GUARD, f);
}

/// Sets the soft descriptor limit to `n` (at most the hard limit); returns the new soft limit.
pub fn set_soft_nofile(n: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = n.min(lim.rlim_max);
    // SAFETY: `lim` is a valid rlimit; the soft limit stays at or below the hard one.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    lim.rlim_cur
}

/// Reads until EOF or a reset: true if the peer closed within `within`.
pub fn closed_by_peer(s: &mut TcpStream, within: Duration) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                return true
            }
            Err(_) => return false,
        }
    }
}
