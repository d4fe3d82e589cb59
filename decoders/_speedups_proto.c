/*
 * The protobuf messages the native paths read (PulsarApi.proto: MessageMetadata,
 * SingleMessageMetadata, KeyValue, EncryptionKeys, BrokerEntryMetadata): one parser for
 * each, taking what the Python path (the protobuf library) reads without a problem and
 * answering "irregular" (0) for anything else, so that the Python path decides.
 *
 *   parse_md        MessageMetadata, the fields a mask asks for (verify's checks, the
 *                   payload step's branches)
 *   next_record     one record of a batch: [u32 size][SingleMessageMetadata][payload]
 *                   (split_batch, compaction's walks, the payload check)
 *   parse_property  KeyValue
 *   skip_bem        the 0x0e02 layer and its BrokerEntryMetadata
 */
#include "_speedups.h"

/* A property key as str, one per distinct key per batch (KeyCache). */
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

void
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
int
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
int
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

/* The record at buf[*pos] of a batch (see _speedups.h): the one walk of a batch's records,
 * for split_batch, the compaction helpers and the payload check. */
int
next_record(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, Smm *m, KeyCache *keys,
            int properties, Py_ssize_t *value_at)
{
    Py_ssize_t at = *pos;
    if (end - at < 4)
        return 0;
    uint32_t size = be32(buf + at);
    at += 4;
    if ((uint64_t)size > (uint64_t)(end - at))
        return 0;
    int rc = parse_smm(buf + at, buf + at + size, m, keys, properties);
    if (rc <= 0)
        return rc;
    at += size;
    if (m->payload_size < 0 || m->payload_size > end - at) {
        Py_CLEAR(m->properties);
        return 0;
    }
    *value_at = at;
    *pos = at + m->payload_size;
    return 1;
}

/* The batch indexes a caller gives (None: 0 .. count - 1; else a list of count ints),
 * copied out before the batch is read, so that nothing can change them under the walk.
 * 1 ok (*out NULL for None, else PyMem memory), 0 not regular (another length, not ints,
 * past int64), -1 error. */
int
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
const uint8_t *
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

/* A KeyValue names Kafka-on-Pulsar's entry.format (its key field, whatever else it
 * holds): 1; 0 not; -1 not readable. */
static int
kv_entry_format(const uint8_t *q, const uint8_t *qend)
{
    int found = 0;
    while (q < qend) {
        uint32_t field;
        int wire;
        const uint8_t *t;
        Py_ssize_t tn;
        if (!read_tag(&q, qend, &field, &wire))
            return -1;
        if (wire != 2) {
            if (!skip_field(&q, qend, wire))
                return -1;
            continue;
        }
        if (!read_bytes(&q, qend, &t, &tn))
            return -1;
        if (field == 1 && tn == 12 && memcmp(t, "entry.format", 12) == 0)
            found = 1;
    }
    return found;
}

/*
 * A MessageMetadata (PulsarApi.proto) for what ``want`` asks:
 *
 *   MD_CHECKED  the message as verify checks it on every entry, regular only when the
 *               Python decoder reads it without a problem: producer_name, sequence_id and
 *               publish_time present; the string fields (1, 5, 6, 7, 14, 26) valid UTF-8;
 *               each property (4) a regular KeyValue, each encryption key (13) regular;
 *               sequence_id, publish_time and num_messages_in_batch varints.
 *   MD_PAYLOAD  the fields verify's payload step branches on (compression 8,
 *               uncompressed_size 9, num_messages_in_batch 11, varints), and ``other`` for
 *               those that leave the payload to the decoder: encryption keys (13), a
 *               marker (20), a uuid or chunk fields (26, 27, 29), compacted batch indexes
 *               (31), a property named entry.format (Kafka-on-Pulsar).
 *
 * Any field asked for with another wire type, and a group anywhere, is not regular; other
 * fields are skipped as protobuf skips unknown ones. 1 read, 0 not.
 */
int
parse_md(const uint8_t *p, const uint8_t *end, Md *md, unsigned want)
{
    const int checked = (want & MD_CHECKED) != 0, payload = (want & MD_PAYLOAD) != 0;
    int has_producer = 0, has_sequence = 0, has_publish = 0;
    memset(md, 0, sizeof(*md));
    while (p < end) {
        uint32_t field;
        int wire;
        uint64_t v;
        const uint8_t *s;
        Py_ssize_t n;
        if (!read_tag(&p, end, &field, &wire))
            return 0;
        int read = 0; /* the field was read here (else skipped) */
        switch (field) {
        case 1: case 5: case 6: case 7: case 14: case 26: /* strings */
            if (checked) {
                if (wire != 2 || !read_bytes(&p, end, &s, &n) || !utf8(s, n))
                    return 0;
                has_producer |= field == 1;
                read = 1;
            }
            if (payload && field == 26)
                md->other = 1;
            break;
        case 2: case 3:
            if (checked) {
                if (wire != 0 || !read_varint(&p, end, &v))
                    return 0;
                if (field == 2)
                    has_sequence = 1;
                else {
                    has_publish = 1;
                    md->publish_time = v;
                }
                read = 1;
            }
            break;
        case 8: case 9: case 11:
            if (field == 11 ? checked || payload : payload) {
                if (wire != 0 || !read_varint(&p, end, &v))
                    return 0;
                if (field == 8)
                    md->compression = v;
                else if (field == 9) {
                    md->uncompressed_size = v;
                    md->has_uncompressed = 1;
                }
                else {
                    md->num_messages = v;
                    md->batched = 1;
                }
                read = 1;
            }
            break;
        case 4: { /* KeyValue */
            if (checked || payload) {
                char canonical;
                if (wire != 2 || !read_bytes(&p, end, &s, &n))
                    return 0;
                if (checked && parse_property(s, s + n, NULL, NULL, &canonical) != 1)
                    return 0;
                if (payload) {
                    int kop = kv_entry_format(s, s + n);
                    if (kop < 0)
                        return 0;
                    md->other |= kop;
                }
                read = 1;
            }
            break;
        }
        case 13: /* EncryptionKeys */
            if (checked) {
                if (wire != 2 || !read_bytes(&p, end, &s, &n) || !regular_encryption_keys(s, s + n))
                    return 0;
                read = 1;
            }
            if (payload)
                md->other = 1;
            break;
        case 20: case 27: case 29: case 31: /* a marker, chunks, compacted batch indexes */
            if (payload)
                md->other = 1;
            break;
        default:
            break;
        }
        if (!read && (wire == 3 || wire == 4 || !skip_field(&p, end, wire)))
            return 0;
    }
    return !checked || (has_producer && has_sequence && has_publish);
}
