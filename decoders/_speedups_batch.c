/*
 * split_batch: a decompressed batch into Message objects (formats.md §4), the batch
 * grammar of decoders.payload.parse_batch and the Message fields of entry._messages;
 * its records walked by next_record (_speedups_proto.c).
 */
#include "_speedups.h"

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
PyObject *
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
        Smm m;
        Py_ssize_t value_at;
        rc = next_record(buf, end, &pos, &m, &keys, 1, &value_at);
        if (rc <= 0) {
            if (rc < 0)
                goto done;
            goto irregular;
        }
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
