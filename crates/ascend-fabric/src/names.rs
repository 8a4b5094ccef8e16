//! Names an engine gives its registrations, offered to connecting peers with the export list
//! (a [`SegmentName`] each), so a peer finds a registration by name instead of by address.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::wire::{SegmentName, MAX_SEGMENT_NAME};

/// What a name names: a registration (`registry::RegInner`), live until removed.
pub(crate) trait Named {
    /// Whether it was removed (its name is free again).
    fn is_removed(&self) -> bool;
    /// Its range, `(addr, len)`, as offered to peers.
    fn range(&self) -> (u64, u64);
}

/// Live names: name → registration (a name whose registration is gone is free again).
pub(crate) struct Names<T> {
    map: Mutex<BTreeMap<String, Weak<T>>>,
}

impl<T> Default for Names<T> {
    fn default() -> Self {
        Names {
            map: Mutex::default(),
        }
    }
}

/// Why `name` cannot name a registration, if it cannot.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > MAX_SEGMENT_NAME {
        "longer than 256 bytes"
    } else if name.chars().any(char::is_control) {
        "contains a control character"
    } else {
        return Ok(());
    };
    Err(Error::BadName {
        name: name.chars().take(MAX_SEGMENT_NAME).collect(),
        reason,
    })
}

fn live<T: Named>(w: &Weak<T>) -> Option<Arc<T>> {
    w.upgrade().filter(|r| !r.is_removed())
}

impl<T: Named> Names<T> {
    /// Whether `name` is free, or names `reg` already.
    pub(crate) fn available(&self, name: &str, reg: Option<&Arc<T>>) -> Result<()> {
        check_name(name)?;
        match self.map.lock().get(name).and_then(live) {
            Some(other) if reg.map_or(true, |r| !Arc::ptr_eq(r, &other)) => Err(Error::BadName {
                name: name.to_owned(),
                reason: "names another live registration",
            }),
            _ => Ok(()),
        }
    }

    /// Names `reg` `name` (a registration may have several names).
    pub(crate) fn insert(&self, name: &str, reg: &Arc<T>) -> Result<()> {
        let mut map = self.map.lock();
        if let Some(other) = map.get(name).and_then(live) {
            if !Arc::ptr_eq(&other, reg) {
                return Err(Error::BadName {
                    name: name.to_owned(),
                    reason: "names another live registration",
                });
            }
        }
        map.retain(|_, w| live(w).is_some());
        map.insert(name.to_owned(), Arc::downgrade(reg));
        Ok(())
    }

    /// The names of live registrations, as offered to peers.
    pub(crate) fn offered(&self) -> Vec<SegmentName> {
        self.map
            .lock()
            .iter()
            .filter_map(|(name, w)| {
                let (va_addr, len) = live(w)?.range();
                Some(SegmentName {
                    len,
                    name: name.clone(),
                    va_addr,
                })
            })
            .collect()
    }
}
