//! The ceiling a transfer is measured against: what copies the same blocks as the engine
//! between the same two mappings of this process (`memcpy` on the emulator, the runtime's own
//! copies on CANN), and the raw `memcpy` between two mappings.

use std::time::Duration;

use ascend_mem::{Addr, Device, Stream, StreamFlags};
use parking_lot::Mutex;

use crate::Res;

/// Raw addresses of the two mappings in this process.
#[derive(Copy, Clone)]
pub(crate) struct Bufs {
    pub(crate) local: Addr,
    /// This process's mapping of the peer's buffer (HBM).
    pub(crate) remote: Addr,
    /// `local` is host DRAM (else HBM).
    pub(crate) local_host: bool,
}

/// What copies the same blocks as the engine between the same two mappings of this process
/// (a local buffer and this process's mapping of a peer's): the ceiling a transfer is
/// measured against.
pub(crate) enum Ceiling {
    /// The emulator: every mapping is host memory of this process, so `memcpy` on `threads`
    /// threads.
    Host { threads: usize },
    /// CANN: the mappings are device memory the host cannot address, so the runtime's own
    /// copies (`aclrtMemcpyAsync`, device to device whatever each side's memory: HBM and
    /// host DRAM are both mapped in device VA, and the engine and HIXL queue their single
    /// copies so) dealt to `streams` of this process's device, one synchronize per stream at
    /// the end (each waiting at most [`CEILING_WAIT`]).
    Runtime {
        dev: Device,
        streams: Mutex<Vec<Stream>>,
    },
}

/// What a [`Ceiling`] is: `memcpy` on 4 threads, `aclrtMemcpyAsync` on 4 streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CeilingName {
    pub(crate) name: String,
    pub(crate) lanes: usize,
    /// `threads` or `streams`.
    pub(crate) unit: String,
}

impl CeilingName {
    /// The emulator's: `memcpy` on `threads` threads.
    pub(crate) fn memcpy(threads: usize) -> CeilingName {
        CeilingName {
            name: "memcpy".into(),
            lanes: threads,
            unit: "threads".into(),
        }
    }

    /// The words `name lanes unit` (as the hixl client prints them), back.
    pub(crate) fn parse(words: &[&str]) -> Res<CeilingName> {
        match words {
            [name, lanes, unit] => Ok(CeilingName {
                name: (*name).into(),
                lanes: lanes.parse()?,
                unit: (*unit).into(),
            }),
            _ => Err(format!("bad ceiling {words:?}").into()),
        }
    }

    /// `name lanes unit`, for [`CeilingName::parse`].
    pub(crate) fn words(&self) -> String {
        format!("{} {} {}", self.name, self.lanes, self.unit)
    }
}

/// `memcpy (4 threads)`.
impl std::fmt::Display for CeilingName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} {})", self.name, self.lanes, self.unit)
    }
}

/// Copies of at least this size go to the runtime ceiling's streams in equal parts, one per
/// stream (the engine splits copies of 4 MiB and more over its streams likewise).
const CEILING_SPLIT_MIN: usize = 4 << 20;

/// How long the runtime ceiling waits for one stream's copies: far longer than any of its
/// passes takes (the largest, a whole region of 1 GiB, is well under a second at the
/// bandwidth of a host link), so running out means the copies are stuck.
const CEILING_WAIT: Duration = Duration::from_secs(120);

impl Ceiling {
    /// The ceiling of `dev`'s backend: `memcpy` on `threads` threads on the emulator, the
    /// runtime's copies on `streams` streams on CANN. `ASCEND_BENCH_CEILING=runtime` takes
    /// the runtime's copies on the emulator too (to compare the engine with its runtime).
    pub(crate) fn new(dev: &Device, threads: usize, streams: usize) -> Res<Ceiling> {
        let forced = std::env::var("ASCEND_BENCH_CEILING").is_ok_and(|v| v == "runtime");
        if dev.runtime().backend().is_emulator() && !forced {
            return Ok(Ceiling::Host { threads });
        }
        let flags = StreamFlags::FAST_LAUNCH | StreamFlags::FAST_SYNC;
        let streams = (0..streams.max(1))
            .map(|_| Stream::with_config(dev, 0, flags))
            .collect::<ascend_mem::Result<Vec<_>>>()?;
        Ok(Ceiling::Runtime {
            dev: dev.clone(),
            streams: Mutex::new(streams),
        })
    }

    /// What it is, for the reports.
    pub(crate) fn name(&self) -> CeilingName {
        match self {
            Ceiling::Host { threads } => CeilingName {
                name: "memcpy".into(),
                lanes: *threads,
                unit: "threads".into(),
            },
            Ceiling::Runtime { streams, .. } => CeilingName {
                name: "aclrtMemcpyAsync".into(),
                lanes: streams.lock().len(),
                unit: "streams".into(),
            },
        }
    }

    /// The runtime ceiling: queues `(source, destination, bytes)` copies, dealt to the streams in
    /// turn (a copy of [`CEILING_SPLIT_MIN`] or more in one part per stream), and waits for
    /// them all, at most [`CEILING_WAIT`] per stream. Does nothing for the host ceiling (its
    /// callers copy themselves).
    ///
    /// Every range must lie inside a mapping of this process on the ceiling's device that
    /// stays mapped during the call, and nothing else may use the destinations meanwhile.
    ///
    /// # Errors
    /// A copy the runtime refused; a stream's failure; a stream whose copies did not finish
    /// within [`CEILING_WAIT`] (the error names the stream; its queued work is aborted).
    pub(crate) fn runtime_copies(
        &self,
        copies: impl IntoIterator<Item = (Addr, Addr, usize)>,
    ) -> Res<()> {
        let Ceiling::Runtime { dev, streams } = self else {
            return Ok(());
        };
        let mut streams = streams.lock();
        let k = streams.len();
        dev.bind()?;
        let lib = dev.runtime().acl();
        let mut next = 0;
        let queue = || -> ascend_mem::Result<()> {
            for (src, dst, len) in copies {
                let part = if len >= CEILING_SPLIT_MIN {
                    len.div_ceil(k)
                } else {
                    len
                };
                let mut at = 0;
                while at < len {
                    let n = part.min(len - at);
                    let s = &streams[next % k];
                    next += 1;
                    // SAFETY: both ranges lie inside live mappings of this process on `dev` (the
                    // callers' contract: a local buffer and this process's mapping of a peer's,
                    // mapped for the whole measurement), which stay mapped until the streams are
                    // synchronized below (also when a later copy fails; a stream that does not
                    // finish in time is aborted and waited for again); the stream lives (it is
                    // borrowed from `streams`) for the call.
                    unsafe {
                        let s = ascend_mem::ffi::StreamRef::borrow_raw(s.as_raw());
                        ascend_mem::ffi::copy::memcpy_async(
                            lib,
                            (dst + at).as_ptr(),
                            n,
                            (src + at).as_ptr() as *const std::ffi::c_void,
                            n,
                            ascend_mem::acl::ACL_MEMCPY_DEVICE_TO_DEVICE,
                            s,
                        )?;
                    }
                    at += n;
                }
            }
            Ok(())
        };
        let queued = queue();
        // Every stream is waited for, whatever failed: no copy queued here outlives the call.
        let mut waited = Ok(());
        for (i, s) in streams.iter_mut().enumerate() {
            let r = wait_stream(s, i, k);
            if waited.is_ok() {
                waited = r;
            }
        }
        queued?;
        waited
    }
}

/// Waits at most [`CEILING_WAIT`] for the copies on `s` (stream `i` of `k` of the runtime
/// ceiling). When time runs out the stream's queued work is aborted and waited for once more
/// (as long again), so nothing queued on it should still run when this returns, and the
/// timeout is the error.
fn wait_stream(s: &mut Stream, i: usize, k: usize) -> Res<()> {
    match s.synchronize_timeout(CEILING_WAIT) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ascend_mem::ErrorKind::Timeout => {
            let aborted = s.abort().and_then(|()| s.synchronize_timeout(CEILING_WAIT));
            let after = match aborted {
                Ok(()) => "its queued copies were aborted".to_owned(),
                Err(a) => format!("aborting its queued copies failed too: {a}"),
            };
            Err(format!(
                "the runtime ceiling's copies on stream {i} of {k} did not finish within {} s \
                 (synchronizing after queuing them: {e}); {after}",
                CEILING_WAIT.as_secs()
            )
            .into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Copies `len` bytes for each `(src offset, dst offset)` pair, pairs dealt round-robin to
/// the ceiling's threads (walk), or each pair cut into one part per thread (repeat); the
/// runtime ceiling deals whole copies to its streams (see [`Ceiling::runtime_copies`]).
pub(crate) fn memcpy_run(
    c: &Ceiling,
    b: Bufs,
    write: bool,
    pairs: &[(usize, usize)],
    len: usize,
    rounds: usize,
    split: bool,
) -> Res<()> {
    let (src, dst) = if write {
        (b.local, b.remote)
    } else {
        (b.remote, b.local)
    };
    let n = match c {
        Ceiling::Host { threads } => *threads,
        Ceiling::Runtime { .. } => {
            let copies = (0..rounds)
                .flat_map(|_| pairs.iter().map(move |&(so, d)| (src + so, dst + d, len)));
            return c.runtime_copies(copies);
        }
    };
    std::thread::scope(|s| {
        for t in 0..n {
            s.spawn(move || {
                for _ in 0..rounds {
                    if split {
                        let part = len.div_ceil(n);
                        let lo = (t * part).min(len);
                        let hi = ((t + 1) * part).min(len);
                        for &(so, d) in pairs {
                            // SAFETY: the pairs lie inside the two live mappings of `b`,
                            // mapped for the whole benchmark; the threads of one run write
                            // disjoint destination ranges, and no transfer runs meanwhile.
                            unsafe { copy(src + so + lo, dst + d + lo, hi - lo) };
                        }
                    } else {
                        for &(so, d) in pairs.iter().skip(t).step_by(n) {
                            // SAFETY: as above.
                            unsafe { copy(src + so, dst + d, len) };
                        }
                    }
                }
            });
        }
    });
    Ok(())
}

/// `memcpy` of `n` bytes between two mappings of this process.
///
/// # Safety
/// Both ranges lie inside live mappings of this process (a benchmark's local registered
/// buffer and its mapping of the peer's) that stay mapped during the call, they do not
/// overlap, and nothing else writes the destination meanwhile.
pub(crate) unsafe fn copy(src: Addr, dst: Addr, n: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr() as *const u8, dst.as_ptr() as *mut u8, n) };
}
