/* The compiled part of the Pulsar fast path (dissectors/pulsar/fastpath.py).
 *
 * Why: on a capture of batched messages almost all of the reference's time goes to the
 * batch split, entry by entry through the tolerant protobuf reader (SingleMessageMetadata)
 * and a dict per message.  ``split_batch`` walks a decompressed batch payload
 * ([u32 size, SingleMessageMetadata, payload] x n, protocol-facts 4.1) in one pass and
 * returns each entry's sequence id, payload length, kept payload bytes (up to the cap,
 * laid out as an Arrow binary column) and, when libcrypto's SHA256_Init/Update/Final were
 * handed over (``use_sha256``, by fastpath.py through ctypes, as the NATS extension
 * does), the payload's SHA-256 in hex;
 * without it Python's hashlib computes the digests.
 *
 * It takes only what the reference would turn into plain rows: every entry whole, its
 * metadata made of payload_size (field 3) and sequence_id (field 8), each a well-formed
 * varint, and what real clients add to them (pulsar-client: samples/pulsar-client.pcap):
 * properties (field 1, KeyValue {key 1, value 2}) and partition_key (field 2), strings
 * that must be valid UTF-8; the entries filling the payload exactly.  Those strings come
 * back as Arrow-layout buffers (properties as a map column's offsets, keys and values),
 * so a row still costs no Python object.  Anything else (another field, a tag or a
 * KeyValue field in another encoding, a string that is not UTF-8 (the reference shows it
 * escaped), a cut, a negative size, bytes left over) returns None and the reference
 * (session.py, _split_batch) handles the batch, anomalies and all.  Nothing raises on
 * input bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../proto/_wire.h"

/* Whether buf[0:n] is UTF-8 as Python's strict decoder takes it (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF): what the reference decodes without its
 * backslash escapes. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                         : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (len == 0 || n - i < len)
            return 0;
        for (Py_ssize_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        uint8_t c1 = s[i + 1];
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) ||
            (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
            return 0;
        i += len;
    }
    return 1;
}

/* A string field's value: as pb_bytes (_wire.h), and valid UTF-8. */
static int read_string(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t *start,
                       Py_ssize_t *len)
{
    return pb_bytes(buf, pos, end, start, len) && utf8_ok(buf + *start, *len);
}

/* Where one string sits in the batch (start, length). */
typedef struct {
    Py_ssize_t start, len;
} span_t;

/* A growable array of spans (PyMem), for the properties' keys and values. */
typedef struct {
    span_t *items;
    Py_ssize_t n, cap;
} spans_t;

static int spans_push(spans_t *v, Py_ssize_t start, Py_ssize_t len)
{
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 64;
        span_t *items = PyMem_Realloc(v->items, (size_t)cap * sizeof(span_t));
        if (!items) {
            PyErr_NoMemory();
            return 0;
        }
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n].start = start;
    v->items[v->n].len = len;
    v->n++;
    return 1;
}

/* One Arrow-layout string column piece (data, int32 offsets from 0) of n spans of buf:
 * (data, offsets) or NULL with an exception set. */
static PyObject *strings(const uint8_t *buf, const span_t *sp, Py_ssize_t n)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total += sp[i].len;
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "strings above 2 GiB in one batch");
        return NULL;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *result = NULL;
    if (data && offsets) {
        char *d = PyBytes_AS_STRING(data);
        int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
        Py_ssize_t at = 0;
        off[0] = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(d + at, buf + sp[i].start, (size_t)sp[i].len);
            at += sp[i].len;
            off[i + 1] = (int32_t)at;
        }
        result = PyTuple_Pack(2, data, offsets);
    }
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    return result;
}

/* One KeyValue (the bytes of a properties field): key and value spans, "" when absent,
 * the last occurrence winning as in the reference; 0 when it holds anything else. */
static int read_pair(const uint8_t *buf, Py_ssize_t p, Py_ssize_t end, span_t *key,
                     span_t *value)
{
    key->start = value->start = p;
    key->len = value->len = 0;
    while (p < end) {
        uint8_t tag = buf[p++];
        span_t *into = tag == 0x0A ? key : tag == 0x12 ? value : NULL;
        if (!into || !read_string(buf, &p, end, &into->start, &into->len))
            return 0;
    }
    return 1;
}

/* libcrypto's SHA256_Init/Update/Final, handed over by fastpath.py (as the NATS extension
 * takes them): the one-shot SHA256() of OpenSSL 3 fetches an EVP digest on every call,
 * which took more than the hashing itself on batches of ~500-byte entries (split_batch
 * 520 MB/s with it, measured on bench_pulsar.py's entries). */
typedef int (*sha_init_fn)(void *);
typedef int (*sha_update_fn)(void *, const void *, size_t);
typedef int (*sha_final_fn)(unsigned char *, void *);
static sha_init_fn sha_init = NULL;
static sha_update_fn sha_update = NULL;
static sha_final_fn sha_final = NULL;

static PyObject *use_sha256(PyObject *self, PyObject *args)
{
    unsigned long long init, update, final;
    if (!PyArg_ParseTuple(args, "KKK", &init, &update, &final))
        return NULL;
    if (!init || !update || !final)
        init = update = final = 0;  /* all or none */
    sha_init = (sha_init_fn)(uintptr_t)init;
    sha_update = (sha_update_fn)(uintptr_t)update;
    sha_final = (sha_final_fn)(uintptr_t)final;
    Py_RETURN_NONE;
}

/* The lower-case hex SHA-256 of buf[0:n] into out[0:64] (the handed-over function must
 * be set). */
static void hex_digest(const uint8_t *buf, Py_ssize_t n, char *out)
{
    static const char hexd[] = "0123456789abcdef";
    unsigned char md[32];
    uint64_t ctx[32]; /* SHA256_CTX is 112 bytes */
    sha_init(ctx);
    sha_update(ctx, buf, (size_t)n);
    sha_final(md, ctx);
    for (int k = 0; k < 32; k++) {
        out[2 * k] = hexd[md[k] >> 4];
        out[2 * k + 1] = hexd[md[k] & 15];
    }
}

static PyObject *sha256_hex(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    PyObject *r = NULL;
    if (sha_init) {
        char out[64];
        hex_digest((const uint8_t *)view.buf, view.len, out);
        r = PyUnicode_FromStringAndSize(out, 64);
    } else
        PyErr_SetString(PyExc_RuntimeError, "no SHA-256 function handed over");
    PyBuffer_Release(&view);
    return r;
}

/* The kept payloads as one Arrow-layout column piece (data, int32 offsets from 0), the
 * truncation flags and, with the handed-over function, the hex digests (64 bytes each,
 * one buffer): no Python object per entry. */
static PyObject *columns(const uint8_t *buf, Py_ssize_t n, const int64_t *st, const int64_t *sz,
                         Py_ssize_t cap)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total += (cap >= 0 && sz[i] > cap) ? cap : (Py_ssize_t)sz[i];
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "kept payloads above 2 GiB in one batch");
        return NULL;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *trunc = PyBytes_FromStringAndSize(NULL, n);
    PyObject *hex = sha_init ? PyBytes_FromStringAndSize(NULL, n * 64) : Py_NewRef(Py_None);
    PyObject *result = NULL;
    if (!data || !offsets || !trunc || !hex)
        goto done;
    char *d = PyBytes_AS_STRING(data), *t = PyBytes_AS_STRING(trunc);
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    Py_ssize_t at = 0;
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t keep = (cap >= 0 && sz[i] > cap) ? cap : (Py_ssize_t)sz[i];
        memcpy(d + at, buf + st[i], (size_t)keep);
        at += keep;
        off[i + 1] = (int32_t)at;
        t[i] = keep < sz[i];
        if (hex != Py_None)
            hex_digest(buf + st[i], (Py_ssize_t)sz[i], PyBytes_AS_STRING(hex) + i * 64);
    }
    result = PyTuple_Pack(4, data, offsets, trunc, hex);
done:
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    Py_XDECREF(trunc);
    Py_XDECREF(hex);
    return result;
}

/* The properties (map offsets per entry, keys, values) or partition keys (validity, data,
 * offsets) of a batch as Python buffers; None when no entry had any. */
static PyObject *properties(const uint8_t *buf, Py_ssize_t n, const int32_t *lists,
                            const spans_t *keys, const spans_t *values)
{
    if (keys->n == 0)
        return Py_NewRef(Py_None);
    PyObject *off = PyBytes_FromStringAndSize((const char *)lists, (n + 1) * 4);
    PyObject *k = strings(buf, keys->items, keys->n);
    PyObject *v = k ? strings(buf, values->items, values->n) : NULL;
    PyObject *result = NULL;
    if (off && k && v)
        result = Py_BuildValue("(OOOOO)", off, PyTuple_GET_ITEM(k, 0), PyTuple_GET_ITEM(k, 1),
                               PyTuple_GET_ITEM(v, 0), PyTuple_GET_ITEM(v, 1));
    Py_XDECREF(off);
    Py_XDECREF(k);
    Py_XDECREF(v);
    return result;
}

static PyObject *partition_keys(const uint8_t *buf, Py_ssize_t n, const span_t *keys,
                                const char *valid, Py_ssize_t count)
{
    if (count == 0)
        return Py_NewRef(Py_None);
    PyObject *v = PyBytes_FromStringAndSize(valid, n);
    PyObject *k = strings(buf, keys, n);
    PyObject *result = NULL;
    if (v && k)
        result = Py_BuildValue("(OOO)", v, PyTuple_GET_ITEM(k, 0), PyTuple_GET_ITEM(k, 1));
    Py_XDECREF(v);
    Py_XDECREF(k);
    return result;
}

static PyObject *split_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n, cap;
    int has_seq;
    unsigned long long seq;
    if (!PyArg_ParseTuple(args, "y*npKn", &view, &n, &has_seq, &seq, &cap))
        return NULL;
    PyObject *result = NULL;
    PyObject *starts = NULL, *sizes = NULL, *seqs = NULL, *cols = NULL, *props = NULL,
             *pkeys = NULL;
    spans_t keys = {0}, values = {0};
    int32_t *lists = NULL;  /* per entry: where its properties start among keys (n + 1) */
    span_t *pk = NULL;      /* per entry: its partition key ... */
    char *pk_valid = NULL;  /* ... when it has one */
    Py_ssize_t pk_count = 0;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len;
    /* every entry takes at least 4 + 2 bytes: more entries than that cannot fit */
    if (n <= 0 || n > end / 6 + 1)
        goto refuse;
    starts = PyBytes_FromStringAndSize(NULL, n * 8);
    sizes = PyBytes_FromStringAndSize(NULL, n * 8);
    seqs = PyBytes_FromStringAndSize(NULL, n * 8);
    lists = PyMem_Malloc((size_t)(n + 1) * sizeof(int32_t));
    pk = PyMem_Malloc((size_t)n * sizeof(span_t));
    pk_valid = PyMem_Malloc((size_t)n);
    if (!lists || !pk || !pk_valid) {
        PyErr_NoMemory();
        goto done;
    }
    if (!starts || !sizes || !seqs)
        goto done;
    int64_t *st = (int64_t *)PyBytes_AS_STRING(starts);
    int64_t *sz = (int64_t *)PyBytes_AS_STRING(sizes);
    int64_t *sq = (int64_t *)PyBytes_AS_STRING(seqs);
    Py_ssize_t pos = 0;
    lists[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (end - pos < 4)
            goto refuse;
        uint32_t size = (uint32_t)buf[pos] << 24 | (uint32_t)buf[pos + 1] << 16 |
                        (uint32_t)buf[pos + 2] << 8 | (uint32_t)buf[pos + 3];
        if ((Py_ssize_t)size > end - pos - 4)
            goto refuse;
        Py_ssize_t p = pos + 4, mend = pos + 4 + (Py_ssize_t)size;
        int got_size = 0, got_seq = 0;
        uint64_t psize = 0, eseq = 0;
        pk[i].start = pk[i].len = 0;
        pk_valid[i] = 0;
        while (p < mend) {
            uint8_t tag = buf[p++];
            uint64_t v;
            Py_ssize_t at, len;
            span_t key, value;
            switch (tag) {
            case 0x0A:  /* properties: one KeyValue, kept in order (duplicates too) */
                if (!pb_bytes(buf, &p, mend, &at, &len) ||
                    !read_pair(buf, at, at + len, &key, &value))
                    goto refuse;
                if (keys.n >= INT32_MAX)  /* (a 256 MiB batch holds far fewer) */
                    goto refuse;
                if (!spans_push(&keys, key.start, key.len) ||
                    !spans_push(&values, value.start, value.len))
                    goto fail;
                break;
            case 0x12:  /* partition_key (the last one wins) */
                if (!read_string(buf, &p, mend, &pk[i].start, &pk[i].len))
                    goto refuse;
                pk_valid[i] = 1;
                break;
            case 0x18:  /* payload_size */
            case 0x40:  /* sequence_id */
                if (!pb_varint(buf, &p, mend, &v))
                    goto refuse;
                if (tag == 0x18) {
                    psize = v;
                    got_size = 1;
                } else {
                    eseq = v;
                    got_seq = 1;
                }
                break;
            default:
                goto refuse;
            }
        }
        pk_count += pk_valid[i];
        lists[i + 1] = (int32_t)keys.n;
        /* payload_size is an int32: the low 32 bits, two's complement */
        int32_t ps = (int32_t)(uint32_t)(psize & 0xFFFFFFFFu);
        if (!got_size || ps < 0 || (Py_ssize_t)ps > end - mend)
            goto refuse;
        st[i] = (int64_t)mend;
        sz[i] = (int64_t)ps;
        if (got_seq)
            sq[i] = (int64_t)eseq;  /* as signed 64-bit, the column's _s64 */
        else if (has_seq)
            sq[i] = (int64_t)((uint64_t)seq + (uint64_t)i);  /* (seq + i) mod 2**64 */
        else
            goto refuse;  /* no sequence id at all: left to the reference */
        pos = mend + ps;
    }
    if (pos != end)
        goto refuse;
    cols = columns(buf, n, st, sz, cap);
    props = cols ? properties(buf, n, lists, &keys, &values) : NULL;
    pkeys = props ? partition_keys(buf, n, pk, pk_valid, pk_count) : NULL;
    if (pkeys)
        result = Py_BuildValue("(OOOOOOOOO)", starts, sizes, seqs, PyTuple_GET_ITEM(cols, 0),
                               PyTuple_GET_ITEM(cols, 1), PyTuple_GET_ITEM(cols, 2),
                               PyTuple_GET_ITEM(cols, 3), props, pkeys);
    goto done;
refuse:
    result = Py_NewRef(Py_None);
    goto done;
fail:
    result = NULL;
done:
    Py_XDECREF(starts);
    Py_XDECREF(sizes);
    Py_XDECREF(seqs);
    Py_XDECREF(cols);
    Py_XDECREF(props);
    Py_XDECREF(pkeys);
    PyMem_Free(keys.items);
    PyMem_Free(values.items);
    PyMem_Free(lists);
    PyMem_Free(pk);
    PyMem_Free(pk_valid);
    PyBuffer_Release(&view);
    return result;
}

/* ---- clean protobuf messages (the frame's command and metadata) ----------------------
 *
 * ``decode_clean(data, table)`` decodes a message as dissectors.proto.wire.decode does,
 * but only when that decode is clean and plain: every field known, in its own wire type,
 * strings valid UTF-8, no packed or map fields, nesting at most DECODE_DEPTH.  Anything
 * else returns None and the tolerant Python reader takes the message (errors, unknown
 * fields and escapes are its business).  ``table``: a list indexed by field number of
 * None or (name, kind, repeated, sub-table, sub-schema), kind as wire.Kind's numbers
 * (lists, so a message can contain itself: MessageIdData.first_chunk_message_id).  The
 * result is ``make(schema, values)`` (``Decoded``), values a dict in wire order (the last
 * value of a scalar wins, as in the reader), nested messages made the same way.
 */
#define DECODE_DEPTH 8

/* Set (or, repeated, append) name = value in out; steals value.  -1: an exception. */
static int put(PyObject *out, PyObject *name, int repeated, PyObject *value)
{
    if (!value)
        return -1;
    int r;
    if (repeated) {
        PyObject *list = PyDict_GetItemWithError(out, name);
        if (!list && PyErr_Occurred()) {
            Py_DECREF(value);
            return -1;
        }
        if (list) {
            r = PyList_Append(list, value);
        } else {
            list = PyList_New(1);
            if (!list) {
                Py_DECREF(value);
                return -1;
            }
            PyList_SET_ITEM(list, 0, value);
            r = PyDict_SetItem(out, name, list);
            Py_DECREF(list);
            return r;
        }
    } else
        r = PyDict_SetItem(out, name, value);
    Py_DECREF(value);
    return r;
}

/* The clean decode of buf[pos:end] into a new dict; Py_None (new ref) when not clean,
 * NULL with an exception. */
static PyObject *decode_message(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                                PyObject *table, PyObject *schema, PyObject *make, int depth)
{
    if (!PyList_Check(table) || depth > DECODE_DEPTH)
        return Py_NewRef(Py_None);
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    Py_ssize_t nfields = PyList_GET_SIZE(table);
    while (pos < end) {
        uint64_t v;
        Py_ssize_t number;
        int wt;
        if (!pb_tag(buf, &pos, end, nfields, &number, &wt))
            goto refuse;
        PyObject *spec = PyList_GET_ITEM(table, number);
        if (spec == Py_None || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5)
            goto refuse;  /* unknown field (or a table this code does not know) */
        PyObject *name = PyTuple_GET_ITEM(spec, 0);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        int repeated = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 2));
        if (kind == -1 && PyErr_Occurred())
            goto fail;
        if (repeated < 0)
            goto fail;
        PyObject *value;
        if (kind >= K_INT32 && kind <= K_ENUM) {
            if (wt != 0 || !pb_varint(buf, &pos, end, &v))
                goto refuse;  /* (packed repeated varints: left to the reader) */
            value = pb_scalar(kind, v);
        } else if (kind == K_STRING || kind == K_BYTES || kind == K_MESSAGE) {
            Py_ssize_t at, len;
            if (wt != 2 || !pb_bytes(buf, &pos, end, &at, &len))
                goto refuse;
            if (kind == K_STRING) {
                value = PyUnicode_DecodeUTF8((const char *)buf + at, len, NULL);
                if (!value) {
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                        goto fail;
                    PyErr_Clear();
                    goto refuse;  /* the reader escapes it and says so */
                }
            } else if (kind == K_BYTES) {
                value = PyBytes_FromStringAndSize((const char *)buf + at, len);
            } else {
                value = decode_message(buf, at, at + len, PyTuple_GET_ITEM(spec, 3),
                                       PyTuple_GET_ITEM(spec, 4), make, depth + 1);
                if (value == Py_None) {
                    Py_DECREF(value);
                    goto refuse;
                }
            }
        } else
            goto refuse;  /* map fields and kinds this code does not know */
        if (put(out, name, repeated, value) < 0)
            goto fail;
    }
    PyObject *made = PyObject_CallFunctionObjArgs(make, schema, out, NULL);
    Py_DECREF(out);
    return made;
refuse:
    Py_DECREF(out);
    return Py_NewRef(Py_None);
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *decode_clean(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *table, *schema, *make;
    if (!PyArg_ParseTuple(args, "y*O!OO", &view, &PyList_Type, &table, &schema, &make))
        return NULL;
    PyObject *r = decode_message((const uint8_t *)view.buf, 0, view.len, table, schema, make, 0);
    PyBuffer_Release(&view);
    return r;
}

/* ---- a whole frame (frame.parse_frame) ------------------------------------------------
 *
 * ``parse_frame(data, base, bem, metadata, make, frame_cls, payload_types, send, crc)``
 * is ``frame.parse_frame(data, fastpath.decode)`` for a clean frame: the PDU is exactly
 * the frame (4 + totalSize bytes), its command (and, on SEND/MESSAGE, the broker entry
 * metadata and the message metadata) decode cleanly (as decode_clean: base, bem and
 * metadata are (table, schema) pairs), a payload section only on SEND/MESSAGE and
 * whole, the checksum absent or matching (``crc``: crc32c.crc32c, called on a
 * memoryview of the checked bytes), and nothing the reference would report (no
 * ``problems``).  The result is ``frame_cls(...)`` (``Frame``) with every field as the
 * reference sets it; anything else returns None and the reference parses the frame.
 * Why: ~5 us of Python per frame (struct, slices, the dataclass, the checks), ~0.05 s
 * over the 150 MB benchmark capture's 9,970 frames.
 */
static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* decode_message of buf[pos:end] with a (table, schema) pair; Py_None when not clean. */
static PyObject *decode_pair(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                             PyObject *pair, PyObject *make)
{
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
        return Py_NewRef(Py_None);
    return decode_message(buf, pos, end, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1),
                          make, 0);
}

static PyObject *parse_frame(PyObject *self, PyObject *args)
{
    PyObject *data, *base, *bem_pair, *md_pair, *make, *frame_cls, *payload_types, *send, *crc;
    if (!PyArg_ParseTuple(args, "O!OOOOOOOO", &PyBytes_Type, &data, &base, &bem_pair, &md_pair,
                          &make, &frame_cls, &payload_types, &send, &crc))
        return NULL;
    const uint8_t *buf = (const uint8_t *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (n < 8)
        return Py_NewRef(Py_None);
    uint32_t total = be32(buf), cmd_size = be32(buf + 4);
    Py_ssize_t end = 4 + (Py_ssize_t)total, cmd_end = 8 + (Py_ssize_t)cmd_size;
    if (end != n || cmd_end > end)
        return Py_NewRef(Py_None);
    PyObject *command = NULL, *t = NULL, *bem = NULL, *md = NULL, *payload = NULL;
    PyObject *problems = NULL, *checksum = NULL, *computed = NULL, *result = NULL;
    PyObject *status = NULL, *msize_obj = NULL, *values = NULL;
    command = decode_pair(buf, 8, cmd_end, base, make);
    if (command == NULL || command == Py_None)
        goto done;
    values = PyObject_GetAttrString(command, "values");
    if (values == NULL)
        goto done;
    if (!PyDict_Check(values))
        goto refuse;
    t = PyDict_GetItemString(values, "type"); /* borrowed */
    if (t == NULL || !PyLong_CheckExact(t))
        goto refuse;
    Py_INCREF(t);
    int payload_cmd = PySet_Contains(payload_types, t);
    if (payload_cmd < 0)
        goto done;
    PyObject *tot = PyLong_FromUnsignedLong(total), *csz = PyLong_FromUnsignedLong(cmd_size);
    if (tot == NULL || csz == NULL) {
        Py_XDECREF(tot);
        Py_XDECREF(csz);
        goto done;
    }
    if (cmd_end >= end) {  /* a command alone (a payload command without one: reported) */
        if (!payload_cmd)
            result = PyObject_CallFunctionObjArgs(frame_cls, tot, csz, command, t, NULL);
        Py_DECREF(tot);
        Py_DECREF(csz);
        goto finish;
    }
    if (!payload_cmd) {  /* bytes after a command that has no payload: reported */
        Py_DECREF(tot);
        Py_DECREF(csz);
        goto refuse;
    }
    Py_ssize_t pos = cmd_end;
    int is_send = PyObject_RichCompareBool(t, send, Py_EQ);
    if (is_send < 0)
        goto fail_sizes;
    if (end - pos >= 2 && buf[pos] == 0x0e && buf[pos + 1] == 0x02) {
        if (is_send || end - pos < 6)
            goto refuse_sizes;
        uint32_t size = be32(buf + pos + 2);
        if ((Py_ssize_t)size > end - pos - 6)
            goto refuse_sizes;
        bem = decode_pair(buf, pos + 6, pos + 6 + (Py_ssize_t)size, bem_pair, make);
        if (bem == NULL)
            goto fail_sizes;
        if (bem == Py_None)
            goto refuse_sizes;
        pos += 6 + (Py_ssize_t)size;
    }
    if (end - pos >= 2 && buf[pos] == 0x0e && buf[pos + 1] == 0x01) {
        if (end - pos < 6)
            goto refuse_sizes;
        uint32_t sum = be32(buf + pos + 2);
        pos += 6;
        PyObject *view = PyMemoryView_FromMemory((char *)buf + pos, end - pos, PyBUF_READ);
        if (view == NULL)
            goto fail_sizes;
        computed = PyObject_CallOneArg(crc, view);
        Py_DECREF(view);
        if (computed == NULL)
            goto fail_sizes;
        checksum = PyLong_FromUnsignedLong(sum);
        if (checksum == NULL)
            goto fail_sizes;
        int same = PyObject_RichCompareBool(computed, checksum, Py_EQ);
        if (same < 0)
            goto fail_sizes;
        if (!same)
            goto refuse_sizes;  /* a mismatch: reported */
        status = PyUnicode_FromString("ok");
    } else {
        checksum = Py_NewRef(Py_None);
        computed = Py_NewRef(Py_None);
        status = PyUnicode_FromString("absent");
    }
    if (status == NULL)
        goto fail_sizes;
    if (end - pos < 4)
        goto refuse_sizes;
    uint32_t msize = be32(buf + pos);
    pos += 4;
    if ((Py_ssize_t)msize > end - pos)
        goto refuse_sizes;
    md = decode_pair(buf, pos, pos + (Py_ssize_t)msize, md_pair, make);
    if (md == NULL)
        goto fail_sizes;
    if (md == Py_None)
        goto refuse_sizes;
    payload = PyBytes_FromStringAndSize((const char *)buf + pos + msize, end - pos - msize);
    problems = PyList_New(0);
    msize_obj = PyLong_FromUnsignedLong(msize);
    if (payload == NULL || problems == NULL || msize_obj == NULL)
        goto fail_sizes;
    result = PyObject_CallFunctionObjArgs(frame_cls, tot, csz, command, t, Py_True,
                                          bem ? bem : Py_None, checksum, status, computed,
                                          msize_obj, md, payload, problems, NULL);
    Py_DECREF(tot);
    Py_DECREF(csz);
    goto finish;
refuse_sizes:
    Py_DECREF(tot);
    Py_DECREF(csz);
    goto refuse;
fail_sizes:
    Py_DECREF(tot);
    Py_DECREF(csz);
    goto done;
finish:
    if (result == NULL && !PyErr_Occurred())
        goto refuse;
    goto done;
refuse:
    result = Py_NewRef(Py_None);
done:
    if (command == Py_None) {
        result = command;  /* (not clean: the reference decodes it) */
        command = NULL;
    }
    Py_XDECREF(command);
    Py_XDECREF(values);
    Py_XDECREF(t);
    Py_XDECREF(bem);
    Py_XDECREF(md);
    Py_XDECREF(payload);
    Py_XDECREF(problems);
    Py_XDECREF(checksum);
    Py_XDECREF(computed);
    Py_XDECREF(status);
    Py_XDECREF(msize_obj);
    return result;
}

/* ---- the command's JSON (command_json) ---------------------------------------------
 *
 * ``plain_json(decoded, specs, cls)`` is session.py's ``_COMPACT_JSON(_plain(decoded))``
 * (json with separators "," ":" and ensure_ascii=False) for what decode_clean makes:
 * values in wire order, ints, bools and UTF-8 strings as they are, bytes as lower-case
 * hex, nested ``cls`` instances as objects, lists as arrays, an enum field's number as
 * its name when the enum knows it.  ``specs``: message full name -> {field name: enum
 * map (number -> name), or None for a field the reference shows another way (auth data:
 * length and digest)} for the fields ``_plain`` does not keep as they are.  Anything else
 * (such a field present, a float, a type it does not know, a schema not in ``specs``)
 * returns None and the reference makes the JSON.  Why: the JSON of every frame's command
 * cost ~5 us of Python (``_plain`` and the encoder), ~0.05 s over the 150 MB benchmark
 * capture's 9,970 frames.
 */
typedef struct {
    char *buf;
    Py_ssize_t n, cap;
} out_t;

static int out_put(out_t *o, const char *s, Py_ssize_t n)
{
    if (o->n + n > o->cap) {
        Py_ssize_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n)
            cap *= 2;
        char *b = PyMem_Realloc(o->buf, (size_t)cap);
        if (!b) {
            PyErr_NoMemory();
            return -1;
        }
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->n, s, (size_t)n);
    o->n += n;
    return 0;
}

/* A JSON string of a str (the encoder's escapes: \" \\ \b \f \n \r \t, \u00XX below
 * 0x20, the rest as it is).  -1: an exception; 1: not representable (refuse). */
static int out_str(out_t *o, PyObject *s)
{
    static const char hexd[] = "0123456789abcdef";
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();  /* (a lone surrogate: the reference's encoder decides) */
        return 1;
    }
    if (out_put(o, "\"", 1) < 0)
        return -1;
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (out_put(o, u + run, i - run) < 0)
            return -1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        Py_ssize_t len = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hexd[c >> 4];
            esc[5] = hexd[c & 15];
            len = 6;
        }
        if (out_put(o, esc, len) < 0)
            return -1;
        run = i + 1;
    }
    if (out_put(o, u + run, n - run) < 0 || out_put(o, "\"", 1) < 0)
        return -1;
    return 0;
}

static int out_decoded(out_t *o, PyObject *d, PyObject *specs, PyObject *cls, int depth);

/* One value of field ``name`` (``enums``: its enum map when the field is an enum the
 * reference names, else NULL).  -1 / 0 / 1 as out_str. */
static int out_value(out_t *o, PyObject *v, PyObject *enums, PyObject *specs, PyObject *cls,
                     int depth)
{
    if (PyList_CheckExact(v)) {
        if (out_put(o, "[", 1) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
            if (i && out_put(o, ",", 1) < 0)
                return -1;
            int r = out_value(o, PyList_GET_ITEM(v, i), enums, specs, cls, depth);
            if (r)
                return r;
        }
        return out_put(o, "]", 1);
    }
    if (Py_IS_TYPE(v, (PyTypeObject *)cls))
        return out_decoded(o, v, specs, cls, depth + 1);
    if (enums && !PyLong_CheckExact(v))
        return 1;  /* (an enum field holding something else: the reference decides) */
    if (PyBool_Check(v))
        return v == Py_True ? out_put(o, "true", 4) : out_put(o, "false", 5);
    if (PyLong_CheckExact(v)) {
        if (enums) {
            PyObject *name = PyDict_GetItemWithError(enums, v);
            if (name)
                return PyUnicode_CheckExact(name) ? out_str(o, name) : 1;
            if (PyErr_Occurred())
                return -1;
        }
        PyObject *text = PyObject_Str(v);
        if (!text)
            return -1;
        Py_ssize_t n;
        const char *t = PyUnicode_AsUTF8AndSize(text, &n);
        int r = t ? out_put(o, t, n) : -1;
        Py_DECREF(text);
        return r;
    }
    if (PyUnicode_CheckExact(v))
        return out_str(o, v);
    if (PyBytes_CheckExact(v)) {
        static const char hexd[] = "0123456789abcdef";
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(v);
        if (out_put(o, "\"", 1) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(v); i++) {
            char h[2] = {hexd[b[i] >> 4], hexd[b[i] & 15]};
            if (out_put(o, h, 2) < 0)
                return -1;
        }
        return out_put(o, "\"", 1);
    }
    return 1;  /* floats, dicts (map fields) and anything else */
}

static int out_decoded(out_t *o, PyObject *d, PyObject *specs, PyObject *cls, int depth)
{
    if (depth > DECODE_DEPTH)
        return 1;
    PyObject *values = PyObject_GetAttrString(d, "values");
    PyObject *schema = values ? PyObject_GetAttrString(d, "schema") : NULL;
    PyObject *full = schema ? PyObject_GetAttrString(schema, "full_name") : NULL;
    int r = -1;
    if (!full)
        goto done;
    PyObject *special = PyDict_GetItemWithError(specs, full);
    if (!special) {
        r = PyErr_Occurred() ? -1 : 1;
        goto done;
    }
    if (!PyDict_CheckExact(values) || !PyDict_CheckExact(special)) {
        r = 1;
        goto done;
    }
    if (out_put(o, "{", 1) < 0)
        goto done;
    Py_ssize_t pos = 0, k = 0;
    PyObject *name, *v;
    while (PyDict_Next(values, &pos, &name, &v)) {
        if (!PyUnicode_CheckExact(name)) {
            r = 1;
            goto done;
        }
        PyObject *enums = PyDict_GetItemWithError(special, name);
        if (!enums && PyErr_Occurred())
            goto done;
        if (enums == Py_None || (enums && !PyDict_CheckExact(enums))) {
            r = 1;  /* shown another way (auth data), or not a table this code knows */
            goto done;
        }
        if ((k++ && out_put(o, ",", 1) < 0) || (r = out_str(o, name)) != 0)
            goto done;
        if (out_put(o, ":", 1) < 0) {
            r = -1;
            goto done;
        }
        if ((r = out_value(o, v, enums, specs, cls, depth)) != 0)
            goto done;
    }
    r = out_put(o, "}", 1);
done:
    Py_XDECREF(values);
    Py_XDECREF(schema);
    Py_XDECREF(full);
    return r;
}

static PyObject *plain_json(PyObject *self, PyObject *args)
{
    PyObject *d, *specs, *cls;
    if (!PyArg_ParseTuple(args, "OO!O!", &d, &PyDict_Type, &specs, &PyType_Type, &cls))
        return NULL;
    if (!Py_IS_TYPE(d, (PyTypeObject *)cls))
        Py_RETURN_NONE;
    out_t o = {NULL, 0, 0};
    int r = out_decoded(&o, d, specs, cls, 0);
    PyObject *result = r < 0 ? NULL : r > 0 ? Py_NewRef(Py_None)
                                              : PyUnicode_DecodeUTF8(o.buf, o.n, NULL);
    PyMem_Free(o.buf);
    return result;
}

/* ---- shared columns repeated by runs (fastpath.MessageAccumulator.to_batch) ---------- */

enum { RV_INT64, RV_INT32, RV_BOOL, RV_STRING, RV_BINARY };

/* Value i of repeat_values' input: values[i], or values[i].get(key) when key is set
 * (borrowed; NULL with an error set when values[i] is not a dict). */
static PyObject *rv_item(PyObject *seq, Py_ssize_t i, PyObject *key)
{
    PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
    if (key == Py_None)
        return v;
    if (!PyDict_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "repeat_values: dicts expected");
        return NULL;
    }
    v = PyDict_GetItemWithError(v, key);
    if (v == NULL && !PyErr_Occurred())
        v = Py_None;
    return v;
}

/* One column of the chunks' shared values, value i repeated counts[i] (> 0) times, as
 * Arrow buffers: what pa.array(values, type) and runs.repeat_runs make, without a Python
 * object per value or an intermediate array.  Only exact ints (in range), bools, str (UTF-8)
 * and bytes, and None; anything else returns None and the caller converts as before (which
 * raises where pa.array raises). */
static PyObject *repeat_values(PyObject *self, PyObject *args)
{
    PyObject *values, *key;
    Py_buffer cb;
    int kind;
    if (!PyArg_ParseTuple(args, "OOy*i", &values, &key, &cb, &kind))
        return NULL;
    PyObject *seq = PySequence_Fast(values, "repeat_values: a sequence expected");
    PyObject *result = NULL, *bitmap = NULL, *data = NULL, *offsets = NULL;
    if (seq == NULL)
        goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    const int64_t *counts = (const int64_t *)cb.buf;
    if (cb.len != m * (Py_ssize_t)sizeof(int64_t) || kind < RV_INT64 || kind > RV_BINARY) {
        PyErr_SetString(PyExc_ValueError, "repeat_values: one int64 count per value");
        goto done;
    }
    Py_ssize_t n = 0, nulls = 0, bytes_total = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (counts[i] <= 0 || counts[i] > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "repeat_values: counts must be positive");
            goto done;
        }
        PyObject *v = rv_item(seq, i, key);
        if (v == NULL)
            goto done;
        n += counts[i];
        if (v == Py_None) {
            nulls += counts[i];
            continue;
        }
        Py_ssize_t len;
        switch (kind) {
        case RV_INT64:
        case RV_INT32: {
            if (!PyLong_CheckExact(v))
                goto unhandled;
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (x == -1 && PyErr_Occurred()))
                goto unhandled_clear;
            if (kind == RV_INT32 && (x < INT32_MIN || x > INT32_MAX))
                goto unhandled;
            break;
        }
        case RV_BOOL:
            if (v != Py_True && v != Py_False)
                goto unhandled;
            break;
        case RV_STRING:
            if (!PyUnicode_CheckExact(v) || PyUnicode_AsUTF8AndSize(v, &len) == NULL)
                goto unhandled_clear;
            bytes_total += len * counts[i];
            break;
        default:
            if (!PyBytes_CheckExact(v))
                goto unhandled;
            bytes_total += PyBytes_GET_SIZE(v) * counts[i];
        }
        if (bytes_total > INT32_MAX)  /* (checked as it grows: no overflow on the way) */
            goto unhandled;
    }
    if (n > INT32_MAX || bytes_total > INT32_MAX)
        goto unhandled;
    if (nulls) {
        bitmap = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (bitmap == NULL)
            goto done;
        memset(PyBytes_AS_STRING(bitmap), 0, (size_t)((n + 7) / 8));
    }
    Py_ssize_t width = kind == RV_INT64 ? 8 : kind == RV_INT32 ? 4 : 0;
    Py_ssize_t dsize = width ? n * width : kind == RV_BOOL ? (n + 7) / 8 : bytes_total;
    data = PyBytes_FromStringAndSize(NULL, dsize);
    if (data == NULL)
        goto done;
    char *d = PyBytes_AS_STRING(data);
    if (kind == RV_BOOL)
        memset(d, 0, (size_t)dsize);
    int32_t *off = NULL;
    if (kind == RV_STRING || kind == RV_BINARY) {
        offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
        if (offsets == NULL)
            goto done;
        off = (int32_t *)PyBytes_AS_STRING(offsets);
        off[0] = 0;
    }
    uint8_t *bits = bitmap ? (uint8_t *)PyBytes_AS_STRING(bitmap) : NULL;
    Py_ssize_t row = 0, at = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *v = rv_item(seq, i, key);
        Py_ssize_t k = (Py_ssize_t)counts[i];
        int valid = v != Py_None;
        if (bits && valid)
            for (Py_ssize_t r = row; r < row + k; r++)
                bits[r >> 3] |= (uint8_t)(1u << (r & 7));
        if (width == 8) {
            int64_t x = valid ? (int64_t)PyLong_AsLongLong(v) : 0;
            int64_t *out = (int64_t *)d + row;
            for (Py_ssize_t r = 0; r < k; r++)
                out[r] = x;
        } else if (width == 4) {
            int32_t x = valid ? (int32_t)PyLong_AsLongLong(v) : 0;
            int32_t *out = (int32_t *)d + row;
            for (Py_ssize_t r = 0; r < k; r++)
                out[r] = x;
        } else if (kind == RV_BOOL) {
            if (v == Py_True)
                for (Py_ssize_t r = row; r < row + k; r++)
                    d[r >> 3] |= (char)(1u << (r & 7));
        } else {
            const char *src = "";
            Py_ssize_t len = 0;
            if (valid) {
                if (kind == RV_STRING)
                    src = PyUnicode_AsUTF8AndSize(v, &len);
                else {
                    src = PyBytes_AS_STRING(v);
                    len = PyBytes_GET_SIZE(v);
                }
            }
            for (Py_ssize_t r = 0; r < k; r++) {
                if (len)
                    memcpy(d + at, src, (size_t)len);
                at += len;
                off[row + r + 1] = (int32_t)at;
            }
        }
        row += k;
    }
    result = Py_BuildValue("(nnOOO)", n, nulls, bitmap ? bitmap : Py_None, data,
                           offsets ? offsets : Py_None);
    goto done;
unhandled_clear:
    PyErr_Clear();
unhandled:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(seq);
    Py_XDECREF(bitmap);
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    PyBuffer_Release(&cb);
    return result;
}

static PyMethodDef methods[] = {
    {"split_batch", split_batch, METH_VARARGS,
     "split_batch(data, n, has_seq, seq, cap) -> (starts, sizes, seqs: packed int64, kept\n"
     "payload data, their int32 offsets, truncated: packed bool, hex digests (64 bytes\n"
     "each) or None, properties: (int32 map offsets per entry, key data, key offsets,\n"
     "value data, value offsets) or None, partition keys: (valid: packed bool, data,\n"
     "offsets) or None), or None when the batch is not plain (the reference then takes\n"
     "it); cap -1: keep whole payloads."},
    {"use_sha256", use_sha256, METH_VARARGS,
     "use_sha256(init, update, final): libcrypto's SHA256_Init/Update/Final (0s: digests\n"
     "left to hashlib)"},
    {"decode_clean", decode_clean, METH_VARARGS,
     "decode_clean(data, table, schema, make) -> make(schema, values) of a clean, plain\n"
     "protobuf message (nested ones made alike), or None when dissectors.proto.wire must\n"
     "decode it"},
    {"sha256_hex", sha256_hex, METH_VARARGS, "sha256_hex(data) -> hex, with that function"},
    {"parse_frame", parse_frame, METH_VARARGS,
     "parse_frame(data, base, bem, metadata, make, frame_cls, payload_types, send, crc) ->\n"
     "frame.parse_frame(data, fastpath.decode) of a clean frame (no problem to report),\n"
     "or None when the reference must parse it"},
    {"repeat_values", repeat_values, METH_VARARGS,
     "repeat_values(values, key, counts, kind) -> (rows, nulls, validity bitmap or None,\n"
     "data, int32 offsets or None): value i (values[i], or values[i].get(key) unless key\n"
     "is None) repeated counts[i] (packed int64) times as an Arrow column's buffers; kind\n"
     "0 int64, 1 int32, 2 bool, 3 string, 4 binary; None when a value is not exactly of\n"
     "the kind (or None)"},
    {"plain_json", plain_json, METH_VARARGS,
     "plain_json(decoded, specs, cls) -> the command's compact JSON as session.py makes it,\n"
     "or None when the reference must make it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dissectors.pulsar._speedups",
    "Compiled batch split of the Pulsar fast path.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
