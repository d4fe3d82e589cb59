/*
 * Compiled fast paths of ledgerctl's decoders. Optional: every function here has a
 * pure-Python counterpart, and `pulsarctl_py.decoders.speedups` falls back to it when
 * this module was not built (or LEDGERCTL_PURE_PYTHON is set).
 *
 * Rule: these functions handle only the regular case. On anything irregular (a size
 * past the end, a protobuf field with an unexpected wire type, a missing required field,
 * text that is not UTF-8, ...) they return None and the caller takes the Python path,
 * which then reports the exact problem. So every error message and every decision about
 * damaged data stays in one place, the Python decoder, and the two paths give equal
 * results for the input this module accepts (tests/test_speedups.py checks that on
 * generated and on mutated input).
 *
 *   bind(kind, cls, names)   objects are built directly in the slots of a
 *                            dataclass(slots=True) named by the Python side
 *   split_batch(...)         a decompressed batch -> Message objects (formats.md §4)
 *   crc32c(data, crc=0)      CRC32C (Castagnoli), SSE4.2 where the CPU has it
 *   entry_heads(...)         bookie entries cut from an entry log: ids, digest, BEM
 *   verify_heads(...)        the same, checked as `verify` checks every entry
 *   verify_records(...)      entries already read (any storage), checked the same way
 *   mac_available()          whether MAC digests are checked here (by _speedups_mac)
 *   v3_read_replies(...)     a bookie's v3 answers to reads, many frames in one call
 *   entry_doc(entry)         Entry.to_json() of a regular decoded entry (inspect's JSON)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_speedups_mac.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HAVE_SSE42_BUILTIN 1
#endif

/* -- objects built in the slots of a Python dataclass ------------------------------- */

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
static const char *const *bind_names(int kind); /* _speedups_json.c */
static Bound bound[BIND_KINDS];

/* bind(kind, cls, names): remember where each named slot of cls lives. cls must be a
 * class made in Python right on object with __slots__ and no __dict__ (a
 * dataclass(slots=True)), each name one of its own writable object slots, once: new_bound
 * then fills exactly those slots of a zeroed instance. */
static PyObject *
sp_bind(PyObject *self, PyObject *args)
{
    int kind;
    PyObject *cls, *names;
    if (!PyArg_ParseTuple(args, "iOO!:bind", &kind, &cls, &PyTuple_Type, &names))
        return NULL;
    if (kind < 0 || kind >= BIND_KINDS) {
        PyErr_SetString(PyExc_ValueError, "unknown kind");
        return NULL;
    }
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (n > MAX_SLOTS || type->tp_dictoffset != 0 || type->tp_itemsize != 0 ||
        !PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE) || type->tp_base != &PyBaseObject_Type) {
        PyErr_SetString(PyExc_TypeError, "cls must be a slots class on object without __dict__");
        return NULL;
    }
    const char *const *want = bind_names(kind);
    if (want != NULL) { /* the slots the C code reads by position, by name */
        Py_ssize_t count = 0;
        while (want[count] != NULL)
            count++;
        int same = count == n;
        for (Py_ssize_t i = 0; same && i < n; i++) {
            PyObject *name = PyTuple_GET_ITEM(names, i);
            same = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, want[i]) == 0;
        }
        if (!same) {
            PyErr_Format(PyExc_TypeError, "%R: its slots are not the ones kind %d reads", cls, kind);
            return NULL;
        }
    }
    Bound b = {type, n, {0}};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_CheckExact(name)) {
            PyErr_SetString(PyExc_TypeError, "slot names must be str");
            return NULL;
        }
        PyObject *descr = PyDict_GetItemWithError(type->tp_dict, name);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            PyDescr_TYPE(descr) != type) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%R is not a slot of %R", name, cls);
            return NULL;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY) || m->offset < 0 ||
            (size_t)m->offset + sizeof(PyObject *) > (size_t)type->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "slot %R is not a plain object slot", name);
            return NULL;
        }
        for (Py_ssize_t j = 0; j < i; j++) {
            if (b.offsets[j] == m->offset) {
                PyErr_Format(PyExc_TypeError, "slot %R named twice", name);
                return NULL;
            }
        }
        b.offsets[i] = m->offset;
    }
    PyTypeObject *old = bound[kind].type;
    Py_INCREF(cls);
    bound[kind] = b;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

/* A new instance with its slots set to values[0..n) (references stolen, also on error). */
static PyObject *
new_bound(int kind, PyObject **values)
{
    Bound *b = &bound[kind];
    PyObject *obj = b->type->tp_alloc(b->type, 0);
    if (obj == NULL) {
        for (Py_ssize_t i = 0; i < b->n; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < b->n; i++)
        *(PyObject **)((char *)obj + b->offsets[i]) = values[i];
    return obj;
}

/* -- protobuf wire format (only what the messages below need) ----------------------- */

/*
 * The Python path parses with the protobuf library (upb), so these accept exactly the
 * encodings upb accepts and nothing more (protocolbuffers/protobuf:upb/wire/decode.c,
 * _upb_Decoder_DecodeVarint, _upb_Decoder_DecodeTag, upb_Decoder_DecodeSize; checked
 * against the library by tests/test_speedups.py):
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

/* o with a new reference */
static inline PyObject *
new_ref(PyObject *o)
{
    Py_INCREF(o);
    return o;
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

/* Property keys repeat from record to record ("trace-id", "schema", ...): one str per
 * distinct key per batch, whose hash is then computed once. */
#define KEY_CACHE 16
typedef struct {
    int n;
    const uint8_t *at[KEY_CACHE];
    Py_ssize_t len[KEY_CACHE];
    PyObject *str[KEY_CACHE];
} KeyCache;

static PyObject *
cached_text(KeyCache *c, const uint8_t *s, Py_ssize_t n)
{
    for (int i = 0; i < c->n; i++) {
        if (c->len[i] == n && memcmp(c->at[i], s, (size_t)n) == 0)
            return new_ref(c->str[i]);
    }
    PyObject *out = text(s, n);
    if (out != NULL && c->n < KEY_CACHE) {
        c->at[c->n] = s;
        c->len[c->n] = n;
        c->str[c->n++] = new_ref(out);
    }
    return out;
}

static void
key_cache_clear(KeyCache *c)
{
    for (int i = 0; i < c->n; i++)
        Py_DECREF(c->str[i]);
    c->n = 0;
}

/* -- SingleMessageMetadata (formats.md §4) ----------------------------------------------
 *
 * One parser for split_batch and the compaction helpers. It accepts what the Python path
 * (payload.parse_batch, protobuf) reads without a problem and nothing else: fields 1, 2 and
 * 7 length-delimited, 3 to 10 varints, payload_size present, every KeyValue with its key
 * and value (required) in UTF-8. It also notes whether the record is in the canonical form
 * protobuf serializes (fields in number order, each once except the repeated properties,
 * one-byte tags, minimal varints, booleans 0 or 1, no unknown fields): parsing such a
 * record and serializing it again, as the Python compactor does, gives the same bytes.
 */

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

/* The varint that ended at end and began at start is as short as it can be, and holds
 * no bits past the 64th (a 10th byte other than 1): protobuf writes its value again the
 * same way. */
static inline int
varint_minimal(const uint8_t *start, const uint8_t *end)
{
    return end - start == 1 || (end[-1] != 0 && (end - start < 10 || end[-1] == 1));
}

/* Valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF): text the
 * Python decoder takes as it is. Anything else is left to it. */
static int
utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        }
        else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        }
        else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        }
        else
            return 0;
        if (n - i < len)
            return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* One KeyValue, into dict as str -> str when dict is not NULL. 1 ok, 0 irregular, -1
 * Python error. */
static int
parse_property(const uint8_t *p, const uint8_t *end, PyObject *dict, KeyCache *keys,
               char *canonical)
{
    const uint8_t *key = NULL, *value = NULL;
    Py_ssize_t key_len = 0, value_len = 0;
    uint32_t last = 0;
    while (p < end) {
        const uint8_t *at = p, *s;
        uint32_t field;
        int wire;
        Py_ssize_t n;
        if (!read_tag(&p, end, &field, &wire))
            return 0;
        if (field != 1 && field != 2) {
            if (!skip_field(&p, end, wire))
                return 0;
            *canonical = 0;
            continue;
        }
        const uint8_t *length_at = p;
        if (wire != 2 || !read_bytes(&p, end, &s, &n))
            return 0;
        if (length_at - at != 1 || !varint_minimal(length_at, s) || field <= last)
            *canonical = 0;
        last = field;
        if (field == 1) {
            key = s;
            key_len = n;
        }
        else {
            value = s;
            value_len = n;
        }
    }
    if (key == NULL || value == NULL)
        return 0; /* required fields: the Python path reports them */
    if (dict == NULL)
        return utf8(key, key_len) && utf8(value, value_len);
    PyObject *k = cached_text(keys, key, key_len);
    if (k == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *v = text(value, value_len);
    if (v == NULL) {
        Py_DECREF(k);
        return PyErr_Occurred() ? -1 : 0;
    }
    int rc = PyDict_SetItem(dict, k, v);
    Py_DECREF(k);
    Py_DECREF(v);
    return rc < 0 ? -1 : 1;
}

/* A record's SingleMessageMetadata into m, with its properties as a new dict when
 * ``properties`` is set. 1 ok, 0 irregular, -1 Python error (m->properties is NULL then). */
static int
parse_smm(const uint8_t *p, const uint8_t *end, Smm *m, KeyCache *keys, int properties)
{
    int has_payload_size = 0;
    uint32_t last = 0;
    memset(m, 0, sizeof(*m));
    m->canonical = 1;
    if (properties && (m->properties = PyDict_New()) == NULL)
        return -1;
    while (p < end) {
        const uint8_t *at = p, *s = NULL;
        uint32_t field;
        int wire;
        uint64_t v = 0;
        Py_ssize_t n = 0;
        if (!read_tag(&p, end, &field, &wire))
            goto irregular;
        if (p - at != 1)
            m->canonical = 0;
        if (field > 10) {
            if (!skip_field(&p, end, wire))
                goto irregular;
            m->canonical = 0;
            continue;
        }
        /* fields 1, 2 and 7 are length-delimited, the others varints */
        int want = (field == 1 || field == 2 || field == 7) ? 2 : 0;
        if (wire != want)
            goto irregular;
        if (field < last || (field == last && field != 1))
            m->canonical = 0;
        last = field;
        at = p;
        if (want == 2 ? !read_bytes(&p, end, &s, &n) : !read_varint(&p, end, &v))
            goto irregular;
        if (!varint_minimal(at, want == 2 ? s : p))
            m->canonical = 0;
        switch (field) {
        case 1: {
            int rc = parse_property(s, s + n, m->properties, keys, &m->canonical);
            if (rc < 0)
                goto error;
            if (rc == 0)
                goto irregular;
            break;
        }
        case 2:
            m->key = s;
            m->key_len = n;
            m->has_key = 1;
            break;
        case 3: /* int32: protobuf keeps the low 32 bits */
            m->payload_size = (int32_t)(uint32_t)v;
            has_payload_size = 1;
            if (v > INT32_MAX)
                m->canonical = 0; /* serialized again as ten bytes */
            break;
        case 5:
            m->event_time = v;
            m->has_event_time = 1;
            break;
        case 7:
            m->ordering_key = s;
            m->ordering_key_len = n;
            m->has_ordering_key = 1;
            break;
        case 8:
            m->sequence_id = v;
            m->has_sequence_id = 1;
            break;
        default: /* booleans: 4 compacted_out, 6 key base64, 9 null value, 10 null key */
            if (v > 1)
                m->canonical = 0;
            if (field == 4)
                m->compacted_out = v != 0;
            else if (field == 6)
                m->b64 = v != 0;
            else if (field == 9)
                m->null_value = v != 0;
            break;
        }
    }
    if (has_payload_size)
        return 1;
irregular:
    Py_CLEAR(m->properties);
    return 0;
error:
    Py_CLEAR(m->properties);
    return -1;
}

/* The batch indexes a caller gives (None: 0 .. count - 1; else a list of count ints),
 * copied out before the batch is read, so that nothing can change them under the walk.
 * 1 ok (*out NULL for None, else PyMem memory), 0 not regular (another length, not ints,
 * past int64), -1 error. */
static int
batch_indexes(PyObject *indexes, Py_ssize_t count, long long **out)
{
    *out = NULL;
    if (indexes == Py_None)
        return 1;
    if (!PyList_Check(indexes) || PyList_GET_SIZE(indexes) != count)
        return 0;
    long long *a = PyMem_Malloc(sizeof(long long) * (size_t)(count ? count : 1));
    if (a == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        PyObject *o = PyList_GET_ITEM(indexes, j);
        int overflow = 0;
        if (!PyLong_CheckExact(o) ||
            ((a[j] = PyLong_AsLongLongAndOverflow(o, &overflow)), overflow)) {
            PyMem_Free(a);
            return 0;
        }
    }
    *out = a;
    return 1;
}

/* -- split_batch --------------------------------------------------------------------- */

/* Message slots, in the order entry.Message declares its fields. */
enum {
    M_KEY, M_VALUE, M_PROPERTIES, M_BATCH_INDEX, M_NULL_VALUE, M_EVENT_TIME, M_SEQUENCE_ID,
    M_PUBLISH_TIME, M_KEY_B64, M_ORDERING_KEY, M_INDEX, M_LEDGER_ID, M_ENTRY_ID, M_CHUNKS,
    M_FIELDS
};

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int
int_or_none(PyObject *o)
{
    return o == Py_None || PyLong_CheckExact(o);
}

/*
 * split_batch(plain, count, indexes, base_seq, publish_time, first_index, ledger_id,
 *             entry_id) -> (messages, placeholders, end) | None
 *
 * The batch grammar of payload.parse_batch, and the Message fields of entry._messages.
 * base_seq is an int, the other values ints or None. None: something irregular; the
 * caller runs the Python path on the same input.
 */
static PyObject *
sp_split_batch(PyObject *self, PyObject *args)
{
    PyObject *plain, *indexes, *base_seq, *publish_time, *first_index, *ledger_id, *entry_id;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OnOOOOOO:split_batch", &plain, &count, &indexes, &base_seq,
                          &publish_time, &first_index, &ledger_id, &entry_id))
        return NULL;
    if (bound[BIND_MESSAGE].type == NULL || bound[BIND_MESSAGE].n != M_FIELDS) {
        PyErr_SetString(PyExc_RuntimeError, "split_batch: Message class not bound");
        return NULL;
    }
    if (!PyLong_CheckExact(base_seq) || !int_or_none(publish_time) || !int_or_none(first_index) ||
        !int_or_none(ledger_id) || !int_or_none(entry_id)) {
        PyErr_SetString(PyExc_TypeError, "split_batch: base_seq an int, the ids ints or None");
        return NULL;
    }
    if (count < 0)
        Py_RETURN_NONE;

    Py_buffer view;
    if (PyObject_GetBuffer(plain, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    KeyCache keys = {0};
    long long *idx = NULL;
    PyObject *messages = NULL, *holes = NULL, *result = NULL;
    int rc = batch_indexes(indexes, count, &idx);
    if (rc <= 0) {
        if (rc == 0)
            result = new_ref(Py_None);
        goto done;
    }
    if ((messages = PyList_New(0)) == NULL || (holes = PyList_New(0)) == NULL)
        goto done;

    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    for (Py_ssize_t j = 0; j < count; j++) {
        if (end - pos < 4)
            goto irregular;
        uint32_t size = be32(buf + pos);
        pos += 4;
        if ((uint64_t)size > (uint64_t)(end - pos))
            goto irregular;
        Smm m;
        rc = parse_smm(buf + pos, buf + pos + size, &m, &keys, 1);
        if (rc <= 0) {
            if (rc < 0)
                goto done;
            goto irregular;
        }
        pos += size;
        if (m.payload_size < 0 || m.payload_size > end - pos) {
            Py_DECREF(m.properties);
            goto irregular;
        }
        Py_ssize_t value_at = pos;
        pos += m.payload_size;
        PyObject *batch_index = PyLong_FromLongLong(idx != NULL ? idx[j] : (long long)j);
        if (batch_index == NULL) {
            Py_DECREF(m.properties);
            goto done;
        }
        if (m.compacted_out) {
            Py_DECREF(m.properties);
            rc = PyList_Append(holes, batch_index);
            Py_DECREF(batch_index);
            if (rc < 0)
                goto done;
            continue;
        }
        PyObject *f[M_FIELDS] = {NULL};
        f[M_BATCH_INDEX] = batch_index;
        f[M_PROPERTIES] = m.properties;
        f[M_KEY] = m.has_key ? text(m.key, m.key_len) : new_ref(Py_None);
        f[M_VALUE] = m.null_value ? new_ref(Py_None)
                                  : PyBytes_FromStringAndSize((const char *)buf + value_at, m.payload_size);
        f[M_NULL_VALUE] = PyBool_FromLong(m.null_value);
        f[M_EVENT_TIME] = m.has_event_time ? PyLong_FromUnsignedLongLong(m.event_time)
                                           : new_ref(Py_None);
        /* exact ints: the sums run no Python code */
        f[M_SEQUENCE_ID] = m.has_sequence_id ? PyLong_FromUnsignedLongLong(m.sequence_id)
                                             : PyNumber_Add(base_seq, batch_index);
        f[M_PUBLISH_TIME] = new_ref(publish_time);
        f[M_KEY_B64] = PyBool_FromLong(m.b64);
        f[M_ORDERING_KEY] =
            m.has_ordering_key
                ? PyBytes_FromStringAndSize((const char *)m.ordering_key, m.ordering_key_len)
                : new_ref(Py_None);
        f[M_INDEX] = first_index == Py_None ? new_ref(Py_None) : PyNumber_Add(first_index, batch_index);
        f[M_LEDGER_ID] = new_ref(ledger_id);
        f[M_ENTRY_ID] = new_ref(entry_id);
        f[M_CHUNKS] = new_ref(Py_None);
        int missing = 0;
        for (int i = 0; i < M_FIELDS; i++)
            missing |= f[i] == NULL;
        if (missing) {
            int key_not_text = m.has_key && f[M_KEY] == NULL && !PyErr_Occurred();
            for (int i = 0; i < M_FIELDS; i++)
                Py_XDECREF(f[i]);
            if (key_not_text)
                goto irregular;
            goto done;
        }
        PyObject *msg = new_bound(BIND_MESSAGE, f);
        if (msg == NULL)
            goto done;
        rc = PyList_Append(messages, msg);
        Py_DECREF(msg);
        if (rc < 0)
            goto done;
    }
    result = Py_BuildValue("(OOn)", messages, holes, pos);
    goto done;
irregular:
    result = new_ref(Py_None);
done:
    key_cache_clear(&keys);
    PyMem_Free(idx);
    Py_XDECREF(messages);
    Py_XDECREF(holes);
    PyBuffer_Release(&view);
    return result;
}

/* -- CRC32C -------------------------------------------------------------------------- */

static uint32_t crc_table[8][256];   /* CRC32C (Castagnoli) */
static uint32_t crc32_table[8][256]; /* CRC32 (zlib) */
static int have_sse42;

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

static void
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
static uint32_t
crc32c_update(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
#ifdef HAVE_SSE42_BUILTIN
    if (have_sse42)
        return ~crc_hw(crc, p, n);
#endif
    return ~crc_soft(crc, p, n);
}

static PyObject *
sp_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned long crc = 0;
    int soft = 0;
    if (!PyArg_ParseTuple(args, "y*|kp:crc32c", &view, &crc, &soft))
        return NULL;
    uint32_t out;
    if (soft)
        out = ~crc_soft(~(uint32_t)crc, (const uint8_t *)view.buf, (size_t)view.len);
    else
        out = crc32c_update((uint32_t)crc, (const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(out);
}

/* -- entry heads: locate, digest, broker entry metadata ------------------------------ */

static inline int64_t
be64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)be32(p) << 32) | be32(p + 4));
}

/* EntryHead slots, in the order decoders.heads.EntryHead declares its fields. */
enum {
    H_LEDGER_ID, H_ENTRY_ID, H_SIZE, H_LAC, H_LENGTH, H_DIGEST_OK, H_BROKER_TIMESTAMP, H_INDEX,
    H_BROKER_METADATA, H_PROBLEMS, H_FIELDS
};

enum { HEADS_END = 0, HEADS_WINDOW = 1, HEADS_IRREGULAR = 2, HEADS_OTHER_LEDGER = 3 };

#define BK_HEADER 32
#define CRC32C_DIGEST 4
#define MAGIC_BEM 0x0E02
#define MAGIC_CHECKSUM 0x0E01

/* The bookie entry header is plausible as decoders.bookkeeper.plausible_header judges it
 * (the Python decoder adds an error to an entry whose header is not): ledger id >= 0,
 * entry id >= -1, -1 <= LAC <= max(entry id, 0), length >= 0. */
static inline int
plausible_header(const uint8_t *entry)
{
    int64_t ledger = be64(entry), entry_id = be64(entry + 8), lac = be64(entry + 16);
    return ledger >= 0 && entry_id >= -1 && lac >= -1 && lac <= (entry_id > 0 ? entry_id : 0) &&
           be64(entry + 24) >= 0;
}

/* A BrokerEntryMetadata body: 1 regular, 0 irregular. */
static int
parse_bem(const uint8_t *p, const uint8_t *end, uint64_t *ts, int *has_ts, uint64_t *index,
          int *has_index)
{
    *has_ts = *has_index = 0;
    while (p < end) {
        uint32_t field;
        int wire;
        uint64_t v;
        if (!read_tag(&p, end, &field, &wire))
            return 0;
        if (field == 1 || field == 2) {
            if (wire != 0 || !read_varint(&p, end, &v))
                return 0;
            if (field == 1) {
                *ts = v;
                *has_ts = 1;
            }
            else {
                *index = v;
                *has_index = 1;
            }
        }
        else if (!skip_field(&p, end, wire))
            return 0;
    }
    return 1;
}

/* The 0x0e02 layer at p (its magic checked by the caller): the byte after it, or NULL
 * when it is not regular. */
static const uint8_t *
skip_bem(const uint8_t *p, const uint8_t *end, uint64_t *ts, int *has_ts, uint64_t *index,
         int *has_index)
{
    if (end - p < 6)
        return NULL;
    uint32_t bem_size = be32(p + 2);
    const uint8_t *body = p + 6;
    if ((uint64_t)bem_size > (uint64_t)(end - body) ||
        !parse_bem(body, body + bem_size, ts, has_ts, index, has_index))
        return NULL;
    return body + bem_size;
}

/* The entry an item of the locations index names, found in the window (the log's bytes
 * [window_start, window_end), buf NULL when there is none) and checked as BookKeeper's
 * readEntry checks it (record size, ledger and entry ids): -1, with *entry_id, *entry and
 * *size set; else the status to stop at this item with. */
static int
locate_entry(PyObject *item, long long ledger_id, long long log_id, const uint8_t *buf,
             long long window_start, long long window_end, int digest_size,
             int64_t *entry_id_out, const uint8_t **entry_out, int32_t *size_out)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
        !PyBytes_Check(PyTuple_GET_ITEM(item, 0)) || !PyBytes_Check(PyTuple_GET_ITEM(item, 1)) ||
        PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 0)) != 16 ||
        PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 1)) != 8)
        return HEADS_IRREGULAR;
    const uint8_t *key = (const uint8_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(item, 0));
    const uint8_t *value = (const uint8_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(item, 1));
    int64_t found_ledger = be64(key), entry_id = be64(key + 8), packed = be64(value);
    if (found_ledger != ledger_id)
        return HEADS_OTHER_LEDGER;
    if (packed < 0 || entry_id < 0)
        return HEADS_IRREGULAR;
    long long offset = packed & 0xFFFFFFFFLL;
    if ((packed >> 32) != log_id || buf == NULL || offset - 4 < window_start ||
        offset > window_end)
        return HEADS_WINDOW;
    if (offset < 4)
        return HEADS_IRREGULAR;
    const uint8_t *rec = buf + (offset - 4 - window_start);
    int32_t size = (int32_t)be32(rec);
    if (size < BK_HEADER + digest_size)
        return HEADS_IRREGULAR;
    if (offset + size > window_end)
        return HEADS_WINDOW;
    const uint8_t *entry = rec + 4;
    if (be64(entry) != ledger_id || be64(entry + 8) != entry_id)
        return HEADS_IRREGULAR;
    *entry_id_out = entry_id;
    *entry_out = entry;
    *size_out = size;
    return -1;
}

/* The window the scanners read: the bytes of an entry log from file offset ``start``
 * (buf NULL when there is none). */
typedef struct {
    Py_buffer view;
    const uint8_t *buf;
    long long start, end;
} Window;

/* 0 ok (release it with window_release), -1 error: a negative first item, a window
 * before offset 0 or past int64. The scanners take the buffer before they read their
 * list, so that a buffer export running Python code cannot change it under them. */
static int
window_open(Window *w, PyObject *window, long long window_start, Py_ssize_t first)
{
    memset(w, 0, sizeof(*w));
    if (window != Py_None && PyObject_GetBuffer(window, &w->view, PyBUF_SIMPLE) < 0)
        return -1;
    if (window_start < 0 || w->view.len > LLONG_MAX - window_start || first < 0) {
        if (w->view.obj != NULL)
            PyBuffer_Release(&w->view);
        PyErr_SetString(PyExc_ValueError,
                        "a negative start, or a window before offset 0 or past int64");
        return -1;
    }
    w->buf = w->view.obj != NULL ? (const uint8_t *)w->view.buf : NULL;
    w->start = window_start;
    w->end = window_start + w->view.len;
    return 0;
}

static void
window_release(Window *w)
{
    if (w->view.obj != NULL)
        PyBuffer_Release(&w->view);
}

/*
 * scan_heads(items, start, ledger_id, log_id, window, window_start, out) -> (i, status)
 *
 * items: [(key, value)] of DbLedgerStorage's locations index (key: ledger, entry as
 * int64 BE; value: log id << 32 | offset as int64 BE). From items[start] on, while each
 * entry is in log ``log_id`` and inside ``window`` (the log's bytes from file offset
 * ``window_start``): check the record as BookKeeper's readEntry does (size, ledger and
 * entry ids), verify the CRC32C digest over header and payload, read the broker entry
 * metadata, and append an EntryHead to ``out``. Stops at item i with a status:
 * END (every item done), WINDOW (item i is in another log or past the window),
 * IRREGULAR (item i needs the Python path: anything but a clean entry), OTHER_LEDGER.
 */
static PyObject *
sp_scan_heads(PyObject *self, PyObject *args)
{
    PyObject *items, *ledger_obj, *window, *out;
    Py_ssize_t start;
    long long log_id, window_start;
    if (!PyArg_ParseTuple(args, "O!nOLOLO!:scan_heads", &PyList_Type, &items, &start,
                          &ledger_obj, &log_id, &window, &window_start, &PyList_Type, &out))
        return NULL;
    if (bound[BIND_HEAD].type == NULL || bound[BIND_HEAD].n != H_FIELDS) {
        PyErr_SetString(PyExc_RuntimeError, "scan_heads: EntryHead class not bound");
        return NULL;
    }
    long long ledger_id = PyLong_AsLongLong(ledger_obj);
    if (ledger_id == -1 && PyErr_Occurred())
        return NULL;
    PyObject *ledger = NULL, *empty = NULL;
    Window w;
    if (window_open(&w, window, window_start, start) < 0)
        return NULL;
    if ((ledger = PyLong_FromLongLong(ledger_id)) == NULL || (empty = PyTuple_New(0)) == NULL)
        goto error;

    Py_ssize_t i = start;
    int status = HEADS_END;
    /* the list's size is read again at every item: making a head may run Python code
     * (a collection) */
    for (; i < PyList_GET_SIZE(items); i++) {
        int64_t entry_id;
        const uint8_t *entry;
        int32_t size;
        int found = locate_entry(PyList_GET_ITEM(items, i), ledger_id, log_id, w.buf, w.start,
                                 w.end, CRC32C_DIGEST, &entry_id, &entry, &size);
        if (found >= 0) {
            status = found;
            break;
        }
        if (!plausible_header(entry)) {
            status = HEADS_IRREGULAR;
            break;
        }
        const uint8_t *payload = entry + BK_HEADER + CRC32C_DIGEST, *end = entry + size;
        uint32_t crc = crc32c_update(0, entry, BK_HEADER);
        crc = crc32c_update(crc, payload, (size_t)(end - payload));
        if (crc != be32(entry + BK_HEADER)) {
            status = HEADS_IRREGULAR;
            break;
        }
        /* what follows the digest: 0x0e02 BEM, then anything but another 0x0e02; or the
         * 0x0e01 checksum. Anything else (compacted framing, no prefixes) is left to the
         * Python decoder. */
        uint64_t ts = 0, index = 0;
        int has_ts = 0, has_index = 0, has_bem = 0;
        if (end - payload < 2) {
            status = HEADS_IRREGULAR;
            break;
        }
        unsigned magic = ((unsigned)payload[0] << 8) | payload[1];
        if (magic == MAGIC_BEM) {
            const uint8_t *next = skip_bem(payload, end, &ts, &has_ts, &index, &has_index);
            if (next == NULL || (end - next >= 2 && next[0] == 0x0E && next[1] == 0x02)) {
                status = HEADS_IRREGULAR;
                break;
            }
            has_bem = 1;
        }
        else if (magic != MAGIC_CHECKSUM) {
            status = HEADS_IRREGULAR;
            break;
        }
        PyObject *f[H_FIELDS] = {NULL};
        f[H_LEDGER_ID] = new_ref(ledger);
        f[H_ENTRY_ID] = PyLong_FromLongLong(entry_id);
        f[H_SIZE] = PyLong_FromLong(size);
        f[H_LAC] = PyLong_FromLongLong(be64(entry + 16));
        f[H_LENGTH] = PyLong_FromLongLong(be64(entry + 24));
        f[H_DIGEST_OK] = new_ref(Py_True);
        f[H_BROKER_TIMESTAMP] = has_ts ? PyLong_FromUnsignedLongLong(ts) : new_ref(Py_None);
        f[H_INDEX] = has_index ? PyLong_FromUnsignedLongLong(index) : new_ref(Py_None);
        f[H_BROKER_METADATA] = PyBool_FromLong(has_bem);
        f[H_PROBLEMS] = new_ref(empty);
        for (int k = 0; k < H_FIELDS; k++) {
            if (f[k] == NULL) {
                for (int j = 0; j < H_FIELDS; j++)
                    Py_XDECREF(f[j]);
                goto error;
            }
        }
        PyObject *head = new_bound(BIND_HEAD, f);
        if (head == NULL)
            goto error;
        int rc = PyList_Append(out, head);
        Py_DECREF(head);
        if (rc < 0)
            goto error;
    }
    Py_DECREF(ledger);
    Py_DECREF(empty);
    window_release(&w);
    return Py_BuildValue("(ni)", i, status);
error:
    Py_XDECREF(ledger);
    Py_XDECREF(empty);
    window_release(&w);
    return NULL;
}

/* -- verify_heads: the entry checks of `ledgerctl verify` -------------------------------
 *
 * The head scan of scan_heads, continued to what verify checks on every entry: the
 * 0x0e01 CRC32C over metadata and payload, the MessageMetadata (required fields, batch
 * count, publish time), and the ordered checks of pulsarctl_py.verify.order for the
 * entries where nothing happens (index continuous, timestamps not going back). It stops
 * at anything else and says why; the Python side then does what the general path does
 * for that one entry. One digest and one checksum computation per entry. */

/* zlib's crc32 (java.util.zip.CRC32) continuing from crc (0 to start). */
static uint32_t
crc32_update(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~crc_slice8(crc32_table, ~crc, p, n);
}

/* An EncryptionKeys (key: string, value: bytes, both required; metadata: a KeyValue
 * list, each read as parse_property reads a property): 1 regular, 0 not. */
static int
regular_encryption_keys(const uint8_t *p, const uint8_t *end)
{
    int has_key = 0, has_value = 0;
    char canonical;
    while (p < end) {
        uint32_t field;
        int wire;
        const uint8_t *s;
        Py_ssize_t n;
        if (!read_tag(&p, end, &field, &wire))
            return 0;
        if (field < 1 || field > 3) {
            if (!skip_field(&p, end, wire))
                return 0;
            continue;
        }
        if (wire != 2 || !read_bytes(&p, end, &s, &n))
            return 0;
        if (field == 1) {
            if (!utf8(s, n))
                return 0;
            has_key = 1;
        }
        else if (field == 2)
            has_value = 1;
        else if (parse_property(s, s + n, NULL, NULL, &canonical) != 1)
            return 0;
    }
    return has_key && has_value;
}

typedef struct {
    uint64_t publish_time;
    int32_t num_messages;
    int batched;
} Md;

/* A MessageMetadata the Python decoder reads without a problem: 1 regular, 0 not. */
static int
regular_metadata(const uint8_t *p, const uint8_t *end, Md *md)
{
    int has_producer = 0, has_sequence = 0, has_publish = 0;
    md->batched = 0;
    md->num_messages = 1;
    while (p < end) {
        uint32_t field;
        int wire;
        uint64_t v;
        const uint8_t *s;
        Py_ssize_t n;
        if (!read_tag(&p, end, &field, &wire))
            return 0;
        switch (field) {
        case 1: case 5: case 6: case 7: case 14: case 26: /* strings */
            if (wire != 2 || !read_bytes(&p, end, &s, &n) || !utf8(s, n))
                return 0;
            has_producer |= field == 1;
            break;
        case 2: case 3: case 11:
            if (wire != 0 || !read_varint(&p, end, &v))
                return 0;
            if (field == 2)
                has_sequence = 1;
            else if (field == 3) {
                has_publish = 1;
                md->publish_time = v;
            }
            else {
                md->batched = 1;
                md->num_messages = (int32_t)(uint32_t)v;
            }
            break;
        case 4: case 13: { /* KeyValue, EncryptionKeys */
            char canonical;
            if (wire != 2 || !read_bytes(&p, end, &s, &n) ||
                (field == 4 ? parse_property(s, s + n, NULL, NULL, &canonical) != 1
                            : !regular_encryption_keys(s, s + n)))
                return 0;
            break;
        }
        default:
            if (wire == 3 || wire == 4 || !skip_field(&p, end, wire))
                return 0;
        }
    }
    return has_producer && has_sequence && has_publish;
}

enum { VERIFY_GAP = 4, VERIFY_VALUES = 5 };

/* verify_heads state slots (a list the Python side keeps between calls) */
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

/* An optional uint64 slot (None or an int, checked): 1 set, 0 None, -1 not a uint64
 * (the Python side must judge). */
static int
get_u64(PyObject *state, int slot, uint64_t *out)
{
    PyObject *o = PyList_GET_ITEM(state, slot);
    if (o == Py_None)
        return 0;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = v;
    return 1;
}

static int
set_slot(PyObject *state, int slot, PyObject *value)
{
    if (value == NULL)
        return -1;
    return PyList_SetItem(state, slot, value); /* steals value; checks the index */
}

/* state[slot] += n, state[slot] an int (a value replaced just before may have run a
 * finalizer that changed the list: nothing is taken for granted) */
static int
add_slot(PyObject *state, int slot, long long n)
{
    PyObject *old = PyList_GetItem(state, slot);
    if (old == NULL)
        return -1;
    if (!PyLong_CheckExact(old)) {
        PyErr_SetString(PyExc_TypeError, "verify: a count in the state is not an int");
        return -1;
    }
    PyObject *delta = PyLong_FromLongLong(n);
    if (delta == NULL)
        return -1;
    PyObject *total = PyNumber_Add(old, delta);
    Py_DECREF(delta);
    return set_slot(state, slot, total);
}

/* -- the MAC digest: HMAC-SHA1 from _speedups_mac (OpenSSL), when it was built ---------- */

/* BookKeeper's digest types (LedgerMetadataFormat.DigestType) */
enum { DIGEST_CRC32 = 1, DIGEST_MAC = 2, DIGEST_CRC32C = 3, DIGEST_DUMMY = 4 };

/* A MAC key prepared by _speedups_mac: its inner and outer keyed SHA-1 states. */
typedef struct {
    _Alignas(16) unsigned char state[SPEEDUPS_MAC_STATE];
} MacKey;

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

static PyObject *
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
static int
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

/* What verify_heads and verify_records carry over from one entry to the next. */
typedef struct {
    long long expected, entries, nbytes;
    uint64_t prev_index, max_before, ts_max;
    int has_prev, has_max, has_ts_max, bem_seen, in_last, ordered;
    long long prev_entry, max_entry, ts_entry; /* -1: not moved by this call */
    /* the values of an entry handed to Python (VALUES) */
    long long v_entry, v_payload;
    uint64_t v_index, v_ts;
    int v_has_index, v_broker_ts;
    int32_t v_count;
} VState;

/* The state list's slots into st; digest into its size. 0 ok, -1 Python error. */
static int
vstate_load(PyObject *state, int digest, VState *st, int *digest_size)
{
    if (PyList_GET_SIZE(state) != S_SLOTS) {
        PyErr_SetString(PyExc_ValueError, "verify: state of the wrong size");
        return -1;
    }
    /* a MAC digest (2) comes with its key, checked by mac_setup before */
    if (digest < DIGEST_CRC32 || digest > DIGEST_DUMMY) {
        PyErr_SetString(PyExc_ValueError,
                        "verify: digest must be CRC32C (3), CRC32 (1), DUMMY (4) or MAC (2)");
        return -1;
    }
    *digest_size = digest == 3 ? 4 : digest == 1 ? 8 : digest == 2 ? SPEEDUPS_MAC_SIZE : 0;
    /* the types first, so that reading the values runs no Python code (an __index__ or
     * __bool__ that changes the list under the scan) */
    for (int slot = 0; slot <= S_ORDERED; slot++) {
        PyObject *o = PyList_GET_ITEM(state, slot);
        int ok;
        switch (slot) {
        case S_EXPECTED: case S_ENTRIES: case S_BYTES:
            ok = PyLong_CheckExact(o);
            break;
        case S_PREV_INDEX: case S_MAX_BEFORE: case S_TS_MAX:
            ok = o == Py_None || PyLong_CheckExact(o);
            break;
        case S_BEM_SEEN: case S_IN_LAST: case S_ORDERED:
            ok = PyBool_Check(o) || PyLong_CheckExact(o);
            break;
        default: /* written here, not read */
            ok = 1;
        }
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "verify: state slot %d is of type %.100s", slot,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
    }
    memset(st, 0, sizeof(*st));
    st->expected = PyLong_AsLongLong(PyList_GET_ITEM(state, S_EXPECTED));
    if (st->expected == -1 && PyErr_Occurred())
        return -1;
    if (st->expected < 0) {
        PyErr_SetString(PyExc_ValueError, "verify: the expected entry id is negative");
        return -1;
    }
    st->has_prev = get_u64(state, S_PREV_INDEX, &st->prev_index);
    st->has_max = get_u64(state, S_MAX_BEFORE, &st->max_before);
    st->has_ts_max = get_u64(state, S_TS_MAX, &st->ts_max);
    st->bem_seen = PyObject_IsTrue(PyList_GET_ITEM(state, S_BEM_SEEN));
    st->in_last = PyObject_IsTrue(PyList_GET_ITEM(state, S_IN_LAST));
    st->ordered = PyObject_IsTrue(PyList_GET_ITEM(state, S_ORDERED));
    if (st->has_prev < 0 || st->has_max < 0 || st->has_ts_max < 0)
        st->ordered = 0; /* values C cannot hold: the Python side judges every entry */
    st->prev_entry = st->max_entry = st->ts_entry = -1;
    return 0;
}

/* st back into the state list; the S_V_* slots when status is VALUES. */
static PyObject *
vstate_store(PyObject *state, VState *st, Py_ssize_t i, int status)
{
    if (set_slot(state, S_EXPECTED, PyLong_FromLongLong(st->expected)) < 0 ||
        add_slot(state, S_ENTRIES, st->entries) < 0 || add_slot(state, S_BYTES, st->nbytes) < 0)
        return NULL;
    if (st->prev_entry >= 0 &&
        (set_slot(state, S_PREV_INDEX, PyLong_FromUnsignedLongLong(st->prev_index)) < 0 ||
         set_slot(state, S_PREV_ENTRY, PyLong_FromLongLong(st->prev_entry)) < 0))
        return NULL;
    if (st->max_entry >= 0 &&
        (set_slot(state, S_MAX_BEFORE, PyLong_FromUnsignedLongLong(st->max_before)) < 0 ||
         set_slot(state, S_MAX_ENTRY, PyLong_FromLongLong(st->max_entry)) < 0))
        return NULL;
    if (st->ts_entry >= 0 &&
        (set_slot(state, S_TS_MAX, PyLong_FromUnsignedLongLong(st->ts_max)) < 0 ||
         set_slot(state, S_TS_ENTRY, PyLong_FromLongLong(st->ts_entry)) < 0))
        return NULL;
    if (set_slot(state, S_BEM_SEEN, PyBool_FromLong(st->bem_seen)) < 0)
        return NULL;
    if (status == VERIFY_VALUES &&
        (set_slot(state, S_V_ENTRY, PyLong_FromLongLong(st->v_entry)) < 0 ||
         set_slot(state, S_V_PAYLOAD, PyLong_FromLongLong(st->v_payload)) < 0 ||
         set_slot(state, S_V_INDEX,
                  st->v_has_index ? PyLong_FromUnsignedLongLong(st->v_index)
                                  : new_ref(Py_None)) < 0 ||
         set_slot(state, S_V_COUNT, PyLong_FromLong(st->v_count)) < 0 ||
         set_slot(state, S_V_TS, PyLong_FromUnsignedLongLong(st->v_ts)) < 0 ||
         set_slot(state, S_V_BROKER_TS, PyBool_FromLong(st->v_broker_ts)) < 0))
        return NULL;
    return Py_BuildValue("(ni)", i, status);
}

/*
 * One stored entry (ids already checked to be entry_id of the ledger), checked as verify's
 * general path checks it: a plausible header, the digest, the prefix layers in order, the
 * 0x0e01 CRC32C, a regular MessageMetadata; then the ordered checks where they have
 * nothing to say. -1: clean and counted; VERIFY_VALUES: clean, values in st for Python;
 * HEADS_IRREGULAR: anything else (the general path reads it).
 */
static int
verify_entry(VState *st, const uint8_t *entry, int32_t size, int64_t entry_id, int digest,
             int digest_size, const MacKey *mac)
{
    if (!plausible_header(entry))
        return HEADS_IRREGULAR;
    const uint8_t *payload = entry + BK_HEADER + digest_size, *end = entry + size;
    if (digest == 3) {
        uint32_t crc = crc32c_update(0, entry, BK_HEADER);
        crc = crc32c_update(crc, payload, (size_t)(end - payload));
        if (crc != be32(entry + BK_HEADER))
            return HEADS_IRREGULAR;
    }
    else if (digest == 1) { /* DUMMY (4): no digest stored, nothing to verify */
        uint32_t crc = crc32_update(0, entry, BK_HEADER);
        crc = crc32_update(crc, payload, (size_t)(end - payload));
        if (be32(entry + BK_HEADER) != 0 || crc != be32(entry + BK_HEADER + 4))
            return HEADS_IRREGULAR;
    }
    else if (digest == DIGEST_MAC && !mac_ok(mac, entry, payload, end))
        return HEADS_IRREGULAR;
    /* [0x0e02 size BEM] [0x0e01 crc32c] md_size MessageMetadata payload */
    const uint8_t *p = payload;
    uint64_t ts = 0, index = 0;
    int has_ts = 0, has_index = 0;
    if (end - p >= 2 && p[0] == 0x0E && p[1] == 0x02 &&
        (p = skip_bem(p, end, &ts, &has_ts, &index, &has_index)) == NULL)
        return HEADS_IRREGULAR;
    if (end - p >= 2 && p[0] == 0x0E && p[1] == 0x01) {
        if (end - p < 6 || crc32c_update(0, p + 6, (size_t)(end - p - 6)) != be32(p + 2))
            return HEADS_IRREGULAR;
        p += 6;
    }
    if (end - p < 4 || (p[0] == 0x0E && (p[1] == 0x01 || p[1] == 0x02)))
        return HEADS_IRREGULAR; /* a prefix again, or no metadata size */
    uint32_t md_size = be32(p);
    p += 4;
    Md md;
    if ((uint64_t)md_size > (uint64_t)(end - p) || !regular_metadata(p, p + md_size, &md))
        return HEADS_IRREGULAR;
    long long payload_size = end - payload;
    uint64_t stamp = has_ts ? ts : md.publish_time;
    int32_t count = md.batched ? md.num_messages : 1;
    /* the ordered checks (verify.order.TopicOrder) where nothing happens */
    int values = !st->ordered;
    if (!values && has_index)
        values = st->has_prev && (__int128)st->prev_index + count != (__int128)index;
    else if (!values)
        values = st->bem_seen; /* an entry without index after entries with one */
    if (!values && stamp != 0 && st->has_ts_max && stamp < st->ts_max)
        values = 1; /* timestamps go back */
    if (values) {
        st->v_entry = entry_id;
        st->v_payload = payload_size;
        st->v_has_index = has_index;
        st->v_index = index;
        st->v_count = count;
        st->v_ts = stamp;
        st->v_broker_ts = has_ts;
        return VERIFY_VALUES;
    }
    if (has_index) {
        st->bem_seen = 1;
        if (!st->in_last && (!st->has_max || index > st->max_before)) {
            st->max_before = index;
            st->has_max = 1;
            st->max_entry = entry_id;
        }
        st->prev_index = index;
        st->has_prev = 1;
        st->prev_entry = entry_id;
    }
    if (stamp != 0) {
        st->ts_max = stamp;
        st->has_ts_max = 1;
        st->ts_entry = entry_id;
    }
    st->entries++;
    st->nbytes += payload_size;
    st->expected = entry_id + 1;
    return -1;
}

/*
 * verify_heads(items, start, ledger_id, log_id, window, window_start, digest, state,
 *              key=None) -> (i, status)
 *
 * items, log_id, window, window_start as for scan_heads; digest: 3 CRC32C, 1 CRC32, 4
 * DUMMY, 2 MAC (the DigestType numbers; MAC with ``key``, see mac_setup). For each entry from items[start] on that verify_entry finds
 * clean: count it and its payload bytes, and run the ordered checks on the state. Stops
 * at item i with END, WINDOW, IRREGULAR, OTHER_LEDGER (as scan_heads), GAP (its entry id
 * is past S_EXPECTED) or VALUES (clean, but the ordered checks have something to say, or
 * are Python's: its values are in the S_V_* slots and it is not counted).
 */
static PyObject *
sp_verify_heads(PyObject *self, PyObject *args)
{
    PyObject *items, *ledger_obj, *window, *state, *key = NULL;
    Py_ssize_t start;
    long long log_id, window_start;
    int digest, digest_size;
    VState st;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "O!nOLOLiO!|O:verify_heads", &PyList_Type, &items, &start,
                          &ledger_obj, &log_id, &window, &window_start, &digest, &PyList_Type,
                          &state, &key))
        return NULL;
    long long ledger_id = PyLong_AsLongLong(ledger_obj);
    if (ledger_id == -1 && PyErr_Occurred())
        return NULL;
    if (mac_setup("verify_heads", digest, key, &mac_key, &mac) < 0)
        return NULL;
    Window w;
    if (window_open(&w, window, window_start, start) < 0)
        return NULL;
    if (vstate_load(state, digest, &st, &digest_size) < 0) {
        window_release(&w);
        return NULL;
    }
    Py_ssize_t i = start;
    int status = HEADS_END;
    for (; i < PyList_GET_SIZE(items); i++) {
        int64_t entry_id;
        const uint8_t *entry;
        int32_t size;
        int found = locate_entry(PyList_GET_ITEM(items, i), ledger_id, log_id, w.buf, w.start,
                                 w.end, digest_size, &entry_id, &entry, &size);
        if (found < 0 && entry_id != st.expected)
            found = entry_id > st.expected ? VERIFY_GAP : HEADS_IRREGULAR;
        if (found < 0)
            found = verify_entry(&st, entry, size, entry_id, digest, digest_size, mac);
        if (found >= 0) {
            status = found;
            break;
        }
    }
    window_release(&w);
    return vstate_store(state, &st, i, status);
}

/*
 * verify_records(records, start, ledger_id, digest, state, key=None) -> (i, status)
 *
 * verify_heads for entries already read, from any storage: records is a list of
 * (entry_id, bytes-like) pairs in entry order. Statuses END, IRREGULAR (a record whose
 * size or ids are not those of the entry), GAP, VALUES as verify_heads.
 */
static PyObject *
sp_verify_records(PyObject *self, PyObject *args)
{
    PyObject *records, *state, *key = NULL;
    Py_ssize_t start;
    long long ledger_id;
    int digest, digest_size;
    VState st;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "O!nLiO!|O:verify_records", &PyList_Type, &records, &start,
                          &ledger_id, &digest, &PyList_Type, &state, &key))
        return NULL;
    if (mac_setup("verify_records", digest, key, &mac_key, &mac) < 0)
        return NULL;
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "verify_records: a negative start");
        return NULL;
    }
    if (vstate_load(state, digest, &st, &digest_size) < 0)
        return NULL;
    Py_ssize_t i = start;
    int status = HEADS_END;
    for (; i < PyList_GET_SIZE(records); i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 2) {
            status = HEADS_IRREGULAR;
            break;
        }
        /* an int and a bytes-like object of the three kinds whose buffer runs no Python
         * code: nothing can change the list while the entry is read */
        PyObject *id = PyTuple_GET_ITEM(record, 0), *data = PyTuple_GET_ITEM(record, 1);
        if (!PyLong_CheckExact(id) || !(PyBytes_CheckExact(data) ||
                                        PyByteArray_CheckExact(data) || PyMemoryView_Check(data))) {
            PyErr_SetString(PyExc_TypeError, "verify_records: records are (int, bytes-like)");
            return NULL;
        }
        long long entry_id = PyLong_AsLongLong(id);
        if (entry_id == -1 && PyErr_Occurred())
            return NULL;
        if (entry_id != st.expected) {
            status = entry_id > st.expected ? VERIFY_GAP : HEADS_IRREGULAR;
            break;
        }
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        const uint8_t *entry = (const uint8_t *)view.buf;
        int found = HEADS_IRREGULAR;
        if (view.len >= BK_HEADER + digest_size && view.len <= INT32_MAX &&
            be64(entry) == ledger_id && be64(entry + 8) == entry_id)
            found = verify_entry(&st, entry, (int32_t)view.len, entry_id, digest, digest_size,
                                 mac);
        PyBuffer_Release(&view);
        if (found >= 0) {
            status = found;
            break;
        }
    }
    return vstate_store(state, &st, i, status);
}

/* -- bookie protocol v3: READ_ENTRY responses (formats.md §12.1) ---------------------- */

/*
 * Only the regular answer to a read is taken here: a Response holding a header (version
 * 1..3, operation READ_ENTRY, a txnId, optionally a priority), a status and a
 * readResponse (status, ledgerId, entryId, optionally body, maxLAC, lacUpdateTimestamp),
 * each field once, with the wire types the schema gives and enum values the schema
 * knows. Anything else (another operation, a missing or repeated field, an unknown
 * field, a wrong wire type, a length past the end, a status code the enum lacks) is left
 * to the Python path (protobuf's own parse), which then answers or reports it.
 */

static inline int
v3_status_known(uint64_t v)
{
    return v == 0 || (v >= 402 && v <= 404) || (v >= 501 && v <= 507);
}

/* One Response payload: 1 and the fields when it is a regular read answer, else 0. */
static int
v3_read_response(const uint8_t *p, const uint8_t *end, uint64_t *txn, uint64_t *status,
                 uint64_t *ledger, uint64_t *entry, const uint8_t **body, Py_ssize_t *body_len,
                 int *has_body, uint64_t *max_lac, int *has_max_lac)
{
    const uint8_t *hp = NULL, *hend = NULL, *rp = NULL, *rend = NULL;
    int seen_status = 0;
    uint64_t v;
    while (p < end) {
        uint32_t field;
        int wire;
        const uint8_t *s;
        Py_ssize_t n;
        if (!read_tag(&p, end, &field, &wire))
            return 0;
        if (field == 1 && wire == 2 && hp == NULL) {
            if (!read_bytes(&p, end, &s, &n))
                return 0;
            hp = s;
            hend = s + n;
        }
        else if (field == 2 && wire == 0 && !seen_status) {
            if (!read_varint(&p, end, &v) || !v3_status_known(v))
                return 0;
            seen_status = 1;
        }
        else if (field == 100 && wire == 2 && rp == NULL) {
            if (!read_bytes(&p, end, &s, &n))
                return 0;
            rp = s;
            rend = s + n;
        }
        else
            return 0;
    }
    if (hp == NULL || rp == NULL || !seen_status)
        return 0;
    /* header: version, operation (READ_ENTRY), txnId, priority */
    unsigned seen = 0;
    while (hp < hend) {
        uint32_t field;
        int wire;
        if (!read_tag(&hp, hend, &field, &wire) || wire != 0 || field > 4 ||
            (seen & (1u << field)) || !read_varint(&hp, hend, &v))
            return 0;
        seen |= 1u << field;
        if ((field == 1 && (v < 1 || v > 3)) || (field == 2 && v != 1) ||
            (field == 4 && v > 0xFFFFFFFFu))
            return 0;
        if (field == 3)
            *txn = v;
    }
    if ((seen & 0x0E) != 0x0E)
        return 0;
    /* readResponse */
    seen = 0;
    *has_body = *has_max_lac = 0;
    while (rp < rend) {
        uint32_t field;
        int wire;
        if (!read_tag(&rp, rend, &field, &wire) || field > 6 || (seen & (1u << field)))
            return 0;
        seen |= 1u << field;
        if (field == 4) {
            if (wire != 2 || !read_bytes(&rp, rend, body, body_len))
                return 0;
            *has_body = 1;
            continue;
        }
        if (wire != 0 || !read_varint(&rp, rend, &v))
            return 0;
        switch (field) {
        case 1:
            if (!v3_status_known(v))
                return 0;
            *status = v;
            break;
        case 2:
            *ledger = v;
            break;
        case 3:
            *entry = v;
            break;
        case 5:
            *max_lac = v;
            *has_max_lac = 1;
            break;
        default: /* 6: lacUpdateTimestamp, not kept */
            break;
        }
    }
    return (seen & 0x0E) == 0x0E;
}

/*
 * v3_read_replies(buf, pos, max_frame, out) -> pos
 *
 * buf holds length-prefixed frames from a bookie ([u32 BE length][Response]) from
 * offset pos on. For each complete frame that is a regular answer to a read, append
 * (txnId, status, ledgerId, entryId, body or None, maxLAC or None) to the list out;
 * stop at the first frame that is incomplete, longer than max_frame or not regular, and
 * return its offset (len(buf) when every frame was taken). The caller reads what is
 * left there with the Python path.
 */
static PyObject *
sp_v3_read_replies(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, max_frame;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "y*nnO!:v3_read_replies", &view, &pos, &max_frame,
                          &PyList_Type, &out))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t len = view.len;
    if (pos < 0 || pos > len || max_frame < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "v3_read_replies: pos outside the buffer or a negative max_frame");
        return NULL;
    }
    while (len - pos >= 4) {
        Py_ssize_t size = (Py_ssize_t)be32(buf + pos);
        if (size > max_frame || size > len - pos - 4)
            break;
        const uint8_t *p = buf + pos + 4, *end = p + size, *body = NULL;
        uint64_t txn = 0, status = 0, ledger = 0, entry = 0, max_lac = 0;
        Py_ssize_t body_len = 0;
        int has_body, has_max_lac;
        if (!v3_read_response(p, end, &txn, &status, &ledger, &entry, &body, &body_len,
                              &has_body, &max_lac, &has_max_lac))
            break;
        PyObject *item = PyTuple_New(6);
        if (item == NULL)
            goto error;
        PyObject *b = has_body ? PyBytes_FromStringAndSize((const char *)body, body_len)
                               : new_ref(Py_None);
        PyObject *m = has_max_lac ? PyLong_FromLongLong((long long)max_lac) : new_ref(Py_None);
        PyTuple_SET_ITEM(item, 0, PyLong_FromUnsignedLongLong(txn));
        PyTuple_SET_ITEM(item, 1, PyLong_FromUnsignedLongLong(status));
        PyTuple_SET_ITEM(item, 2, PyLong_FromLongLong((long long)ledger));
        PyTuple_SET_ITEM(item, 3, PyLong_FromLongLong((long long)entry));
        PyTuple_SET_ITEM(item, 4, b);
        PyTuple_SET_ITEM(item, 5, m);
        for (int i = 0; i < 6; i++) {
            if (PyTuple_GET_ITEM(item, i) == NULL) {
                Py_DECREF(item);
                goto error;
            }
        }
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0)
            goto error;
        pos += 4 + size;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* -- KeyTable: the local engine's in-memory key table -----------------------------------
 *
 * key -> (rank, tombstone), the greatest rank per key, in one open-addressing array of
 * slots (hash, where key and rank are, their lengths, tombstone) and one byte arena that
 * holds each key followed by its rank: two allocations for the whole table instead of a
 * key, a rank and a tuple object per key, so it takes a third of a dict's memory and a
 * look-up touches about two cache lines. Hashes are Python's (SipHash with the process
 * secret), so crafted keys cannot force collisions. compact_offer and compact_keep read
 * and update it directly.
 */

typedef struct {
    uint64_t hash; /* 0: an empty slot (a key's hash is never 0) */
    uint64_t at;   /* the key's bytes, then its rank's, in the arena */
    uint32_t key_len;
    uint16_t rank_len;
    uint8_t tombstone;
    uint8_t pad;
} KTSlot;

typedef struct {
    PyObject_HEAD
    KTSlot *slots;
    size_t cap;  /* slots: a power of two, or 0 */
    size_t used; /* keys */
    size_t live; /* keys whose winner is not a tombstone */
    uint8_t *arena;
    size_t arena_len, arena_cap;
} KeyTableObject;

static PyTypeObject KeyTableType;

static inline uint64_t
kt_hash(const uint8_t *key, size_t len)
{
    uint64_t h = (uint64_t)_Py_HashBytes(key, (Py_ssize_t)len);
    return h ? h : 1;
}

/* The slot holding key, or the empty slot where it would go (the table has room). */
static inline KTSlot *
kt_slot(KeyTableObject *t, const uint8_t *key, size_t len, uint64_t h)
{
    size_t mask = t->cap - 1, i = (size_t)h & mask;
    for (;;) {
        KTSlot *s = &t->slots[i];
        if (s->hash == 0 ||
            (s->hash == h && s->key_len == len && memcmp(t->arena + s->at, key, len) == 0))
            return s;
        i = (i + 1) & mask;
    }
}

/* Room for one more key: the load stays at most 2/3. 0 ok, -1 no memory. */
static int
kt_reserve(KeyTableObject *t)
{
    if ((t->used + 1) * 3 <= t->cap * 2)
        return 0;
    size_t cap = t->cap ? t->cap * 2 : 64;
    KTSlot *slots = PyMem_Calloc(cap, sizeof(KTSlot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        KTSlot *s = &t->slots[i];
        if (s->hash == 0)
            continue;
        size_t j = (size_t)s->hash & (cap - 1);
        while (slots[j].hash != 0)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* Arena room for n more bytes. 0 ok, -1 no memory. */
static int
kt_arena(KeyTableObject *t, size_t n)
{
    if (t->arena != NULL && t->arena_len + n <= t->arena_cap)
        return 0; /* allocated even for n == 0: a key's bytes never live at NULL */
    size_t cap = t->arena_cap ? t->arena_cap : 4096;
    while (cap < t->arena_len + n)
        cap += cap / 2;
    uint8_t *arena = PyMem_Realloc(t->arena, cap);
    if (arena == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->arena = arena;
    t->arena_cap = cap;
    return 0;
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
    if (key_len > UINT32_MAX || rank_len > UINT16_MAX) {
        PyErr_SetString(PyExc_ValueError, "key or rank too long for the key table");
        return -1;
    }
    if (kt_reserve(t) < 0)
        return -1;
    KTSlot *s = kt_slot(t, key, key_len, h);
    if (s->hash != 0) {
        uint8_t *old = t->arena + s->at + s->key_len;
        if (only_greater && kt_rank_cmp(rank, rank_len, old, s->rank_len) <= 0)
            return 0;
        if (s->rank_len == rank_len)
            memcpy(old, rank, rank_len);
        else { /* another length: key and rank again at the arena's end (rare) */
            size_t at = s->at;
            if (kt_arena(t, key_len + rank_len) < 0)
                return -1;
            s->at = t->arena_len;
            memmove(t->arena + s->at, t->arena + at, key_len);
            memcpy(t->arena + s->at + key_len, rank, rank_len);
            t->arena_len += key_len + rank_len;
            s->rank_len = (uint16_t)rank_len;
        }
        t->live += (size_t)!tombstone - (size_t)!s->tombstone;
        s->tombstone = (uint8_t)(tombstone != 0);
        return 0;
    }
    if (kt_arena(t, key_len + rank_len) < 0)
        return -1;
    s->hash = h;
    s->at = t->arena_len;
    s->key_len = (uint32_t)key_len;
    s->rank_len = (uint16_t)rank_len;
    s->tombstone = (uint8_t)(tombstone != 0);
    memcpy(t->arena + t->arena_len, key, key_len);
    memcpy(t->arena + t->arena_len + key_len, rank, rank_len);
    t->arena_len += key_len + rank_len;
    t->used++;
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

/* The slot of key (whose hash is h), or NULL. */
static inline KTSlot *
kt_find_h(KeyTableObject *t, const uint8_t *key, size_t key_len, uint64_t h)
{
    if (t->cap == 0)
        return NULL;
    KTSlot *s = kt_slot(t, key, key_len, h);
    return s->hash != 0 ? s : NULL;
}

static inline KTSlot *
kt_find(KeyTableObject *t, const uint8_t *key, size_t key_len)
{
    return kt_find_h(t, key, key_len, kt_hash(key, key_len));
}

static PyObject *
kt_state(KeyTableObject *t, KTSlot *s)
{
    PyObject *rank =
        PyBytes_FromStringAndSize((const char *)t->arena + s->at + s->key_len, s->rank_len);
    if (rank == NULL)
        return NULL;
    PyObject *out = PyTuple_Pack(2, rank, s->tombstone ? Py_True : Py_False);
    Py_DECREF(rank);
    return out;
}

static void
kt_clear(KeyTableObject *t)
{
    PyMem_Free(t->slots);
    PyMem_Free(t->arena);
    t->slots = NULL;
    t->arena = NULL;
    t->cap = t->used = t->live = t->arena_len = t->arena_cap = 0;
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
    KTSlot *s = kt_find(t, (const uint8_t *)PyBytes_AS_STRING(args[0]),
                        (size_t)PyBytes_GET_SIZE(args[0]));
    if (s == NULL)
        Py_RETURN_NONE;
    return kt_state(t, s);
}

/* min_rank() -> the least rank of any key, or None when empty */
static PyObject *
kt_min_rank(KeyTableObject *t, PyObject *unused)
{
    KTSlot *least = NULL;
    for (size_t i = 0; i < t->cap; i++) {
        KTSlot *s = &t->slots[i];
        if (s->hash != 0 &&
            (least == NULL || kt_rank_cmp(t->arena + s->at + s->key_len, s->rank_len,
                                          t->arena + least->at + least->key_len,
                                          least->rank_len) < 0))
            least = s;
    }
    if (least == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)t->arena + least->at + least->key_len,
                                     least->rank_len);
}

/* scan(pos, limit) -> (next, [(key, rank, tombstone), ...]): up to limit keys from slot
 * pos on, in slot order; next is -1 after the last. The table must not change between
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
    for (; i < t->cap && PyList_GET_SIZE(out) < limit; i++) {
        KTSlot *s = &t->slots[i];
        if (s->hash == 0)
            continue;
        PyObject *key = PyBytes_FromStringAndSize((const char *)t->arena + s->at, s->key_len);
        PyObject *rank = key == NULL ? NULL
                                     : PyBytes_FromStringAndSize(
                                           (const char *)t->arena + s->at + s->key_len,
                                           s->rank_len);
        PyObject *item = rank == NULL ? NULL
                                      : PyTuple_Pack(3, key, rank,
                                                     s->tombstone ? Py_True : Py_False);
        Py_XDECREF(key);
        Py_XDECREF(rank);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    Py_ssize_t next = i < t->cap ? (Py_ssize_t)i : -1;
    PyObject *result = Py_BuildValue("(nO)", next, out);
    Py_DECREF(out);
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
    return PyLong_FromSize_t(t->cap * sizeof(KTSlot) + t->arena_cap);
}

/* What the table may hold at once when it next grows: the old and the new slot array
 * during a rehash (three times the present one), the arena during a realloc that copies
 * (twice). A budget checked against this before a batch holds through the batch. */
static PyObject *
kt_get_peak_nbytes(KeyTableObject *t, void *closure)
{
    size_t cap = t->cap ? t->cap : 64;
    return PyLong_FromSize_t(3 * cap * sizeof(KTSlot) + 2 * t->arena_cap);
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
    {"clear", (PyCFunction)kt_clear_method, METH_NOARGS, "clear(): empty the table."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kt_getset[] = {
    {"live", (getter)kt_get_live, NULL, "keys whose winner is not a tombstone", NULL},
    {"nbytes", (getter)kt_get_nbytes, NULL, "bytes the table has allocated", NULL},
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
static PyObject *
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
    Py_ssize_t pos = 0, n = 0, h = 0;
    for (Py_ssize_t j = 0; j < count; j++) {
        long long batch_index = idx != NULL ? idx[j] : (long long)j;
        if (end - pos < 4)
            return 0;
        const uint8_t *record = buf + pos;
        uint32_t size = be32(record);
        pos += 4;
        if ((uint64_t)size > (uint64_t)(end - pos))
            return 0;
        Smm m;
        int rc = parse_smm(buf + pos, buf + pos + size, &m, NULL, 0);
        if (rc <= 0)
            return rc;
        pos += size;
        if (m.payload_size < 0 || m.payload_size > end - pos)
            return 0;
        pos += m.payload_size;
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
                __builtin_prefetch(&t->slots[(size_t)r->hash & (t->cap - 1)]);
#endif
        }
    }
#ifdef __GNUC__
    if (t != NULL && t->cap) {
        for (Py_ssize_t i = 0; i < w->live; i++) {
            const KTSlot *s = &t->slots[(size_t)w->recs[i].hash & (t->cap - 1)];
            if (w->recs[i].has_key && s->hash == w->recs[i].hash)
                __builtin_prefetch(t->arena + s->at);
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
static PyObject *
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
static PyObject *
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
                KTSlot *s = kt_find_h(t, w.keys + r->key_at, table_key_len(key_prefix, r), r->hash);
                w.kept[i] = s != NULL && !s->tombstone && s->rank_len == 20 &&
                            memcmp(t->arena + s->at + s->key_len, rank, 20) == 0;
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
static PyObject *
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

/* -- inspect: the JSON lines of regular entries at --depth entry ------------------------ */

/* An EntryHead slot as a long long: 1 when it holds an int that fits, 0 otherwise (None,
 * another type, or too large; no error is left set). */
static inline int
head_ll(PyObject *v, long long *out)
{
    if (v == NULL || !PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

/* Bytes of a protobuf varint of x >= 0 (inspect_heads._VARINT). */
static inline unsigned
varint_len(long long x)
{
    unsigned bits = x == 0 ? 0 : 64 - (unsigned)__builtin_clzll((unsigned long long)x);
    unsigned n = (bits + 6) / 7;
    return n ? n : 1;
}

#define LINE_BOOKIE 36 /* bookie header (32 bytes) and CRC32C digest: the payload */

/*
 * entry_lines(pairs, start, room, ledger_id, lac, tail, detected=False, digest=3)
 *   -> (lines, stop, size_sum, with_bem, low_t, high_t, low_i, high_i)
 *
 * The JSON line of each (EntryHead, data) pair from pairs[start] on, as
 * pulsarctl_py.inspect_heads.line_maker's ``line`` writes it for a ledger whose digest
 * type is ``digest`` (3 CRC32C, 1 CRC32, 4 DUMMY, 2 MAC: the heads' digest_ok tells
 * that it was verified) from its metadata, or CRC32C
 * (``detected``) checked here entry by entry, and without payload hashes; at most
 * ``room`` lines.
 * Stops at the first pair whose line is not certainly the regular one (``line`` decides
 * it, or the entry is decoded): ``stop`` is its index. ``tail`` is the line's end after
 * ``"confirmed":...`` (UTF-8). The counts are of the lines made: the summary's stored
 * bytes, entries with broker entry metadata, and the lowest and highest non-zero broker
 * timestamp and index (None when there is none).
 */
static PyObject *
sp_entry_lines(PyObject *self, PyObject *args)
{
    PyObject *pairs, *lac_obj, *tail;
    Py_ssize_t start, room;
    long long ledger;
    int detected = 0, digest = 3;
    if (!PyArg_ParseTuple(args, "O!nnLOS|pi:entry_lines", &PyList_Type, &pairs, &start, &room,
                          &ledger, &lac_obj, &tail, &detected, &digest))
        return NULL;
    /* the digest's size, its name, and whether its check verifies (DUMMY: none stored) */
    int ds = digest == 3 ? 4 : digest == 1 ? 8 : digest == 4 ? 0 : digest == 2 ? 20 : -1;
    const char *digest_name = digest == 3   ? "CRC32C"
                              : digest == 1 ? "CRC32"
                              : digest == 2 ? "HMAC"
                                            : "DUMMY";
    PyObject *digest_ok = digest == 4 ? Py_None : Py_True;
    if (ds < 0 || (detected && digest != 3)) {
        PyErr_SetString(PyExc_ValueError,
                        "entry_lines: digest must be CRC32C (3), CRC32 (1), DUMMY (4) or "
                        "MAC (2); "
                        "a detected one CRC32C");
        return NULL;
    }
    const long long bookie = BK_HEADER + ds; /* where the payload starts */
    Bound *b = &bound[BIND_HEAD];
    if (b->type == NULL || b->n != H_FIELDS) {
        PyErr_SetString(PyExc_RuntimeError, "entry_lines: EntryHead class not bound");
        return NULL;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "entry_lines: a negative start");
        return NULL;
    }
    int have_lac = lac_obj != Py_None;
    long long lac = 0;
    if (have_lac && !head_ll(lac_obj, &lac)) {
        PyErr_SetString(PyExc_TypeError, "entry_lines: lac must be None or an int64");
        return NULL;
    }
    const char *tail_s = PyBytes_AS_STRING(tail);
    Py_ssize_t tail_n = PyBytes_GET_SIZE(tail);
    char *buf = PyMem_Malloc(1024 + (size_t)tail_n);
    PyObject *lines = PyList_New(0);
    if (buf == NULL || lines == NULL) {
        PyMem_Free(buf);
        Py_XDECREF(lines);
        return PyErr_NoMemory();
    }
    long long size_sum = 0, with_bem = 0, low_t = 0, high_t = 0, low_i = 0, high_i = 0;
    int have_t = 0, have_i = 0;
    Py_ssize_t i = start;
    for (; i < PyList_GET_SIZE(pairs) && PyList_GET_SIZE(lines) < room; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            break;
        PyObject *head = PyTuple_GET_ITEM(pair, 0), *data = PyTuple_GET_ITEM(pair, 1);
        if (Py_TYPE(head) != b->type || !PyBytes_CheckExact(data))
            break;
        PyObject *v[H_FIELDS];
        int unset = 0;
        for (int k = 0; k < H_FIELDS; k++) {
            v[k] = *(PyObject **)((char *)head + b->offsets[k]);
            unset |= v[k] == NULL;
        }
        if (unset || !PyTuple_CheckExact(v[H_PROBLEMS]) || PyTuple_GET_SIZE(v[H_PROBLEMS]) != 0 ||
            v[H_DIGEST_OK] != digest_ok)
            break;
        long long size, lid, entry_id, entry_lac, length, ts = 0, idx = 0;
        if (!head_ll(v[H_SIZE], &size) || size < bookie + 2 || size > (1LL << 40))
            break;
        if (!head_ll(v[H_LEDGER_ID], &lid) || lid != ledger)
            break;
        if (!head_ll(v[H_ENTRY_ID], &entry_id) || entry_id < 0)
            break;
        if (!head_ll(v[H_LENGTH], &length) || length < 0)
            break;
        if (!head_ll(v[H_LAC], &entry_lac) || entry_lac < -1 || entry_lac > entry_id)
            break;
        int has_ts = v[H_BROKER_TIMESTAMP] != Py_None, has_idx = v[H_INDEX] != Py_None;
        if ((has_ts && (!head_ll(v[H_BROKER_TIMESTAMP], &ts) || ts < 0)) ||
            (has_idx && (!head_ll(v[H_INDEX], &idx) || idx < 0)))
            break;
        PyObject *flag = v[H_BROKER_METADATA];
        if (flag != Py_True && flag != Py_False)
            break;
        const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(data);
        Py_ssize_t dn = PyBytes_GET_SIZE(data);
        if (dn < bookie + 2)
            break;
        if (detected) {
            /* the ledger's digest type was detected, not read from metadata: the line is
             * for a CRC32C digest, so that is what must hold (digest_ok may be another) */
            uint32_t crc = crc32c_update(0, d, 32);
            crc = crc32c_update(crc, d + LINE_BOOKIE, (size_t)(dn - LINE_BOOKIE));
            if (crc != be32(d + 32))
                break;
        }
        char bem[200], bem_layer[80];
        int bem_n = 0;
        snprintf(bem_layer, sizeof bem_layer,
                 ",{\"layer\":\"broker-entry-metadata\",\"offset\":%lld,\"length\":", bookie);
        if (flag == Py_True) {
            if (d[bookie] != 0x0e || d[bookie + 1] != 0x02 || dn < bookie + 6)
                break;
            unsigned long long bem_size = be32(d + bookie + 2);
            if (has_ts && has_idx) {
                if (bem_size != 2 + varint_len(ts) + varint_len(idx))
                    break;
                bem_n = snprintf(bem, sizeof bem,
                                 "%s%llu,\"fields\":{\"broker_timestamp\":%lld,\"index\":%lld}}",
                                 bem_layer, 6 + bem_size, ts, idx);
            } else if (has_ts || has_idx) {
                long long value = has_ts ? ts : idx;
                if (bem_size != 1 + varint_len(value))
                    break;
                bem_n = snprintf(bem, sizeof bem, "%s%llu,\"fields\":{\"%s\":%lld}}", bem_layer,
                                 6 + bem_size, has_ts ? "broker_timestamp" : "index", value);
            } else if (bem_size == 0) {
                bem_n = snprintf(bem, sizeof bem, "%s6}", bem_layer);
            } else {
                break;
            }
            if (bem_n < 0 || bem_n >= (int)sizeof bem)
                break;
        } else if (d[bookie] != 0x0e || d[bookie + 1] != 0x01) {
            break;
        }
        static const char hex[] = "0123456789abcdef";
        char stored[2 * SPEEDUPS_MAC_SIZE + 1];
        for (int k = 0; k < ds; k++) {
            stored[2 * k] = hex[d[32 + k] >> 4];
            stored[2 * k + 1] = hex[d[32 + k] & 15];
        }
        stored[2 * ds] = 0;
        char check[224];
        int check_n =
            ds == 0 ? snprintf(check, sizeof check,
                               "{\"type\":\"DUMMY\",\"stored\":\"\",\"computed\":null,"
                               "\"ok\":null,\"verified\":false,"
                               "\"note\":\"DUMMY digest: the ledger stores none\"}")
                    : snprintf(check, sizeof check,
                               "{\"type\":\"%s\",\"stored\":\"%s\",\"computed\":\"%s\","
                               "\"ok\":true,\"verified\":true}",
                               digest_name, stored, stored);
        if (check_n < 0 || check_n >= (int)sizeof check)
            break;
        const char *confirmed = !have_lac ? "null" : (entry_id <= lac ? "true" : "false");
        int len = snprintf(
            buf, 1024,
            "{\"position\":\"%lld:%lld\",\"ledger_id\":%lld,\"entry_id\":%lld,\"size\":%lld,"
            "\"ok\":true,\"verified\":%s,\"encrypted\":false,\"layers\":[{\"layer\":"
            "\"bookie-entry\",\"offset\":0,\"length\":%lld,\"fields\":{\"ledger_id\":%lld,"
            "\"entry_id\":%lld,\"lac\":%lld,\"length\":%lld,\"digest_type\":\"%s\","
            "\"payload_size\":%lld},\"check\":%s}%s],\"messages\":[],\"problems\":[],"
            "\"digest\":%s,\"confirmed\":%s",
            ledger, entry_id, ledger, entry_id, size, ds ? "true" : "false", bookie, ledger,
            entry_id, entry_lac, length, digest_name, size - bookie, check, bem_n ? bem : "",
            check, confirmed);
        if (len < 0 || len >= 1024)
            break;
        memcpy(buf + len, tail_s, (size_t)tail_n);
        PyObject *line = PyUnicode_DecodeUTF8(buf, len + tail_n, "strict");
        if (line == NULL || PyList_Append(lines, line) < 0) {
            Py_XDECREF(line);
            Py_DECREF(lines);
            PyMem_Free(buf);
            return NULL;
        }
        Py_DECREF(line);
        size_sum += size;
        with_bem += flag == Py_True;
        if (has_ts && ts != 0) {
            if (!have_t || ts < low_t)
                low_t = ts;
            if (!have_t || ts > high_t)
                high_t = ts;
            have_t = 1;
        }
        if (has_idx) {
            if (!have_i || idx < low_i)
                low_i = idx;
            if (!have_i || idx > high_i)
                high_i = idx;
            have_i = 1;
        }
    }
    PyMem_Free(buf);
#define OPT_LL(have, x) ((have) ? PyLong_FromLongLong(x) : new_ref(Py_None))
    PyObject *res = Py_BuildValue("(NnLLNNNN)", lines, i, size_sum, with_bem,
                                  OPT_LL(have_t, low_t), OPT_LL(have_t, high_t),
                                  OPT_LL(have_i, low_i), OPT_LL(have_i, high_i));
#undef OPT_LL
    return res;
}

#include "_speedups_layouts.c"
#include "_speedups_payloads.c"
#include "_speedups_json.c"

/* -- module ---------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"bind", sp_bind, METH_VARARGS, "bind(kind, cls, names): build objects of cls in C."},
    {"split_batch", sp_split_batch, METH_VARARGS,
     "split_batch(plain, count, indexes, base_seq, publish_time, first_index, ledger_id, "
     "entry_id) -> (messages, placeholders, end) or None when the batch is not regular."},
    {"crc32c", sp_crc32c, METH_VARARGS,
     "crc32c(data, crc=0, soft=False) -> CRC32C of data continuing from crc."},
    {"scan_heads", sp_scan_heads, METH_VARARGS,
     "scan_heads(items, start, ledger_id, log_id, window, window_start, out) -> (i, status)."},
    {"verify_heads", sp_verify_heads, METH_VARARGS,
     "verify_heads(items, start, ledger_id, log_id, window, window_start, digest, state, "
     "key=None) -> "
     "(i, status)."},
    {"verify_records", sp_verify_records, METH_VARARGS,
     "verify_records(records, start, ledger_id, digest, state, key=None) -> (i, status)."},
    {"mac_available", sp_mac_available, METH_NOARGS,
     "mac_available() -> bool: whether MAC digests (2) are checked here (by the optional "
     "_speedups_mac, OpenSSL's HMAC-SHA1)."},
    {"v3_read_replies", sp_v3_read_replies, METH_VARARGS,
     "v3_read_replies(buf, pos, max_frame, out) -> pos: regular v3 read answers as tuples."},
    {"key_table", sp_key_table, METH_NOARGS, "key_table() -> a new, empty KeyTable."},
    {"compact_offer", sp_compact_offer, METH_VARARGS,
     "compact_offer(plain, count, indexes, key_prefix, rank_prefix, table) -> (records, "
     "new_keys) or None: phase one of a batch into a KeyTable."},
    {"compact_keep", sp_compact_keep, METH_VARARGS,
     "compact_keep(plain, count, indexes, key_prefix, rank_prefix, table, retain_null_key, "
     "pip_429, placeholder) -> (keep, keyless_dropped, deleted, whole, rebuilt, asked) or "
     "None: phase two of a batch."},
    {"compact_rebuild", sp_compact_rebuild, METH_VARARGS,
     "compact_rebuild(plain, count, keep, pip_429, placeholder) -> bytes or None."},
    {"entry_lines", sp_entry_lines, METH_VARARGS,
     "entry_lines(pairs, start, room, ledger_id, lac, tail, detected=False, digest=3) -> "
     "(lines, stop, size_sum, with_bem, low_t, high_t, low_i, high_i): inspect's JSON lines "
     "of regular entries."},
    {"entry_doc", sp_entry_doc, METH_O,
     "entry_doc(entry) -> Entry.to_json() of a regular entry, or None."},
    LAYOUT_METHODS
    PAYLOAD_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "Compiled fast paths of ledgerctl's decoders (see pulsarctl_py.decoders.speedups).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MESSAGE", BIND_MESSAGE) < 0 ||
        PyModule_AddIntConstant(m, "HEAD", BIND_HEAD) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY", BIND_ENTRY) < 0 ||
        PyModule_AddIntConstant(m, "LAYER", BIND_LAYER) < 0 ||
        PyModule_AddIntConstant(m, "CHECK", BIND_CHECK) < 0 ||
        PyModule_AddIntConstant(m, "PROBLEM", BIND_PROBLEM) < 0 || json_keys_init() < 0 ||
        PyModule_AddIntConstant(m, "HEADS_END", HEADS_END) < 0 ||
        PyModule_AddIntConstant(m, "HEADS_WINDOW", HEADS_WINDOW) < 0 ||
        PyModule_AddIntConstant(m, "HEADS_IRREGULAR", HEADS_IRREGULAR) < 0 ||
        PyModule_AddIntConstant(m, "HEADS_OTHER_LEDGER", HEADS_OTHER_LEDGER) < 0 ||
        PyModule_AddIntConstant(m, "VERIFY_GAP", VERIFY_GAP) < 0 ||
        PyModule_AddIntConstant(m, "VERIFY_VALUES", VERIFY_VALUES) < 0 ||
        PyModule_AddIntConstant(m, "VERIFY_SLOTS", S_SLOTS) < 0 ||
        PyModule_AddIntConstant(m, "HARDWARE_CRC32C", have_sse42) < 0 ||
        layout_constants(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
