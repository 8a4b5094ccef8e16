//! Struct layouts and constant values checked against the published ABI facts, independently
//! of the layout assertions bindgen writes into the bindings.

use std::mem::{align_of, offset_of, size_of};

#[test]
fn struct_layouts_match_the_c_abi() {
    assert_eq!(
        (
            size_of::<acl_sys::aclrtMemLocation>(),
            align_of::<acl_sys::aclrtMemLocation>()
        ),
        (8, 4)
    );
    assert_eq!(offset_of!(acl_sys::aclrtMemLocation, type_), 4);

    assert_eq!(
        (
            size_of::<acl_sys::aclrtPhysicalMemProp>(),
            align_of::<acl_sys::aclrtPhysicalMemProp>()
        ),
        (32, 8)
    );
    assert_eq!(offset_of!(acl_sys::aclrtPhysicalMemProp, allocationType), 4);
    assert_eq!(offset_of!(acl_sys::aclrtPhysicalMemProp, memAttr), 8);
    assert_eq!(offset_of!(acl_sys::aclrtPhysicalMemProp, location), 12);
    assert_eq!(offset_of!(acl_sys::aclrtPhysicalMemProp, reserve), 24);

    assert_eq!(
        (
            size_of::<acl_sys::aclrtMemFabricHandle>(),
            align_of::<acl_sys::aclrtMemFabricHandle>()
        ),
        (128, 1)
    );

    assert_eq!(
        (
            size_of::<acl_sys::aclrtMemAccessDesc>(),
            align_of::<acl_sys::aclrtMemAccessDesc>()
        ),
        (24, 4)
    );
    assert_eq!(offset_of!(acl_sys::aclrtMemAccessDesc, location), 4);
    assert_eq!(offset_of!(acl_sys::aclrtMemAccessDesc, rsv), 12);

    assert_eq!(
        (
            size_of::<acl_sys::aclrtPtrAttributes>(),
            align_of::<acl_sys::aclrtPtrAttributes>()
        ),
        (28, 4)
    );
    assert_eq!(offset_of!(acl_sys::aclrtPtrAttributes, pageSize), 8);
    assert_eq!(offset_of!(acl_sys::aclrtPtrAttributes, rsv), 12);
    assert_eq!(
        (
            size_of::<acl_sys::aclrtMemcpyBatchAttr>(),
            align_of::<acl_sys::aclrtMemcpyBatchAttr>()
        ),
        (32, 4)
    );
    assert_eq!(offset_of!(acl_sys::aclrtMemcpyBatchAttr, srcLoc), 8);
    assert_eq!(offset_of!(acl_sys::aclrtMemcpyBatchAttr, rsv), 16);
    // C enums are 4-byte ints.
    assert_eq!(size_of::<acl_sys::aclrtMemAttr>(), 4);
    assert_eq!(size_of::<acl_sys::aclrtMemcpyKind>(), 4);
}

#[test]
fn status_codes_and_enum_values_match_the_c_abi() {
    assert_eq!(acl_sys::ACL_ERROR_INVALID_PARAM, 100000);
    assert_eq!(acl_sys::ACL_ERROR_REPEAT_FINALIZE, 100037);
    assert_eq!(acl_sys::ACL_ERROR_BAD_ALLOC, 200000);
    assert_eq!(acl_sys::ACL_ERROR_RT_PARAM_INVALID, 107000);
    assert_eq!(acl_sys::ACL_ERROR_RT_STREAM_ABORT, 107023);
    assert_eq!(acl_sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT, 207000);
    assert_eq!(acl_sys::ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, 507046);
    assert_eq!(acl_sys::ACL_ERROR_RT_SOCKET_CLOSE, 507901);
    assert_eq!(acl_sys::ACL_MEMCPY_INTER_DEVICE_TO_DEVICE, 7);
    assert_eq!(acl_sys::ACL_MEM_ACCESS_USER_SPACE_READONLY, 0x100000);
    assert_eq!(acl_sys::ACL_MEM_P2P_HUGE1G, 17);
    assert_eq!(acl_sys::ACL_MEM_LOCATION_TYPE_HOST_NUMA, 4);
    assert_eq!(acl_sys::ACL_MEM_HANDLE_TYPE_POSIX, 2);
    assert_eq!(acl_sys::ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 2);
    assert_eq!(acl_sys::ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF, 0xFFFF);
    assert_eq!(acl_sys::ACL_RT_MEM_ACCESS_FLAGS_READWRITE, 3);
    assert_eq!(acl_sys::ACL_EVENT_STATUS_NOT_READY, 1);
    assert_eq!(acl_sys::ACL_EVENT_RECORDED_STATUS_COMPLETE, 1);
    assert_eq!(
        (
            acl_sys::ACL_STREAM_WAIT_VALUE_GEQ,
            acl_sys::ACL_STREAM_WAIT_VALUE_EQ,
            acl_sys::ACL_STREAM_WAIT_VALUE_AND,
            acl_sys::ACL_STREAM_WAIT_VALUE_NOR
        ),
        (0, 1, 2, 3)
    );
    assert_eq!(acl_sys::ACL_STREAM_STATUS_RESERVED, 0xFFFF);
    assert_eq!(acl_sys::ACL_EVENT_IPC, 0x40);
    assert_eq!(
        acl_sys::ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION,
        0x2
    );
}

#[test]
fn every_declared_function_is_in_the_table() {
    for name in [
        "aclrtMapMem",
        "aclrtMemExportToShareableHandleV2",
        "aclGetRecentErrMsg",
        "aclFinalizeReference",
        "aclrtMemcpyBatchAsync",
        "aclrtMemcpyBatchAsyncV2",
        "aclrtMemcpyBatch",
        "aclrtMemcpyBatchV2",
        "aclrtValueWrite",
        "aclrtValueWait",
        "aclrtGetSocName",
        "aclsysGetVersionStr",
    ] {
        assert!(
            acl_sys::SYMBOLS.contains(&name),
            "{name} missing from SYMBOLS"
        );
    }
    assert_eq!(acl_sys::SYMBOLS.len(), 78);
}
