/* Smoke test of libascend_sim.so from C: our own prototypes of the ACL calls used (the
 * signatures and struct layouts of CANN's acl/acl_rt.h, as declared in acl-sys), no vendor
 * header. `smoke [SOC_NAME]`: aclrtGetSocName must return SOC_NAME (default: the A3 default,
 * Ascend910_9391). Exit 0 and "SMOKE OK" on success. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>

typedef int aclError;
typedef void *aclrtDrvMemHandle;

typedef struct { uint32_t id; uint32_t type; } aclrtMemLocation;
typedef struct {
    uint32_t handleType;
    uint32_t allocationType;
    uint32_t memAttr;
    aclrtMemLocation location;
    uint64_t reserve;
} aclrtPhysicalMemProp;

typedef struct {
    aclrtMemLocation dstLoc;
    aclrtMemLocation srcLoc;
    uint8_t rsv[16];
} aclrtMemcpyBatchAttr;

typedef struct {
    uint64_t reservations, physical, imports, mappings, exports, streams, events, contexts,
        device_mallocs, host_mallocs, comms, windows;
} AscendSimCounters;

aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr, uint64_t flags);
aclError aclrtReserveMemAddressNoUCMemory(void **virPtr, size_t size, size_t alignment, void *expectPtr,
                                          uint64_t flags);
const char *aclrtGetSocName(void);
aclError aclrtReleaseMemAddress(void *virPtr);
aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const aclrtPhysicalMemProp *prop, uint64_t flags);
aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags);
aclError aclrtUnmapMem(void *virPtr);
aclError aclrtMalloc(void **devPtr, size_t size, uint32_t policy);
aclError aclrtFree(void *devPtr);
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, uint32_t kind);
aclError aclrtMemcpyBatch(void **dsts, size_t *destMaxs, void **srcs, size_t *sizes, size_t numBatches,
                          aclrtMemcpyBatchAttr *attrs, size_t *attrsIndexes, size_t numAttrs, size_t *failIndex);
aclError aclrtValueWrite(void *devAddr, uint64_t value, uint32_t flag, void *stream);
aclError aclrtValueWait(void *devAddr, uint64_t value, uint32_t flag, void *stream);
aclError aclrtSynchronizeStream(void *stream);
const char *aclGetRecentErrMsg(void);
int ascendSimGetCounters(AscendSimCounters *out);

#define CHECK(call, want)                                                                  \
    do {                                                                                   \
        aclError rc_ = (call);                                                             \
        if (rc_ != (want)) {                                                               \
            const char *m_ = aclGetRecentErrMsg();                                         \
            fprintf(stderr, "%s:%d: %s returned %d, want %d (%s)\n", __FILE__, __LINE__,   \
                    #call, rc_, (want), m_ ? m_ : "no message");                           \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

/* What HIXL's Initialize does first: the SoC name, then its VA pool's reservation, the NoUC
 * call first and aclrtReserveMemAddress only when that answers "not supported" (207000). */
static int soc_and_pool(const char *want) {
    const char *soc = aclrtGetSocName();
    if (soc == NULL || strcmp(soc, want) != 0) {
        fprintf(stderr, "aclrtGetSocName returned %s, want %s\n", soc ? soc : "NULL", want);
        return 1;
    }
    if (aclrtGetSocName() != soc) {
        fprintf(stderr, "aclrtGetSocName returned a different pointer on a second call\n");
        return 1;
    }
    const size_t gib = (size_t)1 << 30;
    void *va = NULL;
    CHECK(aclrtReserveMemAddressNoUCMemory(&va, gib, 0, NULL, 1), 207000);
    if (va != NULL) {
        fprintf(stderr, "a refused reservation wrote an address\n");
        return 1;
    }
    CHECK(aclrtReserveMemAddress(&va, gib, 0, NULL, 1), 0);
    CHECK(aclrtReleaseMemAddress(va), 0);
    return 0;
}

int main(int argc, char **argv) {
    const size_t size = 2u << 20;
    if (soc_and_pool(argc > 1 ? argv[1] : "Ascend910_9391") != 0) {
        return 1;
    }
    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.memAttr = 4;          /* ACL_HBM_MEM_HUGE */
    prop.location.type = 1;    /* ACL_MEM_LOCATION_TYPE_DEVICE */
    prop.location.id = 0;

    CHECK(aclrtSetDevice(0), 0);
    void *va = NULL;
    CHECK(aclrtReserveMemAddress(&va, 2 * size, 0, NULL, 0), 0); /* second half stays unmapped */
    aclrtDrvMemHandle h = NULL;
    CHECK(aclrtMallocPhysical(&h, size, &prop, 0), 0);
    CHECK(aclrtMapMem(va, 4096, 0, h, 0), 107000); /* size differs from the allocation */
    const char *msg = aclGetRecentErrMsg();
    if (msg == NULL || strstr(msg, "aclrtMapMem") == NULL) {
        fprintf(stderr, "missing error message\n");
        return 1;
    }
    CHECK(aclrtMapMem(va, size, 0, h, 0), 0);

    void *dev = NULL;
    CHECK(aclrtMalloc(&dev, 4096, 0), 0);
    char in[4096], out[4096];
    memset(in, 0x5a, sizeof in);
    memset(out, 0, sizeof out);
    CHECK(aclrtMemcpy(va, size, in, sizeof in, 1 /* H2D */), 0);
    CHECK(aclrtMemcpy(dev, 4096, va, sizeof in, 3 /* D2D */), 0);
    CHECK(aclrtMemcpy(out, sizeof out, dev, sizeof out, 2 /* D2H */), 0);
    if (memcmp(in, out, sizeof in) != 0) {
        fprintf(stderr, "data mismatch\n");
        return 1;
    }
    CHECK(aclrtMemcpy(out, sizeof out, (char *)va + size, 16, 2), 507053); /* past the mapping */

    /* A batch of two host-to-device copies; the second is too big for its destMax. */
    aclrtMemcpyBatchAttr attr;
    memset(&attr, 0, sizeof attr);
    attr.dstLoc.type = 1; /* DEVICE 0 */
    attr.srcLoc.type = 0; /* HOST */
    void *dsts[2] = {dev, (char *)dev + 2048};
    void *srcs[2] = {in, in};
    size_t maxs[2] = {2048, 2048};
    size_t sizes[2] = {2048, 4096};
    size_t idx[1] = {0};
    size_t fail = 0;
    CHECK(aclrtMemcpyBatch(dsts, maxs, srcs, sizes, 2, &attr, idx, 1, &fail), 100000);
    if (fail != 1) {
        fprintf(stderr, "failIndex %zu, want 1\n", fail);
        return 1;
    }
    sizes[1] = 2048;
    CHECK(aclrtMemcpyBatch(dsts, maxs, srcs, sizes, 2, &attr, idx, 1, &fail), 0);
    if (fail != SIZE_MAX) {
        fprintf(stderr, "failIndex %zu, want SIZE_MAX\n", fail);
        return 1;
    }

    /* Stream-ordered values on the default stream. */
    CHECK(aclrtValueWrite(dev, 7, 0, NULL), 0);
    CHECK(aclrtValueWait(dev, 7, 1 /* EQ */, NULL), 0);
    CHECK(aclrtValueWrite((char *)dev + 4, 7, 0, NULL), 107008); /* unaligned */
    CHECK(aclrtSynchronizeStream(NULL), 0);
    uint64_t word = 0;
    CHECK(aclrtMemcpy(&word, sizeof word, dev, sizeof word, 2 /* D2H */), 0);
    if (word != 7) {
        fprintf(stderr, "value word %llu, want 7\n", (unsigned long long)word);
        return 1;
    }

    CHECK(aclrtFree(dev), 0);
    CHECK(aclrtUnmapMem(va), 0);
    CHECK(aclrtFreePhysical(h), 0);
    CHECK(aclrtReleaseMemAddress(va), 0);
    CHECK(aclrtResetDevice(0), 0);

    AscendSimCounters c;
    CHECK(ascendSimGetCounters(&c), 0);
    uint64_t sum = c.reservations + c.physical + c.imports + c.mappings + c.exports + c.streams +
                   c.events + c.contexts + c.device_mallocs + c.host_mallocs + c.comms + c.windows;
    if (sum != 0) {
        fprintf(stderr, "leaked objects: %llu\n", (unsigned long long)sum);
        return 1;
    }
    printf("SMOKE OK\n");
    return 0;
}
