//! HCCL data types and reduction kernels.

use hccl_sys::*;

use super::error::{herr, HRes};

/// An element type the emulator moves and reduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DType {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    I128,
}

impl DType {
    /// Decodes an `HcclDataType`: the fp8/hif8 kinds answer `HCCL_E_NOT_SUPPORT`, unknown
    /// values `HCCL_E_PARA`.
    pub(crate) fn from_raw(dt: HcclDataType) -> HRes<DType> {
        Ok(match dt {
            HCCL_DATA_TYPE_INT8 => DType::I8,
            HCCL_DATA_TYPE_INT16 => DType::I16,
            HCCL_DATA_TYPE_INT32 => DType::I32,
            HCCL_DATA_TYPE_INT64 => DType::I64,
            HCCL_DATA_TYPE_UINT8 => DType::U8,
            HCCL_DATA_TYPE_UINT16 => DType::U16,
            HCCL_DATA_TYPE_UINT32 => DType::U32,
            HCCL_DATA_TYPE_UINT64 => DType::U64,
            HCCL_DATA_TYPE_FP16 => DType::F16,
            HCCL_DATA_TYPE_BFP16 => DType::BF16,
            HCCL_DATA_TYPE_FP32 => DType::F32,
            HCCL_DATA_TYPE_FP64 => DType::F64,
            HCCL_DATA_TYPE_INT128 => DType::I128,
            HCCL_DATA_TYPE_HIF8
            | HCCL_DATA_TYPE_FP8E4M3
            | HCCL_DATA_TYPE_FP8E5M2
            | HCCL_DATA_TYPE_FP8E8M0 => {
                return Err(herr(
                    HCCL_E_NOT_SUPPORT,
                    format!("dataType {dt} (an fp8/hif8 kind) is not supported by the emulator"),
                ))
            }
            _ => {
                return Err(herr(
                    HCCL_E_PARA,
                    format!("dataType {dt} is not an HcclDataType"),
                ))
            }
        })
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
            DType::I128 => 16,
        }
    }
}

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ROp {
    Sum,
    Prod,
    Max,
    Min,
}

impl ROp {
    pub(crate) fn from_raw(op: HcclReduceOp) -> HRes<ROp> {
        Ok(match op {
            HCCL_REDUCE_SUM => ROp::Sum,
            HCCL_REDUCE_PROD => ROp::Prod,
            HCCL_REDUCE_MAX => ROp::Max,
            HCCL_REDUCE_MIN => ROp::Min,
            _ => {
                return Err(herr(
                    HCCL_E_PARA,
                    format!("op {op} is not an HcclReduceOp (SUM 0, PROD 1, MAX 2, MIN 3)"),
                ))
            }
        })
    }
}

/// `acc[i] = f(acc[i], src[i])` for `n` elements of `T` (unaligned).
///
/// # Safety
/// `acc` is valid for reads and writes and `src` for reads of `n` elements of `T`; the ranges
/// do not overlap.
#[inline]
unsafe fn combine<T: Copy>(acc: *mut u8, src: *const u8, n: usize, f: impl Fn(T, T) -> T) {
    let a = acc.cast::<T>();
    let b = src.cast::<T>();
    for i in 0..n {
        // SAFETY: in bounds per the contract; unaligned accesses are used throughout.
        unsafe {
            let x = a.add(i).read_unaligned();
            let y = b.add(i).read_unaligned();
            a.add(i).write_unaligned(f(x, y));
        }
    }
}

macro_rules! int_ops {
    ($t:ty, $op:expr, $acc:expr, $src:expr, $n:expr) => {
        // SAFETY: forwarded from `combine_any`'s contract.
        unsafe {
            match $op {
                ROp::Sum => combine::<$t>($acc, $src, $n, |x, y| x.wrapping_add(y)),
                ROp::Prod => combine::<$t>($acc, $src, $n, |x, y| x.wrapping_mul(y)),
                ROp::Max => combine::<$t>($acc, $src, $n, |x, y| x.max(y)),
                ROp::Min => combine::<$t>($acc, $src, $n, |x, y| x.min(y)),
            }
        }
    };
}

macro_rules! float_ops {
    ($t:ty, $op:expr, $acc:expr, $src:expr, $n:expr) => {
        // SAFETY: forwarded from `combine_any`'s contract.
        unsafe {
            match $op {
                ROp::Sum => combine::<$t>($acc, $src, $n, |x, y| x + y),
                ROp::Prod => combine::<$t>($acc, $src, $n, |x, y| x * y),
                ROp::Max => combine::<$t>($acc, $src, $n, |x, y| x.max(y)),
                ROp::Min => combine::<$t>($acc, $src, $n, |x, y| x.min(y)),
            }
        }
    };
}

/// One step of a reduction on 16-bit floats: widen to f32, apply, round back (nearest even).
fn half_step(op: ROp, x: f32, y: f32) -> f32 {
    match op {
        ROp::Sum => x + y,
        ROp::Prod => x * y,
        ROp::Max => x.max(y),
        ROp::Min => x.min(y),
    }
}

/// `acc = op(acc, src)` element-wise for `n` elements of `dt`.
///
/// # Safety
/// As for [`combine`].
unsafe fn combine_any(dt: DType, op: ROp, acc: *mut u8, src: *const u8, n: usize) {
    match dt {
        DType::I8 => int_ops!(i8, op, acc, src, n),
        DType::I16 => int_ops!(i16, op, acc, src, n),
        DType::I32 => int_ops!(i32, op, acc, src, n),
        DType::I64 => int_ops!(i64, op, acc, src, n),
        DType::U8 => int_ops!(u8, op, acc, src, n),
        DType::U16 => int_ops!(u16, op, acc, src, n),
        DType::U32 => int_ops!(u32, op, acc, src, n),
        DType::U64 => int_ops!(u64, op, acc, src, n),
        DType::I128 => int_ops!(i128, op, acc, src, n),
        DType::F32 => float_ops!(f32, op, acc, src, n),
        DType::F64 => float_ops!(f64, op, acc, src, n),
        DType::F16 => {
            // SAFETY: forwarded.
            unsafe {
                combine::<u16>(acc, src, n, |x, y| {
                    let r = half_step(
                        op,
                        half::f16::from_bits(x).to_f32(),
                        half::f16::from_bits(y).to_f32(),
                    );
                    half::f16::from_f32(r).to_bits()
                })
            }
        }
        DType::BF16 => {
            // SAFETY: forwarded.
            unsafe {
                combine::<u16>(acc, src, n, |x, y| {
                    let r = half_step(
                        op,
                        half::bf16::from_bits(x).to_f32(),
                        half::bf16::from_bits(y).to_f32(),
                    );
                    half::bf16::from_f32(r).to_bits()
                })
            }
        }
    }
}

/// Block size of [`reduce_into`] (bytes; a multiple of every element size).
const BLOCK: usize = 64 << 10;

/// `dst = srcs[0] op srcs[1] op ...` (in that order) over `bytes` bytes of `dt`. Each block of
/// every source is read before the block of `dst` is written, so `dst` may be one of the
/// sources (same offsets).
///
/// # Safety
/// Every source is readable and `dst` writable for `bytes` bytes; `bytes` is a multiple of the
/// element size.
pub(crate) unsafe fn reduce_into(
    dst: *mut u8,
    srcs: &[*const u8],
    bytes: usize,
    dt: DType,
    op: ROp,
) {
    let es = dt.size();
    let mut acc = vec![0u8; BLOCK.min(bytes)];
    let mut off = 0;
    while off < bytes {
        let len = BLOCK.min(bytes - off);
        // SAFETY: in bounds per the contract; `acc` is a private buffer of at least `len`.
        unsafe {
            std::ptr::copy_nonoverlapping(srcs[0].add(off), acc.as_mut_ptr(), len);
            for s in &srcs[1..] {
                combine_any(dt, op, acc.as_mut_ptr(), s.add(off), len / es);
            }
            std::ptr::copy_nonoverlapping(acc.as_ptr(), dst.add(off), len);
        }
        off += len;
    }
}
