/*
 * What the compiled units of the _speedups module share (internal: each decoders/_speedups*.c
 * file includes it; none includes another .c file). The module and its rule are described in
 * _speedups.c; each unit says at its top what it holds:
 *
 *   _speedups.c           the module: bind, its method table and constants
 *   _speedups_proto.c     the protobuf messages: MessageMetadata (one parser, a field
 *                         mask), SingleMessageMetadata and a batch's records (one walker),
 *                         KeyValue, BrokerEntryMetadata
 *   _speedups_digest.c    CRC32C, CRC32 and the MAC digest (by _speedups_mac): one check
 *                         of a stored entry's digest
 *   _speedups_heads.c     where a scan's entries come from (locations items, index slots,
 *                         records already read), one entry locator, one head builder and
 *                         one scan loop: scan_heads, scan_slots, record_heads
 *   _speedups_verify.c    verify's entry checks and one verify loop over the same sources:
 *                         verify_heads, verify_slots, verify_records
 *   _speedups_layouts.c   index layouts brought to slots: item_slots, log_slots
 *   _speedups_payloads.c  verify's payload check: payload_items, payload_slots,
 *                         payload_records
 *   _speedups_batch.c     split_batch
 *   _speedups_compact.c   the local engine's KeyTable and compaction's batch walks
 *   _speedups_json.c      inspect's JSON: entry_doc and entry_lines
 *   _speedups_v3.c        v3_read_replies (bookie protocol v3 answers to reads)
 */
#ifndef SPEEDUPS_H
#define SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_speedups_mac.h"

/* the units' shared functions are the module's own: none is exported from the .so (its
 * one exported symbol is PyInit__speedups, declared with default visibility) */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* -- objects built in the slots of a Python dataclass (_speedups.c) ------------------- */

#define MAX_SLOTS 32

typedef struct {
    PyTypeObject *type;
    Py_ssize_t n;
    Py_ssize_t offsets[MAX_SLOTS];
} Bound;

enum {
    BIND_MESSAGE = 0, BIND_HEAD = 1, BIND_ENTRY = 2, BIND_LAYER = 3, BIND_CHECK = 4,
    BIND_PROBLEM = 5, BIND_KINDS = 6
};

extern Bound bound[BIND_KINDS];

/* A new instance with its slots set to values[0..n) (references stolen, also on error). */
PyObject *new_bound(int kind, PyObject **values);

/* Message slots, in the order entry.Message declares its fields. */
enum {
    M_KEY, M_VALUE, M_PROPERTIES, M_BATCH_INDEX, M_NULL_VALUE, M_EVENT_TIME, M_SEQUENCE_ID,
    M_PUBLISH_TIME, M_KEY_B64, M_ORDERING_KEY, M_INDEX, M_LEDGER_ID, M_ENTRY_ID, M_CHUNKS,
    M_FIELDS
};

/* EntryHead slots, in the order decoders.heads.EntryHead declares its fields. */
enum {
    H_LEDGER_ID, H_ENTRY_ID, H_SIZE, H_LAC, H_LENGTH, H_DIGEST_OK, H_BROKER_TIMESTAMP, H_INDEX,
    H_BROKER_METADATA, H_PROBLEMS, H_FIELDS
};

/* -- small helpers ------------------------------------------------------------------- */

/* o with a new reference */
static inline PyObject *
new_ref(PyObject *o)
{
    Py_INCREF(o);
    return o;
}

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int64_t
be64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)be32(p) << 32) | be32(p + 4));
}

/* UTF-8 text as str; NULL with no exception set when it is not valid UTF-8. */
static inline PyObject *
text(const uint8_t *s, Py_ssize_t n)
{
    PyObject *out = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (out == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear();
    return out;
}

/* -- protobuf wire format (only what the messages need) ------------------------------ */

/*
 * The Python path parses with the protobuf library (upb), so these accept exactly the
 * encodings upb accepts and nothing more (protocolbuffers/protobuf:upb/wire/decode.c,
 * _upb_Decoder_DecodeVarint, _upb_Decoder_DecodeTag, upb_Decoder_DecodeSize; checked
 * against the library by tests/decoders/test_speedups.py):
 *   value  at most 10 bytes; bits past the 64th are dropped (a 10th byte of 0x7f is
 *          taken as 1), so an overlong or a wide encoding still parses;
 *   tag    at most 5 bytes and at most 2^32 - 1, field number not 0;
 *   length at most 5 bytes, and no further than the end.
 */

/* A varint value; 0 when truncated or longer than 10 bytes. */
static inline int
read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    const uint8_t *q = *p;
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && q < end; shift += 7) {
        uint8_t byte = *q++;
        v |= (uint64_t)(byte & 0x7f) << shift; /* at shift 63 only the low bit stays */
        if (!(byte & 0x80)) {
            *p = q;
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* A varint of at most 5 bytes (a tag, a length); 0 when truncated or longer. */
static inline int
read_varint5(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    const uint8_t *start = *p;
    return read_varint(p, end, out) && *p - start <= 5;
}

/* A field's tag: field number and wire type; 0 for field 0 or a tag upb refuses. */
static inline int
read_tag(const uint8_t **p, const uint8_t *end, uint32_t *field, int *wire)
{
    uint64_t tag;
    if (!read_varint5(p, end, &tag) || tag > 0xFFFFFFFFu || (tag >> 3) == 0)
        return 0;
    *field = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    return 1;
}

/* A length-delimited field's bytes; 0 when the length is refused or passes the end. */
static inline int
read_bytes(const uint8_t **p, const uint8_t *end, const uint8_t **start, Py_ssize_t *len)
{
    uint64_t n;
    if (!read_varint5(p, end, &n) || n > (uint64_t)(end - *p))
        return 0;
    *start = *p;
    *len = (Py_ssize_t)n;
    *p += n;
    return 1;
}

/* Skip an unknown field; groups and reserved wire types are not regular. */
static inline int
skip_field(const uint8_t **p, const uint8_t *end, int wire)
{
    uint64_t v;
    const uint8_t *s;
    Py_ssize_t n;
    switch (wire) {
    case 0:
        return read_varint(p, end, &v);
    case 1:
        if (end - *p < 8)
            return 0;
        *p += 8;
        return 1;
    case 2:
        return read_bytes(p, end, &s, &n);
    case 5:
        if (end - *p < 4)
            return 0;
        *p += 4;
        return 1;
    default:
        return 0;
    }
}

/* -- the messages (_speedups_proto.c) ------------------------------------------------- */

/* Valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF): text the
 * Python decoder takes as it is. */
int utf8(const uint8_t *s, Py_ssize_t n);

/* Property keys repeat from record to record ("trace-id", "schema", ...): one str per
 * distinct key per batch, whose hash is then computed once. */
#define KEY_CACHE 16
typedef struct {
    int n;
    const uint8_t *at[KEY_CACHE];
    Py_ssize_t len[KEY_CACHE];
    PyObject *str[KEY_CACHE];
} KeyCache;

void key_cache_clear(KeyCache *c);

/* One KeyValue, into dict as str -> str when dict is not NULL (else only checked). 1 ok,
 * 0 irregular, -1 Python error. */
int parse_property(const uint8_t *p, const uint8_t *end, PyObject *dict, KeyCache *keys,
                   char *canonical);

/* A record's SingleMessageMetadata (formats.md §4). */
typedef struct {
    PyObject *properties; /* dict, owned; NULL when the caller did not ask for it */
    const uint8_t *key;
    Py_ssize_t key_len;
    const uint8_t *ordering_key;
    Py_ssize_t ordering_key_len;
    uint64_t event_time, sequence_id;
    int32_t payload_size;
    char has_key, has_event_time, has_ordering_key, has_sequence_id;
    char compacted_out, b64, null_value, canonical;
} Smm;

/* The record of a batch at buf[*pos] ([u32 size][SingleMessageMetadata][payload_size
 * bytes], payload.parse_batch's grammar): its metadata into m (its properties as a new
 * dict with ``properties``), *value_at where its value starts, *pos past it. 1 regular, 0
 * irregular, -1 Python error (m->properties NULL on 0 and -1). */
int next_record(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, Smm *m, KeyCache *keys,
                int properties, Py_ssize_t *value_at);

/* The batch indexes a caller gives (None: 0 .. count - 1; else a list of count ints),
 * copied out. 1 ok (*out NULL for None, else PyMem memory), 0 not regular, -1 error. */
int batch_indexes(PyObject *indexes, Py_ssize_t count, long long **out);

/* A MessageMetadata, read for what ``want`` asks (a mask of MD_*): */
enum {
    /* what verify checks on every entry (the Python decoder reads it without a problem):
     * the required producer_name, sequence_id and publish_time, every string field valid
     * UTF-8, each property and encryption key regular, the batch count */
    MD_CHECKED = 1,
    /* what verify's payload step branches on: compression, uncompressed size, batch
     * count; ``other`` for the fields that make the payload the decoder's (encryption
     * keys, a marker, chunks, compacted batch indexes, a Kafka-on-Pulsar entry.format) */
    MD_PAYLOAD = 2,
};

typedef struct {
    uint64_t publish_time, num_messages, compression, uncompressed_size;
    char batched, has_uncompressed, other;
} Md;

/* 1 read (with MD_CHECKED: and regular), 0 not. */
int parse_md(const uint8_t *p, const uint8_t *end, Md *md, unsigned want);

/* The 0x0e02 layer at p (its magic checked by the caller): the byte after it, or NULL
 * when it is not regular; its BrokerEntryMetadata fields 1 and 2 read. */
const uint8_t *skip_bem(const uint8_t *p, const uint8_t *end, uint64_t *ts, int *has_ts,
                        uint64_t *index, int *has_index);

/* -- stored entries: digests (_speedups_digest.c) ------------------------------------- */

#define BK_HEADER 32
#define MAGIC_BEM 0x0E02
#define MAGIC_CHECKSUM 0x0E01

/* BookKeeper's digest types (LedgerMetadataFormat.DigestType) */
enum { DIGEST_CRC32 = 1, DIGEST_MAC = 2, DIGEST_CRC32C = 3, DIGEST_DUMMY = 4 };

extern int have_sse42;
void crc_init(void);
/* CRC32C continuing from crc (0 to start), as crc32c.crc32c(data, crc) computes it. */
uint32_t crc32c_update(uint32_t crc, const uint8_t *p, size_t n);
/* zlib's crc32 (java.util.zip.CRC32) continuing from crc (0 to start). */
uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n);

/* A MAC key prepared by _speedups_mac: its inner and outer keyed SHA-1 states. */
typedef struct {
    _Alignas(16) unsigned char state[SPEEDUPS_MAC_STATE];
} MacKey;

/* The key argument of a scan for ``digest`` (see _speedups_digest.c): 0 ok, -1 error. */
int mac_setup(const char *fn, int digest, PyObject *key, MacKey *buf, const MacKey **mac);
/* The stored digest's size of a digest type; else -1, a ValueError naming fn set. */
int digest_size_of(int digest, const char *fn);
/* Whether the stored digest is the one computed over the header and the payload (a
 * DUMMY digest stores none; a MAC is checked with ``mac``). size >= BK_HEADER +
 * digest_size. */
int digest_ok(const uint8_t *entry, Py_ssize_t size, int digest, int digest_size,
              const MacKey *mac);

/* -- where scans find entries (_speedups_heads.c) -------------------------------------- */

/* why a scan stops at an item (module constants HEADS_*, VERIFY_*, SLOTS_ODD) */
enum {
    HEADS_END = 0, HEADS_WINDOW = 1, HEADS_IRREGULAR = 2, HEADS_OTHER_LEDGER = 3,
    VERIFY_GAP = 4, VERIFY_VALUES = 5, SLOTS_ODD = 6
};

/* the slots of verify's state (a list the Python side keeps between calls:
 * pulsarctl_py/verify/fastscan.py; module constant VERIFY_SLOTS) */
enum {
    S_EXPECTED,     /* the next entry id expected */
    S_ENTRIES,      /* entries checked here (added to) */
    S_BYTES,        /* their payload bytes (added to) */
    S_PREV_INDEX,   /* the previous BEM index in topic order, or None */
    S_PREV_ENTRY,   /* set to the entry id when the previous index moves here */
    S_BEM_SEEN,     /* 0/1: an entry with BEM was seen in the topic */
    S_IN_LAST,      /* 0/1: this is the topic's last ledger */
    S_MAX_BEFORE,   /* the largest index in ledgers before the last, or None */
    S_MAX_ENTRY,    /* set to the entry id when it moves here */
    S_TS_MAX,       /* the largest timestamp so far, or None */
    S_TS_ENTRY,     /* set to the entry id when it moves here */
    S_ORDERED,      /* 0: the ordered checks are Python's for now: every entry is VALUES */
    /* VALUES: the entry the ordered checks need Python for */
    S_V_ENTRY, S_V_PAYLOAD, S_V_INDEX, S_V_COUNT, S_V_TS, S_V_BROKER_TS,
    S_SLOTS
};

/* the largest window offset taken: entry log offsets are 32-bit */
#define SLOTS_WINDOW_LIMIT (1LL << 40)
/* a slot table grows by at most this many entries past twice its size (log_slots) */
#define SLOTS_TABLE_SLACK (1 << 20)

/* The bytes of an entry log from file offset ``start`` that a scan reads (buf NULL when
 * there is none). */
typedef struct {
    Py_buffer view;
    const uint8_t *buf;
    long long start;
    Py_ssize_t len;
} Window;

/* The window argument (None or a bytes-like) from file offset start, as the items scans
 * check it (first: their start; a negative one, a window before offset 0 or past int64 is
 * a ValueError) and as the slot scans and payload checks do (a window past
 * SLOTS_WINDOW_LIMIT a ValueError). 0 ok (release it with window_release), -1 error. */
int window_open(Window *w, PyObject *window, long long start, Py_ssize_t first);
int window_slots(Window *w, PyObject *window, long long start);
void window_release(Window *w);

/* The arguments the slot scans share, checked: 0 ok, -1 with a ValueError set. */
int slots_check(const char *fn, Py_ssize_t n, Py_ssize_t start, long long first_entry,
                long long window_start);
/* The EntryHead class is bound: 0, else -1 with a RuntimeError naming fn. */
int heads_bound(const char *fn);

/* The entry record whose body starts at the log offset ``offset`` (its i32 size in the 4
 * bytes before, as BookKeeper's readEntry reads it): -1 with *entry and *size set; else
 * HEADS_WINDOW (the window does not hold it) or HEADS_IRREGULAR (a size below min_size). */
int window_record(const Window *w, long long offset, int min_size, const uint8_t **entry,
                  int32_t *size);

/* the three forms the Python side hands entries over in */
enum { FROM_ITEMS, FROM_SLOTS, FROM_RECORDS };

/* A scan's source of entries: one locator for all of them (source_entry). */
typedef struct {
    int from;
    PyObject *list;           /* items, records */
    const uint8_t *slots;     /* slots: 8 bytes each */
    Py_ssize_t nslots;
    long long first_entry;    /* slots: the entry id slot 0 names */
    long long ledger_id, log_id;
    Window w;                 /* items, slots */
    int digest_size;
    int any_buffer;           /* records: bytes-likes taken (else exact bytes only) */
} Source;

/* What source_entry found. */
typedef struct {
    int64_t entry_id;
    const uint8_t *entry;
    int32_t size;
    PyObject *data;  /* records: the record held while its bytes are read, else NULL */
    Py_buffer view;  /* records of any buffer: the bytes-like's buffer (view.obj NULL else) */
} Found;

/* source_entry's answers besides -1 (an entry) and a status */
enum { SOURCE_SKIP = -2, SOURCE_ERROR = -3 };

/* A DbLedgerStorage locations item: -1 with the entry id and the packed location of an
 * exact (16-byte key, 8-byte value) pair of bytes of ledger ledger_id; HEADS_OTHER_LEDGER
 * for another ledger's; HEADS_IRREGULAR for anything else. */
int read_item(PyObject *item, long long ledger_id, int64_t *entry_id, int64_t *packed);

Py_ssize_t source_size(const Source *s);
/* The entry at position i of the source, checked as BookKeeper's readEntry checks it
 * (record size, ledger and entry ids): -1 with f set (found_release it), SOURCE_SKIP (a
 * slot naming no entry), SOURCE_ERROR (a Python error set), or the status to stop at i
 * with. With ``expected`` (verify), an entry id other than *expected stops it too. */
int source_entry(Source *s, Py_ssize_t i, const long long *expected, Found *f);
void found_release(Found *f);

/* -- the entry points (each unit's sp_*) ---------------------------------------------- */

PyObject *sp_split_batch(PyObject *self, PyObject *args);
PyObject *sp_scan_heads(PyObject *self, PyObject *args);
PyObject *sp_scan_slots(PyObject *self, PyObject *args);
PyObject *sp_record_heads(PyObject *self, PyObject *args);
PyObject *sp_verify_heads(PyObject *self, PyObject *args);
PyObject *sp_verify_slots(PyObject *self, PyObject *args);
PyObject *sp_verify_records(PyObject *self, PyObject *args);
PyObject *sp_item_slots(PyObject *self, PyObject *args);
PyObject *sp_log_slots(PyObject *self, PyObject *args);
PyObject *sp_payload_items(PyObject *self, PyObject *args);
PyObject *sp_payload_slots(PyObject *self, PyObject *args);
PyObject *sp_payload_records(PyObject *self, PyObject *args);
PyObject *sp_mac_available(PyObject *self, PyObject *unused);
PyObject *sp_crc32c(PyObject *self, PyObject *args);
PyObject *sp_v3_read_replies(PyObject *self, PyObject *args);
PyObject *sp_key_table(PyObject *self, PyObject *unused);
PyObject *sp_compact_offer(PyObject *self, PyObject *args);
PyObject *sp_compact_keep(PyObject *self, PyObject *args);
PyObject *sp_compact_rebuild(PyObject *self, PyObject *args);
PyObject *sp_entry_lines(PyObject *self, PyObject *args);
PyObject *sp_entry_doc(PyObject *self, PyObject *entry);

/* _speedups_json.c: the slot names bind checks a kind against (NULL: any), and its
 * interned dict keys (0 ok, -1 error) */
const char *const *bind_names(int kind);
int json_keys_init(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
