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
 * results for the input this module accepts (tests/decoders/test_speedups.py checks that on
 * generated and on mutated input).
 *
 * The module is compiled from several units sharing one internal header, _speedups.h,
 * which says what each holds. Its entry points, and the command each speeds up
 * (docs/performance.md, "Native entry points", has the measured gain of each):
 *
 *   bind(kind, cls, names)   objects are built directly in the slots of a
 *                            dataclass(slots=True) named by the Python side
 *   split_batch(...)         a decompressed batch -> Message objects (formats.md §4)
 *   scan_heads(...)          bookie entries cut from an entry log: ids, digest, BEM
 *   scan_slots(...)          the same for index files and a scanned entry log
 *   record_heads(...)        the same for entries already read (live bookies, a journal)
 *   verify_heads(...)        the same, checked as `verify` checks every entry
 *   verify_slots(...)        ... for index files and a scanned entry log
 *   verify_records(...)      ... for entries already read (any storage)
 *   item_slots(...), log_slots(...)   index layouts brought to slots
 *   payload_items(...), payload_slots(...), payload_records(...)
 *                            verify's payload check
 *   mac_available()          whether MAC digests are checked here (by _speedups_mac)
 *   v3_read_replies(...)     a bookie's v3 answers to reads, many frames in one call
 *   key_table(), compact_offer(...), compact_keep(...), compact_rebuild(...)
 *                            the local engine's key table, compaction's batch walks
 *   entry_lines(...)         inspect's JSON lines at --depth entry
 *   entry_doc(entry)         Entry.to_json() of a regular decoded entry (inspect's JSON)
 */
#include "_speedups.h"

/* -- objects built in the slots of a Python dataclass ------------------------------- */

Bound bound[BIND_KINDS];

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

PyObject *
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

/* -- module ---------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"bind", sp_bind, METH_VARARGS, "bind(kind, cls, names): build objects of cls in C."},
    {"split_batch", sp_split_batch, METH_VARARGS,
     "split_batch(plain, count, indexes, base_seq, publish_time, first_index, ledger_id, "
     "entry_id) -> (messages, placeholders, end) or None when the batch is not regular."},
    {"scan_heads", sp_scan_heads, METH_VARARGS,
     "scan_heads(items, start, ledger_id, log_id, window, window_start, out) -> (i, status)."},
    {"verify_heads", sp_verify_heads, METH_VARARGS,
     "verify_heads(items, start, ledger_id, log_id, window, window_start, digest, state, "
     "key=None) -> "
     "(i, status)."},
    {"verify_records", sp_verify_records, METH_VARARGS,
     "verify_records(records, start, ledger_id, digest, state, key=None) -> (i, status)."},
    {"crc32c", sp_crc32c, METH_VARARGS,
     "crc32c(data, value=0) -> int: CRC32C of data continuing from value."},
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
    {"scan_slots", sp_scan_slots, METH_VARARGS,
     "scan_slots(slots, start, first_entry, ledger_id, log_id, window, window_start, digest, "
     "out, with_data, key=None) -> (i, status): the entry heads of the entries slots name."},
    {"verify_slots", sp_verify_slots, METH_VARARGS,
     "verify_slots(slots, start, first_entry, ledger_id, log_id, window, window_start, "
     "digest, state, key=None) -> (i, status): verify_heads for the entries slots name."},
    {"item_slots", sp_item_slots, METH_VARARGS,
     "item_slots(items, start, ledger_id) -> (slots, first_entry, stop): a run of "
     "locations items as slots."},
    {"record_heads", sp_record_heads, METH_VARARGS,
     "record_heads(records, start, ledger_id, digest, out, with_data, key=None) -> (i, status): "
     "the entry heads of entries already read."},
    {"log_slots", sp_log_slots, METH_VARARGS,
     "log_slots(window, pos, window_start, file_key, locations, sizes) -> (pos, status): "
     "entry log records into per-ledger slot tables."},
    {"payload_items", sp_payload_items, METH_VARARGS,
     "payload_items(items, first, end, window, window_start, digest, limit, decompress) -> "
     "[i]: the locations items whose payload the decoder must judge."},
    {"payload_slots", sp_payload_slots, METH_VARARGS,
     "payload_slots(slots, first, end, window, window_start, digest, limit, decompress) "
     "-> [i]: the slots whose entry's payload the decoder must judge."},
    {"payload_records", sp_payload_records, METH_VARARGS,
     "payload_records(records, first, end, digest, limit, decompress) -> [i]: the "
     "records whose payload the decoder must judge."},
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
        PyModule_AddIntConstant(m, "SLOTS_ODD", SLOTS_ODD) < 0 ||
        PyModule_AddIntConstant(m, "SLOTS_TABLE_SLACK", SLOTS_TABLE_SLACK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

