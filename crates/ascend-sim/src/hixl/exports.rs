//! The exported `HixlCS*` symbols.

use std::ffi::c_char;

use hixl_sys::*;

use super::{client, server};

/// Writes an out-pointer after checking it for null.
///
/// # Safety
/// `p` null or writable for one `T`.
unsafe fn put_out<T>(p: *mut T, v: T) {
    // SAFETY: checked non-null by the caller; writable per the C contract.
    unsafe { p.write_unaligned(v) }
}

export! { Hixl;
    /// Creates a server for `server_desc` (endpoints HCCS or UB_MEM; `server_port` 0 = never
    /// listen). `config` may be NULL; its `global_resource_config` is ignored.
    fn HixlCSServerCreate(server_desc: *const HixlServerDesc, config: *const HixlServerConfig, server_handle: *mut HixlServerHandle) {
        xensure!(!server_handle.is_null(), HIXL_PARAM_INVALID, "server_handle is NULL");
        // SAFETY: per the C contract.
        let h = unsafe { server::create(server_desc, config) }?;
        // SAFETY: checked non-null.
        unsafe { put_out(server_handle, h) };
        Ok(())
    }
}

export! { Hixl;
    /// Registers emulated device or host memory under a unique tag.
    fn HixlCSServerRegMem(server_handle: HixlServerHandle, mem_tag: *const c_char, mem: *const CommMem, mem_handle: *mut MemHandle) {
        let s = server::lookup(server_handle)?;
        xensure!(!mem_handle.is_null(), HIXL_PARAM_INVALID, "mem_handle is NULL");
        // SAFETY: per the C contract.
        let h = unsafe { s.reg_mem(mem_tag, mem) }?;
        // SAFETY: checked non-null.
        unsafe { put_out(mem_handle, h) };
        Ok(())
    }
}

export! { Hixl;
    /// Starts listening on `server_ip:server_port` (a no-op for port 0).
    fn HixlCSServerListen(server_handle: HixlServerHandle, backlog: u32) {
        server::lookup(server_handle)?.listen(backlog)
    }
}

export! { Hixl;
    /// Unregisters a block (clients that already imported it keep their mapping).
    fn HixlCSServerUnregMem(server_handle: HixlServerHandle, mem_handle: MemHandle) {
        server::lookup(server_handle)?.unreg_mem(mem_handle)
    }
}

export! { Hixl;
    /// Stops listening, closes connections, unregisters what is left.
    fn HixlCSServerDestroy(server_handle: HixlServerHandle) {
        server::destroy(server_handle)
    }
}

export! { Hixl;
    /// Creates a client of `server_ip:server_port` (endpoints HCCS or UB_MEM, equal
    /// protocols). `config` may be NULL; its `global_resource_config` is ignored.
    fn HixlCSClientCreate(client_desc: *const HixlClientDesc, config: *const HixlClientConfig, client_handle: *mut HixlClientHandle) {
        xensure!(!client_handle.is_null(), HIXL_PARAM_INVALID, "client_handle is NULL");
        // SAFETY: per the C contract.
        let h = unsafe { client::create(client_desc, config) }?;
        // SAFETY: checked non-null.
        unsafe { put_out(client_handle, h) };
        Ok(())
    }
}

export! { Hixl;
    /// Connects (retrying until `timeout_ms`) and prefetches the server's memory list.
    fn HixlCSClientConnect(client_handle: HixlClientHandle, timeout_ms: u32) {
        client::lookup(client_handle)?.connect(timeout_ms)
    }
}

export! { Hixl;
    /// The server's memory list with tags (arrays owned by the library until the next call).
    fn HixlCSClientGetRemoteMem(client_handle: HixlClientHandle, remote_mem_list: *mut *mut CommMem, mem_tag_list: *mut *mut *mut c_char, list_num: *mut u32, timeout_ms: u32) {
        let c = client::lookup(client_handle)?;
        // SAFETY: per the C contract.
        unsafe { c.get_remote_mem(remote_mem_list, mem_tag_list, list_num, timeout_ms) }
    }
}

export! { Hixl;
    /// Registers local memory that batches may use as `local_buf` (the tag may be NULL).
    fn HixlCSClientRegMem(client_handle: HixlClientHandle, mem_tag: *const c_char, mem: *const CommMem, mem_handle: *mut MemHandle) {
        let c = client::lookup(client_handle)?;
        let _ = mem_tag;
        xensure!(!mem_handle.is_null(), HIXL_PARAM_INVALID, "mem_handle is NULL");
        // SAFETY: per the C contract.
        let h = unsafe { c.reg_mem(mem) }?;
        // SAFETY: checked non-null.
        unsafe { put_out(mem_handle, h) };
        Ok(())
    }
}

export! { Hixl;
    /// Unregisters local memory.
    fn HixlCSClientUnregMem(client_handle: HixlClientHandle, mem_handle: MemHandle) {
        client::lookup(client_handle)?.unreg_mem(mem_handle)
    }
}

export! { Hixl;
    /// Queues a put batch (local → remote); the handle reports its completion.
    fn HixlCSClientBatchPutAsync(client_handle: HixlClientHandle, list_num: u32, desc_list: *const HixlOneSideOpDesc, complete_handle: *mut CompleteHandle) {
        let c = client::lookup(client_handle)?;
        xensure!(!complete_handle.is_null(), HIXL_PARAM_INVALID, "complete_handle is NULL");
        // SAFETY: per the C contract.
        let h = unsafe { c.batch_async(true, list_num, desc_list) }?;
        // SAFETY: checked non-null.
        unsafe { put_out(complete_handle, h) };
        Ok(())
    }
}

export! { Hixl;
    /// Queues a get batch (remote → local); the handle reports its completion.
    fn HixlCSClientBatchGetAsync(client_handle: HixlClientHandle, list_num: u32, desc_list: *const HixlOneSideOpDesc, complete_handle: *mut CompleteHandle) {
        let c = client::lookup(client_handle)?;
        xensure!(!complete_handle.is_null(), HIXL_PARAM_INVALID, "complete_handle is NULL");
        // SAFETY: per the C contract.
        let h = unsafe { c.batch_async(false, list_num, desc_list) }?;
        // SAFETY: checked non-null.
        unsafe { put_out(complete_handle, h) };
        Ok(())
    }
}

export! { Hixl;
    /// Runs a put batch and waits up to `timeout_ms`.
    fn HixlCSClientBatchPutSync(client_handle: HixlClientHandle, list_num: u32, desc_list: *const HixlOneSideOpDesc, timeout_ms: u32) {
        let c = client::lookup(client_handle)?;
        // SAFETY: per the C contract.
        unsafe { c.batch_sync(true, list_num, desc_list, timeout_ms) }
    }
}

export! { Hixl;
    /// Runs a get batch and waits up to `timeout_ms`.
    fn HixlCSClientBatchGetSync(client_handle: HixlClientHandle, list_num: u32, desc_list: *const HixlOneSideOpDesc, timeout_ms: u32) {
        let c = client::lookup(client_handle)?;
        // SAFETY: per the C contract.
        unsafe { c.batch_sync(false, list_num, desc_list, timeout_ms) }
    }
}

export! { Hixl;
    /// Reports WAITING, COMPLETED, TIMEOUT or FAILED; a finished request is then forgotten.
    fn HixlCSClientQueryCompleteStatus(client_handle: HixlClientHandle, complete_handle: CompleteHandle, complete_status: *mut HixlCompleteStatus) {
        let c = client::lookup(client_handle)?;
        xensure!(!complete_status.is_null(), HIXL_PARAM_INVALID, "complete_status is NULL");
        let s = c.query(complete_handle)?;
        // SAFETY: checked non-null.
        unsafe { put_out(complete_status, s) };
        Ok(())
    }
}

export! { Hixl;
    /// Destroys a client (refused with `HIXL_FAILED` while async batches are in flight).
    fn HixlCSClientDestroy(client_handle: HixlClientHandle) {
        client::destroy(client_handle)
    }
}

symbol_table!(
    hixl_sys, raw_lookup, TABLE_LEN;
    HixlCSServerCreate,
    HixlCSServerRegMem,
    HixlCSServerListen,
    HixlCSServerUnregMem,
    HixlCSServerDestroy,
    HixlCSClientCreate,
    HixlCSClientConnect,
    HixlCSClientGetRemoteMem,
    HixlCSClientRegMem,
    HixlCSClientUnregMem,
    HixlCSClientBatchPutAsync,
    HixlCSClientBatchGetAsync,
    HixlCSClientBatchPutSync,
    HixlCSClientBatchGetSync,
    HixlCSClientQueryCompleteStatus,
    HixlCSClientDestroy,
);

#[cfg(test)]
mod tests {
    #[test]
    fn every_hixl_symbol_is_exported() {
        assert_eq!(super::TABLE_LEN, hixl_sys::SYMBOLS.len());
        for s in hixl_sys::SYMBOLS {
            assert!(!super::raw_lookup(s).is_null(), "{s} missing");
        }
        assert!(super::raw_lookup("HixlCSNoSuchThing").is_null());
    }
}
