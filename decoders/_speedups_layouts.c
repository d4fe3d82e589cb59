/*
 * Index layouts brought to slots, the form the slot scans of _speedups_heads.c and
 * _speedups_verify.c read (8-byte big-endian entry locations, (entry log << 32) | offset,
 * slot i of a run naming entry first_entry + i, 0 naming none; formats.md §11.4):
 *
 *   item_slots(...)     a run of DbLedgerStorage locations items, as slots
 *   log_slots(...)      entry log records into per-ledger slot tables (a lost index)
 *
 * As everywhere in this module, only the regular case is taken; anything else stops the
 * call with a status, and the Python path decides.
 */
#include "_speedups.h"

/*
 * item_slots(items, start, ledger_id) -> (slots, first_entry, stop)
 *
 * items: [(key, value)] of DbLedgerStorage's locations index, as scan_heads takes them.
 * From items[start], the longest run of items of ledger ``ledger_id`` whose entry ids
 * (>= 0) follow each other, as slots: the bytes of their values, slot i naming entry
 * first_entry + i. stop is the index after the run; stop == start (and slots empty) when
 * items[start] is not such an item (a malformed item, another ledger, an entry id below 0,
 * a location of 0, which a slot cannot hold), for the caller to decide on.
 */
PyObject *
sp_item_slots(PyObject *self, PyObject *args)
{
    PyObject *items;
    Py_ssize_t start;
    long long ledger_id;
    if (!PyArg_ParseTuple(args, "O!nL:item_slots", &PyList_Type, &items, &start, &ledger_id))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (start < 0 || start > n) {
        PyErr_Format(PyExc_ValueError, "item_slots: start %zd outside 0..%zd", start, n);
        return NULL;
    }
    /* no Python code runs from here to the end: the list and its items stay as they are */
    Py_ssize_t stop = start;
    int64_t first = 0, entry_id, packed;
    for (; stop < n; stop++) {
        if (read_item(PyList_GET_ITEM(items, stop), ledger_id, &entry_id, &packed) >= 0 ||
            entry_id < 0 || packed == 0 || (stop > start && entry_id != first + (stop - start)))
            break;
        if (stop == start)
            first = entry_id;
    }
    PyObject *slots = PyBytes_FromStringAndSize(NULL, 8 * (stop - start));
    if (slots == NULL)
        return NULL;
    uint8_t *at = (uint8_t *)PyBytes_AS_STRING(slots);
    for (Py_ssize_t i = start; i < stop; i++, at += 8)
        memcpy(at, PyBytes_AS_STRING(PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 1)), 8);
    return Py_BuildValue("(NLn)", slots, (long long)first, stop);
}

/* The slot tables of a ledger (bytearrays in the two dicts, created empty when absent):
 * 0 ok, -1 error. */
static int
slots_tables(PyObject *locations, PyObject *sizes, long long ledger_id, PyObject **locs_out,
             PyObject **sizes_out)
{
    PyObject *key = PyLong_FromLongLong(ledger_id);
    if (key == NULL)
        return -1;
    PyObject *tables[2] = {locations, sizes}, *found[2] = {NULL, NULL};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        found[k] = PyDict_GetItemWithError(tables[k], key);
        if (found[k] == NULL && PyErr_Occurred())
            rc = -1;
        else if (found[k] == NULL) {
            PyObject *table = PyByteArray_FromStringAndSize(NULL, 0);
            rc = table == NULL || PyDict_SetItem(tables[k], key, table) < 0 ? -1 : 0;
            found[k] = table;
            Py_XDECREF(table); /* the dict holds it */
        }
        else if (!PyByteArray_CheckExact(found[k])) {
            PyErr_SetString(PyExc_TypeError, "log_slots: slot tables must be bytearrays");
            rc = -1;
        }
    }
    Py_DECREF(key);
    /* two tables of one size in entries: 8 and 4 bytes a slot */
    if (rc == 0 && (found[0] == found[1] || PyByteArray_GET_SIZE(found[0]) % 8 != 0 ||
                    PyByteArray_GET_SIZE(found[1]) != PyByteArray_GET_SIZE(found[0]) / 2)) {
        PyErr_SetString(PyExc_ValueError, "log_slots: slot tables of different sizes");
        rc = -1;
    }
    *locs_out = found[0];
    *sizes_out = found[1];
    return rc;
}

/*
 * log_slots(window, pos, window_start, file_key, locations, sizes) -> (pos, status)
 *
 * The records of an entry log from window[pos] on (window: the log's bytes from file
 * offset window_start), walked as BookKeeper's scanEntryLog walks them
 * (decoders.entrylog.scan_records): where the i32 is <= 0 one byte is skipped
 * (padding), a record of ledger -1 (a ledgers map, a direct header's fake record) is
 * stepped over, and each entry's location and record size go into its ledger's slot
 * tables: ``locations[ledger]`` (8-byte slots, (file_key << 32) | offset of the body) and
 * ``sizes[ledger]`` (4-byte big-endian sizes), bytearrays indexed by entry id and grown
 * as needed (missing entries 0; the two dicts distinct, a ledger's tables of one length
 * in entries). A later record of an entry replaces an earlier one: a later copy wins, as
 * in BookKeeper's index rebuild, the logs being walked in order.
 *
 * Stops at a position with WINDOW (the window ends before the record there, its size
 * field or its 20-byte head do), IRREGULAR (a record scan_records reports: a ledger id
 * below -1, a size below 16 with a ledger id >= 0) or ODD (an entry id below 0, or more
 * than twice its table's size plus 2^20 slots, or an offset past 32 bits: the tables do
 * not take it).
 */
PyObject *
sp_log_slots(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    long long window_start, file_key;
    PyObject *locations, *sizes;
    if (!PyArg_ParseTuple(args, "y*nLLO!O!:log_slots", &view, &pos, &window_start, &file_key,
                          &PyDict_Type, &locations, &PyDict_Type, &sizes))
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || pos > view.len) {
        PyErr_Format(PyExc_ValueError, "log_slots: pos %zd outside 0..%zd", pos, view.len);
        goto done;
    }
    if (window_start < 0 || window_start > SLOTS_WINDOW_LIMIT || view.len > SLOTS_WINDOW_LIMIT ||
        file_key < 0 || file_key > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "log_slots: window start or file key out of range");
        goto done;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len;
    long long cached = -1; /* the ledger whose tables are at hand */
    PyObject *locs = NULL, *lens = NULL;
    int status;
    for (;;) {
        if (end - pos < 4) {
            status = HEADS_WINDOW;
            break;
        }
        int32_t size = (int32_t)be32(buf + pos);
        if (size <= 0) { /* padding: BookKeeper moves on one byte */
            pos++;
            continue;
        }
        if (end - pos < 20 || (int64_t)size > (int64_t)(end - pos - 4)) {
            status = HEADS_WINDOW;
            break;
        }
        int64_t ledger = be64(buf + pos + 4), entry = be64(buf + pos + 12);
        if (ledger < -1 || (ledger >= 0 && size < 16)) {
            status = HEADS_IRREGULAR;
            break;
        }
        if (ledger >= 0) {
            if (ledger != cached || locs == NULL) {
                if (slots_tables(locations, sizes, ledger, &locs, &lens) < 0)
                    goto done;
                cached = ledger;
            }
            Py_ssize_t have = PyByteArray_GET_SIZE(locs) / 8;
            if (entry < 0 || entry >= (int64_t)have * 2 + SLOTS_TABLE_SLACK ||
                window_start + pos + 4 > 0xFFFFFFFFLL) { /* past a location's offset */
                status = SLOTS_ODD;
                break;
            }
            if (entry >= have) {
                if (PyByteArray_Resize(locs, 8 * (Py_ssize_t)(entry + 1)) < 0 ||
                    PyByteArray_Resize(lens, 4 * (Py_ssize_t)(entry + 1)) < 0)
                    goto done;
                memset(PyByteArray_AS_STRING(locs) + 8 * have, 0, 8 * (size_t)(entry - have));
                memset(PyByteArray_AS_STRING(lens) + 4 * have, 0, 4 * (size_t)(entry - have));
            }
            uint64_t packed = ((uint64_t)file_key << 32) | (uint64_t)(window_start + pos + 4);
            uint8_t *slot = (uint8_t *)PyByteArray_AS_STRING(locs) + 8 * entry;
            uint8_t *len = (uint8_t *)PyByteArray_AS_STRING(lens) + 4 * entry;
            for (int k = 0; k < 8; k++)
                slot[k] = (uint8_t)(packed >> (56 - 8 * k));
            memcpy(len, buf + pos, 4);
        }
        pos += 4 + (Py_ssize_t)size;
    }
    result = Py_BuildValue("(ni)", pos, status);
done:
    PyBuffer_Release(&view);
    return result;
}

