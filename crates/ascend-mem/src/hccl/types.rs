//! Element types and reduction operators of the collectives.

use std::fmt;

use crate::typed::TypedSlice;
use crate::vmm::MappingSlice;

/// An HCCL data type (`HcclDataType`). A newtype with the C values as constants; the element
/// types of the safe collectives name theirs through [`HcclType::DATA_TYPE`].
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct DataType(pub u32);

macro_rules! data_types {
    ($($name:ident = $c:ident;)*) => {
        impl DataType {
            $(
                #[doc = concat!("`", stringify!($c), "`")]
                pub const $name: DataType = DataType(hccl_sys::$c);
            )*

            /// The C name of a known type.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( hccl_sys::$c => Some(stringify!($c)), )*
                    _ => None,
                }
            }
        }
    };
}

data_types! {
    INT8 = HCCL_DATA_TYPE_INT8;
    INT16 = HCCL_DATA_TYPE_INT16;
    INT32 = HCCL_DATA_TYPE_INT32;
    FP16 = HCCL_DATA_TYPE_FP16;
    FP32 = HCCL_DATA_TYPE_FP32;
    INT64 = HCCL_DATA_TYPE_INT64;
    UINT64 = HCCL_DATA_TYPE_UINT64;
    UINT8 = HCCL_DATA_TYPE_UINT8;
    UINT16 = HCCL_DATA_TYPE_UINT16;
    UINT32 = HCCL_DATA_TYPE_UINT32;
    FP64 = HCCL_DATA_TYPE_FP64;
    BFP16 = HCCL_DATA_TYPE_BFP16;
    INT128 = HCCL_DATA_TYPE_INT128;
    HIF8 = HCCL_DATA_TYPE_HIF8;
    FP8E4M3 = HCCL_DATA_TYPE_FP8E4M3;
    FP8E5M2 = HCCL_DATA_TYPE_FP8E5M2;
    FP8E8M0 = HCCL_DATA_TYPE_FP8E8M0;
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "HcclDataType {}", self.0),
        }
    }
}

/// A reduction operator (`HcclReduceOp`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `HCCL_REDUCE_SUM`.
    Sum,
    /// `HCCL_REDUCE_PROD`.
    Prod,
    /// `HCCL_REDUCE_MAX`.
    Max,
    /// `HCCL_REDUCE_MIN`.
    Min,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    /// The C value.
    pub fn raw(self) -> hccl_sys::HcclReduceOp {
        match self {
            ReduceOp::Sum => hccl_sys::HCCL_REDUCE_SUM,
            ReduceOp::Prod => hccl_sys::HCCL_REDUCE_PROD,
            ReduceOp::Max => hccl_sys::HCCL_REDUCE_MAX,
            ReduceOp::Min => hccl_sys::HCCL_REDUCE_MIN,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    pub trait SealedBuffer {}
}

/// An element type the safe collectives accept: `i8`, `i16`, `i32`, `i64`, `i128`, `u8`,
/// `u16`, `u32`, `u64`, `f32`, `f64`, [`half::f16`] (`FP16`) and [`half::bf16`] (`BFP16`).
///
/// Sealed, and every implementor is [`bytemuck::Pod`] (no padding, every bit pattern valid), so
/// typed views and copies ([`TypedSlice`]) work on it. fp8/hif8 have no Rust type here; use
/// the raw table for them ([`crate::Runtime::hccl`]).
pub trait HcclType: sealed::Sealed + bytemuck::Pod + Send + Sync + 'static {
    /// The HCCL data type of this element.
    const DATA_TYPE: DataType;
}

macro_rules! hccl_types {
    ($($t:ty => $d:ident,)*) => {
        $(
            impl sealed::Sealed for $t {}
            impl HcclType for $t {
                const DATA_TYPE: DataType = DataType::$d;
            }
        )*
    };
}

hccl_types! {
    i8 => INT8,
    i16 => INT16,
    i32 => INT32,
    i64 => INT64,
    i128 => INT128,
    u8 => UINT8,
    u16 => UINT16,
    u32 => UINT32,
    u64 => UINT64,
    f32 => FP32,
    f64 => FP64,
    half::f16 => FP16,
    half::bf16 => BFP16,
}

/// A buffer a collective accepts for elements of `T`: a [`TypedSlice<T>`](crate::TypedSlice)
/// (aligned and a whole number of `T`, checked when it was made) or a byte-level
/// [`MappingSlice`] (its length is checked to be whole elements on each call, as before
/// typed views existed). Sealed: only those two.
///
/// The element type of a typed view must be the collective's: views of different element
/// types are refused at compile time, whether `T` is inferred or named.
///
/// ```compile_fail,E0277
/// # use ascend_mem::{hccl::Comm, Stream, TypedSlice};
/// # fn f(c: &Comm, send: TypedSlice<'_, u32>, recv: TypedSlice<'_, f32>, s: &mut Stream) {
/// let _ = c.all_gather(&send, &recv, s); // u32 into f32
/// # }
/// ```
///
/// ```compile_fail,E0277
/// # use ascend_mem::{hccl::Comm, Stream, TypedSlice};
/// # fn f(c: &Comm, buf: TypedSlice<'_, u32>, s: &mut Stream) {
/// let _ = c.all_reduce::<f32>(&buf, &buf, ascend_mem::hccl::ReduceOp::Sum, s);
/// # }
/// ```
pub trait CollectiveBuffer<T: HcclType>: sealed::SealedBuffer {
    /// The byte view of the buffer.
    fn byte_view(&self) -> MappingSlice<'_>;
}

impl sealed::SealedBuffer for MappingSlice<'_> {}

impl<T: HcclType> CollectiveBuffer<T> for MappingSlice<'_> {
    fn byte_view(&self) -> MappingSlice<'_> {
        *self
    }
}

impl<T> sealed::SealedBuffer for TypedSlice<'_, T> {}

impl<T: HcclType> CollectiveBuffer<T> for TypedSlice<'_, T> {
    fn byte_view(&self) -> MappingSlice<'_> {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_types() {
        let v = [1.5f32, -2.0, 3.25];
        assert_eq!(bytemuck::cast_slice::<f32, u8>(&v).len(), 12);
        let h = [half::bf16::from_f32(1.0), half::bf16::from_f32(-0.5)];
        let b: &[u8] = bytemuck::cast_slice(&h);
        assert_eq!(bytemuck::cast_slice::<u8, half::bf16>(b), h);
        assert_eq!(<i128 as HcclType>::DATA_TYPE, DataType::INT128);
        assert_eq!(DataType::FP16.to_string(), "HCCL_DATA_TYPE_FP16");
        assert_eq!(DataType(13).to_string(), "HcclDataType 13");
    }
}
