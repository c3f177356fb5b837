/* dissectors._rows: row dicts transposed into one list per key (issue 22); below,
 * ``typed``: their simple columns straight into Arrow buffers.
 *
 * Why: ``dissectors.schema.rows_to_batch`` serves every dict row of every table, and
 * its transposition (``columns[k][i] = v`` for every item of every row) was ~190 Python
 * bytecodes per STAN row, ~6 % of a STAN run's bytecodes.  Arrow's own ways from dicts
 * were measured and are slower than that loop plus one ``pa.array`` per column (4096 STAN
 * rows of 46 keys: ``pa.array(rows, type=pa.struct(...))`` 10.5 ms,
 * ``RecordBatch.from_pylist`` 11.4 ms, the loop 4.0 ms and its conversions ~3.5 ms), so
 * only the transposition is done here; Arrow still converts each column, as before.
 *
 * ``columns(rows)`` answers ``(keys, lists)``: the keys the rows set, in the order they
 * are first seen (row by row, each row's own order), and for each key a list with row
 * i's value at i and None where row i lacks the key: exactly the Python loop's
 * ``columns`` dict (``dissectors.schema._columns``, the reference).  It answers None,
 * and the caller runs that loop, for anything but a list or tuple of exact dicts whose
 * keys are exact str: nothing here may run Python code (a key's ``__eq__``/``__hash__``)
 * that could change the rows under the walk.
 *
 * The lookup: rows of one table mostly set the same keys in the same order (a decoder
 * fills its dict the same way every time), so the column of a row's j-th key is first
 * guessed as the one the previous row's j-th key had, confirmed by identity (one pointer
 * compare); only a miss looks the key up in the index dict.  Nothing is borrowed across
 * an allocation (which may collect garbage, and so run a finalizer's Python code): the
 * rows are held through a tuple, each item while it is placed, each guessed key while it
 * is remembered.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define GUESSES 256 /* item positions whose last column is remembered */

static PyObject *columns(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyList_CheckExact(arg) && !PyTuple_CheckExact(arg))
        Py_RETURN_NONE;
    PyObject *rows = PySequence_Tuple(arg);  /* (a tuple: itself) */
    if (!rows)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(rows);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyDict_CheckExact(PyTuple_GET_ITEM(rows, i))) {
            Py_DECREF(rows);
            Py_RETURN_NONE;
        }
    PyObject *guess_key[GUESSES] = {NULL};
    Py_ssize_t guess_col[GUESSES];
    PyObject *got = NULL;
    PyObject *index = PyDict_New();  /* key -> its column's position in ``lists`` */
    PyObject *keys = PyList_New(0);
    PyObject *lists = PyList_New(0);
    if (!index || !keys || !lists)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyTuple_GET_ITEM(rows, i);
        Py_ssize_t pos = 0, j = 0;
        PyObject *key, *value;
        while (PyDict_Next(row, &pos, &key, &value)) {
            Py_ssize_t col;
            PyObject *own = NULL;  /* the value, held across a miss's allocations */
            if (j < GUESSES && guess_key[j] == key) {
                col = guess_col[j];
            } else {
                if (!PyUnicode_CheckExact(key)) {  /* its __eq__ could be Python */
                    got = Py_NewRef(Py_None);
                    goto done;
                }
                Py_INCREF(key);
                own = Py_NewRef(value);
                PyObject *at = PyDict_GetItemWithError(index, key);
                if (at) {
                    col = PyLong_AsSsize_t(at);
                } else if (PyErr_Occurred()) {
                    col = -1;
                } else {  /* a key first seen: a new list of n Nones */
                    col = PyList_GET_SIZE(lists);
                    PyObject *list = PyList_New(n);
                    if (list) {
                        for (Py_ssize_t r = 0; r < n; r++)
                            PyList_SET_ITEM(list, r, Py_NewRef(Py_None));
                    }
                    PyObject *num = list ? PyLong_FromSsize_t(col) : NULL;
                    if (!num || PyList_Append(lists, list) || PyDict_SetItem(index, key, num)
                        || PyList_Append(keys, key))
                        col = -1;
                    Py_XDECREF(num);
                    Py_XDECREF(list);
                }
                if (col < 0) {
                    Py_DECREF(own);
                    Py_DECREF(key);
                    goto done;
                }
                if (j < GUESSES) {
                    Py_XSETREF(guess_key[j], key);  /* (the reference taken above) */
                    guess_col[j] = col;
                } else {
                    Py_DECREF(key);
                }
            }
            /* (a hit allocated nothing since PyDict_Next: the row still holds the value) */
            PyObject *list = PyList_GET_ITEM(lists, col);
            PyObject *old = PyList_GET_ITEM(list, i);  /* None: a dict has a key once */
            PyList_SET_ITEM(list, i, own ? own : Py_NewRef(value));
            Py_DECREF(old);
            j++;
        }
    }
    got = PyTuple_Pack(2, keys, lists);
done:
    for (int j = 0; j < GUESSES; j++)
        Py_XDECREF(guess_key[j]);
    Py_XDECREF(index);
    Py_XDECREF(keys);
    Py_XDECREF(lists);
    Py_DECREF(rows);
    return got;
}

/* ------------------------------------------------------------------ typed columns
 *
 * ``typed(rows, index, kinds)``: the row dicts' values straight into Arrow buffers,
 * for the columns whose type is simple (``kinds``), where ``columns`` above leaves every
 * value a Python object for ``pa.array`` to convert one by one.  ``index`` maps each
 * declared column name to its position, ``kinds`` (bytes) says per position what the
 * column holds.  The answer is a list by position: None where no row set the key, the
 * list of values (None where a row lacks the key) for an OBJECT column, else the
 * column's parts as ``dissectors.arrowops.from_parts`` takes them: (validity bitmap or
 * None, null count, data) and, for strings and binary, (validity, nulls, offsets,
 * data).
 *
 * It answers None, and the caller converts as before (``pa.array``: the reference), for
 * anything it does not take exactly as Arrow would: not a list or tuple of exact dicts;
 * a key that is not an exact str or not in ``index``; a value that is not exactly what
 * the column takes (an exact int in range, True/False, a str that encodes to UTF-8, exact
 * bytes) or None.  Arrow would convert some of those (a float to an int column...) or
 * raise; either way the reference decides.
 *
 * ``typed_tuples(rows, first, kinds)`` is the same over positions first, first+1, ... of
 * row tuples (``dissectors.proto.columns.PayloadRows``' envelope), every row holding
 * every column.
 *
 * Nothing here allocates a Python object while it walks the rows (the OBJECT lists are
 * made first; buffers are PyMem memory, which starts no garbage collection), so no
 * finalizer's Python code can run under the walk.
 */
/* (the simple kinds numbered as dissectors/pulsar/_speedups.c's repeat_values numbers
 * them: dissectors.schema.typed_kind serves both) */
enum { K_INT64 = 0, K_INT32 = 1, K_BOOL = 2, K_STRING = 3, K_BINARY = 4, K_OBJECT = 5,
       K_IGNORE = 6 };
#define K_VAR(kind) ((kind) == K_STRING || (kind) == K_BINARY)

typedef struct {
    int kind, set;
    char *data, *valid;      /* fixed width: n values; valid: the bitmap */
    int32_t *offs;           /* strings: n + 1 offsets */
    Py_ssize_t len, cap;     /* strings: bytes of data used and allocated */
    Py_ssize_t last;         /* strings: the rows up to here have their offsets */
    Py_ssize_t valids;
    PyObject *objects;       /* OBJECT: n Nones at first */
} TCol;

static int tcol_width(int kind)
{
    return kind == K_INT64 ? 8 : kind == K_INT32 ? 4 : 0;
}

static int tcols_init(TCol *cols, Py_ssize_t ncols, const char *kinds, Py_ssize_t n)
{
    for (Py_ssize_t c = 0; c < ncols; c++) {
        TCol *col = &cols[c];
        col->kind = kinds[c];
        if (col->kind < 0 || col->kind > K_IGNORE) {
            PyErr_Format(PyExc_ValueError, "typed: unknown column kind %d", col->kind);
            return -1;
        }
        if (col->kind == K_IGNORE)
            continue;
        if (col->kind == K_OBJECT) {
            if (!(col->objects = PyList_New(n)))
                return -1;
            for (Py_ssize_t r = 0; r < n; r++)
                PyList_SET_ITEM(col->objects, r, Py_NewRef(Py_None));
            continue;
        }
        Py_ssize_t bitmap = (n + 7) / 8, width = tcol_width(col->kind);
        col->valid = PyMem_Calloc(bitmap ? bitmap : 1, 1);
        if (col->kind == K_BOOL)
            col->data = PyMem_Calloc(bitmap ? bitmap : 1, 1);
        else if (width)
            col->data = PyMem_Calloc(n ? n : 1, width);
        else {
            col->offs = PyMem_Calloc(n + 1, sizeof(int32_t));
            col->cap = 256;
            col->data = PyMem_Malloc(col->cap);
        }
        if (!col->valid || !col->data || (K_VAR(col->kind) && !col->offs)) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static void tcols_free(TCol *cols, Py_ssize_t ncols)
{
    for (Py_ssize_t c = 0; c < ncols; c++) {
        PyMem_Free(cols[c].data);
        PyMem_Free(cols[c].valid);
        PyMem_Free(cols[c].offs);
        Py_XDECREF(cols[c].objects);
    }
}

/* row i's value of one column: 1 placed, 0 not taken (the caller answers None), -1 an
 * error (memory) */
static int tcol_put(TCol *col, Py_ssize_t i, PyObject *v)
{
    col->set = 1;
    switch (col->kind) {
    case K_IGNORE:
        return 1;
    case K_OBJECT: {
        PyObject *old = PyList_GET_ITEM(col->objects, i);
        PyList_SET_ITEM(col->objects, i, Py_NewRef(v));
        Py_DECREF(old);  /* (None: immortal in effect, no finalizer) */
        return 1;
    }
    default:
        break;
    }
    if (v == Py_None)
        return 1;  /* (null: its bit stays 0, its slot 0) */
    if (col->kind == K_INT64 || col->kind == K_INT32) {
        if (!PyLong_CheckExact(v))
            return 0;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return 0;
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (col->kind == K_INT64) {
            ((int64_t *)col->data)[i] = (int64_t)x;
        } else {
            if (x < INT32_MIN || x > INT32_MAX)
                return 0;
            ((int32_t *)col->data)[i] = (int32_t)x;
        }
    } else if (col->kind == K_BOOL) {
        if (v == Py_True)
            col->data[i >> 3] |= (char)(1 << (i & 7));
        else if (v != Py_False)
            return 0;
    } else {  /* strings and binary */
        const char *p;
        Py_ssize_t size;
        if (col->kind == K_STRING) {
            if (!PyUnicode_CheckExact(v))
                return 0;
            p = PyUnicode_AsUTF8AndSize(v, &size);
            if (!p) {  /* (a lone surrogate: the reference replaces it) */
                PyErr_Clear();
                return 0;
            }
        } else {
            if (!PyBytes_CheckExact(v))
                return 0;
            p = PyBytes_AS_STRING(v);
            size = PyBytes_GET_SIZE(v);
        }
        if (size > INT32_MAX - col->len)
            return 0;  /* (past int32 offsets: the reference's error) */
        if (col->len + size > col->cap) {
            Py_ssize_t cap = col->cap;
            while (cap < col->len + size)
                cap *= 2;
            char *np = PyMem_Realloc(col->data, cap);
            if (!np) {
                PyErr_NoMemory();
                return -1;
            }
            col->data = np;
            col->cap = cap;
        }
        for (Py_ssize_t r = col->last + 1; r <= i; r++)
            col->offs[r] = (int32_t)col->len;
        memcpy(col->data + col->len, p, size);
        col->len += size;
        col->offs[i + 1] = (int32_t)col->len;
        col->last = i + 1;
    }
    col->valid[i >> 3] |= (char)(1 << (i & 7));
    col->valids++;
    return 1;
}

/* the list of the columns' parts (the module comment above) */
static PyObject *tcols_parts(TCol *cols, Py_ssize_t ncols, Py_ssize_t n)
{
    PyObject *out = PyList_New(ncols);
    if (!out)
        return NULL;
    Py_ssize_t bitmap = (n + 7) / 8;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        TCol *col = &cols[c];
        PyObject *part;
        if (!col->set || col->kind == K_IGNORE) {
            part = Py_NewRef(Py_None);
        } else if (col->kind == K_OBJECT) {
            part = Py_NewRef(col->objects);
        } else {
            Py_ssize_t nulls = n - col->valids;
            PyObject *valid = nulls ? PyBytes_FromStringAndSize(col->valid, bitmap)
                                    : Py_NewRef(Py_None);
            PyObject *data = NULL, *offs = NULL;
            if (K_VAR(col->kind)) {
                for (Py_ssize_t r = col->last + 1; r <= n; r++)
                    col->offs[r] = (int32_t)col->len;
                offs = PyBytes_FromStringAndSize((char *)col->offs, (n + 1) * 4);
                data = PyBytes_FromStringAndSize(col->data, col->len);
            } else {
                Py_ssize_t size = col->kind == K_BOOL ? bitmap : n * tcol_width(col->kind);
                data = PyBytes_FromStringAndSize(col->data, size);
            }
            PyObject *count = PyLong_FromSsize_t(nulls);
            part = (!valid || !data || !count || (K_VAR(col->kind) && !offs)) ? NULL
                   : K_VAR(col->kind) ? PyTuple_Pack(4, valid, count, offs, data)
                   : PyTuple_Pack(3, valid, count, data);
            Py_XDECREF(valid);
            Py_XDECREF(data);
            Py_XDECREF(offs);
            Py_XDECREF(count);
            if (!part) {
                Py_DECREF(out);
                return NULL;
            }
        }
        PyList_SET_ITEM(out, c, part);
    }
    return out;
}

/* typed's and typed_tuples' start: ``rows`` as a tuple, each row an exact dict
 * (``first`` < 0) or a tuple holding the columns from ``first`` on, and their columns
 * made; 1 when ready, 0 when not taken (the caller answers None), -1 on an error */
static int typed_start(PyObject *arg, PyObject *kinds_obj, Py_ssize_t first, Py_ssize_t *n,
                       PyObject **rows, TCol **cols, Py_ssize_t *ncols)
{
    if (!PyBytes_Check(kinds_obj)) {
        PyErr_SetString(PyExc_TypeError, "typed: kinds must be bytes");
        return -1;
    }
    *ncols = PyBytes_GET_SIZE(kinds_obj);
    if (!PyList_CheckExact(arg) && !PyTuple_CheckExact(arg))
        return 0;
    if (!(*rows = PySequence_Tuple(arg)))  /* (a tuple: itself) */
        return -1;
    *n = PyTuple_GET_SIZE(*rows);
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *row = PyTuple_GET_ITEM(*rows, i);
        if (first < 0 ? !PyDict_CheckExact(row)
                      : !PyTuple_Check(row) || PyTuple_GET_SIZE(row) < first + *ncols) {
            Py_CLEAR(*rows);
            return 0;
        }
    }
    if (!(*cols = PyMem_Calloc(*ncols ? *ncols : 1, sizeof(TCol)))) {
        PyErr_NoMemory();
        Py_CLEAR(*rows);
        return -1;
    }
    return tcols_init(*cols, *ncols, PyBytes_AS_STRING(kinds_obj), *n) < 0 ? -1 : 1;
}

/* typed's and typed_tuples' end: ``got`` (None when the walk declined; NULL on an error),
 * else the columns' parts */
static PyObject *typed_end(PyObject *rows, TCol *cols, Py_ssize_t ncols, Py_ssize_t n,
                           int r)
{
    PyObject *got = r > 0 ? tcols_parts(cols, ncols, n) : r == 0 ? Py_NewRef(Py_None) : NULL;
    if (cols) {
        tcols_free(cols, ncols);
        PyMem_Free(cols);
    }
    Py_XDECREF(rows);
    return got;
}

static PyObject *typed(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *arg, *index, *kinds_obj, *rows = NULL;
    TCol *cols = NULL;
    Py_ssize_t n = 0, ncols = 0;
    if (!PyArg_ParseTuple(args, "OO!O:typed", &arg, &PyDict_Type, &index, &kinds_obj))
        return NULL;
    int r = typed_start(arg, kinds_obj, -1, &n, &rows, &cols, &ncols);
    /* a row's j-th key's column, guessed as the previous row's: the key objects are
     * borrowed from the rows, which ``rows`` holds, so one that matches is that key */
    PyObject *guess_key[GUESSES] = {NULL};
    Py_ssize_t guess_col[GUESSES];
    for (Py_ssize_t i = 0; r > 0 && i < n; i++) {
        PyObject *row = PyTuple_GET_ITEM(rows, i);
        Py_ssize_t pos = 0, j = 0;
        PyObject *key, *value;
        while (r > 0 && PyDict_Next(row, &pos, &key, &value)) {
            Py_ssize_t col;
            if (j < GUESSES && guess_key[j] == key) {
                col = guess_col[j];
            } else {
                if (!PyUnicode_CheckExact(key)) {  /* its __eq__ could be Python */
                    r = 0;
                    break;
                }
                PyObject *at = PyDict_GetItemWithError(index, key);
                if (!at) {  /* undeclared: the reference says so (or an error) */
                    r = PyErr_Occurred() ? -1 : 0;
                    break;
                }
                col = PyLong_AsSsize_t(at);
                if (col < 0 || col >= ncols) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_ValueError, "typed: a position past kinds");
                    r = -1;
                    break;
                }
                if (j < GUESSES) {
                    guess_key[j] = key;
                    guess_col[j] = col;
                }
            }
            r = tcol_put(&cols[col], i, value);
            j++;
        }
    }
    return typed_end(rows, cols, ncols, n, r);
}

static PyObject *typed_tuples(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *arg, *kinds_obj, *rows = NULL;
    TCol *cols = NULL;
    Py_ssize_t first, n = 0, ncols = 0;
    if (!PyArg_ParseTuple(args, "OnO:typed_tuples", &arg, &first, &kinds_obj))
        return NULL;
    if (first < 0) {
        PyErr_SetString(PyExc_ValueError, "typed_tuples: first must be >= 0");
        return NULL;
    }
    int r = typed_start(arg, kinds_obj, first, &n, &rows, &cols, &ncols);
    for (Py_ssize_t i = 0; r > 0 && i < n; i++) {
        PyObject *row = PyTuple_GET_ITEM(rows, i);
        for (Py_ssize_t c = 0; r > 0 && c < ncols; c++)
            r = tcol_put(&cols[c], i, PyTuple_GET_ITEM(row, first + c));
    }
    return typed_end(rows, cols, ncols, n, r);
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_O,
     "columns(rows) -> (keys, lists) | None: row dicts transposed, one list per key "
     "(None: not a list or tuple of exact dicts with exact str keys)."},
    {"typed", typed, METH_VARARGS,
     "typed(rows, index, kinds) -> [column parts | values | None] | None: row dicts' values\n"
     "as Arrow buffers per column kind (None: the caller converts; see the source)."},
    {"typed_tuples", typed_tuples, METH_VARARGS,
     "typed_tuples(rows, first, kinds) -> as typed, over positions first.. of row tuples."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dissectors._rows",
    "Row dicts transposed into one list per key, or into Arrow buffers (see _rows.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__rows(void)
{
    return PyModule_Create(&module);
}
