/*
 * BookKeeper's MAC digest for the native paths of _speedups: HMAC-SHA1 (RFC 2104) by
 * OpenSSL's libcrypto. An optional extension of its own, so that _speedups builds where
 * libcrypto's headers are absent; it gives _speedups a PyCapsule (see _speedups_mac.h).
 *
 * The key's inner and outer SHA-1 states (the key XOR ipad / opad block absorbed) are
 * computed once per key; per entry a copy of each is continued and finished. The
 * low-level SHA1_* functions on a copied SHA_CTX do that with no allocation; measured
 * faster on 1 KiB entries than EVP_MD_CTX_copy_ex on preallocated contexts (about 4.2-5.4
 * against 5.6-5.9 us per entry, OpenSSL 3.0). They are deprecated in OpenSSL 3.0, hence
 * the API level asked for below (the functions are still there, without the warning).
 *
 * The module has no function of its own: its digest is checked against Python's hmac
 * through the native scans of MAC ledgers (tests/support/fuzz_native.py).
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_API_COMPAT 0x10100000L
#include <Python.h>
#include <openssl/sha.h>
#include <string.h>

#include "_speedups_mac.h"

typedef struct {
    SHA_CTX inner, outer;
} MacState;

_Static_assert(sizeof(MacState) <= SPEEDUPS_MAC_STATE, "MacState too large");

static void
mac_prepare(void *state, const unsigned char *key, size_t key_len)
{
    MacState *s = state;
    unsigned char block[SHA_CBLOCK];
    /* a key longer than a block would be hashed first (RFC 2104 §2); BookKeeper's key
     * is SHA-1's 20 bytes, and the callers give at most a block */
    if (key_len > SHA_CBLOCK)
        key_len = SHA_CBLOCK;
    memset(block, 0x36, sizeof block);
    for (size_t i = 0; i < key_len; i++)
        block[i] ^= key[i];
    SHA1_Init(&s->inner);
    SHA1_Update(&s->inner, block, sizeof block);
    memset(block, 0x5c, sizeof block);
    for (size_t i = 0; i < key_len; i++)
        block[i] ^= key[i];
    SHA1_Init(&s->outer);
    SHA1_Update(&s->outer, block, sizeof block);
}

static void
mac_digest(const void *state, const unsigned char *a, size_t an, const unsigned char *b,
           size_t bn, unsigned char out[SPEEDUPS_MAC_SIZE])
{
    const MacState *s = state;
    unsigned char inner[SHA_DIGEST_LENGTH];
    SHA_CTX c = s->inner;
    SHA1_Update(&c, a, an);
    SHA1_Update(&c, b, bn);
    SHA1_Final(inner, &c);
    c = s->outer;
    SHA1_Update(&c, inner, sizeof inner);
    SHA1_Final(out, &c);
}

static const SpeedupsMacApi api = {
    SPEEDUPS_MAC_VERSION, sizeof(MacState), mac_prepare, mac_digest,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups_mac",
    "BookKeeper's MAC digest (HMAC-SHA1 by OpenSSL) for the native paths of _speedups.", -1,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups_mac(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *capsule = PyCapsule_New((void *)&api, SPEEDUPS_MAC_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
