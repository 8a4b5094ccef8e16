/*
 * HIXL client/server C API declarations bound by hixl-sys.
 *
 * Written by the ascend-mem developers from the published ABI facts (type sizes, field
 * offsets, enum values, parameter order) of the HixlCS API, 9.1.0 and later layouts, and of
 * the communication resource types it uses. Declared in plain C; not a vendor header.
 */
#ifndef HIXL_SYS_DECLS_H
#define HIXL_SYS_DECLS_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t HixlStatus;
static const HixlStatus HIXL_SUCCESS = 0;
static const HixlStatus HIXL_PARAM_INVALID = 103900;
static const HixlStatus HIXL_TIMEOUT = 103901;
static const HixlStatus HIXL_NOT_CONNECTED = 103902;
static const HixlStatus HIXL_ALREADY_CONNECTED = 103903;
static const HixlStatus HIXL_NOTIFY_FAILED = 103904;
static const HixlStatus HIXL_UNSUPPORTED = 103905;
static const HixlStatus HIXL_RESOURCE_EXHAUSTED = 203900;
static const HixlStatus HIXL_FAILED = 503900;

typedef void *HixlServerHandle;
typedef void *HixlClientHandle;
typedef void *CompleteHandle;
typedef void *MemHandle;

typedef enum HixlCompleteStatus {
    HIXL_COMPLETE_STATUS_WAITING = 0,
    HIXL_COMPLETE_STATUS_COMPLETED = 1,
    HIXL_COMPLETE_STATUS_TIMEOUT = 2,
    HIXL_COMPLETE_STATUS_FAILED = 3
} HixlCompleteStatus;

typedef enum CommProtocol {
    COMM_PROTOCOL_RESERVED = -1,
    COMM_PROTOCOL_HCCS = 0,
    COMM_PROTOCOL_ROCE = 1,
    COMM_PROTOCOL_PCIE = 2,
    COMM_PROTOCOL_SIO = 3,
    COMM_PROTOCOL_UBC_CTP = 4,
    COMM_PROTOCOL_UBC_TP = 5,
    COMM_PROTOCOL_UB_MEM = 6,
    COMM_PROTOCOL_UBOE = 7,
    COMM_PROTOCOL_HCCS_ONLY = 8,
    COMM_PROTOCOL_UBG = 9
} CommProtocol;

typedef enum CommAddrType {
    COMM_ADDR_TYPE_RESERVED = -1,
    COMM_ADDR_TYPE_IP_V4 = 0,
    COMM_ADDR_TYPE_IP_V6 = 1,
    COMM_ADDR_TYPE_ID = 2,
    COMM_ADDR_TYPE_EID = 3
} CommAddrType;

typedef enum EndpointLocType {
    ENDPOINT_LOC_TYPE_RESERVED = -1,
    ENDPOINT_LOC_TYPE_DEVICE = 0,
    ENDPOINT_LOC_TYPE_HOST = 1
} EndpointLocType;

typedef enum CommMemType {
    COMM_MEM_TYPE_INVALID = -1,
    COMM_MEM_TYPE_DEVICE = 0,
    COMM_MEM_TYPE_HOST = 1
} CommMemType;

typedef struct CommMem {
    CommMemType type;
    void *addr;
    uint64_t size;
} CommMem;

/* IPv4 and IPv6 addresses as their network-order bytes (struct in_addr / in6_addr). */
typedef struct CommAddr {
    CommAddrType type;
    union {
        uint8_t raws[36];
        uint8_t addr[4];
        uint8_t addr6[16];
        uint32_t id;
        uint8_t eid[16];
    };
} CommAddr;

typedef struct EndpointLocDevice {
    uint32_t devPhyId;
    uint32_t superDevId;
    uint32_t serverIdx;
    uint32_t superPodIdx;
} EndpointLocDevice;

typedef struct EndpointLocHost {
    uint32_t id;
} EndpointLocHost;

typedef struct EndpointLoc {
    EndpointLocType locType;
    union {
        uint8_t raws[60];
        EndpointLocDevice device;
        EndpointLocHost host;
    };
} EndpointLoc;

typedef struct EndpointDesc {
    CommProtocol protocol;
    CommAddr commAddr;
    EndpointLoc loc;
    uint8_t raws[52];
} EndpointDesc;

typedef struct HixlServerConfig {
    const char *global_resource_config;
    uint8_t reserved[120];
} HixlServerConfig;

typedef struct HixlClientConfig {
    const char *global_resource_config;
    uint8_t reserved[120];
} HixlClientConfig;

typedef struct HixlClientDesc {
    const EndpointDesc *local_endpoint;
    const EndpointDesc *remote_endpoint;
    const char *server_ip;
    uint32_t server_port;
    uint8_t tc;
    uint8_t sl;
    uint8_t reserved[98];
} HixlClientDesc;

typedef struct HixlServerDesc {
    const EndpointDesc *endpoint_list;
    const char *server_ip;
    uint32_t server_port;
    uint32_t endpoint_list_num;
    uint8_t reserved[104];
} HixlServerDesc;

/* Remote first: put copies local -> remote, get remote -> local. */
typedef struct HixlOneSideOpDesc {
    void *remote_buf;
    void *local_buf;
    uint64_t len;
} HixlOneSideOpDesc;

#ifdef __cplusplus
extern "C" {
#endif

HixlStatus HixlCSServerCreate(const HixlServerDesc *server_desc, const HixlServerConfig *config,
                              HixlServerHandle *server_handle);
HixlStatus HixlCSServerRegMem(HixlServerHandle server_handle, const char *mem_tag, const CommMem *mem,
                              MemHandle *mem_handle);
HixlStatus HixlCSServerListen(HixlServerHandle server_handle, uint32_t backlog);
HixlStatus HixlCSServerUnregMem(HixlServerHandle server_handle, MemHandle mem_handle);
HixlStatus HixlCSServerDestroy(HixlServerHandle server_handle);
HixlStatus HixlCSClientCreate(const HixlClientDesc *client_desc, const HixlClientConfig *config,
                              HixlClientHandle *client_handle);
HixlStatus HixlCSClientConnect(HixlClientHandle client_handle, uint32_t timeout_ms);
HixlStatus HixlCSClientGetRemoteMem(HixlClientHandle client_handle, CommMem **remote_mem_list,
                                    char ***mem_tag_list, uint32_t *list_num, uint32_t timeout_ms);
HixlStatus HixlCSClientRegMem(HixlClientHandle client_handle, const char *mem_tag, const CommMem *mem,
                              MemHandle *mem_handle);
HixlStatus HixlCSClientUnregMem(HixlClientHandle client_handle, MemHandle mem_handle);
HixlStatus HixlCSClientBatchPutAsync(HixlClientHandle client_handle, uint32_t list_num,
                                     const HixlOneSideOpDesc *desc_list, CompleteHandle *complete_handle);
HixlStatus HixlCSClientBatchGetAsync(HixlClientHandle client_handle, uint32_t list_num,
                                     const HixlOneSideOpDesc *desc_list, CompleteHandle *complete_handle);
HixlStatus HixlCSClientBatchPutSync(HixlClientHandle client_handle, uint32_t list_num,
                                    const HixlOneSideOpDesc *desc_list, uint32_t timeout_ms);
HixlStatus HixlCSClientBatchGetSync(HixlClientHandle client_handle, uint32_t list_num,
                                    const HixlOneSideOpDesc *desc_list, uint32_t timeout_ms);
HixlStatus HixlCSClientQueryCompleteStatus(HixlClientHandle client_handle, CompleteHandle complete_handle,
                                           HixlCompleteStatus *complete_status);
HixlStatus HixlCSClientDestroy(HixlClientHandle client_handle);

#ifdef __cplusplus
}
#endif

#endif /* HIXL_SYS_DECLS_H */
