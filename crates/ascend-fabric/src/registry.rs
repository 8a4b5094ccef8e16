//! Local memory registrations: what peers may read and write, and what local descriptor
//! addresses resolve to.
//!
//! A registration covers `[addr, addr + len)` of one or more *blocks* (whole allocations as
//! mapped). Each block is exported once (FABRIC, `DISABLE_PID_VALIDATION`) and offered to peers
//! whole, as HIXL does: an importer maps exactly the allocation's size. Blocks are shared
//! between registrations and live as long as any registration (or in-flight transfer) uses
//! them. Memory of ascend-mem buffers is kept mapped through a [`MappingRef`]; foreign VMM
//! memory is retained (`aclrtMemRetainAllocationHandle`) and mapped again into the engine's VA
//! pool, so copies never touch a range its owner may unmap.

use ascend_cs::MemKind;
use ascend_mem::prelude::*;
use ascend_mem::{Addr, CloseError};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use ascend_mem::{
    Access, Device, DeviceBuffer, ExportFlags, HostBuffer, Mapping, MappingRef, MappingSlice,
    MappingTable, PhysicalMem, ShareKind, SharedHandle,
};
use parking_lot::{RwLock, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::names::{Named, Names};
use crate::pool::{SlotMapping, VaPool};
use crate::ranges::{RangeError, RangeMap};
use crate::wire::ShareHandleEntry;

/// Memory that can be registered with an engine: ascend-mem buffers, mappings, views of
/// them, and lists of these that together form one contiguous range of one reservation (a KV
/// cache mapped piece by piece into one `ReservedVa`). Plain host memory (`Vec`, `Box`, the
/// stack) cannot be: peers could never import it.
pub trait Registrable {
    /// The byte ranges to register as one, in address order.
    fn regions(&self) -> Vec<MappingSlice<'_>>;
}

impl Registrable for DeviceBuffer {
    fn regions(&self) -> Vec<MappingSlice<'_>> {
        vec![self.as_slice()]
    }
}

impl Registrable for HostBuffer {
    fn regions(&self) -> Vec<MappingSlice<'_>> {
        vec![self.as_slice()]
    }
}

impl Registrable for Mapping {
    fn regions(&self) -> Vec<MappingSlice<'_>> {
        vec![self.as_slice()]
    }
}

impl Registrable for MappingSlice<'_> {
    fn regions(&self) -> Vec<MappingSlice<'_>> {
        vec![*self]
    }
}

impl<R: Registrable> Registrable for [R] {
    fn regions(&self) -> Vec<MappingSlice<'_>> {
        self.iter().flat_map(|r| r.regions()).collect()
    }
}

impl<R: Registrable, const N: usize> Registrable for [R; N] {
    fn regions(&self) -> Vec<MappingSlice<'_>> {
        self[..].regions()
    }
}

impl<R: Registrable> Registrable for Vec<R> {
    fn regions(&self) -> Vec<MappingSlice<'_>> {
        self[..].regions()
    }
}

pub(crate) enum BlockMap {
    /// An ascend-mem mapping, kept mapped.
    Held(MappingRef),
    /// A foreign allocation mapped again in the engine's VA pool.
    Alias(SlotMapping),
}

/// One allocation as mapped in this process, exported once.
pub(crate) struct Block {
    /// The address peers see (the owner's mapping).
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) host: bool,
    map: BlockMap,
    shared: SharedHandle,
}

impl Block {
    /// The mapping copies go through; it maps the whole block from its start.
    pub(crate) fn mapping(&self) -> &Mapping {
        match &self.map {
            BlockMap::Held(m) => m.mapping(),
            BlockMap::Alias(s) => s.mapping(),
        }
    }
}

pub(crate) struct RegInner {
    pub(crate) id: u64,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) kind: MemKind,
    /// Transfers submitted and not yet observed complete that use this registration.
    pub(crate) in_flight: AtomicUsize,
    blocks: Vec<Arc<Block>>,
    /// Set by the first removal (a deregistration, then the last handle's drop, would
    /// otherwise revoke twice).
    removed: AtomicBool,
}

impl RegInner {
    /// Whether the registration was deregistered (or its last handle dropped).
    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }
}

impl Named for RegInner {
    fn is_removed(&self) -> bool {
        RegInner::is_removed(self)
    }

    fn range(&self) -> (u64, u64) {
        (self.addr, self.len)
    }
}

/// A local segment: part of a registration inside one block.
#[derive(Clone)]
pub(crate) struct LocalSeg {
    pub(crate) reg: Arc<RegInner>,
    pub(crate) block: Arc<Block>,
}

/// Registrations a pending transfer uses; counted in their `in_flight` until dropped.
pub(crate) struct RegUse(pub(crate) Vec<Arc<RegInner>>);

impl RegUse {
    /// Adds `r` (consecutive duplicates are skipped).
    pub(crate) fn add(&mut self, r: &Arc<RegInner>) {
        if self.0.last().is_some_and(|l| Arc::ptr_eq(l, r)) {
            return;
        }
        r.in_flight.fetch_add(1, Ordering::AcqRel);
        self.0.push(r.clone());
    }
}

impl Drop for RegUse {
    fn drop(&mut self) {
        for r in &self.0 {
            r.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[derive(Default)]
pub(crate) struct RegState {
    /// `ranges`' segments as a copy table (entry i = segment i), built by the first transfer
    /// after a change; every change to `ranges` clears it.
    pub(crate) table: OnceLock<MappingTable>,
    pub(crate) ranges: RangeMap<LocalSeg>,
    exact: HashMap<(u64, u64), (u64, Weak<RegHandle>)>,
    blocks: BTreeMap<u64, Weak<Block>>,
}

impl RegState {
    /// The local segments as a copy table (entry i = segment i, viewing exactly the
    /// segment's bytes of its block's mapping).
    pub(crate) fn table(&self, dev: &Device) -> Result<&MappingTable> {
        if let Some(t) = self.table.get() {
            return Ok(t);
        }
        let mut views = Vec::with_capacity(self.ranges.len());
        let mut blocks: Vec<Arc<Block>> = Vec::new();
        for s in self.ranges.segments() {
            let b = &s.value.block;
            let at = (s.start - b.base) as usize;
            views.push(b.mapping().slice(at..at + s.len as usize)?);
            if !blocks.last().is_some_and(|l| Arc::ptr_eq(l, b)) {
                blocks.push(b.clone());
            }
        }
        // The table holds the blocks too, so a block whose mapping sits in a pool slot gives
        // the slot back only once the table (and any copy queued from it) is gone.
        let t = MappingTable::with_keepalive(dev, views, blocks)?;
        Ok(self.table.get_or_init(|| t))
    }
}

/// Called with the bases of blocks no registration covers any more, after the registry's
/// lock is released: the engine closes the sessions of the peers that imported them.
pub(crate) type RevokeHook = Box<dyn Fn(&[u64]) + Send + Sync>;

pub(crate) struct Registry {
    dev: Device,
    pool: Arc<VaPool>,
    pub(crate) state: RwLock<RegState>,
    /// Names given to registrations, offered to peers.
    pub(crate) names: Names<RegInner>,
    next_id: AtomicU64,
    revoke: OnceLock<RevokeHook>,
}

struct RegHandle {
    reg: Arc<RegInner>,
    registry: Weak<Registry>,
}

impl Drop for RegHandle {
    fn drop(&mut self) {
        if let Some(r) = self.registry.upgrade() {
            r.remove(&self.reg);
        }
    }
}

/// A registered range. Cheap to clone: clones are the same registration.
///
/// Registering the same range again returns the same registration. When the last clone is
/// dropped (or [`Engine::deregister`](crate::Engine::deregister) succeeds) the range is no
/// longer offered to new peers nor accepted in new descriptors. Transfers already submitted
/// keep the memory (and this registration's bookkeeping) alive until they are observed
/// complete, so dropping a registration never frees memory under a copy:
/// [`Engine::deregister`](crate::Engine::deregister) reports [`Error::Busy`] instead while
/// transfers use it, and a plain drop defers the release.
///
/// The value is the registration: a result left unused deregisters at once, which the
/// compiler points out.
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # fn f(engine: &ascend_fabric::Engine, kv: &ascend_mem::DeviceBuffer) -> ascend_fabric::Result<()> {
/// engine.register(kv)?; // error: unused `Registration` that must be used
/// # Ok(())
/// # }
/// ```
///
/// ```
/// #![deny(unused_must_use)]
/// # fn f(engine: &ascend_fabric::Engine, kv: &ascend_mem::DeviceBuffer) -> ascend_fabric::Result<()> {
/// let _kv_reg = engine.register(kv)?; // registered until `_kv_reg` goes
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use = "dropping the last Registration clone deregisters the memory (once no transfer uses it) and closes the sessions of peers that imported it"]
pub struct Registration {
    h: Arc<RegHandle>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("addr", &format_args!("{:#x}", self.h.reg.addr))
            .field("len", &self.h.reg.len)
            .field("kind", &self.h.reg.kind)
            .finish()
    }
}

impl PartialEq for Registration {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.h.reg, &other.h.reg)
    }
}
impl Eq for Registration {}

impl Registration {
    /// First registered address.
    pub fn addr(&self) -> Addr {
        Addr::new(self.h.reg.addr)
    }

    /// Registered length.
    pub fn len(&self) -> usize {
        self.h.reg.len as usize
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.h.reg.len == 0
    }

    /// Device or host memory.
    pub fn kind(&self) -> MemKind {
        self.h.reg.kind
    }

    /// Transfers currently using this registration.
    pub fn in_flight(&self) -> usize {
        self.h.reg.in_flight.load(Ordering::Acquire)
    }

    /// The registration's shared state.
    pub(crate) fn inner(&self) -> &Arc<RegInner> {
        &self.h.reg
    }
}

fn not_shareable(addr: u64, len: u64, e: impl std::fmt::Display) -> Error {
    Error::NotShareable {
        addr: Addr::new(addr),
        len: len as usize,
        reason: e.to_string(),
    }
}

impl Registry {
    pub(crate) fn new(dev: &Device, pool: Arc<VaPool>) -> Arc<Registry> {
        Arc::new(Registry {
            dev: dev.clone(),
            pool,
            state: RwLock::new(RegState::default()),
            names: Default::default(),
            next_id: AtomicU64::new(1),
            revoke: OnceLock::new(),
        })
    }

    /// The export list offered to connecting peers: every block of every live registration.
    pub(crate) fn share_list(&self) -> Vec<ShareHandleEntry> {
        let st = self.state.read();
        st.blocks
            .values()
            .filter_map(Weak::upgrade)
            .map(|b| ShareHandleEntry {
                va_addr: b.base,
                len: b.len,
                share_handle: *b.shared.raw_data(),
            })
            .collect()
    }

    /// Number of live registrations.
    pub(crate) fn count(&self) -> usize {
        self.state
            .read()
            .exact
            .values()
            .filter(|(_, w)| w.strong_count() > 0)
            .count()
    }

    fn existing(
        st: &mut RegState,
        addr: u64,
        len: u64,
    ) -> std::result::Result<Option<Registration>, Error> {
        if let Some((id, w)) = st.exact.get(&(addr, len)) {
            if let Some(h) = w.upgrade() {
                return Ok(Some(Registration { h }));
            }
            // Being dropped right now: finish its removal here.
            let id = *id;
            Self::remove_locked(st, id, addr, len);
        }
        let end = addr
            .checked_add(len)
            .ok_or(Error::Range(RangeError::Overflow {
                addr: Addr::new(addr),
                len: len as usize,
            }))?;
        let i = st.ranges.segments().partition_point(|s| s.end() <= addr);
        if let Some(s) = st.ranges.segments().get(i) {
            if s.start < end {
                return Err(Error::RegistrationOverlap {
                    addr: Addr::new(addr),
                    len: len as usize,
                    existing: Addr::new(s.value.reg.addr),
                });
            }
        }
        Ok(None)
    }

    /// Checks that `parts` are views of this engine's device and runtime, non-empty, of one
    /// memory kind, and lie back to back in one reservation; returns the range they cover.
    fn check_span(&self, parts: &[MappingSlice<'_>]) -> Result<(u64, u64)> {
        let first = parts.first().ok_or(Error::BadSpan {
            index: 0,
            addr: Addr::NULL,
            reason: "no memory given",
        })?;
        let (addr, va, host) = (
            first.addr().get(),
            first.mapping().reservation().as_raw(),
            first.mapping().is_host(),
        );
        let mut end = addr;
        for (index, p) in parts.iter().enumerate() {
            let map = p.mapping();
            let found = map.device().id();
            let what = if !std::ptr::eq(map.device().runtime().acl(), self.dev.runtime().acl()) {
                Some("register: the memory belongs to another runtime")
            } else if found != self.dev.id() {
                Some("register: the memory belongs to another device than the engine's")
            } else {
                None
            };
            if let Some(what) = what {
                let expected = self.dev.id();
                return Err(Error::Mem(ascend_mem::Error::WrongDevice {
                    what,
                    expected,
                    found,
                }));
            }
            let at = p.addr().get();
            let bad = |reason| Error::BadSpan {
                index,
                addr: p.addr(),
                reason,
            };
            if p.is_empty() {
                return Err(if parts.len() == 1 {
                    Error::Range(RangeError::Empty { addr: p.addr() })
                } else {
                    bad("empty")
                });
            }
            if map.reservation().as_raw() != va {
                return Err(bad("lies in another reservation than part 0"));
            }
            if map.is_host() != host {
                return Err(bad(
                    "is of another memory kind (host or device) than part 0",
                ));
            }
            if at != end {
                return Err(bad("does not start where the previous part ends"));
            }
            end = at + p.len() as u64;
        }
        Ok((addr, end - addr))
    }

    /// Registers views of ascend-mem mappings that together form one contiguous range of
    /// one reservation (usually one view): one block per mapping, each exported once.
    pub(crate) fn register_slices(
        self: &Arc<Self>,
        parts: &[MappingSlice<'_>],
    ) -> Result<Registration> {
        let (addr, len) = self.check_span(parts)?;
        let _span = tracing::debug_span!("register", addr, len, parts = parts.len()).entered();
        let mut st = self.state.write();
        if let Some(r) = Self::existing(&mut st, addr, len)? {
            return Ok(r);
        }
        let mut blocks: Vec<Arc<Block>> = Vec::with_capacity(parts.len());
        for p in parts {
            let map = p.mapping();
            let base = map.as_raw() as u64;
            if blocks.last().is_some_and(|b| b.base == base) {
                continue; // two views of one mapping
            }
            let block = match st.blocks.get(&base).and_then(Weak::upgrade) {
                Some(b) => b,
                None => {
                    let shared = map
                        .memory()
                        .export_cached(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)?;
                    let b = Arc::new(Block {
                        base,
                        len: map.len() as u64,
                        host: map.is_host(),
                        map: BlockMap::Held(map.hold()),
                        shared,
                    });
                    st.blocks.insert(base, Arc::downgrade(&b));
                    b
                }
            };
            blocks.push(block);
        }
        let kind = MemKind::host_if(blocks[0].host);
        Ok(self.insert(&mut st, addr, len, kind, blocks))
    }

    /// Registers foreign VMM memory by address, block by block.
    pub(crate) fn register_raw(self: &Arc<Self>, addr: u64, len: u64) -> Result<Registration> {
        if len == 0 {
            return Err(Error::Range(RangeError::Empty {
                addr: Addr::new(addr),
            }));
        }
        let end = addr
            .checked_add(len)
            .ok_or(Error::Range(RangeError::Overflow {
                addr: Addr::new(addr),
                len: len as usize,
            }))?;
        let _span = tracing::debug_span!("register", addr, len, foreign = true).entered();
        let mut st = self.state.write();
        if let Some(r) = Self::existing(&mut st, addr, len)? {
            return Ok(r);
        }
        let mut blocks = Vec::new();
        let mut cur = addr;
        while cur < end {
            let (base, size) = self
                .dev
                .address_range(Addr::new(cur))
                .map_err(|e| not_shareable(addr, len, e))?;
            let (base, size) = (base.get(), size as u64);
            if size == 0 || base > cur || base + size <= cur {
                return Err(not_shareable(addr, len, "the runtime reported no block"));
            }
            let block = match st.blocks.get(&base).and_then(Weak::upgrade) {
                Some(b) => b,
                None => {
                    let b = Arc::new(self.foreign_block(base, size, addr, len)?);
                    st.blocks.insert(base, Arc::downgrade(&b));
                    b
                }
            };
            blocks.push(block);
            cur = base + size;
        }
        let kind = MemKind::host_if(blocks[0].host);
        Ok(self.insert(&mut st, addr, len, kind, blocks))
    }

    fn foreign_block(&self, base: u64, size: u64, addr: u64, len: u64) -> Result<Block> {
        let mem = PhysicalMem::retain(&self.dev, Addr::new(base))
            .map_err(|e| not_shareable(addr, len, e))?;
        let shared = mem.export_cached(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)?;
        let alias = self.pool.map(&self.dev, &mem)?;
        let host = mem.is_host();
        if host {
            alias
                .mapping()
                .set_device_access(&self.dev, Access::ReadWrite)?;
        }
        Ok(Block {
            base,
            len: size,
            host,
            map: BlockMap::Alias(alias),
            shared,
        })
    }

    fn insert(
        self: &Arc<Self>,
        st: &mut RegState,
        addr: u64,
        len: u64,
        kind: MemKind,
        blocks: Vec<Arc<Block>>,
    ) -> Registration {
        let reg = Arc::new(RegInner {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            addr,
            len,
            kind,
            in_flight: AtomicUsize::new(0),
            blocks: blocks.clone(),
            removed: AtomicBool::new(false),
        });
        let end = addr + len;
        for b in &blocks {
            let s = addr.max(b.base);
            let e = end.min(b.base + b.len);
            // Overlap was excluded above and blocks do not overlap each other.
            st.table = OnceLock::new();
            if let Err(e) = st.ranges.insert(
                s,
                e - s,
                LocalSeg {
                    reg: reg.clone(),
                    block: b.clone(),
                },
            ) {
                tracing::error!(error = %e, "registry segments overlap (bug)");
            }
        }
        let h = Arc::new(RegHandle {
            reg: reg.clone(),
            registry: Arc::downgrade(self),
        });
        st.exact.insert((addr, len), (reg.id, Arc::downgrade(&h)));
        tracing::debug!(addr, len, ?kind, blocks = blocks.len(), "registered");
        Registration { h }
    }

    fn remove_locked(st: &mut RegState, id: u64, addr: u64, len: u64) {
        let starts: Vec<u64> = st
            .ranges
            .segments()
            .iter()
            .filter(|s| s.value.reg.id == id)
            .map(|s| s.start)
            .collect();
        st.table = OnceLock::new();
        for s in starts {
            st.ranges.remove(s);
        }
        if st.exact.get(&(addr, len)).is_some_and(|(i, _)| *i == id) {
            st.exact.remove(&(addr, len));
        }
        st.blocks.retain(|_, w| w.strong_count() > 0);
    }

    /// Sets what happens to blocks that no registration covers any more (once).
    pub(crate) fn on_revoke(&self, hook: RevokeHook) {
        let _ = self.revoke.set(hook);
    }

    /// The blocks of `reg` that no remaining registration covers: no longer offered to new
    /// peers. Returns their bases.
    fn orphaned(st: &mut RegState, reg: &RegInner) -> Vec<u64> {
        let segs = st.ranges.segments();
        let mut gone = Vec::new();
        for b in &reg.blocks {
            // Segments never overlap and lie inside their block, so any segment starting
            // inside the block's range belongs to it.
            let i = segs.partition_point(|s| s.start < b.base);
            if !segs.get(i).is_some_and(|s| s.start < b.base + b.len) {
                gone.push(b.base);
            }
        }
        for base in &gone {
            st.blocks.remove(base);
        }
        gone
    }

    /// Removes `reg`, then revokes the blocks it leaves uncovered (without the lock held:
    /// revoking waits for the peers).
    fn remove_and_revoke(&self, mut st: RwLockWriteGuard<'_, RegState>, reg: &RegInner) {
        if reg.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        Self::remove_locked(&mut st, reg.id, reg.addr, reg.len);
        let gone = Self::orphaned(&mut st, reg);
        drop(st);
        tracing::debug!(
            addr = reg.addr,
            len = reg.len,
            revoked = gone.len(),
            "deregistered"
        );
        if let (false, Some(hook)) = (gone.is_empty(), self.revoke.get()) {
            hook(&gone);
        }
    }

    pub(crate) fn remove(&self, reg: &RegInner) {
        self.remove_and_revoke(self.state.write(), reg);
    }

    /// Deregisters now unless transfers use it.
    pub(crate) fn deregister(
        &self,
        reg: Registration,
    ) -> std::result::Result<(), CloseError<Registration, Error>> {
        let _span =
            tracing::debug_span!("deregister", addr = reg.addr().get(), len = reg.len()).entered();
        let st = self.state.write();
        let n = reg.h.reg.in_flight.load(Ordering::Acquire);
        if n > 0 {
            drop(st);
            return Err(CloseError::new(
                Error::Busy {
                    what: "registration",
                    in_flight: n,
                },
                reg,
            ));
        }
        self.remove_and_revoke(st, &reg.h.reg);
        Ok(())
    }
}
