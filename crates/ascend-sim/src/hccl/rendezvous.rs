//! Root info and the rendezvous.
//!
//! `HcclGetRootInfo` starts (once per process) a listener on `127.0.0.1:0`, or on port 0 of
//! the IPv4 address in `HCCL_IF_IP` (HCCL's variable for the address its bootstrap uses: on
//! several emulated hosts, the host's own), and writes a 4108-byte
//! blob: magic `ASIMHCCL`, version 1, the listener's IPv4 address and port, the root's pid, a
//! 128-bit unique id and an FNV-1a checksum of the first 40 bytes; the rest is zero. Every rank
//! connects, sends one `JOIN` line (unique id, rank count, rank, pid, device, the fd number,
//! inode and buffer size of its segment memfd) and waits; when the last rank of a unique id has
//! joined, the listener answers every rank with the whole table.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hccl_sys::*;
use parking_lot::Mutex;

use super::error::{herr, HRes};

const MAGIC: [u8; 8] = *b"ASIMHCCL";

/// The decoded root info.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Root {
    pub addr: SocketAddrV4,
    pub id: u128,
}

fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in b {
        h ^= u64::from(*x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn unique_id() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    static CTR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CTR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    h.write_u64(t);
    let r = h.finish();
    (u128::from(std::process::id()) << 96)
        ^ (u128::from(t) << 32)
        ^ (u128::from(r) << 64)
        ^ u128::from(n)
}

/// Encodes a root info.
pub(crate) fn encode(addr: SocketAddrV4) -> HcclRootInfo {
    let mut b = [0u8; HCCL_ROOT_INFO_BYTES as usize];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&addr.ip().octets());
    b[16..18].copy_from_slice(&addr.port().to_le_bytes());
    b[20..24].copy_from_slice(&std::process::id().to_le_bytes());
    b[24..40].copy_from_slice(&unique_id().to_le_bytes());
    let c = fnv(&b[0..40]);
    b[40..48].copy_from_slice(&c.to_le_bytes());
    let mut r = HcclRootInfo::default();
    for (d, s) in r.internal.iter_mut().zip(b) {
        *d = s as std::os::raw::c_char;
    }
    r
}

/// Decodes a root info (`HCCL_E_PARA` for anything this emulator did not make).
pub(crate) fn decode(r: &HcclRootInfo) -> HRes<Root> {
    let b: Vec<u8> = r.internal.iter().map(|c| *c as u8).collect();
    let ok = b[0..8] == MAGIC
        && b[8..12] == 1u32.to_le_bytes()
        && b[40..48] == fnv(&b[0..40]).to_le_bytes();
    if !ok {
        return Err(herr(
            HCCL_E_PARA,
            "rootInfo is not a root info made by HcclGetRootInfo of this emulator (bad magic or checksum)",
        ));
    }
    let ip = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
    let port = u16::from_le_bytes([b[16], b[17]]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&b[24..40]);
    Ok(Root {
        addr: SocketAddrV4::new(ip, port),
        id: u128::from_le_bytes(id),
    })
}

// ---------------------------------------------------------------------------------------------
// Listener

/// One rank's entry in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub rank: u32,
    pub pid: i32,
    pub device: u32,
    pub seg_fd: i32,
    pub seg_ino: u64,
    pub buf_bytes: u64,
}

impl Member {
    fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.rank, self.pid, self.device, self.seg_fd, self.seg_ino, self.buf_bytes
        )
    }

    fn parse(words: &[&str]) -> Option<Member> {
        if words.len() != 6 {
            return None;
        }
        Some(Member {
            rank: words[0].parse().ok()?,
            pid: words[1].parse().ok()?,
            device: words[2].parse().ok()?,
            seg_fd: words[3].parse().ok()?,
            seg_ino: words[4].parse().ok()?,
            buf_bytes: words[5].parse().ok()?,
        })
    }
}

struct Group {
    n: u32,
    created: Instant,
    members: Vec<Option<(Member, TcpStream)>>,
}

static GROUPS: Mutex<Option<HashMap<u128, Group>>> = Mutex::new(None);
static LISTENER: OnceLock<Result<SocketAddrV4, String>> = OnceLock::new();

/// The address the listener binds: `HCCL_IF_IP` when set, else loopback.
fn if_ip() -> Result<Ipv4Addr, String> {
    match std::env::var("HCCL_IF_IP") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| format!("HCCL_IF_IP={v:?} is not an IPv4 address")),
        _ => Ok(Ipv4Addr::LOCALHOST),
    }
}

/// The process's rendezvous listener (started on first use).
pub(crate) fn listener() -> HRes<SocketAddrV4> {
    LISTENER
        .get_or_init(|| {
            let ip = if_ip()?;
            let l = TcpListener::bind(SocketAddrV4::new(ip, 0))
                .map_err(|e| format!("cannot listen on {ip}: {e}"))?;
            let addr = match l.local_addr() {
                Ok(SocketAddr::V4(a)) => a,
                Ok(a) => return Err(format!("unexpected listener address {a}")),
                Err(e) => return Err(format!("listener address: {e}")),
            };
            std::thread::Builder::new()
                .name("ascend-sim-hccl-rendezvous".into())
                .spawn(move || {
                    for c in l.incoming().flatten() {
                        let _ = std::thread::Builder::new()
                            .name("ascend-sim-hccl-join".into())
                            .spawn(move || serve(c));
                    }
                })
                .map_err(|e| format!("cannot start the rendezvous thread: {e}"))?;
            Ok(addr)
        })
        .clone()
        .map_err(|m| herr(HCCL_E_TCP_CONNECT, m))
}

fn reply(mut s: &TcpStream, text: &str) {
    let _ = s.write_all(text.as_bytes());
}

/// Serves one connection: reads its JOIN line and files it in its group.
fn serve(c: TcpStream) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(60)));
    let mut line = String::new();
    {
        let mut r = BufReader::new(&c);
        if r.read_line(&mut line).is_err() {
            return;
        }
    }
    let w: Vec<&str> = line.split_whitespace().collect();
    // JOIN <id> <n> <member...>
    let parsed = (|| {
        if w.len() != 9 || w[0] != "JOIN" {
            return None;
        }
        let id = u128::from_str_radix(w[1], 16).ok()?;
        let n: u32 = w[2].parse().ok()?;
        let m = Member::parse(&w[3..])?;
        Some((id, n, m))
    })();
    let Some((id, n, m)) = parsed else {
        reply(&c, "ERR 1 malformed join request\n");
        return;
    };
    let mut g = GROUPS.lock();
    let groups = g.get_or_insert_with(HashMap::new);
    groups.retain(|_, x| x.created.elapsed() < Duration::from_secs(3600));
    let grp = groups.entry(id).or_insert_with(|| Group {
        n,
        created: Instant::now(),
        members: (0..n).map(|_| None).collect(),
    });
    if grp.n != n {
        reply(
            &c,
            &format!(
                "ERR 1 nRanks {n} differs from the {} given by the ranks that joined first\n",
                grp.n
            ),
        );
        return;
    }
    if m.rank >= n {
        reply(&c, &format!("ERR 1 rank {} >= nRanks {n}\n", m.rank));
        return;
    }
    // A rank joining again (after a timeout, say) replaces its earlier entry.
    grp.members[m.rank as usize] = Some((m, c));
    if grp.members.iter().all(Option::is_some) {
        let Some(grp) = groups.remove(&id) else {
            return;
        };
        let mut table = String::from("OK\n");
        for (m, _) in grp.members.iter().flatten() {
            table.push_str(&m.line());
            table.push('\n');
        }
        for (_, s) in grp.members.iter().flatten() {
            reply(s, &table);
        }
    }
}

/// Connects to the rendezvous at `addr`, retrying until `deadline`.
fn connect(addr: SocketAddr, deadline: Instant) -> HRes<TcpStream> {
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => return Ok(s),
            Err(e) => {
                if Instant::now() >= deadline {
                    return Err(herr(
                        HCCL_E_TCP_CONNECT,
                        format!("cannot reach the root's rendezvous at {addr}: {e}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// One line of the rendezvous answer: `OK` (or `ERR code text`), then the table's lines.
fn answer_line(t: &str, n: u32, want: &mut Option<usize>, lines: &mut Vec<Member>) -> HRes {
    if want.is_none() {
        if let Some(rest) = t.strip_prefix("ERR ") {
            let (code, msg) = rest.split_once(' ').unwrap_or((rest, ""));
            return Err(herr(code.parse().unwrap_or(HCCL_E_PARA), msg.to_string()));
        }
        if t != "OK" {
            return Err(herr(
                HCCL_E_TCP_TRANSFER,
                format!("unexpected rendezvous answer `{t}`"),
            ));
        }
        *want = Some(n as usize);
    } else {
        let w: Vec<&str> = t.split_whitespace().collect();
        let m = Member::parse(&w).ok_or_else(|| {
            herr(
                HCCL_E_TCP_TRANSFER,
                format!("bad rendezvous table line `{t}`"),
            )
        })?;
        lines.push(m);
    }
    Ok(())
}

/// Joins the group of `root` as `me`; returns the table (indexed by rank) or times out.
pub(crate) fn join(root: &Root, n: u32, me: &Member, timeout: Duration) -> HRes<Vec<Member>> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::V4(root.addr);
    let s = connect(addr, deadline)?;
    let _ = s.set_nodelay(true);
    let req = format!("JOIN {:x} {n} {}\n", root.id, me.line());
    (&s).write_all(req.as_bytes()).map_err(|e| {
        herr(
            HCCL_E_TCP_TRANSFER,
            format!("sending the join request to {addr}: {e}"),
        )
    })?;
    let mut r = BufReader::new(&s);
    let mut lines = Vec::new();
    let mut want: Option<usize> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(herr(
                HCCL_E_TIMEOUT,
                format!(
                    "rank {}: not every one of the {n} ranks joined the rendezvous within {:.3} s",
                    me.rank,
                    timeout.as_secs_f64()
                ),
            ));
        }
        let _ = s.set_read_timeout(Some(left.min(Duration::from_millis(200))));
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) => {
                return Err(herr(
                    HCCL_E_TCP_TRANSFER,
                    format!("the rendezvous at {addr} closed the connection"),
                ))
            }
            Ok(_) => {
                answer_line(line.trim(), n, &mut want, &mut lines)?;
                if want == Some(lines.len()) {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // A partial line stays in `line`... which read_line appends to; retry.
                if !line.is_empty() {
                    return Err(herr(
                        HCCL_E_TCP_TRANSFER,
                        "the rendezvous answer stalled mid-line",
                    ));
                }
            }
            Err(e) => {
                return Err(herr(
                    HCCL_E_TCP_TRANSFER,
                    format!("reading the rendezvous answer: {e}"),
                ))
            }
        }
    }
    lines.sort_by_key(|m| m.rank);
    for (i, m) in lines.iter().enumerate() {
        if m.rank as usize != i {
            return Err(herr(
                HCCL_E_INTERNAL,
                "rendezvous table is not one entry per rank",
            ));
        }
    }
    Ok(lines)
}
