/* Fixed-rate SHARDS on unit-size integer keys, without numba: the filter, the line scanner and
 * the replay behind stackdist.engine.scale.native (compiled once by the C compiler, loaded with
 * ctypes). It computes exactly what hashed_stack.shards_replay computes for a fixed rate and unit
 * sizes: a key is sampled under seed j iff mix(key ^ salt[j]) <= cut[j], and a sampled access's
 * distance is its 1-based depth in the LRU stack of the sampled keys.
 *
 * Plain C99, no Python headers: every buffer is owned by the caller or by the handle. */
#include <stdlib.h>
#include <string.h>

#include "native_shards.h"

int sd_push(vec_t *vec, uint64_t h) {
    if (vec->n == vec->cap) {
        int64_t cap = vec->cap ? 2 * vec->cap : 4096;
        uint64_t *grown = realloc(vec->v, (size_t)cap * sizeof(uint64_t));
        if (!grown) return -1;
        vec->v = grown;
        vec->cap = cap;
    }
    vec->v[vec->n++] = h;
    return 0;
}

/* Make room for n more entries. 0, or -1 out of memory. */
static int reserve(vec_t *vec, int64_t n) {
    if (vec->n + n <= vec->cap) return 0;
    int64_t cap = vec->cap ? vec->cap : 4096;
    while (cap < vec->n + n) cap *= 2;
    uint64_t *grown = realloc(vec->v, (size_t)cap * sizeof(uint64_t));
    if (!grown) return -1;
    vec->v = grown;
    vec->cap = cap;
    return 0;
}

static int simd = 1;  /* sd_set_simd(0): the scalar loop only (the tests compare the two) */
void sd_set_simd(int on) { simd = on; }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512_PATH 1

/* One seed's pass over a block, 8 keys at a time with AVX-512 (the same mix, its multiplies
 * as vpmullq; the sampled hashes compress-stored in order): about 1.4x the scalar loop. */
__attribute__((target("avx512f,avx512dq")))
static int64_t seed_pass_avx512(const uint64_t *keys, int64_t n, uint64_t salt, uint64_t cut, uint64_t *out) {
    const __m512i s = _mm512_set1_epi64((long long)salt), top = _mm512_set1_epi64((long long)cut);
    const __m512i c1 = _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ULL);
    const __m512i c2 = _mm512_set1_epi64((long long)0x94D049BB133111EBULL);
    int64_t m = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512i x = _mm512_xor_si512(_mm512_loadu_si512((const void *)(keys + i)), s);
        x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), c1);
        x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), c2);
        x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
        __mmask8 kept = _mm512_cmple_epu64_mask(x, top);
        if (kept) {
            _mm512_mask_compressstoreu_epi64((void *)(out + m), kept, x);
            m += __builtin_popcount(kept);
        }
    }
    for (; i < n; i++) {
        uint64_t h = mix(keys[i], salt);
        if (h <= cut) out[m++] = h;
    }
    return m;
}

#define AVX512_DQ 1  /* the vector hash (vpmullq) */
#define AVX512_BW 2  /* the 64-byte newline search */

/* Whether this CPU has the feature (asked once) and vector passes are on (sd_set_simd). */
static int avx512(int feature) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        int f = __builtin_cpu_supports("avx512f");
        known = (f && __builtin_cpu_supports("avx512dq") ? AVX512_DQ : 0)
              | (f && __builtin_cpu_supports("avx512bw") ? AVX512_BW : 0);
    }
    return simd && (known & feature);
}
#endif

/* Hash a block of keys under every seed, one seed at a time (independent iterations, so the
 * multiplies overlap), appending each seed's sampled hashes in trace order. */
int sd_feed_block(shards_t *s, const uint64_t *keys, int64_t n) {
    s->kind |= 1;
    for (int j = 0; j < s->k; j++) {
        uint64_t salt = s->salt[j], cut = s->cut[j];
        vec_t *out = &s->kept[j];
#ifdef HAVE_AVX512_PATH
        if (avx512(AVX512_DQ)) {
            if (reserve(out, n)) return -1;
            out->n += seed_pass_avx512(keys, n, salt, cut, out->v + out->n);
        } else
#endif
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix(keys[i], salt);
            if (h <= cut && sd_push(out, h)) return -1;
        }
        if (out->n > s->limit) {
            s->too_large = 1;
            return -1;
        }
    }
    return 0;
}

shards_t *sd_new(int k, const uint64_t *salts, const uint64_t *cuts) {
    if (k < 1 || k > MAX_SEEDS) return NULL;
    shards_t *s = calloc(1, sizeof(shards_t));
    if (!s) return NULL;
    s->k = k;
    s->limit = INT64_MAX;
    memcpy(s->salt, salts, (size_t)k * sizeof(uint64_t));
    memcpy(s->cut, cuts, (size_t)k * sizeof(uint64_t));
    return s;
}

void sd_free(shards_t *s) {
    if (!s) return;
    for (int j = 0; j < MAX_SEEDS; j++) {
        free(s->kept[j].v);
        free(s->hist[j]);
        free(s->sizes[j].v);
        free(s->out_d[j].v);
        free(s->out_s[j].v);
    }
    free(s);
}

/* Feed n keys given as 64-bit values. Returns 0, or -1 when memory ran out. */
int sd_feed_values(shards_t *s, const uint64_t *values, int64_t n) {
    for (int64_t lo = 0; lo < n; lo += BLOCK)
        if (sd_feed_block(s, values + lo, n - lo < BLOCK ? n - lo : BLOCK)) return -1;
    s->n_accesses += n;
    return 0;
}

/* Append b's sampled keys (and sizes) after a's (b fed the part of the trace after a's). */
int sd_merge(shards_t *a, const shards_t *b) {
    for (int j = 0; j < a->k; j++) {
        for (int64_t i = 0; i < b->kept[j].n; i++)
            if (sd_push(&a->kept[j], b->kept[j].v[i])) return -1;
        for (int64_t i = 0; i < b->sizes[j].n; i++)
            if (sd_push(&a->sizes[j], b->sizes[j].v[i])) return -1;
    }
    a->n_accesses += b->n_accesses;
    a->kind |= b->kind;
    a->too_large |= b->too_large;
    a->total_size = a->total_size < 0 || b->total_size < 0 || a->total_size + b->total_size > (1LL << 62)
        ? -1 : a->total_size + b->total_size;
    return 0;
}

/* The key of the line buf[start, end) (its \n excluded): its 64-bit value (the integer mod
 * 2**64, for -2**63 <= it < 2**64, as the readers' key_values), 1 for a blank line, -1 when the
 * line is not [+-]digits with an optional final \r. Lines are independent of one another, so
 * the parses of a block's lines overlap in the CPU. */
static inline int parse_line(const uint8_t *buf, int64_t start, int64_t end, int64_t len, uint64_t *key) {
    if (end > start && buf[end - 1] == '\r') end--;
    if (end == start) return 1;
    int neg = 0;
    if (buf[start] == '+' || buf[start] == '-') { neg = buf[start] == '-'; start++; }
    int64_t n = end - start;
    uint64_t v = 0;
    if (n >= 1 && n <= 8 && start + 8 <= len) {
        uint64_t x;
        memcpy(&x, buf + start, 8);
        if (leading_digits(x) < n) return -1;
        v = eight_digits(n == 8 ? x : (x << (8 * (8 - n))) | (0x3030303030303030ULL >> (8 * n)));
    } else {
        if (n < 1 || n > 20) return -1;
        for (int64_t i = start; i < end; i++) {
            unsigned d = (unsigned)(buf[i] - '0');
            if (d > 9 || (n == 20 && v > (UINT64_MAX - d) / 10)) return -1;
            v = v * 10 + d;
        }
    }
    if (neg && v > (1ULL << 63)) return -1;
    *key = neg ? (uint64_t)0 - v : v;
    return 0;
}

/* Bit 7 of each byte of x that equals c; no other bits. */
static inline uint64_t bytes_equal(uint64_t x, uint8_t c) {
    uint64_t v = x ^ (0x0101010101010101ULL * c);
    return ~(((v & 0x7F7F7F7F7F7F7F7FULL) + 0x7F7F7F7F7F7F7F7FULL) | v | 0x7F7F7F7F7F7F7F7FULL);
}

/* Up to BLOCK line ends (offsets of their \n) from pos, found 8 bytes at a time; the last line
 * of the input, without a final \n, ends at len. Sets *next past the last end found. */
static int line_ends(const uint8_t *buf, int64_t pos, int64_t len, int64_t *ends, int64_t *next) {
    int n = 0;
    int64_t j = pos;
    while (n < BLOCK - 8 && j + 8 <= len) {
        uint64_t x;
        memcpy(&x, buf + j, 8);
        for (uint64_t nl = bytes_equal(x, '\n'); nl; nl &= nl - 1)
            ends[n++] = j + (__builtin_ctzll(nl) >> 3);
        j += 8;
    }
    if (n < BLOCK - 8)                          /* the tail: fewer than 8 bytes left */
        for (; j < len; j++)
            if (buf[j] == '\n') ends[n++] = j;
    if (n < BLOCK - 8 && j >= len && (n == 0 ? pos : ends[n - 1] + 1) < len)
        ends[n++] = len;
    *next = n ? ends[n - 1] + 1 : len;
    return n;
}

/* Feed the keys of delimited text whose every line is [+-]digits (an optional \r before the
 * \n; blank lines skipped). Returns the accesses fed, -1 at the first line of any other shape
 * (the caller then reads the file with the general reader), -2 out of memory. */
#ifdef HAVE_AVX512_PATH
/* sd_feed_lines with AVX-512BW: each 64-byte chunk's newline bits are walked and each line is
 * parsed as its bit is found (no array of line ends); the common line (1 to 8 digits, no sign,
 * no \r) in one 8-byte load, any other through parse_line. The offset the scalar scan goes on
 * from (a line start) in *done, the keys fed in *count; 0, -1 for a line of another shape, -2. */
__attribute__((target("avx512f,avx512bw")))
static int feed_lines_avx512(shards_t *s, const uint8_t *buf, int64_t len, int64_t *done, int64_t *count) {
    const __m512i nl = _mm512_set1_epi8('\n');
    uint64_t keys[BLOCK];
    int64_t start = 0, j = 0;
    int m = 0;
    for (; j + 64 <= len; j += 64) {
        for (uint64_t bits = _mm512_cmpeq_epi8_mask(_mm512_loadu_si512((const void *)(buf + j)), nl); bits; bits &= bits - 1) {
            int64_t end = j + __builtin_ctzll(bits), n = end - start;
            uint64_t x = 0;
            int quick = n >= 1 && n <= 8 && start + 8 <= len;  /* never a load past the input */
            if (quick) memcpy(&x, buf + start, 8);
            if (quick && leading_digits(x) >= n) {
                keys[m++] = eight_digits(n == 8 ? x : (x << (8 * (8 - n))) | (0x3030303030303030ULL >> (8 * n)));
            } else {
                int got = parse_line(buf, start, end, len, &keys[m]);
                if (got < 0) return -1;
                m += got == 0;
            }
            start = end + 1;
            if (m == BLOCK) {
                if (sd_feed_block(s, keys, m)) return -2;
                *count += m;
                m = 0;
            }
        }
    }
    if (m && sd_feed_block(s, keys, m)) return -2;
    *count += m;
    *done = start;
    return 0;
}
#endif

int64_t sd_feed_lines(shards_t *s, const uint8_t *buf, int64_t len) {
    uint64_t keys[BLOCK];
    int64_t ends[BLOCK], pos = 0, count = 0;
#ifdef HAVE_AVX512_PATH
    if (avx512(AVX512_BW)) {
        int code = feed_lines_avx512(s, buf, len, &pos, &count);
        if (code) return code;
    }
#endif
    while (pos < len) {
        int64_t next;
        int n = line_ends(buf, pos, len, ends, &next), m = 0;
        for (int l = 0; l < n; l++) {
            int got = parse_line(buf, l ? ends[l - 1] + 1 : pos, ends[l], len, &keys[m]);
            if (got < 0) return -1;
            m += got == 0;
        }
        if (m && sd_feed_block(s, keys, m)) return -2;
        count += m;
        pos = next;
    }
    s->n_accesses += count;
    return count;
}

int sd_table_init(table_t *tab, int64_t slots, int sized) {
    tab->h = malloc((size_t)slots * sizeof(uint64_t));
    tab->t = calloc((size_t)slots, sizeof(int64_t));
    tab->size = sized ? malloc((size_t)slots * sizeof(int64_t)) : NULL;
    tab->mask = slots - 1;
    tab->used = 0;
    return tab->h && tab->t && (tab->size || !sized) ? 0 : -1;
}

void sd_table_free(table_t *tab) {
    free(tab->h);
    free(tab->t);
    free(tab->size);
}

/* Double the table (kept at most half full, sized by the keys, not the accesses). */
int sd_table_grow(table_t *tab) {
    table_t big;
    if (sd_table_init(&big, 2 * (tab->mask + 1), tab->size != NULL)) {
        sd_table_free(&big);
        return -1;
    }
    for (int64_t i = 0; i <= tab->mask; i++)
        if (tab->t[i]) {
            int64_t pos = sd_table_slot(&big, tab->h[i]);
            big.h[pos] = tab->h[i];
            big.t[pos] = tab->t[i];
            if (big.size) big.size[pos] = tab->size[i];
        }
    big.used = tab->used;
    sd_table_free(tab);
    *tab = big;
    return 0;
}

/* One seed's replay. A Fenwick tree over trace positions holds a 1 at each key's latest
 * access; a linear-probing table maps a key's hash to that position. Position t is always the
 * newest, so the tree is only ever needed up to t: a new node is built from its children, and a
 * key's old mark is cleared in the nodes up to t. A key last seen at p is at depth
 * (keys so far) - (marks at or before p) + 1. O(m log m) for m sampled accesses. */
int sd_replay_one(shards_t *s, int j) {
    const uint64_t *h = s->kept[j].v;
    int64_t m = s->kept[j].n;
    free(s->hist[j]);
    s->hist[j] = NULL;
    table_t tab;
    int32_t *tree = calloc((size_t)m + 1, sizeof(int32_t));
    int64_t *hist = calloc((size_t)m + 2, sizeof(int64_t));
    if (sd_table_init(&tab, 1 << 12, 0) || !tree || !hist || m >= INT32_MAX) {
        sd_table_free(&tab); free(tree); free(hist);
        return -1;
    }
    int64_t top = 0;
    for (int64_t t = 1; t <= m; t++) {
        uint64_t key = h[t - 1];
        int64_t pos = sd_table_slot(&tab, key), last = tab.t[pos];
        if (last) {
            int64_t before = 0;
            for (int64_t i = last; i > 0; i -= i & -i) before += tree[i];
            int64_t d = tab.used - before + 1;
            hist[d]++;
            if (d > top) top = d;
            for (int64_t i = last; i < t; i += i & -i) tree[i]--;
        } else {
            if (2 * (tab.used + 1) > tab.mask + 1) {
                if (sd_table_grow(&tab)) { sd_table_free(&tab); free(tree); free(hist); return -1; }
                pos = sd_table_slot(&tab, key);
            }
            tab.used++;
            tab.h[pos] = key;
        }
        int32_t node = 1;  /* the children of node t: t-1, t-2, t-4, ... below t's lowest bit */
        for (int64_t step = 1; step < (t & -t); step <<= 1) node += tree[t - step];
        tree[t] = node;
        tab.t[pos] = t;
    }
    s->hist[j] = hist;
    s->hist_len[j] = top + 1;
    s->keys[j] = tab.used;
    sd_table_free(&tab); free(tree);
    return 0;
}

int64_t sd_accesses(const shards_t *s) { return s->n_accesses; }
void sd_set_limit(shards_t *s, int64_t limit) { s->limit = limit; }
int64_t sd_too_large(const shards_t *s) { return s->too_large; }
int64_t sd_kept(const shards_t *s, int j) { return s->kept[j].n; }
int64_t sd_cold(const shards_t *s, int j) { return s->keys[j]; }  /* a sampled key is cold once: at its first access */
int64_t sd_keys(const shards_t *s, int j) { return s->keys[j]; }
int64_t sd_hist_len(const shards_t *s, int j) { return s->hist_len[j]; }

void sd_hist_copy(const shards_t *s, int j, int64_t *out) {
    memcpy(out, s->hist[j], (size_t)s->hist_len[j] * sizeof(int64_t));
}
