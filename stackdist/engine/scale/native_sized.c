/* Sized fixed-rate SHARDS for the native sampler (see native_shards.c): keys with sizes, their
 * delimited-text scan (key<delim>size lines) and the sized replay. A sampled access's distance
 * is its own size plus the sizes of the sampled keys above it in the LRU stack (as
 * hashed_stack.shards_replay); each warm access's (distance, size) is kept for the caller to
 * count, and a key whose size changes stops the replay (the compiled path reports it). */
#include <stdlib.h>
#include <string.h>

#include "native_shards.h"

int sd_feed_sized_block(shards_t *s, const uint64_t *keys, const int64_t *sizes, int64_t n) {
    s->kind |= 2;
    for (int64_t i = 0; i < n && s->total_size >= 0; i++)
        s->total_size = s->total_size + sizes[i] > (1LL << 62) ? -1 : s->total_size + sizes[i];
    for (int j = 0; j < s->k; j++) {
        uint64_t salt = s->salt[j], cut = s->cut[j];
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix(keys[i], salt);
            if (h <= cut && (sd_push(&s->kept[j], h) || sd_push(&s->sizes[j], (uint64_t)sizes[i]))) return -1;
        }
        if (s->kept[j].n > s->limit) {
            s->too_large = 1;
            return -1;
        }
    }
    return 0;
}

/* [+-]digits (1 to 18) then delim then digits (a size in 1..2**40, estimate.EXACT_SIZE), an optional \r; the
 * line is buf[start, end). 0 with *key and *size set, 1 for a blank line, -1 otherwise. */
static int parse_sized_line(const uint8_t *buf, int64_t start, int64_t end, uint8_t delim,
                            uint64_t *key, int64_t *size) {
    if (end > start && buf[end - 1] == '\r') end--;
    if (end == start) return 1;
    int neg = 0;
    int64_t i = start;
    if (buf[i] == '+' || buf[i] == '-') { neg = buf[i] == '-'; i++; }
    uint64_t v = 0, z = 0;
    int digits = 0;
    for (; i < end && buf[i] >= '0' && buf[i] <= '9'; i++, digits++) v = v * 10 + (uint64_t)(buf[i] - '0');
    if (digits == 0 || digits > 18 || i >= end || buf[i] != delim) return -1;
    i++;
    digits = 0;
    for (; i < end && buf[i] >= '0' && buf[i] <= '9'; i++, digits++) z = z * 10 + (uint64_t)(buf[i] - '0');
    if (digits == 0 || digits > 18 || i != end || z < 1 || z > (1ULL << 40)) return -1;  /* EXACT_SIZE */
    *key = neg ? (uint64_t)0 - v : v;
    *size = (int64_t)z;
    return 0;
}

/* Feed the key<delim>size lines of buf (blank lines skipped): the accesses fed, -1 at the first
 * line of another shape, -2 out of memory. */
int64_t sd_feed_sized_lines(shards_t *s, const uint8_t *buf, int64_t len, int delim) {
    uint64_t keys[BLOCK];
    int64_t sizes[BLOCK], count = 0, start = 0;
    int m = 0;
    while (start < len) {
        const uint8_t *nl = memchr(buf + start, '\n', (size_t)(len - start));
        int64_t end = nl ? nl - buf : len;
        int got = parse_sized_line(buf, start, end, (uint8_t)delim, &keys[m], &sizes[m]);
        if (got < 0) return -1;
        if (got == 0 && ++m == BLOCK) {
            if (sd_feed_sized_block(s, keys, sizes, m)) return -2;
            count += m;
            m = 0;
        }
        start = end + 1;
    }
    if (m && sd_feed_sized_block(s, keys, sizes, m)) return -2;
    count += m;
    s->n_accesses += count;
    return count;
}

/* One seed's sized replay (the unit replay of native_shards.c with a Fenwick tree of sizes).
 * Returns 0, -1 out of memory, -3 when a key's size changed. O(m log m). */
int sd_replay_sized_one(shards_t *s, int j) {
    const uint64_t *h = s->kept[j].v;
    const int64_t *size = (const int64_t *)s->sizes[j].v;
    int64_t m = s->kept[j].n, total = 0, cold_size = 0, sampled = 0;
    table_t tab;
    int64_t *tree = calloc((size_t)m + 1, sizeof(int64_t));
    int code = sd_table_init(&tab, 1 << 12, 1) || !tree ? -1 : 0;
    s->out_d[j].n = s->out_s[j].n = 0;
    for (int64_t t = 1; t <= m && code == 0; t++) {
        uint64_t key = h[t - 1];
        int64_t z = size[t - 1], pos = sd_table_slot(&tab, key), last = tab.t[pos];
        sampled += z;
        if (last) {
            if (tab.size[pos] != z) { code = -3; break; }
            int64_t before = 0;
            for (int64_t i = last; i > 0; i -= i & -i) before += tree[i];
            if (sd_push(&s->out_d[j], (uint64_t)(total - before + z)) || sd_push(&s->out_s[j], (uint64_t)z)) code = -1;
            for (int64_t i = last; i < t; i += i & -i) tree[i] -= z;
        } else {
            if (2 * (tab.used + 1) > tab.mask + 1) {
                if (sd_table_grow(&tab)) { code = -1; break; }
                pos = sd_table_slot(&tab, key);
            }
            tab.used++;
            tab.h[pos] = key;
            tab.size[pos] = z;
            total += z;
            cold_size += z;
        }
        int64_t node = z;  /* the children of node t: t-1, t-2, t-4, ... below t's lowest bit */
        for (int64_t step = 1; step < (t & -t); step <<= 1) node += tree[t - step];
        tree[t] = node;
        tab.t[pos] = t;
    }
    s->keys[j] = tab.used;
    s->cold_size[j] = cold_size;
    s->sampled_size[j] = sampled;
    sd_table_free(&tab);
    free(tree);
    return code;
}

int64_t sd_kind(const shards_t *s) { return s->kind; }
int64_t sd_total_size(const shards_t *s) { return s->total_size; }
int64_t sd_warm(const shards_t *s, int j) { return s->out_d[j].n; }
int64_t sd_cold_size(const shards_t *s, int j) { return s->cold_size[j]; }
int64_t sd_sampled_size(const shards_t *s, int j) { return s->sampled_size[j]; }

void sd_warm_copy(const shards_t *s, int j, int64_t *d, int64_t *size) {
    memcpy(d, s->out_d[j].v, (size_t)s->out_d[j].n * sizeof(int64_t));
    memcpy(size, s->out_s[j].v, (size_t)s->out_s[j].n * sizeof(int64_t));
}

/* Feed n keys and their sizes (each in 1..2**62). Returns 0, or -1 when memory ran out. */
int sd_feed_sized_values(shards_t *s, const uint64_t *keys, const int64_t *sizes, int64_t n) {
    for (int64_t lo = 0; lo < n; lo += BLOCK)
        if (sd_feed_sized_block(s, keys + lo, sizes + lo, n - lo < BLOCK ? n - lo : BLOCK)) return -1;
    s->n_accesses += n;
    return 0;
}
