//! FABRIC sharing between two processes: the handle bytes cross, the memory does not.

use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{DeviceBuffer, ExportFlags, Feature, ReservedVa, ShareKind, SharedHandle};

use crate::ctx::{ensure, pattern, read_line, Ctx, Peer, Res};
use crate::harness::Outcome;
use crate::need;

const LEN: usize = 2 << 20;

/// The parent exports HBM as a FABRIC handle allow-listed for the child; the child imports,
/// maps and writes a pattern; the parent reads the pattern in its own buffer.
pub fn fabric_between_processes(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::Fabric));
    let dev = ctx.dev()?;
    let buf = DeviceBuffer::new(&dev, LEN)?;
    buf.fill(0)?;
    let handle = buf.export(ShareKind::Fabric, ExportFlags::empty())?;
    let mut child = Peer::start(
        "fabric-import",
        &[("ASCEND_TEST_DEVICES", ctx.devices_var())],
    )?;
    handle.allow_pids(&[i32::try_from(child.pid())?])?;
    child.say(&ascend_testkit::to_hex(&handle.to_bytes()))?;
    let wrote = child.expect("WROTE")?;
    ensure(
        wrote == buf.len().to_string(),
        format!("the child wrote {wrote} bytes"),
    )?;
    ensure(
        buf.to_vec()? == pattern(11, buf.len()),
        "the parent does not see the child's bytes",
    )?;
    child.finish()?;
    Ok(None)
}

/// The child's side: import the handle from stdin, map it, write the pattern.
pub fn import_role() -> Res<()> {
    let line = read_line().ok_or("no handle on stdin")?;
    let bytes = ascend_testkit::from_hex(&line);
    let rt = ascend::Runtime::from_env_or_emulator()?;
    let dev = rt.device(crate::ctx::devices(&rt)?[0])?;
    let mem = SharedHandle::from_bytes(&bytes)?.import(&dev)?;
    let len = dev.granular(mem.len())?;
    let va = ReservedVa::new(&dev, len)?;
    let map = va.map(&mem, len.zero())?;
    map.write_from(&pattern(11, map.len()), 0)?;
    println!("WROTE {}", map.len());
    read_line();
    Ok(())
}
