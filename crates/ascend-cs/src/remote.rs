//! The server's memory list as a client reads it: [`RemoteMem`] blocks with their tags.

use ascend_mem::Addr;

use crate::error::{Error, Result};
use crate::memory::MemKind;

/// One block of the server's memory list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteMem {
    pub(crate) tag: Box<str>,
    pub(crate) kind: MemKind,
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

impl RemoteMem {
    /// The tag the server registered it under.
    pub fn tag(&self) -> &str {
        &self.tag
    }
    /// The kind.
    pub fn kind(&self) -> MemKind {
        self.kind
    }
    /// Its first address in the server process.
    pub fn addr(&self) -> Addr {
        Addr::new(self.addr)
    }
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether it is empty (never, for a real list).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The server's memory list with tags (a copy; the library's arrays are gone after the call).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteMemList {
    pub(crate) items: Vec<RemoteMem>,
}

impl RemoteMemList {
    /// The block tagged `tag`.
    pub fn find(&self, tag: &str) -> Option<&RemoteMem> {
        self.items.iter().find(|m| &*m.tag == tag)
    }

    /// The block tagged `tag`, or [`Error::UnknownTag`] naming the tags there are.
    ///
    /// # Errors
    /// [`Error::UnknownTag`].
    pub fn get(&self, tag: &str) -> Result<&RemoteMem> {
        self.find(tag).ok_or_else(|| Error::UnknownTag {
            tag: tag.into(),
            known: self.items.iter().map(|m| m.tag.to_string()).collect(),
        })
    }

    /// Every block, in the server's order.
    pub fn iter(&self) -> std::slice::Iter<'_, RemoteMem> {
        self.items.iter()
    }

    /// How many blocks.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the server registered nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}
