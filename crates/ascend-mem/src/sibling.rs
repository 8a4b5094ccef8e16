//! Which library serves a sibling C API (HCCL, HIXL's HixlCS) for a [`Runtime`]: the
//! choice every table over the ACL runtime makes the same way, and the cache that keeps it.
//!
//! Meant for the crates of this workspace that bind such an API (ascend-mem's
//! [`hccl`](crate::hccl) module, ascend-cs's HixlCS wrapper); applications do not need it.
//!
//! The rule, per ACL table:
//! * the in-process emulator (`Runtime::emulated`, feature `emulator`) →
//!   [`LibChoice::InProcess`]: the emulator's own table of that API;
//! * the emulator's shared library opened as ACL (`ASCEND_ACL_LIB=…/libascend_sim.so`), while
//!   the API's own path variable is unset or empty → [`LibChoice::EmulatorFiles`]: the same
//!   file(s) opened again as that API (the emulator exports every symbol);
//! * anything else → [`LibChoice::Search`]: the API's standard search (its path variable,
//!   `$ASCEND_HOME_PATH/lib64`, …).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use acl::AclLib;
use parking_lot::Mutex;

use crate::runtime::{Backend, Runtime};

/// Where the table of a sibling API should come from for one runtime (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LibChoice {
    /// The runtime is the in-process emulator: use the emulator's table. Only made when
    /// ascend-mem's `emulator` feature is on.
    InProcess,
    /// The runtime is the emulator's shared library opened with `dlopen` and the API's path
    /// variable is unset: open these files (the runtime's ACL files, in search order; never
    /// empty) again as the API's library.
    EmulatorFiles(Vec<PathBuf>),
    /// Anything else: the API's standard library search.
    Search,
}

impl LibChoice {
    /// The choice for `rt`, for an API whose explicit library path is read from `path_var`.
    pub fn for_runtime(rt: &Runtime, path_var: &str) -> LibChoice {
        #[cfg(feature = "emulator")]
        if std::ptr::eq(rt.acl(), ascend_sim::acl_table()) {
            return LibChoice::InProcess;
        }
        let explicit = std::env::var_os(path_var).is_some_and(|p| !p.is_empty());
        if let (Backend::EmulatorDl { .. }, false) = (rt.backend(), explicit) {
            if let acl::Source::Dl(libs) = rt.acl().source() {
                if !libs.is_empty() {
                    return LibChoice::EmulatorFiles(libs.iter().map(|(p, _)| p.clone()).collect());
                }
            }
        }
        LibChoice::Search
    }
}

/// The tables of one sibling API chosen so far, one per ACL table (so per runtime backend),
/// kept for the process. Put it in a `static`.
pub struct LibCache<L: 'static> {
    chosen: OnceLock<Mutex<HashMap<usize, &'static L>>>,
}

impl<L: Sync + 'static> LibCache<L> {
    /// An empty cache.
    pub const fn new() -> Self {
        LibCache {
            chosen: OnceLock::new(),
        }
    }

    /// The table serving `rt`: the one chosen before for its ACL table, else what `open`
    /// makes of [`LibChoice::for_runtime`]`(rt, path_var)` (then kept; an error is not, so a
    /// later call tries again). Calls are serialised, so `open` runs once per ACL table.
    ///
    /// # Errors
    /// What `open` returns.
    pub fn get_or_open<E>(
        &self,
        rt: &Runtime,
        path_var: &str,
        open: impl FnOnce(LibChoice) -> Result<&'static L, E>,
    ) -> Result<&'static L, E> {
        let key = rt.acl() as *const AclLib as usize;
        let mut m = self.chosen.get_or_init(Default::default).lock();
        if let Some(t) = m.get(&key) {
            return Ok(t);
        }
        let t = open(LibChoice::for_runtime(rt, path_var))?;
        m.insert(key, t);
        Ok(t)
    }
}

impl<L: Sync + 'static> Default for LibCache<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L> std::fmt::Debug for LibCache<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.chosen.get().map_or(0, |m| m.lock().len());
        f.debug_struct("LibCache").field("chosen", &n).finish()
    }
}
