//! Batched submission: a transfer between local host DRAM and a peer's device memory reaches
//! the runtime as one `aclrtMemcpyBatchAsync` per stream; device-to-device transfers stay one
//! `aclrtMemcpyAsync` per copy (the runtime batches host-device copies only); a copy the
//! runtime refuses (in a batch or alone) fails the transfer with the descriptor it came from.

use ascend_fabric::Addr;
use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, Error, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{MemSpec, Origin, PhysicalMem, ReservedVa};
use ascend_testkit::emulator::copy_calls;

const T: Duration = Duration::from_secs(10);
const MIB: usize = 1 << 20;
const BLOCK: usize = 4096;
const N: usize = 64;

/// `N` 4 KiB descriptors, local blocks in order, remote blocks scattered (none adjacent).
fn descs(l: Addr, r: Addr) -> Vec<TransferDesc> {
    (0..N)
        .map(|i| {
            let j = (i * 37) % N;
            TransferDesc::raw(l + (i * BLOCK), r + (j * BLOCK), BLOCK)
        })
        .collect()
}

/// A listening engine on `dev`, its address, and a 1 MiB device buffer of it (to register).
fn peer(dev: &ascend_mem::Device) -> (Engine, String, ascend_mem::DeviceBuffer) {
    let (a, addr) = listening(dev, test_options(4));
    let remote = a.alloc_device(MIB).unwrap();
    (a, addr, remote)
}

/// Checks that block `i` of `data` landed at block `(i * 37) % N` of `remote` (see `descs`).
fn assert_scattered(remote: &ascend_mem::DeviceBuffer, data: &[u8]) {
    let got = remote
        .slice(..N * BLOCK)
        .unwrap()
        .read_to_vec::<u8>()
        .unwrap();
    for i in 0..N {
        let j = (i * 37) % N;
        assert_eq!(
            got[j * BLOCK..(j + 1) * BLOCK],
            data[i * BLOCK..(i + 1) * BLOCK]
        );
    }
}

#[test]
fn host_local_transfers_are_one_batch_call_per_stream() {
    let env = setup();
    {
        // The peer on another device: its imports here are this device's memory.
        let dev1 = env.rt.device(1).unwrap();
        let (a, addr, remote) = peer(&dev1);
        let _ra = a.register(&remote).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(4)).unwrap();
        let host = b.alloc_host(MIB).unwrap();
        let back = b.alloc_host(MIB).unwrap();
        let dev = b.alloc_device(MIB).unwrap();
        let _rb = (
            b.register(&host).unwrap(),
            b.register(&back).unwrap(),
            b.register(&dev).unwrap(),
        );
        b.connect(&addr, T).unwrap();
        let data = pattern(5, N * BLOCK);
        host.write_from(&data, 0).unwrap();
        let r = remote.addr();

        let write = descs(host.addr(), r);
        let n = copy_calls(|| {
            b.transfer_sync(&addr, TransferOp::Write, &write, T)
                .unwrap()
        });
        assert_eq!(n, (4, 0), "WRITE from host: (batch calls, single copies)");
        assert_scattered(&remote, &data);
        let read = descs(back.addr(), r);
        let n = copy_calls(|| b.transfer_sync(&addr, TransferOp::Read, &read, T).unwrap());
        assert_eq!(n, (4, 0), "READ into host: (batch calls, single copies)");
        let again = back
            .slice(..N * BLOCK)
            .unwrap()
            .read_to_vec::<u8>()
            .unwrap();
        assert_eq!(again, data);

        // Device to device: no batch.
        let d2d = descs(dev.addr(), r);
        let n = copy_calls(|| b.transfer_sync(&addr, TransferOp::Read, &d2d, T).unwrap());
        assert_eq!(
            n,
            (0, N as u64),
            "READ into HBM: (batch calls, single copies)"
        );
        assert_eq!(
            dev.slice(..N * BLOCK).unwrap().read_to_vec::<u8>().unwrap(),
            data
        );
    }
    env.finish();
}

/// Device memory adopted as host DRAM (the host cannot tell; the runtime refuses it as a
/// HOST location): the batch call's `failIndex` names its copy, which the transfer's error
/// maps back to the descriptor.
#[test]
fn a_refused_copy_names_its_descriptor() {
    let env = setup();
    {
        let (a, addr, remote) = peer(&env.dev);
        let _ra = a.register(&remote).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(1)).unwrap();
        let host = b.alloc_host(MIB).unwrap();
        let size = env.dev.round_up(MIB).unwrap();
        let spec = MemSpec::DEVICE_HBM;
        // SAFETY: plain values and a writable out-slot, through the runtime's own table.
        let raw =
            unsafe { ascend_mem::ffi::phys::malloc(env.rt.acl(), size.get(), &spec.to_prop(0)) }
                .unwrap();
        // SAFETY: a live handle of this runtime, of `size` bytes, owned by nobody else; it is
        // HBM claimed as host DRAM, which is the point of the test.
        let fake = unsafe {
            PhysicalMem::from_raw(&env.dev, raw, size.get(), Origin::Allocated(MemSpec::HOST))
        };
        let va = ReservedVa::new(&env.dev, size).unwrap();
        let fake_map = va.map(&fake, size.zero()).unwrap();
        let _rb = (
            b.register(&host).unwrap(),
            b.register_slice(&fake_map.slice(..).unwrap()).unwrap(),
        );
        b.connect(&addr, T).unwrap();
        let r = remote.addr();
        let mut d = descs(host.addr(), r);
        d[5] = TransferDesc::raw(fake_map.addr(), r + (40 * BLOCK), 512);
        let e = b
            .transfer_sync(&addr, TransferOp::Write, &d, T)
            .unwrap_err();
        assert!(
            matches!(&e, Error::CopyRefused { index: 5, source }
                if source.api() == Some("aclrtMemcpyBatchAsync")),
            "{e:?}"
        );
        assert!(e.to_string().contains("descriptor 5"), "{e}");
        drop(_rb);
        drop((fake_map, va, fake, host));
    }
    env.finish();
}

/// A single copy the runtime refuses as it is queued (device to device, one stream: the sixth
/// `aclrtMemcpyAsync` is descriptor 5's) fails the transfer with its descriptor, and the
/// engine goes on.
#[test]
fn a_refused_single_copy_names_its_descriptor() {
    let env = setup();
    {
        let (a, addr, remote) = peer(&env.dev);
        let _ra = a.register(&remote).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(1)).unwrap();
        let local = b.alloc_device(MIB).unwrap();
        let _rb = b.register(&local).unwrap();
        b.connect(&addr, T).unwrap();
        let data = pattern(6, N * BLOCK);
        local.write_from(&data, 0).unwrap();
        let d = descs(local.addr(), remote.addr());
        ascend_sim::fault::fail_nth("aclrtMemcpyAsync", 6, INTERNAL);
        let e = b
            .transfer_sync(&addr, TransferOp::Write, &d, T)
            .unwrap_err();
        ascend_sim::fault::clear();
        assert!(
            matches!(&e, Error::CopyRefused { index: 5, source }
                if source.api() == Some("aclrtMemcpyAsync")
                    && source.code().map(|c| c.0) == Some(INTERNAL)),
            "{e:?}"
        );
        b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
        assert_scattered(&remote, &data);
    }
    env.finish();
}

/// With `batch_copies(false)` every copy is one `aclrtMemcpyAsync`, host DRAM or not.
#[test]
fn batching_can_be_turned_off() {
    let env = setup();
    {
        let (a, addr, remote) = peer(&env.dev);
        let _ra = a.register(&remote).unwrap();
        let mut opts = test_options(4);
        opts.batch_copies = false;
        assert_eq!(
            ascend_fabric::EngineOptions::builder()
                .batch_copies(false)
                .build()
                .unwrap()
                .batch_copies,
            opts.batch_copies
        );
        let b = Engine::new(&env.dev, "127.0.0.1", opts).unwrap();
        let host = b.alloc_host(MIB).unwrap();
        let _rb = b.register(&host).unwrap();
        b.connect(&addr, T).unwrap();
        let data = pattern(8, N * BLOCK);
        host.write_from(&data, 0).unwrap();
        let d = descs(host.addr(), remote.addr());
        let n = copy_calls(|| b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap());
        assert_eq!(n, (0, N as u64), "(batch calls, single copies)");
        assert_scattered(&remote, &data);
    }
    env.finish();
}
