//! Layouts and the endpoint initialiser checked against the published ABI facts.

use hixl_sys::*;
use std::mem::{align_of, offset_of, size_of};

#[test]
fn struct_layouts_match_the_c_abi() {
    assert_eq!(
        (
            size_of::<HixlServerConfig>(),
            align_of::<HixlServerConfig>()
        ),
        (128, 8)
    );
    assert_eq!(offset_of!(HixlServerConfig, reserved), 8);
    assert_eq!(
        (
            size_of::<HixlClientConfig>(),
            align_of::<HixlClientConfig>()
        ),
        (128, 8)
    );
    assert_eq!(
        (size_of::<HixlClientDesc>(), align_of::<HixlClientDesc>()),
        (128, 8)
    );
    assert_eq!(offset_of!(HixlClientDesc, remote_endpoint), 8);
    assert_eq!(offset_of!(HixlClientDesc, server_ip), 16);
    assert_eq!(offset_of!(HixlClientDesc, server_port), 24);
    assert_eq!(offset_of!(HixlClientDesc, tc), 28);
    assert_eq!(offset_of!(HixlClientDesc, sl), 29);
    assert_eq!(offset_of!(HixlClientDesc, reserved), 30);
    assert_eq!(
        (size_of::<HixlServerDesc>(), align_of::<HixlServerDesc>()),
        (128, 8)
    );
    assert_eq!(offset_of!(HixlServerDesc, server_ip), 8);
    assert_eq!(offset_of!(HixlServerDesc, server_port), 16);
    assert_eq!(offset_of!(HixlServerDesc, endpoint_list_num), 20);
    assert_eq!(offset_of!(HixlServerDesc, reserved), 24);
    assert_eq!(
        (
            size_of::<HixlOneSideOpDesc>(),
            align_of::<HixlOneSideOpDesc>()
        ),
        (24, 8)
    );
    assert_eq!(offset_of!(HixlOneSideOpDesc, remote_buf), 0);
    assert_eq!(offset_of!(HixlOneSideOpDesc, local_buf), 8);
    assert_eq!(offset_of!(HixlOneSideOpDesc, len), 16);
    assert_eq!((size_of::<CommMem>(), align_of::<CommMem>()), (24, 8));
    assert_eq!(offset_of!(CommMem, addr), 8);
    assert_eq!(offset_of!(CommMem, size), 16);
    assert_eq!((size_of::<CommAddr>(), align_of::<CommAddr>()), (40, 4));
    assert_eq!(
        (size_of::<EndpointLoc>(), align_of::<EndpointLoc>()),
        (64, 4)
    );
    assert_eq!(
        (size_of::<EndpointDesc>(), align_of::<EndpointDesc>()),
        (160, 4)
    );
    assert_eq!(offset_of!(EndpointDesc, commAddr), 4);
    assert_eq!(offset_of!(EndpointDesc, loc), 44);
    assert_eq!(offset_of!(EndpointDesc, raws), 108);
}

#[test]
fn endpoint_loc_device_fields_sit_where_the_c_union_puts_them() {
    let mut loc = EndpointLoc::default();
    loc.__bindgen_anon_1.device = EndpointLocDevice {
        devPhyId: 1,
        superDevId: 2,
        serverIdx: 3,
        superPodIdx: 4,
    };
    // SAFETY: EndpointLoc is plain data; we only read its bytes.
    let bytes: [u8; 64] = unsafe { std::mem::transmute(loc) };
    let word = |off: usize| u32::from_ne_bytes(bytes[off..off + 4].try_into().unwrap());
    assert_eq!([word(4), word(8), word(12), word(16)], [1, 2, 3, 4]);
}

#[test]
fn status_codes_and_enums() {
    assert_eq!(
        [
            HIXL_SUCCESS,
            HIXL_PARAM_INVALID,
            HIXL_TIMEOUT,
            HIXL_UNSUPPORTED,
            HIXL_RESOURCE_EXHAUSTED,
            HIXL_FAILED
        ],
        [0, 103900, 103901, 103905, 203900, 503900]
    );
    assert_eq!(HIXL_COMPLETE_STATUS_FAILED, 3);
    assert_eq!(COMM_PROTOCOL_UB_MEM, 6);
    assert_eq!(COMM_PROTOCOL_UBG, 9);
    assert_eq!(COMM_ADDR_TYPE_EID, 3);
    assert_eq!(COMM_MEM_TYPE_HOST, 1);
}

#[test]
fn endpoint_desc_init_matches_the_c_inline() {
    let mut eps = [EndpointDesc::default(); 2];
    assert_eq!(endpoint_desc_init(&mut eps), 0);
    for e in eps {
        assert_eq!(e.protocol, -1);
        assert_eq!(e.commAddr.type_, -1);
        assert_eq!(e.loc.locType, -1);
        // SAFETY: plain data; we only read its bytes.
        let bytes: [u8; 160] = unsafe { std::mem::transmute(e) };
        assert!(bytes[4..8].iter().all(|&b| b == 0xFF)); // union bytes after the type
        assert!(bytes[108..].iter().all(|&b| b == 0xFF));
    }
    assert_eq!(endpoint_desc_init(&mut []), HCOMM_E_PTR);
}

#[test]
fn table_lists_every_call_and_a_missing_symbol_is_an_error() {
    assert_eq!(SYMBOLS.len(), 16);
    // SAFETY: libc's initialisers already ran; it exports no HIXL symbol.
    let lib = unsafe { HixlLib::open_path("libc.so.6".as_ref()) }.unwrap();
    // SAFETY: never reached: the symbol is absent.
    let err = unsafe { lib.HixlCSClientDestroy(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(err.symbol, "HixlCSClientDestroy");
}
