/*
 * HCCL declarations bound by hccl-sys.
 *
 * Written by the ascend-mem developers from the published ABI facts (type sizes, field
 * offsets, enum values, parameter order) of HCCL/hcomm. Declared in plain C so bindgen can
 * read it; the communicator config is the version-10 layout (2240 bytes), which version-10 and
 * version-11 libraries both accept. This is not a vendor header.
 */
#ifndef HCCL_SYS_DECLS_H
#define HCCL_SYS_DECLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Types shared with the ACL runtime; bound by acl-sys. */
typedef void *aclrtStream;
typedef void *aclrtDrvMemHandle;

typedef void *HcclComm;
typedef void *HcclConn;
typedef void *HcclCommSymWindow;

typedef enum HcclResult {
    HCCL_SUCCESS = 0,
    HCCL_E_PARA = 1,
    HCCL_E_PTR = 2,
    HCCL_E_MEMORY = 3,
    HCCL_E_INTERNAL = 4,
    HCCL_E_NOT_SUPPORT = 5,
    HCCL_E_NOT_FOUND = 6,
    HCCL_E_UNAVAIL = 7,
    HCCL_E_SYSCALL = 8,
    HCCL_E_TIMEOUT = 9,
    HCCL_E_OPEN_FILE_FAILURE = 10,
    HCCL_E_TCP_CONNECT = 11,
    HCCL_E_ROCE_CONNECT = 12,
    HCCL_E_TCP_TRANSFER = 13,
    HCCL_E_ROCE_TRANSFER = 14,
    HCCL_E_RUNTIME = 15,
    HCCL_E_DRV = 16,
    HCCL_E_PROFILING = 17,
    HCCL_E_CCE = 18,
    HCCL_E_NETWORK = 19,
    HCCL_E_AGAIN = 20,
    HCCL_E_REMOTE = 21,
    HCCL_E_SUSPENDING = 22,
    HCCL_E_OPRETRY_FAIL = 23,
    HCCL_E_OOM = 24,
    HCCL_E_IN_STATUS = 1041,
    HCCL_E_RESERVED = 1042
} HcclResult;

typedef enum HcclReduceOp {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3,
    HCCL_REDUCE_RESERVED = 255
} HcclReduceOp;

typedef enum HcclDataType {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11,
    HCCL_DATA_TYPE_INT128 = 12,
    HCCL_DATA_TYPE_HIF8 = 14,
    HCCL_DATA_TYPE_FP8E4M3 = 15,
    HCCL_DATA_TYPE_FP8E5M2 = 16,
    HCCL_DATA_TYPE_FP8E8M0 = 17,
    HCCL_DATA_TYPE_RESERVED = 255
} HcclDataType;

typedef enum HcclConfig {
    HCCL_DETERMINISTIC = 0,
    HCCL_CONFIG_RESERVED = 1
} HcclConfig;

typedef union HcclConfigValue {
    int32_t value;
} HcclConfigValue;

typedef enum HcclSendRecvType {
    HCCL_SEND = 0,
    HCCL_RECV = 1,
    HCCL_SEND_RECV_RESERVED = 2
} HcclSendRecvType;

typedef enum HcclCommConfigCapability {
    HCCL_COMM_CONFIG_BUFFER_SIZE = 0,
    HCCL_COMM_CONFIG_DETERMINISTIC = 1,
    HCCL_COMM_CONFIG_COMM_NAME = 2,
    HCCL_COMM_CONFIG_OP_EXPANSION_MODE = 3,
    HCCL_COMM_CONFIG_SUPPORT_INIT_BY_ENV = 4,
    HCCL_COMM_CONFIG_WORLD_RANKID = 5,
    HCCL_COMM_CONFIG_JOBID = 6,
    HCCL_COMM_CONFIG_ACLGRAPH_ZEROCOPY_ENABLE = 7,
    HCCL_COMM_CONFIG_EXEC_TIMEOUT = 8,
    HCCL_COMM_CONFIG_ALGO = 9,
    HCCL_COMM_CONFIG_RETRY = 10,
    HCCL_COMM_CONFIG_BUFFER_NAME = 11,
    HCCL_COMM_CONFIG_RESERVED = 12
} HcclCommConfigCapability;

typedef enum HcclCommStatus {
    HCCL_COMM_STATUS_READY = 0,
    HCCL_COMM_STATUS_SUSPENDING = 1,
    HCCL_COMM_STATUS_INVALID = 254,
    HCCL_COMM_STATUS_RESERVED = 255
} HcclCommStatus;

typedef enum HcclCommStatePhase {
    HCCL_COMM_STATE_PHASE_INVALID = -1,
    HCCL_COMM_STATE_PHASE_DESTROY_PRE = 0,
    HCCL_COMM_STATE_PHASE_DESTROY_POST = 1,
    HCCL_COMM_STATE_PHASE_RESUME_PRE = 2,
    HCCL_COMM_STATE_PHASE_RESUME_POST = 3
} HcclCommStatePhase;

typedef enum HcclConfigType {
    HCCL_CONFIG_TYPE_INVALID = -1,
    HCCL_CONFIG_TYPE_OP_EXPANSION_MODE = 0,
    HCCL_CONFIG_TYPE_HCCL_ALGO = 1
} HcclConfigType;

#define HCCL_ROOT_INFO_BYTES 4108
#define HCCL_COMM_CONFIG_INFO_BYTES 24
#define HCCL_COMM_CONFIG_MAGIC_WORD 0xF0F0F0F0U
#define HCCL_COMM_CONFIG_VERSION 10U
#define HCCL_COMM_DEFAULT_BUFFSIZE 200U
#define COMM_NAME_MAX_LENGTH 128
#define UDI_MAX_LENGTH 128
#define BUFFER_NAME_MAX_LENGTH 128
#define HCCL_COMM_ALGO_MAX_LENGTH 1600
#define HCCL_COMM_RETRY_ENABLE_MAX_LENGTH 50
#define HCCL_COMM_RETRY_PARAMS_MAX_LENGTH 128
#define HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET 0xFFFFFFFFU
#define HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET 0xFFFFFFFFU
#define HCCL_COMM_DEFAULT_DETERMINISTIC 0U
#define HCCL_COMM_DEFAULT_OP_EXPANSION_MODE 0U
#define HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET 0xFFFFFFFFU
#define HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET 0xFFFFFFFFU
#define HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET (-1)
#define HCCL_COMM_QOS_CONFIG_NOT_SET 0xFFFFFFFFU
#define HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE 16UL
/* Not named in current headers; the only accepted registration flag. */
#define HCCL_WIN_COLL_SYMMETRIC 1U

typedef struct HcclRootInfo {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

/* Version-10 layout. The first 24 bytes are a header: size_t size, uint32_t magicWord,
 * uint32_t version, uint64_t reserved. */
typedef struct HcclCommConfig {
    char reserved[HCCL_COMM_CONFIG_INFO_BYTES];
    uint32_t hcclBufferSize;
    uint32_t hcclDeterministic;
    char hcclCommName[COMM_NAME_MAX_LENGTH];
    char hcclUdi[UDI_MAX_LENGTH];
    uint32_t hcclOpExpansionMode;
    uint32_t hcclRdmaTrafficClass;
    uint32_t hcclRdmaServiceLevel;
    uint32_t hcclWorldRankID;
    uint64_t hcclJobID;
    uint8_t aclGraphZeroCopyEnable;
    int32_t hcclExecTimeOut;
    char hcclAlgo[HCCL_COMM_ALGO_MAX_LENGTH];
    char hcclRetryEnable[HCCL_COMM_RETRY_ENABLE_MAX_LENGTH];
    char hcclRetryParams[HCCL_COMM_RETRY_PARAMS_MAX_LENGTH];
    char hcclBufferName[BUFFER_NAME_MAX_LENGTH];
    uint32_t hcclQos;
    uint64_t hcclSymWinMaxMemSizePerRank;
} HcclCommConfig;

typedef struct HcclSendRecvItem {
    HcclSendRecvType sendRecvType;
    void *buf;
    uint64_t count;
    HcclDataType dataType;
    uint32_t remoteRank;
} HcclSendRecvItem;

typedef HcclResult (*HcclCommStateCallback)(HcclComm comm, HcclCommStatePhase state, void *args);

#ifdef __cplusplus
extern "C" {
#endif

/* ---- communicator management ---- */
HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank, HcclComm *comm);
HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                      const HcclCommConfig *config, HcclComm *comm);
HcclResult HcclCommInitClusterInfo(const char *clusterInfo, uint32_t rank, HcclComm *comm);
HcclResult HcclCommInitClusterInfoConfig(const char *clusterInfo, uint32_t rank, HcclCommConfig *config,
                                         HcclComm *comm);
HcclResult HcclCreateSubCommConfig(HcclComm *comm, uint32_t rankNum, uint32_t *rankIds, uint64_t subCommId,
                                   uint32_t subCommRankId, HcclCommConfig *config, HcclComm *subComm);
HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms);
HcclResult HcclCommDestroy(HcclComm comm);
HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);
HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);
HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);
HcclResult HcclGetCommName(HcclComm comm, char *commName);
HcclResult HcclCommGetHandleWithName(const char *commName, HcclComm *comm);
HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError);
const char *HcclGetErrorString(HcclResult code);
uint32_t HcclGetCommConfigCapability(void);
HcclResult HcclSetConfig(HcclConfig config, HcclConfigValue configValue);
HcclResult HcclGetConfig(HcclConfig config, HcclConfigValue *configValue);
HcclResult HcclCommSetMemoryRange(HcclComm comm, void *baseVirPtr, size_t size, size_t alignment, uint64_t flags);
HcclResult HcclCommUnsetMemoryRange(HcclComm comm, void *baseVirPtr);
HcclResult HcclCommActivateCommMemory(HcclComm comm, void *virPtr, size_t size, size_t offset,
                                      aclrtDrvMemHandle handle, uint64_t flags);
HcclResult HcclCommDeactivateCommMemory(HcclComm comm, void *virPtr);
HcclResult HcclGroupStart(void);
HcclResult HcclGroupEnd(void);
HcclResult HcclGroupStatusGet(bool *isGroupEnabled);
HcclResult HcclCommSuspend(HcclComm comm);
HcclResult HcclCommResume(HcclComm comm);
HcclResult HcclCommRegCommStateCallback(const char *regName, HcclCommStateCallback cb, void *args);
HcclResult HcclCommGetStatus(const char *commId, HcclCommStatus *status);
HcclResult HcclCommWorkingDevNicSet(HcclComm comm, uint32_t *ranks, bool *useBackup, uint32_t nRanks);
HcclResult HcclConfigGetInfo(HcclComm comm, HcclConfigType cfgType, uint32_t infoLen, void *info);

/* ---- symmetric windows ---- */
HcclResult HcclCommSymWinRegister(HcclComm comm, void *addr, uint64_t size, HcclCommSymWindow *winHandle,
                                  uint32_t flag);
HcclResult HcclCommSymWinDeregister(HcclCommSymWindow winHandle);
HcclResult HcclCommSymWinGet(HcclComm comm, void *ptr, size_t size, HcclCommSymWindow *winHandle,
                             size_t *offset);
HcclResult HcclSymWinGetPeerPointer(HcclCommSymWindow winHandle, size_t offset, uint32_t peerRank, void **ptr);

/* ---- collectives (counts are element counts) ---- */
HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op,
                         HcclComm comm, aclrtStream stream);
HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                         aclrtStream stream);
HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                             HcclReduceOp op, HcclComm comm, aclrtStream stream);
HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType, HcclComm comm,
                         aclrtStream stream);
HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank, HcclComm comm,
                    aclrtStream stream);
HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank, HcclComm comm,
                    aclrtStream stream);
HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType, const void *recvBuf,
                        uint64_t recvCount, HcclDataType recvType, HcclComm comm, aclrtStream stream);
HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op,
                      uint32_t root, HcclComm comm, aclrtStream stream);
HcclResult HcclScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType, uint32_t root,
                       HcclComm comm, aclrtStream stream);
HcclResult HcclAllGatherV(void *sendBuf, uint64_t sendCount, void *recvBuf, const void *recvCounts,
                          const void *recvDispls, HcclDataType dataType, HcclComm comm, aclrtStream stream);
HcclResult HcclReduceScatterV(void *sendBuf, const void *sendCounts, const void *sendDispls, void *recvBuf,
                              uint64_t recvCount, HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                              aclrtStream stream);
HcclResult HcclAlltoAllV(const void *sendBuf, const void *sendCounts, const void *sdispls, HcclDataType sendType,
                         const void *recvBuf, const void *recvCounts, const void *rdispls, HcclDataType recvType,
                         HcclComm comm, aclrtStream stream);
HcclResult HcclAlltoAllVC(const void *sendBuf, const void *sendCountMatrix, HcclDataType sendType,
                          const void *recvBuf, HcclDataType recvType, HcclComm comm, aclrtStream stream);
HcclResult HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo, uint32_t itemNum, HcclComm comm, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* HCCL_SYS_DECLS_H */
