/*
 * What _speedups_mac (built with OpenSSL's libcrypto) gives the main module _speedups,
 * through a PyCapsule: BookKeeper's MAC digest, HMAC-SHA1 (RFC 2104) over an entry's
 * header and payload, keyed with SHA-1("mac" + password)
 * (apache/bookkeeper:bookkeeper-server/src/main/java/org/apache/bookkeeper/proto/checksum/
 * MacDigestManager.java, genDigest and update). The main module imports the capsule only
 * when a MAC digest is asked for, and refuses MAC as before when it is absent.
 */
#ifndef SPEEDUPS_MAC_H
#define SPEEDUPS_MAC_H

#include <stddef.h>

#define SPEEDUPS_MAC_MODULE "pulsarctl_py.decoders._speedups_mac"
#define SPEEDUPS_MAC_CAPSULE SPEEDUPS_MAC_MODULE "._C_API"
#define SPEEDUPS_MAC_VERSION 1
/* the bytes the main module holds a prepared key in (state_size must fit) */
#define SPEEDUPS_MAC_STATE 512
#define SPEEDUPS_MAC_SIZE 20 /* a MAC digest's bytes, and its key's */

typedef struct {
    int version;
    size_t state_size;
    /* state: SPEEDUPS_MAC_STATE bytes, aligned as a max_align_t; key: at most 64 bytes.
     * The keyed inner and outer SHA-1 states, computed once per key. */
    void (*prepare)(void *state, const unsigned char *key, size_t key_len);
    /* out: HMAC-SHA1 of a (an bytes) then b (bn bytes), with no allocation */
    void (*digest)(const void *state, const unsigned char *a, size_t an, const unsigned char *b,
                   size_t bn, unsigned char out[SPEEDUPS_MAC_SIZE]);
} SpeedupsMacApi;

#endif
