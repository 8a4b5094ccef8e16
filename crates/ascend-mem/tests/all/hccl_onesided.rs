//! One-sided puts, gets and signals on symmetric windows through the safe API, ranks as
//! threads: data put into every peer's part lands there and the peer's signal wait releases
//! after it (2, 4 and 8 ranks), gets read a peer's part, every bad input is a typed error
//! before any C call (rank, offset, size, element alignment, signal slot, a window no longer
//! registered), a wait for a signal that never comes ends at its deadline, and windows,
//! streams and buffers dropped in any order while puts are queued stay safe, with the
//! emulator's counters back at zero. The process forms are in `hccl_onesided_procs`.

use std::time::Duration;

use crate::common::setup;
use crate::hccl_util::*;
use ascend_mem::hccl::{SymWindow, SIGNAL_AREA_BYTES, SIGNAL_SLOTS};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Error, ErrorKind, TypedSlice, WaitCmp};

const MIB: usize = 1 << 20;
/// Elements each rank puts into each peer.
const K: usize = 1024;

/// The first `n` u32 of `b` (buffers are whole allocation granules, longer than asked).
fn words(b: &DeviceBuffer, n: usize) -> TypedSlice<'_, u32> {
    b.slice(..n * 4).unwrap().typed::<u32>().unwrap()
}

fn val(from: u32, to: u32, i: usize) -> u32 {
    (from << 24) | (to << 16) | i as u32
}

/// Every rank puts K elements into every rank's data area at `K * rank` with a signal in
/// slot `rank`, waits for every sender's signal, checks what arrived, then gets the next
/// rank's block from it back.
fn put_get_round(r: &mut Rank<'_>) {
    let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
    let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
    assert_eq!(win.data_len(), 2 * MIB - SIGNAL_AREA_BYTES);
    win.reset_signals().unwrap();
    r.comm.barrier(&mut r.stream).unwrap();
    r.stream.synchronize().unwrap();
    let src_buf = DeviceBuffer::new(&r.dev, r.n as usize * K * 4).unwrap();
    let src = words(&src_buf, r.n as usize * K);
    for to in 0..r.n {
        let block: Vec<u32> = (0..K).map(|i| val(r.rank, to, i)).collect();
        src.write_slice(&block, to as usize * K).unwrap();
    }
    for to in 0..r.n {
        let peer = win.peer::<u32>(to).unwrap();
        assert_eq!(peer.len(), win.data_len() / 4);
        let part = src.slice(to as usize * K..(to as usize + 1) * K).unwrap();
        let slot = r.rank as usize;
        r.stream
            .put_signal(&peer, &part, r.rank as usize * K, slot, 5)
            .unwrap();
    }
    for from in 0..r.n as usize {
        r.stream.wait_signal(&win, from, WaitCmp::Geq, 5).unwrap();
    }
    r.comm
        .synchronize_watched(&mut r.stream, Duration::from_secs(10))
        .unwrap();
    for from in 0..r.n as usize {
        assert_eq!(win.signal_value(from).unwrap(), 5);
    }
    assert_eq!(win.signal_value(r.n as usize).unwrap(), 0);
    let mine = buf.typed::<u32>().unwrap();
    let got = mine
        .slice(..r.n as usize * K)
        .unwrap()
        .read_to_vec()
        .unwrap();
    for from in 0..r.n {
        let want: Vec<u32> = (0..K).map(|i| val(from, r.rank, i)).collect();
        let b = from as usize * K;
        assert_eq!(got[b..b + K], want[..], "rank {} from {from}", r.rank);
    }
    // Get what the next rank received from us.
    let next = (r.rank + 1) % r.n;
    let back_buf = DeviceBuffer::new(&r.dev, K * 4).unwrap();
    let back = words(&back_buf, K);
    let peer = win.peer::<u32>(next).unwrap();
    r.stream.get(&peer, r.rank as usize * K, &back).unwrap();
    r.stream.synchronize().unwrap();
    let want: Vec<u32> = (0..K).map(|i| val(r.rank, next, i)).collect();
    assert_eq!(back.read_to_vec().unwrap(), want);
    drop(peer);
    r.barrier.wait();
    win.close().unwrap();
}

#[test]
fn puts_and_gets_on_2_4_and_8_ranks() {
    let env = setup();
    for n in [2, 4, 8] {
        ranks(&env.rt, n, &test_config(), put_get_round);
    }
    env.finish();
}

#[track_caller]
fn assert_invalid(e: &Error, api: &str) {
    assert!(
        matches!(e, Error::InvalidArgument { api: a, .. } if *a == api),
        "expected InvalidArgument from {api}, got {e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

/// Every bad input the host can check is a typed error and queues nothing.
fn bad_inputs(r: &mut Rank<'_>) {
    let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
    let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
    let e = win.peer::<u32>(r.n).unwrap_err();
    assert_invalid(&e, "HcclSymWinGetPeerPointer");
    let e = win.peer::<u32>(u32::MAX).unwrap_err();
    assert_invalid(&e, "HcclSymWinGetPeerPointer");
    let peer = win.peer::<u32>((r.rank + 1) % r.n).unwrap();
    let src_buf = DeviceBuffer::new(&r.dev, 64 * 4).unwrap();
    let src = words(&src_buf, 64);
    let n = peer.len();
    for off in [n - 63, n, usize::MAX] {
        let e = r.stream.put(&peer, &src, off).unwrap_err();
        assert!(matches!(e, Error::OutOfBounds { .. }), "{e:?}");
        let e = r.stream.get(&peer, off, &src).unwrap_err();
        assert!(matches!(e, Error::OutOfBounds { .. }), "{e:?}");
    }
    // Too big for the data area at any offset.
    let big_buf = DeviceBuffer::new(&r.dev, 4 * MIB).unwrap();
    let big = words(&big_buf, MIB);
    let e = r.stream.put(&peer, &big, 0).unwrap_err();
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e:?}");
    // The last element fits exactly.
    r.stream
        .put(&peer, &src.slice(..1).unwrap(), n - 1)
        .unwrap();
    // Another device's buffer.
    let other = DeviceBuffer::new(&r.dev.runtime().device(9).unwrap(), 4096).unwrap();
    let e = r.stream.put(&peer, &words(&other, 16), 0).unwrap_err();
    assert!(matches!(e, Error::WrongDevice { .. }), "{e:?}");
    // Signal slots past the area; the failed put_signal queues nothing (not even its put).
    let e = r.stream.signal(&peer, SIGNAL_SLOTS, 1).unwrap_err();
    assert_invalid(&e, "Stream::signal");
    let e = r
        .stream
        .put_signal(&peer, &src, 0, SIGNAL_SLOTS, 1)
        .unwrap_err();
    assert_invalid(&e, "Stream::put_signal");
    let e = r.stream.put_signal(&peer, &src, n, 0, 1).unwrap_err();
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e:?}");
    let e = r
        .stream
        .wait_signal(&win, usize::MAX, WaitCmp::Eq, 1)
        .unwrap_err();
    assert_invalid(&e, "Stream::wait_signal");
    let e = win.signal_value(SIGNAL_SLOTS).unwrap_err();
    assert_invalid(&e, "SymWindow::signal_value");
    let mut other_stream = ascend_mem::Stream::new(&other.mapping().device().clone()).unwrap();
    let e = other_stream.signal(&peer, 0, 1).unwrap_err();
    assert!(matches!(e, Error::WrongDevice { .. }), "{e:?}");
    let e = other_stream
        .wait_signal(&win, 0, WaitCmp::Eq, 1)
        .unwrap_err();
    assert!(matches!(e, Error::WrongDevice { .. }), "{e:?}");
    drop(other_stream);
    r.stream.synchronize().unwrap();
    // Nothing was signalled on either rank.
    r.barrier.wait();
    assert_eq!(win.signal_value(0).unwrap(), 0);
    drop(peer);
    // A window whose start is not aligned for the element type, and one too small for the
    // signal area.
    r.barrier.wait();
    win.close().unwrap();
    let odd = SymWindow::register(&r.comm, &buf.slice(1..MIB).unwrap()).unwrap();
    let e = odd.peer::<u32>(0).unwrap_err();
    assert!(matches!(e, Error::MisalignedElements { .. }), "{e:?}");
    assert!(odd.peer::<u8>(0).is_ok());
    odd.close().unwrap();
    let tiny = SymWindow::register(&r.comm, &buf.slice(..SIGNAL_AREA_BYTES - 1).unwrap()).unwrap();
    assert_eq!(tiny.data_len(), 0);
    let e = tiny.peer::<u8>(0).unwrap_err();
    assert_invalid(&e, "HcclSymWinGetPeerPointer");
    tiny.close().unwrap();
}

/// A wait for a signal that never comes ends at its deadline with a timeout, and the aborted
/// stream is usable again.
#[test]
fn a_signal_that_never_comes_ends_at_the_deadline() {
    let env = setup();
    ranks(&env.rt, 2, &test_config(), |r| {
        let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
        r.stream.wait_signal(&win, 3, WaitCmp::Eq, 42).unwrap();
        let e = r
            .comm
            .synchronize_watched(&mut r.stream, Duration::from_millis(100))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e:?}");
        assert_eq!(win.signal_value(3).unwrap(), 0);
        // The stream still works: a signal to ourselves releases a new wait.
        let me = win.peer::<u8>(r.rank).unwrap();
        r.stream.signal(&me, 3, 42).unwrap();
        r.stream.wait_signal(&win, 3, WaitCmp::Eq, 42).unwrap();
        r.comm
            .synchronize_watched(&mut r.stream, Duration::from_secs(10))
            .unwrap();
        drop(me);
        r.barrier.wait();
        win.close().unwrap();
    });
    env.finish();
}

#[test]
fn bad_inputs_are_typed_errors() {
    let env = setup();
    ranks(&env.rt, 2, &test_config(), bad_inputs);
    env.finish();
}

/// A window deregistered under the safe API's feet (raw calls on every rank): views are
/// refused; the window's own drop then fails and leaves the sticky error, which is taken.
#[test]
fn a_window_no_longer_registered_gives_no_views() {
    let env = setup();
    ranks(&env.rt, 2, &test_config(), |r| {
        let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
        let h = r.dev.runtime().hccl().unwrap();
        // SAFETY: the window is registered; after this only the safe API's drop touches it,
        // and that expects a possibly missing window.
        let code = unsafe { h.HcclCommSymWinDeregister(win.as_raw()) }.unwrap();
        assert_eq!(code, 0);
        assert!(!win.is_registered().unwrap());
        let e = win.peer::<u32>(0).unwrap_err();
        assert_invalid(&e, "HcclSymWinGetPeerPointer");
        drop(win);
        let e = r.dev.check_sticky().unwrap_err();
        assert!(e.hccl_code().is_some(), "{e:?}");
    });
    env.finish();
}

/// Puts queued on a held stream, then the window, the view, the buffers and the stream
/// dropped in each order: nothing breaks, and once the stream runs the data has arrived
/// (where the receiver still looks).
#[test]
fn drop_orders_with_queued_puts_are_safe() {
    let env = setup();
    for order in 0..4 {
        ranks(&env.rt, 2, &test_config(), |r| {
            let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
            let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
            let src = DeviceBuffer::new(&r.dev, K * 4).unwrap();
            let s = words(&src, K);
            s.write_slice(&vec![r.rank + 7; K], 0).unwrap();
            let peer = win.peer::<u32>((r.rank + 1) % r.n).unwrap();
            let mut stream = ascend_mem::Stream::new(&r.dev).unwrap();
            let hold = ascend_sim::testing::hold_stream(stream.as_raw());
            stream.put(&peer, &s, 0).unwrap();
            // While the put is queued the window cannot be closed.
            let win = match win.close() {
                Err(e) => {
                    let (e, w) = e.into_parts();
                    assert!(matches!(e, Error::Busy { .. }), "{e:?}");
                    w
                }
                Ok(()) => panic!("closed a window with a put queued"),
            };
            match order {
                // The window, the view and the source go first: the stream keeps them.
                0 => drop((win, peer, src)),
                // The view and the window first, the source stays.
                1 => drop((peer, win)),
                // The source first, the window after.
                2 => {
                    drop(src);
                    drop(peer);
                    drop(win);
                }
                // The stream first (its drop waits for the put), then the rest.
                _ => {
                    drop(hold);
                    drop(stream);
                    drop((peer, src));
                    r.barrier.wait();
                    win.close().unwrap();
                    check_arrived(r, &buf);
                    return;
                }
            }
            drop(hold);
            stream.synchronize().unwrap();
            drop(stream);
            r.barrier.wait();
            check_arrived(r, &buf);
        });
    }
    env.finish();
}

/// The previous rank's put landed at the start of our window's memory (which stays ours
/// after the window is gone).
fn check_arrived(r: &Rank<'_>, buf: &DeviceBuffer) {
    let got = buf.typed::<u32>().unwrap().slice(..K).unwrap();
    let from = (r.rank + r.n - 1) % r.n;
    assert_eq!(got.read_to_vec().unwrap(), vec![from + 7; K]);
}
