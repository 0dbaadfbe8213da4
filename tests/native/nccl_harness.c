/*
 * Drives the perfscope NCCL profiler plugin the way NCCL does, without NCCL or a GPU.
 *
 *   nccl_harness PLUGIN.so ABI NCOMMS NOPS
 *   nccl_harness PLUGIN.so bench 1 NOPS     (cost per event, one thread)
 *   nccl_harness PLUGIN.so fork 1 NFORKS    (forks while another thread flushes nonstop)
 *   nccl_harness PLUGIN.so setlevel 1 1     (perfscope_nccl_set_level vs record mask, new comms)
 *   nccl_harness PLUGIN.so fsize 1 NOPS     (a write cut short by RLIMIT_FSIZE, then more)
 *   nccl_harness PLUGIN.so pause 1 NOPS     (operations before, during and after set_level(0))
 *
 * ABI is 4, 5, 6 or "mix" (communicator c uses v4, v5, v6 for c % 3 == 0, 1, 2).  Every
 * communicator gets an application thread and a proxy thread, like NCCL's: the application
 * thread runs the API events, Group and Coll/P2p (starting and stopping them), then hands
 * the Coll/P2p handle to the proxy thread, which starts ProxyOps, ProxySteps and KernelCh
 * events under it *after* its stopEvent (as NCCL's proxy does).  All values are a function
 * of (communicator, operation) so tests/unit/test_nccl_plugin.py can check every field.
 *
 * Prints one line of JSON: what was called (per event type), handles that came back NULL,
 * the plugin's counters, wall-clock bounds and the peak RSS before and after.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_profiler_abi.h"

#define QCAP 64
#define NTYPES 16

static const char* FUNCS[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce"};
static const char* DTYPES[] = {"ncclFloat32", "ncclBfloat16", "ncclInt8"};
static const char* ALGOS[] = {"RING", "TREE", "COLLNET_DIRECT"};
static const char* PROTOS[] = {"SIMPLE", "LL", "LL128"};

static const ncclProfiler_v4_t* V4;
static const ncclProfiler_v5_t* V5;
static const ncclProfiler_v6_t* V6;
static int NOPS;

typedef struct {
  void* handle;
  int op;
  int is_coll;
  int nch;
  int peer;
  int is_send;
} work;

typedef struct {
  int c, abi;
  void* ctx;
  int mask;
  pthread_t app, proxy;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  work q[QCAP];
  int head, tail, done;
  long calls[NTYPES]; /* startEvent calls per type bit index */
  long nulls[NTYPES]; /* NULL handles per type bit index */
} comm_t;

static int bit_index(uint64_t t) { return __builtin_ctzll(t); }

/* ---- one startEvent through the comm's table, descriptor built per version */
typedef struct {
  uint64_t type;
  void* parent;
  int rank;
  /* the v5/v6 union members we fill */
  struct ps_abi_group_api groupApi;
  struct ps_abi_coll_api collApi;
  struct ps_abi_p2p_api p2pApi;
  struct ps_abi_kernel_launch kernelLaunch;
  struct ps_abi_coll_v5 coll;
  struct ps_abi_p2p_v5 p2p;
  struct ps_abi_proxy_op proxyOp;
  struct ps_abi_proxy_step proxyStep;
  struct ps_abi_kernel_ch kernelCh;
} anydescr;

static void* start(comm_t* cm, anydescr* a) {
  void* h = (void*)0x1; /* must be overwritten */
  cm->calls[bit_index(a->type)]++;
  if (cm->abi == 4) {
    ncclProfilerEventDescr_v4_t d;
    memset(&d, 0xab, sizeof(d)); /* garbage where NCCL leaves fields unset */
    d.type = (uint8_t)a->type;
    d.parentObj = a->parent;
    d.rank = a->rank;
    switch (a->type) {
      case ncclProfileColl: memcpy(&d.coll, &a->coll, sizeof(d.coll)); break;
      case ncclProfileP2p: memcpy(&d.p2p, &a->p2p, sizeof(d.p2p)); break;
      case ncclProfileProxyOp: d.proxyOp = a->proxyOp; break;
      case ncclProfileProxyStep: d.proxyStep = a->proxyStep; break;
      case ncclProfileKernelCh: d.kernelCh = a->kernelCh; break;
      default: break;
    }
    V4->startEvent(cm->ctx, &h, &d);
  } else {
    ncclProfilerEventDescr_v6_t d; /* v5 is a layout prefix of v6 */
    memset(&d, 0xab, sizeof(d));
    d.type = a->type;
    d.parentObj = a->parent;
    d.rank = a->rank;
    switch (a->type) {
      case ncclProfileGroupApi: d.groupApi = a->groupApi; break;
      case ncclProfileCollApi: d.collApi = a->collApi; break;
      case ncclProfileP2pApi: d.p2pApi = a->p2pApi; break;
      case ncclProfileKernelLaunch: d.kernelLaunch = a->kernelLaunch; break;
      case ncclProfileColl: d.coll = a->coll; break;
      case ncclProfileP2p: d.p2p = a->p2p; break;
      case ncclProfileProxyOp: d.proxyOp = a->proxyOp; break;
      case ncclProfileProxyStep: d.proxyStep = a->proxyStep; break;
      case ncclProfileKernelCh: d.kernelCh = a->kernelCh; break;
      default: break;
    }
    if (cm->abi == 5)
      V5->startEvent(cm->ctx, &h, (ncclProfilerEventDescr_v5_t*)&d);
    else
      V6->startEvent(cm->ctx, &h, &d);
  }
  if (!h) cm->nulls[bit_index(a->type)]++;
  return h;
}

static void stop(comm_t* cm, void* h) {
  if (cm->abi == 4) V4->stopEvent(h);
  else if (cm->abi == 5) V5->stopEvent(h);
  else V6->stopEvent(h);
}

static void state(comm_t* cm, void* h, int st, ncclProfilerEventStateArgs_t* args) {
  if (cm->abi == 4) V4->recordEventState(h, st, args);
  else if (cm->abi == 5) V5->recordEventState(h, st, args);
  else V6->recordEventState(h, st, args);
}

static anydescr base(uint64_t type, void* parent, int rank) {
  anydescr a;
  memset(&a, 0, sizeof(a));
  a.type = type;
  a.parent = parent;
  a.rank = rank;
  return a;
}

/* ---- application thread: API events, Group, Coll/P2p */
static void* app_main(void* arg) {
  comm_t* cm = arg;
  int rank = cm->c % 4;
  void* stream = (void*)(uintptr_t)(0xabc0 + cm->c);
  for (int i = 0; i < NOPS; i++) {
    int kind = i % 3; /* 0 coll, 1 send, 2 recv */
    void *gapi = NULL, *api = NULL;
    anydescr a;
    if (cm->abi >= 5) {
      a = base(ncclProfileGroupApi, NULL, rank);
      a.groupApi.graphCaptured = (i % 7) == 0;
      a.groupApi.groupDepth = 1 + (i % 2);
      gapi = start(cm, &a);
      if (kind == 0) {
        a = base(ncclProfileCollApi, gapi, rank);
        a.collApi.func = FUNCS[i % 5];
        a.collApi.count = 1000 + i;
        a.collApi.datatype = DTYPES[i % 3];
        a.collApi.root = i % 4;
        a.collApi.stream = stream;
        a.collApi.graphCaptured = (i % 7) == 0;
      } else {
        a = base(ncclProfileP2pApi, gapi, rank);
        a.p2pApi.func = kind == 1 ? "Send" : "Recv";
        a.p2pApi.count = 2000 + i;
        a.p2pApi.datatype = DTYPES[i % 3];
        a.p2pApi.stream = stream;
        a.p2pApi.graphCaptured = (i % 7) == 0;
      }
      api = start(cm, &a);
      stop(cm, api);
      state(cm, gapi, ncclProfilerGroupStartApiStop, NULL);
      state(cm, gapi, ncclProfilerGroupEndApiStart, NULL);
      a = base(ncclProfileKernelLaunch, gapi, rank);
      a.kernelLaunch.stream = stream;
      void* kl = start(cm, &a);
      stop(cm, kl);
    }
    a = base(ncclProfileGroup, NULL, rank);
    void* grp = start(cm, &a);
    void* op;
    work w;
    memset(&w, 0, sizeof(w));
    w.op = i;
    if (kind == 0) {
      a = base(ncclProfileColl, cm->abi >= 5 ? api : grp, rank);
      a.coll.seqNumber = (uint64_t)i;
      a.coll.func = FUNCS[i % 5];
      a.coll.sendBuff = (void*)0x1000;
      a.coll.recvBuff = (void*)0x2000;
      a.coll.count = 1000 + i;
      a.coll.root = i % 4;
      a.coll.datatype = DTYPES[i % 3];
      a.coll.nChannels = (uint8_t)(1 + i % 4);
      a.coll.nWarps = (uint8_t)(8 + i % 9);
      a.coll.algo = ALGOS[i % 3];
      a.coll.proto = PROTOS[i % 3];
      a.coll.parentGroup = grp;
      op = start(cm, &a);
      w.is_coll = 1;
      w.nch = 1 + i % 4;
      w.peer = (rank + 1) % 4;
    } else {
      a = base(ncclProfileP2p, cm->abi >= 5 ? api : grp, rank);
      a.p2p.func = kind == 1 ? "Send" : "Recv";
      a.p2p.buff = (void*)0x3000;
      a.p2p.datatype = DTYPES[i % 3];
      a.p2p.count = 2000 + i;
      a.p2p.peer = (rank + 1) % 4;
      a.p2p.nChannels = (uint8_t)(1 + i % 2);
      a.p2p.parentGroup = grp;
      op = start(cm, &a);
      w.nch = 1 + i % 2;
      w.peer = (rank + 1) % 4;
      w.is_send = kind == 1;
    }
    w.handle = op;
    /* NCCL stops Coll/P2p (and Group, GroupApi) once the kernel is launched; the proxy
     * thread starts their children afterwards. */
    stop(cm, op);
    stop(cm, grp);
    if (gapi) stop(cm, gapi);
    pthread_mutex_lock(&cm->mu);
    while ((cm->head + 1) % QCAP == cm->tail) pthread_cond_wait(&cm->cv, &cm->mu);
    cm->q[cm->head] = w;
    cm->head = (cm->head + 1) % QCAP;
    pthread_cond_broadcast(&cm->cv);
    pthread_mutex_unlock(&cm->mu);
  }
  pthread_mutex_lock(&cm->mu);
  cm->done = 1;
  pthread_cond_broadcast(&cm->cv);
  pthread_mutex_unlock(&cm->mu);
  return NULL;
}

/* ---- proxy thread: ProxyOp, ProxyStep, KernelCh under the (stopped) Coll/P2p */
static void* proxy_main(void* arg) {
  comm_t* cm = arg;
  int rank = cm->c % 4;
  for (;;) {
    pthread_mutex_lock(&cm->mu);
    while (cm->head == cm->tail && !cm->done) pthread_cond_wait(&cm->cv, &cm->mu);
    if (cm->head == cm->tail && cm->done) {
      pthread_mutex_unlock(&cm->mu);
      break;
    }
    work w = cm->q[cm->tail];
    cm->tail = (cm->tail + 1) % QCAP;
    pthread_cond_broadcast(&cm->cv);
    pthread_mutex_unlock(&cm->mu);

    for (int ch = 0; ch < w.nch; ch++) {
      int is_send = w.is_coll ? (ch % 2 == 0) : w.is_send;
      /* Every 11th operation's ProxyOps come "from another process" (PXN): their parent
       * pointer is not ours and must never be read. */
      int foreign = w.op % 11 == 5;
      anydescr a = base(ncclProfileProxyOp, foreign ? (void*)0x10 : w.handle, rank);
      a.proxyOp.pid = foreign ? getpid() + 100000 : getpid();
      a.proxyOp.channelId = (uint8_t)ch;
      a.proxyOp.peer = w.peer;
      a.proxyOp.nSteps = 2;
      a.proxyOp.chunkSize = 4096 * (ch + 1);
      a.proxyOp.isSend = is_send;
      void* pop = start(cm, &a);
      state(cm, pop, ncclProfilerProxyOpInProgress_v4, NULL);
      for (int s = 0; s < 2; s++) {
        anydescr b = base(ncclProfileProxyStep, pop, rank);
        b.proxyStep.step = s;
        void* st = start(cm, &b);
        ncclProfilerEventStateArgs_t args;
        memset(&args, 0, sizeof(args));
        if (is_send) {
          args.proxyStep.transSize = 0;
          state(cm, st, ncclProfilerProxyStepSendGPUWait, &args);
          state(cm, st, ncclProfilerProxyStepSendPeerWait_v4, &args);
          args.proxyStep.transSize = 1024 * (s + 1);
          state(cm, st, ncclProfilerProxyStepSendWait, &args);
        } else {
          args.proxyStep.transSize = 1024 * (s + 1);
          state(cm, st, ncclProfilerProxyStepRecvWait, &args);
          state(cm, st, ncclProfilerProxyStepRecvFlushWait, &args);
          state(cm, st, ncclProfilerProxyStepRecvGPUWait, &args);
        }
        stop(cm, st);
      }
      stop(cm, pop);

      anydescr k = base(ncclProfileKernelCh, w.handle, rank);
      k.kernelCh.channelId = (uint8_t)ch;
      k.kernelCh.pTimer = 1000000000ULL * (uint64_t)(cm->c + 1) + 1000ULL * (uint64_t)w.op + 10ULL * (uint64_t)ch;
      void* kh = start(cm, &k);
      ncclProfilerEventStateArgs_t args;
      args.kernelCh.pTimer = k.kernelCh.pTimer + 500;
      state(cm, kh, ncclProfilerKernelChStop, &args);
      stop(cm, kh);
    }
  }
  return NULL;
}

static long maxrss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* "bench": one thread, v5, NOPS x (Coll + KernelCh start/state/stop); prints ns per event. */
static int bench(int nops, int (*stats)(uint64_t*, int)) {
  comm_t cm;
  memset(&cm, 0, sizeof(cm));
  cm.abi = 5;
  if (V5->init(&cm.ctx, 0x42, &cm.mask, "bench", 1, 2, 0, NULL) != 0) return 3;
  long long t0 = now_ns();
  for (int i = 0; i < nops; i++) {
    anydescr a = base(ncclProfileColl, NULL, 0);
    a.coll.seqNumber = (uint64_t)i;
    a.coll.func = "AllReduce";
    a.coll.count = 1024;
    a.coll.datatype = "ncclFloat32";
    a.coll.nChannels = 2;
    a.coll.nWarps = 9;
    a.coll.algo = "RING";
    a.coll.proto = "SIMPLE";
    void* op = start(&cm, &a);
    anydescr k = base(ncclProfileKernelCh, op, 0);
    k.kernelCh.pTimer = 1000 + (uint64_t)i;
    void* kh = start(&cm, &k);
    ncclProfilerEventStateArgs_t args;
    args.kernelCh.pTimer = 2000 + (uint64_t)i;
    state(&cm, kh, ncclProfilerKernelChStop, &args);
    stop(&cm, kh);
    stop(&cm, op);
  }
  long long t1 = now_ns();
  V5->finalize(cm.ctx);
  uint64_t st[8] = {0};
  stats(st, 8);
  printf("{\"events\": %d, \"ns\": %lld, \"ns_per_event\": %.1f, \"ring_drops\": %llu}\n", 2 * nops, t1 - t0,
         (double)(t1 - t0) / (2.0 * nops), (unsigned long long)st[0]);
  return 0;
}

/* Coll start/stop on a v5 comm, n times. */
static void colls(comm_t* cm, int n, int seq0) {
  for (int i = 0; i < n; i++) {
    anydescr a = base(ncclProfileColl, NULL, 0);
    a.coll.seqNumber = (uint64_t)(seq0 + i);
    a.coll.func = "AllReduce";
    a.coll.datatype = "ncclFloat32";
    a.coll.algo = "RING";
    a.coll.proto = "SIMPLE";
    stop(cm, start(cm, &a));
  }
}

static volatile int g_stop;
static void (*g_flush)(void);

static void* busy_flusher(void* arg) {
  comm_t* cm = arg;
  colls(cm, 4, 0);
  while (!g_stop) g_flush(); /* after the first, each flush takes the lock and writes nothing */
  return NULL;
}

/* "fork": forks while another thread flushes without pause (so it often holds the plugin's
 * file lock at the fork); each child flushes and exits through exit() (the plugin's
 * destructor flushes again).  A child that hangs is killed by alarm() and counted. */
static int fork_test(int nforks) {
  comm_t cm;
  memset(&cm, 0, sizeof(cm));
  cm.abi = 5;
  if (V5->init(&cm.ctx, 0x42, &cm.mask, "fork", 1, 1, 0, NULL) != 0) return 3;
  pthread_t t;
  pthread_create(&t, NULL, busy_flusher, &cm);
  int hung = 0, done = 0;
  for (int k = 0; k < nforks && !hung; k++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(2);
      g_flush();
      exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) hung++;
    else done++;
  }
  g_stop = 1;
  pthread_join(t, NULL);
  V5->finalize(cm.ctx);
  printf("{\"forks\": %d, \"hung\": %d}\n", done + hung, hung);
  return 0;
}

/* "setlevel": a level raised above the one at load must be recorded; a pause (level 0)
 * must hold for a communicator created afterwards. */
static int setlevel_test(int (*set_level)(int)) {
  comm_t a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  a.abi = b.abi = 5;
  if (V5->init(&a.ctx, 0x51, &a.mask, "a", 1, 1, 0, NULL) != 0) return 3;
  int mask0 = a.mask;
  anydescr d = base(ncclProfileProxyOp, NULL, 0);
  d.proxyOp.pid = getpid();
  void* h1 = start(&a, &d);
  if (h1) stop(&a, h1);
  int old = set_level(3);
  int mask3 = a.mask;
  void* h3 = start(&a, &d);
  if (h3) stop(&a, h3);
  int old3 = set_level(0);
  int shared_mask = 0; /* NCCL passes one process-wide mask to every init */
  b.mask = 0x7fff;
  if (V5->init(&b.ctx, 0x52, &shared_mask, "b", 1, 1, 0, NULL) != 0) return 3;
  int mask_new_paused = shared_mask;
  set_level(1);
  V5->finalize(a.ctx);
  V5->finalize(b.ctx);
  printf("{\"mask0\": %d, \"handle_level1\": %d, \"old\": %d, \"mask3\": %d, \"handle_level3\": %d, \"old3\": %d, "
         "\"mask_new_paused\": %d}\n",
         mask0, h1 != NULL, old, mask3, h3 != NULL, old3, mask_new_paused);
  return 0;
}

/* One operation as NCCL starts it: Group, Coll under it (seq), KernelCh under the Coll
 * after the Coll's stop; the activation mask is not looked at (see pause_test). */
static void op_with_child(comm_t* cm, int seq) {
  anydescr a = base(ncclProfileGroup, NULL, 0);
  void* grp = start(cm, &a);
  a = base(ncclProfileColl, grp, 0);
  a.coll.seqNumber = (uint64_t)seq;
  a.coll.func = "AllReduce";
  a.coll.datatype = "ncclFloat32";
  a.coll.algo = "RING";
  a.coll.proto = "SIMPLE";
  a.coll.nChannels = 1;
  void* coll = start(cm, &a);
  stop(cm, coll);
  stop(cm, grp);
  anydescr k = base(ncclProfileKernelCh, coll, 0);
  k.kernelCh.pTimer = 1000 + (uint64_t)seq;
  void* kh = start(cm, &k);
  ncclProfilerEventStateArgs_t args;
  args.kernelCh.pTimer = 2000 + (uint64_t)seq;
  state(cm, kh, ncclProfilerKernelChStop, &args);
  stop(cm, kh);
}

/* "pause": NOPS operations (seq 0..), then one whose Coll starts before set_level(0) and
 * whose KernelCh starts after it (seq 1000), NOPS operations while paused (seq 2000..),
 * set_level back (to 1 when the plugin was loaded paused) and NOPS more (seq 3000..).
 * The harness starts every event whatever the activation mask says: the worst case, an
 * NCCL that sampled the mask before the pause; the plugin must refuse on its own. */
static int pause_test(int (*set_level)(int), int nops) {
  comm_t cm;
  memset(&cm, 0, sizeof(cm));
  cm.abi = 5;
  if (V5->init(&cm.ctx, 0x71, &cm.mask, "pause", 1, 1, 0, NULL) != 0) return 3;
  int mask_at_init = cm.mask;
  for (int i = 0; i < nops; i++) op_with_child(&cm, i);
  anydescr a = base(ncclProfileColl, NULL, 0);
  a.coll.seqNumber = 1000;
  a.coll.func = "AllReduce";
  void* open = start(&cm, &a);
  long long t_pause = now_ns();
  int level = set_level(0);
  int mask_paused = cm.mask;
  stop(&cm, open);
  anydescr k = base(ncclProfileKernelCh, open, 0);
  stop(&cm, start(&cm, &k));
  for (int i = 0; i < nops; i++) op_with_child(&cm, 2000 + i);
  set_level(level > 0 ? level : 1);
  long long t_resume = now_ns();
  int mask_resumed = cm.mask;
  for (int i = 0; i < nops; i++) op_with_child(&cm, 3000 + i);
  V5->finalize(cm.ctx);
  g_flush();
  printf("{\"mask_at_init\": %d, \"level\": %d, \"mask_paused\": %d, \"mask_resumed\": %d, \"t_pause\": %lld, "
         "\"t_resume\": %lld}\n", mask_at_init, level, mask_paused, mask_resumed, t_pause, t_resume);
  return 0;
}

/* "fsize": NOPS Colls whose write RLIMIT_FSIZE cuts in the middle of a record, then NOPS
 * more with the limit lifted.  Needs PERFSCOPE_NCCL_FLUSH_MS large (flushes are ours). */
static int fsize_test(int nops) {
  comm_t cm;
  memset(&cm, 0, sizeof(cm));
  cm.abi = 5;
  signal(SIGXFSZ, SIG_IGN);
  if (V5->init(&cm.ctx, 0x61, &cm.mask, "fsize", 1, 1, 0, NULL) != 0) return 3; /* header, COMM, STATS */
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 3 * 128 + 3 * 128 + 64; /* room for 3.5 records more */
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 4;
  colls(&cm, nops, 0);
  g_flush();
  if (setrlimit(RLIMIT_FSIZE, &old) != 0) return 4;
  colls(&cm, nops, 1000);
  g_flush();
  V5->finalize(cm.ctx);
  printf("{\"ok\": 1}\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s PLUGIN.so ABI(4|5|6|mix) NCOMMS NOPS\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL); /* NCCL's flags */
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  V4 = dlsym(lib, "ncclProfiler_v4");
  V5 = dlsym(lib, "ncclProfiler_v5");
  V6 = dlsym(lib, "ncclProfiler_v6");
  int (*stats)(uint64_t*, int) = (int (*)(uint64_t*, int))dlsym(lib, "perfscope_nccl_stats");
  if (!V4 || !V5 || !V6 || !stats) {
    fprintf(stderr, "missing symbols\n");
    return 2;
  }
  if (strcmp(argv[2], "bench") == 0) return bench(atoi(argv[4]), stats);
  g_flush = (void (*)(void))dlsym(lib, "perfscope_nccl_flush");
  int (*set_level)(int) = (int (*)(int))dlsym(lib, "perfscope_nccl_set_level");
  if (!g_flush || !set_level) {
    fprintf(stderr, "missing symbols\n");
    return 2;
  }
  if (strcmp(argv[2], "fork") == 0) return fork_test(atoi(argv[4]));
  if (strcmp(argv[2], "setlevel") == 0) return setlevel_test(set_level);
  if (strcmp(argv[2], "fsize") == 0) return fsize_test(atoi(argv[4]));
  if (strcmp(argv[2], "pause") == 0) return pause_test(set_level, atoi(argv[4]));
  int ncomms = atoi(argv[3]);
  NOPS = atoi(argv[4]);
  comm_t* comms = calloc((size_t)ncomms, sizeof(comm_t));
  long rss0 = maxrss_kb();
  long long t0 = now_ns();
  for (int c = 0; c < ncomms; c++) {
    comm_t* cm = &comms[c];
    cm->c = c;
    cm->abi = strcmp(argv[2], "mix") == 0 ? 4 + c % 3 : atoi(argv[2]);
    pthread_mutex_init(&cm->mu, NULL);
    pthread_cond_init(&cm->cv, NULL);
    char name[32];
    snprintf(name, sizeof(name), "comm%d", c);
    uint64_t hash = 0x1000 + (uint64_t)c;
    int rc;
    if (cm->abi == 4) rc = V4->init(&cm->ctx, &cm->mask, name, hash, 2, 4, c % 4, NULL);
    else if (cm->abi == 5) rc = V5->init(&cm->ctx, hash, &cm->mask, name, 2, 4, c % 4, NULL);
    else rc = V6->init(&cm->ctx, hash, &cm->mask, name, 2, 4, c % 4, NULL);
    if (rc != 0) {
      fprintf(stderr, "init failed: %d\n", rc);
      return 3;
    }
  }
  for (int c = 0; c < ncomms; c++) {
    pthread_create(&comms[c].app, NULL, app_main, &comms[c]);
    pthread_create(&comms[c].proxy, NULL, proxy_main, &comms[c]);
  }
  for (int c = 0; c < ncomms; c++) {
    pthread_join(comms[c].app, NULL);
    pthread_join(comms[c].proxy, NULL);
  }
  for (int c = 0; c < ncomms; c++) {
    if (comms[c].abi == 4) V4->finalize(comms[c].ctx);
    else if (comms[c].abi == 5) V5->finalize(comms[c].ctx);
    else V6->finalize(comms[c].ctx);
  }
  /* Bad handles must be ignored, not crash (counted as bad_handles). */
  int on_stack;
  V5->stopEvent(&on_stack);
  V5->recordEventState(&on_stack, ncclProfilerKernelChStop, NULL);
  V5->stopEvent(NULL);
  long long t1 = now_ns();
  uint64_t st[8] = {0};
  int nst = stats(st, 8);
  printf("{\"t0\": %lld, \"t1\": %lld, \"rss0_kb\": %ld, \"rss1_kb\": %ld, \"masks\": [", t0, t1, rss0, maxrss_kb());
  for (int c = 0; c < ncomms; c++) printf("%s%d", c ? ", " : "", comms[c].mask);
  printf("], \"abis\": [");
  for (int c = 0; c < ncomms; c++) printf("%s%d", c ? ", " : "", comms[c].abi);
  printf("], \"calls\": {");
  for (int b = 0; b < NTYPES; b++) {
    long n = 0, z = 0;
    for (int c = 0; c < ncomms; c++) n += comms[c].calls[b], z += comms[c].nulls[b];
    printf("%s\"%d\": [%ld, %ld]", b ? ", " : "", 1 << b, n, z);
  }
  printf("}, \"stats\": [");
  for (int i = 0; i < nst && i < 8; i++) printf("%s%llu", i ? ", " : "", (unsigned long long)st[i]);
  printf("]}\n");
  return 0;
}
