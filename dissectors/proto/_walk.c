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
 * number in the plan, in its own wire type, no repeated or packed field, no message
 * field, no map field but one of plain keys and values the plan names, strings valid UTF-8, no varint over 10 bytes or cut short, no
 * length past the end, no unsigned 64-bit value a column flagged int64-only cannot
 * hold.  Scalars as the reader's ``_scalar`` makes them; a field seen twice keeps its
 * last value, as the reader does.
 *
 * ``tree`` walks a whole nested message (Liftbridge's PropagatedRequest operations and
 * internal stream values, shown as JSON, and its PropagatedResponse): repeated and packed fields as lists, nested
 * messages as dicts, as the reader's ``Decoded.to_plain()``; it too answers None for
 * anything but a clean message of the fields its node names.  (tests/stan/test_walk.py
 * checks both against the reader under hypothesis.)
 *
 * ``message_set`` (at the end) is Liftbridge's ReplicationResponse body, which is not
 * protobuf but the rest of a Liftbridge payload's decode (see its own comment).
 */
#define PY_SSIZE_T_CLEAN
#include "_wire.h"

#define MAX_NUMBER 128 /* field numbers a plan may name (two 64-bit presence words) */
#define MAX_TREE_DEPTH 32 /* the reader's MAX_DEPTH: deeper nesting is the reader's */

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

#define MAX_MAPS 4 /* map fields one message may hold (more: the reader's) */

/* One varint, string or bytes value of ``kind`` at buf[*pos] (wire type ``wt``), as the
 * reader makes it (an enum as its number); *pos moves past it.  NULL with no exception:
 * refuse (a wrong wire type, a cut varint or length, invalid UTF-8, another kind). */
static PyObject *plain_value(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, long kind,
                             int wt)
{
    uint64_t v;
    if (kind >= K_INT32 && kind <= K_ENUM) {
        if (wt != 0 || !pb_varint(buf, pos, end, &v))
            return NULL;
        return pb_scalar(kind, v);
    }
    Py_ssize_t at, n;
    if ((kind != K_STRING && kind != K_BYTES) || wt != 2 || !pb_bytes(buf, pos, end, &at, &n))
        return NULL;
    if (kind == K_BYTES)
        return PyBytes_FromStringAndSize((const char *)buf + at, n);
    PyObject *s = PyUnicode_DecodeUTF8((const char *)buf + at, n, NULL);
    if (!s && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear();  /* the reader escapes it and reports it */
    return s;
}

/* The reader's value of a map field absent from its entry: "" or 0 for a key (by
 * ``key``), proto3's zero value for a value. */
static PyObject *map_default(long kind, int key)
{
    if (kind == K_STRING)
        return PyUnicode_FromStringAndSize("", 0);
    if (!key && kind == K_BYTES)
        return PyBytes_FromStringAndSize("", 0);
    if (!key && kind == K_BOOL)
        Py_RETURN_FALSE;
    return PyLong_FromLong(0);
}

/* The map entry buf[pos:end] (key = field 1, value = field 2, of the kinds ``kinds``, a
 * tuple (key kind, value kind)) into ``map``, as the reader fills a map's dict: within
 * the entry the last key or value wins, a later entry of the same key replaces the value.
 * 1: done; 0: refuse (anything but a clean entry); -1: an exception. */
static int map_entry(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, PyObject *kinds,
                     PyObject *map)
{
    if (!PyTuple_Check(kinds) || PyTuple_GET_SIZE(kinds) != 2)
        return 0;
    long kk = PyLong_AsLong(PyTuple_GET_ITEM(kinds, 0));
    long vk = PyLong_AsLong(PyTuple_GET_ITEM(kinds, 1));
    if (PyErr_Occurred())
        return -1;
    PyObject *got[2] = {NULL, NULL};
    int r = 0;
    while (pos < end) {
        Py_ssize_t number;
        int wt;
        if (!pb_tag(buf, &pos, end, 3, &number, &wt))
            goto done;
        PyObject *value = plain_value(buf, &pos, end, number == 1 ? kk : vk, wt);
        if (!value) {
            r = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        Py_XSETREF(got[number - 1], value);
    }
    for (int i = 0; i < 2; i++)
        if (!got[i] && !(got[i] = map_default(i ? vk : kk, !i))) {
            r = -1;
            goto done;
        }
    r = PyDict_SetItem(map, got[0], got[1]) < 0 ? -1 : 1;
done:
    Py_XDECREF(got[0]);
    Py_XDECREF(got[1]);
    return r;
}

static PyObject *capped_into(PyObject *cols, PyObject *values, PyObject *data,
                             PyObject *cap);
static PyObject *crc32_fn;  /* zlib.crc32, looked up by the first MsgProto */

/* The ``post`` step of ``values`` (see there): 1 done, 0 refuse, -1 an exception. */
static int post_step(PyObject *out, PyObject *post, PyObject *cap)
{
    if (!PyTuple_Check(post) || PyTuple_GET_SIZE(post) != 5)
        return 0;
    long mode = PyLong_AsLong(PyTuple_GET_ITEM(post, 0));
    if (mode == -1 && PyErr_Occurred())
        return -1;
    PyObject *data_col = PyTuple_GET_ITEM(post, 1), *check_col = PyTuple_GET_ITEM(post, 2);
    PyObject *status_col = PyTuple_GET_ITEM(post, 3), *cols = PyTuple_GET_ITEM(post, 4);
    PyObject *data = PyDict_GetItemWithError(out, data_col);
    if (!data)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *check = PyDict_GetItemWithError(out, check_col);
    if (!check && PyErr_Occurred())
        return -1;
    Py_INCREF(data);  /* (its column may be replaced by the kept bytes) */
    Py_XINCREF(check);
    int r = -1;
    PyObject *digest = NULL, *status = NULL;
    if (mode == 1) {  /* MsgProto: the CRC-32 field, when present, must match */
        if (check && check != Py_None) {
            if (!crc32_fn) {
                PyObject *zlib = PyImport_ImportModule("zlib");
                crc32_fn = zlib ? PyObject_GetAttrString(zlib, "crc32") : NULL;
                Py_XDECREF(zlib);
                if (!crc32_fn)
                    goto done;
            }
            PyObject *crc = PyObject_CallOneArg(crc32_fn, data);
            int eq = crc ? PyObject_RichCompareBool(check, crc, Py_EQ) : -1;
            Py_XDECREF(crc);
            if (eq <= 0) {
                r = eq;  /* a mismatch: the reader reports it */
                goto done;
            }
        }
        status = PyUnicode_FromString(check && check != Py_None ? "ok" : "absent");
        if (!status || PyDict_SetItem(out, status_col, status) < 0)
            goto done;
        if (!(digest = capped_into(cols, out, data, cap)))
            goto done;
    } else if (mode == 2) {  /* PubMsg: its own digest field against its data's */
        if (!(digest = capped_into(cols, out, data, cap)))
            goto done;
        int has = check ? PyObject_IsTrue(check) : 0;
        int eq = has > 0 ? PyObject_RichCompareBool(check, digest, Py_EQ) : 0;
        if (has < 0 || eq < 0)
            goto done;
        status = PyUnicode_FromString(!has ? "absent" : eq ? "ok" : "mismatch");
        if (!status || PyDict_SetItem(out, status_col, status) < 0)
            goto done;
    } else {
        r = 0;
        goto done;
    }
    r = 1;
done:
    Py_DECREF(data);
    Py_XDECREF(check);
    Py_XDECREF(digest);
    Py_XDECREF(status);
    return r;
}

/* values(data, pos, table, base, defaults) -> (values, present) or None
 *
 * data[pos:] is one message.  table: a list indexed by field number of None or
 * (column, kind, extra) -- extra None, an enum's names dict (K_ENUM), or True for a
 * K_UINT64 column that must fit int64.  (A message field is ``tree``'s.)  A K_MAP field (extra: (key kind, value kind), both plain) gives the list of
 * its (key, value) items, as ``list(dict.items())`` of the reader's dict.  base: a dict
 * the values start as (copied).
 * defaults: a tuple of (field number, column, value) set for each field the message
 * does not hold (a list value is copied, so no two rows share one).  present: the field
 * numbers the message held, as the bits of an int.
 *
 * post (optional, None: nothing): STAN's step after the fields, as ``decode_kind`` does
 * it for a cleanly ended message: (mode, data column, check column, status column,
 * ``capped``'s columns).  Mode 1 (MsgProto): refuse when the check column (the CRC-32
 * field; absent: no check) is not zlib.crc32 of the data, else status "ok"/"absent";
 * then the data's capped columns (cap: the last argument).  Mode 2 (PubMsg): the data's
 * capped columns, then status "absent" (an empty or absent check column), "ok" (it is
 * the data's SHA-256) or "mismatch".  Why: per message, this was ~30 Python bytecodes
 * (``decode.walked_values``). */
static PyObject *values(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    PyObject *table, *base, *defaults, *post = Py_None, *cap = Py_None;
    if (!PyArg_ParseTuple(args, "y*nO!O!O!|OO", &view, &pos, &PyList_Type, &table,
                          &PyDict_Type, &base, &PyTuple_Type, &defaults, &post, &cap))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len;
    Py_ssize_t nfields = PyList_GET_SIZE(table);
    uint64_t present[2] = {0, 0};
    PyObject *out = NULL, *result = NULL;
    PyObject *maps[MAX_MAPS], *map_columns[MAX_MAPS];  /* (borrowed columns) */
    int nmaps = 0;
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
        } else if (kind == K_STRING || kind == K_BYTES) {
            value = plain_value(buf, &pos, end, kind, wt);
        } else if (kind == K_MAP) {
            Py_ssize_t at, n;
            if (wt != 2 || !pb_bytes(buf, &pos, end, &at, &n))
                goto refuse;
            int m = 0;
            while (m < nmaps && map_columns[m] != column)
                m++;
            if (m == nmaps) {  /* the field's first entry: its dict, in its place */
                if (nmaps == MAX_MAPS)
                    goto refuse;
                if (!(maps[m] = PyDict_New()))
                    goto fail;
                map_columns[m] = column;
                nmaps++;
                if (PyDict_SetItem(out, column, maps[m]) < 0)
                    goto fail;
            }
            int r = map_entry(buf, at, at + n, extra, maps[m]);
            if (r < 0)
                goto fail;
            if (r == 0)
                goto refuse;
            present[number >> 6] |= (uint64_t)1 << (number & 63);
            continue;
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
    for (int m = 0; m < nmaps; m++) {  /* each map's dict as its list of items */
        PyObject *items = PyDict_Items(maps[m]);
        if (!items || PyDict_SetItem(out, map_columns[m], items) < 0) {
            Py_XDECREF(items);
            goto fail;
        }
        Py_DECREF(items);
    }
    if (post != Py_None) {
        int r = post_step(out, post, cap);
        if (r < 0)
            goto fail;
        if (r == 0)
            goto refuse;
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
    for (int m = 0; m < nmaps; m++)
        Py_DECREF(maps[m]);
    PyBuffer_Release(&view);
    return result;
refuse:
    Py_XDECREF(out);
    for (int m = 0; m < nmaps; m++)
        Py_DECREF(maps[m]);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(out);
    for (int m = 0; m < nmaps; m++)
        Py_DECREF(maps[m]);
    PyBuffer_Release(&view);
    return NULL;
}

/* A varint field's value in a tree: the reader's, an enum by its name when ``names`` (a
 * dict) has it, else its number (as the dissectors' JSON columns show one). */
static PyObject *tree_scalar(long kind, uint64_t v, PyObject *names)
{
    PyObject *value = pb_scalar(kind, v);
    if (value && kind == K_ENUM && PyDict_Check(names)) {
        PyObject *named = PyDict_GetItemWithError(names, value);
        if (named)
            Py_SETREF(value, Py_NewRef(named));
        else if (PyErr_Occurred())
            Py_CLEAR(value);
    }
    return value;
}

/* The tree of the clean message buf[pos:end] per ``node`` (see ``tree``), one level; NULL
 * with no exception: refuse. */
static PyObject *tree_message(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                              PyObject *node, int depth)
{
    if (depth >= MAX_TREE_DEPTH || !PyList_Check(node) || PyList_GET_SIZE(node) > MAX_NUMBER)
        return NULL;
    Py_ssize_t nfields = PyList_GET_SIZE(node);
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    while (pos < end) {
        Py_ssize_t number;
        int wt;
        if (!pb_tag(buf, &pos, end, nfields, &number, &wt))
            goto refuse;
        PyObject *spec = PyList_GET_ITEM(node, number);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5)
            goto refuse;  /* not in the node (unknown, or a kind left to the reader) */
        PyObject *name = PyTuple_GET_ITEM(spec, 0);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        PyObject *extra = PyTuple_GET_ITEM(spec, 2);
        int repeated = PyTuple_GET_ITEM(spec, 3) == Py_True;
        if (kind == -1 && PyErr_Occurred())
            goto fail;
        PyObject *list = NULL;  /* (borrowed) a repeated field's list */
        if (repeated) {
            list = PyDict_GetItemWithError(out, name);
            if (!list) {
                if (PyErr_Occurred() || !(list = PyList_New(0)))
                    goto fail;
                int r = PyDict_SetItem(out, name, list);
                Py_DECREF(list);  /* (out holds it) */
                if (r < 0)
                    goto fail;
            }
            if (!PyList_Check(list))
                goto refuse;
        }
        PyObject *value;
        if (kind >= K_INT32 && kind <= K_ENUM && wt == 2 && repeated) {
            uint64_t v;  /* packed: each varint to the list */
            Py_ssize_t p, n;
            if (!pb_bytes(buf, &pos, end, &p, &n))
                goto refuse;
            while (p < pos) {
                if (!pb_varint(buf, &p, pos, &v))
                    goto refuse;
                PyObject *item = tree_scalar(kind, v, extra);
                if (!item || PyList_Append(list, item) < 0) {
                    Py_XDECREF(item);
                    goto fail;
                }
                Py_DECREF(item);
            }
            continue;
        }
        if (kind == K_MESSAGE) {
            Py_ssize_t at, n;
            if (wt != 2 || !pb_bytes(buf, &pos, end, &at, &n))
                goto refuse;
            value = tree_message(buf, at, at + n, PyTuple_GET_ITEM(spec, 4), depth + 1);
        } else if (kind >= K_INT32 && kind <= K_ENUM) {
            uint64_t v;
            if (wt != 0 || !pb_varint(buf, &pos, end, &v))
                goto refuse;
            value = tree_scalar(kind, v, extra);
        } else
            value = plain_value(buf, &pos, end, kind, wt);
        if (!value) {
            if (PyErr_Occurred())
                goto fail;
            goto refuse;
        }
        int r = repeated ? PyList_Append(list, value) : PyDict_SetItem(out, name, value);
        Py_DECREF(value);
        if (r < 0)
            goto fail;
    }
    return out;
refuse:
    Py_DECREF(out);
    return NULL;
fail:
    Py_DECREF(out);
    return NULL;  /* (with the exception set) */
}

/* tree(data, pos, node) -> dict or None
 *
 * The clean message data[pos:] as the reader's ``Decoded.to_plain()`` gives it: the fields
 * present, by name; a repeated field (packed or not) as a list; a message as the dict of
 * its own fields (the last one when seen twice, as the reader keeps it); an enum by its
 * name when ``extra`` names it, else its number (the dissectors' JSON columns).  node: a
 * list indexed by field number of None or (name, kind, extra, repeated, node of a
 * message field).  None: the reader must decode it (anything but a clean message of the
 * node's fields: no map fields, no unknown field, nesting below MAX_TREE_DEPTH). */
static PyObject *tree(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    PyObject *node;
    if (!PyArg_ParseTuple(args, "y*nO!", &view, &pos, &PyList_Type, &node))
        return NULL;
    PyObject *out = NULL;
    if (pos >= 0 && pos <= view.len)
        out = tree_message((const uint8_t *)view.buf, pos, view.len, node, 0);
    PyBuffer_Release(&view);
    if (!out && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

/* ---- Liftbridge's ReplicationResponse message set (big-endian, not protobuf) ----
 *
 * Here rather than in an extension of its own: it is the other half of a Liftbridge
 * payload's decode, and one module is one build entry and one import.  The reference is
 * ``dissectors.liftbridge.envelope._parse_entries``; ``message_set`` mirrors its answer
 * for a body it reads with nothing to report, and answers None for anything else. */

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A blob at buf[*pos] before end: a signed big-endian length of ``width`` (2 or 4) bytes,
 * -1 for null, then its bytes; *out: bytes, or None for null (with ``text``: str, "" for
 * null).  1: done, *pos past it; 0: refuse (cut, a length below -1, invalid UTF-8);
 * -1: an exception. */
static int ms_blob(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, int width, int text,
                   PyObject **out)
{
    if (end - *pos < width)
        return 0;
    int32_t n = width == 2 ? (int16_t)(buf[*pos] << 8 | buf[*pos + 1])
                           : (int32_t)be32(buf + *pos);
    *pos += width;
    if (n == -1)
        *out = text ? PyUnicode_FromStringAndSize("", 0) : Py_NewRef(Py_None);
    else if (n < 0 || n > end - *pos)
        return 0;
    else if (text) {
        *out = PyUnicode_DecodeUTF8((const char *)buf + *pos, n, NULL);
        if (!*out && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();  /* the reference escapes it */
            return 0;
        }
        *pos += n;
    } else {
        *out = PyBytes_FromStringAndSize((const char *)buf + *pos, n);
        *pos += n;
    }
    return *out ? 1 : -1;
}

/* The entry message buf[pos:end] (crc u32, magic i8, attributes i8, key, value, headers)
 * as ``entry_cls`` (``Entry``) number ``index`` of the entry header ``head`` (offset,
 * timestamp, leader epoch, size: 28 bytes).  NULL with no exception: refuse (anything
 * the reference reports: a cut or bad field, bytes left over, a CRC that does not
 * match); else a new reference or NULL with an exception. */
static PyObject *ms_entry(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                          const uint8_t *head, Py_ssize_t index, PyObject *entry_cls,
                          PyObject *crc, PyObject *ok)
{
    if (end - pos < 6)
        return NULL;
    uint32_t stored = be32(buf + pos);
    PyObject *view = PyMemoryView_FromMemory((char *)buf + pos + 4, end - pos - 4, PyBUF_READ);
    PyObject *got = view ? PyObject_CallOneArg(crc, view) : NULL;
    Py_XDECREF(view);
    if (!got)
        return NULL;
    unsigned long computed = PyLong_AsUnsignedLong(got);
    Py_DECREF(got);
    if (computed == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (computed != stored)
        return NULL;  /* the reference reports the mismatch */
    PyObject *key = NULL, *value = NULL, *headers = NULL, *hk = NULL, *hv = NULL;
    PyObject *out = NULL;
    Py_ssize_t p = pos + 6;
    int r;
    if ((r = ms_blob(buf, &p, end, 4, 0, &key)) != 1 ||
            (r = ms_blob(buf, &p, end, 4, 0, &value)) != 1)
        goto done;
    r = 0;
    if (end - p < 2)
        goto done;
    int count = (int16_t)(buf[p] << 8 | buf[p + 1]);
    p += 2;
    if (count < 0 || !(headers = PyDict_New()))
        goto done;
    for (int i = 0; i < count; i++) {
        if ((r = ms_blob(buf, &p, end, 2, 1, &hk)) != 1 ||
                (r = ms_blob(buf, &p, end, 4, 0, &hv)) != 1)
            goto done;
        r = PyDict_SetItem(headers, hk, hv) < 0 ? -1 : 1;
        Py_CLEAR(hk);
        Py_CLEAR(hv);
        if (r < 0)
            goto done;
    }
    if (p != end)
        goto done;
    out = PyObject_CallFunction(entry_cls, "nLLKkkOiiOOO", index, (long long)be64(head),
                                (long long)be64(head + 8), (unsigned long long)be64(head + 16),
                                (unsigned long)be32(head + 24), (unsigned long)stored, ok,
                                (int)(int8_t)buf[pos + 4], (int)(int8_t)buf[pos + 5], key,
                                value, headers);
done:
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    Py_XDECREF(hk);
    Py_XDECREF(hv);
    return out;
}

/* message_set(body, entry_cls, crc, ok) -> (leader epoch, HW, entries, []) or None
 *
 * A ReplicationResponse body as ``_parse_entries`` gives it when it has nothing to report:
 * leader epoch u64 and HW i64, then whole entries to the end, each an ``entry_cls`` made
 * with its fields in order (``ok``: the crc_status of a matching CRC; ``crc``:
 * crc32c.crc32c, called on a memoryview of the checked bytes).  None: the reference's. */
static PyObject *message_set(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *entry_cls, *crc, *ok;
    if (!PyArg_ParseTuple(args, "y*OOO", &view, &entry_cls, &crc, &ok))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len, pos = 16;
    PyObject *entries = NULL, *result = NULL;
    if (end < 16 || !(entries = PyList_New(0)))
        goto done;
    while (pos < end) {
        if (end - pos < 28)
            goto done;
        const uint8_t *head = buf + pos;
        uint32_t size = be32(head + 24);
        pos += 28;
        if (size > (uint64_t)(end - pos))
            goto done;
        PyObject *e = ms_entry(buf, pos, pos + (Py_ssize_t)size, head,
                               PyList_GET_SIZE(entries), entry_cls, crc, ok);
        if (!e)
            goto done;
        int r = PyList_Append(entries, e);
        Py_DECREF(e);
        if (r < 0)
            goto done;
        pos += (Py_ssize_t)size;
    }
    result = Py_BuildValue("(KLO[])", (unsigned long long)be64(buf), (long long)be64(buf + 8),
                           entries);
done:
    Py_XDECREF(entries);
    PyBuffer_Release(&view);
    if (!result && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

/* capped(columns, values, data, cap) -> SHA-256 digest of data (bytes)
 *
 * A payload's columns, as ``walk.capped_py`` (the definition, which runs without this
 * extension) sets them: columns = (length column, SHA-256 hex column, kept column, truncated column);
 * the kept value is data itself when cap is None or len(data) <= cap, else data[:cap].
 * Why here: per STAN PubMsg/MsgProto and Liftbridge message, these four stores, the
 * digest and its hex were ~14 Python bytecodes and three calls.  Columns first, so that
 * ``functools.partial`` binds them (``walk.capper``). */
static PyObject *sha256_fn;  /* hashlib.sha256, looked up by the first call */

static PyObject *capped(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 4 ||
            !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "capped(columns: 4-tuple, values: dict, data, cap: int | None)");
        return NULL;
    }
    return capped_into(args[0], args[1], args[2], args[3]);
}

static PyObject *capped_into(PyObject *cols, PyObject *values, PyObject *data, PyObject *cap)
{
    Py_ssize_t size = PyObject_Size(data);
    if (size < 0)
        return NULL;
    Py_ssize_t limit = -1;  /* -1: no cap */
    if (cap != Py_None) {
        limit = PyLong_AsSsize_t(cap);
        if (limit == -1 && PyErr_Occurred())
            return NULL;
        if (limit < 0) {
            PyErr_SetString(PyExc_ValueError, "capped: a negative cap");
            return NULL;
        }
    }
    if (!sha256_fn) {
        PyObject *hashlib = PyImport_ImportModule("hashlib");
        if (!hashlib)
            return NULL;
        sha256_fn = PyObject_GetAttrString(hashlib, "sha256");
        Py_DECREF(hashlib);
        if (!sha256_fn)
            return NULL;
    }
    PyObject *h = PyObject_CallOneArg(sha256_fn, data);
    if (!h)
        return NULL;
    PyObject *digest = PyObject_CallMethod(h, "digest", NULL);
    Py_DECREF(h);
    if (!digest)
        return NULL;
    if (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) != 32) {
        PyErr_SetString(PyExc_TypeError, "capped: sha256 gave no 32-byte digest");
        goto fail;
    }
    static const char hexdigits[] = "0123456789abcdef";
    PyObject *hex = PyUnicode_New(64, 127);
    if (!hex)
        goto fail;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(hex);
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(digest);
    for (int i = 0; i < 32; i++) {
        out[2 * i] = (Py_UCS1)hexdigits[d[i] >> 4];
        out[2 * i + 1] = (Py_UCS1)hexdigits[d[i] & 15];
    }
    int truncated = limit >= 0 && size > limit;
    PyObject *kept = truncated ? PySequence_GetSlice(data, 0, limit) : Py_NewRef(data);
    PyObject *len = PyLong_FromSsize_t(size);
    int r = -1;
    if (kept && len &&
            PyDict_SetItem(values, PyTuple_GET_ITEM(cols, 0), len) == 0 &&
            PyDict_SetItem(values, PyTuple_GET_ITEM(cols, 1), hex) == 0 &&
            PyDict_SetItem(values, PyTuple_GET_ITEM(cols, 2), kept) == 0)
        r = PyDict_SetItem(values, PyTuple_GET_ITEM(cols, 3),
                           truncated ? Py_True : Py_False);
    Py_XDECREF(kept);
    Py_XDECREF(len);
    Py_DECREF(hex);
    if (r < 0)
        goto fail;
    return digest;
fail:
    Py_DECREF(digest);
    return NULL;
}

/* column_row(batch_cls, table, overhead, fmt, msg, values[, children]) -> a ColumnBatch
 *
 * ``columns.RowsFormat.record_py`` (the definition) in one C call: the ColumnBatch of
 * one row (table, msg.direction, 1, row, fmt, children) whose row is (values,
 * len(msg.payload) + overhead, msg's offset_start, offset_end, ts_first_ns, ts_last_ns,
 * frame_first, frame_last).  Why: per STAN or Liftbridge row, the Python method was ~39
 * bytecodes (seven attribute reads, two tuples).  ``functools.partial`` binds the first
 * four (``RowsFormat.__init__``). */
static PyObject *row_names[8];  /* payload, direction, then the six provenance fields */

static PyObject *column_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if ((nargs != 6 && nargs != 7) || !PyType_Check(args[0]) ||
            !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "column_row(batch_cls: a tuple type, table, "
                        "overhead, fmt, msg, values[, children])");
        return NULL;
    }
    if (!row_names[7]) {  /* (the last: a failed first call is made again whole) */
        static const char *names[8] = {"payload", "direction", "offset_start", "offset_end",
                                       "ts_first_ns", "ts_last_ns", "frame_first",
                                       "frame_last"};
        for (int i = 0; i < 8; i++)
            if (!row_names[i] && !(row_names[i] = PyUnicode_InternFromString(names[i])))
                return NULL;
    }
    PyObject *msg = args[4];
    PyObject *payload = PyObject_GetAttr(msg, row_names[0]);
    if (!payload)
        return NULL;
    Py_ssize_t size = PyObject_Size(payload);
    Py_DECREF(payload);
    if (size < 0)
        return NULL;
    PyObject *row = PyTuple_New(8), *items = NULL, *pack = NULL, *batch = NULL;
    if (!row)
        return NULL;
    PyTuple_SET_ITEM(row, 0, Py_NewRef(args[5]));
    PyObject *n = PyLong_FromSsize_t(size);
    PyObject *total = n ? PyNumber_Add(n, args[2]) : NULL;
    Py_XDECREF(n);
    if (!total)
        goto done;
    PyTuple_SET_ITEM(row, 1, total);
    for (int i = 0; i < 6; i++) {
        PyObject *v = PyObject_GetAttr(msg, row_names[2 + i]);
        if (!v)
            goto done;
        PyTuple_SET_ITEM(row, 2 + i, v);
    }
    PyObject *direction = PyObject_GetAttr(msg, row_names[1]);
    if (!direction)
        goto done;
    items = PyTuple_New(6);
    if (!items) {
        Py_DECREF(direction);
        goto done;
    }
    PyTuple_SET_ITEM(items, 0, Py_NewRef(args[1]));
    PyTuple_SET_ITEM(items, 1, direction);
    PyTuple_SET_ITEM(items, 2, PyLong_FromLong(1));
    PyTuple_SET_ITEM(items, 3, Py_NewRef(row));
    PyTuple_SET_ITEM(items, 4, Py_NewRef(args[3]));
    PyTuple_SET_ITEM(items, 5, nargs == 7 ? Py_NewRef(args[6]) : PyTuple_New(0));
    if (!PyTuple_GET_ITEM(items, 2) || !PyTuple_GET_ITEM(items, 5))
        goto done;
    pack = PyTuple_Pack(1, items);
    if (pack)  /* tuple.__new__(batch_cls, items) */
        batch = PyTuple_Type.tp_new((PyTypeObject *)args[0], pack, NULL);
done:
    Py_DECREF(row);
    Py_XDECREF(items);
    Py_XDECREF(pack);
    return batch;
}

/* move_row(acc, rows, n, flow_id, record_id, direction, stream_id, src_ip, src_port,
 *          dst_ip, dst_port) -> None
 *
 * ``columns.PayloadRows.move_py`` (the definition) in one C call: appends rows + the
 * envelope's eight values to the list acc, adds rows[1] to acc.nbytes, and when
 * len(acc) >= acc._next appends acc._convert() to acc._parts.  Why: the conveyor moves
 * every STAN or Liftbridge row; the Python method was ~39 bytecodes a row.  (Bound to
 * each accumulator as its ``move``: ``PayloadRows.__init__``.) */
static PyObject *move_names[4];  /* nbytes, _next, _parts, _convert */

static PyObject *move_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "move_row(acc: list, rows: tuple, n, flow_id, "
                        "record_id, direction, stream_id, src_ip, src_port, dst_ip, dst_port)");
        return NULL;
    }
    PyObject *acc = args[0], *rows = args[1];
    long n = PyLong_AsLong(args[2]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n != 1)
        return PyErr_Format(PyExc_ValueError, "payload rows: a batch of %S rows, not 1",
                            args[2]);
    Py_ssize_t k = PyTuple_GET_SIZE(rows);
    if (k < 2) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    if (!move_names[3]) {  /* (the last: a failed first call is made again whole) */
        static const char *names[4] = {"nbytes", "_next", "_parts", "_convert"};
        for (int i = 0; i < 4; i++)
            if (!move_names[i] && !(move_names[i] = PyUnicode_InternFromString(names[i])))
                return NULL;
    }
    PyObject *row = PyTuple_New(k + 8);
    if (!row)
        return NULL;
    for (Py_ssize_t i = 0; i < k; i++)
        PyTuple_SET_ITEM(row, i, Py_NewRef(PyTuple_GET_ITEM(rows, i)));
    for (Py_ssize_t i = 0; i < 8; i++)
        PyTuple_SET_ITEM(row, k + i, Py_NewRef(args[3 + i]));
    int r = PyList_Append(acc, row);
    Py_DECREF(row);
    if (r < 0)
        return NULL;
    PyObject *nbytes = PyObject_GetAttr(acc, move_names[0]);
    if (!nbytes)
        return NULL;
    PyObject *sum = PyNumber_Add(nbytes, PyTuple_GET_ITEM(rows, 1));
    Py_DECREF(nbytes);
    if (!sum)
        return NULL;
    r = PyObject_SetAttr(acc, move_names[0], sum);
    Py_DECREF(sum);
    if (r < 0)
        return NULL;
    PyObject *next = PyObject_GetAttr(acc, move_names[1]);
    PyObject *len = next ? PyLong_FromSsize_t(PyList_GET_SIZE(acc)) : NULL;
    int due = len ? PyObject_RichCompareBool(len, next, Py_GE) : -1;
    Py_XDECREF(next);
    Py_XDECREF(len);
    if (due < 0)
        return NULL;
    if (due) {
        PyObject *parts = PyObject_GetAttr(acc, move_names[2]);
        if (!parts)
            return NULL;
        PyObject *part = PyObject_CallMethodNoArgs(acc, move_names[3]);
        r = part ? PyList_Check(parts) ? PyList_Append(parts, part)
                                       : (PyErr_SetString(PyExc_TypeError,
                                                          "move_row: acc._parts not a list"), -1)
                 : -1;
        Py_XDECREF(part);
        Py_DECREF(parts);
        if (r < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"move_row", (PyCFunction)(void (*)(void))move_row, METH_FASTCALL,
     "move_row(acc, rows, n, flow_id, record_id, direction, stream_id, src_ip, src_port,\n"
     "dst_ip, dst_port): dissectors.proto.columns.PayloadRows.move_py in C."},
    {"column_row", (PyCFunction)(void (*)(void))column_row, METH_FASTCALL,
     "column_row(batch_cls, table, overhead, fmt, msg, values[, children]) -> the\n"
     "ColumnBatch of one payload row (dissectors.proto.columns.RowsFormat.record_py)."},
    {"capped", (PyCFunction)(void (*)(void))capped, METH_FASTCALL,
     "capped(columns, values, data, cap) -> sha256 digest of data; sets the columns\n"
     "(length, sha256 hex, data kept under cap, truncated) in values."},
    {"tree", tree, METH_VARARGS,
     "tree(data, pos, node) -> the fields of the clean message data[pos:] as nested dicts\n"
     "and lists, or None when the tolerant reader must decode it (see the module source)."},
    {"message_set", message_set, METH_VARARGS,
     "message_set(body, entry_cls, crc, ok) -> (leader epoch, HW, entries, []) of a clean\n"
     "Liftbridge ReplicationResponse body, or None when the reference must parse it."},
    {"values", values, METH_VARARGS,
     "values(data, pos, table, base, defaults[, post, cap]) -> (values, present) of the\n"
     "clean message data[pos:], or None when the tolerant reader must decode it (see the\n"
     "module source)."},
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
