/* The native SHARDS sampler's shared declarations (native_shards.c; sized samples in
 * native_sized.c; scanners of other input forms, native_*.c, feed it through sd_feed_block or
 * sd_feed_sized_block). */
#ifndef STACKDIST_NATIVE_SHARDS_H
#define STACKDIST_NATIVE_SHARDS_H
#include <stdint.h>

#define MAX_SEEDS 62
#define BLOCK 2048          /* keys a scanner collects before feeding them */

typedef struct {
    uint64_t *v;
    int64_t n, cap;
} vec_t;

typedef struct {
    int k;
    uint64_t salt[MAX_SEEDS], cut[MAX_SEEDS];
    vec_t kept[MAX_SEEDS];          /* each seed's sampled keys (their hashes), in trace order */
    int64_t n_accesses;
    int64_t *hist[MAX_SEEDS];       /* after sd_replay_one: hist[j][d] = sampled accesses at distance d */
    int64_t hist_len[MAX_SEEDS], keys[MAX_SEEDS];  /* keys: distinct sampled keys, each cold once */
    int kind;                       /* what was fed: 1 unit sizes, 2 sizes, 3 both (the caller declines) */
    int64_t total_size;             /* sized: the sizes of every access fed; -1 past 2**62 */
    vec_t sizes[MAX_SEEDS];         /* sized: each sampled access's size, beside kept */
    vec_t out_d[MAX_SEEDS], out_s[MAX_SEEDS];      /* after sd_replay_sized_one: warm accesses' distance, size */
    int64_t cold_size[MAX_SEEDS], sampled_size[MAX_SEEDS];
    int64_t limit;                  /* most sampled accesses a seed keeps (sd_set_limit); past it: */
    int too_large;                  /* set, and the feeding fails: the caller's compiled path, O(S) memory, takes over */
} shards_t;

/* Hash n keys (n <= BLOCK or more) under every seed and keep each seed's sampled ones, in order;
 * the caller adds n to s->n_accesses. Returns 0, or -1 when memory ran out. */
int sd_feed_block(shards_t *s, const uint64_t *keys, int64_t n);

/* The same for keys with sizes (each in 1..2**62). Returns 0, or -1 when memory ran out. */
int sd_feed_sized_block(shards_t *s, const uint64_t *keys, const int64_t *sizes, int64_t n);

/* Append h to the vector. Returns 0, or -1 when memory ran out. */
int sd_push(vec_t *vec, uint64_t h);

/* splitmix64's finalizer of x ^ salt (hashed_stack._mix): a bijection of the 64-bit values. */
static inline uint64_t mix(uint64_t x, uint64_t salt) {
    x ^= salt;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* The value of the 8 ASCII digits in x (the first in its lowest byte). */
static inline uint64_t eight_digits(uint64_t x) {
    x = ((x & 0x0F0F0F0F0F0F0F0FULL) * 2561) >> 8;
    x = ((x & 0x00FF00FF00FF00FFULL) * 6553601) >> 16;
    return ((x & 0x0000FFFF0000FFFFULL) * 42949672960001ULL) >> 32;
}

/* How many of x's bytes, from the lowest, are ASCII digits (0..8). */
static inline int leading_digits(uint64_t x) {
    uint64_t bad = ((x & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL)
                 | (((x & 0x0F0F0F0F0F0F0F0FULL) + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL);
    if (!bad) return 8;
    return __builtin_ctzll(bad) >> 3;
}

/* A linear-probing table from a key's hash to its latest position (1-based; 0 = empty) and,
 * for a sized replay, its size; kept at most half full (sd_table_grow doubles it). */
typedef struct {
    uint64_t *h;
    int64_t *t, *size;  /* size: NULL for a unit-size replay */
    int64_t mask, used;
} table_t;

/* An empty table of `slots` (a power of two), with sizes when `sized`. 0, or -1 out of memory
 * (then sd_table_free it). */
int sd_table_init(table_t *tab, int64_t slots, int sized);
void sd_table_free(table_t *tab);
int sd_table_grow(table_t *tab);

static inline int64_t sd_table_slot(const table_t *tab, uint64_t key) {
    int64_t pos = (int64_t)(key & (uint64_t)tab->mask);
    while (tab->t[pos] && tab->h[pos] != key) pos = (pos + 1) & tab->mask;
    return pos;
}

#endif
