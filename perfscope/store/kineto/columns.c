/* Column extractor of filtered Kineto trace JSON.
 *
 * kc_extract() reads a text the pre-filter (prefilter.c) wrote, i.e. strict JSON whose
 * "traceEvents" array holds only events some perfscope table may keep, and fills one row
 * of caller-allocated columns per event, in text order: the event's byte span, its
 * category (an index into the caller's list), pid, tid, ts and dur as exact int64
 * nanoseconds (parsed from the decimal microsecond text, no float in between), the args
 * the tables read as int64, and the name, JSON-unescaped into a caller-allocated blob
 * (names back to back, so that the blob and the offsets are an Arrow string array).
 *
 * It does not validate (the filter did), but it never reads outside the text, whatever
 * the text.  It does not guess either: anything it cannot turn into exactly what the
 * importer's msgspec decoders give (an escaped or repeated key, a value of another type,
 * a float or a text where an int is expected, a timestamp with an exponent or more than
 * three decimals, an integer beyond int64, perfscope's own "ps" args, a phase other than
 * "X") sets a bit of the row's "odd" mask, and the caller then decodes the whole text the
 * usual way.  Null counts as absent, as it does for the decoders.
 *
 * Speed: one pass, strings and white space skipped 16 bytes at a time (SSE2), no
 * allocation, no global state (ctypes releases the GIL around the call).  One thread: a
 * second one for the second half (as the filter has) gained nothing measurable in whole
 * imports, its rows' copy and page faults costing what it saved.  The streamed filter's
 * sink (kc_sink_*, at the end) is another matter: it knows where every kept event is, and
 * its two threads, both free once the text is filtered, take half of the rows each, in
 * place (only the second half's names move).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_bytes.h"
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define KC_API __attribute__((visibility("default")))

/* The columns, in the caller's int64 matrix of KC_NFIELDS rows of `capacity` values
 * (kc_layout() spells them, for the caller to check against its own list). */
enum {
    KC_START, KC_END, KC_CAT, KC_PID, KC_TID, KC_TS, KC_DUR,
    KC_CORRELATION, KC_DEVICE, KC_STREAM, KC_REGISTERS, KC_SHARED_MEMORY, KC_GRAPH_ID, KC_BYTES, KC_CBID,
    KC_GRID_X, KC_GRID_Y, KC_GRID_Z, KC_BLOCK_X, KC_BLOCK_Y, KC_BLOCK_Z, KC_EXTERNAL_ID,
    KC_PRESENT, KC_ODD,
    KC_NFIELDS
};

static const char LAYOUT[] =
    "start end cat pid tid ts dur correlation device stream registers shared_memory graph_id bytes cbid "
    "grid_x grid_y grid_z block_x block_y block_z external_id present odd";

/* Bits of a row's "odd" mask (kept in sync with native.py's ODD). */
enum {
    KC_ODD_KEY = 1 << 0,    /* an event key written with an escape (it may spell "cat") */
    KC_ODD_CAT = 1 << 1,    /* "cat" escaped, repeated, or neither text nor null */
    KC_ODD_PH = 1 << 2,     /* "ph" other than "X", escaped, repeated or absent */
    KC_ODD_NAME = 1 << 3,   /* "name" not text (null included), or repeated */
    KC_ODD_ID = 1 << 4,     /* pid or tid not an int64 integer (or null), or repeated */
    KC_ODD_TIME = 1 << 5,   /* ts or dur absent, or not a number of at most three decimals in int64 ns */
    KC_ODD_ARGS = 1 << 6,   /* args neither an object nor null, or repeated */
    KC_ODD_ARG = 1 << 7,    /* an args value read here of another type, or repeated */
    KC_ODD_ARG_KEY = 1 << 8,/* an args key written with an escape */
    KC_ODD_PS = 1 << 9,     /* args.ps: perfscope's own export */
};

/* The odd bits that matter for an event of no known category: only those that could
 * make it one. */
#define KC_ODD_UNKNOWN_CAT (KC_ODD_KEY | KC_ODD_CAT)

/* Status codes (kept in sync with native.py's ERRORS). */
enum {
    KC_OK = 0,
    KC_ERR_SHAPE = 1,     /* no root object with a "traceEvents" array of objects */
    KC_ERR_ROWS = 2,      /* more events than rows, or fewer */
    KC_ERR_BLOB = 3,      /* names longer than the blob, or than int32 offsets reach */
    KC_ERR_ARGS = 4,      /* malformed category list */
};

#define KC_MAX_CATS 64
#define KC_MAX_DEPTH 128

typedef struct {
    int64_t rows;          /* events read */
    int64_t open;          /* offset of the traceEvents array's '[' (-1 before it is found) */
    int64_t close;         /* offset of its ']' */
    int64_t odd_rows;      /* rows with an odd bit that matters */
    int64_t first_odd;     /* the first of them (-1 when none) */
    int64_t odd_bits;      /* the bits that matter, over all rows */
    int64_t error_offset;  /* where the text did not have the expected shape (-1) */
} kc_result;

typedef struct {
    const uint8_t *end;
    struct { const uint8_t *ptr; size_t len; } cats[KC_MAX_CATS];
    int ncats;
    int64_t *cols;         /* field f of row i at cols[f * field_stride + i * row_stride] */
    int64_t capacity;
    int64_t field_stride;  /* kc_extract: capacity and 1 (one column after another); the */
    int64_t row_stride;    /* sink: 1 and KC_NFIELDS (one row after another, see kc_sink_open) */
    int32_t *offsets;      /* capacity + 1 name offsets into blob */
    uint8_t *blob;
    size_t blob_len, blob_cap;
    int full;              /* the blob had no room for a name */
} kc_ctx;

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end) {
    if (p < end && *p > ' ') return p;  /* the usual cases: no white space, or one space */
    if (end - p > 1 && p[1] > ' ') return p + 1;
#ifdef __SSE2__
    /* Pretty-printed traces indent with runs of spaces: 16 bytes at a time. */
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
                                  _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\t')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\r'))));
        unsigned m = ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFF;
        if (m) return p + __builtin_ctz(m);
        p += 16;
    }
#endif
    while (p < end && WS[*p])
        p++;
    return p;
}

static inline int is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

/* The closing quote of the string whose opening quote is at p[-1] (end when there is
 * none); *escaped is set when the string holds a backslash. */
static inline const uint8_t *string_end(const uint8_t *p, const uint8_t *end, int *escaped) {
    for (;;) {
#ifdef __SSE2__
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)));
            if (m) {
                p += __builtin_ctz(m);
                goto found;
            }
            p += 16;
        }
#endif
        while (p < end && *p != '"' && *p != '\\')
            p++;
        if (p >= end) return end;
#ifdef __SSE2__
    found:
#endif
        if (*p == '"') return p;
        *escaped = 1;
        p += 2;  /* the backslash and the byte it escapes (a \uXXXX's digits need no care) */
        if (p >= end) return end;
    }
}

/* The byte after the value at p (whitespace skipped before it), or NULL when the text
 * ends first or nests deeper than KC_MAX_DEPTH. */
static const uint8_t *skip_value(const uint8_t *p, const uint8_t *end) {
    int depth = 0, escaped;
    for (;;) {
        if (p >= end) return NULL;
        uint8_t b = *p;
        if (b == '"') {
            p = string_end(p + 1, end, &escaped);
            if (p >= end) return NULL;
            p++;
        } else if (b == '{' || b == '[') {
            if (++depth > KC_MAX_DEPTH) return NULL;
            p++;
        } else if (b == '}' || b == ']') {
            if (--depth < 0) return NULL;
            p++;
        } else if (WS[b] || b == ',' || b == ':') {
            p++;
        } else {
            /* a number or a literal: up to the next delimiter */
            const uint8_t *q = p;
            while (p < end && !WS[*p] && *p != ',' && *p != '}' && *p != ']' && *p != ':' && *p != '"'
                   && *p != '{' && *p != '[')
                p++;
            if (p == q) return NULL;
        }
        if (depth == 0) return p;
    }
}

/* The end of a number or literal at p that was not read as what the caller wanted. */
static const uint8_t *skip_scalar(const uint8_t *p, const uint8_t *end) {
    if (p < end && (*p == '"' || *p == '{' || *p == '[')) return skip_value(p, end);
    while (p < end && !WS[*p] && *p != ',' && *p != '}' && *p != ']')
        p++;
    return p;
}

/* An integer at p as int64: returns the byte after the number; *ok is 0 when it is not
 * one (a fraction or exponent, beyond int64, another type).  Null is absent (*ok = 2). */
static const uint8_t *read_int(const uint8_t *p, const uint8_t *end, int64_t *out, int *ok) {
    const uint8_t *start = p;
    *ok = 0;
    if (p < end && *p == 'n') {
        if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
            *ok = 2;
            return p + 4;
        }
        return skip_scalar(p, end);
    }
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || !is_digit(*p)) return skip_scalar(start, end);
    const uint8_t *digits = p;
    uint64_t v = 0;
    while (p < end && is_digit(*p))
        v = v * 10 + (unsigned)(*p++ - '0');  /* wraps past 19 digits: refused below */
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return skip_scalar(p, end);
    /* 19 digits always fit a uint64 (< 10^19 < 2^64), 20 never fit an int64 */
    if (p - digits > 19 || v > (uint64_t)INT64_MAX + (uint64_t)neg) return p;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    *ok = 1;
    return p;
}

/* Eight bytes at p as a little-endian word. */
static inline uint64_t load8(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* 1 when the eight bytes of v (see load8) are all decimal digits. */
static inline int eight_digits(uint64_t v) {
    return (((v & 0xF0F0F0F0F0F0F0F0u) | (((v + 0x0606060606060606u) & 0xF0F0F0F0F0F0F0F0u) >> 4))
            == 0x3333333333333333u);
}

/* The value of eight decimal digits (see eight_digits), first digit most significant. */
static inline uint64_t parse8(uint64_t v) {
    v -= 0x3030303030303030u;
    v = v * 10 + (v >> 8);  /* pairs of digits */
    return ((v & 0x000000FF000000FFu) * (100 + (1000000ull << 32))
            + ((v >> 16) & 0x000000FF000000FFu) * (1 + (10000ull << 32))) >> 32;
}

/* A number of microseconds at p as exact int64 nanoseconds (three decimals at most, no
 * exponent): returns the byte after it; *ok is 0 when it is not one (null included). */
static const uint8_t *read_us(const uint8_t *p, const uint8_t *end, int64_t *out, int *ok) {
    const uint8_t *start = p;
    *ok = 0;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || !is_digit(*p)) return skip_scalar(start, end);
    const uint8_t *digits = p;
    uint64_t us = 0;
    /* Epoch microseconds have 16 digits: 8 at a time first. */
    while (end - p >= 8 && eight_digits(load8(p))) {
        us = us * 100000000 + parse8(load8(p));  /* wraps past 19 digits: refused below */
        p += 8;
    }
    while (p < end && is_digit(*p))
        us = us * 10 + (unsigned)(*p++ - '0');
    int over = p - digits > 19;
    uint64_t frac = 0;
    int decimals = 0;
    if (p < end && *p == '.') {
        p++;
        while (p < end && is_digit(*p)) {
            if (++decimals <= 3) frac = frac * 10 + (uint64_t)(*p - '0');
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) return skip_scalar(p, end);
    if (over || decimals > 3) return p;
    for (int i = decimals; i < 3; i++)
        frac *= 10;
    uint64_t ns;
    if (__builtin_mul_overflow(us, (uint64_t)1000, &ns) || __builtin_add_overflow(ns, frac, &ns)
        || ns > (uint64_t)INT64_MAX)
        return p;
    *out = neg ? -(int64_t)ns : (int64_t)ns;
    *ok = 1;
    return p;
}


/* Append the JSON string body s[0:n] to the blob, unescaped (escapes only shrink text,
 * so a blob as long as the text always holds every name).  Returns 1, or 0 when it holds
 * an escape the decoders would not turn into UTF-8 (a lone surrogate), or -1 (and sets
 * c->full) when the blob has no room for it. */
static int put_name(kc_ctx *c, const uint8_t *s, size_t n, int escaped) {
    if (c->blob_cap - c->blob_len < n) {
        c->full = 1;
        return -1;
    }
    uint8_t *o = c->blob + c->blob_len;
    if (!escaped) {
        memcpy(o, s, n);
        c->blob_len += n;
        return 1;
    }
    const uint8_t *end = s + n, *o0 = o;
    while (s < end) {
        if (*s != '\\') {
            *o++ = *s++;
            continue;
        }
        if (end - s < 2) return 0;
        uint8_t e = s[1];
        s += 2;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (!hex4(s, end, &u)) return 0;
            s += 4;
            if (u >= 0xDC00 && u <= 0xDFFF) return 0;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (end - s < 6 || s[0] != '\\' || s[1] != 'u' || !hex4(s + 2, end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return 0;
                s += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (u < 0x80) {
                *o++ = (uint8_t)u;
            } else if (u < 0x800) {
                *o++ = (uint8_t)(0xC0 | u >> 6);
                *o++ = (uint8_t)(0x80 | (u & 0x3F));
            } else if (u < 0x10000) {
                *o++ = (uint8_t)(0xE0 | u >> 12);
                *o++ = (uint8_t)(0x80 | (u >> 6 & 0x3F));
                *o++ = (uint8_t)(0x80 | (u & 0x3F));
            } else {
                *o++ = (uint8_t)(0xF0 | u >> 18);
                *o++ = (uint8_t)(0x80 | (u >> 12 & 0x3F));
                *o++ = (uint8_t)(0x80 | (u >> 6 & 0x3F));
                *o++ = (uint8_t)(0x80 | (u & 0x3F));
            }
            break;
        }
        default:
            return 0;
        }
    }
    c->blob_len += (size_t)(o - o0);
    return 1;
}

static inline int key_is(const uint8_t *k, size_t n, const char *s, size_t m) {
    return n == m && memcmp(k, s, m) == 0;
}

/* Seen-key bits of an event's own keys (a repeated one is odd). */
enum { SEEN_PH = 1, SEEN_CAT = 2, SEEN_NAME = 4, SEEN_PID = 8, SEEN_TID = 16, SEEN_TS = 32, SEEN_DUR = 64, SEEN_ARGS = 128 };

#define COL(c, f, i) ((c)->cols[(int64_t)(f) * (c)->field_stride + (int64_t)(i) * (c)->row_stride])

/* Read an [x, y, z] array of three integers at p ('[') into fields f..f+2 of row i;
 * returns the byte after the value, *ok 0 when it is anything else. */
static const uint8_t *read_triple(kc_ctx *c, const uint8_t *p, int64_t i, int f, int *ok) {
    const uint8_t *end = c->end, *start = p;
    *ok = 0;
    p = skip_ws(p + 1, end);
    for (int k = 0; k < 3; k++) {
        int64_t v;
        int iok;
        p = read_int(p, end, &v, &iok);
        if (iok != 1) return skip_value(start, end);
        COL(c, f + k, i) = v;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (k < 2) {
            if (*p != ',') return skip_value(start, end);
            p = skip_ws(p + 1, end);
        }
    }
    if (*p != ']') return skip_value(start, end);
    *ok = 1;
    return p + 1;
}

/* The member at p (its key's opening quote): the key's text in *key / *n (as written:
 * *escaped says whether it holds a backslash); returns the start of the member's value
 * (NULL on a text that ends or is not JSON). */
static const uint8_t *member_key(const uint8_t *p, const uint8_t *end, const uint8_t **key, size_t *n, int *escaped) {
    if (p >= end || *p != '"') return NULL;
    *key = p + 1;
    *escaped = 0;
    p = string_end(*key, end, escaped);
    if (p >= end) return NULL;
    *n = (size_t)(p - *key);
    p = skip_ws(p + 1, end);
    if (p >= end || *p != ':') return NULL;
    p = skip_ws(p + 1, end);
    return p < end ? p : NULL;
}

/* The args object of row i at p ('{'); returns the byte after it (NULL on a text that
 * ends or is not JSON). */
static const uint8_t *read_args(kc_ctx *c, const uint8_t *p, int64_t i, int64_t *present, int64_t *odd) {
    const uint8_t *end = c->end;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        const uint8_t *key;
        size_t n;
        int escaped;
        if (!(p = member_key(p, end, &key, &n, &escaped))) return NULL;
        int field = -1;
        if (escaped) *odd |= KC_ODD_ARG_KEY;  /* it may spell one of the keys below */
        else switch (n) {
        case 2: if (key_is(key, n, "ps", 2)) *odd |= KC_ODD_PS; break;
        case 4:
            if (key_is(key, n, "cbid", 4)) field = KC_CBID;
            else if (key_is(key, n, "grid", 4)) field = KC_GRID_X;
            break;
        case 5:
            if (key_is(key, n, "bytes", 5)) field = KC_BYTES;
            else if (key_is(key, n, "block", 5)) field = KC_BLOCK_X;
            break;
        case 6:
            if (key_is(key, n, "device", 6)) field = KC_DEVICE;
            else if (key_is(key, n, "stream", 6)) field = KC_STREAM;
            break;
        case 8: if (key_is(key, n, "graph id", 8)) field = KC_GRAPH_ID; break;
        case 11:
            if (key_is(key, n, "correlation", 11)) field = KC_CORRELATION;
            else if (key_is(key, n, "External id", 11)) field = KC_EXTERNAL_ID;
            break;
        case 13: if (key_is(key, n, "shared memory", 13)) field = KC_SHARED_MEMORY; break;
        case 20: if (key_is(key, n, "registers per thread", 20)) field = KC_REGISTERS; break;
        }
        if (field < 0) {
            p = skip_value(p, end);
        } else {
            /* the seen bit of a field is its present bit, or its own bit in *odd's upper half */
            int64_t seen = (int64_t)1 << (field + 32);
            if (*odd & seen) *odd |= KC_ODD_ARG;
            *odd |= seen;
            int ok;
            if (field == KC_GRID_X || field == KC_BLOCK_X) {
                if (*p == '[') {
                    p = read_triple(c, p, i, field, &ok);
                    if (ok) *present |= (int64_t)1 << field;
                    else *odd |= KC_ODD_ARG;
                } else if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
                    p += 4;
                } else {
                    *odd |= KC_ODD_ARG;
                    p = skip_value(p, end);
                }
            } else {
                int64_t v;
                p = read_int(p, end, &v, &ok);
                if (ok == 1) {
                    COL(c, field, i) = v;
                    *present |= (int64_t)1 << field;
                } else if (ok == 0) {
                    *odd |= KC_ODD_ARG;
                }
            }
        }
        if (p == NULL) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
}

/* The event object at p ('{'), row i; returns the byte after it (NULL: not JSON). */
static const uint8_t *read_event(kc_ctx *c, const uint8_t *p, int64_t i) {
    const uint8_t *end = c->end;
    int64_t present = 0, odd = 0, cat = -1;
    int seen = 0, ph_x = 0;
    c->offsets[i] = (int32_t)c->blob_len;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto done;
    }
    for (;;) {
        const uint8_t *key;
        size_t n;
        int escaped;
        if (!(p = member_key(p, end, &key, &n, &escaped))) return NULL;
        int bit = 0;
        if (escaped) odd |= KC_ODD_KEY;
        else if (n == 2 && key[0] == 'p' && key[1] == 'h') bit = SEEN_PH;
        else if (n == 2 && key[0] == 't' && key[1] == 's') bit = SEEN_TS;
        else if (n == 3 && memcmp(key, "cat", 3) == 0) bit = SEEN_CAT;
        else if (n == 3 && memcmp(key, "pid", 3) == 0) bit = SEEN_PID;
        else if (n == 3 && memcmp(key, "tid", 3) == 0) bit = SEEN_TID;
        else if (n == 3 && memcmp(key, "dur", 3) == 0) bit = SEEN_DUR;
        else if (n == 4 && memcmp(key, "name", 4) == 0) bit = SEEN_NAME;
        else if (n == 4 && memcmp(key, "args", 4) == 0) bit = SEEN_ARGS;
        if (bit & seen) {
            /* a repeated key: which one the decoders take is theirs to say */
            odd |= bit == SEEN_CAT ? KC_ODD_CAT : bit == SEEN_PH ? KC_ODD_PH : bit == SEEN_NAME ? KC_ODD_NAME
                 : bit == SEEN_ARGS ? KC_ODD_ARGS : (bit == SEEN_TS || bit == SEEN_DUR) ? KC_ODD_TIME : KC_ODD_ID;
            bit = 0;  /* and the value is only skipped */
        }
        seen |= bit;
        int ok;
        int64_t v;
        switch (bit) {
        case SEEN_PH:
        case SEEN_CAT:
        case SEEN_NAME:
            if (*p == '"') {
                const uint8_t *s = p + 1;
                int vesc = 0;
                p = string_end(s, end, &vesc);
                if (p >= end) return NULL;
                size_t len = (size_t)(p - s);
                p++;
                if (bit == SEEN_PH) {
                    ph_x = !vesc && len == 1 && s[0] == 'X';
                } else if (bit == SEEN_CAT) {
                    if (vesc) {
                        odd |= KC_ODD_CAT;
                    } else {
                        cat = -2;
                        for (int k = 0; k < c->ncats; k++)
                            if (c->cats[k].len == len && memcmp(c->cats[k].ptr, s, len) == 0) {
                                cat = k;
                                break;
                            }
                    }
                } else {
                    int put = put_name(c, s, len, vesc);
                    if (put < 0) return NULL;  /* no room: c->full says so */
                    if (put == 0) odd |= KC_ODD_NAME;
                }
            } else if (bit == SEEN_CAT && end - p >= 4 && memcmp(p, "null", 4) == 0) {
                p += 4;  /* no category, as when absent */
            } else {
                odd |= bit == SEEN_PH ? KC_ODD_PH : bit == SEEN_CAT ? KC_ODD_CAT : KC_ODD_NAME;
                p = skip_value(p, end);
            }
            break;
        case SEEN_PID:
        case SEEN_TID: {
            int f = bit == SEEN_PID ? KC_PID : KC_TID;
            p = read_int(p, end, &v, &ok);
            if (ok == 1) {
                COL(c, f, i) = v;
                present |= (int64_t)1 << f;
            } else if (ok == 0) {
                odd |= KC_ODD_ID;
            }
            break;
        }
        case SEEN_TS:
        case SEEN_DUR: {
            int f = bit == SEEN_TS ? KC_TS : KC_DUR;
            p = read_us(p, end, &v, &ok);
            if (ok) {
                COL(c, f, i) = v;
                present |= (int64_t)1 << f;
            } else {
                odd |= KC_ODD_TIME;
            }
            break;
        }
        case SEEN_ARGS:
            if (*p == '{') {
                int64_t args_odd = 0;
                p = read_args(c, p, i, &present, &args_odd);
                odd |= args_odd & 0xFFFFFFFF;  /* (the upper half held the seen keys) */
            } else if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
                p += 4;
            } else {
                odd |= KC_ODD_ARGS;
                p = skip_value(p, end);
            }
            break;
        default:
            p = skip_value(p, end);
        }
        if (p == NULL) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') {
            p++;
            break;
        }
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
done:
    if (!ph_x) odd |= KC_ODD_PH;
    /* (the decoders give 0 for an absent one, or None for null, which the tables' paths
     * for whole and text values do not always agree on) */
    if ((present & ((int64_t)1 << KC_TS | (int64_t)1 << KC_DUR)) != ((int64_t)1 << KC_TS | (int64_t)1 << KC_DUR))
        odd |= KC_ODD_TIME;
    COL(c, KC_CAT, i) = cat;
    COL(c, KC_PRESENT, i) = present;
    COL(c, KC_ODD, i) = odd;
    return p;
}

static int load_cats(kc_ctx *c, const uint8_t *cats, size_t len) {
    const uint8_t *p = cats, *end = cats + len;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *line_end = nl ? nl : end;
        if (line_end == p || c->ncats == KC_MAX_CATS) return 0;
        c->cats[c->ncats].ptr = p;
        c->cats[c->ncats].len = (size_t)(line_end - p);
        c->ncats++;
        p = nl ? nl + 1 : end;
    }
    return 1;
}

/* Row i's span (byte offsets in the text) and its part of the odd counts. */
static inline void end_row(kc_ctx *c, kc_result *res, int64_t i, ptrdiff_t start, ptrdiff_t end) {
    COL(c, KC_START, i) = (int64_t)start;
    COL(c, KC_END, i) = (int64_t)end;
    int64_t odd = COL(c, KC_ODD, i);
    if (COL(c, KC_CAT, i) < 0) odd &= KC_ODD_UNKNOWN_CAT;
    if (odd) {
        if (res->first_odd < 0) res->first_odd = i;
        res->odd_rows++;
        res->odd_bits |= odd;
    }
}

/* The columns' names, space-separated, in their order. */
KC_API const char *kc_layout(void) { return LAYOUT; }

/* Extract the events of text[0:len] (a filtered trace) into `capacity` rows: cols is an
 * int64 matrix of KC_NFIELDS x capacity values (a value absent from an event, whose
 * present bit is clear, is not written: pass zeros), offsets capacity + 1 int32 name
 * offsets into blob[0:blob_cap] (blob_cap >= len always suffices); `cats` holds the
 * category names, '\n'-separated, whose indices fill the cat column (-1: absent or null,
 * -2: text not in the list).  Returns KC_OK when the text held exactly `capacity` events;
 * *res holds the counts, the traceEvents array's span and the odd rows (see the module
 * comment). */
KC_API int kc_extract(const uint8_t *text, size_t len, const uint8_t *cats, size_t cats_len, int64_t *cols,
                      int64_t capacity, int32_t *offsets, uint8_t *blob, size_t blob_cap, kc_result *res) {
    kc_ctx ctx;
    kc_ctx *c = &ctx;
    memset(c, 0, sizeof *c);
    memset(res, 0, sizeof *res);
    res->open = res->close = res->first_odd = res->error_offset = -1;
    if (!load_cats(c, cats, cats_len) || capacity < 0) return KC_ERR_ARGS;
    c->end = text + len;
    c->cols = cols;
    c->capacity = capacity;
    c->field_stride = capacity;
    c->row_stride = 1;
    c->offsets = offsets;
    c->blob = blob;
    c->blob_cap = blob_cap < (size_t)INT32_MAX ? blob_cap : (size_t)INT32_MAX;
    const uint8_t *end = c->end, *p = skip_ws(text, end);
    int escaped;
    int64_t i = 0;  /* events read */
    /* The root object, up to the traceEvents array (the filter put it there once). */
    if (p >= end || *p != '{') goto shape;
    p = skip_ws(p + 1, end);
    for (;;) {
        if (p >= end || *p != '"') goto shape;
        const uint8_t *key = p + 1;
        escaped = 0;
        p = string_end(key, end, &escaped);
        if (p >= end) goto shape;
        int is_events = !escaped && key_is(key, (size_t)(p - key), "traceEvents", 11);
        p = skip_ws(p + 1, end);
        if (p >= end || *p != ':') goto shape;
        p = skip_ws(p + 1, end);
        if (is_events) break;
        if (!(p = skip_value(p, end))) goto shape;
        p = skip_ws(p, end);
        if (p >= end || *p != ',') goto shape;
        p = skip_ws(p + 1, end);
    }
    if (p >= end || *p != '[') goto shape;
    res->open = (int64_t)(p - text);
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') goto closed;
    for (;;) {
        if (p >= end || *p != '{') goto shape;
        if (i == capacity) {
            res->rows = i;
            res->error_offset = (int64_t)(p - text);
            return KC_ERR_ROWS;
        }
        const uint8_t *start = p;
        p = read_event(c, p, i);
        if (p == NULL) {
            p = start;
            if (c->full) {
                res->rows = i;
                res->error_offset = (int64_t)(p - text);
                return KC_ERR_BLOB;
            }
            goto shape;
        }
        end_row(c, res, i, start - text, p - text);
        i++;
        p = skip_ws(p, end);
        if (p >= end) goto shape;
        if (*p == ']') break;
        if (*p != ',') goto shape;
        p = skip_ws(p + 1, end);
    }
closed:
    res->close = (int64_t)(p - text);
    res->rows = i;
    offsets[i] = (int32_t)c->blob_len;
    return i == capacity ? KC_OK : KC_ERR_ROWS;
shape:
    res->rows = i;
    res->error_offset = (int64_t)((p < end ? p : end) - text);
    return KC_ERR_SHAPE;
}

/* The extractor as a sink of single events: the streamed filter (kf_stream_start in
 * prefilter.c) hands it each event it keeps, right after writing it to its output,
 * while the event is still in cache, instead of a second pass over the filtered text.
 * The rows are those kc_extract would make of the finished text.  The caller does not
 * know how many events will be kept: it gives `capacity` rows and a blob of `blob_cap`
 * bytes, and when either runs out the sink stops (kc_sink_close then returns
 * KC_ERR_ROWS or KC_ERR_BLOB) and the caller runs kc_extract over the finished text.
 * The columns are laid out one after another (field_stride = capacity, row_stride = 1)
 * or one row after another (field_stride = 1, row_stride = KC_NFIELDS): rows not used
 * are then pages never touched. */
struct kc_sink {
    kc_ctx c;
    kc_result *res;
    int64_t rows;
    int code;              /* KC_OK until the sink stops */
    int64_t parent_capacity;  /* a fork: its parent's capacity and blob before the fork */
    size_t parent_blob;
};
typedef struct kc_sink kc_sink;

/* A sink writing into the caller's buffers (see kc_extract for them), or NULL when the
 * arguments are malformed or there is no memory (the caller then extracts the text). */
kc_sink *kc_sink_open(const uint8_t *cats, size_t cats_len, int64_t *cols, int64_t capacity, int64_t field_stride,
                      int64_t row_stride, int32_t *offsets, uint8_t *blob, size_t blob_cap, kc_result *res) {
    if (capacity < 0 || !((field_stride == capacity && row_stride == 1) || (field_stride == 1 && row_stride == KC_NFIELDS)))
        return NULL;
    kc_sink *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    if (!load_cats(&s->c, cats, cats_len)) {
        free(s);
        return NULL;
    }
    s->c.cols = cols;
    s->c.capacity = capacity;
    s->c.field_stride = field_stride;
    s->c.row_stride = row_stride;
    s->c.offsets = offsets;
    s->c.blob = blob;
    s->c.blob_cap = blob_cap < (size_t)INT32_MAX ? blob_cap : (size_t)INT32_MAX;
    s->res = res;
    memset(res, 0, sizeof *res);
    res->open = res->close = res->first_odd = res->error_offset = -1;
    return s;
}

/* Add the event text[start:start + n] (one element of traceEvents, '{' to '}') as the next
 * row.  Returns 1, or 0 once the sink has stopped (no room, or not an object). */
int kc_sink_add(kc_sink *s, const uint8_t *text, size_t start, size_t n) {
    if (s->code != KC_OK) return 0;
    kc_ctx *c = &s->c;
    const uint8_t *ev = text + start;
    int64_t i = s->rows;
    if (i == c->capacity) {
        s->code = KC_ERR_ROWS;
        s->res->error_offset = (int64_t)start;
        return 0;
    }
    /* The event's end bounds every read: the filter validated it, and nothing after it is
     * needed to read it. */
    c->end = ev + n;
    if (n == 0 || *ev != '{' || read_event(c, ev, i) != c->end) {
        s->code = c->full ? KC_ERR_BLOB : KC_ERR_SHAPE;
        s->res->error_offset = (int64_t)start;
        return 0;
    }
    end_row(c, s->res, i, (ptrdiff_t)start, (ptrdiff_t)(start + n));
    s->rows++;
    return 1;
}

/* Finish the rows: `open` and `close` are the offsets of the traceEvents array's '[' and
 * ']' in the text.  Fills the result as kc_extract does, frees the sink and returns KC_OK,
 * or the reason it stopped. */
int kc_sink_close(kc_sink *s, int64_t open, int64_t close) {
    kc_result *res = s->res;
    int code = s->code;
    res->rows = s->rows;
    res->open = open;
    res->close = close;
    if (code == KC_OK) s->c.offsets[s->rows] = (int32_t)s->c.blob_len;
    free(s);
    return code;
}

/* A second sink for rows `row0` on of s's, their names going to s's blob from `blob0`
 * (the offset in the text of the first of those rows' events: names are never longer than
 * their text), so that a second thread may extract those rows while s gets the ones
 * before (see kc_sink_join).  Returns NULL (and changes nothing) when s has stopped or
 * already used them, or there is no memory. */
kc_sink *kc_sink_fork(kc_sink *s, int64_t row0, size_t blob0) {
    if (s->code != KC_OK || s->rows > row0 || row0 > s->c.capacity || s->c.blob_len > blob0 || blob0 > s->c.blob_cap)
        return NULL;
    kc_sink *t = calloc(1, sizeof *t + sizeof *t->res);
    if (t == NULL) return NULL;
    t->c = s->c;
    t->c.cols = s->c.cols + row0 * s->c.row_stride;
    t->c.capacity = s->c.capacity - row0;
    t->c.offsets = s->c.offsets + row0;
    t->c.blob = s->c.blob + blob0;
    t->c.blob_cap = s->c.blob_cap - blob0;
    t->c.blob_len = 0;
    t->c.full = 0;
    t->res = (kc_result *)(t + 1);
    t->res->open = t->res->close = t->res->first_odd = t->res->error_offset = -1;
    t->parent_capacity = s->c.capacity;
    t->parent_blob = s->c.blob_cap;
    s->c.capacity = row0;
    s->c.blob_cap = blob0;
    return t;
}

/* Take the rows of t (a fork of s, see kc_sink_fork) into s: they follow s's, whose rows
 * must then reach exactly to t's first.  Frees t; returns 1, or 0 when either sink had
 * stopped or there are rows missing between them (s then stops). */
int kc_sink_join(kc_sink *s, kc_sink *t) {
    int64_t row0 = t->c.offsets - s->c.offsets;
    size_t used = s->c.blob_len;
    s->c.capacity = t->parent_capacity;
    s->c.blob_cap = t->parent_blob;
    if (s->code != KC_OK || t->code != KC_OK || s->rows != row0) {
        if (s->code == KC_OK) s->code = t->code != KC_OK ? t->code : KC_ERR_ROWS;
        free(t);
        return 0;
    }
    kc_ctx *c = &s->c;
    memmove(c->blob + used, t->c.blob, t->c.blob_len);
    for (int64_t i = 0; i < t->rows; i++)
        c->offsets[row0 + i] = (int32_t)((size_t)c->offsets[row0 + i] + used);
    c->blob_len = used + t->c.blob_len;
    kc_result *r = s->res, *q = t->res;
    if (q->odd_rows) {
        if (r->first_odd < 0) r->first_odd = row0 + q->first_odd;
        r->odd_rows += q->odd_rows;
        r->odd_bits |= q->odd_bits;
    }
    s->rows = row0 + t->rows;
    free(t);
    return 1;
}

/* Nesting of host intervals (the operators table): rows given in preorder per thread
 * (sorted by thread, then start ascending, end descending), each row's parent is the
 * nearest earlier row of its thread whose end is at or after its own end (the innermost
 * interval that contains it; one that only overlaps it is not), found with a stack of
 * the open rows.  Writes parent (-1 at the top), depth, and site: the nearest
 * ancestor (not the row itself) with is_site set (-1 when none).  Rows with `skip` set
 * (a negative duration) are left out: parent and site -1, depth 0, and no row's parent.
 * Kept in step with operators.py's _nest_python (the fallback without this library). */
KC_API int kc_nest(int64_t n, const int64_t *thread, const int64_t *end, const uint8_t *is_site,
                   const uint8_t *skip, int64_t *parent, int32_t *depth, int64_t *site, int64_t *stack) {
    int64_t top = 0;  /* stack[0 .. top-1]: the open rows of the current thread, outermost first */
    for (int64_t i = 0; i < n; i++) {
        if (i > 0 && thread[i] != thread[i - 1]) top = 0;
        parent[i] = site[i] = -1;
        depth[i] = 0;
        if (skip[i]) continue;
        while (top > 0 && end[stack[top - 1]] < end[i]) top--;
        if (top > 0) {
            int64_t p = stack[top - 1];
            parent[i] = p;
            depth[i] = depth[p] + 1;
            site[i] = is_site[p] ? p : site[p];
        }
        stack[top++] = i;
    }
    return 0;
}
