/* The compiled part of the Pulsar fast path (dissectors/pulsar/fastpath.py).
 *
 * Why: on a capture of batched messages almost all of the reference's time goes to the
 * batch split, entry by entry through the tolerant protobuf reader (SingleMessageMetadata)
 * and a dict per message.  ``split_batch`` walks a decompressed batch payload
 * ([u32 size, SingleMessageMetadata, payload] x n, protocol-facts 4.1) in one pass and
 * returns each entry's sequence id, payload length, kept payload bytes (up to the cap,
 * laid out as an Arrow binary column) and, when libcrypto's one-shot ``SHA256`` was handed over (``use_sha256``, by
 * fastpath.py through ctypes, as the NATS extension does), the payload's SHA-256 in hex;
 * without it Python's hashlib computes the digests.
 *
 * It takes only what the reference would turn into plain rows: every entry whole, its
 * metadata made of payload_size (field 3) and sequence_id (field 8) only, each a
 * well-formed varint, the entries filling the payload exactly.  Anything else (another
 * field, a cut, a negative size, bytes left over) returns None and the reference
 * (session.py, _split_batch) handles the batch, anomalies and all.  Nothing raises on
 * input bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A varint of at most 10 bytes inside [*pos, end); the value as the reference keeps it
 * (bits above 64 dropped).  0 when cut or longer than 10 bytes. */
static int read_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out)
{
    uint64_t v = 0;
    Py_ssize_t p = *pos;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return 0;
        uint8_t b = buf[p++];
        if (shift < 64)
            v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *pos = p;
            *out = v;
            return 1;
        }
    }
    return 0;
}

typedef unsigned char *(*sha256_fn)(const unsigned char *, size_t, unsigned char *);
static sha256_fn sha256_oneshot = NULL;

static PyObject *use_sha256(PyObject *self, PyObject *args)
{
    unsigned long long addr;
    if (!PyArg_ParseTuple(args, "K", &addr))
        return NULL;
    sha256_oneshot = (sha256_fn)(uintptr_t)addr;
    Py_RETURN_NONE;
}

/* The lower-case hex SHA-256 of buf[0:n] into out[0:64] (the handed-over function must
 * be set). */
static void hex_digest(const uint8_t *buf, Py_ssize_t n, char *out)
{
    static const char hexd[] = "0123456789abcdef";
    unsigned char md[32];
    sha256_oneshot(buf, (size_t)n, md);
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
    if (sha256_oneshot) {
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
    PyObject *hex = sha256_oneshot ? PyBytes_FromStringAndSize(NULL, n * 64) : Py_NewRef(Py_None);
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

static PyObject *split_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n, cap;
    int has_seq;
    unsigned long long seq;
    if (!PyArg_ParseTuple(args, "y*npKn", &view, &n, &has_seq, &seq, &cap))
        return NULL;
    PyObject *result = NULL;
    PyObject *starts = NULL, *sizes = NULL, *seqs = NULL, *cols = NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len;
    /* every entry takes at least 4 + 2 bytes: more entries than that cannot fit */
    if (n <= 0 || n > end / 6 + 1)
        goto refuse;
    starts = PyBytes_FromStringAndSize(NULL, n * 8);
    sizes = PyBytes_FromStringAndSize(NULL, n * 8);
    seqs = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!starts || !sizes || !seqs)
        goto done;
    int64_t *st = (int64_t *)PyBytes_AS_STRING(starts);
    int64_t *sz = (int64_t *)PyBytes_AS_STRING(sizes);
    int64_t *sq = (int64_t *)PyBytes_AS_STRING(seqs);
    Py_ssize_t pos = 0;
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
        while (p < mend) {
            uint8_t tag = buf[p++];
            uint64_t v;
            if (tag != 0x18 && tag != 0x40)  /* payload_size, sequence_id (varints) */
                goto refuse;
            if (!read_varint(buf, &p, mend, &v))
                goto refuse;
            if (tag == 0x18) {
                psize = v;
                got_size = 1;
            } else {
                eseq = v;
                got_seq = 1;
            }
        }
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
    if (cols)
        result = Py_BuildValue("(OOOOOOO)", starts, sizes, seqs, PyTuple_GET_ITEM(cols, 0),
                               PyTuple_GET_ITEM(cols, 1), PyTuple_GET_ITEM(cols, 2),
                               PyTuple_GET_ITEM(cols, 3));
    goto done;
refuse:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(starts);
    Py_XDECREF(sizes);
    Py_XDECREF(seqs);
    Py_XDECREF(cols);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"split_batch", split_batch, METH_VARARGS,
     "split_batch(data, n, has_seq, seq, cap) -> (starts, sizes, seqs: packed int64, kept\n"
     "payload data, their int32 offsets, truncated: packed bool, hex digests (64 bytes\n"
     "each) or None), or None when the batch is not plain (the reference then takes it);\n"
     "cap -1: keep whole payloads."},
    {"use_sha256", use_sha256, METH_VARARGS,
     "use_sha256(address): libcrypto's one-shot SHA256 (0: digests left to hashlib)"},
    {"sha256_hex", sha256_hex, METH_VARARGS, "sha256_hex(data) -> hex, with that function"},
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
