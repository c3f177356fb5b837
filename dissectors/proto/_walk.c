/* dissectors.proto._walk: a payload dissector's row values straight from a clean
 * protobuf message, per a field plan (issue 22).
 *
 * Why: a STAN or Liftbridge message cost ~24 us of Python per message, of which the
 * tolerant reader (``wire.decode``: a Decoded, a dict of fields) and the per-type plan
 * loop (``wire.planned_values``: defaults, renames, enum names) were half.  This walks
 * the wire format once and fills the row's values dict itself.
 *
 * The reference stays ``dissectors.proto.wire``: ``values`` answers None for anything it
 * does not fully understand, and the caller then runs the reader.  It takes a message
 * only when the reader would decode it cleanly with nothing to report: every field
 * number in the plan, in its own wire type, no repeated, packed, map or message field,
 * strings valid UTF-8, no varint over 10 bytes or cut short, no length past the end,
 * no unsigned 64-bit value a column flagged int64-only cannot hold, no enum number its
 * names do not know.  Scalars as the reader's ``_scalar`` makes them; a field seen
 * twice keeps its last value, as the reader does.  (tests/stan/test_walk.py checks it
 * against the reader under hypothesis.)
 */
#define PY_SSIZE_T_CLEAN
#include "_wire.h"

#define MAX_NUMBER 128 /* field numbers a plan may name (two 64-bit presence words) */

/* The value of a varint field as the reader's _scalar makes it; ``names`` (an enum's
 * number -> name dict) turns an enum into its name.  NULL with no exception: refuse. */
static PyObject *scalar(long kind, uint64_t v, PyObject *extra)
{
    if (kind == K_UINT64 && extra == Py_True && v > (uint64_t)INT64_MAX)
        return NULL;  /* the reference reports the overflow */
    PyObject *num = pb_scalar(kind, v);
    if (kind != K_ENUM || !num || !PyDict_Check(extra))
        return num;  /* (an enum without names: the number itself) */
    PyObject *name = PyDict_GetItemWithError(extra, num);
    if (!name) {
        if (!PyErr_Occurred()) {
            name = PyObject_Str(num);  /* the dissectors' ``names.get(v, str(v))`` */
            Py_DECREF(num);
            return name;
        }
        Py_DECREF(num);
        return NULL;
    }
    Py_DECREF(num);
    return Py_NewRef(name);
}

/* values(data, pos, table, base, defaults) -> (values, present) or None
 *
 * data[pos:] is one message.  table: a list indexed by field number of None or
 * (column, kind, extra) -- extra None, an enum's names dict (K_ENUM), or True for a
 * K_UINT64 column that must fit int64.  A K_MESSAGE field (a plan made with nested
 * fields) gives its raw bytes, for the caller to walk; seen twice, the message is
 * refused.  base: a dict the values start as (copied).
 * defaults: a tuple of (field number, column, value) set for each field the message
 * does not hold (a list value is copied, so no two rows share one).  present: the field
 * numbers the message held, as the bits of an int. */
static PyObject *values(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    PyObject *table, *base, *defaults;
    if (!PyArg_ParseTuple(args, "y*nO!O!O!", &view, &pos, &PyList_Type, &table,
                          &PyDict_Type, &base, &PyTuple_Type, &defaults))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len;
    Py_ssize_t nfields = PyList_GET_SIZE(table);
    uint64_t present[2] = {0, 0};
    PyObject *out = NULL, *result = NULL;
    if (pos < 0 || pos > end || nfields > MAX_NUMBER)
        goto refuse;
    out = PyDict_Copy(base);
    if (!out)
        goto fail;
    while (pos < end) {
        uint64_t v;
        Py_ssize_t number;
        int wt;
        if (!pb_tag(buf, &pos, end, nfields, &number, &wt))
            goto refuse;
        PyObject *spec = PyList_GET_ITEM(table, number);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3)
            goto refuse;  /* not in the plan (unknown, or a field kind left to the reader) */
        PyObject *column = PyTuple_GET_ITEM(spec, 0);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        PyObject *extra = PyTuple_GET_ITEM(spec, 2);
        if (kind == -1 && PyErr_Occurred())
            goto fail;
        PyObject *value;
        if (kind >= K_INT32 && kind <= K_ENUM) {
            if (wt != 0 || !pb_varint(buf, &pos, end, &v))
                goto refuse;
            value = scalar(kind, v, extra);
        } else if (kind == K_STRING || kind == K_BYTES || kind == K_MESSAGE) {
            uint64_t n;
            if (wt != 2 || !pb_varint(buf, &pos, end, &n) || n > (uint64_t)(end - pos))
                goto refuse;
            if (kind == K_MESSAGE && present[number >> 6] & ((uint64_t)1 << (number & 63)))
                goto refuse;  /* a message field twice: the reader's to settle */
            const char *at = (const char *)buf + pos;
            pos += (Py_ssize_t)n;
            if (kind == K_BYTES || kind == K_MESSAGE)  /* (a message: its bytes, walked
                                                         * by the caller with its plan) */
                value = PyBytes_FromStringAndSize(at, (Py_ssize_t)n);
            else {
                value = PyUnicode_DecodeUTF8(at, (Py_ssize_t)n, NULL);
                if (!value && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();  /* the reader escapes it and reports it */
                    goto refuse;
                }
            }
        } else
            goto refuse;
        if (!value) {
            if (PyErr_Occurred())
                goto fail;
            goto refuse;
        }
        int r = PyDict_SetItem(out, column, value);
        Py_DECREF(value);
        if (r < 0)
            goto fail;
        present[number >> 6] |= (uint64_t)1 << (number & 63);
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(defaults); i++) {
        PyObject *d = PyTuple_GET_ITEM(defaults, i);
        if (!PyTuple_Check(d) || PyTuple_GET_SIZE(d) != 3)
            goto refuse;
        long number = PyLong_AsLong(PyTuple_GET_ITEM(d, 0));
        if (number == -1 && PyErr_Occurred())
            goto fail;
        if (number < 0 || number >= MAX_NUMBER)
            goto refuse;
        if (present[number >> 6] & ((uint64_t)1 << (number & 63)))
            continue;
        PyObject *value = PyTuple_GET_ITEM(d, 2);
        int r;
        if (PyList_CheckExact(value)) {
            PyObject *copy = PyList_GetSlice(value, 0, PyList_GET_SIZE(value));
            if (!copy)
                goto fail;
            r = PyDict_SetItem(out, PyTuple_GET_ITEM(d, 1), copy);
            Py_DECREF(copy);
        } else
            r = PyDict_SetItem(out, PyTuple_GET_ITEM(d, 1), value);
        if (r < 0)
            goto fail;
    }
    PyObject *bits = PyLong_FromUnsignedLongLong(present[0]);
    if (bits && present[1]) {
        PyObject *hi = PyLong_FromUnsignedLongLong(present[1]);
        PyObject *shift = PyLong_FromLong(64);
        PyObject *high = hi && shift ? PyNumber_Lshift(hi, shift) : NULL;
        Py_XDECREF(hi);
        Py_XDECREF(shift);
        PyObject *all = high ? PyNumber_Or(bits, high) : NULL;
        Py_XDECREF(high);
        Py_DECREF(bits);
        bits = all;
    }
    if (!bits)
        goto fail;
    result = PyTuple_Pack(2, out, bits);
    Py_DECREF(bits);
    Py_DECREF(out);
    PyBuffer_Release(&view);
    return result;
refuse:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"values", values, METH_VARARGS,
     "values(data, pos, table, base, defaults) -> (values, present) of the clean message\n"
     "data[pos:], or None when the tolerant reader must decode it (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dissectors.proto._walk",
    "A payload row's values from a clean protobuf message, per a field plan (walk.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__walk(void)
{
    return PyModule_Create(&module);
}
