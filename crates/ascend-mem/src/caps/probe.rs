//! Finding the answers of [`Capabilities`]: the queries, and the probes on one device. Every
//! probe frees what it made before it returns (the values it made drop in order: an import
//! before its export, a mapping before its reservation).

use super::symbols::groups;
use super::{Answer, BatchDirections, Capabilities, How, Soc, SocFamily, SymbolGroup};
use crate::buffer::{DeviceBuffer, HostBuffer};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ffi;
use crate::pinned::PinnedWords;
use crate::runtime::Runtime;
use crate::share::{ExportFlags, ShareKind};
use crate::spec::{MemKind, MemSpec};
use crate::stream::{BatchCopy, Stream};
use crate::view::MemView;
use crate::vmm::{PhysicalMem, ReservedVa};

/// Everything about `rt`, with the probes run on `device` (none without one).
pub(super) fn find(rt: &Runtime, device: Option<i32>) -> Capabilities {
    let groups = groups(rt);
    let has = |g: SymbolGroup| groups.iter().any(|a| a.group == g && a.present());
    let (vmm, share, batch, values) = (
        has(SymbolGroup::Vmm),
        has(SymbolGroup::ShareV2),
        has(SymbolGroup::BatchCopy),
        has(SymbolGroup::StreamValues),
    );
    let dev = device.map(|d| rt.device(d));
    let share_calls = missing(&groups, &[SymbolGroup::Vmm, SymbolGroup::ShareV2]);
    let fabric = on(&dev, vmm && share, &share_calls, fabric);
    let host_import = on(&dev, vmm && share, &share_calls, host_import);
    let batch = on(&dev, batch, "aclrtMemcpyBatchAsync", batch_directions);
    let host_values = on(&dev, values, "aclrtValueWrite", host_values);
    Capabilities {
        backend: rt.backend().clone(),
        library: rt.acl().source().describe(),
        runtime_version: runtime_version(rt),
        device_count: queried(rt.device_count()),
        device: dev.as_ref().and_then(|d| d.as_ref().ok()).map(Device::id),
        soc: soc(rt),
        groups,
        fabric,
        host_import,
        batch,
        host_values,
    }
}

/// The symbols of `wanted` that are missing, named for a "not probed" answer.
fn missing(groups: &[super::GroupAnswer], wanted: &[SymbolGroup]) -> String {
    let names: Vec<&str> = groups
        .iter()
        .filter(|g| wanted.contains(&g.group))
        .flat_map(|g| g.missing.iter().copied())
        .collect();
    names.join(", ")
}

/// `probe` run on the device, or why it was not: no device, or the calls it needs missing.
fn on<T>(
    dev: &Option<Result<Device>>,
    needed: bool,
    symbols: &str,
    probe: fn(&Device) -> Answer<T>,
) -> Answer<T> {
    match dev {
        None => Answer::not_probed("no device"),
        Some(Err(e)) => Answer::not_probed(format!("the device did not open: {e}")),
        Some(Ok(_)) if !needed => Answer::not_probed(format!("{symbols} missing")),
        Some(Ok(d)) => probe(d),
    }
}

/// A query's answer: the value, or what the runtime said.
fn queried<T>(r: Result<T>) -> Answer<T> {
    match r {
        Ok(v) => Answer::known(v, How::Queried),
        Err(e @ Error::MissingSymbol { .. }) => Answer {
            value: None,
            how: How::Symbols,
            detail: Some(e.to_string().into_boxed_str()),
        },
        Err(e) => Answer {
            value: None,
            how: How::Queried,
            detail: Some(e.to_string().into_boxed_str()),
        },
    }
}

fn runtime_version(rt: &Runtime) -> Answer<String> {
    queried(ffi::init::package_version(rt.acl(), "runtime"))
}

fn soc(rt: &Runtime) -> Answer<Soc> {
    match ffi::device::soc_name(rt.acl()) {
        Ok(Some(name)) => Answer::known(
            Soc {
                family: SocFamily::of(&name),
                name,
            },
            How::Queried,
        ),
        Ok(None) => Answer {
            value: None,
            how: How::Queried,
            detail: Some("aclrtGetSocName returned no name".into()),
        },
        Err(e) => queried(Err(e)),
    }
}

/// The answer of a probe: `setup` failing (an allocation, a stream) leaves it unknown; the use
/// of the feature failing (`Err` inside) is a refusal, with the runtime's words.
fn probed(setup: Result<std::result::Result<(), String>>) -> Answer<bool> {
    match setup {
        Ok(Ok(())) => Answer::known(true, How::Probed),
        Ok(Err(why)) => Answer::known(false, How::Probed).with_detail(why),
        Err(e) => Answer {
            value: None,
            how: How::Probed,
            detail: Some(format!("setting up the probe failed: {e}").into_boxed_str()),
        },
    }
}

/// One granule of HBM exported as a FABRIC handle. Importing it is not tried here: CANN
/// documents a V2 import as made by another process than the exporter, so an import in this
/// process would prove nothing about a peer's (the acceptance suite imports across processes).
fn fabric(dev: &Device) -> Answer<bool> {
    probed((|| {
        let mem = PhysicalMem::hbm(dev, dev.round_up(1)?)?;
        let exported = mem.export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION);
        Ok(exported.map(drop).map_err(|e| e.to_string()))
    })())
    .with_note("import not tried in-process: CANN imports a FABRIC handle in another process")
}

/// One granule of host DRAM exported as a FABRIC handle, imported in this process and mapped
/// (what HIXL's Fabric Mem engine does with its own host memory on an A3, to get a
/// device-usable alias): what the import's properties say it is (what host-device batching
/// goes by), with the pointer attributes of the mapping in the detail.
fn host_import(dev: &Device) -> Answer<MemKind> {
    let r = (|| {
        let len = dev.round_up_for(MemSpec::HOST, 1)?;
        let mem = PhysicalMem::host(dev, len, None)?;
        let handle = mem.export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)?;
        let imported = handle.shared().import(dev)?;
        let va = ReservedVa::new(dev, len)?;
        let map = va.map(&imported, len.zero())?;
        let attrs = dev.pointer_info(map.addr())?;
        Ok::<_, Error>((MemKind::host_if(imported.is_host()), attrs.device))
    })();
    match r {
        Ok((kind, device)) => {
            let seen = device.map_or("host memory".into(), |d| format!("memory of device {d}"));
            Answer::known(kind, How::Probed)
                .with_detail(format!("the mapping's pointer attributes say {seen}"))
        }
        Err(e) => Answer {
            value: None,
            how: How::Probed,
            detail: Some(format!("export, import or map refused: {e}").into_boxed_str()),
        },
    }
}

/// A one-copy `aclrtMemcpyBatchAsync` host to device, then one device to host, each
/// synchronized within [`PROBE_WAIT`] and its bytes checked. Device-to-device batches are not
/// tried: the library never issues them ([`Stream::copy_batch_async`] refuses them, as the
/// runtime documents batches as host-device only).
fn batch_directions(dev: &Device) -> Answer<BatchDirections> {
    let r = (|| {
        let (d, h1, h2) = (
            DeviceBuffer::new(dev, 4096)?,
            HostBuffer::new(dev, 4096)?,
            HostBuffer::new(dev, 4096)?,
        );
        let mut s = Stream::new(dev)?;
        let mut ok = BatchDirections::empty();
        let mut refused = Vec::new();
        for (dir, dst, src) in [
            (BatchDirections::HOST_TO_DEVICE, d.mapping(), h1.mapping()),
            (BatchDirections::DEVICE_TO_HOST, h2.mapping(), d.mapping()),
        ] {
            let stamp = 0x40 + dir.bits();
            src.fill(stamp)?;
            dst.fill(0)?;
            let copy = BatchCopy::new(dst.slice(..)?, src.slice(..)?);
            match s
                .copy_batch_async(&[copy])
                .and_then(|()| s.synchronize_timeout(PROBE_WAIT))
            {
                Ok(()) if dst.to_vec()?.iter().all(|&b| b == stamp) => ok |= dir,
                Ok(()) => refused.push(format!(
                    "{}: accepted, but the bytes did not arrive",
                    dir.label()
                )),
                Err(e) => {
                    // A copy may still be queued: nothing more goes on this stream, and what
                    // is queued is discarded so that closing it does not wait for ever.
                    refused.push(format!("{}: {e}", dir.label()));
                    let _ = s.abort();
                    break;
                }
            }
        }
        let closed = s.close().map_err(|e| e.to_string());
        refused.extend(
            closed
                .err()
                .map(|e| format!("closing the probe's stream: {e}")),
        );
        Ok::<_, Error>((ok, refused))
    })();
    let not_tried = "D2D not tried (batches are host-device only)";
    match r {
        Ok((ok, refused)) if refused.is_empty() => {
            Answer::known(ok, How::Probed).with_detail(not_tried)
        }
        Ok((ok, refused)) => Answer::known(ok, How::Probed)
            .with_detail(format!("{}; {not_tried}", refused.join("; "))),
        Err(e) => Answer {
            value: None,
            how: How::Probed,
            detail: Some(format!("setting up the probe failed: {e}").into_boxed_str()),
        },
    }
}

/// `aclrtValueWrite` of a word of pinned host memory (what the engine's completion flags
/// do on every transfer), a synchronize within [`PROBE_WAIT`] and a host read. A stream that
/// does not finish in time is aborted before it is destroyed.
fn host_values(dev: &Device) -> Answer<bool> {
    const STAMP: u64 = 0x5eed_0fca_9ab1_7e00;
    probed((|| {
        let words = PinnedWords::new(dev, 1)?;
        let mut s = Stream::new(dev)?;
        let written = s
            .value_write_pinned(&words, 0, STAMP)
            .and_then(|()| s.synchronize_timeout(PROBE_WAIT))
            .and_then(|()| words.load(0));
        if written.is_err() {
            let _ = s.abort();
        }
        let closed = s.close().map_err(|e| e.to_string());
        Ok(match (written, closed) {
            (Ok(STAMP), Ok(())) => Ok(()),
            (Ok(seen), Ok(())) => Err(format!("the stream ran, but the host read {seen:#x}")),
            (Err(e), _) => Err(e.to_string()),
            (_, Err(e)) => Err(format!("destroying the probe's stream: {e}")),
        })
    })())
}

/// How long a probe waits for its stream: far above a healthy device's microseconds, short
/// enough that a device that never runs the work does not stall the caller.
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
