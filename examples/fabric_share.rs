//! Cross-process sharing with a FABRIC handle.
//!
//! The parent allocates device memory, exports a FABRIC share handle, allow-lists a child
//! process (itself, re-run with the argument `child`) and sends it only the handle bytes, as
//! hex on the child's stdin. The child imports the handle, maps it, writes a pattern and exits.
//! The parent then verifies the pattern in its own mapping. Exits 0 only on success.

mod common;

use std::io::{BufRead, Write};
use std::process::{Command, ExitCode, Stdio};

use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, ExportFlags, ReservedVa, Runtime, ShareKind, SharedHandle};

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(7) + 3) as u8
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn parent() -> Result<bool, Box<dyn std::error::Error>> {
    let rt = Runtime::from_env_or_emulator()?;
    println!("[parent] backend: {}", rt.backend());
    let dev = rt.device(0)?;
    let buf = DeviceBuffer::new(&dev, 2 << 20)?;
    buf.fill(0)?;
    let handle = buf.export(ShareKind::Fabric, ExportFlags::empty())?;
    println!("[parent] exported a FABRIC handle for {} bytes", buf.len());

    let mut child = Command::new(std::env::current_exe()?)
        .arg("child")
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .spawn()?;
    let pid = i32::try_from(child.id())?;
    handle.allow_pids(&[pid])?;
    println!(
        "[parent] allow-listed child pid {pid}; sending {} handle bytes",
        handle.to_bytes().len()
    );
    {
        let mut stdin = child.stdin.take().ok_or("no child stdin")?;
        writeln!(stdin, "{}", to_hex(&handle.to_bytes()))?;
    }
    let status = child.wait()?;
    if !status.success() {
        println!("[parent] child failed: {status}");
        return Ok(false);
    }
    let data = buf.to_vec()?;
    let bad = data
        .iter()
        .enumerate()
        .filter(|(i, b)| **b != pattern(*i))
        .count();
    println!(
        "[parent] verified {} bytes written by the child: {} mismatches",
        data.len(),
        bad
    );
    Ok(bad == 0)
}

fn child() -> Result<bool, Box<dyn std::error::Error>> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let bytes = from_hex(&line).ok_or("handle is not hex")?;
    let shared = SharedHandle::from_bytes(&bytes)?;
    let rt = Runtime::from_env_or_emulator()?;
    let dev = rt.device(0)?;
    let mem = shared.import(&dev)?;
    let len = dev.granular(mem.len())?;
    let va = ReservedVa::new(&dev, len)?;
    let map = va.map(&mem, len.zero())?;
    let data: Vec<u8> = (0..map.len()).map(pattern).collect();
    map.write_from(&data, 0)?;
    println!(
        "[child] imported {} bytes, mapped at {:p}, wrote the pattern",
        map.len(),
        map.as_raw()
    );
    Ok(true)
}

fn main() -> ExitCode {
    // Logs to stderr (`RUST_LOG`, default `info`: shows which backend `from_env` picked).
    common::init_logging("info");
    let is_child = std::env::args().nth(1).as_deref() == Some("child");
    let r = if is_child { child() } else { parent() };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!(
                "fabric_share ({}): {e}",
                if is_child { "child" } else { "parent" }
            );
            ExitCode::FAILURE
        }
    }
}
