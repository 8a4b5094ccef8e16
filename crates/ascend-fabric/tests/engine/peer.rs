//! The "peer" child role of the multi-process engine tests (an engine that registers known
//! data and checks what others wrote into it) and the memory it registers.

use ascend_fabric::Addr;
use ascend_fabric::{Engine, Registration};
use ascend_mem::prelude::*;
use ascend_mem::{Device, Mapping, PhysicalMem, ReservedVa};
use ascend_testkit::role::read_stdin_line;

use crate::util::{pattern, test_options};

/// Env var carrying the engine address of a child.
pub const ADDR_VAR: &str = "FABRIC_TEST_ADDR";
/// Env var carrying the peer address a child connects to.
pub const PEER_VAR: &str = "FABRIC_TEST_PEER";

/// Size of each region the peer registers.
pub const REGION: usize = 4 << 20;
pub const MIB2: usize = 2 << 20;

/// Two HBM allocations mapped back to back in one reservation: foreign VMM memory whose
/// registration has two blocks (ops across the middle span two segments).
pub struct Split {
    pub map_a: Mapping,
    pub map_b: Mapping,
    pub va: ReservedVa,
}

impl Split {
    pub fn new(dev: &Device) -> Split {
        let half = dev.granular(MIB2).unwrap();
        let va = ReservedVa::new(dev, dev.granular(REGION).unwrap()).unwrap();
        let a = PhysicalMem::hbm(dev, half).unwrap();
        let b = PhysicalMem::hbm(dev, half).unwrap();
        let map_a = va.map(&a, half.zero()).unwrap();
        let map_b = va.map(&b, half).unwrap();
        Split { map_a, map_b, va }
    }

    pub fn addr(&self) -> Addr {
        self.va.addr()
    }

    pub fn write(&self, off: usize, data: &[u8]) {
        let mut done = 0;
        while done < data.len() {
            let at = off + done;
            let (m, o) = if at < MIB2 {
                (&self.map_a, at)
            } else {
                (&self.map_b, at - MIB2)
            };
            let n = (m.len() - o).min(data.len() - done);
            m.write_from(&data[done..done + n], o).unwrap();
            done += n;
        }
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let at = off + done;
            let (m, o) = if at < MIB2 {
                (&self.map_a, at)
            } else {
                (&self.map_b, at - MIB2)
            };
            let n = (m.len() - o).min(len - done);
            m.read_into(&mut out[done..done + n], o).unwrap();
            done += n;
        }
        out
    }
}

/// Three registered regions of one engine: device HBM, host DRAM, and a split foreign range.
pub struct Regions {
    pub dev: ascend_mem::DeviceBuffer,
    pub host: ascend_mem::HostBuffer,
    pub split: Split,
    /// The three registrations, held for the regions' lifetime.
    _regs: Vec<Registration>,
}

impl Regions {
    pub fn new(engine: &Engine) -> Regions {
        let dev = engine.alloc_device(REGION).unwrap();
        let host = engine.alloc_host(REGION).unwrap();
        let split = Split::new(engine.device());
        let regs = vec![
            engine.register(&dev).unwrap(),
            engine.register(&host).unwrap(),
            engine.register_raw(split.addr(), REGION).unwrap(),
        ];
        Regions {
            dev,
            host,
            split,
            _regs: regs,
        }
    }

    pub fn addr(&self, which: &str) -> Addr {
        match which {
            "dev" => self.dev.addr(),
            "host" => self.host.addr(),
            "split" => self.split.addr(),
            w => panic!("no region {w}"),
        }
    }

    pub fn write(&self, which: &str, off: usize, data: &[u8]) {
        match which {
            "dev" => self.dev.write_from(data, off).unwrap(),
            "host" => self.host.write_from(data, off).unwrap(),
            _ => self.split.write(off, data),
        }
    }

    pub fn read(&self, which: &str, off: usize, len: usize) -> Vec<u8> {
        match which {
            "dev" => {
                let mut v = vec![0; len];
                self.dev.read_into(&mut v, off).unwrap();
                v
            }
            "host" => {
                let mut v = vec![0; len];
                self.host.read_into(&mut v, off).unwrap();
                v
            }
            _ => self.split.read(off, len),
        }
    }

    /// Seeds: dev 1, host 2, split 3.
    pub fn fill_initial(&self) {
        for (w, seed) in [("dev", 1u8), ("host", 2), ("split", 3)] {
            self.write(w, 0, &pattern(seed, REGION));
        }
    }
}

/// The peer role: an engine at `$FABRIC_TEST_ADDR` with three regions filled with known
/// patterns. Prints `READY dev=.. host=.. split=..`, then answers stdin commands:
/// `CHECK <region> <off> <len> <seed>` → `OK` / `BAD <index>`; `STATS` → `SESSIONS <n>`;
/// EOF or `QUIT` ends it (asserting the emulator's counters are back to zero).
pub fn peer_role(rt: &ascend_mem::Runtime) {
    let dev = rt.device(0).unwrap();
    let addr = std::env::var(ADDR_VAR).expect("FABRIC_TEST_ADDR");
    let engine = Engine::new(&dev, &addr, test_options(4)).expect("peer engine");
    let regions = Regions::new(&engine);
    regions.fill_initial();
    println!(
        "READY dev={:#x} host={:#x} split={:#x}",
        regions.addr("dev"),
        regions.addr("host"),
        regions.addr("split")
    );
    while let Some(line) = read_stdin_line() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["CHECK", region, off, len, seed] => {
                let (off, len, seed): (usize, usize, u8) = (
                    off.parse().unwrap(),
                    len.parse().unwrap(),
                    seed.parse().unwrap(),
                );
                let got = regions.read(region, off, len);
                let want = pattern(seed, len);
                match got.iter().zip(&want).position(|(a, b)| a != b) {
                    None => println!("OK"),
                    Some(i) => println!("BAD {i}"),
                }
            }
            ["STATS"] => println!("SESSIONS {}", engine.sessions().len()),
            ["QUIT"] => break,
            _ => println!("BAD command"),
        }
    }
    drop(regions);
    drop(engine);
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "peer leaked: {c}");
    println!("RESULT ok");
}

/// Parses `READY dev=0x.. host=0x.. split=0x..`.
pub fn parse_ready(s: &str) -> std::collections::HashMap<String, Addr> {
    s.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                Addr::new(u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()),
            )
        })
        .collect()
}
