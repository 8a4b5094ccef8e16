//! The driver's own registered memory: buffers cut into chunks registered one by one, so
//! neighbouring registrations make ranges that span registrations.

use ascend_fabric::{Engine, Registration};
use ascend_mem::prelude::*;
use ascend_mem::{Addr, DeviceBuffer, HostBuffer, MappingSlice};

use super::model::{fill_pattern, Shadow};
use crate::Res;

/// Registration granule of the driver's buffers.
pub(crate) const CHUNK: usize = 2 << 20;

enum Buf {
    Dev(DeviceBuffer),
    Host(HostBuffer),
}

/// One local buffer, its model and the registration of each chunk (if registered).
pub(crate) struct LocalBuf {
    /// Declared before `buf`: registrations go first.
    regs: Vec<Option<Registration>>,
    buf: Buf,
    pub(crate) shadow: Shadow,
}

impl LocalBuf {
    /// A buffer of `chunks` chunks (host DRAM when `host`), holding the pattern of `key`,
    /// with the chunks whose bit is set in `registered` registered.
    pub(crate) fn new(
        eng: &Engine,
        host: bool,
        chunks: usize,
        key: u64,
        registered: u64,
    ) -> Res<LocalBuf> {
        let len = chunks * CHUNK;
        let buf = if host {
            Buf::Host(eng.alloc_host(len)?)
        } else {
            Buf::Dev(eng.alloc_device(len)?)
        };
        let shadow = Shadow::pattern(key, len);
        let mut b = LocalBuf {
            regs: (0..chunks).map(|_| None).collect(),
            buf,
            shadow,
        };
        let mut tmp = vec![0u8; CHUNK];
        for c in 0..chunks {
            fill_pattern(key, c * CHUNK, &mut tmp);
            b.slice(c * CHUNK, CHUNK)?.write_from(&tmp, 0)?;
        }
        for c in 0..chunks {
            if registered & (1 << c) != 0 {
                b.register(eng, c)?;
            }
        }
        Ok(b)
    }

    fn slice(&self, off: usize, len: usize) -> Res<MappingSlice<'_>> {
        Ok(match &self.buf {
            Buf::Dev(b) => b.slice(off..off + len)?,
            Buf::Host(b) => b.slice(off..off + len)?,
        })
    }

    pub(crate) fn addr(&self) -> Addr {
        match &self.buf {
            Buf::Dev(b) => b.addr(),
            Buf::Host(b) => b.addr(),
        }
    }

    pub(crate) fn is_host(&self) -> bool {
        matches!(self.buf, Buf::Host(_))
    }

    pub(crate) fn chunks(&self) -> usize {
        self.regs.len()
    }

    pub(crate) fn is_registered(&self, chunk: usize) -> bool {
        self.regs[chunk].is_some()
    }

    /// Maximal runs of registered chunks as `(offset, len)` in bytes.
    pub(crate) fn runs(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for (c, r) in self.regs.iter().enumerate() {
            if r.is_none() {
                continue;
            }
            match out.last_mut() {
                Some((o, l)) if *o + *l == c * CHUNK => *l += CHUNK,
                _ => out.push((c * CHUNK, CHUNK)),
            }
        }
        out
    }

    pub(crate) fn write(&self, off: usize, src: &[u8]) -> Res<()> {
        Ok(self.slice(off, src.len())?.write_from(src, 0)?)
    }

    pub(crate) fn read(&self, off: usize, len: usize) -> Res<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.slice(off, len)?.read_into(&mut v, 0)?;
        Ok(v)
    }

    /// Registers chunk `c`.
    pub(crate) fn register(&mut self, eng: &Engine, c: usize) -> Result<(), ascend_fabric::Error> {
        let s = match &self.buf {
            Buf::Dev(b) => b.slice(c * CHUNK..(c + 1) * CHUNK)?,
            Buf::Host(b) => b.slice(c * CHUNK..(c + 1) * CHUNK)?,
        };
        let r = eng.register_slice(&s)?;
        self.regs[c] = Some(r);
        Ok(())
    }

    /// Deregisters chunk `c`.
    pub(crate) fn deregister(
        &mut self,
        eng: &Engine,
        c: usize,
    ) -> Result<(), ascend_fabric::Error> {
        if let Some(r) = self.regs[c].take() {
            if let Err((e, r)) = eng.deregister(r).map_err(|e| e.into_parts()) {
                self.regs[c] = Some(r);
                return Err(e);
            }
        }
        Ok(())
    }
}
