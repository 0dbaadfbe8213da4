/* JSON byte helpers shared by the Kineto pre-filter (prefilter.c) and the column
 * extractor (columns.c), which are compiled into one library. */
#ifndef PERFSCOPE_KINETO_JSON_BYTES_H
#define PERFSCOPE_KINETO_JSON_BYTES_H

#include <stdint.h>

/* 1 for JSON whitespace. */
static const uint8_t WS[256] = {[' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1};

/* The value of the four hex digits at p (a \uXXXX escape's) in *out: 1, or 0 when fewer
 * than four bytes are left before end or one is not a hex digit. */
static inline int hex4(const uint8_t *p, const uint8_t *end, unsigned *out) {
    if (end - p < 4) return 0;
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

#endif
