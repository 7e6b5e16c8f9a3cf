/* The native SHARDS sampler's shared declarations (native_shards.c; scanners of other input
 * forms, native_*.c, feed it through sd_feed_block). */
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
} shards_t;

/* Hash n keys (n <= BLOCK or more) under every seed and keep each seed's sampled ones, in order;
 * the caller adds n to s->n_accesses. Returns 0, or -1 when memory ran out. */
int sd_feed_block(shards_t *s, const uint64_t *keys, int64_t n);

#endif
