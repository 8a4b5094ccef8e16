//! Servers: endpoints, registered memory with tags, the loopback listener and one thread per
//! connected client answering hello and list requests.

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hixl_sys::*;
use parking_lot::Mutex;

use super::counters::{xdec, xinc, XCtr};
use super::error::XRes;
use super::handle::{self, Kind};
use super::mem::{check_comm_mem, Backing, Checked};
use super::wire::{self, Buf, Cur};

/// Checks one endpoint's protocol: HCCS and UB_MEM are emulated; RESERVED (an endpoint left
/// as `EndpointDescInit` made it) and values outside the enum are invalid; the rest are
/// unsupported.
pub(crate) fn check_protocol(p: CommProtocol, what: &str) -> XRes {
    match p {
        COMM_PROTOCOL_HCCS | COMM_PROTOCOL_UB_MEM => Ok(()),
        COMM_PROTOCOL_RESERVED => xbail!(
            HIXL_PARAM_INVALID,
            "{what} protocol is COMM_PROTOCOL_RESERVED (-1): the endpoint was not filled in"
        ),
        COMM_PROTOCOL_ROCE..=COMM_PROTOCOL_UBG => xbail!(
            HIXL_UNSUPPORTED,
            "{what} protocol {p} is not emulated (only COMM_PROTOCOL_HCCS 0 and COMM_PROTOCOL_UB_MEM 6)"
        ),
        _ => xbail!(HIXL_PARAM_INVALID, "{what} protocol {p} is not a CommProtocol"),
    }
}

/// Reads a NUL-terminated IP address.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn read_ip(p: *const c_char, what: &str) -> XRes<IpAddr> {
    xensure!(!p.is_null(), HIXL_PARAM_INVALID, "{what} is NULL");
    // SAFETY: NUL-terminated per the caller's contract.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    s.trim().parse::<IpAddr>().map_err(|_| {
        super::error::xerr(
            HIXL_PARAM_INVALID,
            format!("{what} \"{s}\" is not an IP address"),
        )
    })
}

/// One registered block.
pub(crate) struct Reg {
    pub id: u64,
    pub tag: String,
    pub mem: Checked,
    pub backing: Backing,
}

impl Drop for Reg {
    fn drop(&mut self) {
        xdec(XCtr::ServerMems);
    }
}

struct Shared {
    protocols: Vec<CommProtocol>,
    regs: Mutex<BTreeMap<u64, Arc<Reg>>>,
    conns: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
    stop: AtomicBool,
}

struct Listening {
    listener: TcpListener,
    thread: JoinHandle<()>,
}

pub(crate) struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listening: Mutex<Option<Listening>>,
}

static SERVERS: Mutex<BTreeMap<u64, Arc<Server>>> = Mutex::new(BTreeMap::new());

pub(crate) fn lookup(h: HixlServerHandle) -> XRes<Arc<Server>> {
    xensure!(!h.is_null(), HIXL_PARAM_INVALID, "server_handle is NULL");
    let id = handle::decode(h, Kind::Server);
    id.and_then(|id| SERVERS.lock().get(&id).cloned())
        .ok_or_else(|| {
            super::error::xerr(
                HIXL_PARAM_INVALID,
                format!("server_handle {h:p} is not a live server"),
            )
        })
}

/// `HixlCSServerCreate`.
///
/// # Safety
/// Pointers null or valid per the C contract.
pub(crate) unsafe fn create(
    desc: *const HixlServerDesc,
    config: *const HixlServerConfig,
) -> XRes<HixlServerHandle> {
    xensure!(!desc.is_null(), HIXL_PARAM_INVALID, "server_desc is NULL");
    // SAFETY: non-null, readable per the C contract.
    let d = unsafe { desc.read_unaligned() };
    let _ = config; // NULL or a config whose global_resource_config is ignored.
    xensure!(
        !d.endpoint_list.is_null(),
        HIXL_PARAM_INVALID,
        "server_desc->endpoint_list is NULL"
    );
    xensure!(
        (1..=1024).contains(&d.endpoint_list_num),
        HIXL_PARAM_INVALID,
        "server_desc->endpoint_list_num {} is not in 1..=1024",
        d.endpoint_list_num
    );
    xensure!(
        d.server_port <= 65535,
        HIXL_PARAM_INVALID,
        "server_desc->server_port {} is over 65535",
        d.server_port
    );
    // SAFETY: NUL-terminated per the C contract.
    let ip = unsafe { read_ip(d.server_ip, "server_desc->server_ip") }?;
    let mut protocols = Vec::new();
    for i in 0..d.endpoint_list_num as usize {
        // SAFETY: the list holds endpoint_list_num entries per the C contract.
        let e = unsafe { d.endpoint_list.add(i).read_unaligned() };
        check_protocol(e.protocol, &format!("server_desc->endpoint_list[{i}]"))?;
        protocols.push(e.protocol);
    }
    // Let clients in other processes take our memfds (pidfd_getfd) and reach our memory
    // (process_vm_*) under Yama ptrace_scope 1.
    crate::share::allow_importers();
    let id = handle::new_id();
    let s = Arc::new(Server {
        addr: SocketAddr::new(ip, d.server_port as u16),
        shared: Arc::new(Shared {
            protocols,
            regs: Mutex::new(BTreeMap::new()),
            conns: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        }),
        listening: Mutex::new(None),
    });
    SERVERS.lock().insert(id, s);
    xinc(XCtr::Servers);
    Ok(handle::to_ptr(Kind::Server, id))
}

impl Server {
    /// `HixlCSServerRegMem`.
    ///
    /// # Safety
    /// Pointers null or valid per the C contract.
    pub(crate) unsafe fn reg_mem(
        &self,
        tag: *const c_char,
        mem: *const CommMem,
    ) -> XRes<MemHandle> {
        xensure!(!tag.is_null(), HIXL_PARAM_INVALID, "mem_tag is NULL");
        // SAFETY: NUL-terminated per the C contract.
        let tag = unsafe { CStr::from_ptr(tag) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: per the C contract.
        let m = unsafe { check_comm_mem(mem) }?;
        let mut regs = self.shared.regs.lock();
        for r in regs.values() {
            xensure!(
                r.tag != tag,
                HIXL_PARAM_INVALID,
                "mem_tag \"{tag}\" is already registered on this server"
            );
            xensure!(
                m.addr + m.size <= r.mem.addr || r.mem.addr + r.mem.size <= m.addr,
                HIXL_PARAM_INVALID,
                "mem [{:#x}, +{}) overlaps the block \"{}\" [{:#x}, +{}) already registered",
                m.addr,
                m.size,
                r.tag,
                r.mem.addr,
                r.mem.size
            );
        }
        let id = handle::new_id();
        let backing = Backing::of(&m);
        regs.insert(
            id,
            Arc::new(Reg {
                id,
                tag,
                mem: m,
                backing,
            }),
        );
        xinc(XCtr::ServerMems);
        Ok(handle::to_ptr(Kind::Mem, id))
    }

    /// `HixlCSServerUnregMem`.
    pub(crate) fn unreg_mem(&self, h: MemHandle) -> XRes {
        xensure!(!h.is_null(), HIXL_PARAM_INVALID, "mem_handle is NULL");
        let id = handle::decode(h, Kind::Mem);
        let r = id.and_then(|id| self.shared.regs.lock().remove(&id));
        xensure!(
            r.is_some(),
            HIXL_PARAM_INVALID,
            "mem_handle {h:p} is not registered on this server"
        );
        Ok(())
    }

    /// `HixlCSServerListen`. The backlog is accepted and not used (std's listener uses 128).
    pub(crate) fn listen(&self, _backlog: u32) -> XRes {
        if self.addr.port() == 0 {
            return Ok(()); // server_port 0: do not listen.
        }
        let mut l = self.listening.lock();
        xensure!(
            l.is_none(),
            HIXL_PARAM_INVALID,
            "the server is already listening on {}",
            self.addr
        );
        let listener = TcpListener::bind(self.addr).map_err(|e| {
            super::error::xerr(HIXL_FAILED, format!("listening on {}: {e}", self.addr))
        })?;
        let accept = listener
            .try_clone()
            .map_err(|e| super::error::xerr(HIXL_FAILED, format!("listener: {e}")))?;
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name("sim-hixl-accept".into())
            .spawn(move || accept_loop(accept, shared))
            .map_err(|e| {
                super::error::xerr(HIXL_FAILED, format!("spawning the accept thread: {e}"))
            })?;
        *l = Some(Listening { listener, thread });
        Ok(())
    }

    /// Stops listening, closes every connection and drops the registrations.
    fn shutdown(&self) {
        self.shared.stop.store(true, SeqCst);
        if let Some(l) = self.listening.lock().take() {
            // SAFETY: shutdown on our own listening socket wakes the blocked accept (EINVAL).
            unsafe { libc::shutdown(l.listener.as_raw_fd(), libc::SHUT_RDWR) };
            let _ = l.thread.join();
        }
        let conns = std::mem::take(&mut *self.shared.conns.lock());
        for (s, t) in conns {
            let _ = s.shutdown(std::net::Shutdown::Both);
            let _ = t.join();
        }
        self.shared.regs.lock().clear();
    }
}

/// `HixlCSServerDestroy`: refused for unknown handles; otherwise always succeeds (clients keep
/// what they already mapped; their list requests fail with `HIXL_NOT_CONNECTED`).
pub(crate) fn destroy(h: HixlServerHandle) -> XRes {
    xensure!(!h.is_null(), HIXL_PARAM_INVALID, "server_handle is NULL");
    let s = handle::decode(h, Kind::Server).and_then(|id| SERVERS.lock().remove(&id));
    let Some(s) = s else {
        xbail!(
            HIXL_PARAM_INVALID,
            "server_handle {h:p} is not a live server"
        );
    };
    s.shutdown();
    xdec(XCtr::Servers);
    Ok(())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                if shared.stop.load(SeqCst) {
                    break;
                }
                let Ok(s2) = s.try_clone() else { continue };
                let sh = shared.clone();
                let t = std::thread::Builder::new()
                    .name("sim-hixl-conn".into())
                    .spawn(move || serve(s, sh));
                if let Ok(t) = t {
                    let mut c = shared.conns.lock();
                    c.retain(|(_, t)| !t.is_finished());
                    c.push((s2, t));
                }
            }
            Err(_) if shared.stop.load(SeqCst) => break,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn list_reply(shared: &Shared, seq: u64) -> Buf {
    let regs: Vec<Arc<Reg>> = shared.regs.lock().values().cloned().collect();
    let mut b = Buf::default();
    b.u32(HIXL_SUCCESS).u64(seq).u32(regs.len() as u32);
    for r in &regs {
        b.u64(r.id)
            .bytes(r.tag.as_bytes())
            .i32(r.mem.kind)
            .u64(r.mem.addr as u64)
            .u64(r.mem.size as u64);
        r.backing.encode(&mut b);
    }
    b
}

/// Serves one client: hello, then list requests until the connection closes.
fn serve(mut s: TcpStream, shared: Arc<Shared>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut hello = || -> XRes<(u32, String)> {
        let f = wire::recv(&mut s)?;
        let mut c = Cur::new(&f);
        let magic = c.bytes()?;
        let version = c.u32()?;
        let req = c.u8()?;
        let _pid = c.i32()?;
        let protocol = c.i32()?;
        if magic != wire::MAGIC || version != wire::VERSION || req != wire::REQ_HELLO {
            return Ok((
                HIXL_PARAM_INVALID,
                "not an emulated HixlCS client hello".into(),
            ));
        }
        if !shared.protocols.contains(&protocol) {
            return Ok((
                HIXL_PARAM_INVALID,
                format!(
                    "the client's remote endpoint protocol {protocol} matches no endpoint of the server ({:?})",
                    shared.protocols
                ),
            ));
        }
        Ok((HIXL_SUCCESS, String::new()))
    };
    let (status, msg) = match hello() {
        Ok(x) => x,
        Err(_) => return,
    };
    let mut b = Buf::default();
    b.u32(status).i32(crate::rt::getpid()).bytes(msg.as_bytes());
    if wire::send(&mut s, &b.0).is_err() || status != HIXL_SUCCESS {
        return;
    }
    let _ = s.set_read_timeout(None);
    loop {
        let Ok(f) = wire::recv(&mut s) else { return };
        if shared.stop.load(SeqCst) {
            return;
        }
        let mut c = Cur::new(&f);
        let reply = match (c.u8(), c.u64()) {
            (Ok(wire::REQ_LIST), Ok(seq)) => list_reply(&shared, seq),
            (_, seq) => {
                let mut b = Buf::default();
                b.u32(HIXL_PARAM_INVALID).u64(seq.unwrap_or(0));
                b
            }
        };
        if wire::send(&mut s, &reply.0).is_err() {
            return;
        }
    }
}
