/* The compiled part of the Pulsar fast path (dissectors/pulsar/fastpath.py).
 *
 * Why: on a capture of batched messages almost all of the reference's time goes to the
 * batch split, entry by entry through the tolerant protobuf reader (SingleMessageMetadata)
 * and a dict per message.  ``split_batch`` walks a decompressed batch payload
 * ([u32 size, SingleMessageMetadata, payload] x n, protocol-facts 4.1) in one pass and
 * returns where each payload is and its sequence id, as packed arrays.
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

static PyObject *split_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n;
    int has_seq;
    unsigned long long seq;
    if (!PyArg_ParseTuple(args, "y*npK", &view, &n, &has_seq, &seq))
        return NULL;
    PyObject *result = NULL;
    PyObject *starts = NULL, *sizes = NULL, *seqs = NULL;
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
    result = PyTuple_Pack(3, starts, sizes, seqs);
    goto done;
refuse:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(starts);
    Py_XDECREF(sizes);
    Py_XDECREF(seqs);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"split_batch", split_batch, METH_VARARGS,
     "split_batch(data, n, has_seq, seq) -> (starts, sizes, seqs) as packed int64, or None\n"
     "when the batch is not plain (the reference then takes it)."},
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
