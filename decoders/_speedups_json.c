/*
 * entry_doc(entry): the dict Entry.to_json() gives (decoders/entry.py: Entry.to_json,
 * Layer.to_json, Check.to_json, Problem.to_json, Message.to_json and nodes.fields_json),
 * built here for a regular entry, or None when the entry holds anything else: a field
 * value that is not a plain JSON value (bytes, text that is not UTF-8, nested maps), a
 * field name, key or property that is not an exact str, an ordering key, a subclass of
 * any of the classes, a slot not set. The Python path then builds it, with the notes it
 * needs (its Bound slots: bind(ENTRY|LAYER|CHECK|PROBLEM, cls, names)).
 *
 * entry_lines(...): inspect's JSON lines of regular entries at --depth entry, from their
 * EntryHead objects (pulsarctl_py.inspect_heads.line_maker's ``line``, the same bytes).
 */
#include "_speedups.h"


enum {
    E_DATA, E_LAYERS, E_MESSAGES, E_PROBLEMS, E_HEADER, E_DIGEST_TYPE, E_ORIGINAL_ID,
    E_BROKER_ENTRY_METADATA, E_HAS_CHECKSUM, E_METADATA, E_PAYLOAD, E_PLAINTEXT, E_ENCRYPTED,
    E_DATA_KEY, E_CHUNK, E_PLACEHOLDERS, E_POSITION, E_UNREADABLE, E_RECORDS, E_BATCH,
    E_FIELDS
};
enum { L_NAME, L_OFFSET, L_LENGTH, L_RAW, L_FIELDS, L_CHECK, L_REASON, L_SPACE, L_NFIELDS };
enum { C_KIND, C_STORED, C_COMPUTED, C_OK, C_NOTE, C_FIELDS };
enum { P_SEVERITY, P_LAYER, P_OFFSET, P_MESSAGE, P_FIELDS };

/* the slot names each kind must be bound with, in order (checked by bind) */
static const char *const entry_names[] = {
    "data", "layers", "messages", "problems", "header", "digest_type", "original_id",
    "broker_entry_metadata", "has_checksum", "metadata", "payload", "plaintext", "encrypted",
    "data_key", "chunk", "placeholders", "position", "unreadable", "_records", "_batch", NULL};
static const char *const layer_names[] = {"name",  "offset", "length", "raw", "fields",
                                          "check", "reason", "space",  NULL};
static const char *const check_names[] = {"kind", "stored", "computed", "ok", "note", NULL};
static const char *const problem_names[] = {"severity", "layer", "offset", "message", NULL};
static const char *const message_names[] = {
    "key", "value", "properties", "batch_index", "null_value", "event_time", "sequence_id",
    "publish_time", "key_b64_encoded", "ordering_key", "index", "ledger_id", "entry_id",
    "chunks", NULL};

/* the names kind must be bound with, or NULL when any are taken */
const char *const *
bind_names(int kind)
{
    switch (kind) {
    case BIND_MESSAGE: return message_names;
    case BIND_ENTRY: return entry_names;
    case BIND_LAYER: return layer_names;
    case BIND_CHECK: return check_names;
    case BIND_PROBLEM: return problem_names;
    default: return NULL;
    }
}

/* interned keys of the dicts built here */
enum {
    K_POSITION, K_LEDGER_ID, K_ENTRY_ID, K_SIZE, K_OK, K_VERIFIED, K_ENCRYPTED, K_LAYERS,
    K_MESSAGES, K_PROBLEMS, K_LAYER, K_OFFSET, K_LENGTH, K_SPACE, K_FIELDS, K_CHECK, K_REASON,
    K_TYPE, K_STORED, K_COMPUTED, K_NOTE, K_SEVERITY, K_MESSAGE, K_MESSAGE_ID, K_KEY, K_VALUE,
    K_PROPERTIES, K_BATCH_INDEX, K_NULL_VALUE, K_EVENT_TIME, K_SEQUENCE_ID, K_PUBLISH_TIME,
    K_KEY_B64, K_INDEX, K_CHUNKS, K_ENTRY, K_ERROR, K_BOOKIE_DIGEST, K_COUNT
};
static const char *const key_text[K_COUNT] = {
    "position", "ledger_id", "entry_id", "size", "ok", "verified", "encrypted", "layers",
    "messages", "problems", "layer", "offset", "length", "space", "fields", "check", "reason",
    "type", "stored", "computed", "note", "severity", "message", "message_id", "key", "value",
    "properties", "batch_index", "null_value", "event_time", "sequence_id", "publish_time",
    "key_b64_encoded", "index", "chunks", "entry", "error", "bookie-digest"};
static PyObject *keys[K_COUNT];

int
json_keys_init(void)
{
    for (int i = 0; i < K_COUNT; i++) {
        keys[i] = PyUnicode_InternFromString(key_text[i]);
        if (keys[i] == NULL)
            return -1;
    }
    return 0;
}

/* the value of slot i of obj, bound as kind, or NULL when unset */
#define SLOT(kind, obj, i) (*(PyObject **)((char *)(obj) + bound[kind].offsets[i]))

/* a value JSON takes as it is: exact str, int, bool, None or float (nodes._PLAIN) */
static inline int
plain(PyObject *v)
{
    return v == Py_None || PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyBool_Check(v) ||
           PyFloat_CheckExact(v);
}

/* dict[key] = value, the value's reference stolen; -1 on error */
static inline int
put(PyObject *d, int key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(d, keys[key], value);
    Py_DECREF(value);
    return rc;
}

/* a map of str keys and plain values (nodes._list_json copies those as they are) */
static int
flat_map(PyObject *x)
{
    Py_ssize_t p = 0;
    PyObject *a, *b;
    while (PyDict_Next(x, &p, &a, &b))
        if (!PyUnicode_CheckExact(a) || !plain(b))
            return 0;
    return 1;
}

/* a copy of a layer's fields as fields_json makes it when every value is plain, a list
 * of plain values, or a list of flat str -> plain maps; NULL with no error set otherwise */
static PyObject *
fields_doc(PyObject *fields)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(fields, &pos, &k, &v)) {
        PyObject *copy;
        /* an exact str key only: another's hash or equality is Python code, which may
         * empty the entry's lists (and free this layer) while they are read here */
        if (!PyUnicode_CheckExact(k)) {
            Py_DECREF(out);
            return NULL;
        }
        if (plain(v)) {
            copy = Py_NewRef(v);
        } else if (PyList_CheckExact(v)) {
            Py_ssize_t n = PyList_GET_SIZE(v);
            copy = PyList_New(n);
            if (copy == NULL)
                goto fail;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *x = PyList_GET_ITEM(v, i), *y = NULL;
                if (plain(x)) {
                    y = Py_NewRef(x);
                } else if (PyDict_CheckExact(x) && flat_map(x)) {
                    y = PyDict_Copy(x);
                    if (y == NULL) {
                        Py_DECREF(copy);
                        goto fail;
                    }
                }
                if (y == NULL) {
                    Py_DECREF(copy);
                    Py_DECREF(out);
                    return NULL; /* not plain: the Python path */
                }
                PyList_SET_ITEM(copy, i, y);
            }
        } else {
            Py_DECREF(out);
            return NULL;
        }
        if (PyDict_SetItem(out, k, copy) < 0) {
            Py_DECREF(copy);
            goto fail;
        }
        Py_DECREF(copy);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* Check.to_json, or NULL (error set or not) */
static PyObject *
check_doc(PyObject *c)
{
    PyObject *v[C_FIELDS];
    for (int i = 0; i < C_FIELDS; i++)
        if ((v[i] = SLOT(BIND_CHECK, c, i)) == NULL)
            return NULL;
    PyObject *note = v[C_NOTE];
    if (note != Py_None && !PyUnicode_CheckExact(note))
        return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (put(d, K_TYPE, Py_NewRef(v[C_KIND])) < 0 || put(d, K_STORED, Py_NewRef(v[C_STORED])) < 0 ||
        put(d, K_COMPUTED, Py_NewRef(v[C_COMPUTED])) < 0 || put(d, K_OK, Py_NewRef(v[C_OK])) < 0 ||
        put(d, K_VERIFIED, PyBool_FromLong(v[C_OK] != Py_None)) < 0 ||
        (note != Py_None && PyUnicode_GET_LENGTH(note) > 0 &&
         put(d, K_NOTE, Py_NewRef(note)) < 0)) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* Layer.to_json() (no hex), or NULL (error set or not) */
static PyObject *
layer_doc(PyObject *l)
{
    PyObject *v[L_NFIELDS];
    for (int i = 0; i < L_NFIELDS; i++)
        if ((v[i] = SLOT(BIND_LAYER, l, i)) == NULL)
            return NULL;
    PyObject *space = v[L_SPACE], *fields = v[L_FIELDS], *check = v[L_CHECK];
    if (!PyUnicode_CheckExact(space) || !PyDict_CheckExact(fields) ||
        (check != Py_None && Py_TYPE(check) != bound[BIND_CHECK].type))
        return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (put(d, K_LAYER, Py_NewRef(v[L_NAME])) < 0 || put(d, K_OFFSET, Py_NewRef(v[L_OFFSET])) < 0 ||
        put(d, K_LENGTH, Py_NewRef(v[L_LENGTH])) < 0)
        goto fail;
    int same = PyUnicode_Compare(space, keys[K_ENTRY]);
    if (same == -1 && PyErr_Occurred())
        goto fail;
    if (same != 0 && put(d, K_SPACE, Py_NewRef(space)) < 0)
        goto fail;
    if (PyDict_GET_SIZE(fields) > 0) {
        PyObject *f = fields_doc(fields);
        if (f == NULL || put(d, K_FIELDS, f) < 0)
            goto fail;
    }
    if (check != Py_None) {
        PyObject *c = check_doc(check);
        if (c == NULL || put(d, K_CHECK, c) < 0)
            goto fail;
    }
    if (v[L_REASON] != Py_None && put(d, K_REASON, Py_NewRef(v[L_REASON])) < 0)
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* Problem.to_json() */
static PyObject *
problem_doc(PyObject *p)
{
    PyObject *v[P_FIELDS];
    for (int i = 0; i < P_FIELDS; i++)
        if ((v[i] = SLOT(BIND_PROBLEM, p, i)) == NULL)
            return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (put(d, K_SEVERITY, Py_NewRef(v[P_SEVERITY])) < 0 ||
        put(d, K_LAYER, Py_NewRef(v[P_LAYER])) < 0 || put(d, K_OFFSET, Py_NewRef(v[P_OFFSET])) < 0 ||
        put(d, K_MESSAGE, Py_NewRef(v[P_MESSAGE])) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* the length len() gives and the bytes of an exact bytes object or a one-dimensional,
 * contiguous memoryview of bytes; 0 when it is neither */
static int
byte_span(PyObject *o, const char **data, Py_ssize_t *size)
{
    if (PyBytes_CheckExact(o)) {
        *data = PyBytes_AS_STRING(o);
        *size = PyBytes_GET_SIZE(o);
        return 1;
    }
    if (PyMemoryView_Check(o)) {
        if (((PyMemoryViewObject *)o)->flags & _Py_MEMORYVIEW_RELEASED)
            return 0;
        Py_buffer *b = PyMemoryView_GET_BUFFER(o);
        if (b->ndim != 1 || b->itemsize != 1 || !PyBuffer_IsContiguous(b, 'C') ||
            (b->format != NULL && strcmp(b->format, "B") != 0))
            return 0;
        *data = b->buf;
        *size = b->len;
        return 1;
    }
    return 0;
}

/* standard base64 with padding (binascii.b2a_base64(..., newline=False)) as str */
static PyObject *
base64_str(const char *data, Py_ssize_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n > (PY_SSIZE_T_MAX / 4) * 3 - 3)
        return PyErr_NoMemory();
    Py_ssize_t out_n = (n + 2) / 3 * 4;
    PyObject *s = PyUnicode_New(out_n, 127);
    if (s == NULL)
        return NULL;
    unsigned char *o = PyUnicode_1BYTE_DATA(s);
    const unsigned char *d = (const unsigned char *)data;
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t x = ((uint32_t)d[i] << 16) | ((uint32_t)d[i + 1] << 8) | d[i + 2];
        *o++ = alphabet[x >> 18];
        *o++ = alphabet[(x >> 12) & 63];
        *o++ = alphabet[(x >> 6) & 63];
        *o++ = alphabet[x & 63];
    }
    if (n - i == 1) {
        uint32_t x = (uint32_t)d[i] << 16;
        *o++ = alphabet[x >> 18];
        *o++ = alphabet[(x >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t x = ((uint32_t)d[i] << 16) | ((uint32_t)d[i + 1] << 8);
        *o++ = alphabet[x >> 18];
        *o++ = alphabet[(x >> 12) & 63];
        *o++ = alphabet[(x >> 6) & 63];
        *o++ = '=';
    }
    return s;
}

/* "L:E" of two exact ints, or "L:E:B" */
static PyObject *
position_text(PyObject *l, PyObject *e, PyObject *b)
{
    if (b == NULL)
        return PyUnicode_FromFormat("%S:%S", l, e);
    return PyUnicode_FromFormat("%S:%S:%S", l, e, b);
}

/* Message.to_json(), or NULL (error set or not) */
static PyObject *
message_doc(PyObject *m)
{
    PyObject *v[M_FIELDS];
    for (int i = 0; i < M_FIELDS; i++)
        if ((v[i] = SLOT(BIND_MESSAGE, m, i)) == NULL)
            return NULL;
    PyObject *key = v[M_KEY], *value = v[M_VALUE], *props = v[M_PROPERTIES];
    PyObject *lid = v[M_LEDGER_ID], *eid = v[M_ENTRY_ID], *bi = v[M_BATCH_INDEX];
    PyObject *b64 = v[M_KEY_B64];
    if ((key != Py_None && !PyUnicode_CheckExact(key)) || v[M_ORDERING_KEY] != Py_None ||
        !PyDict_CheckExact(props) || !PyLong_CheckExact(bi) || (b64 != Py_True && b64 != Py_False))
        return NULL;
    if ((lid != Py_None && !PyLong_CheckExact(lid)) || (eid != Py_None && !PyLong_CheckExact(eid)))
        return NULL;
    const char *data = NULL;
    Py_ssize_t size = 0;
    if (value != Py_None && !byte_span(value, &data, &size))
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *a, *b;
    while (PyDict_Next(props, &pos, &a, &b))
        if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b))
            return NULL; /* json_map: RawText and the like are noted */
    int overflow = 0;
    long long index = PyLong_AsLongLongAndOverflow(bi, &overflow);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    int negative = overflow < 0 || (overflow == 0 && index < 0);
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    PyObject *id;
    if (lid == Py_None || eid == Py_None)
        id = Py_NewRef(Py_None);
    else
        id = position_text(lid, eid, negative ? NULL : bi);
    if (put(d, K_MESSAGE_ID, id) < 0 || put(d, K_KEY, Py_NewRef(key)) < 0 ||
        put(d, K_VALUE, value == Py_None ? Py_NewRef(Py_None) : base64_str(data, size)) < 0 ||
        put(d, K_SIZE, PyLong_FromSsize_t(size)) < 0 ||
        put(d, K_PROPERTIES, PyDict_Copy(props)) < 0 || put(d, K_BATCH_INDEX, Py_NewRef(bi)) < 0 ||
        put(d, K_NULL_VALUE, Py_NewRef(v[M_NULL_VALUE])) < 0 ||
        put(d, K_EVENT_TIME, Py_NewRef(v[M_EVENT_TIME])) < 0 ||
        put(d, K_SEQUENCE_ID, Py_NewRef(v[M_SEQUENCE_ID])) < 0 ||
        put(d, K_PUBLISH_TIME, Py_NewRef(v[M_PUBLISH_TIME])) < 0 ||
        (b64 == Py_True && put(d, K_KEY_B64, Py_NewRef(Py_True)) < 0) ||
        (v[M_INDEX] != Py_None && put(d, K_INDEX, Py_NewRef(v[M_INDEX])) < 0) ||
        (v[M_CHUNKS] != Py_None && put(d, K_CHUNKS, Py_NewRef(v[M_CHUNKS])) < 0)) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* a list of f(item) for the items of an exact list, all of exact type kind */
static PyObject *
docs_of(PyObject *items, int kind, PyObject *(*f)(PyObject *))
{
    if (!PyList_CheckExact(items))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *doc = Py_TYPE(item) == bound[kind].type ? f(item) : NULL;
        if (doc == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, doc);
    }
    return out;
}

PyObject *
sp_entry_doc(PyObject *self, PyObject *entry)
{
    for (int k = BIND_MESSAGE; k < BIND_KINDS; k++) {
        if (k != BIND_HEAD && bound[k].type == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "entry_doc: a class is not bound");
            return NULL;
        }
    }
    if (Py_TYPE(entry) != bound[BIND_ENTRY].type)
        Py_RETURN_NONE;
    PyObject *data = SLOT(BIND_ENTRY, entry, E_DATA), *layers = SLOT(BIND_ENTRY, entry, E_LAYERS);
    PyObject *messages = SLOT(BIND_ENTRY, entry, E_MESSAGES);
    PyObject *problems = SLOT(BIND_ENTRY, entry, E_PROBLEMS);
    PyObject *position = SLOT(BIND_ENTRY, entry, E_POSITION);
    PyObject *encrypted = SLOT(BIND_ENTRY, entry, E_ENCRYPTED);
    if (data == NULL || layers == NULL || messages == NULL || problems == NULL ||
        position == NULL || encrypted == NULL || !PyList_CheckExact(layers) ||
        !PyList_CheckExact(problems))
        Py_RETURN_NONE;
    const char *bytes;
    Py_ssize_t size;
    if (!byte_span(data, &bytes, &size))
        Py_RETURN_NONE;
    PyObject *lid = Py_None, *eid = Py_None;
    if (position != Py_None) {
        if (!PyTuple_CheckExact(position) || PyTuple_GET_SIZE(position) != 2)
            Py_RETURN_NONE;
        lid = PyTuple_GET_ITEM(position, 0);
        eid = PyTuple_GET_ITEM(position, 1);
        if (!PyLong_CheckExact(lid) || !PyLong_CheckExact(eid))
            Py_RETURN_NONE;
    }
    /* ok: no problem of severity "error"; verified: no check left unverified and no
     * bookie-digest layer (Entry.ok, Entry.all_verified) */
    int ok = 1, verified = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(problems); i++) {
        PyObject *p = PyList_GET_ITEM(problems, i);
        if (Py_TYPE(p) != bound[BIND_PROBLEM].type)
            Py_RETURN_NONE;
        PyObject *severity = SLOT(BIND_PROBLEM, p, P_SEVERITY);
        if (severity == NULL || !PyUnicode_CheckExact(severity))
            Py_RETURN_NONE;
        if (PyUnicode_Compare(severity, keys[K_ERROR]) == 0)
            ok = 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(layers); i++) {
        PyObject *l = PyList_GET_ITEM(layers, i);
        if (Py_TYPE(l) != bound[BIND_LAYER].type)
            Py_RETURN_NONE;
        PyObject *check = SLOT(BIND_LAYER, l, L_CHECK), *name = SLOT(BIND_LAYER, l, L_NAME);
        if (check == NULL || name == NULL || !PyUnicode_CheckExact(name))
            Py_RETURN_NONE;
        if (check != Py_None) {
            if (Py_TYPE(check) != bound[BIND_CHECK].type)
                Py_RETURN_NONE;
            PyObject *c_ok = SLOT(BIND_CHECK, check, C_OK);
            if (c_ok == NULL)
                Py_RETURN_NONE;
            if (c_ok == Py_None)
                verified = 0;
        }
        if (PyUnicode_Compare(name, keys[K_BOOKIE_DIGEST]) == 0)
            verified = 0;
    }
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    PyObject *docs;
    if (put(d, K_POSITION,
            position == Py_None ? Py_NewRef(Py_None) : position_text(lid, eid, NULL)) < 0 ||
        put(d, K_LEDGER_ID, Py_NewRef(lid)) < 0 || put(d, K_ENTRY_ID, Py_NewRef(eid)) < 0 ||
        put(d, K_SIZE, PyLong_FromSsize_t(size)) < 0 || put(d, K_OK, PyBool_FromLong(ok)) < 0 ||
        put(d, K_VERIFIED, PyBool_FromLong(verified)) < 0 ||
        put(d, K_ENCRYPTED, Py_NewRef(encrypted)) < 0)
        goto fail;
    if ((docs = docs_of(layers, BIND_LAYER, layer_doc)) == NULL || put(d, K_LAYERS, docs) < 0)
        goto fail;
    if ((docs = docs_of(messages, BIND_MESSAGE, message_doc)) == NULL ||
        put(d, K_MESSAGES, docs) < 0)
        goto fail;
    if ((docs = docs_of(problems, BIND_PROBLEM, problem_doc)) == NULL ||
        put(d, K_PROBLEMS, docs) < 0)
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
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
PyObject *
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
