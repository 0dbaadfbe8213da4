/*
 * perfscope's NCCL profiler plugin.
 *
 * NCCL loads this library through NCCL_PROFILER_PLUGIN and calls it from many threads at
 * once (application threads, CUDA host-callback threads, proxy progress threads).  Rules
 * this file keeps, because a profiler must never hurt the job it watches:
 *
 *   * never block: the hot path (startEvent, stopEvent, recordEventState) takes no lock and
 *     makes no system call except clock_gettime (vDSO) and, once per thread, gettid;
 *   * never allocate after warm-up: the event slots, the record ring and the write buffer
 *     are allocated once, at the first init, sized by PERFSCOPE_NCCL_BUFFER_MB;
 *   * drop and count when full: no free slot -> NULL handle (NCCL then skips the event and
 *     its children); full ring -> the record is dropped; both counters reach the file;
 *   * never crash: handles are checked to lie inside our slot pool before use, slots are
 *     never freed (a stale handle reads old data, never unmapped memory), and a ProxyOp
 *     from another process (PXN) never has its parent pointer dereferenced;
 *   * failing init returns an error, and NCCL continues without the plugin.
 *
 * Slots are reused first-in first-out: a slot freed at stopEvent is handed out again only
 * after every other free slot, because NCCL starts children (ProxyOp, KernelCh) of a Coll
 * after the Coll's stopEvent and we read the parent's id through its handle then.
 *
 * A background thread drains the ring into one file per process every
 * PERFSCOPE_NCCL_FLUSH_MS (default 1000 ms); finalize and process exit drain it too, so a
 * killed job keeps everything up to its last flush.  Format: perfscope_nccl_format.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nccl_profiler_abi.h"
#include "perfscope_nccl_format.h"

#define PS_EXPORT __attribute__((visibility("default")))
#define PS_MAX_COMMS 1024
#define PS_WBUF_RECORDS 4096
#define PS_IDX_BITS 24 /* slot index bits of an event id (PERFSCOPE_NCCL_SLOTS <= 2^22) */
#define PS_OTHER_ID (1ULL << 63)

#define RELAXED __ATOMIC_RELAXED
#define ACQUIRE __ATOMIC_ACQUIRE
#define RELEASE __ATOMIC_RELEASE
#define LOAD(p, o) __atomic_load_n((p), (o))
#define STORE(p, v, o) __atomic_store_n((p), (v), (o))
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)

/* ---------------------------------------------------------------- bounded MPMC queues */
/* Vyukov's bounded queue: a cell's sequence number says whose turn it is.  Producers and
 * consumers only CAS a position counter; a full queue makes push fail (we drop). */

typedef struct {
  uint64_t seq;
  uint32_t val;
} ps_idx_cell;

typedef struct {
  uint64_t seq;
  ps_rec rec;
} ps_rec_cell;

typedef struct {
  uint64_t mask;
  ps_idx_cell* cells;
  char pad0[48];
  uint64_t head; /* next push position */
  char pad1[56];
  uint64_t tail; /* next pop position */
  char pad2[56];
} ps_idx_queue;

typedef struct {
  uint64_t mask;
  ps_rec_cell* cells;
  char pad0[48];
  uint64_t head;
  char pad1[56];
  uint64_t tail; /* only the flusher pops, under g.flush_lock */
  char pad2[56];
} ps_rec_ring;

static int idx_push(ps_idx_queue* q, uint32_t v) {
  uint64_t pos = LOAD(&q->head, RELAXED);
  ps_idx_cell* c;
  for (;;) {
    c = &q->cells[pos & q->mask];
    uint64_t seq = LOAD(&c->seq, ACQUIRE);
    int64_t dif = (int64_t)seq - (int64_t)pos;
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&q->head, &pos, pos + 1, 1, RELAXED, RELAXED)) break;
    } else if (dif < 0) {
      return 0;
    } else {
      pos = LOAD(&q->head, RELAXED);
    }
  }
  c->val = v;
  STORE(&c->seq, pos + 1, RELEASE);
  return 1;
}

static int idx_pop(ps_idx_queue* q, uint32_t* v) {
  uint64_t pos = LOAD(&q->tail, RELAXED);
  ps_idx_cell* c;
  for (;;) {
    c = &q->cells[pos & q->mask];
    uint64_t seq = LOAD(&c->seq, ACQUIRE);
    int64_t dif = (int64_t)seq - (int64_t)(pos + 1);
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&q->tail, &pos, pos + 1, 1, RELAXED, RELAXED)) break;
    } else if (dif < 0) {
      return 0;
    } else {
      pos = LOAD(&q->tail, RELAXED);
    }
  }
  *v = c->val;
  STORE(&c->seq, pos + q->mask + 1, RELEASE);
  return 1;
}

static int rec_push(ps_rec_ring* q, const ps_rec* r) {
  uint64_t pos = LOAD(&q->head, RELAXED);
  ps_rec_cell* c;
  for (;;) {
    c = &q->cells[pos & q->mask];
    uint64_t seq = LOAD(&c->seq, ACQUIRE);
    int64_t dif = (int64_t)seq - (int64_t)pos;
    if (dif == 0) {
      if (__atomic_compare_exchange_n(&q->head, &pos, pos + 1, 1, RELAXED, RELAXED)) break;
    } else if (dif < 0) {
      return 0;
    } else {
      pos = LOAD(&q->head, RELAXED);
    }
  }
  memcpy(&c->rec, r, sizeof(ps_rec));
  STORE(&c->seq, pos + 1, RELEASE);
  return 1;
}

/* Single consumer: copy up to max ready records into out; returns how many. */
static size_t rec_drain(ps_rec_ring* q, ps_rec* out, size_t max) {
  size_t n = 0;
  uint64_t pos = q->tail;
  while (n < max) {
    ps_rec_cell* c = &q->cells[pos & q->mask];
    if (LOAD(&c->seq, ACQUIRE) != pos + 1) break; /* empty, or a producer is mid-write */
    memcpy(&out[n++], &c->rec, sizeof(ps_rec));
    STORE(&c->seq, pos + q->mask + 1, RELEASE);
    pos++;
  }
  q->tail = pos;
  return n;
}

/* ---------------------------------------------------------------- global state */

typedef struct {
  uint16_t index;
  uint8_t abi;
  int rank;
  int nranks;
  int* mask_ptr; /* NCCL's process-wide activation mask */
} ps_comm;

enum { ST_RING_DROPS, ST_SLOT_DROPS, ST_STARTED, ST_QUEUED, ST_WRITE_ERRORS, ST_FOREIGN, ST_BAD_HANDLES, ST_N };

static struct {
  pthread_once_t once;
  int init_rc;          /* result of the one-time setup */
  int level;
  uint32_t mask;        /* what we ask NCCL for */
  uint32_t record_mask; /* what we keep (mask plus the ancestors NCCL adds) */
  int env_rank;
  long flush_ms;
  char dir[PATH_MAX];
  pid_t pid;
  int disabled; /* set in a forked child: never write the parent's file */

  ps_rec* slots;
  uint32_t nslots;
  ps_idx_queue free_q;
  ps_rec_ring ring;
  ps_rec* wbuf;

  uint64_t next_id;
  uint64_t stats[ST_N];
  uint64_t stats_written[ST_N];

  ps_comm comms[PS_MAX_COMMS];
  uint32_t ncomms;

  pthread_mutex_t flush_lock; /* flusher thread vs finalize vs exit; never taken on the hot path */
  int fd;
  pthread_t flusher;
  int flusher_started;
  ncclDebugLogger_t logfn;
} g = {.once = PTHREAD_ONCE_INIT, .flush_lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .env_rank = -1};

static __thread uint32_t t_tid;

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* same clock as CUPTI's timestamps */
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline uint32_t my_tid(void) {
  if (t_tid == 0) t_tid = (uint32_t)syscall(SYS_gettid);
  return t_tid;
}

static inline void copy_str(char* dst, size_t cap, const char* src) {
  size_t i = 0;
  if (src)
    for (; i + 1 < cap && src[i]; i++) dst[i] = src[i];
  dst[i] = 0;
}

static long env_long(const char* name, long dflt, long lo, long hi) {
  const char* s = getenv(name);
  if (!s || !*s) return dflt;
  char* end;
  long v = strtol(s, &end, 0);
  if (*end || v < lo || v > hi) return dflt;
  return v;
}

static uint32_t pow2_floor(uint64_t v, uint32_t lo, uint32_t hi) {
  uint64_t p = lo;
  while (p * 2 <= v && p * 2 <= hi) p *= 2;
  return (uint32_t)p;
}

static uint32_t record_mask_for(uint32_t mask) {
  /* NCCL also starts the ancestors of what we ask for (research notes 1.8); keep them. */
  uint32_t r = mask;
  if (mask & (ncclProfileColl | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh))
    r |= ncclProfileColl | ncclProfileP2p | ncclProfileGroup | ncclProfileGroupApi | ncclProfileCollApi |
         ncclProfileP2pApi;
  if (mask & ncclProfileProxyStep) r |= ncclProfileProxyOp;
  return r & ~(uint32_t)(ncclProfileProxyCtrl | ncclProfileNetPlugin | ncclProfileCeColl | ncclProfileCeSync |
                         ncclProfileCeBatch);
}

static uint32_t level_mask(int level) {
  uint32_t m = 0;
  if (level >= 1)
    m |= ncclProfileGroupApi | ncclProfileCollApi | ncclProfileP2pApi | ncclProfileKernelLaunch | ncclProfileGroup |
         ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh;
  if (level >= 2) m |= ncclProfileProxyOp;
  if (level >= 3) m |= ncclProfileProxyStep;
  return m;
}

/* ---------------------------------------------------------------- file output */

static int write_all(int fd, const void* buf, size_t n) {
  const char* p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int open_output(int comm_rank) {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  mkdir(g.dir, 0777); /* one level; EEXIST is fine, any other failure shows at open */
  char path[PATH_MAX + 128];
  int rank = g.env_rank >= 0 ? g.env_rank : comm_rank;
  /* Never overwrite: a restarted process may have the same pid (containers, pid 1). */
  int fd = -1;
  for (int k = 0; k < 100 && fd < 0; k++) {
    if (k == 0)
      snprintf(path, sizeof(path), "%s/nccl-rank%d-%s-pid%d.psnccl", g.dir, rank, host, (int)g.pid);
    else
      snprintf(path, sizeof(path), "%s/nccl-rank%d-%s-pid%d-%d.psnccl", g.dir, rank, host, (int)g.pid, k);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return -1;
  }
  if (fd < 0) return -1;
  ps_file_header h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, PS_MAGIC, 8);
  h.version = PS_FORMAT_VERSION;
  h.rec_size = PS_REC_SIZE;
  h.pid = g.pid;
  h.created_ns = now_ns();
  h.env_rank = g.env_rank;
  h.level = LOAD(&g.level, RELAXED);
  h.mask = LOAD(&g.mask, RELAXED);
  h.nslots = g.nslots;
  h.nring = (uint32_t)(g.ring.mask + 1);
  h.flush_ms = g.flush_ms;
  memcpy(h.host, host, sizeof(h.host));
  if (write_all(fd, &h, sizeof(h)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Write whole records; on an error count it and step back to the last record boundary,
 * so that a short write before the error (disk full) leaves no partial record that would
 * shift every later record of the file. */
static int write_records(const void* buf, size_t n) {
  if (write_all(g.fd, buf, n) == 0) return 0;
  ADD(&g.stats[ST_WRITE_ERRORS], 1);
  off_t off = lseek(g.fd, 0, SEEK_CUR);
  if (off > 0 && off % PS_REC_SIZE) {
    off -= off % PS_REC_SIZE;
    if (ftruncate(g.fd, off) != 0) { /* the next write overwrites the fragment instead */ }
    lseek(g.fd, off, SEEK_SET);
  }
  return -1;
}

/* Drain the ring to the file; caller holds flush_lock. */
static void drain_locked(void) {
  if (g.fd < 0 || LOAD(&g.disabled, RELAXED) || getpid() != g.pid) return;
  for (;;) {
    size_t n = rec_drain(&g.ring, g.wbuf, PS_WBUF_RECORDS);
    if (n == 0) break;
    write_records(g.wbuf, n * sizeof(ps_rec));
  }
  /* Counters go out as a record whenever they changed, so the last one in the file holds
   * the totals up to the last flush. */
  uint64_t cur[ST_N];
  int changed = 0;
  STORE(&g.stats[ST_QUEUED], LOAD(&g.ring.head, RELAXED), RELAXED);
  for (int i = 0; i < ST_N; i++) {
    cur[i] = LOAD(&g.stats[i], RELAXED);
    changed |= cur[i] != g.stats_written[i];
  }
  if (changed) {
    ps_rec r;
    memset(&r, 0, sizeof(r));
    r.type = PS_REC_STATS;
    r.start_ns = r.stop_ns = now_ns();
    for (int i = 0; i < ST_N; i++) r.x.t[i] = (int64_t)cur[i];
    if (write_records(&r, sizeof(r)) == 0) memcpy(g.stats_written, cur, sizeof(cur));
  }
}

static void drain(void) {
  if (LOAD(&g.disabled, RELAXED)) return; /* forked child: writes nothing, takes no lock */
  pthread_mutex_lock(&g.flush_lock);
  drain_locked();
  pthread_mutex_unlock(&g.flush_lock);
}

static void* flusher_main(void* arg) {
  (void)arg;
  /* Signals are the application's: never let the kernel pick this thread for one. */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  struct timespec ts = {g.flush_ms / 1000, (g.flush_ms % 1000) * 1000000L};
  for (;;) {
    nanosleep(&ts, NULL);
    drain();
  }
  return NULL;
}

/* A forked child (e.g. a DataLoader worker) has no flusher thread, and that thread may have
 * held flush_lock at the fork: the child's copy would stay locked forever, and its exit
 * (at_unload), perfscope_nccl_flush or an init would hang.  Disable and renew the lock. */
static void at_fork_child(void) {
  g.disabled = 1;
  pthread_mutex_init(&g.flush_lock, NULL);
}

__attribute__((destructor)) static void at_unload(void) {
  if (g.wbuf) drain();
}

/* ---------------------------------------------------------------- one-time setup */

static void setup_once(void) {
  g.pid = getpid();
  g.level = (int)env_long("PERFSCOPE_NCCL_LEVEL", 1, 0, 3);
  g.mask = level_mask(g.level);
  long m = env_long("PERFSCOPE_NCCL_MASK", -1, 0, 0xffff);
  if (m >= 0) g.mask = (uint32_t)m;
  g.record_mask = record_mask_for(g.mask);
  g.env_rank = (int)env_long("PERFSCOPE_RANK", -1, 0, INT_MAX);
  if (g.env_rank < 0) g.env_rank = (int)env_long("RANK", -1, 0, INT_MAX);
  g.flush_ms = env_long("PERFSCOPE_NCCL_FLUSH_MS", 1000, 10, 3600000);
  const char* dir = getenv("PERFSCOPE_NCCL_DIR");
  copy_str(g.dir, sizeof(g.dir), dir && *dir ? dir : "perfscope-nccl");
  if (g.level == 0 && m < 0) {
    g.init_rc = ncclSuccess; /* off: load, ask for nothing, write nothing */
    return;
  }
  if (env_long("PERFSCOPE_NCCL_PAUSED", 0, 0, 1)) {
    /* Loaded between two windows of a schedule: buffers for the level asked for, but no
     * event until perfscope_nccl_set_level resumes (the recorder's gate knows the level). */
    g.level = 0;
    g.mask = 0;
  }

  /* Memory: a quarter of the budget for live event slots, the rest for the record ring. */
  uint64_t budget = (uint64_t)env_long("PERFSCOPE_NCCL_BUFFER_MB", 32, 1, 1 << 16) << 20;
  g.nslots = pow2_floor(budget / 4 / sizeof(ps_rec), 64, 1u << 22);
  uint32_t nring = pow2_floor(budget * 3 / 4 / sizeof(ps_rec_cell), 64, 1u << 24);
  long s = env_long("PERFSCOPE_NCCL_SLOTS", 0, 2, 1 << 22);
  if (s) g.nslots = pow2_floor((uint64_t)s, 2, 1u << 22);
  long r = env_long("PERFSCOPE_NCCL_RING", 0, 2, 1 << 24);
  if (r) nring = pow2_floor((uint64_t)r, 2, 1u << 24);

  g.slots = calloc(g.nslots, sizeof(ps_rec));
  g.free_q.cells = calloc(g.nslots, sizeof(ps_idx_cell));
  g.ring.cells = calloc(nring, sizeof(ps_rec_cell));
  g.wbuf = calloc(PS_WBUF_RECORDS, sizeof(ps_rec));
  if (!g.slots || !g.free_q.cells || !g.ring.cells || !g.wbuf) {
    free(g.slots);
    free(g.free_q.cells);
    free(g.ring.cells);
    free(g.wbuf);
    g.slots = NULL;
    g.wbuf = NULL;
    g.init_rc = ncclSystemError;
    return;
  }
  g.free_q.mask = g.nslots - 1;
  for (uint32_t i = 0; i < g.nslots; i++) g.free_q.cells[i].seq = i;
  for (uint32_t i = 0; i < g.nslots; i++) idx_push(&g.free_q, i);
  g.ring.mask = nring - 1;
  for (uint32_t i = 0; i < nring; i++) g.ring.cells[i].seq = i; /* also faults every page in now */
  memset(g.slots, 0, (size_t)g.nslots * sizeof(ps_rec));         /* ... not on the hot path */
  pthread_atfork(NULL, NULL, at_fork_child);
  g.init_rc = ncclSuccess;
}

/* ---------------------------------------------------------------- event slots */

static inline ps_rec* slot_of(void* handle) {
  uintptr_t p = (uintptr_t)handle, base = (uintptr_t)g.slots;
  if (!handle || !g.slots || p < base || p >= base + (uintptr_t)g.nslots * sizeof(ps_rec) ||
      (p - base) % sizeof(ps_rec) != 0)
    return NULL;
  return (ps_rec*)handle;
}

static inline uint64_t parent_id(void* parent) {
  ps_rec* p = slot_of(parent);
  return p ? LOAD(&p->id, RELAXED) : 0;
}

static inline void emit(const ps_rec* r) {
  /* Records queued = the ring's head position (read at drain), so success costs no counter. */
  if (!rec_push(&g.ring, r)) ADD(&g.stats[ST_RING_DROPS], 1);
}

static inline void slot_release(ps_rec* s) {
  STORE(&s->type, 0u, RELAXED);
  idx_push(&g.free_q, (uint32_t)(s - g.slots)); /* cannot fail: the queue holds every slot */
}

/* The descriptor fields every version shares, gathered so one function fills a slot. */
typedef struct {
  uint32_t type;
  void* parent;
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
  } u;
  int rank;
} ps_descr;

static ncclResult_t start_common(ps_comm* comm, void** eHandle, const ps_descr* d, int has_group_parent) {
  *eHandle = NULL;
  if (!comm || !g.slots || !(d->type & LOAD(&g.record_mask, RELAXED))) return ncclSuccess;
  /* Paused (mask 0): NCCL may still start the events of an operation whose mask it sampled
   * before the pause (per group).  Keep the children of events we recorded (an operation
   * begun in the window stays whole), refuse everything else: an operation that starts
   * while paused leaves no record, and its children get no parent of ours. */
  if (LOAD(&g.mask, RELAXED) == 0 && !slot_of(d->parent)) return ncclSuccess;
  uint32_t idx;
  if (!idx_pop(&g.free_q, &idx)) {
    ADD(&g.stats[ST_SLOT_DROPS], 1);
    return ncclSuccess;
  }
  ps_rec* s = &g.slots[idx];
  memset(&s->x, 0, sizeof(s->x));
  s->start_ns = now_ns();
  s->stop_ns = 0;
  s->tid = my_tid();
  s->comm = comm->index;
  s->abi = comm->abi;
  s->flags = 0;
  s->i0 = 0;
  s->u0 = s->u1 = 0;
  s->parent = 0;
  switch (d->type) {
    case ncclProfileGroupApi:
      s->i0 = d->u.groupApi.groupDepth;
      s->flags = d->u.groupApi.graphCaptured ? PS_FLAG_GRAPH_CAPTURED : 0;
      break;
    case ncclProfileCollApi:
      s->i0 = d->u.collApi.root;
      s->u0 = d->u.collApi.count;
      s->u1 = (uint64_t)(uintptr_t)d->u.collApi.stream;
      s->flags = d->u.collApi.graphCaptured ? PS_FLAG_GRAPH_CAPTURED : 0;
      copy_str(s->x.s.func, sizeof(s->x.s.func), d->u.collApi.func);
      copy_str(s->x.s.dtype, sizeof(s->x.s.dtype), d->u.collApi.datatype);
      break;
    case ncclProfileP2pApi:
      s->u0 = d->u.p2pApi.count;
      s->u1 = (uint64_t)(uintptr_t)d->u.p2pApi.stream;
      s->flags = d->u.p2pApi.graphCaptured ? PS_FLAG_GRAPH_CAPTURED : 0;
      copy_str(s->x.s.func, sizeof(s->x.s.func), d->u.p2pApi.func);
      copy_str(s->x.s.dtype, sizeof(s->x.s.dtype), d->u.p2pApi.datatype);
      break;
    case ncclProfileKernelLaunch:
      s->u1 = (uint64_t)(uintptr_t)d->u.kernelLaunch.stream;
      break;
    case ncclProfileColl:
      s->i0 = d->u.coll.root;
      s->u0 = d->u.coll.seqNumber;
      s->u1 = d->u.coll.count;
      copy_str(s->x.s.func, sizeof(s->x.s.func), d->u.coll.func);
      copy_str(s->x.s.dtype, sizeof(s->x.s.dtype), d->u.coll.datatype);
      copy_str(s->x.s.algo, sizeof(s->x.s.algo), d->u.coll.algo);
      copy_str(s->x.s.proto, sizeof(s->x.s.proto), d->u.coll.proto);
      s->x.s.nch = d->u.coll.nChannels;
      s->x.s.nwarps = d->u.coll.nWarps;
      if (has_group_parent) s->x.s.aux = parent_id(d->u.coll.parentGroup);
      break;
    case ncclProfileP2p:
      s->i0 = d->u.p2p.peer;
      s->u1 = d->u.p2p.count;
      copy_str(s->x.s.func, sizeof(s->x.s.func), d->u.p2p.func);
      copy_str(s->x.s.dtype, sizeof(s->x.s.dtype), d->u.p2p.datatype);
      s->x.s.nch = d->u.p2p.nChannels;
      if (has_group_parent) s->x.s.aux = parent_id(d->u.p2p.parentGroup);
      break;
    case ncclProfileProxyOp:
      s->i0 = d->u.proxyOp.peer;
      s->u0 = (uint64_t)d->u.proxyOp.pid;
      s->x.i[0] = d->u.proxyOp.channelId;
      s->x.i[1] = d->u.proxyOp.nSteps;
      s->x.i[2] = d->u.proxyOp.chunkSize;
      s->x.i[3] = d->u.proxyOp.isSend;
      s->x.i[4] = d->rank;
      if (d->u.proxyOp.isSend) s->flags |= PS_FLAG_IS_SEND;
      if (d->u.proxyOp.pid != g.pid) {
        /* PXN: the parent pointer belongs to another process's address space. */
        s->flags |= PS_FLAG_FOREIGN_PID;
        ADD(&g.stats[ST_FOREIGN], 1);
      }
      break;
    case ncclProfileProxyStep:
      s->i0 = d->u.proxyStep.step;
      break;
    case ncclProfileKernelCh:
      s->i0 = d->u.kernelCh.channelId;
      s->u0 = d->u.kernelCh.pTimer;
      break;
    default:
      break;
  }
  if (!(s->flags & PS_FLAG_FOREIGN_PID)) s->parent = parent_id(d->parent);
  STORE(&s->type, d->type, RELAXED);
  /* id = (slot generation << 24) | slot index: unique without a shared counter, because the
   * slot is ours alone between pop and push; ids of non-event records have the top bit. */
  STORE(&s->id, (((s->id >> PS_IDX_BITS) + 1) << PS_IDX_BITS) | idx, RELAXED);
  ADD(&g.stats[ST_STARTED], 1);
  *eHandle = s;
  return ncclSuccess;
}

static ncclResult_t ps_stopEvent(void* eHandle) {
  if (!eHandle) return ncclSuccess;
  ps_rec* s = slot_of(eHandle);
  if (!s || LOAD(&s->type, RELAXED) == 0) {
    ADD(&g.stats[ST_BAD_HANDLES], 1);
    return ncclSuccess;
  }
  s->stop_ns = now_ns();
  if (s->x.t[0] == -1 && LOAD(&s->type, RELAXED) == ncclProfileKernelCh) s->x.t[0] = s->stop_ns;
  emit(s);
  slot_release(s);
  return ncclSuccess;
}

static inline int step_state_index(int state) {
  switch (state) {
    case ncclProfilerProxyStepSendGPUWait: return 0;
    case ncclProfilerProxyStepSendPeerWait_v4: return 1;
    case ncclProfilerProxyStepSendWait: return 2;
    case ncclProfilerProxyStepRecvWait: return 3;
    case ncclProfilerProxyStepRecvFlushWait: return 4;
    case ncclProfilerProxyStepRecvGPUWait: return 5;
    default: return -1;
  }
}

static ncclResult_t ps_recordEventState(void* eHandle, ncclProfilerEventState_t eState,
                                        ncclProfilerEventStateArgs_t* args) {
  if (!eHandle) return ncclSuccess;
  ps_rec* s = slot_of(eHandle);
  if (!s) {
    ADD(&g.stats[ST_BAD_HANDLES], 1);
    return ncclSuccess;
  }
  uint32_t type = LOAD(&s->type, RELAXED);
  switch (type) {
    case ncclProfileProxyStep: {
      int k = step_state_index(eState);
      if (k >= 0 && s->x.t[k] == 0) s->x.t[k] = now_ns();
      if (args && (eState == ncclProfilerProxyStepSendWait || eState == ncclProfilerProxyStepRecvWait ||
                   eState == ncclProfilerProxyStepSendPeerWait_v4 || eState == ncclProfilerProxyStepSendGPUWait ||
                   eState == ncclProfilerProxyStepRecvFlushWait || eState == ncclProfilerProxyStepRecvGPUWait)) {
        if (args->proxyStep.transSize > s->u1) s->u1 = args->proxyStep.transSize;
      }
      break;
    }
    case ncclProfileProxyOp:
      if (eState == ncclProfilerProxyOpInProgress_v4 && s->x.t[3] == 0) s->x.t[3] = now_ns();
      break;
    case ncclProfileKernelCh:
      if (eState == ncclProfilerKernelChStop) {
        /* NCCL calls stopEvent right after this state: its timestamp serves for both
         * (one clock read less per channel; the clock is most of our cost). */
        s->x.t[0] = -1;
        if (args) s->u1 = args->kernelCh.pTimer;
      }
      break;
    case ncclProfileGroupApi:
      if (eState == ncclProfilerGroupStartApiStop) s->x.t[0] = now_ns();
      if (eState == ncclProfilerGroupEndApiStart) s->x.t[1] = now_ns();
      break;
    default:
      break;
  }
  return ncclSuccess;
}

/* ---------------------------------------------------------------- init / finalize */

static ncclResult_t init_common(void** context, int* eActivationMask, const char* commName, uint64_t commHash,
                                int nNodes, int nranks, int rank, ncclDebugLogger_t logfn, uint8_t abi) {
  *context = NULL;
  pthread_once(&g.once, setup_once);
  if (logfn) __atomic_store_n(&g.logfn, logfn, RELAXED); /* inits may run concurrently */
  if (g.init_rc != ncclSuccess) {
    if (logfn) logfn(NCCL_LOG_WARN, NCCL_LOG_FLAG_INIT, __FILE__, __LINE__,
                     "perfscope NCCL profiler: cannot allocate its buffers; continuing without it");
    return g.init_rc;
  }
  uint32_t idx = ADD(&g.ncomms, 1);
  if (idx >= PS_MAX_COMMS) {
    if (logfn) logfn(NCCL_LOG_WARN, NCCL_LOG_FLAG_INIT, __FILE__, __LINE__,
                     "perfscope NCCL profiler: more than %d communicators; not profiling this one", PS_MAX_COMMS);
    return ncclInvalidUsage;
  }
  ps_comm* c = &g.comms[idx];
  c->index = (uint16_t)idx;
  c->abi = abi;
  c->rank = rank;
  c->nranks = nranks;
  __atomic_store_n(&c->mask_ptr, eActivationMask, RELEASE); /* read by perfscope_nccl_set_level */
  if (!g.slots) { /* level 0: loaded but off */
    if (eActivationMask) *eActivationMask = 0;
    *context = c;
    return ncclSuccess;
  }
  pthread_mutex_lock(&g.flush_lock);
  if (g.fd < 0 && !g.disabled) {
    g.fd = open_output(rank);
    if (g.fd < 0) {
      int err = errno;
      pthread_mutex_unlock(&g.flush_lock);
      if (logfn) logfn(NCCL_LOG_WARN, NCCL_LOG_FLAG_INIT, __FILE__, __LINE__,
                       "perfscope NCCL profiler: cannot write to %s (%s); set PERFSCOPE_NCCL_DIR to a writable "
                       "folder. Continuing without it", g.dir, strerror(err));
      return ncclSystemError;
    }
  }
  if (!g.flusher_started) {
    if (pthread_create(&g.flusher, NULL, flusher_main, NULL) == 0) {
      pthread_setname_np(g.flusher, "perfscope-nccl");
      pthread_detach(g.flusher);
      g.flusher_started = 1;
    } /* else: we still flush at finalize and at exit */
  }
  pthread_mutex_unlock(&g.flush_lock);

  ps_rec r;
  memset(&r, 0, sizeof(r));
  r.type = PS_REC_COMM;
  r.id = PS_OTHER_ID | (ADD(&g.next_id, 1) + 1);
  r.start_ns = now_ns();
  r.tid = my_tid();
  r.comm = c->index;
  r.abi = abi;
  r.u0 = commHash;
  r.i0 = rank;
  r.x.i[0] = nranks;
  r.x.i[1] = nNodes;
  r.x.i[2] = abi;
  copy_str((char*)&r.x.i[4], 48, commName); /* bytes 80..127 */
  emit(&r);
  drain(); /* the comm record reaches the file even if the job dies right away */

  /* g.mask, not the level at load: perfscope_nccl_set_level (e.g. 0 = paused) holds for new comms too */
  if (eActivationMask) __atomic_store_n(eActivationMask, (int)LOAD(&g.mask, ACQUIRE), RELAXED);
  *context = c;
  if (logfn) logfn(NCCL_LOG_INFO, NCCL_LOG_FLAG_INIT, __FILE__, __LINE__,
                   "perfscope NCCL profiler (v%d): comm %d rank %d/%d level %d mask 0x%x -> %s", abi, idx, rank,
                   nranks, LOAD(&g.level, RELAXED), LOAD(&g.mask, RELAXED), g.dir);
  return ncclSuccess;
}

static ncclResult_t ps_finalize(void* context) {
  ps_comm* c = context;
  if (!c || !g.slots) return ncclSuccess;
  ps_rec r;
  memset(&r, 0, sizeof(r));
  r.type = PS_REC_COMM_END;
  r.id = PS_OTHER_ID | (ADD(&g.next_id, 1) + 1);
  r.start_ns = r.stop_ns = now_ns();
  r.tid = my_tid();
  r.comm = c->index;
  r.abi = c->abi;
  emit(&r);
  drain();
  return ncclSuccess;
}

/* ---------------------------------------------------------------- v4 / v5 / v6 tables */

static ncclResult_t v4_init(void** context, int* eActivationMask, const char* commName, uint64_t commHash,
                            int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return init_common(context, eActivationMask, commName, commHash, nNodes, nranks, rank, logfn, 4);
}

static ncclResult_t v56_init(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                             int nranks, int rank, ncclDebugLogger_t logfn, uint8_t abi) {
  return init_common(context, eActivationMask, commName, commId, nNodes, nranks, rank, logfn, abi);
}

static ncclResult_t v5_init(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                            int nranks, int rank, ncclDebugLogger_t logfn) {
  return v56_init(context, commId, eActivationMask, commName, nNodes, nranks, rank, logfn, 5);
}

static ncclResult_t v6_init(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                            int nranks, int rank, ncclDebugLogger_t logfn) {
  return v56_init(context, commId, eActivationMask, commName, nNodes, nranks, rank, logfn, 6);
}

static ncclResult_t v4_startEvent(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* e) {
  ps_descr d;
  if (!eHandle) return ncclSuccess;
  *eHandle = NULL;
  if (!e) return ncclSuccess;
  d.type = e->type;
  d.parent = e->parentObj;
  d.rank = e->rank;
  switch (e->type) {
    case ncclProfileColl:
      memcpy(&d.u.coll, &e->coll, sizeof(e->coll)); /* v4 coll = v5 coll minus parentGroup */
      d.u.coll.parentGroup = NULL;
      break;
    case ncclProfileP2p:
      memcpy(&d.u.p2p, &e->p2p, sizeof(e->p2p));
      d.u.p2p.parentGroup = NULL;
      break;
    case ncclProfileProxyOp: d.u.proxyOp = e->proxyOp; break;
    case ncclProfileProxyStep: d.u.proxyStep = e->proxyStep; break;
    case ncclProfileKernelCh: d.u.kernelCh = e->kernelCh; break;
    default: break;
  }
  return start_common(context, eHandle, &d, 0);
}

#define V56_START(NAME, DESCR_T)                                                  \
  static ncclResult_t NAME(void* context, void** eHandle, DESCR_T* e) {           \
    ps_descr d;                                                                   \
    if (!eHandle) return ncclSuccess;                                             \
    *eHandle = NULL;                                                              \
    if (!e || e->type > 0xffffffffu) return ncclSuccess;                          \
    d.type = (uint32_t)e->type;                                                   \
    d.parent = e->parentObj;                                                      \
    d.rank = e->rank;                                                             \
    switch (e->type) {                                                            \
      case ncclProfileGroupApi: d.u.groupApi = e->groupApi; break;                \
      case ncclProfileCollApi: d.u.collApi = e->collApi; break;                   \
      case ncclProfileP2pApi: d.u.p2pApi = e->p2pApi; break;                      \
      case ncclProfileKernelLaunch: d.u.kernelLaunch = e->kernelLaunch; break;    \
      case ncclProfileColl: d.u.coll = e->coll; break;                            \
      case ncclProfileP2p: d.u.p2p = e->p2p; break;                               \
      case ncclProfileProxyOp: d.u.proxyOp = e->proxyOp; break;                   \
      case ncclProfileProxyStep: d.u.proxyStep = e->proxyStep; break;             \
      case ncclProfileKernelCh: d.u.kernelCh = e->kernelCh; break;                \
      default: break;                                                             \
    }                                                                             \
    return start_common(context, eHandle, &d, 1);                                 \
  }

V56_START(v5_startEvent, ncclProfilerEventDescr_v5_t)
V56_START(v6_startEvent, ncclProfilerEventDescr_v6_t)

PS_EXPORT const ncclProfiler_v4_t ncclProfiler_v4 = {
    "perfscope", v4_init, v4_startEvent, ps_stopEvent, ps_recordEventState, ps_finalize,
};
PS_EXPORT const ncclProfiler_v5_t ncclProfiler_v5 = {
    "perfscope", v5_init, v5_startEvent, ps_stopEvent, ps_recordEventState, ps_finalize,
};
PS_EXPORT const ncclProfiler_v6_t ncclProfiler_v6 = {
    "perfscope", v6_init, v6_startEvent, ps_stopEvent, ps_recordEventState, ps_finalize,
};

/* ---------------------------------------------------------------- control (ctypes) */

/* Flush what is queued to the file now. */
PS_EXPORT void perfscope_nccl_flush(void) {
  if (g.wbuf) drain();
}

/* Change the level of every communicator (0 pauses recording; NCCL samples the mask per
 * operation, so in-flight operations finish with the old one; while paused, start_common
 * also refuses every event that is not the child of one recorded before the pause).
 * Returns the previous level, or -1 before the first init. */
PS_EXPORT int perfscope_nccl_set_level(int level) {
  if (LOAD(&g.ncomms, ACQUIRE) == 0 || !g.slots) return -1;
  level = level < 0 ? 0 : level > 3 ? 3 : level;
  int old = __atomic_exchange_n(&g.level, level, RELAXED);
  uint32_t mask = level_mask(level);
  /* Keep what the new mask makes NCCL send (a level above the one at load included)
   * before NCCL sees it; in-flight operations may still carry the old mask. */
  __atomic_fetch_or(&g.record_mask, record_mask_for(mask), RELEASE);
  STORE(&g.mask, mask, RELEASE); /* for communicators created later */
  uint32_t n = LOAD(&g.ncomms, ACQUIRE);
  if (n > PS_MAX_COMMS) n = PS_MAX_COMMS;
  for (uint32_t i = 0; i < n; i++) {
    int* mp = __atomic_load_n(&g.comms[i].mask_ptr, ACQUIRE);
    if (mp) __atomic_store_n(mp, (int)mask, RELAXED);
  }
  return old;
}

/* Copy the counters (ST_* order, see perfscope_nccl_format.h STATS) into out[0..n). */
PS_EXPORT int perfscope_nccl_stats(uint64_t* out, int n) {
  int k = n < ST_N ? n : ST_N;
  for (int i = 0; i < k; i++) out[i] = LOAD(&g.stats[i], RELAXED);
  return ST_N;
}
