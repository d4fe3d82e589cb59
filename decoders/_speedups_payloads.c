/*
 * verify's payload check, native: which of the entries the native verify pass found clean
 * need the decoder's payload step (decoders.entry.decode_payload) to say whether their
 * payload decodes.
 *
 * An entry is passed (nothing the payload step can reject) only when this side is sure:
 *
 *   - one value, not compressed, not a marker (as pulsarctl_py/verify/fastscan.py's
 *     Payloads.entry already judged it in Python);
 *   - a batch, not encrypted, not a marker, not a chunk, not a Kafka-on-Pulsar entry,
 *     without compacted_batch_indexes, of 1 .. MAX_BATCH_MESSAGES records, whose payload
 *     (decompressed by the decoder's own decoders.codecs.decompress, called from here;
 *     it raises for every payload that does not decompress to its uncompressed_size or
 *     past the limit) splits into exactly those records as split_batch splits them
 *     (records next_record reads as regular, keys valid UTF-8, no null values, nothing
 *     left over);
 *   - one value, compressed, not encrypted, not a marker or chunk, that decompresses.
 *
 * Every other entry is returned to the caller, which runs decode_payload on it: the rules
 * stay the decoder's, this side only knows when they have nothing to say.
 *
 *   payload_items(items, first, end, window, window_start, digest, limit, decompress)
 *   payload_slots(slots, first, end, window, window_start, digest, limit, decompress)
 *   payload_records(records, first, end, digest, limit, decompress)
 *       -> [i, ...] the positions in first .. end - 1 the caller must decide on.
 */
#include "_speedups.h"

/* decoders.entry.MAX_BATCH_MESSAGES */
#define PAYLOAD_MAX_BATCH 200000

/* A batch of count records in buf[0, len) splits as split_batch splits it, with nothing
 * left over and nothing its Python path would judge: 1, else 0. */
static int
payload_batch(const uint8_t *buf, Py_ssize_t len, uint64_t count)
{
    Py_ssize_t pos = 0, value_at;
    if (count < 1 || count > PAYLOAD_MAX_BATCH || count > (uint64_t)(len / 4))
        return 0;
    for (uint64_t j = 0; j < count; j++) {
        Smm m;
        if (next_record(buf, len, &pos, &m, NULL, 0, &value_at) != 1)
            return 0;
        if (m.null_value || (m.has_key && !utf8(m.key, m.key_len)))
            return 0;
    }
    return pos == len;
}

/* One entry (record size bytes at entry, already found clean by the verify pass): 1
 * passed, 0 the caller decides, -1 Python error. */
static int
payload_entry(const uint8_t *entry, Py_ssize_t size, int digest_size, PyObject *limit,
              PyObject *decompress)
{
    if (size < BK_HEADER + digest_size)
        return 0;
    const uint8_t *p = entry + BK_HEADER + digest_size, *end = entry + size;
    if (end - p >= 6 && p[0] == 0x0E && p[1] == 0x02) {
        uint32_t bem = be32(p + 2);
        if ((uint64_t)bem > (uint64_t)(end - p - 6))
            return 0;
        p += 6 + bem;
    }
    if (end - p >= 2 && p[0] == 0x0E && p[1] == 0x01)
        p += 6;
    if (end - p < 4)
        return 0;
    uint32_t md_size = be32(p);
    p += 4;
    if ((uint64_t)md_size > (uint64_t)(end - p))
        return 0;
    Md md;
    if (!parse_md(p, p + md_size, &md, MD_PAYLOAD) || md.other || md.compression > 4)
        return 0;
    const uint8_t *payload = p + md_size;
    Py_ssize_t payload_len = end - payload;
    if (md.compression == 0) {
        if (!md.batched)
            return 1;
        if (md.has_uncompressed && md.uncompressed_size != (uint64_t)payload_len)
            return 0;
        return payload_batch(payload, payload_len, md.num_messages);
    }
    /* compressed: the decoder's decompress, on a copy (the window stays this side's) */
    PyObject *data = PyBytes_FromStringAndSize((const char *)payload, payload_len);
    if (data == NULL)
        return -1;
    PyObject *plain = PyObject_CallFunction(decompress, "KOKO", (unsigned long long)md.compression,
                                            data, (unsigned long long)md.uncompressed_size,
                                            limit);
    Py_DECREF(data);
    if (plain == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1; /* KeyboardInterrupt and the like: not the entry's doing */
        PyErr_Clear();
        return 0; /* the decoder reports it */
    }
    Py_buffer view;
    if (PyObject_GetBuffer(plain, &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(plain);
        PyErr_Clear();
        return 0;
    }
    int rc = !md.batched ? 1 : payload_batch((const uint8_t *)view.buf, view.len, md.num_messages);
    PyBuffer_Release(&view);
    Py_DECREF(plain);
    return rc;
}

/* The arguments every payload_* function shares, checked: 0 ok, -1 with an error set. */
static int
payload_args(const char *fn, Py_ssize_t n, Py_ssize_t first, Py_ssize_t end, int digest,
             PyObject *decompress, int *digest_size)
{
    if (first < 0 || end < first || end > n) {
        PyErr_Format(PyExc_ValueError, "%s: range %zd..%zd outside 0..%zd", fn, first, end, n);
        return -1;
    }
    if (!PyCallable_Check(decompress)) {
        PyErr_Format(PyExc_TypeError, "%s: decompress must be callable", fn);
        return -1;
    }
    return (*digest_size = digest_size_of(digest, fn)) < 0 ? -1 : 0;
}

/* Add i to out: 0 ok, -1 error. */
static int
payload_refer(PyObject *out, Py_ssize_t i)
{
    PyObject *o = PyLong_FromSsize_t(i);
    if (o == NULL)
        return -1;
    int rc = PyList_Append(out, o);
    Py_DECREF(o);
    return rc;
}

/* The entry at the location packed ((log << 32) | offset of the entry, its size in the 4
 * bytes before) in the window, whichever log it names (the window is the one the verify
 * pass read it from): 1 with its bytes and size, 0 when the window does not hold it. */
static int
payload_located(int64_t packed, const Window *w, int digest_size, const uint8_t **entry,
                int32_t *size)
{
    return window_record(w, packed & 0xFFFFFFFFLL, BK_HEADER + digest_size, entry, size) < 0;
}

PyObject *
sp_payload_items(PyObject *self, PyObject *args)
{
    PyObject *items, *window, *limit, *decompress, *out = NULL;
    Py_ssize_t first, end;
    long long window_start;
    int digest, digest_size;
    if (!PyArg_ParseTuple(args, "O!nnOLiOO:payload_items", &PyList_Type, &items, &first, &end,
                          &window, &window_start, &digest, &limit, &decompress))
        return NULL;
    if (payload_args("payload_items", PyList_GET_SIZE(items), first, end, digest, decompress,
                     &digest_size) < 0)
        return NULL;
    Window w;
    if (window_slots(&w, window, window_start) < 0)
        return NULL;
    if ((out = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t i = first; i < end; i++) {
        /* decompress runs Python code: the list is read again at every item */
        const uint8_t *entry;
        int32_t size;
        int rc = 0;
        PyObject *item = i < PyList_GET_SIZE(items) ? PyList_GET_ITEM(items, i) : NULL;
        if (item != NULL && PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2 &&
            PyBytes_CheckExact(PyTuple_GET_ITEM(item, 1)) &&
            PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 1)) == 8 &&
            payload_located(be64((const uint8_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(item, 1))),
                            &w, digest_size, &entry, &size))
            rc = payload_entry(entry, size, digest_size, limit, decompress);
        if (rc < 0 || (rc == 0 && payload_refer(out, i) < 0)) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    window_release(&w);
    return out;
}

PyObject *
sp_payload_slots(PyObject *self, PyObject *args)
{
    PyObject *window, *limit, *decompress, *out = NULL;
    Py_buffer slots;
    Py_ssize_t first, end;
    long long window_start;
    int digest, digest_size;
    if (!PyArg_ParseTuple(args, "y*nnOLiOO:payload_slots", &slots, &first, &end, &window,
                          &window_start, &digest, &limit, &decompress))
        return NULL;
    Window w = {0};
    if (payload_args("payload_slots", slots.len / 8, first, end, digest, decompress,
                     &digest_size) < 0 ||
        window_slots(&w, window, window_start) < 0)
        goto done;
    if ((out = PyList_New(0)) == NULL)
        goto done;
    const uint8_t *s = (const uint8_t *)slots.buf;
    for (Py_ssize_t i = first; i < end; i++) {
        int64_t packed = be64(s + 8 * i);
        const uint8_t *entry;
        int32_t size;
        int rc = 0;
        if (packed == 0)
            continue; /* names no entry: verify_slots passes over it */
        if (payload_located(packed, &w, digest_size, &entry, &size))
            rc = payload_entry(entry, size, digest_size, limit, decompress);
        if (rc < 0 || (rc == 0 && payload_refer(out, i) < 0)) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    window_release(&w);
    PyBuffer_Release(&slots);
    return out;
}

PyObject *
sp_payload_records(PyObject *self, PyObject *args)
{
    PyObject *records, *limit, *decompress, *out = NULL;
    Py_ssize_t first, end;
    int digest, digest_size;
    if (!PyArg_ParseTuple(args, "O!nniOO:payload_records", &PyList_Type, &records, &first, &end,
                          &digest, &limit, &decompress))
        return NULL;
    if (payload_args("payload_records", PyList_GET_SIZE(records), first, end, digest,
                     decompress, &digest_size) < 0)
        return NULL;
    if ((out = PyList_New(0)) == NULL)
        return NULL;
    for (Py_ssize_t i = first; i < end; i++) {
        int rc = 0;
        PyObject *record = i < PyList_GET_SIZE(records) ? PyList_GET_ITEM(records, i) : NULL;
        if (record != NULL && PyTuple_CheckExact(record) && PyTuple_GET_SIZE(record) == 2 &&
            PyBytes_CheckExact(PyTuple_GET_ITEM(record, 1))) {
            PyObject *data = PyTuple_GET_ITEM(record, 1);
            Py_INCREF(data); /* held: decompress runs Python code */
            rc = payload_entry((const uint8_t *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data),
                               digest_size, limit, decompress);
            Py_DECREF(data);
        }
        if (rc < 0 || (rc == 0 && payload_refer(out, i) < 0)) {
            Py_CLEAR(out);
            return NULL;
        }
    }
    return out;
}
