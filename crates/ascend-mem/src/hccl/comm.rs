//! [`Comm`]: a communicator, and the stream-ordered collectives.
//!
//! Makes only safe calls: the arguments are checked here (lengths, rank size, devices), and
//! the stream's queue (`StreamQueue::enqueue_collective`, in `collective.rs`) derives the
//! buffer addresses from the mappings it then keeps, with the communicator, until the stream
//! is synchronized; the windows holding the buffers are kept too (see `enqueue`).

use std::fmt;
use std::sync::{Arc, Weak};

use hccl_sys::{HcclComm, HcclLib};
use parking_lot::Mutex;

use super::collective::Collective;
use super::config::{CommConfig, RootInfo};
use super::metrics::CommMetrics;
use super::state::{CommInner, WinInner};
use super::table;
use super::types::{CollectiveBuffer, HcclType, ReduceOp};
use super::HcclCode;
use crate::device::{same_device, Device};
use crate::error::{close_last, CloseError, Error, Result};
use crate::handle::OwnedComm;
use crate::stream::Stream;
use crate::vmm::MappingSlice;

/// An HCCL communicator: this process's rank of a group of `size` ranks
/// (`HcclCommInitRootInfoConfig`); destroyed (`HcclCommDestroy`) when the last owner goes.
///
/// Owners are this handle, every [`SymWindow`](super::SymWindow) registered on it, and every
/// [`Stream`] with collectives of it not yet synchronized, so dropping the handle early is
/// safe: the destroy waits for them. [`Comm::close`] destroys now and reports failure.
///
/// `Send + Sync`: calls made through it take an internal lock (HCCL does not document
/// concurrent calls on one communicator) and bind the device first. Note that a call that
/// waits for the other ranks (window registration) holds the lock while it waits.
///
/// Collectives are stream-ordered: they are queued on a [`Stream`] of the communicator's
/// device and run when the stream reaches them; their failures surface at the stream's
/// synchronize and through [`Comm::async_error`]. Every rank must call the same collectives in
/// the same order with matching arguments.
#[must_use = "dropping a Comm destroys the communicator"]
pub struct Comm {
    pub(crate) inner: Arc<CommInner>,
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm")
            .field("device", &self.inner.dev.id())
            .field("rank", &self.inner.rank)
            .field("size", &self.inner.size)
            .field("raw", &self.inner.comm.as_raw())
            .finish()
    }
}

/// The number of `T` elements in `s`, checking it is a whole number.
fn elems<T: HcclType>(s: &MappingSlice<'_>, api: &'static str, what: &'static str) -> Result<u64> {
    let size = std::mem::size_of::<T>();
    if s.len() % size != 0 {
        return Err(Error::InvalidArgument {
            api,
            what,
            value: s.len() as i128,
        });
    }
    Ok((s.len() / size) as u64)
}

const SEND_NOT_WHOLE: &str = "send length in bytes (not whole elements)";
const RECV_NOT_WHOLE: &str = "receive length in bytes (not whole elements)";

fn length_mismatch(api: &'static str, what: &'static str, value: u64) -> Error {
    Error::InvalidArgument {
        api,
        what,
        value: i128::from(value),
    }
}

impl Comm {
    /// Joins the communicator described by `root` as rank `rank` of `size`, on `dev`
    /// (`HcclCommInitRootInfoConfig`). Every rank must call it (each with its own rank);
    /// it returns once all have joined.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `size` 0 or `rank >= size`, and for a config
    /// [`CommConfig::to_raw`] rejects; [`Error::Load`] when HCCL cannot be opened;
    /// `HcclCommInitRootInfoConfig` failures ([`Error::Hccl`]): `E_PARA` for a bad root info
    /// or config, `E_TIMEOUT` when a rank never joins (after the exec timeout, or
    /// `HCCL_CONNECT_TIMEOUT`).
    #[doc(alias = "HcclCommInitRootInfoConfig")]
    #[doc(alias = "HcclCommInitRootInfo")]
    pub fn init(
        dev: &Device,
        root: &RootInfo,
        rank: u32,
        size: u32,
        config: &CommConfig,
    ) -> Result<Comm> {
        if size == 0 {
            return Err(Error::InvalidArgument {
                api: "HcclCommInitRootInfoConfig",
                what: "nRanks",
                value: 0,
            });
        }
        if rank >= size {
            return Err(Error::InvalidArgument {
                api: "HcclCommInitRootInfoConfig",
                what: "rank (must be below nRanks)",
                value: i128::from(rank),
            });
        }
        let cfg = config.to_raw()?;
        let h = table::table(dev.runtime())?;
        let root = root.to_raw();
        dev.enter()?;
        let _span = tracing::debug_span!("hccl_comm_init", rank, size).entered();
        let raw = OwnedComm::init(h, dev.lib(), size, &root, rank, &cfg)?;
        let comm = Comm {
            inner: Arc::new(CommInner {
                dev: dev.clone(),
                h,
                comm: raw,
                rank,
                size,
                sym_max: config.sym_window_max_per_rank_bytes(),
                lock: Mutex::new(()),
                windows: Mutex::new(Vec::new()),
                metrics: CommMetrics::new(dev.id(), rank),
            }),
        };
        Ok(comm)
    }

    /// This rank (as passed to [`Comm::init`]).
    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// The device this rank runs on.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// The raw handle (borrowed: do not destroy it).
    pub fn as_raw(&self) -> HcclComm {
        self.inner.comm.as_raw()
    }

    /// The symmetric-window maximum per rank, in bytes, from the config.
    pub fn sym_window_max_per_rank(&self) -> usize {
        self.inner.sym_max
    }

    /// Runs `f` with the device bound and the communicator locked.
    pub(crate) fn with_comm<R>(
        &self,
        f: impl FnOnce(&'static HcclLib, &OwnedComm) -> Result<R>,
    ) -> Result<R> {
        self.inner.dev.enter()?;
        let _g = self.inner.lock.lock();
        f(self.inner.h, &self.inner.comm)
    }

    /// The rank count as the library reports it (`HcclGetRankSize`).
    ///
    /// # Errors
    /// An `HcclGetRankSize` failure.
    #[doc(alias = "HcclGetRankSize")]
    pub fn query_size(&self) -> Result<u32> {
        self.with_comm(|h, c| c.rank_size(h, self.inner.dev.lib()))
    }

    /// This rank as the library reports it (`HcclGetRankId`).
    ///
    /// # Errors
    /// An `HcclGetRankId` failure.
    #[doc(alias = "HcclGetRankId")]
    pub fn query_rank(&self) -> Result<u32> {
        self.with_comm(|h, c| c.rank_id(h, self.inner.dev.lib()))
    }

    /// The communicator's name (`HcclGetCommName`): the config's, or one the library made.
    ///
    /// # Errors
    /// An `HcclGetCommName` failure.
    #[doc(alias = "HcclGetCommName")]
    pub fn name(&self) -> Result<String> {
        self.with_comm(|h, c| c.name(h, self.inner.dev.lib()))
    }

    /// The first asynchronous error of this communicator (`HcclGetCommAsyncError`), if any: a
    /// collective that failed on a stream (`E_TIMEOUT`, `E_REMOTE` for a dead or destroyed
    /// peer, `E_PARA` for ranks that disagree on a collective, …).
    ///
    /// # Errors
    /// An `HcclGetCommAsyncError` failure.
    #[doc(alias = "HcclGetCommAsyncError")]
    pub fn async_error(&self) -> Result<Option<HcclCode>> {
        let code = self.with_comm(|h, c| c.async_error(h, self.inner.dev.lib()))?;
        Ok((code != 0).then_some(HcclCode(code)))
    }

    /// Queues `coll` over elements of `T` on `stream` after checking that the stream and
    /// every buffer belong to this communicator's device; the stream's queue keeps the
    /// buffers' mappings and the communicator alive until it is synchronized, and the windows
    /// holding them are kept here.
    fn enqueue<T: HcclType>(
        &self,
        api: &'static str,
        stream: &mut Stream,
        bufs: &[&MappingSlice<'_>],
        coll: Collective<'_>,
    ) -> Result<()> {
        let dev = &self.inner.dev;
        if !same_device(stream.device(), dev) {
            return Err(Error::WrongDevice {
                what: api,
                expected: dev.id(),
                found: stream.device().id(),
            });
        }
        for b in bufs {
            let d = b.mapping().device();
            if !same_device(d, dev) {
                return Err(Error::WrongDevice {
                    what: api,
                    expected: dev.id(),
                    found: d.id(),
                });
            }
        }
        dev.enter()?;
        {
            let _g = self.inner.lock.lock();
            stream
                .queue
                .enqueue_collective::<T>(dev.lib(), &self.inner, coll)?;
        }
        let sent = bufs.first().map_or(0, |b| b.len());
        self.inner.metrics.collective(api, sent);
        for w in self.windows_holding(bufs) {
            stream.keep_other(w);
        }
        Ok(())
    }

    /// The per-rank element count of a gather or scatter: the whole elements of `part`,
    /// after checking that `whole` holds rank size × that many (`mismatch` names the failure).
    fn per_rank_count<T: HcclType>(
        &self,
        api: &'static str,
        (part, part_what): (&MappingSlice<'_>, &'static str),
        (whole, whole_what): (&MappingSlice<'_>, &'static str),
        mismatch: &'static str,
    ) -> Result<u64> {
        let count = elems::<T>(part, api, part_what)?;
        let got = elems::<T>(whole, api, whole_what)?;
        if Some(got) != count.checked_mul(u64::from(self.size())) {
            return Err(length_mismatch(api, mismatch, got));
        }
        Ok(count)
    }

    /// The live windows registered on this communicator over the mappings of `bufs`.
    fn windows_holding(&self, bufs: &[&MappingSlice<'_>]) -> Vec<Arc<WinInner>> {
        let mut wins = self.inner.windows.lock();
        wins.retain(|w| w.strong_count() > 0);
        wins.iter()
            .filter_map(Weak::upgrade)
            .filter(|w| bufs.iter().any(|b| w.holds(b)))
            .collect()
    }

    /// Gathers every rank's `send` into `recv` on every rank, in rank order
    /// (`HcclAllGather`): `recv` holds `size × send` elements of `T`.
    ///
    /// Takes the symmetric path (no staging copy) when on every rank both buffers lie in
    /// registered [`SymWindow`](super::SymWindow)s; otherwise HCCL stages through its buffer.
    /// `send` may be this rank's part of `recv` (in place).
    ///
    /// Buffers are [`TypedSlice<T>`](crate::TypedSlice)s (or byte-level
    /// [`MappingSlice`](crate::MappingSlice)s, see [`CollectiveBuffer`]); the element type
    /// fixes the HCCL data type and the counts.
    ///
    /// # Errors
    /// Checked before any C call: [`Error::InvalidArgument`] when a length is not a whole
    /// number of elements or `recv` is not `size ×` `send`; [`Error::WrongDevice`] for a
    /// stream or buffer of another device. Then `HcclAllGather` failures ([`Error::Hccl`]);
    /// failures while it runs surface at the stream's synchronize.
    #[doc(alias = "HcclAllGather")]
    pub fn all_gather<T: HcclType>(
        &self,
        send: &impl CollectiveBuffer<T>,
        recv: &impl CollectiveBuffer<T>,
        stream: &mut Stream,
    ) -> Result<()> {
        const API: &str = "HcclAllGather";
        let (send, recv) = (&send.byte_view(), &recv.byte_view());
        let count = self.per_rank_count::<T>(
            API,
            (send, SEND_NOT_WHOLE),
            (recv, RECV_NOT_WHOLE),
            "receive length in elements (must be rank size × send length)",
        )?;
        let coll = Collective::AllGather { send, recv, count };
        self.enqueue::<T>(API, stream, &[send, recv], coll)
    }

    /// Reduces `send` (`size ×` `recv` elements) across ranks with `op` and scatters the
    /// result: rank `r` receives block `r` (`HcclReduceScatter`).
    ///
    /// # Errors
    /// As [`Comm::all_gather`], with `send` required to be `size ×` `recv`.
    #[doc(alias = "HcclReduceScatter")]
    pub fn reduce_scatter<T: HcclType>(
        &self,
        send: &impl CollectiveBuffer<T>,
        recv: &impl CollectiveBuffer<T>,
        op: ReduceOp,
        stream: &mut Stream,
    ) -> Result<()> {
        const API: &str = "HcclReduceScatter";
        let (send, recv) = (&send.byte_view(), &recv.byte_view());
        let count = self.per_rank_count::<T>(
            API,
            (recv, RECV_NOT_WHOLE),
            (send, SEND_NOT_WHOLE),
            "send length in elements (must be rank size × receive length)",
        )?;
        let coll = Collective::ReduceScatter {
            send,
            recv,
            count,
            op,
        };
        self.enqueue::<T>(API, stream, &[send, recv], coll)
    }

    /// Reduces `send` across ranks with `op` into `recv` on every rank (`HcclAllReduce`);
    /// `send` and `recv` have the same length and may be the same range (in place).
    ///
    /// # Errors
    /// As [`Comm::all_gather`], with equal lengths required.
    #[doc(alias = "HcclAllReduce")]
    pub fn all_reduce<T: HcclType>(
        &self,
        send: &impl CollectiveBuffer<T>,
        recv: &impl CollectiveBuffer<T>,
        op: ReduceOp,
        stream: &mut Stream,
    ) -> Result<()> {
        const API: &str = "HcclAllReduce";
        let (send, recv) = (&send.byte_view(), &recv.byte_view());
        let count = equal_count::<T>(API, send, recv)?;
        let coll = Collective::AllReduce {
            send,
            recv,
            count,
            op,
        };
        self.enqueue::<T>(API, stream, &[send, recv], coll)
    }

    /// Exchanges blocks between all ranks (`HcclAlltoAll`): `send` and `recv` each hold
    /// `size` equal blocks; block `p` of `send` goes to rank `p`, and block `q` of `recv`
    /// comes from rank `q`. `send` and `recv` may be the same range (in place).
    ///
    /// Takes the symmetric path when on every rank both buffers lie in registered windows
    /// (an A3 supports AllToAll on symmetric memory).
    ///
    /// # Errors
    /// As [`Comm::all_gather`], with equal lengths, a whole number of elements per block,
    /// required.
    #[doc(alias = "HcclAlltoAll")]
    pub fn all_to_all<T: HcclType>(
        &self,
        send: &impl CollectiveBuffer<T>,
        recv: &impl CollectiveBuffer<T>,
        stream: &mut Stream,
    ) -> Result<()> {
        const API: &str = "HcclAlltoAll";
        let (send, recv) = (&send.byte_view(), &recv.byte_view());
        let total = equal_count::<T>(API, send, recv)?;
        let n = u64::from(self.size());
        if total % n != 0 {
            return Err(length_mismatch(
                API,
                "send length in elements (must be a multiple of the rank size)",
                total,
            ));
        }
        let count = total / n;
        let coll = Collective::AllToAll { send, recv, count };
        self.enqueue::<T>(API, stream, &[send, recv], coll)
    }

    /// Copies `root`'s `buf` into `buf` on every other rank (`HcclBroadcast`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `root >= size` or a length that is not whole
    /// elements; otherwise as [`Comm::all_gather`].
    #[doc(alias = "HcclBroadcast")]
    pub fn broadcast<T: HcclType>(
        &self,
        buf: &impl CollectiveBuffer<T>,
        root: u32,
        stream: &mut Stream,
    ) -> Result<()> {
        const API: &str = "HcclBroadcast";
        let buf = &buf.byte_view();
        if root >= self.size() {
            return Err(length_mismatch(
                API,
                "root (must be below the rank size)",
                u64::from(root),
            ));
        }
        let count = elems::<T>(buf, API, "length in bytes (not whole elements)")?;
        let coll = Collective::Broadcast { buf, count, root };
        self.enqueue::<T>(API, stream, &[buf], coll)
    }

    /// Queues a barrier of all ranks on `stream` (`HcclBarrier`).
    ///
    /// # Errors
    /// [`Error::WrongDevice`] for a stream of another device; an `HcclBarrier` failure.
    #[doc(alias = "HcclBarrier")]
    pub fn barrier(&self, stream: &mut Stream) -> Result<()> {
        // No element type is involved: `u8` only satisfies the signature.
        self.enqueue::<u8>("HcclBarrier", stream, &[], Collective::Barrier)
    }

    /// Destroys the communicator now (`HcclCommDestroy`), returning the error and the
    /// communicator on failure.
    ///
    /// # Errors
    /// [`Error::Busy`] while a [`SymWindow`](super::SymWindow) on it or a stream with
    /// unsynchronized collectives of it holds it; an `HcclCommDestroy` failure.
    #[doc(alias = "HcclCommDestroy")]
    pub fn close(self) -> std::result::Result<(), CloseError<Comm>> {
        close_last(self.inner, "Comm", |inner| inner.destroy_now())
            .map_err(|(e, inner)| CloseError::new(e, Comm { inner }))
    }
}

/// The element count of `send`, after checking that `recv` holds as many.
fn equal_count<T: HcclType>(
    api: &'static str,
    send: &MappingSlice<'_>,
    recv: &MappingSlice<'_>,
) -> Result<u64> {
    let count = elems::<T>(send, api, SEND_NOT_WHOLE)?;
    let got = elems::<T>(recv, api, RECV_NOT_WHOLE)?;
    if got != count {
        return Err(length_mismatch(
            api,
            "receive length in elements (must equal the send length)",
            got,
        ));
    }
    Ok(count)
}
