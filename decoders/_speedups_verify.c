/*
 * verify's entry checks (`ledgerctl verify`): the head scan continued to what verify
 * checks on every entry: the digest, the 0x0e01 CRC32C over metadata and payload, the
 * MessageMetadata (required fields, batch count, publish time; parse_md with MD_CHECKED),
 * and the ordered checks of pulsarctl_py.verify.order for the entries where nothing
 * happens (index continuous, timestamps not going back). It stops at anything else and
 * says why; the Python side then does what the general path does for that one entry. One
 * digest and one checksum computation per entry, and one loop (verify) over the sources
 * of _speedups_heads.c: verify_heads (items), verify_slots, verify_records.
 */
#include "_speedups.h"

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

/* What verify_heads, verify_slots and verify_records carry over from one entry to the next. */
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
    if (!digest_ok(entry, size, digest, digest_size, mac))
        return HEADS_IRREGULAR;
    const uint8_t *payload = entry + BK_HEADER + digest_size, *end = entry + size;
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
    if ((uint64_t)md_size > (uint64_t)(end - p) || !parse_md(p, p + md_size, &md, MD_CHECKED))
        return HEADS_IRREGULAR;
    long long payload_size = end - payload;
    uint64_t stamp = has_ts ? ts : md.publish_time;
    /* num_messages_in_batch is an int32: protobuf keeps the low 32 bits */
    int32_t count = md.batched ? (int32_t)(uint32_t)md.num_messages : 1;
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

/* The one verify loop: from position start on, each entry of the source checked by
 * verify_entry and counted on the state, until a status; st back into the state. */
static PyObject *
verify(Source *s, Py_ssize_t start, PyObject *state, VState *st, int digest, const MacKey *mac)
{
    Py_ssize_t i = start;
    int status = HEADS_END;
    for (; i < source_size(s); i++) {
        Found f;
        int found = source_entry(s, i, &st->expected, &f);
        if (found == SOURCE_SKIP)
            continue;
        if (found == SOURCE_ERROR)
            return NULL;
        if (found < 0) {
            found = verify_entry(st, f.entry, f.size, f.entry_id, digest, s->digest_size, mac);
            found_release(&f);
        }
        if (found >= 0) {
            status = found;
            break;
        }
    }
    return vstate_store(state, st, i, status);
}

/*
 * verify_heads(items, start, ledger_id, log_id, window, window_start, digest, state,
 *              key=None) -> (i, status)
 *
 * items, log_id, window, window_start as for scan_heads; digest: 3 CRC32C, 1 CRC32, 4
 * DUMMY, 2 MAC (the DigestType numbers; MAC with ``key``, see mac_setup). For each entry
 * from items[start] on that verify_entry finds clean: count it and its payload bytes, and
 * run the ordered checks on the state. Stops at item i with END, WINDOW, IRREGULAR,
 * OTHER_LEDGER (as scan_heads), GAP (its entry id is past S_EXPECTED) or VALUES (clean,
 * but the ordered checks have something to say, or are Python's: its values are in the
 * S_V_* slots and it is not counted).
 */
PyObject *
sp_verify_heads(PyObject *self, PyObject *args)
{
    PyObject *items, *ledger_obj, *window, *state, *key = NULL;
    Py_ssize_t start;
    long long log_id, window_start;
    int digest;
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
    Source s = {.from = FROM_ITEMS, .list = items, .ledger_id = ledger_id, .log_id = log_id};
    if (window_open(&s.w, window, window_start, start) < 0)
        return NULL;
    PyObject *result = NULL;
    if (vstate_load(state, digest, &st, &s.digest_size) == 0)
        result = verify(&s, start, state, &st, digest, mac);
    window_release(&s.w);
    return result;
}

/*
 * verify_slots(slots, start, first_entry, ledger_id, log_id, window, window_start,
 *              digest, state, key=None) -> (i, status)
 *
 * verify_heads for the entries slots name (slots, start, first_entry as for scan_slots;
 * digest 3 CRC32C, 1 CRC32, 4 DUMMY, 2 MAC with ``key``): each entry in the window
 * checked as verify_entry checks it and counted on the state. Stops at slot i with END,
 * WINDOW, IRREGULAR, GAP (its entry id is past S_EXPECTED) or VALUES, as verify_heads.
 */
PyObject *
sp_verify_slots(PyObject *self, PyObject *args)
{
    Py_buffer slots;
    Py_ssize_t start;
    long long first_entry, ledger_id, log_id, window_start;
    PyObject *window, *state, *result = NULL, *key = NULL;
    int digest;
    VState st;
    MacKey mac_key;
    const MacKey *mac;
    if (!PyArg_ParseTuple(args, "y*nLLLOLiO!|O:verify_slots", &slots, &start, &first_entry,
                          &ledger_id, &log_id, &window, &window_start, &digest, &PyList_Type,
                          &state, &key))
        return NULL;
    Source s = {.from = FROM_SLOTS, .slots = (const uint8_t *)slots.buf, .nslots = slots.len / 8,
                .first_entry = first_entry, .ledger_id = ledger_id, .log_id = log_id};
    if (digest_size_of(digest, "verify_slots") < 0 ||
        mac_setup("verify_slots", digest, key, &mac_key, &mac) < 0 ||
        slots_check("verify_slots", s.nslots, start, first_entry, window_start) < 0 ||
        vstate_load(state, digest, &st, &s.digest_size) < 0 ||
        window_slots(&s.w, window, window_start) < 0)
        goto done;
    result = verify(&s, start, state, &st, digest, mac);
    window_release(&s.w);
done:
    PyBuffer_Release(&slots);
    return result;
}

/*
 * verify_records(records, start, ledger_id, digest, state, key=None) -> (i, status)
 *
 * verify_heads for entries already read, from any storage: records is a list of
 * (entry_id, bytes-like) pairs in entry order. Statuses END, IRREGULAR (a record whose
 * size or ids are not those of the entry), GAP, VALUES as verify_heads.
 */
PyObject *
sp_verify_records(PyObject *self, PyObject *args)
{
    PyObject *records, *state, *key = NULL;
    Py_ssize_t start;
    long long ledger_id;
    int digest;
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
    Source s = {.from = FROM_RECORDS, .list = records, .ledger_id = ledger_id, .any_buffer = 1};
    if (vstate_load(state, digest, &st, &s.digest_size) < 0)
        return NULL;
    return verify(&s, start, state, &st, digest, mac);
}
