/*
 * Head scans of every storage layout. Included by _speedups.c, whose helpers it uses
 * (crc32c_update, crc32_update, skip_bem, be32/be64, new_bound, the verify state and
 * verify_entry); not compiled on its own.
 *
 * A slot is an 8-byte big-endian entry location, (entry log << 32) | offset, as an
 * InterleavedLedgerStorage or SortedLedgerStorage index file (.idx) keeps one per entry
 * id: slot i of a run names entry first_entry + i, and 0 names none (formats.md §11.4;
 * BookKeeper's LedgerEntryPage). DbLedgerStorage locations (item_slots) and entry logs
 * scanned for a lost index (log_slots) are brought to the same form, so one scanner
 * serves every layout:
 *
 *   scan_slots(...)     the entry heads of the entries slots name (CRC32C, CRC32, DUMMY)
 *   verify_slots(...)   verify_heads for the entries slots name
 *   item_slots(...)     a run of DbLedgerStorage locations items, as slots
 *   record_heads(...)   the entry heads of entries already read (live bookies, mixed
 *                       sources such as a journal tail)
 *   log_slots(...)      entry log records into per-ledger slot tables (a lost index)
 *
 * As everywhere in this module, only the regular case is taken; anything else stops the
 * call with a status, and the Python path decides on that entry.
 */

/* log_slots: an entry id its slot table does not take (see there) */
enum { SLOTS_ODD = 6 };

/* the largest window offset taken: entry log offsets are 32-bit */
#define SLOTS_WINDOW_LIMIT (1LL << 40)
/* a slot table grows by at most this many entries past twice its size (log_slots) */
#define SLOTS_TABLE_SLACK (1 << 20)

/* The stored digest's size of a digest type scanned here; else -1, a ValueError set. */
static int
slots_digest_size(int digest, const char *fn)
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
 * digest stores none; a MAC is checked with ``mac``. size >= BK_HEADER + digest_size. */
static int
slots_digest_ok(const uint8_t *entry, Py_ssize_t size, int digest, int digest_size,
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

/*
 * The EntryHead of a stored entry of ``size`` bytes whose ledger and entry ids the
 * caller checked (entry_id >= 0): a new reference, Py_None (a new reference) when the
 * entry is not regular, NULL on error. Regular, as scan_heads has it: a plausible header
 * (decoders.bookkeeper.plausible_header, which the Python decoder reports on), the
 * digest verified (a DUMMY digest has none: digest_ok None), then 0x0e02 broker entry
 * metadata of fields 1 and 2 (others skipped) not followed by another 0x0e02, or the
 * 0x0e01 checksum.
 */
static PyObject *
slots_head(const uint8_t *entry, Py_ssize_t size, long long ledger_id, int64_t entry_id,
           int digest, int digest_size, const MacKey *mac, PyObject *empty)
{
    if (size < BK_HEADER + digest_size + 2 || size > INT32_MAX)
        Py_RETURN_NONE;
    int64_t lac = be64(entry + 16), length = be64(entry + 24);
    if (be64(entry) < 0 || lac < -1 || lac > entry_id || length < 0)
        Py_RETURN_NONE;
    if (!slots_digest_ok(entry, size, digest, digest_size, mac))
        Py_RETURN_NONE;
    const uint8_t *payload = entry + BK_HEADER + digest_size, *end = entry + size;
    uint64_t ts = 0, index = 0;
    int has_ts = 0, has_index = 0, has_bem = 0;
    unsigned magic = ((unsigned)payload[0] << 8) | payload[1];
    if (magic == MAGIC_BEM) {
        const uint8_t *next = skip_bem(payload, end, &ts, &has_ts, &index, &has_index);
        if (next == NULL || (end - next >= 2 && next[0] == 0x0E && next[1] == 0x02))
            Py_RETURN_NONE;
        has_bem = 1;
    }
    else if (magic != MAGIC_CHECKSUM)
        Py_RETURN_NONE;
    PyObject *f[H_FIELDS] = {NULL};
    f[H_LEDGER_ID] = PyLong_FromLongLong(ledger_id);
    f[H_ENTRY_ID] = PyLong_FromLongLong(entry_id);
    f[H_SIZE] = PyLong_FromSsize_t(size);
    f[H_LAC] = PyLong_FromLongLong(lac);
    f[H_LENGTH] = PyLong_FromLongLong(length);
    f[H_DIGEST_OK] = new_ref(digest == DIGEST_DUMMY ? Py_None : Py_True);
    f[H_BROKER_TIMESTAMP] = has_ts ? PyLong_FromUnsignedLongLong(ts) : new_ref(Py_None);
    f[H_INDEX] = has_index ? PyLong_FromUnsignedLongLong(index) : new_ref(Py_None);
    f[H_BROKER_METADATA] = PyBool_FromLong(has_bem);
    f[H_PROBLEMS] = new_ref(empty);
    for (int k = 0; k < H_FIELDS; k++) {
        if (f[k] == NULL) {
            for (int j = 0; j < H_FIELDS; j++)
                Py_XDECREF(f[j]);
            return NULL;
        }
    }
    return new_bound(BIND_HEAD, f);
}

/* Append the head (with with_data: a (head, bytes of the entry) tuple; data, when not
 * NULL, is those bytes already as an object) to out. 1 appended, 0 irregular, -1 error. */
static int
slots_append(PyObject *out, const uint8_t *entry, Py_ssize_t size, long long ledger_id,
             int64_t entry_id, int digest, int digest_size, const MacKey *mac, PyObject *empty,
             int with_data, PyObject *data)
{
    PyObject *head =
        slots_head(entry, size, ledger_id, entry_id, digest, digest_size, mac, empty);
    if (head == NULL)
        return -1;
    if (head == Py_None) {
        Py_DECREF(head);
        return 0;
    }
    PyObject *item = head;
    if (with_data) {
        PyObject *bytes = data != NULL ? new_ref(data)
                                       : PyBytes_FromStringAndSize((const char *)entry, size);
        item = bytes == NULL ? NULL : PyTuple_Pack(2, head, bytes);
        Py_XDECREF(bytes);
        Py_DECREF(head);
        if (item == NULL)
            return -1;
    }
    int rc = PyList_Append(out, item);
    Py_DECREF(item);
    return rc < 0 ? -1 : 1;
}

/* The arguments slot scans share, checked: 0 ok, -1 with a ValueError set. */
static int
slots_check(const char *fn, Py_ssize_t n, Py_ssize_t start, long long first_entry,
            long long window_start)
{
    if (start < 0 || start > n) {
        PyErr_Format(PyExc_ValueError, "%s: start %zd outside 0..%zd", fn, start, n);
        return -1;
    }
    if (first_entry < 0 || first_entry > INT64_MAX - n) {
        PyErr_Format(PyExc_ValueError, "%s: first entry id %lld out of range", fn, first_entry);
        return -1;
    }
    if (window_start < 0 || window_start > SLOTS_WINDOW_LIMIT) {
        PyErr_Format(PyExc_ValueError, "%s: window start %lld out of range", fn, window_start);
        return -1;
    }
    return 0;
}

/*
 * The entry a slot names, found in the window (the log's bytes [window_start,
 * window_end), buf NULL when there is none) and checked as BookKeeper's readEntry checks
 * it (record size, ledger and entry ids), as locate_entry does for a locations item: -1
 * with *entry and *size set; else the status to stop at this slot with.
 */
static int
slot_entry(int64_t packed, long long ledger_id, int64_t entry_id, long long log_id,
           const uint8_t *buf, long long window_start, long long window_end, int digest_size,
           const uint8_t **entry_out, int32_t *size_out)
{
    if (packed < 0)
        return HEADS_IRREGULAR;
    long long offset = packed & 0xFFFFFFFFLL;
    if ((packed >> 32) != log_id || buf == NULL || offset - 4 < window_start ||
        offset > window_end)
        return HEADS_WINDOW;
    const uint8_t *rec = buf + (offset - 4 - window_start);
    int32_t size = (int32_t)be32(rec);
    if (size < BK_HEADER + digest_size)
        return HEADS_IRREGULAR;
    if (offset + size > window_end)
        return HEADS_WINDOW;
    const uint8_t *entry = rec + 4;
    if (be64(entry) != ledger_id || be64(entry + 8) != entry_id)
        return HEADS_IRREGULAR;
    *entry_out = entry;
    *size_out = size;
    return -1;
}

/* The window argument as a buffer (view->obj NULL for None): 0 ok, -1 error. */
static int
slots_window(PyObject *window, Py_buffer *view)
{
    view->obj = NULL;
    if (window == Py_None)
        return 0;
    if (PyObject_GetBuffer(window, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len > SLOTS_WINDOW_LIMIT) {
        PyBuffer_Release(view);
        view->obj = NULL;
        PyErr_SetString(PyExc_ValueError, "window too large");
        return -1;
    }
    return 0;
}

static int
slots_bound(const char *fn)
{
    if (bound[BIND_HEAD].type == NULL || bound[BIND_HEAD].n != H_FIELDS) {
        PyErr_Format(PyExc_RuntimeError, "%s: EntryHead class not bound", fn);
        return -1;
    }
    return 0;
}

/*
 * scan_slots(slots, start, first_entry, ledger_id, log_id, window, window_start, digest,
 *            out, with_data, key=None) -> (i, status)
 *
 * slots: a bytes-like of 8-byte slots, slot i naming entry first_entry + i (0: none). From
 * slot ``start`` on, while each entry is in log ``log_id`` and inside ``window`` (the
 * log's bytes from file offset ``window_start``): check the record as BookKeeper's
 * readEntry does (size, ledger and entry ids), then the head as slots_head, and append
 * it to ``out`` (with ``with_data``, a (head, bytes) pair: the entry's bytes copied out
 * of the window). ``digest``: 3 CRC32C, 1 CRC32, 4 DUMMY, 2 MAC with ``key`` (see
 * mac_setup). Stops at slot i with END (every
 * slot done), WINDOW (slot i is in another log or past the window) or IRREGULAR (slot i
 * needs the Python path).
 */
static PyObject *
sp_scan_slots(PyObject *self, PyObject *args)
{
    Py_buffer slots, view = {0};
    Py_ssize_t start;
    long long first_entry, ledger_id, log_id, window_start;
    PyObject *window, *out, *empty = NULL, *result = NULL, *key = NULL;
    int digest, with_data;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "y*nLLLOLiO!p|O:scan_slots", &slots, &start, &first_entry,
                          &ledger_id, &log_id, &window, &window_start, &digest, &PyList_Type,
                          &out, &with_data, &key))
        return NULL;
    Py_ssize_t n = slots.len / 8;
    int digest_size = slots_digest_size(digest, "scan_slots");
    if (digest_size < 0 || mac_setup("scan_slots", digest, key, &mac_key, &mac) < 0 || slots_check("scan_slots", n, start, first_entry, window_start) < 0 ||
        slots_bound("scan_slots") < 0 || slots_window(window, &view) < 0)
        goto done;
    if ((empty = PyTuple_New(0)) == NULL)
        goto done;
    const uint8_t *s = (const uint8_t *)slots.buf, *buf = (const uint8_t *)view.buf;
    long long window_end = window_start + (view.obj != NULL ? view.len : 0);
    Py_ssize_t i = start;
    int status = HEADS_END;
    for (; i < n; i++) {
        int64_t packed = be64(s + 8 * i), entry_id = first_entry + i;
        if (packed == 0)
            continue;
        const uint8_t *entry;
        int32_t size;
        int found = slot_entry(packed, ledger_id, entry_id, log_id, buf, window_start,
                               window_end, digest_size, &entry, &size);
        if (found < 0) {
            found = slots_append(out, entry, size, ledger_id, entry_id, digest, digest_size,
                                 mac, empty, with_data, NULL);
            if (found < 0)
                goto done;
            found = found ? -1 : HEADS_IRREGULAR;
        }
        if (found >= 0) {
            status = found;
            break;
        }
    }
    result = Py_BuildValue("(ni)", i, status);
done:
    Py_XDECREF(empty);
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    PyBuffer_Release(&slots);
    return result;
}

/*
 * verify_slots(slots, start, first_entry, ledger_id, log_id, window, window_start,
 *              digest, state, key=None) -> (i, status)
 *
 * verify_heads for the entries slots name (slots, start, first_entry as for scan_slots;
 * digest 3 CRC32C, 1 CRC32, 4 DUMMY, 2 MAC with ``key``): each entry in the window checked as verify_entry
 * checks it and counted on the state. Stops at slot i with END, WINDOW, IRREGULAR, GAP
 * (its entry id is past S_EXPECTED) or VALUES, as verify_heads.
 */
static PyObject *
sp_verify_slots(PyObject *self, PyObject *args)
{
    Py_buffer slots, view = {0};
    Py_ssize_t start;
    long long first_entry, ledger_id, log_id, window_start;
    PyObject *window, *state, *result = NULL, *key = NULL;
    int digest, digest_size;
    VState st;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "y*nLLLOLiO!|O:verify_slots", &slots, &start, &first_entry,
                          &ledger_id, &log_id, &window, &window_start, &digest, &PyList_Type,
                          &state, &key))
        return NULL;
    Py_ssize_t n = slots.len / 8;
    if (slots_digest_size(digest, "verify_slots") < 0 ||
        mac_setup("verify_slots", digest, key, &mac_key, &mac) < 0 ||
        slots_check("verify_slots", n, start, first_entry, window_start) < 0 ||
        vstate_load(state, digest, &st, &digest_size) < 0 || slots_window(window, &view) < 0)
        goto done;
    const uint8_t *s = (const uint8_t *)slots.buf, *buf = (const uint8_t *)view.buf;
    long long window_end = window_start + (view.obj != NULL ? view.len : 0);
    Py_ssize_t i = start;
    int status = HEADS_END;
    for (; i < n; i++) {
        int64_t packed = be64(s + 8 * i), entry_id = first_entry + i;
        if (packed == 0)
            continue;
        int found;
        const uint8_t *entry;
        int32_t size;
        if (entry_id != st.expected)
            found = entry_id > st.expected ? VERIFY_GAP : HEADS_IRREGULAR;
        else
            found = slot_entry(packed, ledger_id, entry_id, log_id, buf, window_start,
                               window_end, digest_size, &entry, &size);
        if (found < 0)
            found = verify_entry(&st, entry, size, entry_id, digest, digest_size, mac);
        if (found >= 0) {
            status = found;
            break;
        }
    }
    result = vstate_store(state, &st, i, status);
done:
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    PyBuffer_Release(&slots);
    return result;
}

/* A DbLedgerStorage locations item of the ledger: 1 with *entry_id and *packed set; 0
 * when it is not a (16-byte key, 8-byte value) pair of bytes of that ledger. */
static int
slots_item(PyObject *item, long long ledger_id, int64_t *entry_id, int64_t *packed)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2)
        return 0;
    PyObject *key = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
    if (!PyBytes_CheckExact(key) || !PyBytes_CheckExact(value) || PyBytes_GET_SIZE(key) != 16 ||
        PyBytes_GET_SIZE(value) != 8)
        return 0;
    const uint8_t *k = (const uint8_t *)PyBytes_AS_STRING(key);
    if (be64(k) != ledger_id)
        return 0;
    *entry_id = be64(k + 8);
    *packed = be64((const uint8_t *)PyBytes_AS_STRING(value));
    return 1;
}

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
static PyObject *
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
        if (!slots_item(PyList_GET_ITEM(items, stop), ledger_id, &entry_id, &packed) ||
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

/*
 * record_heads(records, start, ledger_id, digest, out, with_data, key=None) -> (i, status)
 *
 * The heads of entries already read, from any store (live bookies; several sources, a
 * journal tail): records is a list of (entry_id, bytes) pairs. For each from
 * records[start] on whose bytes are that entry's (size, ledger and entry ids) and whose
 * head is regular (slots_head), append the head to ``out`` (with ``with_data``, a (head,
 * bytes) pair holding the record's own bytes object). Stops at END or IRREGULAR.
 */
static PyObject *
sp_record_heads(PyObject *self, PyObject *args)
{
    PyObject *records, *out, *empty, *key = NULL;
    Py_ssize_t start;
    long long ledger_id;
    int digest, with_data;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "O!nLiO!p|O:record_heads", &PyList_Type, &records, &start,
                          &ledger_id, &digest, &PyList_Type, &out, &with_data, &key))
        return NULL;
    int digest_size = slots_digest_size(digest, "record_heads");
    if (digest_size < 0 || mac_setup("record_heads", digest, key, &mac_key, &mac) < 0 ||
        slots_bound("record_heads") < 0)
        return NULL;
    if (start < 0 || start > PyList_GET_SIZE(records)) {
        PyErr_Format(PyExc_ValueError, "record_heads: start %zd outside 0..%zd", start,
                     PyList_GET_SIZE(records));
        return NULL;
    }
    if ((empty = PyTuple_New(0)) == NULL)
        return NULL;
    Py_ssize_t i = start;
    int status = HEADS_END;
    /* the list is read again each time round: building a head may run Python code */
    for (; i < PyList_GET_SIZE(records); i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        if (!PyTuple_CheckExact(record) || PyTuple_GET_SIZE(record) != 2 ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(record, 0)) ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(record, 1))) {
            status = HEADS_IRREGULAR;
            break;
        }
        Py_INCREF(record); /* held while its bytes are read */
        int overflow = 0;
        long long entry_id = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(record, 0), &overflow);
        PyObject *data = PyTuple_GET_ITEM(record, 1);
        const uint8_t *entry = (const uint8_t *)PyBytes_AS_STRING(data);
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        int found = 0;
        if (!overflow && entry_id >= 0 && size >= BK_HEADER && be64(entry) == ledger_id &&
            be64(entry + 8) == entry_id)
            found = slots_append(out, entry, size, ledger_id, entry_id, digest, digest_size,
                                 mac, empty, with_data, data);
        Py_DECREF(record);
        if (found < 0) {
            Py_DECREF(empty);
            return NULL;
        }
        if (found == 0) {
            status = HEADS_IRREGULAR;
            break;
        }
    }
    Py_DECREF(empty);
    return Py_BuildValue("(ni)", i, status);
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
static PyObject *
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

#define LAYOUT_METHODS                                                                         \
    {"scan_slots", sp_scan_slots, METH_VARARGS,                                                \
     "scan_slots(slots, start, first_entry, ledger_id, log_id, window, window_start, digest, " \
     "out, with_data, key=None) -> (i, status): the entry heads of the entries slots name."},           \
        {"verify_slots", sp_verify_slots, METH_VARARGS,                                        \
         "verify_slots(slots, start, first_entry, ledger_id, log_id, window, window_start, "   \
         "digest, state, key=None) -> (i, status): verify_heads for the entries slots name."},           \
        {"item_slots", sp_item_slots, METH_VARARGS,                                            \
         "item_slots(items, start, ledger_id) -> (slots, first_entry, stop): a run of "        \
         "locations items as slots."},                                                         \
        {"record_heads", sp_record_heads, METH_VARARGS,                                        \
         "record_heads(records, start, ledger_id, digest, out, with_data, key=None) -> (i, status): "    \
         "the entry heads of entries already read."},                                          \
        {"log_slots", sp_log_slots, METH_VARARGS,                                              \
         "log_slots(window, pos, window_start, file_key, locations, sizes) -> (pos, status): " \
         "entry log records into per-ledger slot tables."},

/* The module constants of this part: 0 ok, -1 error. */
static int
layout_constants(PyObject *m)
{
    if (PyModule_AddIntConstant(m, "SLOTS_ODD", SLOTS_ODD) < 0)
        return -1;
    return PyModule_AddIntConstant(m, "SLOTS_TABLE_SLACK", SLOTS_TABLE_SLACK);
}
