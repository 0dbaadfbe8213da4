/*
 * The file format the perfscope NCCL profiler writes (mirrored in reader.py).
 *
 * One file per process: a 128-byte header, then 128-byte records in the order they were
 * flushed (stop order, not start order).  Little-endian, fixed layout, no padding surprises
 * (every field is naturally aligned).  A file cut short by a killed process loses at most
 * its last partial record; the reader ignores a trailing fragment.
 */
#ifndef PERFSCOPE_NCCL_FORMAT_H
#define PERFSCOPE_NCCL_FORMAT_H

#include <stdint.h>

#define PS_MAGIC "PSNCCL1"          /* 8 bytes with the NUL */
#define PS_FORMAT_VERSION 2
/* Version 1 (first H200 recordings) had func[16] dtype[16] algo[16] proto[6] nch nwarps aux:
 * "SIMPLE" came out as "SIMPL".  reader.py reads both. */
#define PS_REC_SIZE 128

/* Record types that are not NCCL events (NCCL's event bits stay below 1 << 16). */
#define PS_REC_COMM (1u << 24)      /* a communicator initialised (init) */
#define PS_REC_COMM_END (1u << 25)  /* a communicator finalised */
#define PS_REC_STATS (1u << 26)     /* running counters, written when they change */

/* flags */
#define PS_FLAG_GRAPH_CAPTURED 1u
#define PS_FLAG_IS_SEND 2u
#define PS_FLAG_FOREIGN_PID 4u      /* ProxyOp issued by another process (PXN): parent unknown */

typedef struct {
  char magic[8];          /* PS_MAGIC */
  uint32_t version;       /* PS_FORMAT_VERSION */
  uint32_t rec_size;      /* PS_REC_SIZE */
  int64_t pid;
  int64_t created_ns;     /* CLOCK_REALTIME */
  int32_t env_rank;       /* PERFSCOPE_RANK / RANK at load, -1 if unset */
  int32_t level;
  uint32_t mask;          /* activation mask asked of NCCL */
  uint32_t nslots;
  uint32_t nring;
  uint32_t reserved;
  int64_t flush_ms;       /* flush period */
  char host[64];
} ps_file_header;

/*
 * Every record.  Field use per type (t = the x area as int64[8], i = as int32[16]):
 *   GroupApi     i0 group depth; flags graph; t[0] GroupStartApiStop ns, t[1] GroupEndApiStart ns
 *   CollApi      i0 root; u0 count; u1 stream; flags graph; s.func s.dtype
 *   P2pApi       u0 count; u1 stream; flags graph; s.func s.dtype
 *   KernelLaunch u1 stream
 *   Group        (nothing)
 *   Coll         i0 root; u0 seq; u1 count; s.func s.dtype s.algo s.proto s.nch s.nwarps;
 *                aux = id of the legacy Group parent (v5+)
 *   P2p          i0 peer; u1 count; s.func s.dtype s.nch; aux = Group parent id (v5+)
 *   ProxyOp      i0 peer; u0 pid; i[0] channel, i[1] nSteps, i[2] chunkSize, i[3] isSend,
 *                i[4] descriptor rank; t[3] InProgress ns
 *   ProxyStep    i0 step; u1 transSize (largest seen); t[0..5] first ns of the states
 *                SendGPUWait, SendPeerWait, SendWait, RecvWait, RecvFlushWait, RecvGPUWait
 *   KernelCh     i0 channel; u0 GPU globaltimer at start; u1 GPU globaltimer at stop;
 *                t[0] host ns when the stop state arrived (taken at the stopEvent that
 *                follows it), 0 if it never did
 *   COMM         comm index; u0 commHash; i0 rank; i[0] nranks, i[1] nNodes, i[2] abi;
 *                bytes 80..127 the communicator's name (NUL-terminated, at most 47 chars)
 *   COMM_END     comm index; stop_ns finalize time
 *   STATS        t[0] ring drops, t[1] slot drops, t[2] events started, t[3] records
 *                queued (= ring pushes), t[4] write errors, t[5] foreign-pid ProxyOps,
 *                t[6] bad handles
 * Event ids are (slot generation << 24) | slot index; ids of COMM/COMM_END have bit 63 set.
 */
typedef struct {
  uint64_t id;            /*   0 unique per process, > 0 */
  uint64_t parent;        /*   8 id of the parent event, 0 if none or unknown */
  int64_t start_ns;       /*  16 CLOCK_REALTIME at startEvent */
  int64_t stop_ns;        /*  24 CLOCK_REALTIME at stopEvent */
  uint32_t type;          /*  32 ncclProfile* bit or PS_REC_* */
  uint32_t tid;           /*  36 kernel thread id that started the event */
  uint16_t comm;          /*  40 communicator index within this process */
  uint8_t abi;            /*  42 profiler ABI version NCCL used: 4, 5 or 6 */
  uint8_t flags;          /*  43 PS_FLAG_* */
  int32_t i0;             /*  44 */
  uint64_t u0;            /*  48 */
  uint64_t u1;            /*  56 */
  union {                 /*  64 .. 127 */
    int64_t t[8];
    int32_t i[16];
    struct {
      char func[14];      /*  64 AllReduce, ReduceScatter, Send, ... */
      uint8_t nch;        /*  78 channels */
      uint8_t nwarps;     /*  79 warps */
      char dtype[16];     /*  80 ncclFloat32, ... */
      char algo[16];      /*  96 RING, TREE, COLLNET_DIRECT, ... */
      char proto[8];      /* 112 SIMPLE, LL, LL128 */
      uint64_t aux;       /* 120 id of the legacy Group parent (Coll/P2p, v5+) */
    } s;
  } x;
} ps_rec;

_Static_assert(sizeof(ps_rec) == PS_REC_SIZE, "record must be 128 bytes");
_Static_assert(sizeof(ps_file_header) == PS_REC_SIZE, "header must be 128 bytes");

#endif
