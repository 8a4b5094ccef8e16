//! FABRIC sharing between two processes: only the handle bytes cross; the child imports,
//! maps and writes the parent's memory, and the pid allow-list decides who may import.

use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{
    DeviceBuffer, ErrorKind, ExportFlags, FabricHandle, Feature, ReservedVa, ShareKind,
    SharedHandle,
};
use ascend_testkit::{from_hex, pattern, to_hex};

use crate::ctx::{child_device, ensure, same_bytes, say, Commands, Ctx, Peer, Res, DEVICE};
use crate::harness::Outcome;
use crate::skip_if;

const LEN: usize = 2 << 20;

/// The importing child, on the second listed device (or the first when only one is).
fn importer(ctx: &Ctx) -> Res<Peer> {
    let mut p = Peer::start("fabric-import", &[(DEVICE, ctx.other_device().to_string())])?;
    p.expect("READY")?;
    Ok(p)
}

/// A zeroed buffer and its FABRIC export with `flags`.
fn exported(ctx: &Ctx, flags: ExportFlags) -> Res<(DeviceBuffer, FabricHandle)> {
    let buf = DeviceBuffer::new(&ctx.device()?, LEN)?;
    buf.fill(0)?;
    let handle = buf.export(ShareKind::Fabric, flags)?;
    Ok((buf, handle))
}

/// Asks the child to import `handle` and write pattern `seed` into it; its answer.
fn import(child: &mut Peer, handle: &FabricHandle, seed: u8) -> Res<String> {
    let line = format!("IMPORT {seed} {}", to_hex(&handle.to_bytes()));
    child.send(&line)?;
    child.expect("")
}

/// Checks the child wrote pattern `seed` over all of `buf`.
fn check_written(answer: &str, buf: &DeviceBuffer, seed: u8) -> Res<()> {
    ensure(
        answer == format!("WROTE {}", buf.len()),
        format!("the child answered {answer:?}"),
    )?;
    same_bytes(
        &buf.to_vec()?,
        &pattern(seed, buf.len()),
        "the parent's buffer",
    )
}

/// The parent exports HBM and allow-lists the child; the child imports it, maps it and
/// writes a pattern, which the parent then reads in its own buffer.
pub fn fabric_import(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Fabric)));
    let (buf, handle) = exported(ctx, ExportFlags::empty())?;
    let mut child = importer(ctx)?;
    handle.allow_pids(&[i32::try_from(child.pid())?])?;
    let answer = import(&mut child, &handle, 11)?;
    check_written(&answer, &buf, 11)?;
    child.finish()?;
    Ok(Outcome::Pass)
}

/// A process not on the allow-list is refused (permission denied) and can import once it
/// is on it; memory exported without pid validation needs no allow-list.
pub fn allow_list(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Fabric)));
    let (buf, handle) = exported(ctx, ExportFlags::empty())?;
    let mut child = importer(ctx)?;
    let answer = import(&mut child, &handle, 3)?;
    ensure(
        answer.starts_with(&format!("REFUSED {:?}", ErrorKind::PermissionDenied)),
        format!("an import by a process not on the allow-list: {answer:?}"),
    )?;
    ensure(
        buf.to_vec()?.iter().all(|&b| b == 0),
        "the refused child wrote",
    )?;
    handle.allow_pids(&[i32::try_from(child.pid())?])?;
    let answer = import(&mut child, &handle, 4)?;
    check_written(&answer, &buf, 4)?;
    let (open, open_handle) = exported(ctx, ExportFlags::DISABLE_PID_VALIDATION)?;
    let answer = import(&mut child, &open_handle, 5)?;
    check_written(&answer, &open, 5)?;
    child.finish()?;
    Ok(Outcome::Pass)
}

/// The child: for each `IMPORT <seed> <hex>` it imports the handle, maps it, writes pattern
/// `seed` over it and says `WROTE <bytes>`, or `REFUSED <kind> <error>` when the import is
/// refused.
pub fn import_role() -> Res<()> {
    let dev = child_device()?;
    let commands = Commands::open();
    say("READY");
    while let Some(line) = commands.next()? {
        let mut words = line.split_whitespace();
        let (Some("IMPORT"), Some(seed), Some(hex)) = (words.next(), words.next(), words.next())
        else {
            return Err(format!("not a command: {line:?}").into());
        };
        let mem = match SharedHandle::from_bytes(&from_hex(hex))?.import(&dev) {
            Ok(mem) => mem,
            Err(e) => {
                say(&format!("REFUSED {:?} {e}", e.kind()));
                continue;
            }
        };
        let len = dev.granular(mem.len())?;
        let map = ReservedVa::new(&dev, len)?.map(&mem, len.zero())?;
        map.write_from(&pattern(seed.parse()?, map.len()), 0)?;
        say(&format!("WROTE {}", map.len()));
    }
    Ok(())
}
