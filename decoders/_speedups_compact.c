/*
 * The local engine's key table (KeyTable) and compaction's batch walks: compact_offer,
 * compact_keep, compact_rebuild (pulsarctl_py/engines/local.py,
 * pulsarctl_py/compaction/core.py). The records of a batch are walked by next_record
 * (_speedups_proto.c), as split_batch walks them.
 */
#include "_speedups.h"

/* -- KeyTable: the local engine's in-memory key table -----------------------------------
 *
 * key -> (rank, tombstone), the greatest rank per key, in three allocations for the whole
 * table instead of a key, a rank and a tuple object per key: an open-addressing index of
 * uint32 (0 empty, else an entry's number + 1), a dense array of 12-byte entries (32 bits
 * of the key's hash, where its record is in the arena, its tombstone) and one byte arena
 * of records (the key's length and the stored rank's as varints, the key's bytes, the
 * stored rank). A position rank (core.position_rank: ledger and entry as uint64 BE, batch
 * index + 1 as uint32 BE, 20 bytes) is stored packed: the ledger as a varint, the entry
 * as uint32 BE, the batch index + 1 as uint16 BE (7 bytes for a ledger id below 128, 10
 * below 2^28); any other rank, or one whose entry or index does not fit, as it is. The
 * rank's varint says which: its stored length times two, plus one when packed. Every
 * answer is the rank's own bytes; a packed rank is unpacked to compare or return it.
 * At 10^6 keys of 9 bytes with position ranks that is about 38 bytes a key (8 of index at
 * the load of 1/2 it has then, 12 of entry, 18 of record; 51 with the rank as it is),
 * against 80 for 24-byte slots
 * holding the whole hash and lengths; a rehash copies only the index (4 bytes a slot),
 * and the entries and the arena grow by realloc, whose tail is not touched until used.
 * Hashes are Python's (SipHash with the process secret), so crafted keys cannot force
 * collisions. compact_offer and compact_keep read and update it directly.
 */

typedef struct {
    uint32_t hash;     /* the key's hash's low 32 bits */
    uint32_t at_lo;    /* the record's offset in the arena: low 32 bits */
    uint16_t at_hi;    /* and high 16 */
    uint8_t tombstone; /* the winner is a tombstone */
    uint8_t pad;
} KTEntry;

typedef struct {
    PyObject_HEAD
    uint32_t *index; /* cap slots: 0 empty, else entry number + 1 */
    size_t cap;      /* a power of two, or 0 */
    KTEntry *entries;
    size_t used;     /* keys (entries in use) */
    size_t ent_cap;
    size_t live;     /* keys whose winner is not a tombstone */
    uint8_t *arena;
    size_t arena_len, arena_cap;
} KeyTableObject;

/* One key's record in the arena, decoded. */
typedef struct {
    const uint8_t *key;
    size_t key_len;
    uint8_t *stored;   /* the rank as stored: its bytes, or packed */
    size_t stored_len;
    int packed;        /* stored is a packed position rank (kt_pack) */
} KTRecord;

/* A position rank's length (core.position_rank), and the most a packed one takes: a 64-bit
 * varint (10), the entry (4), the batch index (2). */
#define KT_POS_RANK 20
#define KT_PACKED_MAX 16

static PyTypeObject KeyTableType;

#define KT_MAX_KEYS ((size_t)UINT32_MAX - 1)
#define KT_MAX_ARENA ((size_t)1 << 48)

static inline uint64_t
kt_hash(const uint8_t *key, size_t len)
{
    uint64_t h = (uint64_t)_Py_HashBytes(key, (Py_ssize_t)len);
    return h ? h : 1;
}

static inline size_t
kt_varint_len(size_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *
kt_varint_put(uint8_t *p, size_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline const uint8_t *
kt_varint_get(const uint8_t *p, size_t *v)
{
    size_t out = 0;
    int shift = 0;
    while (*p & 0x80) {
        out |= (size_t)(*p++ & 0x7f) << shift;
        shift += 7;
    }
    *v = out | ((size_t)*p++ << shift);
    return p;
}

static inline size_t
kt_at(const KTEntry *e)
{
    return (size_t)e->at_lo | ((size_t)e->at_hi << 32);
}

static inline KTRecord
kt_record(const KeyTableObject *t, const KTEntry *e)
{
    KTRecord r;
    size_t tag;
    const uint8_t *p = t->arena + kt_at(e);
    p = kt_varint_get(p, &r.key_len);
    p = kt_varint_get(p, &tag);
    r.stored_len = tag >> 1;
    r.packed = (int)(tag & 1);
    r.key = p;
    r.stored = (uint8_t *)p + r.key_len;
    return r;
}

/* The packed form of a position rank into out (KT_PACKED_MAX bytes of room) and its length;
 * 0 when rank is not a position rank whose entry fits 32 bits and batch index + 1 16 bits
 * (it is then stored as it is). */
static inline size_t
kt_pack(const uint8_t *rank, size_t len, uint8_t *out)
{
    if (len != KT_POS_RANK)
        return 0;
    uint64_t ledger = (uint64_t)be64(rank), entry = (uint64_t)be64(rank + 8);
    uint32_t index = be32(rank + 16);
    if (entry > UINT32_MAX || index > UINT16_MAX)
        return 0;
    uint8_t *p = out;
    while (ledger >= 0x80) {
        *p++ = (uint8_t)(ledger | 0x80);
        ledger >>= 7;
    }
    *p++ = (uint8_t)ledger;
    p[0] = (uint8_t)(entry >> 24);
    p[1] = (uint8_t)(entry >> 16);
    p[2] = (uint8_t)(entry >> 8);
    p[3] = (uint8_t)entry;
    p[4] = (uint8_t)(index >> 8);
    p[5] = (uint8_t)index;
    return (size_t)(p + 6 - out);
}

/* A record's rank, its own bytes: the arena's, or unpacked into buf (KT_POS_RANK bytes). */
static inline const uint8_t *
kt_rank(const KTRecord *r, uint8_t *buf, size_t *len)
{
    if (!r->packed) {
        *len = r->stored_len;
        return r->stored;
    }
    const uint8_t *p = r->stored, *end = r->stored + r->stored_len - 6;
    uint64_t ledger = 0;
    int shift = 0;
    while (p < end && (*p & 0x80) && shift < 63) {
        ledger |= (uint64_t)(*p++ & 0x7f) << shift;
        shift += 7;
    }
    ledger |= (uint64_t)(*p++ & 0x7f) << shift;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(ledger >> (56 - 8 * i));
    memset(buf + 8, 0, 4);
    memcpy(buf + 12, p, 4); /* the entry, uint32 BE, as the low half of uint64 BE */
    buf[16] = 0;
    buf[17] = 0;
    memcpy(buf + 18, p + 4, 2);
    *len = KT_POS_RANK;
    return buf;
}

/* The index slot holding key, or the empty slot where it would go (the table has room). */
static inline uint32_t *
kt_slot(KeyTableObject *t, const uint8_t *key, size_t len, uint64_t h)
{
    size_t mask = t->cap - 1, i = (size_t)(uint32_t)h & mask;
    for (;;) {
        uint32_t *s = &t->index[i];
        if (*s == 0)
            return s;
        const KTEntry *e = &t->entries[*s - 1];
        if (e->hash == (uint32_t)h) {
            KTRecord r = kt_record(t, e);
            if (r.key_len == len && memcmp(r.key, key, len) == 0)
                return s;
        }
        i = (i + 1) & mask;
    }
}

/* Room for one more key: the index's load stays at most 2/3, the entries have a free one.
 * 0 ok, -1 no memory. */
static int
kt_reserve(KeyTableObject *t)
{
    if (t->used >= KT_MAX_KEYS) {
        PyErr_SetString(PyExc_MemoryError, "the key table holds 2^32 - 1 keys at most");
        return -1;
    }
    if (t->used == t->ent_cap) {
        /* a quarter more: a large block grows in place (mremap), so a small step costs no
         * copy, and the capacity not yet used is at most a fifth */
        size_t cap = t->ent_cap ? t->ent_cap + t->ent_cap / 4 : 64;
        KTEntry *entries = PyMem_Realloc(t->entries, cap * sizeof(KTEntry));
        if (entries == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->entries = entries;
        t->ent_cap = cap;
    }
    if ((t->used + 1) * 3 <= t->cap * 2)
        return 0;
    size_t cap = t->cap ? t->cap * 2 : 64;
    uint32_t *index = PyMem_Calloc(cap, sizeof(uint32_t));
    if (index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t n = 0; n < t->used; n++) {
        size_t j = (size_t)t->entries[n].hash & (cap - 1);
        while (index[j] != 0)
            j = (j + 1) & (cap - 1);
        index[j] = (uint32_t)(n + 1);
    }
    PyMem_Free(t->index);
    t->index = index;
    t->cap = cap;
    return 0;
}

/* Arena room for n more bytes. 0 ok, -1 no memory. */
static int
kt_arena(KeyTableObject *t, size_t n)
{
    if (t->arena != NULL && t->arena_len + n <= t->arena_cap)
        return 0; /* allocated even for n == 0: a key's bytes never live at NULL */
    if (t->arena_len + n > KT_MAX_ARENA) {
        PyErr_SetString(PyExc_MemoryError, "the key table's arena holds 2^48 bytes at most");
        return -1;
    }
    size_t cap = t->arena_cap ? t->arena_cap : 4096;
    while (cap < t->arena_len + n)
        cap += cap / 4; /* as the entries grow */
    uint8_t *arena = PyMem_Realloc(t->arena, cap);
    if (arena == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->arena = arena;
    t->arena_cap = cap;
    return 0;
}

/* A new record for key and rank at the arena's end; its offset. (size_t)-1 on error. A key
 * already in the arena (a rank of another length) is given by its offset ``key_at``, since
 * growing the arena may move it; otherwise key_at is (size_t)-1. */
static size_t
kt_append(KeyTableObject *t, const uint8_t *key, size_t key_at, size_t key_len,
          const uint8_t *rank, size_t rank_len)
{
    uint8_t packed[KT_PACKED_MAX];
    size_t packed_len = kt_pack(rank, rank_len, packed);
    if (packed_len) {
        rank = packed;
        rank_len = packed_len;
    }
    size_t tag = rank_len << 1 | (packed_len != 0);
    size_t n = kt_varint_len(key_len) + kt_varint_len(tag) + key_len + rank_len;
    if (kt_arena(t, n) < 0)
        return (size_t)-1;
    if (key_at != (size_t)-1)
        key = t->arena + key_at;
    size_t at = t->arena_len;
    uint8_t *p = kt_varint_put(t->arena + at, key_len);
    p = kt_varint_put(p, tag);
    memcpy(p, key, key_len);
    memcpy(p + key_len, rank, rank_len);
    t->arena_len += n;
    return at;
}

static inline void
kt_set_at(KTEntry *e, size_t at)
{
    e->at_lo = (uint32_t)at;
    e->at_hi = (uint16_t)(at >> 32);
}

static inline int
kt_rank_cmp(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len)
{
    int c = memcmp(a, b, a_len < b_len ? a_len : b_len);
    return c != 0 ? c : (a_len > b_len) - (a_len < b_len);
}

/*
 * Set key's state to (rank, tombstone): always (``only_greater`` 0) or when the key is
 * absent or rank is greater than its rank (1, bytes order as Python compares them).
 * 1 a new key, 0 an existing key, -1 error.
 */
static int
kt_set_h(KeyTableObject *t, const uint8_t *key, size_t key_len, uint64_t h, const uint8_t *rank,
         size_t rank_len, int tombstone, int only_greater)
{
    if (kt_reserve(t) < 0)
        return -1;
    uint32_t *s = kt_slot(t, key, key_len, h);
    if (*s != 0) {
        KTEntry *e = &t->entries[*s - 1];
        KTRecord r = kt_record(t, e);
        if (only_greater) {
            uint8_t buf[KT_POS_RANK];
            size_t old_len;
            const uint8_t *old = kt_rank(&r, buf, &old_len);
            if (kt_rank_cmp(rank, rank_len, old, old_len) <= 0)
                return 0;
        }
        uint8_t packed[KT_PACKED_MAX];
        size_t packed_len = kt_pack(rank, rank_len, packed);
        if (packed_len && r.packed && r.stored_len == packed_len)
            memcpy(r.stored, packed, packed_len);
        else if (!packed_len && !r.packed && r.stored_len == rank_len)
            memcpy(r.stored, rank, rank_len);
        else { /* stored another way or length: the record again at the arena's end (rare:
                * a ledger id past a varint length, a rank of another kind) */
            size_t at = kt_append(t, NULL, (size_t)(r.key - t->arena), key_len, rank, rank_len);
            if (at == (size_t)-1)
                return -1;
            kt_set_at(e, at);
        }
        t->live += (size_t)!tombstone - (size_t)!e->tombstone;
        e->tombstone = (uint8_t)(tombstone != 0);
        return 0;
    }
    size_t at = kt_append(t, key, (size_t)-1, key_len, rank, rank_len);
    if (at == (size_t)-1)
        return -1;
    KTEntry *e = &t->entries[t->used];
    e->hash = (uint32_t)h;
    kt_set_at(e, at);
    e->tombstone = (uint8_t)(tombstone != 0);
    e->pad = 0;
    *s = (uint32_t)(++t->used);
    t->live += !tombstone;
    return 1;
}

static int
kt_set(KeyTableObject *t, const uint8_t *key, size_t key_len, const uint8_t *rank,
       size_t rank_len, int tombstone, int only_greater)
{
    return kt_set_h(t, key, key_len, kt_hash(key, key_len), rank, rank_len, tombstone,
                    only_greater);
}

/* The entry of key (whose hash is h), or NULL. */
static inline KTEntry *
kt_find_h(KeyTableObject *t, const uint8_t *key, size_t key_len, uint64_t h)
{
    if (t->cap == 0)
        return NULL;
    uint32_t *s = kt_slot(t, key, key_len, h);
    return *s != 0 ? &t->entries[*s - 1] : NULL;
}

static inline KTEntry *
kt_find(KeyTableObject *t, const uint8_t *key, size_t key_len)
{
    return kt_find_h(t, key, key_len, kt_hash(key, key_len));
}

static PyObject *
kt_state(KeyTableObject *t, KTEntry *e)
{
    KTRecord r = kt_record(t, e);
    uint8_t buf[KT_POS_RANK];
    size_t len;
    const uint8_t *bytes = kt_rank(&r, buf, &len);
    PyObject *rank = PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)len);
    if (rank == NULL)
        return NULL;
    PyObject *out = PyTuple_Pack(2, rank, e->tombstone ? Py_True : Py_False);
    Py_DECREF(rank);
    return out;
}

static void
kt_clear(KeyTableObject *t)
{
    PyMem_Free(t->index);
    PyMem_Free(t->entries);
    PyMem_Free(t->arena);
    t->index = NULL;
    t->entries = NULL;
    t->arena = NULL;
    t->cap = t->used = t->ent_cap = t->live = t->arena_len = t->arena_cap = 0;
}

static void
kt_dealloc(KeyTableObject *t)
{
    kt_clear(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int
kt_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", name, want);
        return -1;
    }
    for (Py_ssize_t i = 0; i < want && i < 2; i++) {
        if (!PyBytes_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "%s: keys and ranks are bytes", name);
            return -1;
        }
    }
    return 0;
}

static PyObject *
kt_put_common(KeyTableObject *t, PyObject *const *args, Py_ssize_t nargs, int only_greater)
{
    if (kt_args(args, nargs, 3, only_greater ? "offer" : "put") < 0)
        return NULL;
    int tombstone = PyObject_IsTrue(args[2]);
    if (tombstone < 0)
        return NULL;
    int rc = kt_set(t, (const uint8_t *)PyBytes_AS_STRING(args[0]),
                    (size_t)PyBytes_GET_SIZE(args[0]), (const uint8_t *)PyBytes_AS_STRING(args[1]),
                    (size_t)PyBytes_GET_SIZE(args[1]), tombstone, only_greater);
    if (rc < 0)
        return NULL;
    return PyBool_FromLong(rc);
}

/* offer(key, rank, tombstone) -> True when the key is new: the greater rank wins. */
static PyObject *
kt_offer(KeyTableObject *t, PyObject *const *args, Py_ssize_t nargs)
{
    return kt_put_common(t, args, nargs, 1);
}

/* put(key, rank, tombstone) -> True when the key is new: set the key's state. */
static PyObject *
kt_put(KeyTableObject *t, PyObject *const *args, Py_ssize_t nargs)
{
    return kt_put_common(t, args, nargs, 0);
}

/* get(key) -> (rank, tombstone) or None */
static PyObject *
kt_get(KeyTableObject *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (kt_args(args, nargs, 1, "get") < 0)
        return NULL;
    KTEntry *e = kt_find(t, (const uint8_t *)PyBytes_AS_STRING(args[0]),
                         (size_t)PyBytes_GET_SIZE(args[0]));
    if (e == NULL)
        Py_RETURN_NONE;
    return kt_state(t, e);
}

/* min_rank() -> the least rank of any key, or None when empty */
static PyObject *
kt_min_rank(KeyTableObject *t, PyObject *unused)
{
    uint8_t least_buf[KT_POS_RANK], buf[KT_POS_RANK];
    const uint8_t *least = NULL;
    size_t least_len = 0;
    for (size_t n = 0; n < t->used; n++) {
        KTRecord r = kt_record(t, &t->entries[n]);
        size_t len;
        const uint8_t *rank = kt_rank(&r, buf, &len);
        if (least == NULL || kt_rank_cmp(rank, len, least, least_len) < 0) {
            if (rank == buf) { /* unpacked: buf is reused for the next record */
                memcpy(least_buf, buf, len);
                rank = least_buf;
            }
            least = rank;
            least_len = len;
        }
    }
    if (least == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)least, (Py_ssize_t)least_len);
}

/* scan(pos, limit) -> (next, [(key, rank, tombstone), ...]): up to limit keys from entry
 * pos on, in the order they came; next is -1 after the last. The table must not change between
 * the calls of one scan. */
static PyObject *
kt_scan(KeyTableObject *t, PyObject *args)
{
    Py_ssize_t pos, limit;
    if (!PyArg_ParseTuple(args, "nn:scan", &pos, &limit))
        return NULL;
    if (pos < 0 || limit < 1) {
        PyErr_SetString(PyExc_ValueError, "scan(pos >= 0, limit >= 1)");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    size_t i = (size_t)pos;
    for (; i < t->used && PyList_GET_SIZE(out) < limit; i++) {
        const KTEntry *e = &t->entries[i];
        KTRecord r = kt_record(t, e);
        uint8_t buf[KT_POS_RANK];
        size_t len;
        const uint8_t *bytes = kt_rank(&r, buf, &len);
        PyObject *key = PyBytes_FromStringAndSize((const char *)r.key, (Py_ssize_t)r.key_len);
        PyObject *rank =
            key == NULL ? NULL : PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)len);
        PyObject *item = rank == NULL ? NULL
                                      : PyTuple_Pack(3, key, rank,
                                                     e->tombstone ? Py_True : Py_False);
        Py_XDECREF(key);
        Py_XDECREF(rank);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    Py_ssize_t next = i < t->used ? (Py_ssize_t)i : -1;
    PyObject *result = Py_BuildValue("(nO)", next, out);
    Py_DECREF(out);
    return result;
}

/* A span of entries for live_entries: ledger, first entry, count, and the bit of the first. */
typedef struct {
    uint64_t ledger, first, count, bit;
} KTSpan;

static uint64_t
kt_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* live_entries(key_prefix, skip, spans, bits) -> others: for every key that starts with
 * key_prefix and whose winner is not a tombstone, whose rank is a position (ledger and
 * entry as uint64 BE, then anything but skip's bytes), set the bit of that entry in bits
 * when a span holds it. spans: (ledger, first entry, count) as three uint64 BE each,
 * rising by (ledger, first entry) and disjoint; a span's bits follow the earlier spans'
 * (bit 0 is bits[0] & 1). bits must hold them all. others counts the keys that do not start
 * with key_prefix. The table must not change during the call (it calls no Python code). */
static PyObject *
kt_live_entries(KeyTableObject *t, PyObject *args)
{
    const char *kp, *skip, *raw;
    Py_ssize_t kp_len, skip_len, raw_len;
    Py_buffer bits;
    if (!PyArg_ParseTuple(args, "y#y#y#w*:live_entries", &kp, &kp_len, &skip, &skip_len, &raw,
                          &raw_len, &bits))
        return NULL;
    PyObject *result = NULL;
    size_t nspans = (size_t)raw_len / 24;
    KTSpan *spans = NULL;
    if ((size_t)raw_len % 24 != 0) {
        PyErr_SetString(PyExc_ValueError, "live_entries: spans of 24 bytes each");
        goto done;
    }
    spans = PyMem_Malloc((nspans ? nspans : 1) * sizeof(KTSpan));
    if (spans == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < nspans; i++) {
        const uint8_t *p = (const uint8_t *)raw + 24 * i;
        KTSpan *sp = &spans[i];
        sp->ledger = kt_be64(p);
        sp->first = kt_be64(p + 8);
        sp->count = kt_be64(p + 16);
        sp->bit = total;
        if (sp->count > UINT64_MAX - sp->first || sp->count > UINT64_MAX - total) {
            PyErr_SetString(PyExc_ValueError, "live_entries: a span past 2^64");
            goto done;
        }
        if (i > 0) {
            const KTSpan *prev = &spans[i - 1];
            if (sp->ledger < prev->ledger ||
                (sp->ledger == prev->ledger && sp->first < prev->first + prev->count)) {
                PyErr_SetString(PyExc_ValueError,
                                "live_entries: spans not rising or overlapping");
                goto done;
            }
        }
        total += sp->count;
    }
    if (total > (uint64_t)bits.len * 8) {
        PyErr_SetString(PyExc_ValueError, "live_entries: bits shorter than the spans");
        goto done;
    }
    uint8_t *out = (uint8_t *)bits.buf;
    size_t others = 0;
    for (size_t i = 0; i < t->used; i++) {
        const KTEntry *e = &t->entries[i];
        KTRecord r = kt_record(t, e);
        if (r.key_len < (size_t)kp_len || memcmp(r.key, kp, (size_t)kp_len) != 0) {
            others++;
            continue;
        }
        if (e->tombstone || nspans == 0)
            continue;
        uint8_t buf[KT_POS_RANK];
        size_t rank_len;
        const uint8_t *rank = kt_rank(&r, buf, &rank_len);
        if (rank_len < 16)
            continue;
        if (rank_len - 16 == (size_t)skip_len && memcmp(rank + 16, skip, (size_t)skip_len) == 0)
            continue;
        uint64_t ledger = kt_be64(rank), entry = kt_be64(rank + 8);
        /* the last span starting at or before (ledger, entry) */
        size_t lo = 0, hi = nspans;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            const KTSpan *m = &spans[mid];
            if (m->ledger < ledger || (m->ledger == ledger && m->first <= entry))
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == 0)
            continue;
        const KTSpan *sp = &spans[lo - 1];
        if (sp->ledger != ledger || entry - sp->first >= sp->count)
            continue;
        uint64_t bit = sp->bit + (entry - sp->first);
        out[bit >> 3] |= (uint8_t)(1u << (bit & 7));
    }
    result = PyLong_FromSize_t(others);
done:
    PyMem_Free(spans);
    PyBuffer_Release(&bits);
    return result;
}

/* clear(): forget every key and give the memory back */
static PyObject *
kt_clear_method(KeyTableObject *t, PyObject *unused)
{
    kt_clear(t);
    Py_RETURN_NONE;
}

static Py_ssize_t
kt_len(KeyTableObject *t)
{
    return (Py_ssize_t)t->used;
}

static PyObject *
kt_get_live(KeyTableObject *t, void *closure)
{
    return PyLong_FromSize_t(t->live);
}

static PyObject *
kt_get_nbytes(KeyTableObject *t, void *closure)
{
    return PyLong_FromSize_t(t->cap * sizeof(uint32_t) + t->used * sizeof(KTEntry) +
                             t->arena_len);
}

/* What the table may hold at once when it next grows: the old and the new index during a
 * rehash (three times the present one), the entries and the arena during a realloc that
 * copies (twice each). A budget checked against this before a batch holds through the
 * batch. */
static PyObject *
kt_get_peak_nbytes(KeyTableObject *t, void *closure)
{
    size_t cap = t->cap ? t->cap : 64;
    return PyLong_FromSize_t(3 * cap * sizeof(uint32_t) + 2 * t->ent_cap * sizeof(KTEntry) +
                             2 * t->arena_cap);
}

static PyMethodDef kt_methods[] = {
    {"offer", (PyCFunction)(void (*)(void))kt_offer, METH_FASTCALL,
     "offer(key, rank, tombstone) -> bool: keep the greater rank; True for a new key."},
    {"put", (PyCFunction)(void (*)(void))kt_put, METH_FASTCALL,
     "put(key, rank, tombstone) -> bool: set the key's state; True for a new key."},
    {"get", (PyCFunction)(void (*)(void))kt_get, METH_FASTCALL,
     "get(key) -> (rank, tombstone) or None."},
    {"min_rank", (PyCFunction)kt_min_rank, METH_NOARGS, "min_rank() -> bytes or None."},
    {"scan", (PyCFunction)kt_scan, METH_VARARGS,
     "scan(pos, limit) -> (next, [(key, rank, tombstone)]); next -1 at the end."},
    {"live_entries", (PyCFunction)kt_live_entries, METH_VARARGS,
     "live_entries(key_prefix, skip, spans, bits) -> others."},
    {"clear", (PyCFunction)kt_clear_method, METH_NOARGS, "clear(): empty the table."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kt_getset[] = {
    {"live", (getter)kt_get_live, NULL, "keys whose winner is not a tombstone", NULL},
    {"nbytes", (getter)kt_get_nbytes, NULL,
     "bytes the table holds (the index, the entries and records in use)", NULL},
    {"peak_nbytes", (getter)kt_get_peak_nbytes, NULL, "bytes it may hold when it next grows",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods kt_as_sequence = {
    .sq_length = (lenfunc)kt_len,
};

static PyTypeObject KeyTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pulsarctl_py.decoders._speedups.KeyTable",
    .tp_basicsize = sizeof(KeyTableObject),
    .tp_dealloc = (destructor)kt_dealloc,
    .tp_as_sequence = &kt_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KeyTable(): key -> (rank, tombstone), the greatest rank per key, in C memory.",
    .tp_methods = kt_methods,
    .tp_getset = kt_getset,
};

/* key_table() -> a new, empty KeyTable */
PyObject *
sp_key_table(PyObject *self, PyObject *unused)
{
    if (!(KeyTableType.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&KeyTableType) < 0)
        return NULL;
    return KeyTableType.tp_alloc(&KeyTableType, 0); /* zeroed: an empty table */
}

/* -- compaction: phase one's key table, phase two's kept records ----------------------
 *
 * compact_offer and compact_keep walk a decompressed batch with split_batch's grammar and
 * parser (the same records are irregular for both, and then these return None and the
 * caller takes the Python path), without building a Message per record: phase one
 * updates the key table (a KeyTable) in place, phase two answers which records a batch
 * keeps and, for a batch whose records are all live and in order, rebuilds it. A kept
 * record is copied verbatim only when parse_smm found it canonical; otherwise the
 * rebuild answers None and the Python path rebuilds the batch.
 */

typedef struct {
    const uint8_t *record; /* the 4-byte metadata size, the metadata, the value */
    Py_ssize_t length;     /* the whole record */
    const uint8_t *key;
    Py_ssize_t key_len;
    long long batch_index;
    uint64_t hash;      /* of the table key (table_keys) */
    Py_ssize_t key_at;  /* the table key's offset in Walk.keys */
    int32_t payload_size;
    char has_key, canonical;
} LiveRecord;

/* The live records of a batch, in order, as split_batch would return them (placeholders
 * counted in *holes). recs has room for count records; idx: the batch indexes, or NULL
 * for 0 .. count - 1. A live record with null_value, or a batch index outside -1 .. 2^32 -
 * 2, is irregular here (the Python path decides). 1 regular, 0 irregular, -1 error. */
static int
walk_batch(const uint8_t *buf, Py_ssize_t end, Py_ssize_t count, const long long *idx,
           LiveRecord *recs, Py_ssize_t *live, Py_ssize_t *holes)
{
    Py_ssize_t pos = 0, n = 0, h = 0, value_at;
    for (Py_ssize_t j = 0; j < count; j++) {
        long long batch_index = idx != NULL ? idx[j] : (long long)j;
        const uint8_t *record = buf + pos;
        Smm m;
        int rc = next_record(buf, end, &pos, &m, NULL, 0, &value_at);
        if (rc <= 0)
            return rc;
        if (m.compacted_out) {
            h++;
            continue;
        }
        if (m.null_value || batch_index < -1 || batch_index > 0xFFFFFFFELL)
            return 0;
        if (m.has_key && !utf8(m.key, m.key_len))
            return 0;
        LiveRecord *r = &recs[n++];
        r->record = record;
        r->length = (buf + pos) - record;
        r->key = m.key;
        r->key_len = m.key_len;
        r->batch_index = batch_index;
        r->payload_size = m.payload_size;
        r->has_key = m.has_key;
        r->canonical = m.canonical;
    }
    *live = n;
    *holes = h;
    return 1;
}

/* A walked batch: its live records, their table keys, and what to release. */
typedef struct {
    Py_buffer view;
    LiveRecord *recs;
    Py_ssize_t live, holes;
    uint8_t *keys; /* each keyed record's table key (key prefix + key), one after another */
    char *kept;    /* phase two: kept[i] for recs[i] */
} Walk;

static void
walk_release(Walk *w)
{
    PyMem_Free(w->keys);
    PyMem_Free(w->kept);
    PyMem_Free(w->recs);
    if (w->view.obj != NULL)
        PyBuffer_Release(&w->view);
}

/* The arguments the helpers share, checked, and the batch walked into w (zeroed by the
 * caller, walk_release it). 1 regular, 0 irregular (answer None), -1 error. */
static int
compact_walk(PyObject *plain, Py_ssize_t count, PyObject *indexes, PyObject *rank_prefix,
             Walk *w)
{
    if (rank_prefix != NULL && PyBytes_GET_SIZE(rank_prefix) != 16) {
        PyErr_SetString(PyExc_ValueError, "rank prefix must be 16 bytes");
        return -1;
    }
    if (PyObject_GetBuffer(plain, &w->view, PyBUF_SIMPLE) < 0)
        return -1;
    /* every record takes at least 4 + 2 bytes: more records than that cannot be regular */
    if (count < 0 || count > w->view.len / 4)
        return 0;
    long long *idx;
    int rc = batch_indexes(indexes, count, &idx);
    if (rc <= 0)
        return rc;
    w->recs = PyMem_Malloc(sizeof(LiveRecord) * (size_t)(count ? count : 1));
    w->kept = PyMem_Calloc((size_t)(count ? count : 1), 1);
    if (w->recs == NULL || w->kept == NULL) {
        PyMem_Free(idx);
        PyErr_NoMemory();
        return -1;
    }
    rc = walk_batch((const uint8_t *)w->view.buf, w->view.len, count, idx, w->recs, &w->live,
                    &w->holes);
    PyMem_Free(idx);
    return rc;
}

/*
 * The table key of every keyed record (key_prefix + key) into w->keys, and its hash. With
 * a table, the slots the keys hash to are prefetched, then the arena bytes of the keys
 * found there: a batch's look-ups then wait for memory together, not one after another.
 * 0 ok, -1 no memory.
 */
static int
table_keys(Walk *w, PyObject *key_prefix, KeyTableObject *t)
{
    size_t kp = (size_t)PyBytes_GET_SIZE(key_prefix), total = 0;
    for (Py_ssize_t i = 0; i < w->live; i++)
        if (w->recs[i].has_key)
            total += kp + (size_t)w->recs[i].key_len;
    if ((w->keys = PyMem_Malloc(total ? total : 1)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t at = 0;
    for (Py_ssize_t i = 0; i < w->live; i++) {
        LiveRecord *r = &w->recs[i];
        if (!r->has_key)
            continue;
        r->key_at = (Py_ssize_t)at;
        memcpy(w->keys + at, PyBytes_AS_STRING(key_prefix), kp);
        memcpy(w->keys + at + kp, r->key, (size_t)r->key_len);
        at += kp + (size_t)r->key_len;
        if (t != NULL) {
            r->hash = kt_hash(w->keys + r->key_at, kp + (size_t)r->key_len);
#ifdef __GNUC__
            if (t->cap)
                __builtin_prefetch(&t->index[(size_t)(uint32_t)r->hash & (t->cap - 1)]);
#endif
        }
    }
#ifdef __GNUC__
    if (t != NULL && t->cap) {
        for (Py_ssize_t i = 0; i < w->live; i++) {
            uint32_t n = t->index[(size_t)(uint32_t)w->recs[i].hash & (t->cap - 1)];
            if (w->recs[i].has_key && n != 0)
                __builtin_prefetch(&t->entries[n - 1]);
        }
    }
#endif
    return 0;
}

/* A record's rank: the entry's 16-byte position prefix and (batch index + 1) as uint32 BE,
 * as core.position_rank packs it. */
static inline void
record_rank(uint8_t *out, PyObject *rank_prefix, const LiveRecord *r)
{
    uint32_t i = (uint32_t)(r->batch_index + 1);
    memcpy(out, PyBytes_AS_STRING(rank_prefix), 16);
    out[16] = (uint8_t)(i >> 24);
    out[17] = (uint8_t)(i >> 16);
    out[18] = (uint8_t)(i >> 8);
    out[19] = (uint8_t)i;
}

static inline size_t
table_key_len(PyObject *key_prefix, const LiveRecord *r)
{
    return (size_t)PyBytes_GET_SIZE(key_prefix) + (size_t)r->key_len;
}

/*
 * compact_offer(plain, count, indexes, key_prefix, rank_prefix, table)
 *     -> (records, new_keys) | None
 *
 * Phase one of a batch in publishing order into a KeyTable: every live keyed record is
 * offered as (key_prefix + key, rank, payload_size <= 0), the greater rank winning
 * (LocalKeyTable.offer). records: keyed records offered. None (the table unchanged): the
 * batch is not regular.
 */
PyObject *
sp_compact_offer(PyObject *self, PyObject *args)
{
    PyObject *plain, *indexes, *key_prefix, *rank_prefix;
    KeyTableObject *table;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OnOSSO!:compact_offer", &plain, &count, &indexes, &key_prefix,
                          &rank_prefix, &KeyTableType, &table))
        return NULL;
    Walk w = {0};
    Py_ssize_t offered = 0, new_keys = 0;
    PyObject *result = NULL;
    int rc = compact_walk(plain, count, indexes, rank_prefix, &w);
    if (rc <= 0) {
        if (rc == 0)
            result = new_ref(Py_None);
        goto done;
    }
    if (table_keys(&w, key_prefix, table) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < w.live; i++) {
        const LiveRecord *r = &w.recs[i];
        if (!r->has_key)
            continue;
        offered++;
        uint8_t rank[20];
        record_rank(rank, rank_prefix, r);
        rc = kt_set_h(table, w.keys + r->key_at, table_key_len(key_prefix, r), r->hash, rank, 20,
                      r->payload_size <= 0, 1);
        if (rc < 0)
            goto done;
        new_keys += rc;
    }
    result = Py_BuildValue("(nn)", offered, new_keys);
done:
    walk_release(&w);
    return result;
}

/* The batch rebuilt from its records (all live and in order): kept records copied, the
 * others replaced by ``placeholder`` (dropped for PIP-429). None when a kept record's
 * metadata is not canonical. */
static PyObject *
rebuild_batch(const Walk *w, int pip_429, PyObject *placeholder)
{
    Py_ssize_t total = 0, ph = PyBytes_GET_SIZE(placeholder);
    for (Py_ssize_t i = 0; i < w->live; i++) {
        if (w->kept[i]) {
            if (!w->recs[i].canonical)
                Py_RETURN_NONE;
            total += w->recs[i].length;
        }
        else if (!pip_429)
            total += ph;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < w->live; i++) {
        if (w->kept[i]) {
            memcpy(at, w->recs[i].record, (size_t)w->recs[i].length);
            at += w->recs[i].length;
        }
        else if (!pip_429) {
            memcpy(at, PyBytes_AS_STRING(placeholder), (size_t)ph);
            at += ph;
        }
    }
    return out;
}

/* Append (index, key, rank) of a record phase two asks the caller about. 0 ok, -1 error. */
static int
ask(PyObject *lists[3], const Walk *w, const LiveRecord *r, PyObject *key_prefix,
    const uint8_t *rank_bytes)
{
    PyObject *item[3] = {
        PyLong_FromLongLong(r->batch_index),
        PyBytes_FromStringAndSize((const char *)w->keys + r->key_at,
                                  (Py_ssize_t)table_key_len(key_prefix, r)),
        PyBytes_FromStringAndSize((const char *)rank_bytes, 20),
    };
    int rc = 0;
    for (int k = 0; k < 3; k++) {
        if (rc == 0 && (item[k] == NULL || PyList_Append(lists[k], item[k]) < 0))
            rc = -1;
        Py_XDECREF(item[k]);
    }
    return rc;
}

/*
 * compact_keep(plain, count, indexes, key_prefix, rank_prefix, table, retain_null_key,
 *              pip_429, placeholder)
 *     -> (keep, keyless_dropped, deleted, whole, rebuilt, asked) | None
 *
 * Phase two of a batch in publishing order. keep: batch indexes kept, in record order
 * (keyless ones when retained; with a KeyTable ``table``, the records that are their key's
 * live winner). With ``table`` None, asked = (indexes, keys, ranks) of the records whose
 * key the caller must look up (live keyed records), else None. deleted: phase one's
 * ``deletedMessage`` for the batch. whole: every record live and in order (no placeholders,
 * no compacted_batch_indexes). rebuilt: the new batch when whole, the table is a KeyTable,
 * something is kept and every kept record is canonical; else None.
 */
PyObject *
sp_compact_keep(PyObject *self, PyObject *args)
{
    PyObject *plain, *indexes, *key_prefix, *rank_prefix, *table, *placeholder;
    Py_ssize_t count;
    int retain, pip_429;
    if (!PyArg_ParseTuple(args, "OnOSSOppS:compact_keep", &plain, &count, &indexes, &key_prefix,
                          &rank_prefix, &table, &retain, &pip_429, &placeholder))
        return NULL;
    if (table != Py_None && !Py_IS_TYPE(table, &KeyTableType)) {
        PyErr_SetString(PyExc_TypeError, "table must be a KeyTable or None");
        return NULL;
    }
    KeyTableObject *t = table == Py_None ? NULL : (KeyTableObject *)table;
    Walk w = {0};
    Py_ssize_t dropped = 0, kept_count = 0;
    int deleted = 1;
    PyObject *result = NULL, *keep = NULL, *asked = NULL, *rebuilt = NULL;
    PyObject *lists[3] = {NULL, NULL, NULL};
    int rc = compact_walk(plain, count, indexes, rank_prefix, &w);
    if (rc <= 0) {
        if (rc == 0)
            result = new_ref(Py_None);
        goto done;
    }
    if (table_keys(&w, key_prefix, t) < 0 || (keep = PyList_New(0)) == NULL)
        goto done;
    for (int k = 0; t == NULL && k < 3; k++)
        if ((lists[k] = PyList_New(0)) == NULL)
            goto done;
    for (Py_ssize_t i = 0; i < w.live; i++) {
        const LiveRecord *r = &w.recs[i];
        if (!r->has_key) {
            if (retain) {
                w.kept[i] = 1;
                deleted = 0;
            }
            else
                dropped++;
        }
        else if (r->payload_size > 0) { /* a tombstone is never kept */
            deleted = 0;
            uint8_t rank[20];
            record_rank(rank, rank_prefix, r);
            if (t == NULL) {
                if (ask(lists, &w, r, key_prefix, rank) < 0)
                    goto done;
            }
            else {
                KTEntry *e = kt_find_h(t, w.keys + r->key_at, table_key_len(key_prefix, r), r->hash);
                if (e != NULL) {
                    KTRecord found = kt_record(t, e);
                    uint8_t buf[KT_POS_RANK];
                    size_t len;
                    const uint8_t *won = kt_rank(&found, buf, &len);
                    w.kept[i] = !e->tombstone && len == 20 && memcmp(won, rank, 20) == 0;
                }
                else
                    w.kept[i] = 0;
            }
        }
        if (w.kept[i]) {
            kept_count++;
            PyObject *index = PyLong_FromLongLong(r->batch_index);
            if (index == NULL || PyList_Append(keep, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
        }
    }
    int whole = indexes == Py_None && w.holes == 0 && w.live == count;
    if (t == NULL)
        asked = PyTuple_Pack(3, lists[0], lists[1], lists[2]);
    else
        asked = new_ref(Py_None);
    if (whole && kept_count && t != NULL)
        rebuilt = rebuild_batch(&w, pip_429, placeholder);
    else
        rebuilt = new_ref(Py_None);
    if (asked != NULL && rebuilt != NULL)
        result = Py_BuildValue("(OnOOOO)", keep, dropped, deleted ? Py_True : Py_False,
                               whole ? Py_True : Py_False, rebuilt, asked);
done:
    Py_XDECREF(keep);
    Py_XDECREF(asked);
    Py_XDECREF(rebuilt);
    for (int k = 0; k < 3; k++)
        Py_XDECREF(lists[k]);
    walk_release(&w);
    return result;
}

/*
 * compact_rebuild(plain, count, keep, pip_429, placeholder) -> bytes | None
 *
 * The rebuilt batch of a whole batch (every record live, in order) keeping the records
 * whose batch index is in ``keep``; None when the batch is not regular and whole, or a
 * kept record is not canonical (the Python path rebuilds it).
 */
PyObject *
sp_compact_rebuild(PyObject *self, PyObject *args)
{
    PyObject *plain, *keep_list, *placeholder;
    Py_ssize_t count;
    int pip_429;
    if (!PyArg_ParseTuple(args, "OnO!pS:compact_rebuild", &plain, &count, &PyList_Type,
                          &keep_list, &pip_429, &placeholder))
        return NULL;
    Walk w = {0};
    PyObject *result = NULL;
    int rc = compact_walk(plain, count, Py_None, NULL, &w);
    if (rc <= 0 || w.holes != 0 || w.live != count) {
        if (rc >= 0)
            result = new_ref(Py_None);
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keep_list); i++) {
        PyObject *o = PyList_GET_ITEM(keep_list, i);
        if (!PyLong_CheckExact(o)) { /* no __index__: nothing may change the list */
            PyErr_SetString(PyExc_TypeError, "compact_rebuild: keep holds ints");
            goto done;
        }
        Py_ssize_t index = PyLong_AsSsize_t(o);
        if (index == -1 && PyErr_Occurred())
            goto done;
        if (index < 0 || index >= w.live) {
            PyErr_SetString(PyExc_IndexError, "kept batch index out of range");
            goto done;
        }
        w.kept[index] = 1;
    }
    result = rebuild_batch(&w, pip_429, placeholder);
done:
    walk_release(&w);
    return result;
}
