/* dissectors._rows: row dicts transposed into one list per key (issue 22).
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

static PyMethodDef methods[] = {
    {"columns", columns, METH_O,
     "columns(rows) -> (keys, lists) | None: row dicts transposed, one list per key "
     "(None: not a list or tuple of exact dicts with exact str keys)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dissectors._rows",
    "Row dicts transposed into one list per key (see dissectors/_rows.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__rows(void)
{
    return PyModule_Create(&module);
}
