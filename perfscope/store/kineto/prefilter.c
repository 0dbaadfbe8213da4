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
 * kf_stream_start() and the functions after it filter a text while it is still being
 * written (inflated) by another thread: see the section "Streamed input".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_bytes.h"
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if (defined(__unix__) || defined(__APPLE__)) && !defined(KF_NO_THREADS)
#include <pthread.h>
#define KF_THREADS 1
#endif

#define KF_API __attribute__((visibility("default")))

/* Status codes (kept in sync with prefilter.py's ERRORS). */
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
    KF_ERR_INPUT = 13,       /* a streamed text did not arrive whole (see kf_stream_start) */
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

/* The tally of dropped events whose category is text the rules do not name (complete or
 * counter events: other phases are dropped whatever their category): the first
 * KF_TALLY_CATS distinct names of at most KF_TALLY_NAME bytes, the rest in `other`. */
#define KF_TALLY_CATS 16
#define KF_TALLY_NAME 48

typedef struct {
    int64_t n;                                  /* names noted */
    int64_t other;                              /* events of further or longer names */
    int64_t count[KF_TALLY_CATS];
    int64_t len[KF_TALLY_CATS];
    uint8_t name[KF_TALLY_CATS][KF_TALLY_NAME];
} kf_tally;

typedef struct {
    int64_t events;       /* elements of traceEvents */
    int64_t kept;         /* elements written */
    int64_t out_len;      /* bytes written */
    int64_t error_offset; /* byte offset of the error in the input (-1 when none) */
    int64_t split;        /* 1 when a second thread filtered part of the events */
    kf_tally dropped;     /* dropped events of categories the rules do not name */
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
    int partial;          /* more text may follow `end` (a stream): see want_more() */
    kf_cat cats[KF_MAX_CATS];
    int ncats;
    struct { const uint8_t *ptr; size_t len; } prefixes[KF_MAX_PREFIXES];
    int nprefixes;
    kf_tally dropped;     /* this job's (see kf_tally) */
} kf_ctx;

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
                if (!hex4(p + 2, end, &u)) return fail(c, KF_ERR_SYNTAX, p);
                if (u >= 0xDC00 && u <= 0xDFFF) return fail(c, KF_ERR_UTF8, p);
                if (u >= 0xD800 && u <= 0xDBFF) {
                    /* a high surrogate must be followed by the escape of a low one */
                    const uint8_t *q = p + 6;
                    if ((q < end && q[0] != '\\') || (end - q > 1 && q[1] != 'u')) return fail(c, KF_ERR_UTF8, p);
                    if (end - q < 6) return fail(c, KF_ERR_TRUNCATED, p);
                    if (!hex4(q + 2, end, &u2)) return fail(c, KF_ERR_SYNTAX, q);
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
        /* (a sequence cut short by the end of a partial text may be whole once more comes) */
        if (!n) return fail(c, c->partial && end - p < 4 ? KF_ERR_TRUNCATED : KF_ERR_UTF8, p);
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
    /* A partial text may go on with more digits, or a fraction that makes it no integer. */
    if (c->partial && p >= end) return fail(c, KF_ERR_TRUNCATED, p);
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

/* Count n events of the category name[0:len] in t. */
static void tally_add(kf_tally *t, const uint8_t *name, size_t len, int64_t n) {
    for (int64_t i = 0; i < t->n; i++)
        if ((size_t)t->len[i] == len && memcmp(t->name[i], name, len) == 0) {
            t->count[i] += n;
            return;
        }
    if (t->n == KF_TALLY_CATS || len > KF_TALLY_NAME) {
        t->other += n;
        return;
    }
    memcpy(t->name[t->n], name, len);
    t->len[t->n] = (int64_t)len;
    t->count[t->n++] = n;
}

/* Add the tally `from` (a second job's) to `to`. */
static void tally_merge(kf_tally *to, const kf_tally *from) {
    for (int64_t i = 0; i < from->n; i++)
        tally_add(to, from->name[i], (size_t)from->len[i], from->count[i]);
    to->other += from->other;
}

/* KF_DROP to drop the event, else keep it: the index of its category in the rules, or
 * ncats when the category is not known (see the module comment of prefilter.py). */
static int decide(kf_ctx *c, const kf_field *ph, const kf_field *cat, const kf_field *name, int odd_key) {
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
    if (hit < 0) {  /* a category no table reads */
        tally_add(&c->dropped, cat->ptr, cat->len, 1);
        return KF_DROP;
    }
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
    const int *abort;       /* second job: stop (giving up) once this is set (atomic), or NULL */
#ifdef KF_THREADS
    pthread_t thread;
    struct kf_stream *stream;  /* first job of a stream: its second job runs on the producer's thread */
#endif
};

static void join_other(kf_job *j);
static void abort_other(kf_job *j);

/* Append n bytes of the input (memmove: in-place output overlaps it).  Until the second
 * job is joined, the first one writes only below the offset where the second one began
 * reading; needing more means the guess was wrong, so it waits for it first (its work
 * is then thrown away). */
static inline int put(kf_job *j, const uint8_t *src, size_t n) {
    if (j->cap - j->len < n) {
        if (j->other_running) {
            abort_other(j);
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
            if (j->abort != NULL && __atomic_load_n(j->abort, __ATOMIC_RELAXED)) {
                j->gave_up = 1;  /* the first job does not need this share any more */
                return 0;
            }
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

struct kf_stream;
static void stream_wait_second(struct kf_stream *s);
static void stream_abort_second(struct kf_stream *s);

/* The second job's work will not be used: tell it to stop (a thread of kf_filter's runs
 * on, its share being half the text at most). */
static void abort_other(kf_job *j) {
    if (j->other_running && j->stream != NULL) stream_abort_second(j->stream);
}

static void join_other(kf_job *j) {
    if (j->other_running) {
        if (j->stream != NULL) stream_wait_second(j->stream);
        else pthread_join(j->thread, NULL);
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
static void abort_other(kf_job *j) { (void)j; }
#endif

/* The root object's '{' (white space before it skipped): returns the byte after it (NULL
 * on error). */
static const uint8_t *root_open(kf_ctx *c, const uint8_t *p) {
    p = skip_ws(p, c->end);
    if (p >= c->end) return fail(c, KF_ERR_TRUNCATED, p);
    if (*p != '{') return fail(c, KF_ERR_ROOT, p);
    return p + 1;
}

/* One member of the root object before traceEvents, from q (just after the '{' or a
 * ','): returns where the next one starts, or for traceEvents the byte after its '[' (and
 * sets *events).  NULL on error, a root without traceEvents included. */
static const uint8_t *root_member(kf_ctx *c, const uint8_t *q, int *events) {
    const uint8_t *end = c->end, *p = skip_ws(q, end);
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    if (*p == '}') return fail(c, KF_ERR_NO_EVENTS, p);
    if (*p != '"') return fail(c, KF_ERR_SYNTAX, p);
    const uint8_t *key = p + 1;
    int escaped = 0;
    if (!(p = scan_string(c, key, &escaped))) return NULL;
    if (escaped) return fail(c, KF_ERR_ROOT, key);  /* it could spell traceEvents: the decoders would see it */
    int is_events = (size_t)(p - 1 - key) == 11 && memcmp(key, "traceEvents", 11) == 0;
    p = skip_ws(p, end);
    if (p >= end || *p != ':') return fail(c, p >= end ? KF_ERR_TRUNCATED : KF_ERR_SYNTAX, p);
    p = skip_ws(p + 1, end);
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    if (is_events) {
        if (*p != '[') return fail(c, KF_ERR_EVENTS, p);
        *events = 1;
        return p + 1;
    }
    if (!(p = skip_value(c, p, 1))) return NULL;
    p = skip_ws(p, end);
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    if (*p == ',') return p + 1;
    if (*p != '}') return fail(c, KF_ERR_SYNTAX, p);
    return p;  /* the next call finds the root's end, and no traceEvents */
}

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
    const uint8_t *p = root_open(c, in), *end = c->end;
    /* The root object up to the traceEvents array, copied once the array is found. */
    int events = 0;
    while (p != NULL && !events)
        p = root_member(c, p, &events);
    if (p == NULL) goto done;
    if (!put(&a, in, (size_t)(p - in))) {  /* the root up to and with '[' */
        fail(c, KF_ERR_OUTPUT, p - 1);
        goto done;
    }
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
#ifdef KF_THREADS  /* (a.stopped is only ever set with a second job) */
    if (a.stopped && !c->err) {
        /* The first job ended where the second began: copy out the second's events. */
        int64_t first = a.events;
        res->split = 1;
        a.events += b.events;
        tally_merge(&c->dropped, &b.c.dropped);
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
#else
    (void)end;
#endif
    free(b.spans);
done:
    res->events = a.events;
    res->kept = a.kept;
    res->out_len = (int64_t)a.len;
    res->dropped = c->dropped;
    if (c->err) res->error_offset = (int64_t)(c->err_at - in);
    return c->err;
}

/* ---------------------------------------------------------------------------------------
 * Streamed input: filtering while the text is still being inflated.
 *
 * kf_stream_start() starts a thread that filters the text as it arrives in the caller's
 * buffer; the caller (the producer: another thread, inflating) appends pieces with
 * kf_stream_write() and ends with kf_stream_close(), then kf_stream_finish() has it help
 * and waits for the result.
 *
 * The filter reads only what has been published; a scan that runs into that frontier is
 * retried from the start of its unit (a root member, one event with the separator before
 * it) once more text is there, so that every verdict is the one the whole text gives (see
 * `partial`: a cut is only ever "truncated" while more may come).  It writes the kept
 * text over the text it has read, as kf_filter's in-place output.
 *
 * The producer inflates faster than the filter reads: once the text is whole, it offers
 * to filter the second part of what the filter has not reached (a second job, as
 * kf_filter's second thread: see stream_help()).  When the filter is through, the column
 * extractor (kc_sink_* in columns.c) reads the kept events, the first half of them
 * on the producer's thread and the second on the filter's (see extract_rows()).
 * ------------------------------------------------------------------------------------- */
typedef struct kc_sink kc_sink;
kc_sink *kc_sink_open(const uint8_t *cats, size_t cats_len, int64_t *cols, int64_t capacity, int64_t field_stride,
                      int64_t row_stride, int32_t *offsets, uint8_t *blob, size_t blob_cap, void *res);
int kc_sink_add(kc_sink *s, const uint8_t *text, size_t start, size_t n);
int kc_sink_close(kc_sink *s, int64_t open, int64_t close);
kc_sink *kc_sink_fork(kc_sink *s, int64_t row0, size_t blob0);
int kc_sink_join(kc_sink *s, kc_sink *t);

#ifdef KF_THREADS
enum { KF_OPEN = 0, KF_DONE = 1, KF_FAILED = 2 };
enum { KF_NO_ANSWER = 0, KF_ACCEPTED = 1, KF_REFUSED = 2 };

/* Where a kept event went in the output. */
typedef struct {
    int64_t at, len;
} kf_row;

struct kf_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *buf;           /* the whole text's buffer: the producer appends, the filter reads */
    size_t cap;
    size_t avail;           /* bytes published (under mu) */
    int state;              /* KF_OPEN, then KF_DONE (avail is the whole text) or KF_FAILED */
    int stopped;            /* the filter has finished: writes are refused, no split is answered (under mu) */
    size_t step;            /* test hook: the filter sees at most this many more bytes at a time */
    size_t help_bytes;      /* see stream_help() (0: no help) */
    int64_t share_rows;     /* see extract_all() (0: the filter's thread extracts every row) */
    kf_ctx rules;           /* the rules, for the second job */
    kf_job job;             /* the filter's */
    int64_t open, close;    /* offsets of traceEvents' '[' and ']' in the output */
    kf_result *res;
    int code;
    pthread_t thread;
    /* The producer's help once the text is whole: it proposes an element where it would
     * filter the rest as a second job; the filter accepts (it is still before it) or
     * refuses at its next element. */
    size_t progress;        /* offset of the filter's next element (atomic) */
    size_t proposed;        /* 1: the producer offers to help, 0: no offer (atomic) */
    int answer;             /* KF_NO_ANSWER, KF_ACCEPTED or KF_REFUSED (under mu) */
    size_t split_at;        /* accepted: the offset of the element the second job starts at (under mu) */
    int second_done;        /* the second job has finished (under mu) */
    int abort_second;       /* the filter does not need the second job any more (atomic) */
    kf_job second;
    /* The extractor: rows are the kept events, in order. */
    kc_sink *sink;          /* NULL: none asked for, or it stopped (sink_code says why) */
    int sink_code;
    kf_row *rows;           /* the kept events, room for `row_cap` (NULL: no room, no rows) */
    int64_t row_cap;
    int shared;             /* the producer's share of rows is set (under mu) */
    int64_t shared_rows;    /* rows [0, shared_rows) are the producer's to extract */
    int shared_done;        /* the producer has extracted them (under mu) */
    kc_sink *fork;          /* the filter's thread's sink for the other rows */
};
typedef struct kf_stream kf_stream;

/* Wait until more than `have` bytes are published, or the text is complete; returns the
 * bytes the filter may read (never fewer than `have`) and sets *final when they are the
 * whole text, or returns (size_t)-1 when the producer gave up. */
static size_t stream_wait(kf_stream *s, size_t have, int *final) {
    pthread_mutex_lock(&s->mu);
    while (s->avail <= have && s->state == KF_OPEN)
        pthread_cond_wait(&s->cv, &s->mu);
    size_t avail = s->avail;
    int state = s->state;
    pthread_mutex_unlock(&s->mu);
    if (state == KF_FAILED) return (size_t)-1;
    *final = state == KF_DONE;
    if (s->step && avail - have > s->step) {
        avail = have + s->step;
        *final = 0;
    }
    return avail;
}

/* After a unit failed with c->err: 1 when it is to be retried (it ran into the end of a
 * partial text, and more has now been published), else 0 (a real error, which stays; or
 * the producer gave up: KF_ERR_INPUT). */
static int want_more(kf_stream *s, kf_ctx *c) {
    if (c->err != KF_ERR_TRUNCATED || !c->partial) return 0;
    int final = 0;
    size_t now = stream_wait(s, (size_t)(c->end - s->buf), &final);
    if (now == (size_t)-1) {
        c->err = KF_ERR_INPUT;
        c->err_at = c->end;
        return 0;
    }
    c->end = s->buf + now;
    c->partial = !final;
    c->err = 0;
    c->err_at = NULL;
    return 1;
}

/* The filter: the second job (on the producer's thread) has finished. */
static void stream_wait_second(kf_stream *s) {
    pthread_mutex_lock(&s->mu);
    while (!s->second_done)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void stream_abort_second(kf_stream *s) {
    __atomic_store_n(&s->abort_second, 1, __ATOMIC_RELAXED);
}

/* Where the filter has the producer start, as a fraction of the unfiltered rest: the two
 * filter at about the same speed (the filter's copy of the producer's kept events is
 * cheap, and measured to be made up for by the producer's start-up). */
#define KF_HELP_AT 0.5

/* The filter, at element p (not the first): answer the producer's offer to help by
 * choosing where it starts (see stream_help()): an element boundary guessed in the middle
 * of the unfiltered rest.  Only this thread reads the text here, so the guess never reads
 * a byte while it is being written. */
static void answer_split(kf_stream *s, kf_job *j, const uint8_t *p) {
    /* Under the lock the producer took to offer: the whole text it wrote before is seen
     * here (it only offers once the text is complete: see kf_stream_finish). */
    pthread_mutex_lock(&s->mu);
    const uint8_t *end = s->buf + s->cap;
    const uint8_t *at = end - p >= 2 ? guess_element(p + 1 + (size_t)((double)(end - p - 1) * KF_HELP_AT), end) : NULL;
    int yes = at != NULL;  /* at > p: nothing written at or after it yet (the output is behind p) */
    if (yes) {
        j->stop = at;
        j->cap = (size_t)(at - s->buf);  /* see put() */
        j->other = &s->second;
        j->other_running = 1;
    }
    s->split_at = yes ? (size_t)(at - s->buf) : 0;
    s->answer = yes ? KF_ACCEPTED : KF_REFUSED;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    __atomic_store_n(&s->proposed, 0, __ATOMIC_RELAXED);  /* answered */
}

/* The next element of traceEvents from q (just after the '[' when `first`, else just after
 * the previous element): returns its '{', or the array's ']'; NULL on error. */
static const uint8_t *next_element(kf_ctx *c, const uint8_t *q, int first) {
    const uint8_t *end = c->end, *p = skip_ws(q, end);
    if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
    if (*p == ']') return p;
    if (!first) {
        if (*p != ',') return fail(c, KF_ERR_SYNTAX, p);
        p = skip_ws(p + 1, end);
        if (p >= end) return fail(c, KF_ERR_TRUNCATED, p);
        if (*p == ']') return fail(c, KF_ERR_SYNTAX, p);
    }
    if (*p != '{') return fail(c, KF_ERR_EVENT, p);
    return p;
}

/* Keep the event start[0:n], of this kind, as the filter's next kept event: write it and
 * note where it went, for the extractor. */
static int stream_keep(kf_stream *s, const uint8_t *start, size_t n, int64_t index, int kind) {
    kf_job *j = &s->job;
    int64_t row = j->kept;
    size_t at = j->len + (row ? 1 : 0);
    if (!keep_event(j, start, n, index, kind)) return 0;
    if (row < s->row_cap) {
        s->rows[row].at = (int64_t)at;
        s->rows[row].len = (int64_t)n;
    }
    return 1;
}

/* Extract rows [from, to) into sink t (the rows of s are complete: see extract_all).
 * Returns 0 once the sink has stopped. */
static int extract_rows(kf_stream *s, kc_sink *t, int64_t from, int64_t to) {
    for (int64_t r = from; r < to; r++)
        if (!kc_sink_add(t, s->buf, (size_t)s->rows[r].at, (size_t)s->rows[r].len)) return 0;
    return 1;
}

/* The filter's thread: hand rows [0, m) to the producer's thread (waiting in
 * kf_stream_finish), whose extractor reads them while this one reads the rest into a fork
 * of the sink (0: none; the producer then only waits).  Rows [0, m) must be final, and m
 * no more than the rows noted so far; next_at is the output offset of row m. */
static void share_rows(kf_stream *s, int64_t m, size_t next_at) {
    if (m > 0 && s->sink != NULL && (s->fork = kc_sink_fork(s->sink, m, next_at)) == NULL) m = 0;
    pthread_mutex_lock(&s->mu);
    s->shared_rows = s->fork != NULL ? m : 0;
    s->shared = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The filter's thread, once the text is filtered (or it failed): extract the rows not
 * handed to the producer (all of them when none were), and join the producer's.  The sink
 * is closed either way (s->sink_code). */
static void extract_all(kf_stream *s) {
    int64_t n = s->job.kept;
    /* Every row noted, and the text filtered: else the caller does without the rows. */
    int ok = s->sink != NULL && !s->job.c.err && n <= s->row_cap;
    if (!s->shared) {
        /* No rows handed over yet (see stream_main): the first half, when worth it. */
        int64_t half = ok && s->share_rows && n >= s->share_rows ? n / 2 : 0;
        share_rows(s, half, half ? (size_t)s->rows[half].at : 0);
    }
    if (ok) extract_rows(s, s->fork != NULL ? s->fork : s->sink, s->fork != NULL ? s->shared_rows : 0, n);
    if (s->fork != NULL) {
        /* (the producer's thread writes to the sink until it is done: wait, even on error) */
        pthread_mutex_lock(&s->mu);
        while (!s->shared_done)
            pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        if (ok) kc_sink_join(s->sink, s->fork);
        else kc_sink_close(s->fork, -1, -1);
        s->fork = NULL;
    }
    if (s->sink != NULL) {
        s->sink_code = kc_sink_close(s->sink, ok ? s->open : -1, ok ? s->close : -1);
        if (!ok && s->sink_code == 0) s->sink_code = 2;  /* (kc_extract's "rows") */
        s->sink = NULL;
    }
}

/* The producer's thread, in kf_stream_finish: extract the rows the filter hands it (see
 * share_rows). */
static void extract_share(kf_stream *s) {
    pthread_mutex_lock(&s->mu);
    while (!s->shared)
        pthread_cond_wait(&s->cv, &s->mu);
    int64_t m = s->shared_rows;
    pthread_mutex_unlock(&s->mu);
    if (m == 0) return;
    extract_rows(s, s->sink, 0, m);
    pthread_mutex_lock(&s->mu);
    s->shared_done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The filter's thread: the text from the stream, in units that are retried until they
 * are whole (see want_more()). */
static void *stream_main(void *arg) {
    kf_stream *s = arg;
    kf_job *j = &s->job;
    kf_ctx *c = &j->c;
    const uint8_t *in = s->buf, *p, *q;
    int final = 0;
    size_t now = stream_wait(s, 0, &final);
    if (now == (size_t)-1) {
        fail(c, KF_ERR_INPUT, in);
        goto done;
    }
    c->begin = in;
    c->end = in + now;
    c->partial = !final;
    while (!(q = root_open(c, in)))
        if (!want_more(s, c)) goto done;
    for (int events = 0; !events; q = p)
        while (!(p = root_member(c, q, &events)))
            if (!want_more(s, c)) goto done;
    if (!put(j, in, (size_t)(p - in))) {  /* the root up to and with '[' */
        fail(c, KF_ERR_OUTPUT, p - 1);
        goto done;
    }
    s->open = (int64_t)j->len - 1;
    for (int first = 1;; first = 0) {
        while (!(p = next_element(c, q, first)))
            if (!want_more(s, c)) goto done;
        if (*p == ']') break;
        if (!first) {
            if (__atomic_load_n(&s->proposed, __ATOMIC_RELAXED)) answer_split(s, j, p);
            if (p == j->stop) {
                /* The second job filtered from here on: its events are copied below. */
                join_other(j);
                j->cap = j->full_cap;
                if (!s->second.gave_up) {
                    j->stopped = 1;
                    break;
                }
                j->stop = NULL;  /* it gave up: on alone */
            }
        }
        const uint8_t *start = p;
        int kind = KF_DROP;
        while (!(p = scan_event(c, start, &kind)))
            if (!want_more(s, c)) goto done;
        if (kind != KF_DROP && !stream_keep(s, start, (size_t)(p - start), j->events, kind)) goto done;
        j->events++;
        q = p;
        __atomic_store_n(&s->progress, (size_t)(q - in), __ATOMIC_RELAXED);
    }
    if (j->stopped) {
        kf_job *b = &s->second;
        int64_t first = j->events;
        s->res->split = 1;
        j->events += b->events;
        tally_merge(&c->dropped, &b->c.dropped);
        if (b->c.err) {
            c->err = b->c.err;
            c->err_at = b->c.err_at;
            goto done;
        }
        /* Our rows are final, and the producer is free: it extracts about half of all of
         * them (ours only) while this thread copies the second job's events. */
        int64_t n = j->kept + (int64_t)b->nspans, m = n / 2 < j->kept ? n / 2 : j->kept;
        if (s->sink != NULL && s->share_rows && n >= s->share_rows && n <= s->row_cap)
            share_rows(s, m, m < j->kept ? (size_t)s->rows[m].at : j->len + (j->kept ? 1 : 0));
        for (size_t i = 0; i < b->nspans; i++)
            if (!stream_keep(s, b->spans[i].ptr, b->spans[i].len, first + b->spans[i].index, b->spans[i].kind))
                goto done;
        s->close = (int64_t)j->len;
        if (!put(j, (const uint8_t *)"]", 1) || !put(j, b->tail, (size_t)(b->c.end - b->tail)))
            fail(c, KF_ERR_OUTPUT, b->tail);
        goto done;
    }
    /* The members after the array are read once the whole text is there. */
    while (c->partial) {
        fail(c, KF_ERR_TRUNCATED, c->end);
        if (!want_more(s, c)) goto done;
    }
    s->close = (int64_t)j->len;
    finish_root(j, p + 1);
done:
    if (j->other_running) {
        /* An error before the second job's share: it is not needed. */
        abort_other(j);
        join_other(j);
    }
    pthread_mutex_lock(&s->mu);
    s->stopped = 1;
    pthread_cond_broadcast(&s->cv);  /* (a producer waiting for an answer) */
    pthread_mutex_unlock(&s->mu);
    extract_all(s);
    s->res->events = j->events;
    s->res->kept = j->kept;
    s->res->out_len = (int64_t)j->len;
    s->res->dropped = c->dropped;
    if (c->err) s->res->error_offset = (int64_t)(c->err_at - in);
    s->code = c->err;
    return NULL;
}


/* The producer's thread, once the whole text is written: filter the second part of the
 * unfiltered rest as a second job, if the filter takes the offer (see answer_split()).
 * The producer reads no byte of the text before the filter has answered: the filter
 * writes kept events over the text it has read, so only the filter may look for the
 * element to split at (it reads its own writes); once it has accepted, it writes below
 * the split only, and the second job reads from the split on. */
static void stream_help(kf_stream *s) {
    size_t from = __atomic_load_n(&s->progress, __ATOMIC_RELAXED);
    if (!s->help_bytes || s->cap - from < s->help_bytes) return;
    kf_job *b = &s->second;
    b->c = s->rules;
    b->c.begin = s->buf;
    b->c.end = s->buf + s->cap;
    b->second = 1;
    b->abort = &s->abort_second;
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->proposed, 1, __ATOMIC_RELEASE);
    while (s->answer == KF_NO_ANSWER && !s->stopped)
        pthread_cond_wait(&s->cv, &s->mu);
    int accepted = s->answer == KF_ACCEPTED;
    const uint8_t *split = s->buf + s->split_at;
    pthread_mutex_unlock(&s->mu);
    if (!accepted) return;
    b->start = split;
    filter_events(b, split, 0);
    pthread_mutex_lock(&s->mu);
    s->second_done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}
#endif

/* Start filtering a text that arrives in buf[0:cap] (see the section comment): the other
 * arguments are kf_filter's (the output is buf itself), and, when `cols` is not NULL, the
 * column extractor's (see kc_sink_open; its result goes to *columns).  `step` > 0 makes
 * the filter see at most that many more bytes at a time (for tests: every cut is tried).
 * Returns the stream, or NULL when it cannot start (malformed rules, no memory or thread):
 * the caller then filters the whole text.  Every stream must be closed and finished. */
KF_API void *kf_stream_start(uint8_t *buf, size_t cap, const uint8_t *cats, size_t cats_len, const uint8_t *by_name,
                             size_t by_name_len, const uint8_t *prefixes, size_t prefixes_len, int64_t chunk_events,
                             int64_t *chunk_kept, size_t chunk_slots, size_t step, size_t help_bytes,
                             int64_t share_rows, kf_result *res,
                             const uint8_t *col_cats, size_t col_cats_len, int64_t *cols, int64_t capacity,
                             int64_t field_stride, int64_t row_stride, int32_t *offsets, uint8_t *blob,
                             size_t blob_cap, void *columns) {
#ifdef KF_THREADS
    memset(res, 0, sizeof *res);
    res->error_offset = -1;
    kf_stream *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    kf_job *j = &s->job;
    j->stream = s;
    if (!load_rules(&j->c, cats, cats_len, by_name, by_name_len, prefixes, prefixes_len) || chunk_events < 1) {
        free(s);
        return NULL;
    }
    memset(chunk_kept, 0, chunk_slots * (size_t)(j->c.ncats + 1) * sizeof *chunk_kept);
    j->chunk_events = chunk_events;
    j->chunk_kept = chunk_kept;
    j->chunk_slots = chunk_slots;
    j->out = buf;
    j->cap = j->full_cap = cap;
    s->buf = buf;
    s->cap = cap;
    s->step = step;
    s->help_bytes = help_bytes;
    s->share_rows = share_rows;
    s->rules = j->c;
    s->res = res;
    s->open = s->close = -1;
    s->sink_code = -1;
    if (cols != NULL) {
        s->sink = kc_sink_open(col_cats, col_cats_len, cols, capacity, field_stride, row_stride, offsets, blob,
                               blob_cap, columns);
        /* (pages of it are only made resident as rows are noted) */
        if (s->sink != NULL && (size_t)capacity <= SIZE_MAX / sizeof *s->rows)
            s->rows = malloc((size_t)capacity * sizeof *s->rows);
        if (s->rows != NULL) {
            s->row_cap = capacity;
        } else if (s->sink != NULL) {
            kc_sink_close(s->sink, -1, -1);
            s->sink = NULL;
        }
        if (s->sink == NULL) s->sink_code = -2;
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) goto no_mutex;
    if (pthread_cond_init(&s->cv, NULL) != 0) goto no_cond;
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) goto no_thread;
    return s;
no_thread:
    pthread_cond_destroy(&s->cv);
no_cond:
    pthread_mutex_destroy(&s->mu);
no_mutex:
    if (s->sink != NULL) kc_sink_close(s->sink, -1, -1);
    free(s->rows);
    free(s);
    return NULL;
#else
    (void)buf; (void)cap; (void)cats; (void)cats_len; (void)by_name; (void)by_name_len; (void)prefixes;
    (void)prefixes_len; (void)chunk_events; (void)chunk_kept; (void)chunk_slots; (void)step; (void)help_bytes; (void)share_rows; (void)res;
    (void)col_cats; (void)col_cats_len; (void)cols; (void)capacity; (void)field_stride; (void)row_stride;
    (void)offsets; (void)blob; (void)blob_cap; (void)columns;
    return NULL;
#endif
}

/* Append src[0:n] to the stream's text.  Returns 0, 1 when the filter has already finished
 * (an error: the rest is not needed), or 2 when the text would not fit in the buffer (the
 * caller must then close the stream as failed). */
KF_API int kf_stream_write(void *stream, const uint8_t *src, size_t n) {
#ifdef KF_THREADS
    kf_stream *s = stream;
    pthread_mutex_lock(&s->mu);
    int stopped = s->stopped;
    size_t at = s->avail;  /* (only this thread changes it) */
    pthread_mutex_unlock(&s->mu);
    if (stopped) return 1;
    if (n > s->cap - at) return 2;
    /* Beyond what is published: the filter neither reads nor writes there. */
    memcpy(s->buf + at, src, n);
    pthread_mutex_lock(&s->mu);
    s->avail = at + n;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
#else
    (void)stream; (void)src; (void)n;
    return 2;
#endif
}

/* No more text: `complete` is 1 when the published text is the whole of it, 0 when the
 * producer gave up (the filter then stops with KF_ERR_INPUT, unless it already failed). */
KF_API void kf_stream_close(void *stream, int complete) {
#ifdef KF_THREADS
    kf_stream *s = stream;
    pthread_mutex_lock(&s->mu);
    if (s->state == KF_OPEN) s->state = complete ? KF_DONE : KF_FAILED;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
#else
    (void)stream; (void)complete;
#endif
}

/* Wait for the filter (the stream must be closed), free the stream and return the
 * filter's status (kf_filter's codes); *sink_code receives the extractor's (kc_extract's
 * codes; -1 when it was not asked for, -2 when it could not start). */
KF_API int kf_stream_finish(void *stream, int *sink_code) {
#ifdef KF_THREADS
    kf_stream *s = stream;
    pthread_mutex_lock(&s->mu);
    int help = s->state == KF_DONE;
    pthread_mutex_unlock(&s->mu);
    if (help) stream_help(s);
    extract_share(s);
    pthread_join(s->thread, NULL);
    int code = s->code;
    *sink_code = s->sink_code;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->second.spans);
    free(s->rows);
    free(s);
    return code;
#else
    (void)stream;
    *sink_code = -1;
    return KF_ERR_ARGS;
#endif
}
