//! [`HcclCode`]: the `HcclResult` status newtype.

use std::fmt;

use super::kind::ErrorKind;

/// An HCCL status (`HcclResult`, a C `unsigned int`).
///
/// A newtype, not an enum: a newer library can return values this crate has never seen, and
/// they must survive unchanged. [`Display`](fmt::Display) prints the C name next to the number
/// when the code is known.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HcclCode(pub u32);

macro_rules! hccl_codes {
    ($($name:ident = $c:ident;)*) => {
        impl HcclCode {
            $(
                #[doc = concat!("`", stringify!($c), "`")]
                pub const $name: HcclCode = HcclCode(hccl_sys::$c);
            )*

            /// The C name of a known code.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( hccl_sys::$c => Some(stringify!($c)), )*
                    _ => None,
                }
            }
        }
    };
}

hccl_codes! {
    SUCCESS = HCCL_SUCCESS;
    E_PARA = HCCL_E_PARA;
    E_PTR = HCCL_E_PTR;
    E_MEMORY = HCCL_E_MEMORY;
    E_INTERNAL = HCCL_E_INTERNAL;
    E_NOT_SUPPORT = HCCL_E_NOT_SUPPORT;
    E_NOT_FOUND = HCCL_E_NOT_FOUND;
    E_UNAVAIL = HCCL_E_UNAVAIL;
    E_SYSCALL = HCCL_E_SYSCALL;
    E_TIMEOUT = HCCL_E_TIMEOUT;
    E_OPEN_FILE_FAILURE = HCCL_E_OPEN_FILE_FAILURE;
    E_TCP_CONNECT = HCCL_E_TCP_CONNECT;
    E_ROCE_CONNECT = HCCL_E_ROCE_CONNECT;
    E_TCP_TRANSFER = HCCL_E_TCP_TRANSFER;
    E_ROCE_TRANSFER = HCCL_E_ROCE_TRANSFER;
    E_RUNTIME = HCCL_E_RUNTIME;
    E_DRV = HCCL_E_DRV;
    E_PROFILING = HCCL_E_PROFILING;
    E_CCE = HCCL_E_CCE;
    E_NETWORK = HCCL_E_NETWORK;
    E_AGAIN = HCCL_E_AGAIN;
    E_REMOTE = HCCL_E_REMOTE;
    E_SUSPENDING = HCCL_E_SUSPENDING;
    E_OPRETRY_FAIL = HCCL_E_OPRETRY_FAIL;
    E_OOM = HCCL_E_OOM;
    E_IN_STATUS = HCCL_E_IN_STATUS;
}

impl HcclCode {
    /// Whether this is `HCCL_SUCCESS`.
    pub fn is_success(self) -> bool {
        self == Self::SUCCESS
    }

    /// The coarse class of this code: `E_TIMEOUT` → [`ErrorKind::Timeout`]; `E_PARA`,
    /// `E_PTR`, `E_NOT_FOUND` → [`ErrorKind::InvalidArgument`]; `E_NOT_SUPPORT` →
    /// [`ErrorKind::NotSupported`]; `E_MEMORY`, `E_OOM` → [`ErrorKind::OutOfMemory`];
    /// everything else (`E_REMOTE`, `E_INTERNAL`, network and driver codes, …) →
    /// [`ErrorKind::Other`].
    pub fn kind(self) -> ErrorKind {
        match self {
            Self::E_TIMEOUT => ErrorKind::Timeout,
            Self::E_PARA | Self::E_PTR | Self::E_NOT_FOUND => ErrorKind::InvalidArgument,
            Self::E_NOT_SUPPORT => ErrorKind::NotSupported,
            Self::E_MEMORY | Self::E_OOM => ErrorKind::OutOfMemory,
            _ => ErrorKind::Other,
        }
    }
}

impl fmt::Display for HcclCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "HCCL error {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_name_themselves_and_classify() {
        assert_eq!(HcclCode::E_PARA.to_string(), "HCCL_E_PARA (1)");
        assert_eq!(HcclCode(999).to_string(), "HCCL error 999");
        assert_eq!(HcclCode::E_TIMEOUT.kind(), ErrorKind::Timeout);
        assert_eq!(HcclCode::E_PTR.kind(), ErrorKind::InvalidArgument);
        assert_eq!(HcclCode::E_NOT_SUPPORT.kind(), ErrorKind::NotSupported);
        assert_eq!(HcclCode::E_OOM.kind(), ErrorKind::OutOfMemory);
        assert_eq!(HcclCode::E_MEMORY.kind(), ErrorKind::OutOfMemory);
        assert_eq!(HcclCode::E_REMOTE.kind(), ErrorKind::Other);
        assert!(HcclCode::SUCCESS.is_success());
    }
}
