//! `ascend-sim`: an emulator of the Ascend CANN ACL runtime and HCCL on host memory.
//!
//! It exports every C symbol of [`acl_sys::SYMBOLS`] with the exact signature of
//! [`acl_sys::fn_types`], so the same loader tables work against it in-process ([`acl_table`],
//! [`lookup`]) or as a shared library (`libascend_sim.so`, e.g. `ASCEND_ACL_LIB=…/libascend_sim.so`),
//! which also lets C programs run on it. There is no NPU: "device memory" is host memory, but the
//! emulator enforces the real argument rules (stated in words in ascend-mem's crate docs, "The
//! VMM rules, by label") and returns the real codes, so it is a test bed rather than an "accept
//! anything" stub.
//!
//! # Model
//! * **Handles** (physical memory, streams, events, contexts) are tagged ids looked up in
//!   registries, never dereferenced: a wrong-kind, stale or foreign handle gets
//!   `ACL_ERROR_RT_INVALID_HANDLE` (107017).
//! * **Reservation** = one `mmap(PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE)` aligned to
//!   2 MiB. **Physical memory** = one sealed memfd per allocation (data from offset 4096, a
//!   metadata page first), charged against the device's HBM or the host cap. **Map** =
//!   `mmap(MAP_SHARED|MAP_FIXED)` of the memfd; **unmap** overlays `PROT_NONE` again, so a use
//!   after unmap faults as on a device. A mapping keeps its memory alive: `aclrtFreePhysical` of a
//!   mapped handle succeeds and the memory lives until the last mapping goes.
//! * **Copies** (`aclrtMemcpy*`, `aclrtMemset*`) check `count <= destMax`, that each range lies
//!   entirely in known memory with the needed access, and the kind against what the pointers are:
//!   device memory (a mapping of DEVICE memory, `aclrtMalloc`), device-accessible host memory
//!   (a mapping of HOST/HOST_NUMA memory, `aclrtMallocHost`; valid on both sides of
//!   DEVICE_TO_DEVICE, as HIXL uses it, and as the host side of H2D/D2H), or plain host memory
//!   (unknown addresses; host side only). Async copies are checked at submission and again at
//!   execution under the read lock of the address table, so a racing unmap cannot fault.
//! * **Sharing**: all processes on the host form one emulated supernode. DEFAULT (`u64`) and
//!   FABRIC (128-byte) handles encode the exporter's pid, fd and inode; import uses
//!   `pidfd_open` + `pidfd_getfd` (or `dup` in-process), checks the inode and the header magic,
//!   and honours the pid allow-list kept in the memfd's header page. The first export calls
//!   `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)` so same-user importers may take the descriptor
//!   under Yama `ptrace_scope` 1. Where `pidfd_getfd` is refused (a container whose seccomp
//!   profile gates it on `CAP_SYS_PTRACE`, as Docker's default does; Yama scope 2; another
//!   user) the importer asks the exporter's descriptor broker, an abstract Unix socket that
//!   hands over the emulator's memfds with `SCM_RIGHTS` to peers of the same user or root;
//!   without an answer the import fails with `ACL_ERROR_RT_NO_PERMISSION` 207006.
//!   `ASCEND_SIM_SHARE_VIA=broker` uses the broker first.
//! * **Streams**: `threaded` mode runs one worker thread per stream (spins 50 µs, then parks);
//!   `deterministic` mode runs queued work on the caller's thread at synchronize, query and wait
//!   points. A NULL stream is the current context's default stream.
//! * **Batched copies** (`aclrtMemcpyBatch[Async][V2]`): every check (arrays, attribute runs,
//!   `rsv`, each copy's size, memory and location, one direction per batch: host-to-device or
//!   device-to-host) before any byte moves; `failIndex` names the failing copy (`SIZE_MAX`
//!   otherwise). The async forms queue one task for the whole batch. Rules and codes in the
//!   `vmm::batch` module docs.
//! * **Stream-ordered values**: `aclrtValueWrite` stores a `u64` when the stream reaches it;
//!   `aclrtValueWait` stops the stream until the word satisfies GEQ (wrapping), EQ, AND or NOR.
//!   The word must be an 8-byte aligned word of device-accessible memory. A blocked wait spins
//!   briefly, then parks on a notification every value write triggers and rechecks every 2 ms
//!   (so a host store to the word releases it too); an abort or destroy of its stream ends it.
//! * Every export, ACL, HCCL and HIXL alike, runs through one entry guard: it catches panics
//!   (507000 with a message for ACL, `HCCL_E_INTERNAL`, `HIXL_FAILED`), counts calls, can be
//!   failed or hidden ([`fault`], `ASCEND_SIM_FAIL`) and is logged ([`call_log`]). Calls that
//!   return no status (`aclGetRecentErrMsg`, `HcclGetErrorString`, …) return a fixed fallback
//!   when failed (NULL, "unknow error", 0). Every failing ACL call sets a thread-local message naming
//!   the call, the argument and its value (`aclGetRecentErrMsg`, which returns and clears it, or
//!   NULL when there is none; the pointer stays valid until the next `aclGetRecentErrMsg` on the
//!   thread) and the last-error code (`aclrtGetLastError` clears it, `aclrtPeekAtLastError` not).
//!
//! # Environment (read once, at the first call)
//! | variable | meaning | default |
//! |---|---|---|
//! | `ASCEND_SIM_DEVICES` | number of devices (1..=64) | 16 |
//! | `ASCEND_SIM_SOC` | product: `A3`, `A2`, `950`, or a SoC name HIXL knows (`Ascend910_9391`, `Ascend910B3`, …; any name containing `Ascend950`), reported by `aclrtGetSocName` (an alias reports its family's first name: `Ascend910_9391`, `Ascend910B1`, `Ascend950`). FABRIC handles and `aclrtReserveMemAddressNoUCMemory` only on A3; `expectPtr` NULL-only on 950 | `A3` (`Ascend910_9391`) |
//! | `ASCEND_SIM_HBM_BYTES` | HBM capacity per device, charged by `aclrtMallocPhysical` (DEVICE) and `aclrtMalloc` | 1 GiB |
//! | `ASCEND_SIM_HOST_BYTES` | cap for HOST/HOST_NUMA physical memory | 4 GiB |
//! | `ASCEND_SIM_STREAM_MODE` | `threaded` or `deterministic` | `threaded` |
//! | `ASCEND_SIM_CALL_NS` | host cost of each runtime copy submission (`aclrtMemcpyAsync`, and each copy of an `aclrtMemcpyBatchAsync`), in ns: a busy wait in the calling thread, modelling the real runtime's per-call cost for benchmarks of the submission-bound regime | 0 (none) |
//! | `ASCEND_SIM_FAIL` | `sym:n[:code][,sym:n[:code]]`: the n-th call of `sym` (any ACL, HCCL or HIXL symbol) fails with `code` (`-2147483648`: panics) | code 507899, `HCCL_E_INTERNAL`, `HIXL_FAILED` |
//! | `ASCEND_SIM_CALL_LOG` | `1` turns the call log on | off |
//! | `ASCEND_SIM_HOST` | the emulated host this process is on (memory shared with another host's process follows the cross-host rules of the `share` module: FABRIC within the supernode, DEFAULT within the host; the rule is checked once the memory is reached, so an import that cannot reach it, through the broker across network namespaces, fails with 207006 first) | 0 |
//! | `ASCEND_SIM_SUPERNODE` | the supernode of that host | 0 |
//! | `HCCL_IF_IP` | the IPv4 address the HCCL root's rendezvous listens on and its root info carries (HCCL's variable for its bootstrap address; on several emulated hosts, the host's own) | `127.0.0.1` |
//! | `ASCEND_SIM_IMPORT` | `cross-process`: an import of device memory in the process that exported it fails with `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` 207000 (CANN documents imports as cross-process; host memory stays importable in-process, as HIXL's engine does it on A3); `any` allows it (tests of two engines in one process need that) | `any` |
//!
//! Capacities are accounted per process; the kernel never decides (memfd pages are only
//! allocated on touch, and the caps bound what can be touched).
//!
//! # Codes
//! Rules with a code confirmed in the open ACL/runtime layers:
//! R1, R5, R6, R7, R9, R12, R16 and null out-pointers → `ACL_ERROR_INVALID_PARAM` 100000;
//! R13 (export flags > 1, V2 share type ∉ {1, 2}) → `ACL_ERROR_RT_PARAM_INVALID` 107000 (V1
//! `handleType` ≠ NONE → 100000); R14 FABRIC export without a current context →
//! `ACL_ERROR_RT_CONTEXT_NULL` 107002; FABRIC on a non-A3 product, R4 on a non-A3 product and
//! R4 with a NULL `expectPtr` → `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` 207000; calls that need a current context → 107002;
//! bad device ids → `ACL_ERROR_RT_INVALID_DEVICEID` 107001; peer-access `flags` ≠ 0 → 200006;
//! stream/event timeouts → 507046 / 507047; aborted stream → 107023 once; aclInit twice → 100002;
//! finalize without init → 100037.
//!
//! **Our choices where the real code is unconfirmed** (driver-level "doc" rules):
//! * `ACL_ERROR_RT_PARAM_INVALID` 107000 for every violated doc rule: R2 (`alignment` ≠ 0),
//!   reservation size not a 2 MiB multiple, R3 (`expectPtr` outside [16 TiB, 24 TiB), unaligned,
//!   or non-NULL on 950), R4 argument errors, R8 (physical size not a multiple of the
//!   granularity), R10 (map size ≠ physical size or not a multiple of the minimum
//!   granularity, offset ≠ 0, address unaligned, outside one reservation, overlapping a
//!   mapping), R15 (second export of the same allocation in a process,
//!   or re-export of imported memory), release of a reservation with live mappings, unmap or
//!   retain of an address that is not a mapping start, a copy kind that does not match the
//!   pointers, frees of addresses that are not block starts.
//! * Out of memory (HBM or host cap) → `ACL_ERROR_RT_MEMORY_ALLOCATION` 207001; a busy
//!   `expectPtr` → 207001 too.
//! * Import when the exporter is gone, freed its memory, or the handle is stale (R18) →
//!   `ACL_ERROR_RT_INVALID_HANDLE` 107017; garbage FABRIC bytes → 107000; importer not in the
//!   allow-list → `ACL_ERROR_RT_NO_PERMISSION` 207006.
//! * Across emulated hosts: a FABRIC handle from another supernode →
//!   `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` 207000; a DEFAULT handle from another host →
//!   `ACL_ERROR_RT_INVALID_HANDLE` 107017 (the sources of each rule: the `share` module).
//! * A copy touching unmapped VA inside a reservation, running past a block, or into memory
//!   without access → `ACL_ERROR_RT_DEVICE_MEM_ERROR` 507053 (at execution for async copies:
//!   reported by the next synchronize of the stream).
//! * R11 (mixing devices or local/imported handles in one reservation) is **not** enforced: HIXL
//!   does it and whether the driver checks it is unconfirmed.
//! * `aclrtFreePhysical` of a mapped handle succeeds (the mapping keeps the memory alive).
//! * `aclrtDestroyStream` runs the queued work first (a [`testing::hold_stream`] makes it wait);
//!   aborted or discarded event records complete their event so no waiter hangs.
//! * An event that was never recorded is COMPLETE for both query calls.
//! * Value write/wait: NULL `devAddr`, a write `flag` ≠ 0 or a wait `flag` > 3 → 100000; an
//!   unaligned `devAddr` → `ACL_ERROR_RT_ADDR_UNALIGNED` 107008; plain host memory → 107000;
//!   unmapped or inaccessible memory → 507053. Destroying a stream ends its blocked wait (the
//!   work behind it still runs, as destroy runs queued work).
//! * Counters count explicit contexts only (`aclrtCreateContext`), not the per-device default
//!   contexts of `aclrtSetDevice`; aclInit is not required before other calls.
//!
//! # Where each rule comes from
//! Every ACL rule the emulator enforces, and the public fact behind it. "ACL" and "RT": checked
//! in the open ACL or runtime layer (hicann/runtime `src/acl`, `src/runtime`), with that code;
//! "header": the parameter text of `acl/acl_rt.h`; "API reference": the runtime's API
//! reference (`docs/zh/api_ref`), which states the rule but not the code the driver returns;
//! "HIXL": what HIXL's FabricMem code does and depends on; **ours**: no public fact states the
//! rule, and the emulator is strict where the driver's behaviour is not known.
//!
//! | rule | source |
//! |---|---|
//! | R1 reservation `size` non-zero, `flags` 0 or 1 (100000) | ACL |
//! | R2 `alignment` 0 | API reference; the code 107000 is ours |
//! | a reservation's `size` is a multiple of 2 MiB | **ours** (the API reference says only "not 0") |
//! | R3 a fixed `expectPtr` lies in [16 TiB, 24 TiB) and is aligned (a power of two for sizes under 1 GiB, else 1 GiB); NULL only on 950 | API reference; code ours |
//! | R4 NoUC: A3 only, and a NULL `expectPtr`, are 207000 | header ("return not support if be nullptr"); HIXL falls back to `aclrtReserveMemAddress` on exactly this code |
//! | R4 NoUC `size` a non-zero multiple of 1 GiB | API reference; code ours |
//! | R4 NoUC `expectPtr` 1 GiB aligned | **ours** (R3's rule for sizes of 1 GiB and more) |
//! | R5–R7 `aclrtMallocPhysical` arguments, properties and attributes (100000) | ACL |
//! | R8 a physical size that is not whole granules of its kind is refused | API reference (it asks for aligned sizes, "to save memory"); HIXL relies on a refusal: its host allocation asks for 1 GiB pages first and falls back to 2 MiB pages when they are refused; the code 107000 is ours |
//! | R10 map size equal to the allocation's size and a multiple of the minimum granularity, `offset` 0 | API reference |
//! | R10 the mapped address 2 MiB aligned, inside one reservation, overlapping no mapping | **ours** |
//! | R11 (one device, one kind of handle per reservation) | not enforced: HIXL breaks it and nothing public says the driver checks it |
//! | R12, R16 NULL export/import arguments, import `flags` 0 (100000) | ACL |
//! | R13 export `flags` ≤ 1, V2 share type DEFAULT or FABRIC (107000) | RT |
//! | R14 FABRIC export needs a current context (107002) | RT |
//! | R14 FABRIC only on A3 | API reference (cross-server sharing is Atlas A3 only); the code 207000 is ours |
//! | R15 one export per allocation per process; imported memory not re-exported | API reference; code ours |
//! | R17 a V2 import lands on the current device | RT |
//! | R18 an import needs the exporter alive and its memory not freed | API reference; code ours |
//! | R19 mapped host memory is reached by a device only after `aclrtMemSetAccess` | API reference and HIXL (it sets access after mapping host memory) |
//! | R20 a reservation is released only with no mapping in it | API reference; code ours |
//! | copies: `count` ≤ `destMax`; the kind matches the pointers; device-accessible host memory on either side of DEVICE_TO_DEVICE | API reference; the last is HIXL's use; codes ours |
//! | batched copies are host-to-device or device-to-host, one direction per batch | API reference |
//! | value write/wait `flag` (write 0, wait 0..=3) | header |
//! | value write/wait on an 8-byte aligned word of device-accessible memory | **ours** |
//! | `aclrtGetSocName` names | HIXL (its SoC tables) |
//! | `aclsysGetVersionStr`: `9.1.0` for `cann`, `runtime`, `toolkit`, `compiler`, `hccl`, `opp`; `ACL_ERROR_INVALID_FILE` for any other package | ACL's docs (the bindings' CANN level) |
//! | all processes of the machine are one supernode | **ours** (there is one host) |
//!
//! # HCCL emulation
//! Every symbol of [`hccl_sys::SYMBOLS`] is exported with the signature of
//! [`hccl_sys::fn_types`], in-process ([`hccl_table`], [`hccl_lookup`]) and from the shared
//! library (`ASCEND_HCCL_LIB=…/libascend_sim.so`). Every export catches panics
//! (`HCCL_E_INTERNAL`), counts calls, is logged, can be failed ([`fault`]) and records a message for failures: [`hccl_last_error_message`] (this
//! thread's last failed HCCL call, `"HcclX: text (HCCL_E_Y)"`) and
//! [`hccl_recent_error_message`] (the process's latest, including collectives that failed on a
//! stream). `HcclGetErrorString` returns the real library's texts ("parameter error", ...,
//! "unknow error" out of range).
//!
//! **Communicators.** `HcclGetRootInfo` starts (once per process) a listener on `127.0.0.1:0`
//! and writes a 4108-byte root info: magic `ASIMHCCL`, version, the listener's address, the
//! root pid, a 128-bit unique id and a checksum (anything else is `HCCL_E_PARA`). Every rank,
//! rank 0 included, joins through that listener with `HcclCommInitRootInfo[Config]`; ranks may
//! be processes or threads (each thread needs its own current device; several ranks may use one
//! device). Each rank owns a *segment* memfd: an 8 KiB control block (sequence counters, state,
//! double-buffered operation descriptors) then the HCCL "in" and "out" buffers,
//! `hcclBufferSize` MB each. Peers map each other's control block and "in" buffer
//! (`pidfd_getfd` across processes, `dup` within one) and synchronise by atomic sequence
//! numbers in shared memory (spin, then yield, then sleep up to ~640 µs), watching the peer's
//! state word, its process (pidfd readable: `HCCL_E_REMOTE`), stream abort and the timeout
//! (`HCCL_E_TIMEOUT`). A timeout, a dead or destroyed peer, or a failure in the middle of a
//! collective *breaks* the communicator: peers waiting on it fail at once with
//! `HCCL_E_REMOTE`, and later calls on it return the recorded error; destroy it.
//! `HcclCommDestroy` waits (up to the exec timeout) for the communicator's queued collectives,
//! marks it destroyed for its peers, deregisters its remaining windows locally (no collective
//! step) and frees everything; it is not collective.
//!
//! **Config** (read as the library's `CommConfig::Load` does): `size` from offset 0
//! (below 24 → `HCCL_E_PARA`), `min(size, 2240)` bytes copied over a copy initialised like
//! `HcclCommConfigInit`, magic ≠ `0xF0F0F0F0` → `HCCL_E_PARA`, fields applied by version: ≥ 1
//! `hcclBufferSize` (NOT_SET → `HCCL_BUFFSIZE` or 200 MB; 0 → `HCCL_E_PARA`) and
//! `hcclDeterministic` (> 2 → `HCCL_E_PARA`), ≥ 2 name (not NUL-terminated → `HCCL_E_PARA`;
//! empty → `sim-hccl-<unique id>`), ≥ 4 op expansion mode (> 6 → `HCCL_E_PARA`), ≥ 6 world rank
//! and job id, ≥ 7 zero-copy (> 1 → `HCCL_E_PARA`), ≥ 8 exec timeout (seconds; −1 not set, 0
//! default, other negatives `HCCL_E_PARA`), ≥ 10 `hcclQos` (> 7 → `HCCL_E_PARA`) and
//! `hcclSymWinMaxMemSizePerRank` (0 or > 1024 GB → `HCCL_E_PARA`). UDI, RDMA TC/SL, algo,
//! retry and buffer name are accepted and ignored.
//!
//! **Init rules.** NULL `rootInfo`/`comm`/`config` → `HCCL_E_PTR`; `nRanks` 0 or
//! `rank >= nRanks` → `HCCL_E_PARA`; no current device on the thread → `HCCL_E_RUNTIME`; a
//! rank that never joins → `HCCL_E_TIMEOUT` on the others after the rendezvous timeout: the
//! config's exec timeout when set, else `HCCL_CONNECT_TIMEOUT` (default 120 s).
//!
//! **Collectives** (AllGather, ReduceScatter, AllReduce, AllToAll, Broadcast, Barrier;
//! stream-ordered; AllToAll with `sendCount == recvCount` and one data type):
//! checked at the call (NULL buffer, communicator or stream → `HCCL_E_PTR`; unknown data type,
//! reduce op or root, count overflow, buffers that are not device-accessible emulated memory or
//! run past their allocation → `HCCL_E_PARA`; fp8/hif8 types → `HCCL_E_NOT_SUPPORT`; count 0 →
//! success, nothing enqueued), then run by the stream (its worker thread in threaded mode, the
//! synchronizing thread in deterministic mode, where a query blocks until the collective
//! completes). Each starts with a step exchanging descriptors: ranks running a different
//! collective, count, type, op or root fail with `HCCL_E_PARA` on every rank (the communicator
//! stays usable). Failures surface at `aclrtSynchronizeStream` (`HCCL_E_TIMEOUT` → 107020,
//! `HCCL_E_REMOTE` → 507056, others → 507000, with the HCCL code in the message) and through
//! `HcclGetCommAsyncError` (the first asynchronous error, sticky). Types: int8/16/32/64,
//! uint8/16/32/64, fp16, bf16, fp32, fp64, int128; ops SUM/PROD/MAX/MIN, integers wrapping,
//! floats IEEE (`max`/`min` ignore NaN), fp16/bf16 widened to f32 and rounded back after every
//! step; reductions run in rank order 0, 1, …, so every rank gets identical bits.
//!
//! **Paths.** *Symmetric* when, on every rank, both buffers lie in registered windows of the
//! communicator (Broadcast: its buffer): each rank reads its peers' windows through the
//! symmetric heap straight into its output, one copy (AllReduce in place reduces into a scratch
//! buffer first). Otherwise *staged*, as the real buffer mode: copy-in (user → own "in"
//! buffer), step, transfer (every rank's "in" buffer → own "out" buffer), step, copy-out or
//! reduce into the user buffer, in chunks of the smallest `hcclBufferSize`. One rank without
//! windows makes every rank stage (the ranks agree in the first step); the symmetric path is
//! never an error. `ASCEND_SIM_HCCL_PATH=staged` forces the staged path. [`hccl_stats`] counts
//! bytes copied and operations per path ([`HcclStats`]): AllGather of `b` bytes per rank on
//! `n` ranks costs `(2n + 1)·b` bytes per rank staged and `n·b` symmetric. Measured (release,
//! 4 thread ranks × 8 MiB fp32 AllGather, 2 CPUs): staged 288 MiB and ≈ 26 ms, symmetric
//! 128 MiB and ≈ 9 ms per collective.
//!
//! **Symmetric windows**. `HcclCommSymWinRegister` checks, without
//! communicating: NULL `comm`/`addr`/`winHandle` → `HCCL_E_PTR`; `flag` ≠ 1 → `HCCL_E_PARA`;
//! `size` 0 → `HCCL_E_PARA`; `ASCEND_SIM_SOC=A2` → `HCCL_E_NOT_SUPPORT`; op expansion mode
//! other than 0 or 2 → `HCCL_E_NOT_SUPPORT`; `size` > `hcclSymWinMaxMemSizePerRank` GB →
//! `HCCL_E_PARA`. Then collectively (every rank learns every rank's outcome in one step, so an
//! error is returned on every rank within the timeout, never a hang): `addr` must lie in a VMM
//! mapping (`aclrtReserveMemAddress` + `aclrtMallocPhysical` + `aclrtMapMem`) of DEVICE
//! physical memory, `size` within the memory mapped from `addr` (consecutive mappings of one
//! reservation may be combined, at most 16) → else `HCCL_E_PARA`; the window is rounded to
//! whole physical allocations (it starts at the mapping holding `addr`); every rank's requested
//! and rounded sizes must be equal → else `HCCL_E_PARA` on every rank. The heap is one
//! `PROT_NONE|MAP_NORESERVE` reservation of `rank_size × hcclSymWinMaxMemSizePerRank` GB per
//! communicator, made at its first registration; each rank maps every rank's physical memfds
//! (taken with `pidfd_getfd`) at `base + rank·stride + offset`, the offset being equal on all
//! ranks. `HcclCommSymWinDeregister` is collective: NULL → `HCCL_E_PTR`, unknown or
//! deregistered handle → `HCCL_E_PARA`; ranks naming different windows → `HCCL_E_PARA` (the
//! window stays); a timeout or dead peer still removes the window locally and returns the
//! error; user memory is never freed. `HcclCommSymWinGet`: NULL `ptr`/`winHandle`/`offset` →
//! `HCCL_E_PTR`, `size` 0 → `HCCL_E_PARA`, a range inside no window → NULL window and
//! `HCCL_E_NOT_FOUND`. A peer rank's register or deregister that never comes → `HCCL_E_TIMEOUT`
//! (which breaks the communicator).
//!
//! **Other calls.** `HcclGetRankSize`, `HcclGetRankId`, `HcclGetCommName`,
//! `HcclCommGetHandleWithName` (first communicator of that name in this process),
//! `HcclGetCommConfigCapability` (12: every listed config field), `HcclSetConfig`/
//! `HcclGetConfig` (`HCCL_DETERMINISTIC` only), `HcclConfigGetInfo` (op expansion mode only).
//! Not emulated, `HCCL_E_NOT_SUPPORT` with a message: cluster-info and sub-communicator init,
//! `HcclCommInitAll`, memory ranges, groups, suspend/resume, state callbacks, NIC selection,
//! Send/Recv, AlltoAllV/VC, Reduce, Scatter, AllGatherV, ReduceScatterV, BatchSendRecv.
//! Comm handles and window handles are tagged ids, never dereferenced (a stale or foreign
//! value → `HCCL_E_PARA`). The live counters `comms` and `windows` cover communicators and
//! windows.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `HCCL_BUFFSIZE` | HCCL buffer size in MB when the config does not set one | 200 |
//! | `HCCL_CONNECT_TIMEOUT` | rendezvous timeout (s) when the config has no exec timeout | 120 |
//! | `HCCL_EXEC_TIMEOUT` | collective timeout (s) when the config has no exec timeout | 120 |
//! | `ASCEND_SIM_HCCL_TIMEOUT_MS` | overrides every HCCL timeout (ms), for tests | unset |
//! | `ASCEND_SIM_HCCL_PATH` | `staged` disables the symmetric path | `auto` |
//!
//! # HIXL client/server emulation
//! Every symbol of [`hixl_sys::SYMBOLS`] (the `HixlCS*` C API) is exported with the signature of
//! [`hixl_sys::fn_types`], in-process ([`hixl_table`], [`hixl_lookup`]) and from the shared
//! library (`ASCEND_HIXL_LIB=…/libascend_sim.so`). Every export catches panics (`HIXL_FAILED`),
//! counts calls, is logged and can be failed ([`hixl_fault`], [`fault`]); a failing call records
//! [`hixl_last_error_message`] (`"HixlCSX: text (HIXL_Y)"`, this thread). Handles are tagged ids,
//! never dereferenced: NULL, unknown, stale or wrong-kind handles → `HIXL_PARAM_INVALID`.
//!
//! **Servers** listen on `server_ip:server_port` from `HixlCSServerListen` (port 0: never; the
//! backlog is ignored; a second listen → `HIXL_PARAM_INVALID`; a port in use → `HIXL_FAILED`).
//! Endpoints: protocol `HCCS` or `UB_MEM` work, other protocols → `HIXL_UNSUPPORTED`, RESERVED
//! (an endpoint left as `EndpointDescInit` made it) → `HIXL_PARAM_INVALID`; the configs may be
//! NULL and their `global_resource_config` is ignored. `HixlCSServerRegMem` checks that
//! `CommMem` is real emulated memory of its type (DEVICE: a VMM mapping of device memory or an
//! `aclrtMalloc` block; HOST: a VMM mapping of host memory or an `aclrtMallocHost` block), with
//! a non-NULL tag not used on that server and no overlap with a registration, else
//! `HIXL_PARAM_INVALID`. Destroy closes the connections and unregisters the rest.
//!
//! **Clients** (`HixlCSClientCreate`: both endpoints supported and of one protocol, port
//! 1..=65535) connect over loopback TCP: `HixlCSClientConnect` retries a refused connection
//! until `timeout_ms` (→ `HIXL_TIMEOUT`, e.g. nobody listens), exchanges a hello (a server
//! without an endpoint of the client's protocol → `HIXL_PARAM_INVALID`; connected twice →
//! `HIXL_ALREADY_CONNECTED`) and prefetches the memory list. `HixlCSClientGetRemoteMem` asks the
//! server again and returns arrays owned by the library until the next call or destroy; a gone
//! server → `HIXL_NOT_CONNECTED`. Each server block is reached through the emulator's sharing:
//! for VMM memory the client takes each physical allocation's memfd from the server process
//! (`pidfd_getfd`, `dup` in-process; the server called `PR_SET_PTRACER_ANY`), checks its inode
//! and maps it privately, so copies are one-sided and the mapping keeps the memory alive;
//! `aclrtMalloc`/`aclrtMallocHost` blocks (anonymous memory, no memfd) are reached with
//! `process_vm_readv`/`process_vm_writev` on the server's pid (unregister before freeing them).
//!
//! **Batches** (put: local → remote, get: remote → local) are checked at the call: not connected
//! → `HIXL_NOT_CONNECTED`; `list_num` 0, NULL list, a descriptor of length 0 or with NULL
//! buffers, a remote range in no block of the list, a local range outside the client's
//! registrations (`HixlCSClientRegMem`), a timeout of 0 → `HIXL_PARAM_INVALID`; over 4096
//! outstanding async batches → `HIXL_RESOURCE_EXHAUSTED`. One worker thread per client runs
//! batches in order, re-checking the local ranges under the address table's read lock (freed
//! memory fails the batch, never faults). Sync calls wait up to `timeout_ms`: a batch not started
//! by then is dropped (`HIXL_TIMEOUT`), a failed copy → `HIXL_FAILED`. An async batch's handle
//! reports WAITING (queued or running), COMPLETED, FAILED, or TIMEOUT when it did not start within
//! `ASCEND_SIM_HIXL_ASYNC_TIMEOUT_MS` (default 60 s; [`hixl_testing::set_async_timeout`]; it then
//! never runs); after a finished status the handle is forgotten (querying it again →
//! `HIXL_PARAM_INVALID`). **`HixlCSClientDestroy` with batches in flight** (queued before their
//! deadline, or running) **is refused with `HIXL_FAILED`** and changes nothing; finished but
//! unqueried batches are dropped. [`hixl_testing::hold`] keeps every worker from starting a batch.
//! [`hixl_counters`] counts live servers, clients, registrations on either side, imported blocks
//! and unqueried async batches; all return to zero after destroy.
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

#[macro_use]
mod export;
#[macro_use]
mod rt;
mod broker;
mod config;
mod counters;
mod device;
mod handles;
mod hccl;
mod hixl;
mod share;
mod stream;
mod vmm;

pub use counters::{counters, Counters};
pub use device::*;
pub use hccl::{
    hccl_last_error_message, hccl_lookup, hccl_recent_error_message, hccl_stats, hccl_table,
    reset_hccl_stats, HcclStats,
};
pub use hixl::{
    fault as hixl_fault, hixl_counters, hixl_last_error_message, hixl_lookup, hixl_table,
    testing as hixl_testing, HixlCounters,
};
pub use share::*;
pub use stream::*;
pub use vmm::*;

/// Bytes of `device`'s HBM currently charged (physical DEVICE allocations and `aclrtMalloc`).
pub fn hbm_in_use(device: u32) -> u64 {
    rt::hbm_in_use(device)
}

/// The calls logged since the log was turned on (`ASCEND_SIM_CALL_LOG=1` or [`set_call_log`]),
/// in order, for the whole process.
pub fn call_log() -> Vec<String> {
    export::call_log()
}

/// Turns the call log on or off (off also clears it).
pub fn set_call_log(on: bool) {
    export::set_call_log(on)
}

/// Fault injection and symbol hiding (process-global), for the symbols of every surface: ACL,
/// HCCL and HIXL ([`crate::hixl_fault`] is the same machinery with HIXL's status type).
pub mod fault {
    use crate::export::{self, Injected};

    /// Makes the `n`-th call (1-based, counted from now) of `symbol` (a name of
    /// `acl_sys::SYMBOLS`, `hccl_sys::SYMBOLS` or `hixl_sys::SYMBOLS`) return `code` (converted
    /// to the surface's status type) without doing anything; its error message is
    /// "`symbol`: injected failure (ASCEND_SIM_FAIL)". Unknown symbols are ignored. `code`
    /// [`PANIC`] makes the call panic inside its wrapper instead (it then returns the surface's
    /// internal error: `ACL_ERROR_RT_INTERNAL_ERROR` 507000, `HCCL_E_INTERNAL`, `HIXL_FAILED`).
    pub fn fail_nth(symbol: &str, n: u64, code: i32) {
        export::fail_nth(symbol, n, injected(code));
    }

    pub(crate) fn injected(code: i32) -> Injected {
        if code == PANIC {
            Injected::Panic
        } else {
            Injected::Code(code.into())
        }
    }

    /// The fault code that injects a panic (see [`fail_nth`]).
    pub const PANIC: i32 = i32::MIN;

    /// Disarms every fault (a queued copy's too) and unhides every symbol.
    pub fn clear() {
        export::clear_faults(export::ALL);
        crate::stream::hold::arm_copy_fault(None);
    }

    /// Makes the lookup functions ([`crate::lookup`], [`crate::hccl_lookup`],
    /// [`crate::hixl_lookup`]) return null for `symbol` (until [`clear`]).
    pub fn hide_symbol(symbol: &str) {
        export::hide(symbol);
    }

    /// How many times `symbol` (of any surface) has been called in this process.
    pub fn calls(symbol: &str) -> u64 {
        export::calls(symbol)
    }
}

/// Test hooks.
pub mod testing {
    use std::sync::Arc;

    /// Blocks a stream until released or dropped (see [`hold_stream`]).
    #[derive(Debug)]
    #[must_use = "dropping the Hold releases the stream at once"]
    pub struct Hold {
        inner: Arc<crate::stream::hold::HoldInner>,
    }

    impl Hold {
        /// Releases the stream.
        pub fn release(self) {}
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            self.inner.release();
        }
    }

    /// Enqueues a task that blocks `stream` (NULL: the current context's default stream) until
    /// the returned [`Hold`] is released or dropped. `aclrtStreamAbort` cancels it.
    ///
    /// # Panics
    /// If `stream` is not a live stream.
    pub fn hold_stream(stream: acl_sys::aclrtStream) -> Hold {
        match crate::stream::exports::hold(stream) {
            Ok(inner) => Hold { inner },
            Err(e) => panic!("hold_stream: {}", e.msg),
        }
    }

    /// Holds every threaded-mode stream before its next task (copies, event records, all)
    /// until the returned [`Hold`] is released or dropped; a stream that is aborted stops
    /// waiting. For tests that need work to stay queued while something else happens (a peer
    /// lost with transfers in flight). Deterministic-mode streams are not held.
    pub fn hold_all_streams() -> Hold {
        Hold {
            inner: crate::stream::hold::hold_all(),
        }
    }

    /// Holds every copy a threaded-mode stream starts from now on (`aclrtMemcpyAsync`'s, or a
    /// queued batch) at its start, as a copy the device is running, until the returned
    /// [`Hold`] is released or dropped. Unlike the other holds, an abort of the stream does
    /// not end the wait: the copy has started, and runs once released. Meanwhile the stream
    /// is busy (`aclrtStreamQuery` says NOT_READY; synchronizing or destroying it waits), and
    /// the copy still needs its memory: for tests that work which dropped or aborted
    /// transfers is kept alive until the runtime says their streams are done.
    /// [`held_copies`] counts the copies waiting. Deterministic-mode streams are not held.
    pub fn hold_running_copies() -> Hold {
        Hold {
            inner: crate::stream::hold::hold_copies(),
        }
    }

    /// Copies waiting at a [`hold_running_copies`] hold now.
    pub fn held_copies() -> usize {
        crate::stream::hold::held_copies()
    }

    /// Makes the next queued copy (`aclrtMemcpyAsync`'s, on any stream, when it runs) fail
    /// with `code` instead of copying, as a copy that faults on the device: the stream reports
    /// it, and one that stops on failure discards the work behind it. Fires once;
    /// [`crate::fault::clear`] disarms it.
    pub fn fail_next_queued_copy(code: i32) {
        crate::stream::hold::arm_copy_fault(Some(code));
    }
}

symbol_table!(
    acl_sys, acl_lookup, TABLE_LEN;
    aclInit,
    aclFinalize,
    aclFinalizeReference,
    aclrtSetDevice,
    aclrtResetDevice,
    aclrtGetDevice,
    aclrtGetDeviceCount,
    aclrtCreateContext,
    aclrtDestroyContext,
    aclrtSetCurrentContext,
    aclrtGetCurrentContext,
    aclrtGetPhyDevIdByLogicDevId,
    aclrtGetLogicDevIdByUserDevId,
    aclrtDeviceGetBareTgid,
    aclrtDeviceCanAccessPeer,
    aclrtDeviceEnablePeerAccess,
    aclrtDeviceDisablePeerAccess,
    aclGetRecentErrMsg,
    aclrtGetSocName,
    aclsysGetVersionStr,
    aclrtPeekAtLastError,
    aclrtGetLastError,
    aclrtCreateStream,
    aclrtCreateStreamWithConfig,
    aclrtDestroyStream,
    aclrtSynchronizeStream,
    aclrtSynchronizeStreamWithTimeout,
    aclrtStreamQuery,
    aclrtStreamAbort,
    aclrtSetStreamFailureMode,
    aclrtValueWrite,
    aclrtValueWait,
    aclrtCreateEvent,
    aclrtCreateEventWithFlag,
    aclrtCreateEventExWithFlag,
    aclrtRecordEvent,
    aclrtStreamWaitEvent,
    aclrtQueryEventStatus,
    aclrtQueryEvent,
    aclrtSynchronizeEvent,
    aclrtSynchronizeEventWithTimeout,
    aclrtResetEvent,
    aclrtEventElapsedTime,
    aclrtDestroyEvent,
    aclrtMemcpy,
    aclrtMemcpyAsync,
    aclrtMemcpyBatch,
    aclrtMemcpyBatchV2,
    aclrtMemcpyBatchAsync,
    aclrtMemcpyBatchAsyncV2,
    aclrtMemset,
    aclrtMemsetAsync,
    aclrtMalloc,
    aclrtFree,
    aclrtMallocHost,
    aclrtFreeHost,
    aclrtGetMemInfo,
    aclrtPointerGetAttributes,
    aclrtMemGetAddressRange,
    aclrtReserveMemAddress,
    aclrtReserveMemAddressNoUCMemory,
    aclrtReleaseMemAddress,
    aclrtMallocPhysical,
    aclrtFreePhysical,
    aclrtMapMem,
    aclrtMemMapNoAccess,
    aclrtUnmapMem,
    aclrtMemGetAllocationGranularity,
    aclrtMemRetainAllocationHandle,
    aclrtMemGetAllocationPropertiesFromHandle,
    aclrtMemExportToShareableHandle,
    aclrtMemExportToShareableHandleV2,
    aclrtMemImportFromShareableHandle,
    aclrtMemImportFromShareableHandleV2,
    aclrtMemSetPidToShareableHandle,
    aclrtMemSetPidToShareableHandleV2,
    aclrtMemSetAccess,
    aclrtMemGetAccess,
);

/// The emulator's export for `name` (any name of [`acl_sys::SYMBOLS`]); null for other names and
/// for symbols hidden with [`fault::hide_symbol`].
pub fn lookup(name: &str) -> *const c_void {
    acl_lookup(name)
}

/// The process-wide ACL loader table served by this emulator in-process.
pub fn acl_table() -> &'static acl_sys::AclLib {
    static T: OnceLock<acl_sys::AclLib> = OnceLock::new();
    T.get_or_init(|| {
        // SAFETY: `lookup` returns this crate's exports, each checked at compile time against
        // `acl_sys::fn_types`, and they live as long as the process.
        unsafe {
            acl_sys::AclLib::from_source(acl_sys::Source::InProcess {
                name: "ascend-sim",
                lookup,
            })
        }
    })
}

/// The counters as the C struct `AscendSimCounters` ([`Counters`] is `#[repr(C)]`).
pub type AscendSimCounters = Counters;

/// C: copies the live-object counters into `*out`. Returns 0, or 100000 when `out` is NULL.
///
/// # Safety
/// `out` is null or writable for one `AscendSimCounters`.
#[no_mangle]
pub unsafe extern "C" fn ascendSimGetCounters(out: *mut AscendSimCounters) -> i32 {
    if out.is_null() {
        return acl_sys::ACL_ERROR_INVALID_PARAM;
    }
    let Ok(c) = std::panic::catch_unwind(counters) else {
        return acl_sys::ACL_ERROR_RT_INTERNAL_ERROR;
    };
    // SAFETY: non-null and writable per the contract.
    unsafe { out.write_unaligned(c) };
    0
}

/// C: arms a fault like [`fault::fail_nth`]. Returns 0, or 100000 for a NULL or unknown symbol.
///
/// # Safety
/// `symbol` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ascendSimFailNth(symbol: *const c_char, n: u64, code: i32) -> i32 {
    if symbol.is_null() {
        return acl_sys::ACL_ERROR_INVALID_PARAM;
    }
    // SAFETY: NUL-terminated per the contract.
    let s = unsafe { CStr::from_ptr(symbol) };
    let armed = std::panic::catch_unwind(|| {
        s.to_str()
            .is_ok_and(|s| export::fail_nth(s, n, fault::injected(code)))
    });
    match armed {
        Ok(true) => 0,
        Ok(false) => acl_sys::ACL_ERROR_INVALID_PARAM,
        Err(_) => acl_sys::ACL_ERROR_RT_INTERNAL_ERROR,
    }
}

/// C: disarms every fault (and unhides symbols). Returns 0.
#[no_mangle]
pub extern "C" fn ascendSimClearFaults() -> i32 {
    match std::panic::catch_unwind(|| export::clear_faults(export::ALL)) {
        Ok(()) => 0,
        Err(_) => acl_sys::ACL_ERROR_RT_INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_symbol_is_exported() {
        assert_eq!(super::TABLE_LEN, acl_sys::SYMBOLS.len());
        for s in acl_sys::SYMBOLS {
            assert!(!super::lookup(s).is_null(), "{s} missing");
        }
        assert!(super::lookup("aclrtNoSuchThing").is_null());
    }
}
