//! The `soak-peer` role (this binary re-executed) and the driver's handle on one.
//!
//! The peer starts an engine on `127.0.0.1:$SOAK_PORT`, creates the regions listed in
//! `$SOAK_REGIONS` (`id:bytes:kind` separated by `,`; kind `d` device HBM, `h` host DRAM, `s`
//! device HBM as two allocations mapped back to back, registered as one range of two
//! segments), fills each with the pattern of `region_key($SOAK_KEY, id)`, registers it and
//! prints `READY id:addr:len,...`. Then it answers lines on stdin:
//! `add <id> <bytes> <kind>` → `ADDED <addr> <len>`, `del <id>` → `DELETED`,
//! `sum <id> <offset> <len>` → `SUM <fnv64 hex>`. At EOF it drops everything and prints
//! `COUNTERS ok` or `COUNTERS leak <live objects>`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::time::Duration;

use ascend_fabric::{Engine, EngineOptions, Registration};
use ascend_mem::prelude::*;
use ascend_mem::{
    Addr, Device, DeviceBuffer, HostBuffer, Mapping, PhysicalMem, ReservedVa, Runtime,
};

use super::model::{fill_pattern, fnv64, region_key, Shadow};
use crate::peer::ChildProc;
use crate::Res;

/// Engine options of every soak engine: quick heartbeats.
pub(crate) fn options() -> Res<EngineOptions> {
    Ok(EngineOptions::builder()
        .task_stream_num(4)
        .heartbeat_interval(Duration::from_millis(200))
        .build()?)
}

enum Mem {
    Dev(DeviceBuffer),
    Host(HostBuffer),
    /// Two halves in one reservation (the mappings go before the reservation).
    Split {
        maps: [Mapping; 2],
        _va: ReservedVa,
    },
}

impl Mem {
    fn new(dev: &Device, eng: &Engine, bytes: usize, kind: &str) -> Res<Mem> {
        Ok(match kind {
            "d" => Mem::Dev(eng.alloc_device(bytes)?),
            "h" => Mem::Host(eng.alloc_host(bytes)?),
            "s" => {
                let half = dev.granular(bytes / 2)?;
                let va = ReservedVa::new(dev, dev.granular(bytes)?)?;
                let a = va.map(&PhysicalMem::hbm(dev, half)?, half.zero())?;
                let b = va.map(&PhysicalMem::hbm(dev, half)?, half)?;
                Mem::Split {
                    maps: [a, b],
                    _va: va,
                }
            }
            other => return Err(format!("unknown region kind {other:?}").into()),
        })
    }

    fn addr(&self) -> Addr {
        match self {
            Mem::Dev(b) => b.addr(),
            Mem::Host(b) => b.addr(),
            Mem::Split { maps, .. } => maps[0].addr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Mem::Dev(b) => b.len(),
            Mem::Host(b) => b.len(),
            Mem::Split { maps, .. } => maps[0].len() + maps[1].len(),
        }
    }

    /// Applies `f(mapping piece, offset in it, range of the caller's buffer)` over `[off, +len)`.
    fn pieces(
        &self,
        off: usize,
        len: usize,
        mut f: impl FnMut(&Mapping, usize, std::ops::Range<usize>) -> Res<()>,
    ) -> Res<()> {
        let parts: Vec<&Mapping> = match self {
            Mem::Dev(b) => vec![b.mapping()],
            Mem::Host(b) => vec![b.mapping()],
            Mem::Split { maps, .. } => maps.iter().collect(),
        };
        let (mut base, mut done) = (0usize, 0usize);
        for m in parts {
            let end = base + m.len();
            let at = off + done;
            if at < end && done < len {
                let n = (end - at).min(len - done);
                f(m, at - base, done..done + n)?;
                done += n;
            }
            base = end;
        }
        Ok(())
    }

    fn write(&self, off: usize, src: &[u8]) -> Res<()> {
        self.pieces(off, src.len(), |m, o, r| Ok(m.write_from(&src[r], o)?))
    }

    fn read(&self, off: usize, dst: &mut [u8]) -> Res<()> {
        let len = dst.len();
        self.pieces(off, len, |m, o, r| Ok(m.read_into(&mut dst[r], o)?))
    }
}

struct PeerRegion {
    /// Declared first: deregistered before the memory goes.
    _reg: Registration,
    mem: Mem,
}

fn add_region(
    dev: &Device,
    eng: &Engine,
    key: u64,
    id: u32,
    bytes: usize,
    kind: &str,
) -> Res<PeerRegion> {
    let mem = Mem::new(dev, eng, bytes, kind)?;
    let rkey = region_key(key, id);
    let mut chunk = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < mem.len() {
        let n = chunk.len().min(mem.len() - off);
        fill_pattern(rkey, off, &mut chunk[..n]);
        mem.write(off, &chunk[..n])?;
        off += n;
    }
    let reg = match &mem {
        Mem::Dev(b) => eng.register(b)?,
        Mem::Host(b) => eng.register(b)?,
        Mem::Split { .. } => eng.register_raw(mem.addr(), mem.len())?,
    };
    Ok(PeerRegion { _reg: reg, mem })
}

fn env_str(k: &str) -> Res<String> {
    std::env::var(k).map_err(|_| format!("{k} is not set").into())
}

/// The `soak-peer` role.
pub(crate) fn peer_main() -> Res<()> {
    let port: u16 = env_str("SOAK_PORT")?.parse()?;
    let key: u64 = env_str("SOAK_KEY")?.parse()?;
    let specs = env_str("SOAK_REGIONS")?;
    let rt = Runtime::emulated()?;
    let dev = rt.device(0)?;
    let eng = Engine::new(&dev, &format!("127.0.0.1:{port}"), options()?)?;
    let mut regions: BTreeMap<u32, PeerRegion> = BTreeMap::new();
    let mut listed = Vec::new();
    for s in specs.split(',').filter(|s| !s.is_empty()) {
        let f: Vec<&str> = s.split(':').collect();
        let [id, bytes, kind] = f[..] else {
            return Err(format!("bad region spec {s:?}").into());
        };
        let id: u32 = id.parse()?;
        let r = add_region(&dev, &eng, key, id, bytes.parse()?, kind)?;
        listed.push(format!("{id}:{}:{}", r.mem.addr().get(), r.mem.len()));
        regions.insert(id, r);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {}", listed.join(","))?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let reply = command(&dev, &eng, key, &mut regions, &line)
            .unwrap_or_else(|e| format!("ERR {line:?}: {e}"));
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    drop(regions);
    drop(eng);
    drop(dev);
    let c = ascend_sim::counters();
    if c.is_zero() {
        writeln!(out, "COUNTERS ok")?;
    } else {
        writeln!(out, "COUNTERS leak {c}")?;
    }
    out.flush()?;
    Ok(())
}

fn command(
    dev: &Device,
    eng: &Engine,
    key: u64,
    regions: &mut BTreeMap<u32, PeerRegion>,
    line: &str,
) -> Res<String> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| -> Res<usize> { Ok(w.get(i).ok_or("missing argument")?.parse()?) };
    match w.first().copied() {
        Some("add") => {
            let id = num(1)? as u32;
            let r = add_region(dev, eng, key, id, num(2)?, w.get(3).ok_or("missing kind")?)?;
            let reply = format!("ADDED {} {}", r.mem.addr().get(), r.mem.len());
            regions.insert(id, r);
            Ok(reply)
        }
        Some("del") => {
            regions.remove(&(num(1)? as u32)).ok_or("no such region")?;
            Ok("DELETED".into())
        }
        Some("sum") => {
            let r = regions.get(&(num(1)? as u32)).ok_or("no such region")?;
            let mut buf = vec![0u8; num(3)?];
            r.mem.read(num(2)?, &mut buf)?;
            Ok(format!("SUM {:x}", fnv64(&buf)))
        }
        _ => Err("unknown command".into()),
    }
}

/// A region of a peer as the driver sees it.
pub(crate) struct RemoteRegion {
    pub(crate) addr: u64,
    pub(crate) shadow: Shadow,
    /// Two segments (kind `s`), the second starting at half the length.
    pub(crate) split: bool,
}

/// A region to create: id, bytes, kind (`d`, `h`, `s`).
pub(crate) type RegionSpec = (u32, usize, &'static str);

/// The driver's handle on one peer process (one incarnation).
pub(crate) struct SoakPeer {
    proc: ChildProc,
    pub(crate) addr: String,
    port: u16,
    key: u64,
    pub(crate) regions: BTreeMap<u32, RemoteRegion>,
}

/// A peer process started and not yet ready.
pub(crate) struct Starting {
    proc: ChildProc,
    port: u16,
    key: u64,
    specs: Vec<RegionSpec>,
}

impl Starting {
    /// Waits for the peer's `READY` line and reads its regions.
    pub(crate) fn ready(mut self) -> Res<SoakPeer> {
        let ready = self.proc.expect("READY")?;
        let mut regions = BTreeMap::new();
        for r in ready.split(',').filter(|s| !s.is_empty()) {
            let f: Vec<u64> = r.split(':').map(str::parse).collect::<Result<_, _>>()?;
            let [id, addr, len] = f[..] else {
                return Err(format!("bad READY entry {r:?}").into());
            };
            let id = id as u32;
            let shadow = Shadow::pattern(region_key(self.key, id), len as usize);
            let split = self.specs.iter().any(|s| s.0 == id && s.2 == "s");
            regions.insert(
                id,
                RemoteRegion {
                    addr,
                    shadow,
                    split,
                },
            );
        }
        Ok(SoakPeer {
            proc: self.proc,
            addr: format!("127.0.0.1:{}", self.port),
            port: self.port,
            key: self.key,
            regions,
        })
    }
}

impl SoakPeer {
    /// Starts a peer on `port` without waiting for it.
    pub(crate) fn spawn(port: u16, key: u64, specs: &[RegionSpec]) -> Res<Starting> {
        let list: Vec<String> = specs
            .iter()
            .map(|(i, b, k)| format!("{i}:{b}:{k}"))
            .collect();
        let proc = ChildProc::spawn(
            "soak-peer",
            &[
                ("SOAK_PORT", port.to_string()),
                ("SOAK_KEY", key.to_string()),
                ("SOAK_REGIONS", list.join(",")),
            ],
        )?;
        Ok(Starting {
            proc,
            port,
            key,
            specs: specs.to_vec(),
        })
    }

    /// The peer's engine address.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Asks the peer to create and register a region (offered at the next connect).
    pub(crate) fn add(&mut self, (id, bytes, kind): RegionSpec) -> Res<()> {
        let r = self
            .proc
            .ask(&format!("add {id} {bytes} {kind}"), "ADDED")?;
        let f: Vec<u64> = r
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let [addr, len] = f[..] else {
            return Err(format!("bad ADDED reply {r:?}").into());
        };
        let shadow = Shadow::pattern(region_key(self.key, id), len as usize);
        let split = kind == "s";
        self.regions.insert(
            id,
            RemoteRegion {
                addr,
                shadow,
                split,
            },
        );
        Ok(())
    }

    /// Asks the peer to drop a region (still offered until the next connect).
    pub(crate) fn del(&mut self, id: u32) -> Res<()> {
        self.proc.ask(&format!("del {id}"), "DELETED")?;
        self.regions.remove(&id);
        Ok(())
    }

    /// The peer's checksum of `[off, +len)` of region `id`.
    pub(crate) fn sum(&mut self, id: u32, off: usize, len: usize) -> Res<u64> {
        let r = self.proc.ask(&format!("sum {id} {off} {len}"), "SUM")?;
        Ok(u64::from_str_radix(&r, 16)?)
    }

    /// SIGKILL.
    pub(crate) fn kill(&mut self) -> Res<()> {
        self.proc.kill()
    }

    /// Ends the peer cleanly; returns its counters report (`ok` or `leak ...`).
    pub(crate) fn finish(mut self) -> Res<String> {
        self.proc.close_stdin();
        let c = self.proc.expect("COUNTERS")?;
        self.proc.wait_success()?;
        Ok(c)
    }
}
