/*
 * Our own declarations of the NCCL profiler plugin ABI, versions 4, 5 and 6.
 *
 * NCCL installs no plugin headers (the PyPI wheels ship nccl.h only), so plugins declare the
 * ABI themselves.  Field order and C types follow NCCL's profiler_v4.h / v5.h / v6.h
 * (NCCL 2.27 through 2.30); see shared/research/nccl-profiler-plugin.md section 1.  Only
 * layout matters here: names are ours where NCCL's would clash with nothing.
 */
#ifndef PERFSCOPE_NCCL_PROFILER_ABI_H
#define PERFSCOPE_NCCL_PROFILER_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int ncclResult_t;            /* an enum in NCCL: int-sized */
#define ncclSuccess 0
#define ncclSystemError 2
#define ncclInternalError 3
#define ncclInvalidUsage 5

/* ncclDebugLogLevel values passed to the logger */
#define NCCL_LOG_WARN 2
#define NCCL_LOG_INFO 3
#define NCCL_LOG_FLAG_INIT 1UL

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

/* Event type bits (ncclProfile*). */
enum {
  ncclProfileGroup = 1 << 0,
  ncclProfileColl = 1 << 1,
  ncclProfileP2p = 1 << 2,
  ncclProfileProxyOp = 1 << 3,
  ncclProfileProxyStep = 1 << 4,
  ncclProfileProxyCtrl = 1 << 5,
  ncclProfileKernelCh = 1 << 6,
  ncclProfileNetPlugin = 1 << 7,
  ncclProfileGroupApi = 1 << 8,
  ncclProfileCollApi = 1 << 9,
  ncclProfileP2pApi = 1 << 10,
  ncclProfileKernelLaunch = 1 << 11,
  ncclProfileCeColl = 1 << 12,
  ncclProfileCeSync = 1 << 13,
  ncclProfileCeBatch = 1 << 14,
};

/* Event states (ncclProfilerEventState_v4..v6_t are enums: int-sized). */
typedef int ncclProfilerEventState_t;
enum {
  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,
  ncclProfilerProxyOpInProgress_v4 = 19,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerNetPluginUpdate = 21,
  ncclProfilerKernelChStop = 22,
  ncclProfilerGroupStartApiStop = 23,
  ncclProfilerGroupEndApiStart = 24,
};

/* Union members shared by v4, v5 and v6 (identical layout in all three). */
struct ps_abi_coll_v4 {
  uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
};
struct ps_abi_coll_v5 {
  uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;
};
struct ps_abi_p2p_v4 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
};
struct ps_abi_p2p_v5 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;
};
struct ps_abi_proxy_op {
  pid_t pid;
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
};
struct ps_abi_proxy_step {
  int step;
};
struct ps_abi_kernel_ch {
  uint8_t channelId;
  uint64_t pTimer;
};
struct ps_abi_net_plugin {
  int64_t id;
  void* data;
};
struct ps_abi_group_api {
  bool graphCaptured;
  int groupDepth;
};
struct ps_abi_coll_api {
  const char* func;
  size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graphCaptured;
};
struct ps_abi_p2p_api {
  const char* func;
  size_t count;
  const char* datatype;
  void* stream;
  bool graphCaptured;
};
struct ps_abi_kernel_launch {
  void* stream;
};
/* v6 copy-engine collectives: declared so the v6 union has its real size; not recorded. */
struct ps_abi_ce_coll {
  uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  const char* syncStrategy;
  bool intraBatchSync;
  uint32_t batchSize;
  uint32_t numBatches;
  uint32_t ceSeqNum;
  void* stream;
};

typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct ps_abi_coll_v4 coll;
    struct ps_abi_p2p_v4 p2p;
    struct ps_abi_proxy_op proxyOp;
    struct ps_abi_proxy_step proxyStep;
    struct ps_abi_kernel_ch kernelCh;
    struct ps_abi_net_plugin netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct ps_abi_group_api groupApi;
    struct ps_abi_coll_api collApi;
    struct ps_abi_p2p_api p2pApi;
    struct ps_abi_kernel_launch kernelLaunch;
    struct ps_abi_coll_v5 coll;
    struct ps_abi_p2p_v5 p2p;
    struct ps_abi_proxy_op proxyOp;
    struct ps_abi_proxy_step proxyStep;
    struct ps_abi_kernel_ch kernelCh;
    struct ps_abi_net_plugin netPlugin;
  };
} ncclProfilerEventDescr_v5_t;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct ps_abi_group_api groupApi;
    struct ps_abi_coll_api collApi;
    struct ps_abi_p2p_api p2pApi;
    struct ps_abi_kernel_launch kernelLaunch;
    struct ps_abi_coll_v5 coll;
    struct ps_abi_p2p_v5 p2p;
    struct ps_abi_proxy_op proxyOp;
    struct ps_abi_proxy_step proxyStep;
    struct ps_abi_kernel_ch kernelCh;
    struct ps_abi_net_plugin netPlugin;
    struct ps_abi_ce_coll ceColl;
    struct { bool isComplete; int nRanks; } ceCollSync;
    struct { int numOps; size_t totalBytes; bool useIntraSync; } ceCollBatch;
  };
} ncclProfilerEventDescr_v6_t;

/* State arguments: one union for v4..v6 (v5/v6 add members of the same size). */
typedef union {
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void* data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
} ncclProfilerEventStateArgs_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;

#endif
