/*
 * v3_read_replies: a bookie's answers to reads in the v3 protocol (formats.md §12.1;
 * BookkeeperProtocol.proto), many frames in one call, for the live client
 * (pulsarctl_py/stores/live/client.py).
 */
#include "_speedups.h"

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
PyObject *
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
