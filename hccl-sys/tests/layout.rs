//! Layouts and the config initialiser checked against the published ABI facts.

use hccl_sys::*;
use std::mem::{align_of, offset_of, size_of};

#[test]
fn struct_layouts_match_the_c_abi() {
    assert_eq!(
        (size_of::<HcclRootInfo>(), align_of::<HcclRootInfo>()),
        (4108, 1)
    );
    assert_eq!(
        (size_of::<HcclCommConfig>(), align_of::<HcclCommConfig>()),
        (2240, 8)
    );
    let offsets = [
        (offset_of!(HcclCommConfig, hcclBufferSize), 24),
        (offset_of!(HcclCommConfig, hcclDeterministic), 28),
        (offset_of!(HcclCommConfig, hcclCommName), 32),
        (offset_of!(HcclCommConfig, hcclUdi), 160),
        (offset_of!(HcclCommConfig, hcclOpExpansionMode), 288),
        (offset_of!(HcclCommConfig, hcclRdmaTrafficClass), 292),
        (offset_of!(HcclCommConfig, hcclRdmaServiceLevel), 296),
        (offset_of!(HcclCommConfig, hcclWorldRankID), 300),
        (offset_of!(HcclCommConfig, hcclJobID), 304),
        (offset_of!(HcclCommConfig, aclGraphZeroCopyEnable), 312),
        (offset_of!(HcclCommConfig, hcclExecTimeOut), 316),
        (offset_of!(HcclCommConfig, hcclAlgo), 320),
        (offset_of!(HcclCommConfig, hcclRetryEnable), 1920),
        (offset_of!(HcclCommConfig, hcclRetryParams), 1970),
        (offset_of!(HcclCommConfig, hcclBufferName), 2098),
        (offset_of!(HcclCommConfig, hcclQos), 2228),
        (
            offset_of!(HcclCommConfig, hcclSymWinMaxMemSizePerRank),
            2232,
        ),
    ];
    for (i, (got, want)) in offsets.iter().enumerate() {
        assert_eq!(got, want, "field #{i}");
    }
    assert_eq!(
        (
            size_of::<HcclSendRecvItem>(),
            align_of::<HcclSendRecvItem>()
        ),
        (32, 8)
    );
    assert_eq!(offset_of!(HcclSendRecvItem, buf), 8);
    assert_eq!(offset_of!(HcclSendRecvItem, count), 16);
    assert_eq!(offset_of!(HcclSendRecvItem, dataType), 24);
    assert_eq!(offset_of!(HcclSendRecvItem, remoteRank), 28);
    assert_eq!(size_of::<HcclConfigValue>(), 4);
}

#[test]
fn enum_values_match_the_c_abi() {
    assert_eq!(HCCL_E_OOM, 24);
    assert_eq!(HCCL_E_RESERVED, 1042);
    assert_eq!(HCCL_DATA_TYPE_BFP16, 11);
    assert_eq!(HCCL_DATA_TYPE_HIF8, 14);
    assert_eq!(HCCL_DATA_TYPE_FP8E8M0, 17);
    assert_eq!(HCCL_REDUCE_MIN, 3);
    assert_eq!(HCCL_COMM_CONFIG_BUFFER_NAME, 11);
    assert_eq!(HCCL_COMM_STATE_PHASE_INVALID, -1);
}

#[test]
fn config_init_writes_what_the_c_inline_writes() {
    let mut c = HcclCommConfig::default();
    c.hcclCommName[5] = 7; // not named by init: left as it was
    comm_config_init(&mut c);
    let header: Vec<u8> = c.reserved.iter().map(|&b| b as u8).collect();
    assert_eq!(u64::from_ne_bytes(header[0..8].try_into().unwrap()), 2240);
    assert_eq!(
        u32::from_ne_bytes(header[8..12].try_into().unwrap()),
        0xF0F0_F0F0
    );
    assert_eq!(u32::from_ne_bytes(header[12..16].try_into().unwrap()), 10);
    assert_eq!(u64::from_ne_bytes(header[16..24].try_into().unwrap()), 0);
    assert_eq!(c.hcclBufferSize, 0xFFFF_FFFF);
    assert_eq!(c.hcclDeterministic, 0xFFFF_FFFF);
    assert_eq!(c.hcclRdmaTrafficClass, 0xFFFF_FFFF);
    assert_eq!(c.hcclRdmaServiceLevel, 0xFFFF_FFFF);
    assert_eq!(c.hcclExecTimeOut, -1);
    assert_eq!(c.hcclQos, 0xFFFF_FFFF);
    assert_eq!(c.hcclSymWinMaxMemSizePerRank, 16);
    assert_eq!(c.hcclOpExpansionMode, 0);
    assert_eq!(c.hcclCommName[0], 0);
    assert_eq!(c.hcclCommName[5], 7);
}

#[test]
fn table_lists_every_declared_call() {
    for s in [
        "HcclCommSymWinRegister",
        "HcclAllGather",
        "HcclCommInitRootInfoConfig",
        "HcclGetErrorString",
    ] {
        assert!(SYMBOLS.contains(&s), "{s}");
    }
    // SAFETY: libc's initialisers already ran; it exports no HCCL symbol.
    let lib = unsafe { HcclLib::open_paths(&["libc.so.6".into()]) }.unwrap();
    let mut n = 0u32;
    // SAFETY: never reached: the symbol is absent.
    let err = unsafe { lib.HcclGetRankSize(std::ptr::null_mut(), &mut n) }.unwrap_err();
    assert_eq!(err.symbol, "HcclGetRankSize");
}
