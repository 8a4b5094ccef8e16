//! VMM round trip: granularity, reserve, allocate HBM, map, write from the host, copy device
//! to device, read back, verify, tear down.
//!
//! Runs on whatever `Runtime::from_env_or_emulator()` picks: CANN when installed, otherwise the emulator.
//! `ASCEND_ACL_LIB=target/debug/libascend_sim.so` takes the dlopen path to the emulator;
//! `ASCEND_MEM_BACKEND=sim|cann` forces a backend. Exits 0 only when the bytes verify.

mod common;

use std::process::ExitCode;

use ascend_mem::prelude::*;
use ascend_mem::{Backend, MemSpec, PhysicalMem, ReservedVa, Runtime, Stream};

fn run() -> ascend_mem::Result<bool> {
    let rt = Runtime::from_env_or_emulator()?;
    let how = match rt.backend() {
        Backend::Cann { .. } => "real CANN (dlopen)",
        Backend::EmulatorInProcess => "emulator (in-process)",
        Backend::EmulatorDl { .. } => "emulator (dlopen path)",
        _ => "other",
    };
    println!("backend: {} [{how}]", rt.backend());
    println!("devices: {}", rt.device_count()?);
    let dev = rt.device(0)?;

    let granule = dev.granularity(MemSpec::DEVICE_HBM)?;
    println!("1. granularity of device HBM: {granule:#x} bytes");

    let size = dev.round_up(3 << 20)?; // 3 MiB rounded up to whole granules
    let va = ReservedVa::new(&dev, size.checked_mul(2).expect("small"))?;
    println!(
        "2. reserved {:#x} bytes of VA at {:p}",
        va.len(),
        va.as_raw()
    );

    let a = PhysicalMem::hbm(&dev, size)?;
    let b = PhysicalMem::hbm(&dev, size)?;
    println!("3. allocated two HBM blocks of {size} bytes");

    let map_a = va.map(&a, size.zero())?;
    let map_b = va.map(&b, size)?;
    println!(
        "4. mapped them at {:p} and {:p}",
        map_a.as_raw(),
        map_b.as_raw()
    );

    let pattern: Vec<u8> = (0..size.get()).map(|i| (i * 31 % 251) as u8).collect();
    map_a.write_from(&pattern, 0)?;
    println!("5. wrote {} bytes from the host", pattern.len());

    let mut stream = Stream::new(&dev)?;
    stream.copy_async(&map_b.as_slice(), &map_a.as_slice())?;
    stream.synchronize()?;
    println!("6. copied device to device on a stream (aclrtMemcpyAsync) and synchronized");

    let mut back = vec![0u8; size.get()];
    map_b.read_into(&mut back, 0)?;
    let ok = back == pattern;
    println!(
        "7. read back and verified: {}",
        if ok { "OK" } else { "MISMATCH" }
    );

    // Teardown in an arbitrary order: the mappings unmap first regardless.
    drop(va);
    drop(a);
    drop(stream);
    drop(map_a);
    drop(b);
    drop(map_b);
    dev.check_sticky()?;
    println!("8. torn down (unmap, free, release)");
    Ok(ok)
}

fn main() -> ExitCode {
    // Logs to stderr (`RUST_LOG`, default `info`: shows which backend `from_env` picked).
    common::init_logging("info");
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("vmm_roundtrip: data mismatch");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("vmm_roundtrip: {e}");
            ExitCode::FAILURE
        }
    }
}
