/*
 * Entry heads of every storage layout: where a scan finds its entries, and the scan.
 *
 * The entries come in one of three forms (a Source), and one locator serves them all:
 *
 *   items    DbLedgerStorage's locations index: [(key, value)], key the ledger and entry
 *            ids as int64 BE, value (entry log << 32) | offset as int64 BE;
 *   slots    8-byte big-endian locations as an InterleavedLedgerStorage or
 *            SortedLedgerStorage index file (.idx) keeps one per entry id: slot i of a
 *            run names entry first_entry + i, and 0 names none (formats.md §11.4;
 *            BookKeeper's LedgerEntryPage); DbLedgerStorage items and entry logs scanned
 *            for a lost index are brought to this form by _speedups_layouts.c;
 *   records  entries already read, from any store (live bookies; several sources, a
 *            journal tail): [(entry_id, bytes)].
 *
 * An item or slot names a location; the entry is found in the window (the entry log's
 * bytes the caller read) and checked as BookKeeper's readEntry checks it (record size,
 * ledger and entry ids; EntryLogger / DefaultEntryLogger.readEntry). A record is checked
 * the same way. One head builder (entry_head) and one scan loop (scan) then give the
 * heads of scan_heads (items, CRC32C), scan_slots and record_heads; verify's loop over the
 * same sources is in _speedups_verify.c.
 *
 * As everywhere in this module, only the regular case is taken; anything else stops the
 * call with a status, and the Python path decides on that entry.
 */
#include "_speedups.h"

/* -- windows -------------------------------------------------------------------------- */

static int
window_get(Window *w, PyObject *window, long long start)
{
    memset(w, 0, sizeof(*w));
    if (window != Py_None && PyObject_GetBuffer(window, &w->view, PyBUF_SIMPLE) < 0)
        return -1;
    w->buf = w->view.obj != NULL ? (const uint8_t *)w->view.buf : NULL;
    w->start = start;
    w->len = w->view.obj != NULL ? w->view.len : 0;
    return 0;
}

/* The scanners take the buffer before they read their list, so that a buffer export
 * running Python code cannot change it under them. */
int
window_open(Window *w, PyObject *window, long long start, Py_ssize_t first)
{
    if (window_get(w, window, start) < 0)
        return -1;
    if (start < 0 || w->len > LLONG_MAX - start || first < 0) {
        window_release(w);
        PyErr_SetString(PyExc_ValueError,
                        "a negative start, or a window before offset 0 or past int64");
        return -1;
    }
    return 0;
}

int
window_slots(Window *w, PyObject *window, long long start)
{
    if (window_get(w, window, start) < 0)
        return -1;
    if (w->len > SLOTS_WINDOW_LIMIT) {
        window_release(w);
        PyErr_SetString(PyExc_ValueError, "window too large");
        return -1;
    }
    return 0;
}

void
window_release(Window *w)
{
    if (w->view.obj != NULL)
        PyBuffer_Release(&w->view);
    w->view.obj = NULL;
    w->buf = NULL;
}

int
window_record(const Window *w, long long offset, int min_size, const uint8_t **entry,
              int32_t *size)
{
    /* offset is below 2^32; the window's start may be anything a caller passed, so the
     * distance is taken only once it is known not to be negative */
    if (w->buf == NULL || offset - 4 < w->start)
        return HEADS_WINDOW;
    unsigned long long at = (unsigned long long)offset - (unsigned long long)w->start;
    if (at > (unsigned long long)w->len)
        return HEADS_WINDOW;
    const uint8_t *rec = w->buf + (at - 4);
    int32_t n = (int32_t)be32(rec);
    if (n < min_size)
        return HEADS_IRREGULAR;
    if ((unsigned long long)n > (unsigned long long)w->len - at)
        return HEADS_WINDOW;
    *entry = rec + 4;
    *size = n;
    return -1;
}

/* -- the locator ------------------------------------------------------------------------ */

Py_ssize_t
source_size(const Source *s)
{
    /* a list's size is read again at every item: making a head may run Python code (a
     * collection) */
    return s->from == FROM_SLOTS ? s->nslots : PyList_GET_SIZE(s->list);
}

int
read_item(PyObject *item, long long ledger_id, int64_t *entry_id, int64_t *packed)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2)
        return HEADS_IRREGULAR;
    PyObject *key = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
    if (!PyBytes_CheckExact(key) || !PyBytes_CheckExact(value) || PyBytes_GET_SIZE(key) != 16 ||
        PyBytes_GET_SIZE(value) != 8)
        return HEADS_IRREGULAR;
    const uint8_t *k = (const uint8_t *)PyBytes_AS_STRING(key);
    if (be64(k) != ledger_id)
        return HEADS_OTHER_LEDGER;
    *entry_id = be64(k + 8);
    *packed = be64((const uint8_t *)PyBytes_AS_STRING(value));
    return -1;
}

/* The entry at a location in the source's window: -1 with f's entry and size, else the
 * status to stop with. */
static int
locate(const Source *s, int64_t packed, Found *f)
{
    if (packed < 0)
        return HEADS_IRREGULAR;
    if ((packed >> 32) != s->log_id)
        return HEADS_WINDOW;
    int rc = window_record(&s->w, packed & 0xFFFFFFFFLL, BK_HEADER + s->digest_size, &f->entry,
                           &f->size);
    if (rc >= 0)
        return rc;
    if (be64(f->entry) != s->ledger_id || be64(f->entry + 8) != f->entry_id)
        return HEADS_IRREGULAR;
    return -1;
}

/* The status of an entry id that is not the one verify expects. */
static inline int
unexpected(int64_t entry_id, long long expected)
{
    return entry_id > expected ? VERIFY_GAP : HEADS_IRREGULAR;
}

/* A record of the records form, as record_heads takes it: an exact (int, bytes) pair
 * whose bytes are that entry's; anything else is irregular. The record is held while its
 * bytes are read (f->data). */
static int
record_exact(const Source *s, PyObject *record, const long long *expected, Found *f)
{
    if (!PyTuple_CheckExact(record) || PyTuple_GET_SIZE(record) != 2 ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(record, 0)) ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(record, 1)))
        return HEADS_IRREGULAR;
    int overflow = 0;
    long long entry_id = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(record, 0), &overflow);
    if (overflow || entry_id < 0)
        return HEADS_IRREGULAR;
    if (expected != NULL && entry_id != *expected)
        return unexpected(entry_id, *expected);
    PyObject *data = PyTuple_GET_ITEM(record, 1);
    const uint8_t *entry = (const uint8_t *)PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (size < BK_HEADER + s->digest_size || size > INT32_MAX || be64(entry) != s->ledger_id ||
        be64(entry + 8) != entry_id)
        return HEADS_IRREGULAR;
    f->data = new_ref(record);
    f->entry_id = entry_id;
    f->entry = entry;
    f->size = (int32_t)size;
    return -1;
}

/* A record as verify_records takes it: a pair (of any tuple type) of an exact int and a
 * bytes-like object of the three kinds whose buffer runs no Python code, so that nothing
 * can change the list while the entry is read (another pair is irregular, other values a
 * TypeError); its buffer held in f->view. */
static int
record_buffer(const Source *s, PyObject *record, const long long *expected, Found *f)
{
    if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 2)
        return HEADS_IRREGULAR;
    PyObject *id = PyTuple_GET_ITEM(record, 0), *data = PyTuple_GET_ITEM(record, 1);
    if (!PyLong_CheckExact(id) ||
        !(PyBytes_CheckExact(data) || PyByteArray_CheckExact(data) || PyMemoryView_Check(data))) {
        PyErr_SetString(PyExc_TypeError, "verify_records: records are (int, bytes-like)");
        return SOURCE_ERROR;
    }
    long long entry_id = PyLong_AsLongLong(id);
    if (entry_id == -1 && PyErr_Occurred())
        return SOURCE_ERROR;
    if (expected != NULL && entry_id != *expected)
        return unexpected(entry_id, *expected);
    if (PyObject_GetBuffer(data, &f->view, PyBUF_SIMPLE) < 0) {
        f->view.obj = NULL;
        return SOURCE_ERROR;
    }
    const uint8_t *entry = (const uint8_t *)f->view.buf;
    if (f->view.len < BK_HEADER + s->digest_size || f->view.len > INT32_MAX ||
        be64(entry) != s->ledger_id || be64(entry + 8) != entry_id) {
        found_release(f);
        return HEADS_IRREGULAR;
    }
    f->entry_id = entry_id;
    f->entry = entry;
    f->size = (int32_t)f->view.len;
    return -1;
}

int
source_entry(Source *s, Py_ssize_t i, const long long *expected, Found *f)
{
    f->data = NULL;
    f->view.obj = NULL;
    switch (s->from) {
    case FROM_ITEMS: {
        int64_t packed;
        int rc = read_item(PyList_GET_ITEM(s->list, i), s->ledger_id, &f->entry_id, &packed);
        if (rc >= 0)
            return rc;
        if (f->entry_id < 0)
            return HEADS_IRREGULAR;
        rc = locate(s, packed, f);
        /* an item's entry id is checked against verify's once it is found */
        if (rc < 0 && expected != NULL && f->entry_id != *expected)
            return unexpected(f->entry_id, *expected);
        return rc;
    }
    case FROM_SLOTS: {
        int64_t packed = be64(s->slots + 8 * i);
        if (packed == 0)
            return SOURCE_SKIP;
        f->entry_id = s->first_entry + i;
        if (expected != NULL && f->entry_id != *expected)
            return unexpected(f->entry_id, *expected);
        return locate(s, packed, f);
    }
    default: {
        PyObject *record = PyList_GET_ITEM(s->list, i);
        return s->any_buffer ? record_buffer(s, record, expected, f)
                             : record_exact(s, record, expected, f);
    }
    }
}

void
found_release(Found *f)
{
    Py_CLEAR(f->data);
    if (f->view.obj != NULL)
        PyBuffer_Release(&f->view);
    f->view.obj = NULL;
}

/* -- heads ------------------------------------------------------------------------------ */

/*
 * The EntryHead of a stored entry of ``size`` bytes whose ledger and entry ids were
 * checked (entry_id >= 0): a new reference, Py_None (a new reference) when the entry is
 * not regular, NULL on error. Regular: a plausible header (decoders.bookkeeper.
 * plausible_header, which the Python decoder reports on), the digest verified (a DUMMY
 * digest has none: digest_ok None), then 0x0e02 broker entry metadata of fields 1 and 2
 * (others skipped) not followed by another 0x0e02, or the 0x0e01 checksum. Anything else
 * (compacted framing, no prefixes) is left to the Python decoder.
 */
static PyObject *
entry_head(const uint8_t *entry, Py_ssize_t size, long long ledger_id, int64_t entry_id,
           int digest, int digest_size, const MacKey *mac, PyObject *empty)
{
    if (size < BK_HEADER + digest_size + 2 || size > INT32_MAX)
        Py_RETURN_NONE;
    int64_t lac = be64(entry + 16), length = be64(entry + 24);
    if (be64(entry) < 0 || lac < -1 || lac > entry_id || length < 0)
        Py_RETURN_NONE;
    if (!digest_ok(entry, size, digest, digest_size, mac))
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
head_append(PyObject *out, const uint8_t *entry, Py_ssize_t size, long long ledger_id,
            int64_t entry_id, int digest, int digest_size, const MacKey *mac, PyObject *empty,
            int with_data, PyObject *data)
{
    PyObject *head = entry_head(entry, size, ledger_id, entry_id, digest, digest_size, mac, empty);
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

/* The one scan loop: from position start on, the head of each entry of the source
 * appended to out, until a status. (i, status), or NULL on error. */
static PyObject *
scan(Source *s, Py_ssize_t start, int digest, const MacKey *mac, PyObject *out, int with_data)
{
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return NULL;
    Py_ssize_t i = start;
    int status = HEADS_END;
    for (; i < source_size(s); i++) {
        Found f;
        int found = source_entry(s, i, NULL, &f);
        if (found == SOURCE_SKIP)
            continue;
        if (found == SOURCE_ERROR)
            goto error;
        if (found < 0) {
            PyObject *data = f.data != NULL ? PyTuple_GET_ITEM(f.data, 1) : NULL;
            found = head_append(out, f.entry, f.size, s->ledger_id, f.entry_id, digest,
                                s->digest_size, mac, empty, with_data, data);
            found_release(&f);
            if (found < 0)
                goto error;
            found = found ? -1 : HEADS_IRREGULAR;
        }
        if (found >= 0) {
            status = found;
            break;
        }
    }
    Py_DECREF(empty);
    return Py_BuildValue("(ni)", i, status);
error:
    Py_DECREF(empty);
    return NULL;
}

/* -- the arguments the slot scans share -------------------------------------------------- */

int
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

int
heads_bound(const char *fn)
{
    if (bound[BIND_HEAD].type == NULL || bound[BIND_HEAD].n != H_FIELDS) {
        PyErr_Format(PyExc_RuntimeError, "%s: EntryHead class not bound", fn);
        return -1;
    }
    return 0;
}

/* -- the entry points ------------------------------------------------------------------- */

/*
 * scan_heads(items, start, ledger_id, log_id, window, window_start, out) -> (i, status)
 *
 * items: [(key, value)] of DbLedgerStorage's locations index. From items[start] on, while
 * each entry is in log ``log_id`` and inside ``window`` (the log's bytes from file offset
 * ``window_start``): check the record as BookKeeper's readEntry does (size, ledger and
 * entry ids), verify the CRC32C digest over header and payload, read the broker entry
 * metadata, and append an EntryHead to ``out``. Stops at item i with a status:
 * END (every item done), WINDOW (item i is in another log or past the window),
 * IRREGULAR (item i needs the Python path: anything but a clean entry), OTHER_LEDGER.
 */
PyObject *
sp_scan_heads(PyObject *self, PyObject *args)
{
    PyObject *items, *ledger_obj, *window, *out;
    Py_ssize_t start;
    long long log_id, window_start;
    if (!PyArg_ParseTuple(args, "O!nOLOLO!:scan_heads", &PyList_Type, &items, &start,
                          &ledger_obj, &log_id, &window, &window_start, &PyList_Type, &out))
        return NULL;
    if (heads_bound("scan_heads") < 0)
        return NULL;
    long long ledger_id = PyLong_AsLongLong(ledger_obj);
    if (ledger_id == -1 && PyErr_Occurred())
        return NULL;
    Source s = {.from = FROM_ITEMS, .list = items, .ledger_id = ledger_id, .log_id = log_id,
                .digest_size = 4};
    if (window_open(&s.w, window, window_start, start) < 0)
        return NULL;
    PyObject *result = scan(&s, start, DIGEST_CRC32C, NULL, out, 0);
    window_release(&s.w);
    return result;
}

/*
 * scan_slots(slots, start, first_entry, ledger_id, log_id, window, window_start, digest,
 *            out, with_data, key=None) -> (i, status)
 *
 * slots: a bytes-like of 8-byte slots, slot i naming entry first_entry + i (0: none). From
 * slot ``start`` on, while each entry is in log ``log_id`` and inside ``window`` (the
 * log's bytes from file offset ``window_start``): check the record as BookKeeper's
 * readEntry does (size, ledger and entry ids), then the head as entry_head, and append
 * it to ``out`` (with ``with_data``, a (head, bytes) pair: the entry's bytes copied out
 * of the window). ``digest``: 3 CRC32C, 1 CRC32, 4 DUMMY, 2 MAC with ``key`` (see
 * mac_setup). Stops at slot i with END (every slot done), WINDOW (slot i is in another
 * log or past the window) or IRREGULAR (slot i needs the Python path).
 */
PyObject *
sp_scan_slots(PyObject *self, PyObject *args)
{
    Py_buffer slots;
    Py_ssize_t start;
    long long first_entry, ledger_id, log_id, window_start;
    PyObject *window, *out, *result = NULL, *key = NULL;
    int digest, with_data;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "y*nLLLOLiO!p|O:scan_slots", &slots, &start, &first_entry,
                          &ledger_id, &log_id, &window, &window_start, &digest, &PyList_Type,
                          &out, &with_data, &key))
        return NULL;
    Source s = {.from = FROM_SLOTS, .slots = (const uint8_t *)slots.buf, .nslots = slots.len / 8,
                .first_entry = first_entry, .ledger_id = ledger_id, .log_id = log_id};
    s.digest_size = digest_size_of(digest, "scan_slots");
    if (s.digest_size < 0 || mac_setup("scan_slots", digest, key, &mac_key, &mac) < 0 ||
        slots_check("scan_slots", s.nslots, start, first_entry, window_start) < 0 ||
        heads_bound("scan_slots") < 0 || window_slots(&s.w, window, window_start) < 0)
        goto done;
    result = scan(&s, start, digest, mac, out, with_data);
    window_release(&s.w);
done:
    PyBuffer_Release(&slots);
    return result;
}

/*
 * record_heads(records, start, ledger_id, digest, out, with_data, key=None) -> (i, status)
 *
 * The heads of entries already read, from any store (live bookies; several sources, a
 * journal tail): records is a list of (entry_id, bytes) pairs. For each from
 * records[start] on whose bytes are that entry's (size, ledger and entry ids) and whose
 * head is regular (entry_head), append the head to ``out`` (with ``with_data``, a (head,
 * bytes) pair holding the record's own bytes object). Stops at END or IRREGULAR.
 */
PyObject *
sp_record_heads(PyObject *self, PyObject *args)
{
    PyObject *records, *out, *key = NULL;
    Py_ssize_t start;
    long long ledger_id;
    int digest, with_data;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "O!nLiO!p|O:record_heads", &PyList_Type, &records, &start,
                          &ledger_id, &digest, &PyList_Type, &out, &with_data, &key))
        return NULL;
    Source s = {.from = FROM_RECORDS, .list = records, .ledger_id = ledger_id};
    s.digest_size = digest_size_of(digest, "record_heads");
    if (s.digest_size < 0 || mac_setup("record_heads", digest, key, &mac_key, &mac) < 0 ||
        heads_bound("record_heads") < 0)
        return NULL;
    if (start < 0 || start > PyList_GET_SIZE(records)) {
        PyErr_Format(PyExc_ValueError, "record_heads: start %zd outside 0..%zd", start,
                     PyList_GET_SIZE(records));
        return NULL;
    }
    return scan(&s, start, digest, mac, out, with_data);
}
