/*
 * perfscope CUPTI buffer sink: owns CUPTI's activity-buffer callbacks so that no Python
 * runs per record.
 *
 * CUPTI calls buffer_requested() for empty buffers and buffer_completed() with filled
 * ones, on its own worker thread or inside cuptiActivityFlushAll().  buffer_completed()
 * walks the records with cuptiActivityGetNextRecord() and appends each record of a
 * configured kind, byte for byte, to that kind's growable array ("bucket").  Fields that
 * point into CUPTI-owned memory (kernel names, NVTX marker names and domains) are only
 * valid until the buffer goes back to CUPTI, so they are interned here into a string
 * table and the 8-byte pointer in the copied record is replaced by the string's id + 1
 * (0 = NULL).  API records (RUNTIME, DRIVER) are kept only for callback ids whose byte
 * is set in the filter mask.  Python drains whole buckets with ps_take() (through ctypes,
 * which releases the GIL) and decodes them in bulk with NumPy structured dtypes.
 *
 * No CUPTI or Python header is needed: libcupti is dlopen()ed at run time (the same file
 * cupti-python loaded, so there is one CUPTI instance in the process) and the few
 * prototypes used are declared below.  Record sizes and string-field offsets come from
 * Python (perfscope.collectors.cupti.layouts), which keeps them next to the dtypes.
 *
 * Thread safety: one mutex guards the buckets, the string table and the counters.  The
 * record walk of one buffer runs under it; buffers are a few MB, so holding it for the
 * walk costs less than taking it per record.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PS_EXPORT __attribute__((visibility("default")))

typedef int CUptiResult; /* CUPTI_SUCCESS == 0 */
typedef void (*ps_req_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*ps_done_fn)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

static CUptiResult (*p_register)(ps_req_fn, ps_done_fn);
static CUptiResult (*p_next)(uint8_t *, size_t, void **);
static CUptiResult (*p_dropped)(void *, uint32_t, size_t *);
static CUptiResult (*p_flush_all)(uint32_t);
static CUptiResult (*p_timestamp)(uint64_t *);

/* Callback API (API records made here instead of by the RUNTIME/DRIVER activity kinds). */
typedef void *ps_subscriber_t;
typedef void (*ps_cb_fn)(void *userdata, int domain, uint32_t cbid, const void *cbdata);
static CUptiResult (*p_subscribe)(ps_subscriber_t *, ps_cb_fn, void *);
static CUptiResult (*p_unsubscribe)(ps_subscriber_t);
static CUptiResult (*p_enable_callback)(uint32_t, ps_subscriber_t, int, uint32_t);

#define PS_MAX_KIND 64
#define PS_KIND_DRIVER 4
#define PS_KIND_RUNTIME 5
#define PS_MAX_CBID 4096

typedef struct {
    int enabled;
    size_t rec_size;     /* bytes copied per record (the struct size of the CUPTI version) */
    int nstr;            /* number of string-pointer fields (0..2) */
    size_t str_off[2];   /* their byte offsets in the record */
    uint8_t *data;
    size_t len, cap;     /* bytes */
} bucket_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static bucket_t g_bucket[PS_MAX_KIND];
static uint64_t g_seen[PS_MAX_KIND];      /* records CUPTI delivered, per kind */
static uint64_t g_kept[PS_MAX_KIND];      /* records copied into a bucket, per kind */
static uint8_t g_api_mask[2][PS_MAX_CBID]; /* [0] driver, [1] runtime: 1 = keep */
static int g_api_filter = 0;
static uint64_t g_api_filtered = 0;
static uint64_t g_dropped_cupti = 0;      /* cuptiActivityGetNumDroppedRecords */
static uint64_t g_dropped_sink = 0;       /* records not kept because the sink was full */
static uint64_t g_buffers_done = 0, g_buffers_null = 0, g_valid_bytes = 0;
static uint64_t g_cb_ns = 0;              /* time spent in buffer_completed */
static uint64_t g_cb_ns_max = 0;
static size_t g_buf_size = 8u << 20;
static size_t g_max_outstanding = 64;     /* buffers CUPTI may hold at once */
static size_t g_outstanding = 0;
static size_t g_bucket_limit = (size_t)1 << 30; /* all buckets together, bytes */
static size_t g_bucket_bytes = 0;
static size_t g_peak_pending = 0;         /* most bytes the buckets held at once */
static size_t g_peak_outstanding = 0;     /* most CUPTI buffers handed out at once */
static int seg_full(void);                 /* segments: see the writer below */
static pthread_cond_t g_thr_cv;
static char g_error[512];

/* free list of CUPTI buffers (reused instead of malloc/free per buffer); every pooled
 * buffer is g_buf_size bytes: ps_set_limits() empties the pool when that size changes and
 * buffer_completed() pools only buffers of the current size. */
#define PS_POOL 16
static uint8_t *g_pool[PS_POOL];
static int g_pool_n = 0;

/* ---- string table: open addressing on FNV-1a; ids are dense and never reused ---- */
static char *g_blob = NULL;       /* all strings, NUL-terminated, in id order */
static size_t g_blob_len = 0, g_blob_cap = 0, g_blob_taken = 0;
static uint64_t *g_slot_hash = NULL; /* 0 = empty */
static uint32_t *g_slot_id = NULL;
static size_t *g_str_off = NULL;  /* id -> offset in g_blob */
static size_t g_nstr = 0, g_str_cap = 0, g_slots = 0;
static uint64_t g_strings_dropped = 0; /* strings not interned: the table reached its limit */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t fnv1a(const char *s, size_t *len) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) { h ^= *p++; h *= 1099511628211ull; }
    *len = (size_t)((const char *)p - s);
    return h ? h : 1;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 1024;
    while (ncap < need) ncap *= 2;
    void *q = realloc(*p, ncap * elem);
    if (!q) return -1;
    *p = q;
    *cap = ncap;
    return 0;
}

static int rehash(size_t nslots) {
    uint64_t *h = calloc(nslots, sizeof *h);
    uint32_t *id = calloc(nslots, sizeof *id);
    if (!h || !id) { free(h); free(id); return -1; }
    for (size_t i = 0; i < g_slots; i++) {
        if (!g_slot_hash[i]) continue;
        size_t j = g_slot_hash[i] & (nslots - 1);
        while (h[j]) j = (j + 1) & (nslots - 1);
        h[j] = g_slot_hash[i];
        id[j] = g_slot_id[i];
    }
    free(g_slot_hash); free(g_slot_id);
    g_slot_hash = h; g_slot_id = id; g_slots = nslots;
    return 0;
}

/* Return id + 1 of string s (0 for NULL or when out of memory). */
static uint64_t intern(const char *s) {
    if (!s) return 0;
    size_t len;
    uint64_t h = fnv1a(s, &len);
    if ((g_nstr + 1) * 2 > g_slots && rehash(g_slots ? g_slots * 2 : 1024) != 0) return 0;
    size_t j = h & (g_slots - 1);
    while (g_slot_hash[j]) {
        if (g_slot_hash[j] == h) {
            uint32_t id = g_slot_id[j];
            if (strcmp(g_blob + g_str_off[id], s) == 0) return (uint64_t)id + 1;
        }
        j = (j + 1) & (g_slots - 1);
    }
    /* Bounded like the buckets: unique names (NVTX ranges with a step or sequence number in
     * them) would otherwise grow the table for as long as the process runs. */
    if (g_blob_len + len + 1 > g_bucket_limit) { g_strings_dropped++; return 0; }
    if (grow((void **)&g_blob, &g_blob_cap, g_blob_len + len + 1, 1) != 0) return 0;
    if (grow((void **)&g_str_off, &g_str_cap, g_nstr + 1, sizeof *g_str_off) != 0) return 0;
    memcpy(g_blob + g_blob_len, s, len + 1);
    g_str_off[g_nstr] = g_blob_len;
    g_blob_len += len + 1;
    g_slot_hash[j] = h;
    g_slot_id[j] = (uint32_t)g_nstr;
    return (uint64_t)(g_nstr++) + 1;
}

/* Copy one record into its bucket (caller holds g_mu). */
static void keep_record(const uint8_t *rec) {
    int32_t kind;
    memcpy(&kind, rec, sizeof kind);
    if (kind <= 0 || kind >= PS_MAX_KIND) return;
    g_seen[kind]++;
    bucket_t *b = &g_bucket[kind];
    if (!b->enabled) return;
    if (g_api_filter && (kind == PS_KIND_DRIVER || kind == PS_KIND_RUNTIME)) {
        uint32_t cbid;
        memcpy(&cbid, rec + 4, sizeof cbid);
        if (cbid >= PS_MAX_CBID || !g_api_mask[kind == PS_KIND_RUNTIME][cbid]) {
            g_api_filtered++;
            return;
        }
    }
    if (g_bucket_bytes + b->rec_size > g_bucket_limit ||
        grow((void **)&b->data, &b->cap, b->len + b->rec_size, 1) != 0) {
        g_dropped_sink++;
        return;
    }
    uint8_t *dst = b->data + b->len;
    memcpy(dst, rec, b->rec_size);
    for (int i = 0; i < b->nstr; i++) {
        const char *s;
        memcpy(&s, rec + b->str_off[i], sizeof s);
        uint64_t id = intern(s);
        memcpy(dst + b->str_off[i], &id, sizeof id);
    }
    b->len += b->rec_size;
    g_bucket_bytes += b->rec_size;
    if (g_bucket_bytes > g_peak_pending) g_peak_pending = g_bucket_bytes;
    g_kept[kind]++;
}

/* Test-only walker, used when no libcupti is loaded: records laid end to end, each
 * padded to 8 bytes, of kinds whose size was configured. */
static CUptiResult walk_plain(uint8_t *buf, size_t valid, void **rec) {
    uint8_t *p = *rec ? (uint8_t *)*rec : buf;
    if (*rec) {
        int32_t kind;
        memcpy(&kind, p, sizeof kind);
        if (kind <= 0 || kind >= PS_MAX_KIND || !g_bucket[kind].rec_size) return 1;
        p += (g_bucket[kind].rec_size + 7) & ~(size_t)7;
    }
    if ((size_t)(p - buf) + 4 > valid) return 1;
    int32_t kind;
    memcpy(&kind, p, sizeof kind);
    /* the whole record must lie inside the buffer: keep_record copies rec_size bytes */
    if (kind > 0 && kind < PS_MAX_KIND && (size_t)(p - buf) + g_bucket[kind].rec_size > valid) return 1;
    *rec = p;
    return 0;
}

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    pthread_mutex_lock(&g_mu);
    uint8_t *b = NULL;
    size_t sz = g_buf_size; /* read under the lock: ps_set_limits may change it */
    if (g_outstanding < g_max_outstanding) {
        b = g_pool_n ? g_pool[--g_pool_n] : aligned_alloc(8, sz);
        if (b && ++g_outstanding > g_peak_outstanding) g_peak_outstanding = g_outstanding;
    }
    if (!b) g_buffers_null++; /* CUPTI drops records and counts them as dropped */
    pthread_mutex_unlock(&g_mu);
    *buffer = b;
    *size = b ? sz : 0;
    *max_records = 0;
}

static void process(void *ctx, uint32_t stream, uint8_t *buffer, size_t valid, int use_cupti) {
    void *rec = NULL;
    if (use_cupti) {
        while (p_next(buffer, valid, &rec) == 0) keep_record((const uint8_t *)rec);
    } else {
        while (walk_plain(buffer, valid, &rec) == 0) keep_record((const uint8_t *)rec);
    }
    if (use_cupti && p_dropped) {
        size_t dropped = 0;
        if (p_dropped(ctx, stream, &dropped) == 0) g_dropped_cupti += dropped;
    }
    g_buffers_done++;
    g_valid_bytes += valid;
}

static void buffer_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&g_mu);
    if (buffer) {
        process(ctx, stream, buffer, valid, p_next != NULL);
        if (g_outstanding) g_outstanding--;
        /* a buffer handed out before ps_set_limits changed the size is not reused */
        if (size == g_buf_size && g_pool_n < PS_POOL) g_pool[g_pool_n++] = buffer;
        else free(buffer);
    }
    uint64_t dt = now_ns() - t0;
    g_cb_ns += dt;
    if (dt > g_cb_ns_max) g_cb_ns_max = dt;
    int wake = seg_full();
    pthread_mutex_unlock(&g_mu);
    if (wake) pthread_cond_signal(&g_thr_cv);
}


/* ------------------------- API records from CUPTI's callback API -------------------------
 * With the RUNTIME/DRIVER activity kinds CUPTI makes a record for every API call and the
 * per-callback-id switches only drop them afterwards.  Instead the sink can subscribe to
 * CUPTI's callback API for just the ids it keeps and write CUpti_ActivityAPI-shaped
 * records itself (kind, cbid, start, end, processId, threadId, correlationId,
 * returnValue; 40 bytes), so the decoder is the same.  The correlation id is CUPTI's own,
 * the one kernel and copy records carry; timestamps come from cuptiGetTimestamp, the
 * clock of every other record.
 *
 * The callback runs on the application's launching threads, so it takes one short lock,
 * g_cb_mu, held only to append 40 bytes or to swap a buffer: a drain swaps the staged
 * records out under it (constant time) and moves them into the kind's bucket under g_mu
 * afterwards, so a buffer walk holding g_mu for milliseconds never delays a launch.
 * Drains are serialised by g_merge_mu.  Lock order: g_merge_mu, g_cb_mu, g_mu.
 *
 * Staged records are bounded by a quarter of the bucket limit (both domains together),
 * so the sink holds at most 1.25 times max_pending_mb. */
#define PS_DOMAIN_DRIVER 1
#define PS_DOMAIN_RUNTIME 2
#define PS_API_REC 40
#define PS_ERROR_MULTIPLE_SUBSCRIBERS 39

typedef struct {
    int site;                    /* CUpti_ApiCallbackSite: 0 enter, 1 exit */
    const char *function_name;
    const void *function_params;
    void *function_return_value;
    const char *symbol_name;
    void *context;
    uint32_t context_uid;
    uint64_t *correlation_data;
    uint32_t correlation_id;
} ps_cbdata_t;                   /* CUpti_CallbackData (cupti_callbacks.h) */

static pthread_mutex_t g_merge_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_cb_mu = PTHREAD_MUTEX_INITIALIZER;
static bucket_t g_stage[2];      /* [0] driver, [1] runtime: records not yet moved (g_cb_mu) */
static bucket_t g_spare[2];      /* emptied stage buffers kept for reuse (g_merge_mu) */
static size_t g_stage_bytes = 0; /* both stages (g_cb_mu) */
static uint64_t g_cb_records = 0, g_cb_dropped = 0;
static ps_subscriber_t g_subscriber = NULL;
static uint32_t g_pid;
static uint32_t g_session;       /* bumped at each subscribe; per-thread state of older ones is stale */

/* Per thread: API calls on one thread nest (enter/exit in LIFO order), so counters are
 * enough.  t_open: recorded calls entered and not yet exited; t_in_runtime: of those, runtime
 * calls (a driver call inside one is that call's own, not recorded).  Both restart when the
 * thread first calls back in a new session: a call entered before an unsubscribe never exits
 * in the old session. */
static __thread uint32_t t_tid;
static __thread uint32_t t_session;
static __thread int t_open;
static __thread int t_in_runtime;

static uint64_t api_timestamp(void) {
    uint64_t t = 0;
    if (p_timestamp && p_timestamp(&t) == 0) return t;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Set once the job has allocated managed memory (cudaMallocManaged, cuMemAllocManaged):
 * the collector arms CUPTI's Unified Memory counters only then, because turning them off
 * again (at a window's end, at stop) costs about 2 s.  Never cleared: the memory stays. */
#define PS_CBID_MALLOC_MANAGED 206 /* CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000 */
#define PS_CBID_MEM_ALLOC_MANAGED 371 /* CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged */
static int g_managed_seen = 0;

static void api_callback(void *userdata, int domain, uint32_t cbid, const void *cbdata) {
    (void)userdata;
    if (domain != PS_DOMAIN_DRIVER && domain != PS_DOMAIN_RUNTIME) return;
    if (cbid == (domain == PS_DOMAIN_RUNTIME ? PS_CBID_MALLOC_MANAGED : PS_CBID_MEM_ALLOC_MANAGED))
        __atomic_store_n(&g_managed_seen, 1, __ATOMIC_RELAXED);
    const ps_cbdata_t *d = (const ps_cbdata_t *)cbdata;
    uint32_t session = __atomic_load_n(&g_session, __ATOMIC_RELAXED);
    if (t_session != session) {
        t_session = session;
        t_open = t_in_runtime = 0;
    }
    /* A driver call the runtime makes inside a recorded runtime call (cudaLaunchKernel ->
     * cuLaunchKernel) is part of that call, not a second one: only driver calls made
     * directly (cuBLAS, Triton) are recorded. */
    if (domain == PS_DOMAIN_DRIVER && t_in_runtime) return;
    if (d->site == 0) { /* enter: CUPTI keeps this per-call slot until the exit callback */
        t_open++;
        if (domain == PS_DOMAIN_RUNTIME) t_in_runtime++;
        if (d->correlation_data) *d->correlation_data = api_timestamp();
        return;
    }
    if (t_open == 0) return; /* its enter came before this session: no start time */
    t_open--;
    if (domain == PS_DOMAIN_RUNTIME && t_in_runtime) t_in_runtime--;
    uint64_t end = api_timestamp();
    uint64_t start = d->correlation_data ? *d->correlation_data : end;
    if (!t_tid) t_tid = (uint32_t)syscall(SYS_gettid);
    int32_t kind = domain == PS_DOMAIN_RUNTIME ? PS_KIND_RUNTIME : PS_KIND_DRIVER;
    int32_t ret = d->function_return_value ? *(const int32_t *)d->function_return_value : 0;
    uint8_t rec[PS_API_REC];
    memcpy(rec, &kind, 4);
    memcpy(rec + 4, &cbid, 4);
    memcpy(rec + 8, &start, 8);
    memcpy(rec + 16, &end, 8);
    memcpy(rec + 24, &g_pid, 4);
    memcpy(rec + 28, &t_tid, 4);
    memcpy(rec + 32, &d->correlation_id, 4);
    memcpy(rec + 36, &ret, 4);
    bucket_t *b = &g_stage[domain == PS_DOMAIN_RUNTIME];
    size_t limit = __atomic_load_n(&g_bucket_limit, __ATOMIC_RELAXED) / 4;
    pthread_mutex_lock(&g_cb_mu);
    if (g_stage_bytes + PS_API_REC > limit || grow((void **)&b->data, &b->cap, b->len + PS_API_REC, 1) != 0) {
        g_cb_dropped++;
    } else {
        memcpy(b->data + b->len, rec, PS_API_REC);
        b->len += PS_API_REC;
        g_stage_bytes += PS_API_REC;
        g_cb_records++;
    }
    pthread_mutex_unlock(&g_cb_mu);
}

/* Move staged callback records of `kind` into its bucket: as many whole records as the
 * bucket limit allows, the rest counted as dropped (caller holds no lock). */
static void merge_stage(int kind) {
    if (kind != PS_KIND_RUNTIME && kind != PS_KIND_DRIVER) return;
    int i = kind == PS_KIND_RUNTIME;
    pthread_mutex_lock(&g_merge_mu);
    pthread_mutex_lock(&g_cb_mu);
    bucket_t taken = g_stage[i];
    if (!taken.len) {
        pthread_mutex_unlock(&g_cb_mu);
        pthread_mutex_unlock(&g_merge_mu);
        return;
    }
    g_stage[i] = g_spare[i]; /* empty; the callback appends to it from now on */
    g_stage_bytes -= taken.len;
    pthread_mutex_unlock(&g_cb_mu);

    pthread_mutex_lock(&g_mu);
    bucket_t *b = &g_bucket[kind];
    size_t n = 0;
    if (b->enabled && b->rec_size == PS_API_REC) {
        size_t room = g_bucket_limit > g_bucket_bytes ? g_bucket_limit - g_bucket_bytes : 0;
        n = taken.len < room ? taken.len : room - room % PS_API_REC;
        if (n && grow((void **)&b->data, &b->cap, b->len + n, 1) != 0) n = 0;
    }
    if (n) {
        memcpy(b->data + b->len, taken.data, n);
        b->len += n;
        g_bucket_bytes += n;
        if (g_bucket_bytes > g_peak_pending) g_peak_pending = g_bucket_bytes;
        g_kept[kind] += n / PS_API_REC;
    }
    g_seen[kind] += taken.len / PS_API_REC;
    g_dropped_sink += (taken.len - n) / PS_API_REC;
    pthread_mutex_unlock(&g_mu);

    taken.len = 0;
    g_spare[i] = taken; /* its memory serves the next swap */
    pthread_mutex_unlock(&g_merge_mu);
}

/* ------------------------ segments: records written out of the process ------------------------
 * With ps_seg_open() the sink writes its records to files instead of waiting for ps_take():
 * a writer thread of its own wakes every interval (or sooner once the buckets hold a quarter
 * of their limit), asks CUPTI for its completed buffers (cuptiActivityFlushAll(0)), swaps
 * every bucket out under g_mu (constant time) and writes, without any lock the recording
 * takes, one or more segment files <dir>/<pid>-<seq>.cupti: a 64-byte header, then blocks,
 * each a 32-byte header and its payload padded to 8 bytes.  A block holds the records of one
 * kind, byte for byte as the buckets hold them, or (kind 0) the strings interned since the
 * last block of strings, NUL-separated, so that a reader going through the segments of one
 * pid in seq order knows every string a record refers to.  Each file is written under a
 * hidden temporary name, fsynced and renamed into place: a reader never sees half a segment
 * under its final name, and a process killed outright loses at most one interval.  A
 * segment holds at most max_segment_bytes of blocks (a larger bucket is split into several
 * segments, on whole records).  perfscope.collectors.cupti.segments reads them; the header
 * layouts below are the format, version PS_SEG_VERSION.
 *
 * Lock order: g_write_mu (one write cycle at a time), then g_merge_mu, g_cb_mu, g_mu. */
#define PS_SEG_VERSION 1
#define PS_SEG_SPARE_MAX ((size_t)16 << 20) /* emptied buckets larger than this are freed */

typedef struct {
    char magic[8];            /* "PSCUPTI\0" */
    uint32_t version;         /* PS_SEG_VERSION */
    uint32_t header_bytes;    /* sizeof(seg_header_t) */
    uint32_t layout_version;  /* CUPTI API version of the record layouts (layouts.CUPTI_API_VERSION) */
    uint32_t pid;
    uint64_t seq;             /* 0, 1, 2, ... per pid */
    int64_t clock_offset_ns;  /* add to CUPTI timestamps for Unix-epoch ns */
    uint32_t nblocks;
    uint32_t flags;           /* 0 */
    uint64_t created_ns;      /* CLOCK_REALTIME */
    uint64_t payload_bytes;   /* bytes after this header: the file is header_bytes + payload_bytes long */
} seg_header_t;

typedef struct {
    int32_t kind;             /* CUPTI activity kind; 0: strings */
    uint32_t record_bytes;    /* bytes per record; 0 for strings */
    uint64_t count;           /* records, or strings */
    uint64_t first_id;        /* strings: id of the first one; records: 0 */
    uint64_t payload_bytes;   /* unpadded */
} block_header_t;

_Static_assert(sizeof(seg_header_t) == 64, "segment header is 64 bytes");
_Static_assert(sizeof(block_header_t) == 32, "block header is 32 bytes");

typedef struct {
    int32_t kind;
    uint32_t rec;
    const uint8_t *data;
    size_t bytes;
    uint64_t count, first_id;
} piece_t;

static pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_thr_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_thr_cv = PTHREAD_COND_INITIALIZER;
static pthread_t g_thread;
static int g_thread_on = 0, g_thread_stop = 0;
static int g_seg_on = 0;                 /* g_write_mu; read atomically under g_mu by seg_full */
static char g_seg_dir[4096];
static uint32_t g_seg_pid, g_seg_layout;
static uint64_t g_seg_seq = 0;
static int64_t g_seg_offset = 0;
static uint64_t g_seg_interval_ms = 2000;
static size_t g_seg_max = (size_t)64 << 20;
static bucket_t g_wspare[PS_MAX_KIND];   /* emptied buckets kept for reuse (g_mu) */
static size_t g_writing = 0;             /* bytes swapped out and being written (g_mu) */
static uint64_t g_segments = 0, g_seg_bytes = 0, g_seg_errors = 0, g_seg_lost = 0;
static uint64_t g_seg_ns = 0, g_seg_ns_max = 0;
static int g_seg_errno = 0;
static size_t g_seg_taken = 0;           /* strings written to segments (g_blob offset; g_mu) */

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *c = (const uint8_t *)p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write pieces [0, n) as one segment file.  Returns the bytes written, or 0 (errno in *err). */
static uint64_t seg_write(const piece_t *p, int n, int *err) {
    static const uint8_t zeros[8] = {0};
    char fin[4200], tmp[4200];
    uint64_t seq = g_seg_seq++;
    snprintf(fin, sizeof fin, "%s/%u-%08llu.cupti", g_seg_dir, g_seg_pid, (unsigned long long)seq);
    snprintf(tmp, sizeof tmp, "%s/.%u-%08llu.cupti.tmp", g_seg_dir, g_seg_pid, (unsigned long long)seq);
    seg_header_t h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, "PSCUPTI", 8);
    h.version = PS_SEG_VERSION;
    h.header_bytes = sizeof h;
    h.layout_version = g_seg_layout;
    h.pid = g_seg_pid;
    h.seq = seq;
    h.clock_offset_ns = g_seg_offset;
    h.nblocks = (uint32_t)n;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h.created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    for (int i = 0; i < n; i++) h.payload_bytes += sizeof(block_header_t) + ((p[i].bytes + 7) & ~(size_t)7);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { *err = errno; return 0; }
    int rc = write_all(fd, &h, sizeof h);
    for (int i = 0; i < n && rc == 0; i++) {
        block_header_t b = {p[i].kind, p[i].rec, p[i].count, p[i].first_id, p[i].bytes};
        size_t pad = ((p[i].bytes + 7) & ~(size_t)7) - p[i].bytes;
        rc = write_all(fd, &b, sizeof b);
        if (rc == 0) rc = write_all(fd, p[i].data, p[i].bytes);
        if (rc == 0 && pad) rc = write_all(fd, zeros, pad);
    }
    if (rc == 0) rc = fsync(fd);
    if (rc != 0) *err = errno;
    close(fd);
    if (rc == 0 && rename(tmp, fin) != 0) { *err = errno; rc = -1; }
    if (rc != 0) { unlink(tmp); return 0; }
    return sizeof h + h.payload_bytes;
}

typedef struct {
    uint64_t files, bytes, errors, lost;
    int err;
} seg_tally_t; /* what one write cycle did, added to the counters under g_mu */

/* Cut the taken buckets (and the strings) into pieces of at most g_seg_max bytes, whole
 * records each, and write them as segments of at most g_seg_max bytes, counting in *t. */
static void seg_write_pieces(const bucket_t *taken, const int *kinds, int nt, const piece_t *strs, seg_tally_t *t) {
    size_t maxp = 1;
    for (int i = 0; i < nt; i++) {
        size_t rs = taken[i].rec_size, per = g_seg_max / rs ? g_seg_max / rs : 1;
        maxp += (taken[i].len / rs + per - 1) / per;
    }
    piece_t *p = calloc(maxp, sizeof *p);
    if (!p) {
        for (int i = 0; i < nt; i++) t->lost += taken[i].len / taken[i].rec_size;
        t->errors++;
        t->err = ENOMEM;
        return;
    }
    int np = 0;
    if (strs) p[np++] = *strs;
    for (int i = 0; i < nt; i++) {
        size_t rs = taken[i].rec_size, per = g_seg_max / rs ? g_seg_max / rs : 1;
        for (size_t off = 0; off < taken[i].len;) {
            size_t nrec = (taken[i].len - off) / rs;
            if (nrec > per) nrec = per;
            p[np++] = (piece_t){kinds[i], (uint32_t)rs, taken[i].data + off, nrec * rs, nrec, 0};
            off += nrec * rs;
        }
    }
    for (int a = 0; a < np;) {
        int b = a + 1;
        size_t sz = p[a].bytes;
        while (b < np && sz + p[b].bytes <= g_seg_max) sz += p[b++].bytes;
        uint64_t written = seg_write(p + a, b - a, &t->err);
        if (written) {
            t->files++;
            t->bytes += written;
        } else {
            t->errors++;
            for (int i = a; i < b; i++) t->lost += p[i].kind ? p[i].count : 0;
        }
        a = b;
    }
    free(p);
}

/* One write cycle: everything the sink holds now goes to segment files. */
static void seg_cycle(void) {
    pthread_mutex_lock(&g_write_mu);
    if (!g_seg_on) { pthread_mutex_unlock(&g_write_mu); return; }
    uint64_t t0 = now_ns();
    merge_stage(PS_KIND_RUNTIME);
    merge_stage(PS_KIND_DRIVER);
    bucket_t taken[PS_MAX_KIND];
    int kinds[PS_MAX_KIND], nt = 0;
    char *strs = NULL;
    piece_t sp = {0};
    pthread_mutex_lock(&g_mu);
    for (int k = 1; k < PS_MAX_KIND; k++) {
        bucket_t *b = &g_bucket[k];
        if (!b->len || !b->rec_size) continue;
        taken[nt] = *b;
        kinds[nt++] = k;
        b->data = g_wspare[k].data; /* empty; records land there from now on */
        b->cap = g_wspare[k].cap;
        b->len = 0;
        g_wspare[k].data = NULL;
        g_wspare[k].cap = 0;
        g_bucket_bytes -= taken[nt - 1].len;
        g_writing += taken[nt - 1].len;
    }
    size_t slen = g_blob_len - g_seg_taken;
    if (slen && (strs = malloc(slen)) != NULL) {
        size_t lo = 0, hi = g_nstr; /* first id whose offset >= g_seg_taken */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (g_str_off[mid] < g_seg_taken) lo = mid + 1; else hi = mid;
        }
        memcpy(strs, g_blob + g_seg_taken, slen);
        sp = (piece_t){0, 0, (const uint8_t *)strs, slen, g_nstr - lo, lo};
        g_seg_taken = g_blob_len;
    }
    pthread_mutex_unlock(&g_mu);

    seg_tally_t tally = {0};
    if (nt || strs) seg_write_pieces(taken, kinds, nt, strs ? &sp : NULL, &tally);

    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < nt; i++) {
        int k = kinds[i];
        g_writing -= taken[i].len;
        if (!g_wspare[k].data && taken[i].cap <= PS_SEG_SPARE_MAX) {
            g_wspare[k].data = taken[i].data;
            g_wspare[k].cap = taken[i].cap;
        } else {
            free(taken[i].data);
        }
    }
    g_segments += tally.files;
    g_seg_bytes += tally.bytes;
    g_seg_errors += tally.errors;
    g_seg_lost += tally.lost;
    if (tally.err) g_seg_errno = tally.err;
    uint64_t dt = now_ns() - t0;
    g_seg_ns += dt;
    if (dt > g_seg_ns_max) g_seg_ns_max = dt;
    pthread_mutex_unlock(&g_mu);
    free(strs);
    if (nt || slen) { /* the renames reach the disk with the folder */
        int dfd = open(g_seg_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
    }
    pthread_mutex_unlock(&g_write_mu);
}

/* While perfscope has let go of CUPTI (cuptiFinalize between a schedule's windows), no thread
 * of the sink may call into CUPTI: any CUPTI call would attach it to the process again.
 * g_flush_mu makes ps_set_detached(1) wait for a flush in progress. */
static pthread_mutex_t g_flush_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_detached = 0; /* g_flush_mu */

static int flush_all(uint32_t flag) {
    pthread_mutex_lock(&g_flush_mu);
    int rc = p_flush_all && !g_detached ? (int)p_flush_all(flag) : 0;
    pthread_mutex_unlock(&g_flush_mu);
    return rc;
}

static void *seg_thread(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_thr_mu);
    while (!g_thread_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (g_seg_interval_ms % 1000) * 1000000ull;
        ts.tv_sec += (time_t)(g_seg_interval_ms / 1000 + ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&g_thr_cv, &g_thr_mu, &ts);
        if (g_thread_stop) break;
        pthread_mutex_unlock(&g_thr_mu);
        flush_all(0); /* completed buffers reach the buckets (on this thread) */
        seg_cycle();
        pthread_mutex_lock(&g_thr_mu);
    }
    pthread_mutex_unlock(&g_thr_mu);
    return NULL;
}

/* True when the writer should wake before its interval: the buckets hold a quarter of their
 * limit (caller holds g_mu). */
static int seg_full(void) {
    return __atomic_load_n(&g_seg_on, __ATOMIC_RELAXED) && g_bucket_bytes > g_bucket_limit / 4;
}

static void seg_stop_thread(void) {
    pthread_mutex_lock(&g_thr_mu);
    int on = g_thread_on;
    g_thread_stop = 1;
    pthread_cond_signal(&g_thr_cv);
    pthread_mutex_unlock(&g_thr_mu);
    if (on) pthread_join(g_thread, NULL);
    pthread_mutex_lock(&g_thr_mu);
    g_thread_on = 0;
    pthread_mutex_unlock(&g_thr_mu);
}

/* In a forked child the writer thread does not exist and the segments are the parent's. */
static void seg_after_fork(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    g_write_mu = fresh;
    g_thr_mu = fresh;
    g_thr_cv = cv;
    g_thread_on = 0;
    g_seg_on = 0;
}

/* In a forked child only the forking thread exists: locks another thread held stay held
 * forever, and the cached ids are the parent's.  Start the child over. */
static void after_fork_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    g_mu = fresh;
    g_cb_mu = fresh;
    g_merge_mu = fresh;
    g_pid = (uint32_t)getpid();
    t_tid = 0;
    seg_after_fork();
}

static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void install_atfork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* ------------------------------------ exported API ------------------------------------ */

/* Resolve CUPTI entry points from `path` (already loaded by cupti-python, so dlopen
 * returns the same handle).  Returns 0, or -1 with ps_error() set. */
PS_EXPORT int ps_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (!h) h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(g_error, sizeof g_error, "dlopen(%s) failed: %s", path, dlerror());
        return -1;
    }
    p_register = (CUptiResult(*)(ps_req_fn, ps_done_fn))dlsym(h, "cuptiActivityRegisterCallbacks");
    p_next = (CUptiResult(*)(uint8_t *, size_t, void **))dlsym(h, "cuptiActivityGetNextRecord");
    p_dropped = (CUptiResult(*)(void *, uint32_t, size_t *))dlsym(h, "cuptiActivityGetNumDroppedRecords");
    p_flush_all = (CUptiResult(*)(uint32_t))dlsym(h, "cuptiActivityFlushAll");
    pthread_once(&g_atfork_once, install_atfork);
    p_timestamp = (CUptiResult(*)(uint64_t *))dlsym(h, "cuptiGetTimestamp");
    p_subscribe = (CUptiResult(*)(ps_subscriber_t *, ps_cb_fn, void *))dlsym(h, "cuptiSubscribe");
    p_unsubscribe = (CUptiResult(*)(ps_subscriber_t))dlsym(h, "cuptiUnsubscribe");
    p_enable_callback = (CUptiResult(*)(uint32_t, ps_subscriber_t, int, uint32_t))dlsym(h, "cuptiEnableCallback");
    if (!p_register || !p_next || !p_flush_all) {
        snprintf(g_error, sizeof g_error, "%s lacks cuptiActivityRegisterCallbacks/GetNextRecord/FlushAll", path);
        p_register = NULL; p_next = NULL; p_flush_all = NULL;
        return -1;
    }
    return 0;
}

PS_EXPORT const char *ps_error(void) { return g_error; }

/* Keep records of CUPTI kind `kind`, copying `rec_size` bytes each; `str_off0/1` are the
 * offsets of string-pointer fields (negative = none). */
PS_EXPORT int ps_configure(int kind, size_t rec_size, long str_off0, long str_off1) {
    if (kind <= 0 || kind >= PS_MAX_KIND || rec_size < 8) return -1;
    /* a string field is an 8-byte pointer inside the record */
    if ((str_off0 >= 0 && (size_t)str_off0 + 8 > rec_size) || (str_off1 >= 0 && (size_t)str_off1 + 8 > rec_size))
        return -1;
    pthread_mutex_lock(&g_mu);
    bucket_t *b = &g_bucket[kind];
    b->enabled = 1;
    b->rec_size = rec_size;
    b->nstr = 0;
    if (str_off0 >= 0) b->str_off[b->nstr++] = (size_t)str_off0;
    if (str_off1 >= 0) b->str_off[b->nstr++] = (size_t)str_off1;
    pthread_mutex_unlock(&g_mu);
    return 0;
}

/* API records are kept only where mask[cbid] != 0 (runtime: which=1, driver: which=0). */
PS_EXPORT void ps_set_api_filter(int which, const uint8_t *mask, size_t n) {
    pthread_mutex_lock(&g_mu);
    if (n > PS_MAX_CBID) n = PS_MAX_CBID;
    memset(g_api_mask[which ? 1 : 0], 0, PS_MAX_CBID);
    memcpy(g_api_mask[which ? 1 : 0], mask, n);
    g_api_filter = 1;
    pthread_mutex_unlock(&g_mu);
}

PS_EXPORT void ps_set_limits(size_t buf_size, size_t max_outstanding, size_t bucket_limit) {
    pthread_mutex_lock(&g_mu);
    if (buf_size && ((buf_size + 7) & ~(size_t)7) != g_buf_size) {
        g_buf_size = (buf_size + 7) & ~(size_t)7;
        while (g_pool_n) free(g_pool[--g_pool_n]); /* pooled buffers have the old size */
    }
    if (max_outstanding) g_max_outstanding = max_outstanding;
    if (bucket_limit) __atomic_store_n(&g_bucket_limit, bucket_limit, __ATOMIC_RELAXED); /* the callback reads it unlocked */
    pthread_mutex_unlock(&g_mu);
}

/* Register the buffer callbacks with CUPTI.  Returns the CUptiResult. */
PS_EXPORT int ps_register(void) {
    if (!p_register) { snprintf(g_error, sizeof g_error, "ps_open() was not called"); return -1; }
    return p_register(buffer_requested, buffer_completed);
}

/* cuptiActivityFlushAll(flag); completed buffers are processed on this thread. */
PS_EXPORT int ps_flush(uint32_t flag) {
    if (!p_flush_all) return -1;
    return flush_all(flag);
}

/* detached != 0: CUPTI is (about to be) finalized, so the sink makes no CUPTI call until
 * ps_set_detached(0); returns once no flush is in progress. */
PS_EXPORT void ps_set_detached(int detached) {
    pthread_mutex_lock(&g_flush_mu);
    g_detached = detached != 0;
    pthread_mutex_unlock(&g_flush_mu);
}

PS_EXPORT int ps_timestamp(uint64_t *out) {
    if (!p_timestamp) return -1;
    return p_timestamp(out);
}

/* Bytes waiting in kind's bucket. */
PS_EXPORT size_t ps_pending(int kind) {
    if (kind <= 0 || kind >= PS_MAX_KIND) return 0;
    merge_stage(kind);
    pthread_mutex_lock(&g_mu);
    size_t n = g_bucket[kind].len;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Move up to `cap` bytes (whole records) of kind's bucket into dst; returns bytes moved. */
PS_EXPORT size_t ps_take(int kind, uint8_t *dst, size_t cap) {
    if (kind <= 0 || kind >= PS_MAX_KIND) return 0;
    merge_stage(kind);
    pthread_mutex_lock(&g_mu);
    bucket_t *b = &g_bucket[kind];
    size_t n = b->len < cap ? b->len : cap;
    if (b->rec_size) n -= n % b->rec_size;
    memcpy(dst, b->data, n);
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    g_bucket_bytes -= n;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Move up to `max_records` whole records of kind's bucket out as columns: field i (at byte
 * offset offs[i], sizes[i] bytes: 1, 2, 4 or 8) of record j goes to outs[i] + j * sizes[i].
 * One pass over the records, so each record's cache lines are read once.  Returns the
 * number of records moved. */
PS_EXPORT size_t ps_take_columns(int kind, int nf, const size_t *offs, const size_t *sizes, void **outs,
                                 size_t max_records) {
    if (kind <= 0 || kind >= PS_MAX_KIND) return 0;
    merge_stage(kind);
    pthread_mutex_lock(&g_mu);
    bucket_t *b = &g_bucket[kind];
    size_t rs = b->rec_size;
    size_t n = rs ? b->len / rs : 0;
    if (n > max_records) n = max_records;
    for (size_t j = 0; j < n; j++) {
        const uint8_t *rec = b->data + j * rs;
        for (int i = 0; i < nf; i++) {
            const uint8_t *src = rec + offs[i];
            switch (sizes[i]) {
            case 8: memcpy((uint8_t *)outs[i] + j * 8, src, 8); break;
            case 4: memcpy((uint8_t *)outs[i] + j * 4, src, 4); break;
            case 2: memcpy((uint8_t *)outs[i] + j * 2, src, 2); break;
            default: memcpy((uint8_t *)outs[i] + j * sizes[i], src, sizes[i]); break;
            }
        }
    }
    size_t bytes = n * rs;
    memmove(b->data, b->data + bytes, b->len - bytes);
    b->len -= bytes;
    g_bucket_bytes -= bytes;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Strings added since the last ps_take_strings(): returns their byte length. */
PS_EXPORT size_t ps_strings_pending(void) {
    pthread_mutex_lock(&g_mu);
    size_t n = g_blob_len - g_blob_taken;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Copy new strings (NUL-separated, in id order) into dst; returns bytes copied and the
 * id of the first one in *first_id.  Only whole strings are copied. */
PS_EXPORT size_t ps_take_strings(char *dst, size_t cap, uint64_t *first_id) {
    pthread_mutex_lock(&g_mu);
    size_t n = g_blob_len - g_blob_taken;
    if (n > cap) {
        n = cap;
        while (n && g_blob[g_blob_taken + n - 1] != '\0') n--;
    }
    size_t lo = 0, hi = g_nstr; /* first id whose offset >= g_blob_taken */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_str_off[mid] < g_blob_taken) lo = mid + 1; else hi = mid;
    }
    *first_id = lo;
    memcpy(dst, g_blob + g_blob_taken, n);
    g_blob_taken += n;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Counters: out[0..63] seen per kind, out[64..127] kept per kind, then dropped_cupti,
 * dropped_sink, api_filtered, buffers_done, buffers_null, valid_bytes, callback_ns,
 * callback_ns_max, outstanding, strings, strings_dropped, peak_pending_bytes,
 * peak_outstanding_buffers, buffer_bytes, segments, segment_bytes, segment_errors,
 * segment_lost_records, segment_write_ns, segment_write_ns_max, segment_errno.  Returns the
 * number of values written. */
PS_EXPORT int ps_stats(uint64_t *out, int n) {
    uint64_t v[2 * PS_MAX_KIND + 21];
    pthread_mutex_lock(&g_mu);
    memcpy(v, g_seen, sizeof g_seen);
    memcpy(v + PS_MAX_KIND, g_kept, sizeof g_kept);
    uint64_t *t = v + 2 * PS_MAX_KIND;
    t[0] = g_dropped_cupti; t[1] = g_dropped_sink; t[2] = g_api_filtered;
    t[3] = g_buffers_done; t[4] = g_buffers_null; t[5] = g_valid_bytes;
    t[6] = g_cb_ns; t[7] = g_cb_ns_max; t[8] = g_outstanding; t[9] = g_nstr; t[10] = g_strings_dropped;
    t[11] = g_peak_pending; t[12] = g_peak_outstanding; t[13] = g_buf_size; t[14] = g_segments;
    t[15] = g_seg_bytes; t[16] = g_seg_errors; t[17] = g_seg_lost; t[18] = g_seg_ns; t[19] = g_seg_ns_max;
    t[20] = (uint64_t)g_seg_errno;
    pthread_mutex_unlock(&g_mu);
    if (n < 0) n = 0;
    int m = n < (int)(sizeof v / sizeof v[0]) ? n : (int)(sizeof v / sizeof v[0]);
    memcpy(out, v, (size_t)m * sizeof v[0]);
    return m;
}

/* Forget configuration, buckets and counters (the string table stays: ids are global). */
PS_EXPORT void ps_reset(void) {
    pthread_mutex_lock(&g_merge_mu);
    pthread_mutex_lock(&g_cb_mu);
    g_stage[0].len = g_stage[1].len = 0;
    g_stage_bytes = 0;
    g_cb_records = g_cb_dropped = 0;
    pthread_mutex_lock(&g_mu);
    for (int k = 0; k < PS_MAX_KIND; k++) {
        g_bucket_bytes -= g_bucket[k].len;
        g_bucket[k].len = 0;
        g_bucket[k].enabled = 0;
    }
    memset(g_seen, 0, sizeof g_seen);
    memset(g_kept, 0, sizeof g_kept);
    g_api_filter = 0;
    g_api_filtered = g_dropped_cupti = g_dropped_sink = 0;
    g_buffers_done = g_buffers_null = g_valid_bytes = g_cb_ns = g_cb_ns_max = 0;
    g_peak_pending = g_bucket_bytes;
    g_peak_outstanding = g_outstanding;
    g_segments = g_seg_bytes = g_seg_errors = g_seg_lost = g_seg_ns = g_seg_ns_max = 0;
    g_seg_errno = 0;
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_cb_mu);
    pthread_mutex_unlock(&g_merge_mu);
    ps_set_detached(0);
}

/* Tests: one buffer_requested() / buffer_completed() round, as CUPTI makes it. */
PS_EXPORT void ps_test_request(uint8_t **buffer, size_t *size) {
    size_t max_records;
    buffer_requested(buffer, size, &max_records);
}

PS_EXPORT void ps_test_complete(uint8_t *buffer, size_t size, size_t valid) {
    buffer_completed(NULL, 0, buffer, size, valid);
}

/* Process a buffer as if CUPTI had completed it, walking records end to end (tests). */
PS_EXPORT void ps_feed_plain(uint8_t *buffer, size_t valid) {
    pthread_mutex_lock(&g_mu);
    process(NULL, 0, buffer, valid, 0);
    pthread_mutex_unlock(&g_mu);
}

/* Subscribe the sink's API callback (CUPTI's one subscriber slot).  Returns the
 * CUptiResult (39: the slot is taken), or -1 when ps_open() found no callback API. */
PS_EXPORT int ps_subscribe(void) {
    if (!p_subscribe || !p_enable_callback || !p_unsubscribe) return -1;
    if (g_subscriber) return PS_ERROR_MULTIPLE_SUBSCRIBERS; /* one recording at a time */
    pthread_once(&g_atfork_once, install_atfork);
    g_pid = (uint32_t)getpid();
    __atomic_add_fetch(&g_session, 1, __ATOMIC_RELAXED);
    ps_subscriber_t handle = NULL;
    int rc = p_subscribe(&handle, api_callback, NULL);
    if (rc == 0) g_subscriber = handle; /* a failed subscribe leaves no handle of ours */
    return rc;
}

/* The ids ps_enable_api() turned on, per domain ([0] driver, [1] runtime), for ps_api_switch(). */
static uint32_t g_on_ids[2][PS_MAX_CBID];
static size_t g_on_n[2];

/* Enable the callback for each id of `domain` (1 driver, 2 runtime); returns how many
 * CUPTI refused. */
PS_EXPORT int ps_enable_api(int domain, const uint32_t *cbids, size_t n) {
    if (!g_subscriber) return (int)n;
    int refused = 0;
    int i_dom = domain == PS_DOMAIN_RUNTIME;
    for (size_t i = 0; i < n; i++) {
        if (p_enable_callback(1, g_subscriber, domain, cbids[i]) != 0) refused++;
        else if (g_on_n[i_dom] < PS_MAX_CBID) g_on_ids[i_dom][g_on_n[i_dom]++] = cbids[i];
    }
    return refused;
}

/* Between a schedule's windows: turn every callback ps_enable_api() enabled off (on = 0),
 * so API calls cost CUPTI nothing, or back on (on = 1).  Turning them on starts a new
 * session: a call entered before the pause never reports its exit, so per-thread nesting
 * counts restart.  Returns how many ids CUPTI refused. */
PS_EXPORT int ps_api_switch(int on) {
    if (!g_subscriber) return 0;
    if (on) __atomic_add_fetch(&g_session, 1, __ATOMIC_RELAXED);
    int refused = 0;
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < g_on_n[d]; i++)
            if (p_enable_callback(on ? 1 : 0, g_subscriber, d ? PS_DOMAIN_RUNTIME : PS_DOMAIN_DRIVER, g_on_ids[d][i]) != 0)
                refused++;
    return refused;
}

/* Give the subscriber slot back (CUPTI disables its callbacks). */
PS_EXPORT int ps_unsubscribe(void) {
    if (!g_subscriber) return 0;
    int rc = p_unsubscribe(g_subscriber);
    g_subscriber = NULL;
    g_on_n[0] = g_on_n[1] = 0;
    return rc;
}

/* 1 once the job has called a managed allocation (seen by the API callback), else 0. */
PS_EXPORT int ps_managed_seen(void) { return __atomic_load_n(&g_managed_seen, __ATOMIC_RELAXED); }

/* Tests: what ps_subscribe() does to per-thread state (a new session). */
PS_EXPORT void ps_test_new_session(void) { __atomic_add_fetch(&g_session, 1, __ATOMIC_RELAXED); }

/* Tests: only the enter callback (a call still running when the session ends) or only the
 * exit callback (a call entered before the session began). */
PS_EXPORT void ps_test_api_half(int domain, uint32_t cbid, uint32_t correlation_id, int site) {
    static uint64_t slot = 0x7fffffffffffffffull; /* what an unwritten slot may hold */
    ps_cbdata_t d = {0};
    d.site = site;
    d.correlation_data = &slot;
    d.correlation_id = correlation_id;
    if (!g_pid) g_pid = (uint32_t)getpid();
    api_callback(NULL, domain, cbid, &d);
}

/* Counters of the callback path: records made, records dropped (staging full). */
PS_EXPORT void ps_api_stats(uint64_t *out) {
    pthread_mutex_lock(&g_cb_mu);
    out[0] = g_cb_records;
    out[1] = g_cb_dropped;
    pthread_mutex_unlock(&g_cb_mu);
}

/* Tests: one API call's enter and exit callbacks, as CUPTI makes them; with
 * nested_cbid != 0, a driver call of that id is made between them (a runtime call's own
 * driver call). */
PS_EXPORT void ps_test_api_call(int domain, uint32_t cbid, uint32_t correlation_id, int32_t ret, uint32_t nested_cbid) {
    uint64_t slot = 0;
    ps_cbdata_t d = {0};
    d.correlation_data = &slot;
    d.correlation_id = correlation_id;
    d.function_return_value = &ret;
    if (!g_pid) g_pid = (uint32_t)getpid();
    pthread_once(&g_atfork_once, install_atfork);
    api_callback(NULL, domain, cbid, &d);
    if (nested_cbid) {
        uint64_t inner_slot = 0;
        ps_cbdata_t inner = d;
        inner.correlation_data = &inner_slot;
        inner.correlation_id = correlation_id + 1;
        inner.site = 0;
        api_callback(NULL, PS_DOMAIN_DRIVER, nested_cbid, &inner);
        inner.site = 1;
        api_callback(NULL, PS_DOMAIN_DRIVER, nested_cbid, &inner);
    }
    d.site = 1;
    api_callback(NULL, domain, cbid, &d);
}


/* --------------------------------- segments: exported API --------------------------------- */

/* Write records to segment files in `dir` (which must exist) from now on: a writer thread
 * every `interval_ms` (0: no thread; ps_seg_cycle() writes), segments of at most
 * `max_segment_bytes`.  `layout_version` and `clock_offset_ns` go into every header.
 * Returns 0, or -1 with ps_error() set (already writing, or the folder is not writable). */
PS_EXPORT int ps_seg_open(const char *dir, uint32_t layout_version, int64_t clock_offset_ns, uint64_t interval_ms,
                          size_t max_segment_bytes) {
    pthread_mutex_lock(&g_write_mu);
    if (g_seg_on) {
        pthread_mutex_unlock(&g_write_mu);
        snprintf(g_error, sizeof g_error, "the sink is already writing segments to %.400s", g_seg_dir);
        return -1;
    }
    if (strlen(dir) >= sizeof g_seg_dir || access(dir, W_OK) != 0) {
        pthread_mutex_unlock(&g_write_mu);
        snprintf(g_error, sizeof g_error, "cannot write segments to %.400s: %s", dir, strerror(errno ? errno : ENAMETOOLONG));
        return -1;
    }
    pthread_once(&g_atfork_once, install_atfork);
    snprintf(g_seg_dir, sizeof g_seg_dir, "%s", dir);
    g_seg_layout = layout_version;
    g_seg_offset = clock_offset_ns;
    if (g_seg_pid != (uint32_t)getpid()) { /* seq goes on across sessions: names are never reused */
        g_seg_pid = (uint32_t)getpid();
        g_seg_seq = 0;
    }
    /* A session's first segment carries the whole string table (the folder may be another
     * run's): a reader of one run knows every name. */
    pthread_mutex_lock(&g_mu);
    g_seg_taken = 0;
    pthread_mutex_unlock(&g_mu);
    g_seg_interval_ms = interval_ms;
    g_seg_max = max_segment_bytes >= 4096 ? max_segment_bytes : 4096;
    __atomic_store_n(&g_seg_on, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_write_mu);
    if (interval_ms) {
        pthread_mutex_lock(&g_thr_mu);
        g_thread_stop = 0;
        g_thread_on = pthread_create(&g_thread, NULL, seg_thread, NULL) == 0;
        pthread_mutex_unlock(&g_thr_mu);
        if (!g_thread_on) {
            __atomic_store_n(&g_seg_on, 0, __ATOMIC_RELAXED);
            snprintf(g_error, sizeof g_error, "cannot start the segment writer thread");
            return -1;
        }
    }
    return 0;
}

/* Write what the sink holds now (the writer thread does this every interval). */
PS_EXPORT void ps_seg_cycle(void) { seg_cycle(); }

/* Stop the writer thread (waiting for a cycle in progress); ps_seg_close() writes the rest. */
PS_EXPORT void ps_seg_stop(void) { seg_stop_thread(); }

/* Stop the thread, write what the sink holds and stop writing segments.  Returns segments
 * written since the last ps_reset(). */
PS_EXPORT uint64_t ps_seg_close(void) {
    seg_stop_thread();
    seg_cycle();
    pthread_mutex_lock(&g_write_mu);
    __atomic_store_n(&g_seg_on, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_write_mu);
    pthread_mutex_lock(&g_mu);
    uint64_t n = g_segments;
    pthread_mutex_unlock(&g_mu);
    return n;
}
