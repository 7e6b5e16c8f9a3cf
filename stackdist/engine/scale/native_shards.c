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

/* splitmix64's finalizer of x ^ salt (hashed_stack._mix): a bijection of the 64-bit values. */
static inline uint64_t mix(uint64_t x, uint64_t salt) {
    x ^= salt;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static int push(vec_t *vec, uint64_t h) {
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

/* Hash a block of keys under every seed, one seed at a time (independent iterations, so the
 * multiplies overlap), appending each seed's sampled hashes in trace order. */
int sd_feed_block(shards_t *s, const uint64_t *keys, int64_t n) {
    for (int j = 0; j < s->k; j++) {
        uint64_t salt = s->salt[j], cut = s->cut[j];
        vec_t *out = &s->kept[j];
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix(keys[i], salt);
            if (h <= cut && push(out, h)) return -1;
        }
    }
    return 0;
}


shards_t *sd_new(int k, const uint64_t *salts, const uint64_t *cuts) {
    if (k < 1 || k > MAX_SEEDS) return NULL;
    shards_t *s = calloc(1, sizeof(shards_t));
    if (!s) return NULL;
    s->k = k;
    memcpy(s->salt, salts, (size_t)k * sizeof(uint64_t));
    memcpy(s->cut, cuts, (size_t)k * sizeof(uint64_t));
    return s;
}

void sd_free(shards_t *s) {
    if (!s) return;
    for (int j = 0; j < MAX_SEEDS; j++) {
        free(s->kept[j].v);
        free(s->hist[j]);
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

/* Append b's sampled keys after a's (b fed the part of the trace after a's). */
int sd_merge(shards_t *a, const shards_t *b) {
    for (int j = 0; j < a->k; j++)
        for (int64_t i = 0; i < b->kept[j].n; i++)
            if (push(&a->kept[j], b->kept[j].v[i])) return -1;
    a->n_accesses += b->n_accesses;
    return 0;
}

/* Feed the keys of delimited text whose every line is [+-]digits (1 to 18 digits, an optional
 * \r before the \n; blank lines skipped). Returns the accesses fed, -1 at the first line of any
 * other shape (the caller then reads the file with the general reader), -2 out of memory. */
int64_t sd_feed_lines(shards_t *s, const uint8_t *buf, int64_t len) {
    uint64_t keys[BLOCK];
    int64_t i = 0, count = 0;
    int m = 0;
    while (i < len) {
        uint8_t c = buf[i];
        if (c == '\n') { i++; continue; }
        if (c == '\r' && i + 1 < len && buf[i + 1] == '\n') { i += 2; continue; }
        int neg = 0;
        if (c == '+' || c == '-') { neg = c == '-'; i++; }
        uint64_t v = 0;
        int digits = 0;
        while (i < len && buf[i] >= '0' && buf[i] <= '9') {
            if (++digits > 18) return -1;
            v = v * 10 + (uint64_t)(buf[i] - '0');
            i++;
        }
        if (digits == 0) return -1;
        if (i < len && buf[i] == '\r') i++;
        if (i < len && buf[i] != '\n') return -1;
        i++;
        keys[m++] = neg ? (uint64_t)0 - v : v;
        if (m == BLOCK) {
            if (sd_feed_block(s, keys, m)) return -2;
            count += m;
            m = 0;
        }
    }
    if (m && sd_feed_block(s, keys, m)) return -2;
    count += m;
    s->n_accesses += count;
    return count;
}

/* One seed's replay. A Fenwick tree over trace positions holds a 1 at each key's latest
 * access; a linear-probing table maps a key's hash to that position. Position t is always the
 * newest, so the tree is only ever needed up to t: a new node is built from its children, and a
 * key's old mark is cleared in the nodes up to t. A key last seen at p is at depth
 * (keys so far) - (marks at or before p) + 1. O(m log m) for m sampled accesses. */
int sd_replay_one(shards_t *s, int j) {
    const uint64_t *h = s->kept[j].v;
    int64_t m = s->kept[j].n, size = 64;
    while (size < 2 * m) size <<= 1;
    free(s->hist[j]);
    s->hist[j] = NULL;
    uint64_t *tab_h = malloc((size_t)size * sizeof(uint64_t));
    int64_t *tab_t = calloc((size_t)size, sizeof(int64_t));   /* latest position (1-based); 0 = empty */
    int32_t *tree = calloc((size_t)m + 1, sizeof(int32_t));
    int64_t *hist = calloc((size_t)m + 2, sizeof(int64_t));
    if (!tab_h || !tab_t || !tree || !hist) {
        free(tab_h); free(tab_t); free(tree); free(hist);
        return -1;
    }
    int64_t mask = size - 1, distinct = 0, top = 0;
    for (int64_t t = 1; t <= m; t++) {
        uint64_t key = h[t - 1];
        int64_t pos = (int64_t)(key & (uint64_t)mask);
        while (tab_t[pos] && tab_h[pos] != key) pos = (pos + 1) & mask;
        int64_t last = tab_t[pos];
        if (last) {
            int64_t before = 0;
            for (int64_t i = last; i > 0; i -= i & -i) before += tree[i];
            int64_t d = distinct - before + 1;
            hist[d]++;
            if (d > top) top = d;
            for (int64_t i = last; i < t; i += i & -i) tree[i]--;
        } else {
            distinct++;
            tab_h[pos] = key;
        }
        int32_t node = 1;  /* the children of node t: t-1, t-2, t-4, ... below t's lowest bit */
        for (int64_t step = 1; step < (t & -t); step <<= 1) node += tree[t - step];
        tree[t] = node;
        tab_t[pos] = t;
    }
    s->hist[j] = hist;
    s->hist_len[j] = top + 1;
    s->cold[j] = distinct;
    s->keys[j] = distinct;
    free(tab_h); free(tab_t); free(tree);
    return 0;
}

int64_t sd_accesses(const shards_t *s) { return s->n_accesses; }
int64_t sd_kept(const shards_t *s, int j) { return s->kept[j].n; }
int64_t sd_cold(const shards_t *s, int j) { return s->cold[j]; }
int64_t sd_keys(const shards_t *s, int j) { return s->keys[j]; }
int64_t sd_hist_len(const shards_t *s, int j) { return s->hist_len[j]; }

void sd_hist_copy(const shards_t *s, int j, int64_t *out) {
    memcpy(out, s->hist[j], (size_t)s->hist_len[j] * sizeof(int64_t));
}
