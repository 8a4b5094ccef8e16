/*
 * ACL runtime declarations bound by acl-sys.
 *
 * Written by the ascend-mem developers from the published ABI facts (type sizes, field
 * offsets, enum values, parameter order) of the CANN runtime, releases 8.5.0 to 9.1.0.
 * This is not a vendor header; it declares only what acl-sys binds.
 */
#ifndef ACL_SYS_DECLS_H
#define ACL_SYS_DECLS_H

#include <stddef.h>
#include <stdint.h>

#define ACL_MAJOR_VERSION 1
#define ACL_MINOR_VERSION 17
#define ACL_PATCH_VERSION 0

typedef int aclError;
typedef uint16_t aclFloat16;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void *aclrtNotify;
typedef void *aclrtDrvMemHandle;
typedef void *aclrtFuncHandle;

/* ---- status codes: ACL layer ---- */
static const aclError ACL_SUCCESS = 0;
static const aclError ACL_ERROR_NONE = 0;
static const aclError ACL_ERROR_INVALID_PARAM = 100000;
static const aclError ACL_ERROR_UNINITIALIZE = 100001;
static const aclError ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const aclError ACL_ERROR_INVALID_FILE = 100003;
static const aclError ACL_ERROR_REPEAT_FINALIZE = 100037;
static const aclError ACL_ERROR_BAD_ALLOC = 200000;
static const aclError ACL_ERROR_API_NOT_SUPPORT = 200001;
static const aclError ACL_ERROR_INVALID_DEVICE = 200002;
static const aclError ACL_ERROR_MEMORY_ADDRESS_UNALIGNED = 200003;
static const aclError ACL_ERROR_RESOURCE_NOT_MATCH = 200004;
static const aclError ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005;
static const aclError ACL_ERROR_FEATURE_UNSUPPORTED = 200006;
static const aclError ACL_ERROR_STORAGE_OVER_LIMIT = 300000;
static const aclError ACL_ERROR_INTERNAL_ERROR = 500000;
static const aclError ACL_ERROR_FAILURE = 500001;
static const aclError ACL_ERROR_GE_FAILURE = 500002;
static const aclError ACL_ERROR_RT_FAILURE = 500003;
static const aclError ACL_ERROR_DRV_FAILURE = 500004;
static const aclError ACL_ERROR_PROFILING_FAILURE = 500005;

/* ---- status codes: runtime layer ---- */
static const aclError ACL_RT_SUCCESS = 0;
static const aclError ACL_ERROR_RT_PARAM_INVALID = 107000;
static const aclError ACL_ERROR_RT_INVALID_DEVICEID = 107001;
static const aclError ACL_ERROR_RT_CONTEXT_NULL = 107002;
static const aclError ACL_ERROR_RT_STREAM_CONTEXT = 107003;
static const aclError ACL_ERROR_RT_ADDR_UNALIGNED = 107008;
static const aclError ACL_ERROR_RT_INVALID_MEMORY_TYPE = 107016;
static const aclError ACL_ERROR_RT_INVALID_HANDLE = 107017;
static const aclError ACL_ERROR_RT_WAIT_TIMEOUT = 107019;
static const aclError ACL_ERROR_RT_TASK_TIMEOUT = 107020;
static const aclError ACL_ERROR_RT_STREAM_ABORT = 107023;
static const aclError ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000;
static const aclError ACL_ERROR_RT_MEMORY_ALLOCATION = 207001;
static const aclError ACL_ERROR_RT_MEMORY_FREE = 207002;
static const aclError ACL_ERROR_RT_NO_DEVICE = 207004;
static const aclError ACL_ERROR_RT_RESOURCE_ALLOC_FAIL = 207005;
static const aclError ACL_ERROR_RT_NO_PERMISSION = 207006;
static const aclError ACL_ERROR_RT_NO_EVENT_RESOURCE = 207007;
static const aclError ACL_ERROR_RT_NO_STREAM_RESOURCE = 207008;
static const aclError ACL_ERROR_RT_OVER_LIMIT = 207012;
static const aclError ACL_ERROR_RT_DEVICE_OOM = 207018;
static const aclError ACL_ERROR_RT_TIMEOUT = 207020;
static const aclError ACL_ERROR_RT_INTERNAL_ERROR = 507000;
static const aclError ACL_ERROR_RT_STREAM_NOT_COMPLETE = 507004;
static const aclError ACL_ERROR_RT_EVENT_NOT_COMPLETE = 507006;
static const aclError ACL_ERROR_RT_IPC_ERROR = 507022;
static const aclError ACL_ERROR_RT_DEV_SETUP_ERROR = 507033;
static const aclError ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046;
static const aclError ACL_ERROR_RT_EVENT_SYNC_TIMEOUT = 507047;
static const aclError ACL_ERROR_RT_DEVICE_MEM_ERROR = 507053;
static const aclError ACL_ERROR_RT_LINK_ERROR = 507056;
static const aclError ACL_ERROR_RT_DRV_INTERNAL_ERROR = 507899;
static const aclError ACL_ERROR_RT_SOCKET_CLOSE = 507901;

/* ---- enums (C enums are 4-byte ints; bound as integer aliases plus constants) ---- */
typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
    ACL_MEMCPY_DEFAULT = 4,
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6,
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
    ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7,
    ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
    ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000
} aclrtMemMallocPolicy;

typedef enum aclrtMemAttr {
    ACL_DDR_MEM = 0,
    ACL_HBM_MEM = 1,
    ACL_DDR_MEM_HUGE = 2,
    ACL_DDR_MEM_NORMAL = 3,
    ACL_HBM_MEM_HUGE = 4,
    ACL_HBM_MEM_NORMAL = 5,
    ACL_DDR_MEM_P2P_HUGE = 6,
    ACL_DDR_MEM_P2P_NORMAL = 7,
    ACL_HBM_MEM_P2P_HUGE = 8,
    ACL_HBM_MEM_P2P_NORMAL = 9,
    ACL_HBM_MEM_HUGE1G = 10,
    ACL_HBM_MEM_P2P_HUGE1G = 11,
    ACL_MEM_NORMAL = 12,
    ACL_MEM_HUGE = 13,
    ACL_MEM_HUGE1G = 14,
    ACL_MEM_P2P_NORMAL = 15,
    ACL_MEM_P2P_HUGE = 16,
    ACL_MEM_P2P_HUGE1G = 17
} aclrtMemAttr;

typedef enum aclrtMemLocationType {
    ACL_MEM_LOCATION_TYPE_HOST = 0,
    ACL_MEM_LOCATION_TYPE_DEVICE = 1,
    ACL_MEM_LOCATION_TYPE_UNREGISTERED = 2,
    ACL_MEM_LOCATION_TYPE_MANAGED = 3,
    ACL_MEM_LOCATION_TYPE_HOST_NUMA = 4
} aclrtMemLocationType;

typedef enum aclrtMemAllocationType {
    ACL_MEM_ALLOCATION_TYPE_PINNED = 0
} aclrtMemAllocationType;

typedef enum aclrtMemHandleType {
    ACL_MEM_HANDLE_TYPE_NONE = 0,
    ACL_MEM_HANDLE_TYPE_POSIX = 2
} aclrtMemHandleType;

typedef enum aclrtMemSharedHandleType {
    ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT = 1,
    ACL_MEM_SHARE_HANDLE_TYPE_FABRIC = 2
} aclrtMemSharedHandleType;

typedef enum aclrtMemGranularityOptions {
    ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
    ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 0xFFFF
} aclrtMemGranularityOptions;

typedef enum {
    ACL_RT_MEM_ACCESS_FLAGS_NONE = 0,
    ACL_RT_MEM_ACCESS_FLAGS_READ = 1,
    ACL_RT_MEM_ACCESS_FLAGS_READWRITE = 3
} aclrtMemAccessFlags;

typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1
} aclrtEventRecordedStatus;

typedef enum aclrtEventStatus {
    ACL_EVENT_STATUS_COMPLETE = 0,
    ACL_EVENT_STATUS_NOT_READY = 1,
    ACL_EVENT_STATUS_RESERVED = 2
} aclrtEventStatus;

typedef enum aclrtStreamStatus {
    ACL_STREAM_STATUS_COMPLETE = 0,
    ACL_STREAM_STATUS_NOT_READY = 1,
    ACL_STREAM_STATUS_RESERVED = 0xFFFF
} aclrtStreamStatus;

typedef enum aclrtLastErrLevel {
    ACL_RT_THREAD_LEVEL = 0
} aclrtLastErrLevel;

/* ---- structs ---- */
typedef struct aclrtMemLocation {
    uint32_t id;
    aclrtMemLocationType type;
} aclrtMemLocation;

/* One attribute set of a batched copy: applies to a run of copies (see aclrtMemcpyBatchAsync). */
typedef struct aclrtMemcpyBatchAttr {
    aclrtMemLocation dstLoc;
    aclrtMemLocation srcLoc;
    uint8_t rsv[16];
} aclrtMemcpyBatchAttr;

typedef struct aclrtPhysicalMemProp {
    aclrtMemHandleType handleType;
    aclrtMemAllocationType allocationType;
    aclrtMemAttr memAttr;
    aclrtMemLocation location;
    uint64_t reserve;
} aclrtPhysicalMemProp;

typedef struct aclrtMemFabricHandle {
    uint8_t data[128];
} aclrtMemFabricHandle;

typedef struct aclrtMemAccessDesc {
    aclrtMemAccessFlags flags;
    aclrtMemLocation location;
    uint8_t rsv[12];
} aclrtMemAccessDesc;

typedef struct aclrtPtrAttributes {
    aclrtMemLocation location;
    uint32_t pageSize;
    uint32_t rsv[4];
} aclrtPtrAttributes;

/* ---- flag macros ---- */
#define ACL_EVENT_SYNC 0x1U
#define ACL_EVENT_CAPTURE_STREAM_PROGRESS 0x2U
#define ACL_EVENT_TIME_LINE 0x8U
#define ACL_EVENT_DEVICE_USE_ONLY 0x10U
#define ACL_EVENT_EXTERNAL 0x20U
#define ACL_EVENT_IPC 0x40U
#define ACL_STREAM_FAST_LAUNCH 0x1U
#define ACL_STREAM_FAST_SYNC 0x2U
#define ACL_STREAM_PERSISTENT 0x4U
#define ACL_STREAM_HUGE 0x8U
#define ACL_STREAM_CPU_SCHEDULE 0x10U
#define ACL_STREAM_DEVICE_USE_ONLY 0x20U
#define ACL_CONTINUE_ON_FAILURE 0UL
#define ACL_STOP_ON_FAILURE 1UL
#define ACL_NOTIFY_DEFAULT 0U
#define ACL_NOTIFY_DEVICE_USE_ONLY 1U
#define ACL_PKG_VERSION_MAX_SIZE 128
#define ACL_RT_VMM_EXPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x1UL
#define ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x1UL
#define ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x2UL
#define ACL_STREAM_WAIT_VALUE_GEQ 0U
#define ACL_STREAM_WAIT_VALUE_EQ 1U
#define ACL_STREAM_WAIT_VALUE_AND 2U
#define ACL_STREAM_WAIT_VALUE_NOR 3U
#define ACL_RT_MEM_LINK_IDX_0 0U
#define ACL_RT_MEM_LINK_IDX_1 1U
#define ACL_EVENT_RECORD_DEFAULT 0U
#define ACL_EVENT_RECORD_EXTERNAL 1U
#define ACL_EVENT_WAIT_DEFAULT 0U
#define ACL_EVENT_WAIT_EXTERNAL 1U

#ifdef __cplusplus
extern "C" {
#endif

/* ---- init, device, context ---- */
aclError aclInit(const char *configPath);
aclError aclFinalize(void);
aclError aclFinalizeReference(uint64_t *refCount);
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);
aclError aclrtGetCurrentContext(aclrtContext *context);
aclError aclrtGetPhyDevIdByLogicDevId(const int32_t logicDevId, int32_t *const phyDevId);
aclError aclrtGetLogicDevIdByUserDevId(const int32_t userDevid, int32_t *const logicDevId);
aclError aclrtDeviceGetBareTgid(int32_t *pid);
aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId);
aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags);
aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId);
const char *aclGetRecentErrMsg(void);
const char *aclrtGetSocName(void);
/* The version text of an installed CANN package ("runtime", "toolkit", ..., "driver"): the
 * string its version.info holds. versionStr must hold ACL_PKG_VERSION_MAX_SIZE bytes. */
aclError aclsysGetVersionStr(char *pkgName, char *versionStr);
aclError aclrtPeekAtLastError(aclrtLastErrLevel level);
aclError aclrtGetLastError(aclrtLastErrLevel level);

/* ---- streams and events ---- */
aclError aclrtCreateStream(aclrtStream *stream);
aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);
aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status);
aclError aclrtStreamAbort(aclrtStream stream);
aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode);
aclError aclrtValueWrite(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream);
aclError aclrtValueWait(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream);
aclError aclrtCreateEvent(aclrtEvent *event);
aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status);
aclError aclrtSynchronizeEvent(aclrtEvent event);
aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout);
aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);
aclError aclrtDestroyEvent(aclrtEvent event);

/* ---- plain memory ---- */
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream);
aclError aclrtMemcpyBatch(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes, size_t numBatches,
                          aclrtMemcpyBatchAttr *attrs, size_t *attrsIndexes, size_t numAttrs, size_t *failIndex);
aclError aclrtMemcpyBatchV2(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes, size_t numBatches,
                            aclrtMemcpyBatchAttr *attrs, size_t *attrsIndexes, size_t numAttrs);
aclError aclrtMemcpyBatchAsync(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes, size_t numBatches,
                               aclrtMemcpyBatchAttr *attrs, size_t *attrsIndexes, size_t numAttrs,
                               size_t *failIndex, aclrtStream stream);
aclError aclrtMemcpyBatchAsyncV2(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes, size_t numBatches,
                                 aclrtMemcpyBatchAttr *attrs, size_t *attrsIndexes, size_t numAttrs,
                                 aclrtStream stream);
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream);
aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void *devPtr);
aclError aclrtMallocHost(void **hostPtr, size_t size);
aclError aclrtFreeHost(void *hostPtr);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);
aclError aclrtPointerGetAttributes(const void *ptr, aclrtPtrAttributes *attributes);
aclError aclrtMemGetAddressRange(void *ptr, void **pbase, size_t *psize);

/* ---- virtual memory management and sharing ---- */
aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr, uint64_t flags);
aclError aclrtReserveMemAddressNoUCMemory(void **virPtr, size_t size, size_t alignment, void *expectPtr,
                                          uint64_t flags);
aclError aclrtReleaseMemAddress(void *virPtr);
aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const aclrtPhysicalMemProp *prop,
                             uint64_t flags);
aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags);
aclError aclrtMemMapNoAccess(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags);
aclError aclrtUnmapMem(void *virPtr);
aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop, aclrtMemGranularityOptions option,
                                          size_t *granularity);
aclError aclrtMemRetainAllocationHandle(void *virPtr, aclrtDrvMemHandle *handle);
aclError aclrtMemGetAllocationPropertiesFromHandle(aclrtDrvMemHandle handle, aclrtPhysicalMemProp *prop);
aclError aclrtMemExportToShareableHandle(aclrtDrvMemHandle handle, aclrtMemHandleType handleType, uint64_t flags,
                                         uint64_t *shareableHandle);
aclError aclrtMemExportToShareableHandleV2(aclrtDrvMemHandle handle, uint64_t flags,
                                           aclrtMemSharedHandleType shareType, void *shareableHandle);
aclError aclrtMemImportFromShareableHandle(uint64_t shareableHandle, int32_t deviceId, aclrtDrvMemHandle *handle);
aclError aclrtMemImportFromShareableHandleV2(void *shareableHandle, aclrtMemSharedHandleType shareType,
                                             uint64_t flags, aclrtDrvMemHandle *handle);
aclError aclrtMemSetPidToShareableHandle(uint64_t shareableHandle, int32_t *pid, size_t pidNum);
aclError aclrtMemSetPidToShareableHandleV2(void *shareableHandle, aclrtMemSharedHandleType shareType,
                                           int32_t *pid, size_t pidNum);
aclError aclrtMemSetAccess(void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count);
aclError aclrtMemGetAccess(void *virPtr, aclrtMemLocation *location, uint64_t *flag);

#ifdef __cplusplus
}
#endif

#endif /* ACL_SYS_DECLS_H */
