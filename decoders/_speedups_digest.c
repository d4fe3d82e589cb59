/*
 * The digests of stored entries: CRC32C (hardware SSE4.2 where the CPU has it, else
 * slicing-by-8 tables), CRC32 (zlib's), and BookKeeper's MAC digest, HMAC-SHA1, from the
 * optional _speedups_mac module (OpenSSL) when it was built; digest_ok checks the digest a
 * stored entry carries, for every scan (BookKeeper's DigestManager subclasses:
 * CRC32CDigestManager, CRC32DigestManager, MacDigestManager, DummyDigestManager).
 */
#include "_speedups.h"

/* SPEEDUPS_PORTABLE_CRC: the tables only (the sanitized test build, so that they run) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SPEEDUPS_PORTABLE_CRC)
#include <nmmintrin.h>
#define HAVE_SSE42_BUILTIN 1
#endif

/* -- CRC32C -------------------------------------------------------------------------- */

static uint32_t crc_table[8][256];   /* CRC32C (Castagnoli) */
static uint32_t crc32_table[8][256]; /* CRC32 (zlib) */
int have_sse42;

/* The slicing-by-8 tables of a reflected CRC-32 polynomial. */
static void
crc_tables(uint32_t t[8][256], uint32_t poly)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
}

void
crc_init(void)
{
    crc_tables(crc_table, 0x82F63B78u);
    crc_tables(crc32_table, 0xEDB88320u);
#ifdef HAVE_SSE42_BUILTIN
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

/* The raw (not inverted) CRC register after n bytes, by the tables t. */
static uint32_t
crc_slice8(uint32_t t[8][256], uint32_t crc, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
              t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
              t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static uint32_t
crc_soft(uint32_t crc, const uint8_t *p, size_t n)
{
    return crc_slice8(crc_table, crc, p, n);
}

#ifdef HAVE_SSE42_BUILTIN
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

/* CRC32C continuing from crc (0 to start), as crc32c.crc32c(data, crc) computes it. */
uint32_t
crc32c_update(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
#ifdef HAVE_SSE42_BUILTIN
    if (have_sse42)
        return ~crc_hw(crc, p, n);
#endif
    return ~crc_soft(crc, p, n);
}

/* crc32c(data, value=0) -> int: CRC32C of a bytes-like object continuing from value, as
 * the crc32c package's crc32c computes it (decoders.checksums takes this one when the
 * module is built: that package's import costs a tenth of a second and 1 MB). */
PyObject *
sp_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned long long value = 0;
    /* K: any int, taken modulo 2^64; its low 32 bits, as the package takes it */
    if (!PyArg_ParseTuple(args, "y*|K:crc32c", &view, &value))
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32c_update((uint32_t)value, (const uint8_t *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* zlib's crc32 (java.util.zip.CRC32) continuing from crc (0 to start). */
uint32_t
crc32_update(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~crc_slice8(crc32_table, ~crc, p, n);
}

/* -- the MAC digest: HMAC-SHA1 from _speedups_mac (OpenSSL), when it was built ---------- */

static const SpeedupsMacApi *mac_api;
static int mac_tried;

/* The MAC module's functions, imported at the first call that asks for them; NULL when
 * it is absent (not built: no libcrypto headers where the package was installed). */
static const SpeedupsMacApi *
mac_module(void)
{
    if (!mac_tried) {
        mac_tried = 1;
        /* the capsule of the module sys.modules holds under that name (PyCapsule_Import
         * would look it up as an attribute of the package instead) */
        PyObject *module = PyImport_ImportModule(SPEEDUPS_MAC_MODULE);
        PyObject *capsule = module != NULL ? PyObject_GetAttrString(module, "_C_API") : NULL;
        const SpeedupsMacApi *api =
            capsule != NULL ? PyCapsule_GetPointer(capsule, SPEEDUPS_MAC_CAPSULE) : NULL;
        Py_XDECREF(capsule); /* the module holds it, and sys.modules the module */
        Py_XDECREF(module);
        if (api == NULL)
            PyErr_Clear();
        else if (api->version == SPEEDUPS_MAC_VERSION && api->state_size <= SPEEDUPS_MAC_STATE)
            mac_api = api;
    }
    return mac_api;
}

PyObject *
sp_mac_available(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(mac_module() != NULL);
}

/*
 * The key argument of a scan for ``digest``: for a MAC digest (2) the 20-byte HMAC key,
 * SHA-1("mac" + password) (decoders.checksums.mac_key; BookKeeper's MacDigestManager),
 * prepared into *buf and *mac set to it; for another digest None or absent, *mac NULL.
 * 0 ok; -1 with an error set: a MAC digest without the MAC module (refused as before it
 * existed), without a key or with one that is not 20 bytes, a key with another digest.
 * Called before a scan takes its buffers and lists: the first call imports a module.
 */
int
mac_setup(const char *fn, int digest, PyObject *key, MacKey *buf, const MacKey **mac)
{
    *mac = NULL;
    int none = key == NULL || key == Py_None;
    if (digest != DIGEST_MAC) {
        if (!none) {
            PyErr_Format(PyExc_ValueError, "%s: a key is for a MAC digest (2) only", fn);
            return -1;
        }
        return 0;
    }
    const SpeedupsMacApi *api = mac_module();
    if (api == NULL) {
        PyErr_Format(PyExc_ValueError, "%s: digest must be CRC32C (3), CRC32 (1) or DUMMY (4)",
                     fn);
        return -1;
    }
    if (none) {
        PyErr_Format(PyExc_ValueError, "%s: a MAC digest (2) needs its key", fn);
        return -1;
    }
    if (!PyBytes_Check(key)) {
        PyErr_Format(PyExc_TypeError, "%s: a MAC key must be bytes", fn);
        return -1;
    }
    if (PyBytes_GET_SIZE(key) != SPEEDUPS_MAC_SIZE) {
        PyErr_Format(PyExc_ValueError, "%s: a MAC key is %d bytes, not %zd", fn,
                     SPEEDUPS_MAC_SIZE, PyBytes_GET_SIZE(key));
        return -1;
    }
    api->prepare(buf->state, (const unsigned char *)PyBytes_AS_STRING(key), SPEEDUPS_MAC_SIZE);
    *mac = buf;
    return 0;
}

/* Whether the MAC stored after the header is the HMAC of the header and the payload
 * (MacDigestManager: the 32-byte header, then the payload). */
static inline int
mac_ok(const MacKey *mac, const uint8_t *entry, const uint8_t *payload, const uint8_t *end)
{
    unsigned char out[SPEEDUPS_MAC_SIZE];
    mac_api->digest(mac->state, entry, BK_HEADER, payload, (size_t)(end - payload), out);
    return memcmp(out, entry + BK_HEADER, SPEEDUPS_MAC_SIZE) == 0;
}

/* The stored digest's size of a digest type; else -1, a ValueError naming fn set. */
int
digest_size_of(int digest, const char *fn)
{
    switch (digest) {
    case DIGEST_CRC32C:
        return 4;
    case DIGEST_CRC32:
        return 8;
    case DIGEST_DUMMY:
        return 0;
    case DIGEST_MAC: /* the scans check it with its key (mac_setup) */
        return SPEEDUPS_MAC_SIZE;
    default:
        PyErr_Format(PyExc_ValueError,
                     "%s: digest must be CRC32 (1), CRC32C (3), DUMMY (4) or MAC (2)", fn);
        return -1;
    }
}

/* Whether the stored digest is the one computed over the header and the payload
 * (decoders.bookkeeper.digest_check: a CRC32 is stored as an 8-byte long); a DUMMY
 * digest stores none; a MAC is checked with ``mac``. size >= BK_HEADER + digest_size.
 * The one digest check of every scan. */
int
digest_ok(const uint8_t *entry, Py_ssize_t size, int digest, int digest_size,
          const MacKey *mac)
{
    const uint8_t *payload = entry + BK_HEADER + digest_size;
    size_t n = (size_t)(entry + size - payload);
    if (digest == DIGEST_CRC32C)
        return crc32c_update(crc32c_update(0, entry, BK_HEADER), payload, n) ==
               be32(entry + BK_HEADER);
    if (digest == DIGEST_CRC32)
        return be32(entry + BK_HEADER) == 0 &&
               crc32_update(crc32_update(0, entry, BK_HEADER), payload, n) ==
                   be32(entry + BK_HEADER + 4);
    if (digest == DIGEST_MAC)
        return mac_ok(mac, entry, payload, entry + size);
    return 1;
}
