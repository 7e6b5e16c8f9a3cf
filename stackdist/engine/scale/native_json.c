/* JSON-lines scanners of the native SHARDS sampler (native_shards.c): access traces of lines
 * {"key": INT} or {"key": INT, "size": INT}, and Mooncake request traces (their hash_ids are the
 * accesses). Each accepts exactly a subset of what the compiled scanners of
 * stackdist/traces/fast_json.py accept (_scan_access_jsonl_into, _scan_mooncake_into), with the
 * same keys and sizes, and returns -1 at the first line of any other shape, so the caller leaves
 * the file to the compiled path (which gives the answer or the error); -2 when memory ran out;
 * else the accesses fed.
 *
 * The shared rules, the compiled scanners' own: whitespace is space, tab and \r (anywhere a
 * JSON token may be preceded or followed by it, and at the ends of a line); a line is its bytes
 * up to \n (the last may lack it); lines of only whitespace are skipped; an integer is 1 to 18
 * digits, no leading zero, not followed by '.', 'e' or 'E'. */
#include <string.h>

#include "native_shards.h"

#define EXACT_SIZE (1ULL << 40)  /* the largest size summed exactly (stackdist.engine.scale.estimate.EXACT_SIZE) */

static inline int64_t skip_ws(const uint8_t *b, int64_t i, int64_t n) {
    while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r')) i++;
    return i;
}

/* The first d < 8 ASCII digits of x as a number. */
static inline uint64_t some_digits(uint64_t x, int d) {
    return d ? eight_digits((x << (8 * (8 - d))) | (0x3030303030303030ULL >> (8 * d))) : 0;
}

static const uint64_t POW10[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

/* The run of ASCII digits at b[i] (16 bytes must be readable there): its length, or 16 when it
 * is 16 or longer (then *v is not set); else its value in *v. */
static inline int digit_run(const uint8_t *b, int64_t i, uint64_t *v) {
    uint64_t x;
    memcpy(&x, b + i, 8);
    int d = leading_digits(x);
    if (d < 8) {
        *v = some_digits(x, d);
        return d;
    }
    uint64_t y;
    memcpy(&y, b + i + 8, 8);
    int e = leading_digits(y);
    if (e == 8) return 16;
    *v = eight_digits(x) * POW10[e] + some_digits(y, e);
    return 8 + e;
}

/* A plain non-negative JSON integer at i (fast_json._number): its value in *out and the index
 * after it, or -1. */
static inline int64_t number(const uint8_t *b, int64_t i, int64_t n, uint64_t *out) {
    int64_t start = i;
    uint64_t v = 0;
    int digits = i + 16 <= n ? digit_run(b, i, &v) : 16;
    if (digits < 16) {
        i += digits;
    } else {
        while (i < n && b[i] >= '0' && b[i] <= '9') {
            if (i - start == 18) return -1;
            v = v * 10 + (uint64_t)(b[i] - '0');
            i++;
        }
    }
    if (i == start || (i - start > 1 && b[start] == '0')) return -1;
    if (i < n && (b[i] == '.' || b[i] == 'e' || b[i] == 'E')) return -1;
    *out = v;
    return i;
}

/* The end of a line after its closing brace at i - 1: the index after its \n (or n), or -1
 * when anything but whitespace follows the brace. */
static inline int64_t line_end(const uint8_t *b, int64_t i, int64_t n) {
    i = skip_ws(b, i, n);
    if (i < n && b[i] != '\n') return -1;
    return i + 1;
}

/* Keys (and, when sized, their sizes) collected a block at a time for sd_feed_block or
 * sd_feed_sized_block; count: those already fed. */
typedef struct {
    uint64_t keys[BLOCK];
    int64_t sizes[BLOCK];
    int m, sized;
    int64_t count;
} batch_t;

static int flush(shards_t *s, batch_t *q) {
    q->count += q->m;
    q->m = 0;
    return q->sized ? sd_feed_sized_block(s, q->keys, q->sizes, BLOCK) : sd_feed_block(s, q->keys, BLOCK);
}

static inline int add_key(shards_t *s, batch_t *q, uint64_t key) {
    q->keys[q->m++] = key;
    return q->m == BLOCK ? flush(s, q) : 0;
}

/* The common line {"key": -?D}\n or \r\n (D up to 15 digits) read at once: the index after it,
 * the key in *key; 0 when the line at i is not of that exact form (the general scan reads it). */
static inline int64_t plain_key_line(const uint8_t *b, int64_t i, int64_t n, uint64_t *key) {
    if (i + 27 > n || memcmp(b + i, "{\"key\": ", 8) != 0) return 0;
    int64_t j = i + 8;
    int neg = b[j] == '-';
    j += neg;
    uint64_t v;
    int digits = digit_run(b, j, &v);
    if (digits == 0 || digits == 16 || (digits > 1 && b[j] == '0') || b[j + digits] != '}') return 0;
    int64_t end = j + digits + 1 + (b[j + digits + 1] == '\r');
    if (b[end] != '\n') return 0;
    *key = neg ? (uint64_t)0 - v : v;
    return end + 1;
}

/* The common sized line {"key": -?D, "size": Z}\n or \r\n (D and Z up to 15 digits, Z in
 * 1..2**40) read at once: the index after it, the key and size set; 0 when the line at i is not
 * of that exact form (the general scan reads it). */
static inline int64_t plain_sized_line(const uint8_t *b, int64_t i, int64_t n, uint64_t *key, int64_t *size) {
    if (i + 27 > n || memcmp(b + i, "{\"key\": ", 8) != 0) return 0;
    int64_t j = i + 8;
    int neg = b[j] == '-';
    j += neg;
    uint64_t v, z;
    int digits = digit_run(b, j, &v);
    if (digits == 0 || digits == 16 || (digits > 1 && b[j] == '0')) return 0;
    j += digits;
    if (j + 28 > n || memcmp(b + j, ", \"size\": ", 10) != 0) return 0;
    j += 10;
    int zd = digit_run(b, j, &z);
    if (zd == 0 || zd == 16 || b[j] == '0' || b[j + zd] != '}' || z > EXACT_SIZE) return 0;
    int64_t end = j + zd + 1 + (b[j + zd + 1] == '\r');
    if (b[end] != '\n') return 0;
    *key = neg ? (uint64_t)0 - v : v;
    *size = (int64_t)z;
    return end + 1;
}

/* Any access line at i (its first byte not whitespace), as _scan_access_jsonl_into reads one:
 * "key" and optionally "size", in either order, each once, nothing else; the key -?INT, the
 * size an INT in 1..2**40 (a larger one the compiled path weights in floats). Its shape (1 key,
 * 3 key and size) with *key, *size (when sized) and *next (the index after the line) set, or 0. */
static int access_line(const uint8_t *b, int64_t i, int64_t n, uint64_t *key, int64_t *size, int64_t *next) {
    if (b[i] != '{') return 0;
    i = skip_ws(b, i + 1, n);
    int seen = 0;
    while (1) {
        int field;
        if (i + 5 >= n || b[i] != '"') return 0;
        if (memcmp(b + i, "\"key\"", 5) == 0) { field = 1; i += 5; }
        else if (i + 6 < n && memcmp(b + i, "\"size\"", 6) == 0) { field = 2; i += 6; }
        else return 0;
        if (seen & field) return 0;
        seen |= field;
        i = skip_ws(b, i, n);
        if (i >= n || b[i] != ':') return 0;
        i = skip_ws(b, i + 1, n);
        int neg = field == 1 && i < n && b[i] == '-';
        uint64_t v;
        i = number(b, i + neg, n, &v);
        if (i < 0) return 0;
        if (field == 1) *key = neg ? (uint64_t)0 - v : v;
        else if (v < 1 || v > EXACT_SIZE) return 0;
        else *size = (int64_t)v;
        i = skip_ws(b, i, n);
        if (i < n && b[i] == ',') { i = skip_ws(b, i + 1, n); continue; }
        if (i < n && b[i] == '}') break;
        return 0;
    }
    if (!(seen & 1)) return 0;
    *next = line_end(b, i + 1, n);
    return *next < 0 ? 0 : seen;
}

static int64_t finish(shards_t *s, batch_t *q) {
    if (q->m && (q->sized ? sd_feed_sized_block(s, q->keys, q->sizes, q->m) : sd_feed_block(s, q->keys, q->m)))
        return -2;
    q->count += q->m;
    q->m = 0;
    s->n_accesses += q->count;
    return q->count;
}

/* Access lines {"key": INT} or {"key": INT, "size": INT} (INT for a key is -?digits; -0 is 0;
 * a negative key by its 64-bit two's complement, as the compiled scanner's int64 keys viewed as
 * uint64), every line of the shape of the first, as the compiled reader requires: sized ones
 * through sd_feed_sized_block. Any other field, a size outside 1..2**40, or a line of the other
 * shape is declined. */
int64_t sd_feed_jsonl(shards_t *s, const uint8_t *b, int64_t n) {
    batch_t q;
    q.m = 0;
    q.count = 0;
    q.sized = 0;
    int shape = 0;  /* the first line's: 1 key only, 3 key and size */
    int64_t i = 0;
    while (i < n) {
        i = skip_ws(b, i, n);
        if (i < n && b[i] == '\n') { i++; continue; }
        if (i >= n) break;
        int64_t next = shape == 1 ? plain_key_line(b, i, n, &q.keys[q.m])
                     : shape == 3 ? plain_sized_line(b, i, n, &q.keys[q.m], &q.sizes[q.m]) : 0;
        if (next == 0) {
            int got = access_line(b, i, n, &q.keys[q.m], &q.sizes[q.m], &next);
            if (got == 0 || (shape && got != shape)) return -1;
            shape = got;
            q.sized = shape == 3;
        }
        i = next;
        if (++q.m == BLOCK && flush(s, &q)) return -2;
    }
    return finish(s, &q);
}

/* Which Mooncake field a quoted name is (1 timestamp, 2 input_length, 4 output_length,
 * 8 hash_ids), 0 for any other. */
static int field_of(const uint8_t *name, int64_t len) {
    if (len == 9 && memcmp(name, "timestamp", 9) == 0) return 1;
    if (len == 12 && memcmp(name, "input_length", 12) == 0) return 2;
    if (len == 13 && memcmp(name, "output_length", 13) == 0) return 4;
    if (len == 8 && memcmp(name, "hash_ids", 8) == 0) return 8;
    return 0;
}

/* A hash_ids list at i (just after its '['): its ids added to the batch, their number in
 * *count; the index after its ']', -1 for any other shape, -2 out of memory. */
static int64_t id_list(shards_t *s, batch_t *q, const uint8_t *b, int64_t i, int64_t n, int64_t *count) {
    i = skip_ws(b, i, n);
    if (i < n && b[i] == ']') return i + 1;
    while (1) {
        uint64_t v;
        i = number(b, i, n, &v);
        if (i < 0) return -1;
        if (add_key(s, q, v)) return -2;
        ++*count;
        i = skip_ws(b, i, n);
        if (i < n && b[i] == ',') { i = skip_ws(b, i + 1, n); continue; }
        if (i < n && b[i] == ']') return i + 1;
        return -1;
    }
}

/* One Mooncake object at i (just after its '{'): the index after its '}', -1 or -2. Its fields
 * in any order, each once, output_length optional, and exactly ceil(input_length / block_size)
 * ids, as the compiled scanner requires. */
static int64_t mooncake_object(shards_t *s, batch_t *q, const uint8_t *b, int64_t i, int64_t n, int64_t block_size) {
    int seen = 0;
    uint64_t input_length = 0;
    int64_t ids = 0;
    while (1) {
        i = skip_ws(b, i, n);
        if (i >= n || b[i] != '"') return -1;
        int64_t j = i + 1;
        while (j < n && b[j] != '"' && b[j] != '\\' && b[j] != '\n') j++;
        if (j >= n || b[j] != '"') return -1;
        int key = field_of(b + i + 1, j - i - 1);
        if (key == 0 || (seen & key)) return -1;
        seen |= key;
        i = skip_ws(b, j + 1, n);
        if (i >= n || b[i] != ':') return -1;
        i = skip_ws(b, i + 1, n);
        if (key == 8) {
            if (i >= n || b[i] != '[') return -1;
            i = id_list(s, q, b, i + 1, n, &ids);
        } else {
            uint64_t v;
            i = number(b, i, n, &v);
            if (i >= 0 && key == 2) input_length = v;
        }
        if (i < 0) return i;
        i = skip_ws(b, i, n);
        if (i < n && b[i] == ',') { i++; continue; }
        if (i < n && b[i] == '}') break;
        return -1;
    }
    if ((seen & 11) != 11 || (uint64_t)ids != (input_length + (uint64_t)block_size - 1) / (uint64_t)block_size) return -1;
    return i + 1;
}

/* Mooncake request lines: every request's hash_ids, in order, are the accesses. */
int64_t sd_feed_mooncake(shards_t *s, const uint8_t *b, int64_t n, int64_t block_size) {
    batch_t q;
    q.m = 0;
    q.count = 0;
    q.sized = 0;
    if (block_size < 1) return -1;
    int64_t i = 0;
    while (i < n) {
        i = skip_ws(b, i, n);
        if (i < n && b[i] == '\n') { i++; continue; }
        if (i >= n) break;
        if (b[i] != '{') return -1;
        i = mooncake_object(s, &q, b, i + 1, n, block_size);
        if (i < 0) return i;
        i = line_end(b, i, n);
        if (i < 0) return -1;
    }
    return finish(s, &q);
}
