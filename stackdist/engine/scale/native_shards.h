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
    int64_t hist_len[MAX_SEEDS], cold[MAX_SEEDS], keys[MAX_SEEDS];
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

#endif
