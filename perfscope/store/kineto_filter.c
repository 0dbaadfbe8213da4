/* Pre-filter of Kineto trace JSON: drop the events no perfscope table keeps.
 *
 * kf_filter() reads the whole (decompressed) text of a trace once and writes a copy in
 * which the "traceEvents" array holds only the events some table may keep; every other
 * member of the root object, and every kept event, is copied byte for byte.  The importer
 * then decodes the smaller text with its usual msgspec decoders, so the tables built are
 * the same by construction; about two thirds of a Kineto trace (cpu_op events, flows,
 * metadata) is never decoded.
 *
 * The rule is conservative: an event is dropped only when its depth-1 keys say for certain
 * that no table keeps it (see decide()).  The whole text is validated as strict JSON
 * (RFC 8259, UTF-8, no lone surrogate escapes, bounded nesting), dropped events included,
 * and anything the importer's decoders would treat differently for a dropped event than
 * for a kept one (a phase that is not text, a category or pid that is an object or array,
 * an integer too long for Python) is an error: on every error the caller decodes the
 * original text, which gives the user-facing messages.
 *
 * Speed: one pass, strings and digits skipped 16 bytes at a time (SSE2), no allocation
 * per event, no global state (ctypes releases the GIL around the call).  The output may be
 * the input itself (kept events only ever move towards the start), and a big text's second
 * half is scanned by a second thread that starts at a guessed element boundary: it only
 * notes its kept events, which the first thread copies once it has reached that very
 * boundary (if it does not, the guess was wrong and the first thread does all the work).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if (defined(__unix__) || defined(__APPLE__)) && !defined(KF_NO_THREADS)
#include <pthread.h>
#define KF_THREADS 1
#endif

#define KF_API __attribute__((visibility("default")))

/* Status codes (kept in sync with kineto_filter.py's ERRORS). */
enum {
    KF_OK = 0,
    KF_ERR_SYNTAX = 1,       /* not JSON */
    KF_ERR_TRUNCATED = 2,    /* the text ends inside a value */
    KF_ERR_DEPTH = 3,        /* nesting deeper than KF_MAX_DEPTH */
    KF_ERR_ROOT = 4,         /* the root is not an object, or has an escaped key */
    KF_ERR_NO_EVENTS = 5,    /* no "traceEvents" member */
    KF_ERR_EVENTS = 6,       /* "traceEvents" is not an array, or appears twice */
    KF_ERR_EVENT = 7,        /* an element of "traceEvents" is not an object */
    KF_ERR_SHAPE = 8,        /* an event the rule must not drop blindly (see scan_event) */
    KF_ERR_UTF8 = 9,         /* invalid UTF-8, or an unpaired surrogate escape */
    KF_ERR_NUMBER = 10,      /* an integer literal longer than KF_MAX_INT_DIGITS */
    KF_ERR_OUTPUT = 11,      /* output buffer or chunk counts too small, or no memory */
    KF_ERR_ARGS = 12,        /* malformed rule lists, or chunk_events < 1 */
};

/* Nesting limit, the root object counting as 1.  msgspec recurses per level (Python's
 * recursion limit, 1000 by default); Kineto's deepest values (input shapes) are ~6 deep. */
#define KF_MAX_DEPTH 100
/* Python refuses to make an int of more than sys.get_int_max_str_digits() digits (4300 by
 * default, never below 640 unless unlimited); a longer literal in a dropped event would
 * fail the original decode and not the filtered one. */
#define KF_MAX_INT_DIGITS 600
#define KF_MAX_CATS 64
#define KF_MAX_PREFIXES 16
/* The second thread notes at most this many kept events (32 bytes each), then leaves the
 * rest to the first one. */
#ifndef KF_MAX_SPANS
#define KF_MAX_SPANS ((size_t)1 << 22)
#endif

typedef struct {
    int64_t events;       /* elements of traceEvents */
    int64_t kept;         /* elements written */
    int64_t out_len;      /* bytes written */
    int64_t error_offset; /* byte offset of the error in the input (-1 when none) */
    int64_t split;        /* 1 when a second thread filtered part of the events */
} kf_result;

typedef struct {
    const uint8_t *ptr;
    size_t len;
    char phase;           /* the phase a table keeps for this category */
    int by_name;          /* only names with one of the prefixes are kept */
} kf_cat;

typedef struct {
    const uint8_t *begin, *end;
    const uint8_t *err_at;
    int err;
    kf_cat cats[KF_MAX_CATS];
    int ncats;
    struct { const uint8_t *ptr; size_t len; } prefixes[KF_MAX_PREFIXES];
    int nprefixes;
} kf_ctx;

/* 1 for JSON whitespace. */
static const uint8_t WS[256] = {[' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1};

/* 1 for bytes that need no attention inside a string: printable ASCII but '"' and '\\'. */
static const uint8_t PLAIN[256] = {
    [0x20 ... 0x21] = 1, [0x23 ... 0x5B] = 1, [0x5D ... 0x7F] = 1,  /* skips 0x22 '"' and 0x5C '\\' */
};

static const uint8_t *fail(kf_ctx *c, int err, const uint8_t *at) {
    if (!c->err) {
        c->err = err;
        c->err_at = at;
    }
    return NULL;
}

/* fail() for the functions that return 1 (go on) or 0 (stop): always 0. */
static int failed(kf_ctx *c, int err, const uint8_t *at) {
    fail(c, err, at);
    return 0;
}

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end) {
    while (p < end && WS[*p])
        p++;
    return p;
}

static int hex4(const uint8_t *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned d = p[i];
        if (d >= '0' && d <= '9') d -= '0';
        else if (d >= 'a' && d <= 'f') d -= 'a' - 10;
        else if (d >= 'A' && d <= 'F') d -= 'A' - 10;
        else return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

/* Length of the valid UTF-8 sequence of 2-4 bytes at p (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0. */
static size_t utf8_seq(const uint8_t *p, const uint8_t *end) {
    uint8_t b0 = p[0];
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF;  /* range of the second byte */
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        else if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        else if (b0 == 0xF4) hi = 0x8F;
    } else return 0;
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return n;
}

/* Scan a string whose opening quote is at p[-1]; return the byte after its closing
 * quote (NULL on error).  *escaped is set when it holds a backslash escape. */
static const uint8_t *scan_string(kf_ctx *c, const uint8_t *p, int *escaped) {
    const uint8_t *end = c->end;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: stop at '"', '\\', a control byte or a non-ASCII byte (the
         * signed compare takes bytes >= 0x80 as negative, so below ' '). */
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(' ');
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                       _mm_cmplt_epi8(v, space));
            unsigned m = (unsigned)_mm_movemask_epi8(hit);
            if (m) {
                p += __builtin_ctz(m);
                goto special;
            }
            p += 16;
        }
#endif
        while (p < end && PLAIN[*p])
            p++;
        if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
#ifdef __SSE2__
    special:
#endif
        if (*p == '"') return p + 1;
        if (*p == '\\') {
            *escaped = 1;
            if (end - p < 2) return fail(c, KF_ERR_TRUNCATED, p);
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                unsigned u, u2;
                if (end - p < 6) return fail(c, KF_ERR_TRUNCATED, p);
                if (!hex4(p + 2, &u)) return fail(c, KF_ERR_SYNTAX, p);
                if (u >= 0xDC00 && u <= 0xDFFF) return fail(c, KF_ERR_UTF8, p);
                if (u >= 0xD800 && u <= 0xDBFF) {
                    /* a high surrogate must be followed by the escape of a low one */
                    const uint8_t *q = p + 6;
                    if ((q < end && q[0] != '\\') || (end - q > 1 && q[1] != 'u')) return fail(c, KF_ERR_UTF8, p);
                    if (end - q < 6) return fail(c, KF_ERR_TRUNCATED, p);
                    if (!hex4(q + 2, &u2)) return fail(c, KF_ERR_SYNTAX, q);
                    if (u2 < 0xDC00 || u2 > 0xDFFF) return fail(c, KF_ERR_UTF8, p);
                    p += 12;
                } else {
                    p += 6;
                }
                continue;
            }
            default:
                return fail(c, KF_ERR_SYNTAX, p);
            }
        }
        if (*p < 0x20) return fail(c, KF_ERR_SYNTAX, p);
        size_t n = utf8_seq(p, end);
        if (!n) return fail(c, KF_ERR_UTF8, p);
        p += n;
    }
}

static inline int is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

/* The first byte at or after p that is not a decimal digit (or end). */
static inline const uint8_t *skip_digits(const uint8_t *p, const uint8_t *end) {
#ifdef __SSE2__
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8('0' - 1)), _mm_cmplt_epi8(v, _mm_set1_epi8('9' + 1)));
        unsigned m = ~(unsigned)_mm_movemask_epi8(digit) & 0xFFFF;
        if (m) return p + __builtin_ctz(m);
        p += 16;
    }
#endif
    while (p < end && is_digit(*p))
        p++;
    return p;
}

/* Scan a number starting at p; return the byte after it (NULL on error). */
static const uint8_t *scan_number(kf_ctx *c, const uint8_t *p) {
    const uint8_t *end = c->end, *start = p;
    if (*p == '-') p++;
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    const uint8_t *digits = p;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') p = skip_digits(p + 1, end);
    else return fail(c, KF_ERR_SYNTAX, start);
    size_t int_digits = (size_t)(p - digits);
    int is_int = 1;
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
        if (!is_digit(*p)) return fail(c, KF_ERR_SYNTAX, p);
        p = skip_digits(p + 1, end);
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
        if (!is_digit(*p)) return fail(c, KF_ERR_SYNTAX, p);
        while (p < end && is_digit(*p)) p++;
    }
    if (is_int && int_digits > KF_MAX_INT_DIGITS) return fail(c, KF_ERR_NUMBER, start);
    return p;
}

static const uint8_t *scan_literal(kf_ctx *c, const uint8_t *p) {
    const char *word = *p == 't' ? "true" : *p == 'f' ? "false" : "null";
    size_t n = strlen(word);
    if ((size_t)(c->end - p) < n) {
        /* a prefix of the word cut short is truncation, anything else a syntax error */
        size_t have = (size_t)(c->end - p);
        return fail(c, memcmp(p, word, have) == 0 ? KF_ERR_TRUNCATED : KF_ERR_SYNTAX, p);
    }
    if (memcmp(p, word, n) != 0) return fail(c, KF_ERR_SYNTAX, p);
    return p + n;
}

/* Scan an object member's key and colon at p (whitespace already skipped); returns the
 * first byte of its value, whitespace skipped (NULL on error). */
static const uint8_t *scan_member_key(kf_ctx *c, const uint8_t *p, const uint8_t *end) {
    int escaped;
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    if (*p != '"') return fail(c, KF_ERR_SYNTAX, p);
    if (!(p = scan_string(c, p + 1, &escaped))) return NULL;
    p = skip_ws(p, end);
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    if (*p != ':') return fail(c, KF_ERR_SYNTAX, p);
    return skip_ws(p + 1, end);
}

/* Skip (and validate) one value at p, whose container is at nesting level `depth` (root
 * object = 1).  Iterative: a byte per open container on a fixed stack. */
static const uint8_t *skip_value(kf_ctx *c, const uint8_t *p, int depth) {
    const uint8_t *end = c->end;
    uint8_t stack[KF_MAX_DEPTH];
    int top = 0;  /* open containers of this value */
    int escaped;
    for (;;) {
        /* p is at the start of a value (whitespace already skipped) */
        if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
        switch (*p) {
        case '"':
            if (!(p = scan_string(c, p + 1, &escaped))) return NULL;
            break;
        case '{':
        case '[': {
            uint8_t close = *p == '{' ? '}' : ']';
            if (depth + top + 1 > KF_MAX_DEPTH) return fail(c, KF_ERR_DEPTH, p);
            stack[top++] = close;
            p = skip_ws(p + 1, end);
            if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
            if (*p == close) {
                p++;
                top--;
                break;
            }
            if (close == '}' && !(p = scan_member_key(c, p, end))) return NULL;
            continue;  /* the first member's value */
        }
        case 't': case 'f': case 'n':
            if (!(p = scan_literal(c, p))) return NULL;
            break;
        default:
            if (*p != '-' && !is_digit(*p)) return fail(c, KF_ERR_SYNTAX, p);
            if (!(p = scan_number(c, p))) return NULL;
            break;
        }
        /* after a complete value: close containers, or move to the next member */
        for (;;) {
            if (top == 0) return p;
            p = skip_ws(p, end);
            if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
            if (*p == stack[top - 1]) {
                p++;
                top--;
                continue;
            }
            if (*p != ',') return fail(c, KF_ERR_SYNTAX, p);
            p = skip_ws(p + 1, end);
            if (stack[top - 1] == '}' && !(p = scan_member_key(c, p, end))) return NULL;
            break;
        }
    }
}

/* What an event's depth-1 key says about it. */
enum { F_ABSENT = 0, F_TEXT, F_UNKNOWN };  /* F_UNKNOWN: escaped text, another type, or twice */

typedef struct {
    int state;
    const uint8_t *ptr;  /* the text, when F_TEXT */
    size_t len;
} kf_field;

static inline void note_text(kf_field *f, const uint8_t *ptr, size_t len, int escaped) {
    if (f->state != F_ABSENT) {
        f->state = F_UNKNOWN;  /* a repeated key: which one a decoder takes is its business */
        return;
    }
    f->state = escaped ? F_UNKNOWN : F_TEXT;
    f->ptr = ptr;
    f->len = len;
}

static inline int text_is(const kf_field *f, const char *s, size_t n) {
    return f->state == F_TEXT && f->len == n && memcmp(f->ptr, s, n) == 0;
}

#define KF_DROP (-1)

/* KF_DROP to drop the event, else keep it: the index of its category in the rules, or
 * ncats when the category is not known (see the module comment of kineto_filter.py). */
static int decide(const kf_ctx *c, const kf_field *ph, const kf_field *cat, const kf_field *name, int odd_key) {
    if (odd_key) return c->ncats;  /* an escaped key may spell "ph", "cat" or "name" */
    char phase = 0;
    if (ph->state == F_TEXT) {
        if (text_is(ph, "X", 1)) phase = 'X';
        else if (text_is(ph, "C", 1)) phase = 'C';
        else return KF_DROP;  /* no table keeps any other phase */
    }
    if (cat->state != F_TEXT) return c->ncats;
    int hit = -1;
    for (int i = 0; i < c->ncats; i++) {
        if (c->cats[i].len == cat->len && memcmp(c->cats[i].ptr, cat->ptr, cat->len) == 0) {
            hit = i;
            break;
        }
    }
    if (hit < 0) return KF_DROP;  /* a category no table reads */
    if (phase && phase != c->cats[hit].phase) return KF_DROP;
    if (c->cats[hit].by_name && name->state == F_TEXT) {
        for (int i = 0; i < c->nprefixes; i++)
            if (name->len >= c->prefixes[i].len && memcmp(name->ptr, c->prefixes[i].ptr, c->prefixes[i].len) == 0)
                return hit;
        return KF_DROP;
    }
    return hit;
}

/* Scan the event object at p ('{'); set *kind (see decide()); return the byte after it. */
static const uint8_t *scan_event(kf_ctx *c, const uint8_t *p, int *kind) {
    const uint8_t *end = c->end;
    kf_field ph = {0}, cat = {0}, name = {0};
    int odd_key = 0;
    p = skip_ws(p + 1, end);
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    if (*p != '}') {
        for (;;) {
            if (*p != '"') return fail(c, KF_ERR_SYNTAX, p);
            const uint8_t *key = p + 1;
            int escaped = 0;
            if (!(p = scan_string(c, key, &escaped))) return NULL;
            size_t klen = (size_t)(p - 1 - key);
            kf_field *slot = NULL;
            int is_pid = 0;
            if (escaped) odd_key = 1;
            else if (klen == 2 && memcmp(key, "ph", 2) == 0) slot = &ph;
            else if (klen == 3 && memcmp(key, "cat", 3) == 0) slot = &cat;
            else if (klen == 4 && memcmp(key, "name", 4) == 0) slot = &name;
            else if (klen == 3 && memcmp(key, "pid", 3) == 0) is_pid = 1;
            p = skip_ws(p, end);
            if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
            if (*p != ':') return fail(c, KF_ERR_SYNTAX, p);
            p = skip_ws(p + 1, end);
            if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
            const uint8_t *value = p;
            if (slot != NULL && *p == '"') {
                int vesc = 0;
                if (!(p = scan_string(c, p + 1, &vesc))) return NULL;
                note_text(slot, value + 1, (size_t)(p - 1 - (value + 1)), vesc);
            } else {
                /* The decoders type "ph" as text: another type fails the whole trace, which
                 * only the original text may do.  The importer hashes "cat" and "pid" of
                 * every event: an object or array there would raise for it. */
                if (slot == &ph) return fail(c, KF_ERR_SHAPE, value);
                if ((slot == &cat || is_pid) && (*p == '{' || *p == '['))
                    return fail(c, KF_ERR_SHAPE, value);
                if (slot != NULL) slot->state = F_UNKNOWN;
                if (!(p = skip_value(c, p, 3))) return NULL;
            }
            p = skip_ws(p, end);
            if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
            if (*p == '}') break;
            if (*p != ',') return fail(c, KF_ERR_SYNTAX, p);
            p = skip_ws(p + 1, end);
            if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
        }
    }
    *kind = decide(c, &ph, &cat, &name, odd_key);
    return p + 1;
}

/* Parse the rule lists: `cats` holds lines "<phase><category>" ('\n'-separated), `by_name`
 * the category whose events are kept only by name, `prefixes` the name prefixes. */
static int load_rules(kf_ctx *c, const uint8_t *cats, size_t cats_len, const uint8_t *by_name, size_t by_name_len,
                      const uint8_t *prefixes, size_t prefixes_len) {
    const uint8_t *p = cats, *end = cats + cats_len;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *line_end = nl ? nl : end;
        if (line_end - p < 2 || c->ncats == KF_MAX_CATS) return 0;
        kf_cat *k = &c->cats[c->ncats++];
        k->phase = (char)p[0];
        k->ptr = p + 1;
        k->len = (size_t)(line_end - p - 1);
        k->by_name = k->len == by_name_len && memcmp(k->ptr, by_name, by_name_len) == 0;
        p = nl ? nl + 1 : end;
    }
    p = prefixes;
    end = prefixes + prefixes_len;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *line_end = nl ? nl : end;
        if (line_end == p || c->nprefixes == KF_MAX_PREFIXES) return 0;
        c->prefixes[c->nprefixes].ptr = p;
        c->prefixes[c->nprefixes].len = (size_t)(line_end - p);
        c->nprefixes++;
        p = nl ? nl + 1 : end;
    }
    return 1;
}

/* A kept event of the second thread's share, copied out by the first thread. */
typedef struct {
    const uint8_t *ptr;
    size_t len;
    int64_t index;          /* among the second job's events */
    int kind;               /* see decide() */
} kf_span;

/* One thread's share of the work.  The first job writes its output as it goes; the
 * second (run on its own thread from a guessed element boundary in the middle of the
 * array) only reads the text and notes its kept events, so that the first may write over
 * the text it has read (in-place filtering) and never races with the second. */
typedef struct kf_job kf_job;
struct kf_job {
    kf_ctx c;
    int second;             /* 1: collect spans instead of writing */
    const uint8_t *start;   /* second job: the element it begins at */
    const uint8_t *stop;    /* first job: an element boundary the second job starts at */
    uint8_t *out;           /* first job: output (may be the input itself) */
    size_t len, cap, full_cap;
    kf_span *spans;         /* second job: kept events */
    size_t nspans, spans_cap;
    const uint8_t *tail;    /* second job: the text after the array's ']' */
    int64_t events, kept;
    int64_t chunk_events;   /* first job: kept events are counted per this many events... */
    int64_t *chunk_kept;    /* ...here (see kf_filter) */
    size_t chunk_slots;
    int stopped;            /* first job: reached `stop` exactly, the second job did the rest */
    int gave_up;            /* second job: too many kept events to note */
    kf_job *other;          /* first job: the second job */
    int other_running;      /* first job: the second job's thread is still to be joined */
#ifdef KF_THREADS
    pthread_t thread;
#endif
};

static void join_other(kf_job *j);

/* Append n bytes of the input (memmove: in-place output overlaps it).  Until the second
 * job is joined, the first one writes only below the offset where the second one began
 * reading; needing more means the guess was wrong, so it waits for it first (its work
 * is then thrown away). */
static inline int put(kf_job *j, const uint8_t *src, size_t n) {
    if (j->cap - j->len < n) {
        if (j->other_running) {
            join_other(j);
            j->cap = j->full_cap;
        }
        if (j->cap - j->len < n) return 0;
    }
    memmove(j->out + j->len, src, n);
    j->len += n;
    return 1;
}

/* Keep one event, the index-th of the job's share, of this kind (see decide()): write it and
 * count it (first job) or note it (second job). */
static int keep_event(kf_job *j, const uint8_t *start, size_t n, int64_t index, int kind) {
    if (j->second) {
        if (j->nspans == j->spans_cap) {
            size_t cap = j->spans_cap ? 2 * j->spans_cap : 4096;
            kf_span *grown = cap <= KF_MAX_SPANS ? realloc(j->spans, cap * sizeof *grown) : NULL;
            if (grown == NULL) {
                j->gave_up = 1;
                return failed(&j->c, KF_ERR_OUTPUT, start);
            }
            j->spans = grown;
            j->spans_cap = cap;
        }
        j->spans[j->nspans].ptr = start;
        j->spans[j->nspans].len = n;
        j->spans[j->nspans].index = index;
        j->spans[j->nspans].kind = kind;
        j->nspans++;
    } else {
        size_t slot = (size_t)(index / j->chunk_events);
        if (slot >= j->chunk_slots || (j->kept && !put(j, (const uint8_t *)",", 1)) || !put(j, start, n))
            return failed(&j->c, KF_ERR_OUTPUT, start);
        j->chunk_kept[slot * (size_t)(j->c.ncats + 1) + (size_t)kind]++;
    }
    j->kept++;
    return 1;
}

/* Root members after the traceEvents array, from p (just after its ']'), to the end of the
 * text, which is written out verbatim (first job) or noted (second job).  Returns 0 on
 * error. */
static int finish_root(kf_job *j, const uint8_t *p) {
    kf_ctx *c = &j->c;
    const uint8_t *end = c->end, *tail = p;
    int escaped;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end) return failed(c, KF_ERR_TRUNCATED, p);
        if (*p == '}') break;
        if (*p != ',') return failed(c, KF_ERR_SYNTAX, p);
        p = skip_ws(p + 1, end);
        if (p >= end) return failed(c, KF_ERR_TRUNCATED, p);
        if (*p != '"') return failed(c, KF_ERR_SYNTAX, p);
        const uint8_t *key = p + 1;
        escaped = 0;
        if (!(p = scan_string(c, key, &escaped))) return 0;
        if (escaped) return failed(c, KF_ERR_ROOT, key);  /* it could spell traceEvents */
        if ((size_t)(p - 1 - key) == 11 && memcmp(key, "traceEvents", 11) == 0) return failed(c, KF_ERR_EVENTS, key);
        p = skip_ws(p, end);
        if (p >= end) return failed(c, KF_ERR_TRUNCATED, p);
        if (*p != ':') return failed(c, KF_ERR_SYNTAX, p);
        p = skip_ws(p + 1, end);
        if (!(p = skip_value(c, p, 1))) return 0;
    }
    p = skip_ws(p + 1, end);
    if (p != end) return failed(c, KF_ERR_SYNTAX, p);  /* something after the root object */
    if (j->second) {
        j->tail = tail;
        return 1;
    }
    if (!put(j, (const uint8_t *)"]", 1) || !put(j, tail, (size_t)(end - tail))) return failed(c, KF_ERR_OUTPUT, tail);
    return 1;
}

/* Elements of traceEvents from p: the first one when `first` (p just after '['), else an
 * element that follows a ','; then ']' and the rest of the root.  Returns 0 on error;
 * stops early (j->stopped) when an element starts at j->stop. */
static int filter_events(kf_job *j, const uint8_t *p, int first) {
    kf_ctx *c = &j->c;
    const uint8_t *end = c->end;
    p = skip_ws(p, end);
    if (p >= end) return failed(c, KF_ERR_TRUNCATED, p);
    if (!(first && *p == ']')) {
        for (;;) {
            if (*p != '{') return failed(c, *p == ']' ? KF_ERR_SYNTAX : KF_ERR_EVENT, p);
            const uint8_t *start = p;
            int kind = KF_DROP;
            if (!(p = scan_event(c, p, &kind))) return 0;
            if (kind != KF_DROP && !keep_event(j, start, (size_t)(p - start), j->events, kind)) return 0;
            j->events++;
            p = skip_ws(p, end);
            if (p >= end) return failed(c, KF_ERR_TRUNCATED, p);
            if (*p == ']') break;
            if (*p != ',') return failed(c, KF_ERR_SYNTAX, p);
            p = skip_ws(p + 1, end);
            if (p >= end) return failed(c, KF_ERR_TRUNCATED, p);
            if (p == j->stop) {
                join_other(j);
                if (!j->other->gave_up) {
                    j->stopped = 1;
                    return 1;
                }
                j->stop = NULL;  /* the first job goes on alone */
                j->cap = j->full_cap;
            }
        }
    }
    return finish_root(j, p + 1);
}

#ifdef KF_THREADS
static void *second_job(void *arg) {
    kf_job *j = arg;
    filter_events(j, j->start, 0);
    return NULL;
}

static void join_other(kf_job *j) {
    if (j->other_running) {
        pthread_join(j->thread, NULL);
        j->other_running = 0;
    }
}

/* Where a second thread may start: the first '{' after `from` that follows a ',' (white
 * space aside), i.e. likely the start of an element of traceEvents.  Only a guess: the
 * first thread checks that it is (see filter_events), so NULL or a wrong guess costs time,
 * never correctness. */
static const uint8_t *guess_element(const uint8_t *from, const uint8_t *end) {
    const uint8_t *limit = end - from > (4 << 20) ? from + (4 << 20) : end;
    for (const uint8_t *p = from; p < limit; p++) {
        p = memchr(p, '{', (size_t)(limit - p));
        if (p == NULL) return NULL;
        const uint8_t *q = p;
        while (q > from && WS[q[-1]]) q--;
        if (q > from && q[-1] == ',') return p;
    }
    return NULL;
}
#else
static void join_other(kf_job *j) { (void)j; }
#endif

/* Texts below this are filtered by one thread (starting one costs ~50 us). */
#define KF_SPLIT_BYTES (2 << 20)

/* Filter the trace text in[0:in_len] into out[0:out_cap]; out_cap >= in_len always
 * suffices, and out may be in itself (the text is then overwritten, even on error).  With
 * threads > 1 a second thread scans the events after the middle of a big text.
 * chunk_kept[i * (ncats + 1) + k] receives the number of kept events of category k (the
 * k-th line of `cats`, ncats for an unknown one) among events [i * chunk_events,
 * (i + 1) * chunk_events) of the input: the importer hands events to its table builders
 * in chunks of the original's boundaries.  It holds chunk_slots rows; chunk_slots >=
 * in_len / (3 * chunk_events) + 1 always suffices (an element and its comma take 3 bytes
 * or more).  Returns KF_OK or an error code; *res holds the counts, the output length and
 * the error's byte offset. */
KF_API int kf_filter(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap,
                     const uint8_t *cats, size_t cats_len, const uint8_t *by_name, size_t by_name_len,
                     const uint8_t *prefixes, size_t prefixes_len, int64_t chunk_events, int64_t *chunk_kept,
                     size_t chunk_slots, int threads, kf_result *res) {
    kf_job a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(res, 0, sizeof *res);
    res->error_offset = -1;
    kf_ctx *c = &a.c;
    if (!load_rules(c, cats, cats_len, by_name, by_name_len, prefixes, prefixes_len) || chunk_events < 1)
        return KF_ERR_ARGS;
    memset(chunk_kept, 0, chunk_slots * (size_t)(c->ncats + 1) * sizeof *chunk_kept);
    a.chunk_events = chunk_events;
    a.chunk_kept = chunk_kept;
    a.chunk_slots = chunk_slots;
    c->begin = in;
    c->end = in + in_len;
    a.out = out;
    a.cap = a.full_cap = out_cap;
    const uint8_t *p = skip_ws(in, c->end), *end = c->end;
    /* The root object up to the traceEvents array, copied once the array is found. */
    if (p >= end) {
        fail(c, KF_ERR_TRUNCATED, p);
        goto done;
    }
    if (*p != '{') {
        fail(c, KF_ERR_ROOT, p);
        goto done;
    }
    p = skip_ws(p + 1, end);
    for (;;) {
        if (p >= end) {
            fail(c, KF_ERR_TRUNCATED, p);
            goto done;
        }
        if (*p == '}') {
            fail(c, KF_ERR_NO_EVENTS, p);
            goto done;
        }
        if (*p != '"') {
            fail(c, KF_ERR_SYNTAX, p);
            goto done;
        }
        const uint8_t *key = p + 1;
        int escaped = 0;
        if (!(p = scan_string(c, key, &escaped))) goto done;
        if (escaped) {  /* it could spell traceEvents: the decoders would see it */
            fail(c, KF_ERR_ROOT, key);
            goto done;
        }
        int is_events = (size_t)(p - 1 - key) == 11 && memcmp(key, "traceEvents", 11) == 0;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') {
            fail(c, p >= end ? KF_ERR_TRUNCATED : KF_ERR_SYNTAX, p);
            goto done;
        }
        p = skip_ws(p + 1, end);
        if (p >= end) {
            fail(c, KF_ERR_TRUNCATED, p);
            goto done;
        }
        if (is_events) break;
        if (!(p = skip_value(c, p, 1))) goto done;
        p = skip_ws(p, end);
        if (p >= end) {
            fail(c, KF_ERR_TRUNCATED, p);
            goto done;
        }
        if (*p == ',') p = skip_ws(p + 1, end);
        else if (*p != '}') {
            fail(c, KF_ERR_SYNTAX, p);
            goto done;
        }
    }
    if (*p != '[') {
        fail(c, KF_ERR_EVENTS, p);
        goto done;
    }
    if (!put(&a, in, (size_t)(p + 1 - in))) {  /* the root up to and with '[' */
        fail(c, KF_ERR_OUTPUT, p);
        goto done;
    }
    p++;
#ifdef KF_THREADS
    if (threads > 1 && (size_t)(end - p) >= KF_SPLIT_BYTES) {
        const uint8_t *split = guess_element(p + (end - p) / 2, end);
        if (split != NULL) {
            b.c = a.c;  /* the rules */
            b.second = 1;
            b.start = split;
            if (pthread_create(&a.thread, NULL, second_job, &b) == 0) {
                a.stop = split;
                /* see put(); never more than the caller's buffer */
                a.cap = (size_t)(split - in) < out_cap ? (size_t)(split - in) : out_cap;
                a.other = &b;
                a.other_running = 1;
            }
        }
    }
#else
    (void)threads;
#endif
    filter_events(&a, p, 1);
    join_other(&a);
    a.cap = a.full_cap;
    if (a.stopped && !c->err) {
        /* The first job ended where the second began: copy out the second's events. */
        int64_t first = a.events;
        res->split = 1;
        a.events += b.events;
        if (b.c.err) {
            c->err = b.c.err;
            c->err_at = b.c.err_at;
        } else {
            for (size_t i = 0; i < b.nspans; i++)
                if (!keep_event(&a, b.spans[i].ptr, b.spans[i].len, first + b.spans[i].index, b.spans[i].kind)) break;
            if (!c->err && (!put(&a, (const uint8_t *)"]", 1) || !put(&a, b.tail, (size_t)(end - b.tail))))
                fail(c, KF_ERR_OUTPUT, b.tail);
        }
    }
    free(b.spans);
done:
    res->events = a.events;
    res->kept = a.kept;
    res->out_len = (int64_t)a.len;
    if (c->err) res->error_offset = (int64_t)(c->err_at - in);
    return c->err;
}
