//! Clients: the connection to a server, the imported memory list, local registrations, and a
//! worker thread that runs put/get batches in submission order.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{c_char, CString};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hixl_sys::*;
use parking_lot::{Condvar, Mutex};

use super::counters::{xdec, xinc, XCtr};
use super::error::{xerr, XRes};
use super::handle::{self, Kind};
use super::mem::{check_comm_mem, comm_mem, Checked, Entry, Remote};
use super::server::{check_protocol, read_ip};
use super::testing;
use super::wire::{self, Buf, Cur};
use crate::vmm::state::{Class, MEM};

/// At most this many async batches may be outstanding (submitted and not yet reported
/// finished by a query) per client, as the API documents (4K).
pub(crate) const MAX_OUTSTANDING: usize = 4096;
/// At most this many descriptors per batch.
pub(crate) const MAX_DESCS: u32 = 1 << 20;

struct LocalReg {
    mem: Checked,
}

impl Drop for LocalReg {
    fn drop(&mut self) {
        xdec(XCtr::ClientMems);
    }
}

/// The arrays handed out by the last `HixlCSClientGetRemoteMem`, owned by the library.
struct OwnedList {
    mems: Vec<CommMem>,
    _tags: Vec<CString>,
    ptrs: Vec<*mut c_char>,
}

// SAFETY: the raw pointers point into `mems`' and `_tags`' own heap buffers, which move with
// the value; nothing is tied to a thread.
unsafe impl Send for OwnedList {}

struct Desc {
    remote: Arc<Remote>,
    raddr: u64,
    local: usize,
    len: usize,
}

enum JState {
    Waiting,
    Running,
    Done(Result<(), String>),
    Cancelled,
}

struct Job {
    put: bool,
    descs: Vec<Desc>,
    deadline: Instant,
    state: Mutex<JState>,
    cv: Condvar,
}

impl Job {
    fn finish(&self, s: JState) {
        *self.state.lock() = s;
        self.cv.notify_all();
    }

    /// Whether the job may still touch memory (queued before its deadline, or running).
    fn in_flight(&self) -> bool {
        match *self.state.lock() {
            JState::Running => true,
            JState::Waiting => Instant::now() < self.deadline,
            _ => false,
        }
    }
}

#[derive(Default)]
struct WorkerShared {
    queue: Mutex<VecDeque<Arc<Job>>>,
    cv: Condvar,
    stop: AtomicBool,
}

struct Conn {
    stream: TcpStream,
    pid: i32,
    /// Sequence number of the last list request.
    seq: u64,
}

pub(crate) struct Client {
    server: SocketAddr,
    protocol: CommProtocol,
    connected: AtomicBool,
    conn: Mutex<Option<Conn>>,
    remotes: Mutex<BTreeMap<u64, Arc<Remote>>>,
    regs: Mutex<BTreeMap<u64, LocalReg>>,
    list_out: Mutex<Option<OwnedList>>,
    jobs: Mutex<BTreeMap<u64, Arc<Job>>>,
    worker: Arc<WorkerShared>,
    worker_thread: Mutex<Option<JoinHandle<()>>>,
}

static CLIENTS: Mutex<BTreeMap<u64, Arc<Client>>> = Mutex::new(BTreeMap::new());

pub(crate) fn lookup(h: HixlClientHandle) -> XRes<Arc<Client>> {
    xensure!(!h.is_null(), HIXL_PARAM_INVALID, "client_handle is NULL");
    handle::decode(h, Kind::Client)
        .and_then(|id| CLIENTS.lock().get(&id).cloned())
        .ok_or_else(|| {
            xerr(
                HIXL_PARAM_INVALID,
                format!("client_handle {h:p} is not a live client"),
            )
        })
}

fn timeout_of(ms: u32, what: &str) -> XRes<Duration> {
    xensure!(ms > 0, HIXL_PARAM_INVALID, "{what} is 0");
    Ok(Duration::from_millis(u64::from(ms)))
}

/// `HixlCSClientCreate`.
///
/// # Safety
/// Pointers null or valid per the C contract.
pub(crate) unsafe fn create(
    desc: *const HixlClientDesc,
    config: *const HixlClientConfig,
) -> XRes<HixlClientHandle> {
    xensure!(!desc.is_null(), HIXL_PARAM_INVALID, "client_desc is NULL");
    // SAFETY: non-null, readable per the C contract.
    let d = unsafe { desc.read_unaligned() };
    let _ = config; // NULL or a config whose global_resource_config is ignored.
    xensure!(
        !d.local_endpoint.is_null(),
        HIXL_PARAM_INVALID,
        "client_desc->local_endpoint is NULL"
    );
    xensure!(
        !d.remote_endpoint.is_null(),
        HIXL_PARAM_INVALID,
        "client_desc->remote_endpoint is NULL"
    );
    // SAFETY: non-null, readable per the C contract.
    let (l, r) = unsafe {
        (
            d.local_endpoint.read_unaligned(),
            d.remote_endpoint.read_unaligned(),
        )
    };
    check_protocol(l.protocol, "client_desc->local_endpoint")?;
    check_protocol(r.protocol, "client_desc->remote_endpoint")?;
    xensure!(
        l.protocol == r.protocol,
        HIXL_PARAM_INVALID,
        "local endpoint protocol {} differs from remote endpoint protocol {}",
        l.protocol,
        r.protocol
    );
    xensure!(
        (1..=65535).contains(&d.server_port),
        HIXL_PARAM_INVALID,
        "client_desc->server_port {} is not in 1..=65535",
        d.server_port
    );
    // SAFETY: NUL-terminated per the C contract.
    let ip = unsafe { read_ip(d.server_ip, "client_desc->server_ip") }?;
    let worker = Arc::new(WorkerShared::default());
    let w = worker.clone();
    let thread = std::thread::Builder::new()
        .name("sim-hixl-client".into())
        .spawn(move || work(w))
        .map_err(|e| xerr(HIXL_FAILED, format!("spawning the client worker: {e}")))?;
    let c = Arc::new(Client {
        server: SocketAddr::new(ip, d.server_port as u16),
        protocol: r.protocol,
        connected: AtomicBool::new(false),
        conn: Mutex::new(None),
        remotes: Mutex::new(BTreeMap::new()),
        regs: Mutex::new(BTreeMap::new()),
        list_out: Mutex::new(None),
        jobs: Mutex::new(BTreeMap::new()),
        worker,
        worker_thread: Mutex::new(Some(thread)),
    });
    let id = handle::new_id();
    CLIENTS.lock().insert(id, c);
    xinc(XCtr::Clients);
    Ok(handle::to_ptr(Kind::Client, id))
}

/// `HixlCSClientDestroy`: refused with `HIXL_FAILED` while async batches are in flight (queued
/// before their deadline, or running); finished but unqueried ones are dropped.
pub(crate) fn destroy(h: HixlClientHandle) -> XRes {
    xensure!(!h.is_null(), HIXL_PARAM_INVALID, "client_handle is NULL");
    let c = {
        let mut clients = CLIENTS.lock();
        let id = handle::decode(h, Kind::Client).filter(|id| clients.contains_key(id));
        let Some(id) = id else {
            xbail!(
                HIXL_PARAM_INVALID,
                "client_handle {h:p} is not a live client"
            );
        };
        let busy = clients[&id]
            .jobs
            .lock()
            .values()
            .filter(|j| j.in_flight())
            .count();
        xensure!(
            busy == 0,
            HIXL_FAILED,
            "{busy} async operation(s) still in flight; query them until they finish, then destroy"
        );
        clients.remove(&id).expect("checked above")
    };
    // Set under the queue's lock, which the worker holds from its check of `stop` until it
    // waits: otherwise the store and the notify could both fall between the two, and the
    // worker would wait for ever (and this join with it).
    {
        let _q = c.worker.queue.lock();
        c.worker.stop.store(true, SeqCst);
    }
    c.worker.cv.notify_all();
    if let Some(t) = c.worker_thread.lock().take() {
        let _ = t.join();
    }
    for j in c.worker.queue.lock().drain(..) {
        j.finish(JState::Cancelled);
    }
    let jobs = std::mem::take(&mut *c.jobs.lock());
    for _ in jobs.values() {
        xdec(XCtr::Ops);
    }
    if let Some(conn) = c.conn.lock().take() {
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
    }
    c.connected.store(false, SeqCst);
    c.remotes.lock().clear();
    c.regs.lock().clear();
    *c.list_out.lock() = None;
    xdec(XCtr::Clients);
    Ok(())
}

/// Asks for the list. Requests carry a sequence number and replies echo it, so a reply that
/// arrives after its request timed out is skipped by the next request instead of being taken
/// for its answer.
fn fetch_list(conn: &mut Conn, timeout: Duration) -> XRes<Vec<Entry>> {
    let _ = conn.stream.set_read_timeout(Some(timeout));
    conn.seq += 1;
    let seq = conn.seq;
    let res = (|| {
        let mut b = Buf::default();
        b.u8(wire::REQ_LIST).u64(seq);
        wire::send(&mut conn.stream, &b.0)?;
        loop {
            let f = wire::recv(&mut conn.stream)?;
            let mut c = Cur::new(&f);
            let status = c.u32()?;
            if c.u64()? != seq {
                continue; // the late answer to an earlier, timed-out request
            }
            xensure!(
                status == HIXL_SUCCESS,
                status,
                "the server refused the list request"
            );
            let n = c.u32()?;
            let mut v = Vec::with_capacity(n.min(4096) as usize);
            for _ in 0..n {
                v.push(Entry::decode(&mut c)?);
            }
            return Ok(v);
        }
    })();
    let _ = conn.stream.set_read_timeout(None);
    res
}

impl Client {
    /// Fetches the server's list and imports blocks not seen before; drops blocks the server
    /// no longer lists.
    fn refresh(&self, conn: &mut Conn, timeout: Duration) -> XRes {
        let entries = fetch_list(conn, timeout)?;
        let old = self.remotes.lock().clone();
        let mut new = BTreeMap::new();
        for e in entries {
            let r = match old.get(&e.id) {
                Some(r) => r.clone(),
                None => Arc::new(Remote::import(e, conn.pid)?),
            };
            new.insert(r.id, r);
        }
        *self.remotes.lock() = new;
        Ok(())
    }

    /// `HixlCSClientConnect`: retries a refused connection until the timeout (so the server may
    /// start listening later), then exchanges hello and prefetches the memory list.
    pub(crate) fn connect(&self, timeout_ms: u32) -> XRes {
        let timeout = timeout_of(timeout_ms, "timeout_ms")?;
        let deadline = Instant::now() + timeout;
        let mut slot = self.conn.lock();
        xensure!(
            slot.is_none(),
            HIXL_ALREADY_CONNECTED,
            "the client is already connected to {}",
            self.server
        );
        let mut stream = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            xensure!(
                !left.is_zero(),
                HIXL_TIMEOUT,
                "no server accepted a connection on {} within {timeout_ms} ms",
                self.server
            );
            match TcpStream::connect_timeout(&self.server, left.min(Duration::from_millis(200))) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(left.min(Duration::from_millis(10))),
            }
        };
        let _ = stream.set_nodelay(true);
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let _ = stream.set_read_timeout(Some(left));
        let mut b = Buf::default();
        b.bytes(&wire::MAGIC)
            .u32(wire::VERSION)
            .u8(wire::REQ_HELLO)
            .i32(crate::rt::getpid())
            .i32(self.protocol);
        wire::send(&mut stream, &b.0)?;
        let f = wire::recv(&mut stream)?;
        let mut c = Cur::new(&f);
        let status = c.u32()?;
        let pid = c.i32()?;
        let msg = String::from_utf8_lossy(c.bytes()?).into_owned();
        xensure!(
            status == HIXL_SUCCESS,
            status,
            "the server on {} refused the connection: {msg}",
            self.server
        );
        let mut conn = Conn {
            stream,
            pid,
            seq: 0,
        };
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.refresh(&mut conn, left)?;
        *slot = Some(conn);
        self.connected.store(true, SeqCst);
        Ok(())
    }

    /// `HixlCSClientGetRemoteMem`: asks the server for its current list, then hands out
    /// arrays owned by the library until the next call (or destroy).
    ///
    /// # Safety
    /// Out-pointers null or writable per the C contract.
    pub(crate) unsafe fn get_remote_mem(
        &self,
        mems: *mut *mut CommMem,
        tags: *mut *mut *mut c_char,
        num: *mut u32,
        timeout_ms: u32,
    ) -> XRes {
        xensure!(
            !mems.is_null(),
            HIXL_PARAM_INVALID,
            "remote_mem_list is NULL"
        );
        xensure!(!tags.is_null(), HIXL_PARAM_INVALID, "mem_tag_list is NULL");
        xensure!(!num.is_null(), HIXL_PARAM_INVALID, "list_num is NULL");
        let timeout = timeout_of(timeout_ms, "timeout_ms")?;
        {
            let mut slot = self.conn.lock();
            let Some(conn) = slot.as_mut() else {
                xbail!(
                    HIXL_NOT_CONNECTED,
                    "the client is not connected (HixlCSClientConnect)"
                );
            };
            self.refresh(conn, timeout)?;
        }
        let remotes: Vec<Arc<Remote>> = self.remotes.lock().values().cloned().collect();
        let mems_v: Vec<CommMem> = remotes.iter().map(|r| comm_mem(r)).collect();
        let tags_v: Vec<CString> = remotes
            .iter()
            .map(|r| CString::new(r.tag.replace('\0', "")).unwrap_or_default())
            .collect();
        let mut list = OwnedList {
            mems: mems_v,
            ptrs: tags_v.iter().map(|t| t.as_ptr().cast_mut()).collect(),
            _tags: tags_v,
        };
        let n = list.mems.len() as u32;
        let (mp, tp) = if n == 0 {
            (std::ptr::null_mut(), std::ptr::null_mut())
        } else {
            (list.mems.as_mut_ptr(), list.ptrs.as_mut_ptr())
        };
        *self.list_out.lock() = Some(list);
        // SAFETY: non-null, writable per the C contract; the arrays live in `list_out` (their
        // heap buffers do not move when the value does) until the next call or destroy.
        unsafe {
            mems.write_unaligned(mp);
            tags.write_unaligned(tp);
            num.write_unaligned(n);
        }
        Ok(())
    }

    /// `HixlCSClientRegMem` (a NULL tag is allowed on the client side).
    ///
    /// # Safety
    /// Pointers null or valid per the C contract.
    pub(crate) unsafe fn reg_mem(&self, mem: *const CommMem) -> XRes<MemHandle> {
        // SAFETY: per the C contract.
        let m = unsafe { check_comm_mem(mem) }?;
        let mut regs = self.regs.lock();
        for r in regs.values() {
            xensure!(
                m.addr + m.size <= r.mem.addr || r.mem.addr + r.mem.size <= m.addr,
                HIXL_PARAM_INVALID,
                "mem [{:#x}, +{}) overlaps memory [{:#x}, +{}) already registered with this client",
                m.addr,
                m.size,
                r.mem.addr,
                r.mem.size
            );
        }
        let id = handle::new_id();
        regs.insert(id, LocalReg { mem: m });
        xinc(XCtr::ClientMems);
        Ok(handle::to_ptr(Kind::Mem, id))
    }

    /// `HixlCSClientUnregMem`.
    pub(crate) fn unreg_mem(&self, h: MemHandle) -> XRes {
        xensure!(!h.is_null(), HIXL_PARAM_INVALID, "mem_handle is NULL");
        let r = handle::decode(h, Kind::Mem).and_then(|id| self.regs.lock().remove(&id));
        xensure!(
            r.is_some(),
            HIXL_PARAM_INVALID,
            "mem_handle {h:p} is not registered with this client"
        );
        Ok(())
    }

    /// Checks a batch: connected, a non-empty list, every descriptor non-empty, its remote
    /// range inside one block of the server's list and its local range inside memory
    /// registered with this client.
    ///
    /// # Safety
    /// `list` null or readable for `num` descriptors.
    unsafe fn prepare(&self, num: u32, list: *const HixlOneSideOpDesc) -> XRes<Vec<Desc>> {
        xensure!(
            self.connected.load(SeqCst),
            HIXL_NOT_CONNECTED,
            "the client is not connected (HixlCSClientConnect)"
        );
        xensure!(num > 0, HIXL_PARAM_INVALID, "list_num is 0");
        xensure!(
            num <= MAX_DESCS,
            HIXL_PARAM_INVALID,
            "list_num {num} is over the limit {MAX_DESCS}"
        );
        xensure!(!list.is_null(), HIXL_PARAM_INVALID, "desc_list is NULL");
        let remotes: Vec<Arc<Remote>> = self.remotes.lock().values().cloned().collect();
        let regs: Vec<Checked> = self.regs.lock().values().map(|r| r.mem).collect();
        let mut out = Vec::with_capacity(num as usize);
        for i in 0..num as usize {
            // SAFETY: readable for `num` entries per the caller's contract.
            let d = unsafe { list.add(i).read_unaligned() };
            xensure!(d.len > 0, HIXL_PARAM_INVALID, "desc_list[{i}].len is 0");
            xensure!(
                !d.remote_buf.is_null(),
                HIXL_PARAM_INVALID,
                "desc_list[{i}].remote_buf is NULL"
            );
            xensure!(
                !d.local_buf.is_null(),
                HIXL_PARAM_INVALID,
                "desc_list[{i}].local_buf is NULL"
            );
            let raddr = d.remote_buf as usize as u64;
            let Some(remote) = remotes.iter().find(|r| r.contains(raddr, d.len)) else {
                xbail!(
                    HIXL_PARAM_INVALID,
                    "desc_list[{i}]: remote [{raddr:#x}, +{}) lies in no block of the server's memory list",
                    d.len
                );
            };
            let local = d.local_buf as usize;
            let len = d.len as usize;
            let inside = regs.iter().any(|m| {
                local >= m.addr && local.checked_add(len).is_some_and(|e| e <= m.addr + m.size)
            });
            xensure!(
                inside,
                HIXL_PARAM_INVALID,
                "desc_list[{i}]: local [{local:#x}, +{len}) is not inside memory registered with this client (HixlCSClientRegMem)"
            );
            out.push(Desc {
                remote: remote.clone(),
                raddr,
                local,
                len,
            });
        }
        Ok(out)
    }

    fn submit(&self, put: bool, descs: Vec<Desc>, deadline: Instant) -> Arc<Job> {
        let job = Arc::new(Job {
            put,
            descs,
            deadline,
            state: Mutex::new(JState::Waiting),
            cv: Condvar::new(),
        });
        self.worker.queue.lock().push_back(job.clone());
        self.worker.cv.notify_one();
        job
    }

    /// The sync batch calls: wait up to the timeout; a batch not started by then is dropped
    /// (`HIXL_TIMEOUT`); a failed copy gives `HIXL_FAILED`.
    ///
    /// # Safety
    /// As [`Client::prepare`].
    pub(crate) unsafe fn batch_sync(
        &self,
        put: bool,
        num: u32,
        list: *const HixlOneSideOpDesc,
        timeout_ms: u32,
    ) -> XRes {
        // SAFETY: forwarded.
        let descs = unsafe { self.prepare(num, list) }?;
        let timeout = timeout_of(timeout_ms, "timeout_ms")?;
        let deadline = Instant::now() + timeout;
        let job = self.submit(put, descs, deadline);
        let mut st = job.state.lock();
        loop {
            match &*st {
                JState::Done(Ok(())) => return Ok(()),
                JState::Done(Err(m)) => xbail!(HIXL_FAILED, "{m}"),
                JState::Cancelled => xbail!(
                    HIXL_TIMEOUT,
                    "the batch did not start within {timeout_ms} ms"
                ),
                JState::Waiting if Instant::now() >= deadline => {
                    *st = JState::Cancelled;
                }
                JState::Waiting => {
                    job.cv.wait_until(&mut st, deadline);
                }
                JState::Running => job.cv.wait(&mut st),
            }
        }
    }

    /// The async batch calls.
    ///
    /// # Safety
    /// As [`Client::prepare`].
    pub(crate) unsafe fn batch_async(
        &self,
        put: bool,
        num: u32,
        list: *const HixlOneSideOpDesc,
    ) -> XRes<CompleteHandle> {
        // SAFETY: forwarded.
        let descs = unsafe { self.prepare(num, list) }?;
        let mut jobs = self.jobs.lock();
        xensure!(
            jobs.len() < MAX_OUTSTANDING,
            HIXL_RESOURCE_EXHAUSTED,
            "{} async batches are outstanding (limit {MAX_OUTSTANDING}); query some first",
            jobs.len()
        );
        let job = self.submit(put, descs, Instant::now() + super::testing::async_timeout());
        let id = handle::new_id();
        jobs.insert(id, job);
        xinc(XCtr::Ops);
        Ok(handle::to_ptr(Kind::Complete, id))
    }

    /// `HixlCSClientQueryCompleteStatus`: a finished batch (COMPLETED, FAILED, TIMEOUT) is
    /// forgotten once reported; querying its handle again is `HIXL_PARAM_INVALID`.
    pub(crate) fn query(&self, h: CompleteHandle) -> XRes<HixlCompleteStatus> {
        xensure!(!h.is_null(), HIXL_PARAM_INVALID, "complete_handle is NULL");
        let mut jobs = self.jobs.lock();
        let id = handle::decode(h, Kind::Complete).filter(|id| jobs.contains_key(id));
        let Some(id) = id else {
            xbail!(
                HIXL_PARAM_INVALID,
                "complete_handle {h:p} is not an outstanding request of this client"
            );
        };
        let status = {
            let mut st = jobs[&id].state.lock();
            match &*st {
                JState::Waiting if Instant::now() >= jobs[&id].deadline => {
                    *st = JState::Cancelled;
                    HIXL_COMPLETE_STATUS_TIMEOUT
                }
                JState::Waiting | JState::Running => HIXL_COMPLETE_STATUS_WAITING,
                JState::Done(Ok(())) => HIXL_COMPLETE_STATUS_COMPLETED,
                JState::Done(Err(m)) => {
                    super::error::fail(
                        "HixlCSClientQueryCompleteStatus",
                        &xerr(HIXL_FAILED, format!("the batch failed: {m}")),
                    );
                    HIXL_COMPLETE_STATUS_FAILED
                }
                JState::Cancelled => HIXL_COMPLETE_STATUS_TIMEOUT,
            }
        };
        if status != HIXL_COMPLETE_STATUS_WAITING {
            jobs.remove(&id);
            xdec(XCtr::Ops);
        }
        Ok(status)
    }
}

/// Runs a batch: every local range is checked again (still live, device-accessible emulated
/// memory) under the address table's read lock, which also keeps it mapped during the copy.
fn execute(job: &Job) -> Result<(), String> {
    let mem = MEM.read();
    for (i, d) in job.descs.iter().enumerate() {
        let class = mem
            .classify(d.local, d.len, !job.put, "local_buf")
            .map_err(|e| format!("desc_list[{i}]: {}", e.msg))?;
        if matches!(class, Class::Host) {
            return Err(format!(
                "desc_list[{i}]: local [{:#x}, +{}) is no longer emulated memory (freed?)",
                d.local, d.len
            ));
        }
        d.remote
            .copy(job.put, d.raddr, d.local, d.len)
            .map_err(|e| format!("desc_list[{i}]: {e}"))?;
    }
    Ok(())
}

fn work(w: Arc<WorkerShared>) {
    loop {
        let job = {
            let mut q = w.queue.lock();
            loop {
                if w.stop.load(SeqCst) {
                    return;
                }
                if let Some(j) = q.pop_front() {
                    break j;
                }
                w.cv.wait(&mut q);
            }
        };
        while testing::wait_released(Duration::from_millis(5)) {
            if w.stop.load(SeqCst) {
                job.finish(JState::Cancelled);
                return;
            }
            if matches!(*job.state.lock(), JState::Cancelled) {
                break;
            }
        }
        {
            let mut st = job.state.lock();
            if !matches!(*st, JState::Waiting) {
                continue;
            }
            if Instant::now() >= job.deadline {
                *st = JState::Cancelled;
                job.cv.notify_all();
                continue;
            }
            *st = JState::Running;
        }
        let r = execute(&job);
        job.finish(JState::Done(r));
    }
}
