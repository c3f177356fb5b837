/*
 * Connection keys of a Batch's records, for Spark's split ingest (included by _engine.c).
 *
 * Why: passes 2 and 3 of `msgcap spark ingest` (analyzer/spark/task.py `range_stats`,
 * `keyed_batches`) peeked at every frame in Python (`conn_key`: a link decode, slices,
 * a NamedTuple; ~5 us a frame, more than the C engine needs to reassemble it).  For a
 * record the engine decodes as fast (decode_rec: TCP or UDP, no fragment, complete) the
 * key is fixed by fields the walk already read, so it is made here; every other record
 * (kind K_SLOW) is left to the Python `conn_key`, which stays the definition
 * (tests/spark/test_conn_keys.py compares both on every capture of the corpus).
 *
 * A fast record's key, as `conn_key` makes it: the protocol byte, then its two
 * endpoints (address bytes + port, big endian) lower one first; no fragment id.
 */

#define END_MAX 18 /* an IPv6 address and a port */

/* The record's two endpoints (source first) and their length. */
static Py_ssize_t rec_ends(const uint8_t *d, const Rec *r, uint8_t *a, uint8_t *b) {
    Py_ssize_t alen = r->ipver == 4 ? 4 : 16;
    const uint8_t *src = d + r->ip + (r->ipver == 4 ? 12 : 8);
    memcpy(a, src, (size_t)alen);
    a[alen] = (uint8_t)(r->sport >> 8);
    a[alen + 1] = (uint8_t)r->sport;
    memcpy(b, src + alen, (size_t)alen);
    b[alen] = (uint8_t)(r->dport >> 8);
    b[alen + 1] = (uint8_t)r->dport;
    return alen + 2;
}

/* The key bytes of a fast record into k (1 + 2 * END_MAX bytes); returns their length. */
static Py_ssize_t rec_key(const uint8_t *a, const uint8_t *b, Py_ssize_t elen, int proto,
                          uint8_t *k) {
    int a_first = memcmp(a, b, (size_t)elen) <= 0;
    k[0] = (uint8_t)proto;
    memcpy(k + 1, a_first ? a : b, (size_t)elen);
    memcpy(k + 1 + elen, a_first ? b : a, (size_t)elen);
    return 1 + 2 * elen;
}

/* conn_keys(batch, rep) -> (keys, slow): keys[i] the task key of record i (its
 * connection key, replaced by rep[key] where rep has it; rep None: none), None for a
 * slow record; slow: the indexes of those.  Consecutive records of one connection share
 * one bytes object. */
static PyObject *py_conn_keys(PyObject *self, PyObject *args) {
    Batch *b;
    PyObject *rep, *keys = NULL, *slow = NULL, *last = NULL;
    uint8_t a[END_MAX], e[END_MAX], k[1 + 2 * END_MAX], lastk[1 + 2 * END_MAX];
    Py_ssize_t i, lastn = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O", &BatchType, &b, &rep)) return NULL;
    if (rep != Py_None && !PyDict_Check(rep)) {
        PyErr_SetString(PyExc_TypeError, "rep must be a dict or None");
        return NULL;
    }
    if (rep != Py_None && PyDict_GET_SIZE(rep) == 0) rep = Py_None;
    keys = PyList_New(b->n);
    slow = PyList_New(0);
    if (keys == NULL || slow == NULL) goto fail;
    for (i = 0; i < b->n; i++) {
        const Rec *r = &b->recs[i];
        const uint8_t *d = (const uint8_t *)b->buf.buf + r->body;
        Py_ssize_t elen, kn;
        PyObject *key;
        if (r->kind == K_SLOW) {
            PyObject *at = PyLong_FromSsize_t(i);
            int bad = at == NULL || PyList_Append(slow, at) < 0;
            Py_XDECREF(at);
            if (bad) goto fail;
            Py_INCREF(Py_None);
            PyList_SET_ITEM(keys, i, Py_None);
            continue;
        }
        elen = rec_ends(d, r, a, e);
        kn = rec_key(a, e, elen, r->kind, k);
        if (last != NULL && kn == lastn && memcmp(k, lastk, (size_t)kn) == 0) {
            Py_INCREF(last);
            PyList_SET_ITEM(keys, i, last);
            continue;
        }
        key = PyBytes_FromStringAndSize((const char *)k, kn);
        if (key == NULL) goto fail;
        if (rep != Py_None) {
            PyObject *to = PyDict_GetItemWithError(rep, key);
            if (to == NULL && PyErr_Occurred()) {
                Py_DECREF(key);
                goto fail;
            }
            if (to != NULL) {
                Py_INCREF(to);
                Py_DECREF(key);
                key = to;
            }
        }
        PyList_SET_ITEM(keys, i, key); /* the list's reference; `last` borrows it */
        last = key;
        memcpy(lastk, k, (size_t)kn);
        lastn = kn;
    }
    return Py_BuildValue("(NN)", keys, slow);
fail:
    Py_XDECREF(keys);
    Py_XDECREF(slow);
    return NULL;
}

/* Whether a fast record's transport payload carries a hint (range_stats): a UDP one a
 * QUIC long header, a TCP one any of the patterns. */
static int rec_hinted(const uint8_t *d, const Rec *r, PyObject *patterns) {
    const uint8_t *seg = d + r->l4;
    Py_ssize_t n = (Py_ssize_t)r->l4len, j;
    if (n < 8) return 0;
    if (r->kind == K_UDP) return n > 8 && (seg[8] & 0xC0) == 0xC0;
    for (j = 0; j < PyTuple_GET_SIZE(patterns); j++) {
        PyObject *p = PyTuple_GET_ITEM(patterns, j);
        Py_ssize_t pn = PyBytes_GET_SIZE(p), from = (Py_ssize_t)r->hlen;
        if (pn == 0) return 1;
        if (n - from >= pn &&
            memmem(seg + from, (size_t)(n - from), PyBytes_AS_STRING(p), (size_t)pn) != NULL)
            return 1;
    }
    return 0;
}

static int add_pair(PyObject *set, const uint8_t *end, Py_ssize_t elen, PyObject *key) {
    PyObject *t = Py_BuildValue("(y#O)", (const char *)end, elen, key);
    int rc = t == NULL ? -1 : PySet_Add(set, t);
    Py_XDECREF(t);
    return rc;
}

static int add_end(PyObject *set, const uint8_t *end, Py_ssize_t elen) {
    PyObject *v = PyBytes_FromStringAndSize((const char *)end, elen);
    int rc = v == NULL ? -1 : PySet_Add(set, v);
    Py_XDECREF(v);
    return rc;
}

/* conn_facts(batch, pairs, hints, patterns) -> slow: what range_stats learns of the fast
 * records: (endpoint, key) of both ends into the set pairs (None: not asked), the two
 * endpoints of a record whose payload carries a hint (rec_hinted; patterns: a tuple of
 * bytes) into the set hints; returns the indexes of the slow records, left to it. */
static PyObject *py_conn_facts(PyObject *self, PyObject *args) {
    Batch *b;
    PyObject *pairs, *hints, *patterns, *slow, *key = NULL;
    uint8_t a[END_MAX], e[END_MAX], k[1 + 2 * END_MAX], lastk[1 + 2 * END_MAX];
    Py_ssize_t i, j, lastn = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OO!O!", &BatchType, &b, &pairs, &PySet_Type, &hints,
                          &PyTuple_Type, &patterns))
        return NULL;
    if (pairs != Py_None && !PySet_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "pairs must be a set or None");
        return NULL;
    }
    for (j = 0; j < PyTuple_GET_SIZE(patterns); j++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(patterns, j))) {
            PyErr_SetString(PyExc_TypeError, "patterns must be bytes");
            return NULL;
        }
    }
    slow = PyList_New(0);
    if (slow == NULL) return NULL;
    for (i = 0; i < b->n; i++) {
        const Rec *r = &b->recs[i];
        const uint8_t *d = (const uint8_t *)b->buf.buf + r->body;
        Py_ssize_t elen, kn;
        if (r->kind == K_SLOW) {
            PyObject *at = PyLong_FromSsize_t(i);
            int bad = at == NULL || PyList_Append(slow, at) < 0;
            Py_XDECREF(at);
            if (bad) goto fail;
            continue;
        }
        elen = rec_ends(d, r, a, e);
        if (pairs != Py_None) {
            kn = rec_key(a, e, elen, r->kind, k);
            /* a run of one connection's records adds the same two pairs: once */
            if (key == NULL || kn != lastn || memcmp(k, lastk, (size_t)kn) != 0) {
                Py_XDECREF(key);
                key = PyBytes_FromStringAndSize((const char *)k, kn);
                if (key == NULL || add_pair(pairs, a, elen, key) < 0 ||
                    add_pair(pairs, e, elen, key) < 0)
                    goto fail;
                memcpy(lastk, k, (size_t)kn);
                lastn = kn;
            }
        }
        if (rec_hinted(d, r, patterns) && (add_end(hints, a, elen) < 0 ||
                                           add_end(hints, e, elen) < 0))
            goto fail;
    }
    Py_XDECREF(key);
    return slow;
fail:
    Py_XDECREF(key);
    Py_DECREF(slow);
    return NULL;
}

/* Batch.columns(start) -> (stop, numbers, ts, linktypes, orig_lens, interfaces, offsets,
 * data): records [start, stop) as the buffers of Arrow columns (int64, int64, int32,
 * int64, int32, and a binary column's int32 offsets and bytes), in native byte order.
 * stop is where 1 GiB of data would be passed (at least one record more than start):
 * offsets stay within an int32. */
static PyObject *batch_columns(Batch *self, PyObject *arg) {
    Py_ssize_t start = PyLong_AsSsize_t(arg), stop, i, m, total = 0;
    PyObject *num, *ts, *lt, *orig, *ifc, *off, *data;
    int64_t *pn, *pt, *po;
    int32_t *pl, *pi, *pf;
    char *pd;
    if (start == -1 && PyErr_Occurred()) return NULL;
    if (start < 0 || start > self->n) {
        PyErr_SetString(PyExc_IndexError, "batch index out of range");
        return NULL;
    }
    for (stop = start; stop < self->n; stop++) {
        Py_ssize_t c = (Py_ssize_t)self->recs[stop].caplen;
        if (stop > start && total + c > (1LL << 30)) break;
        total += c;
    }
    m = stop - start;
    num = PyBytes_FromStringAndSize(NULL, m * 8);
    ts = PyBytes_FromStringAndSize(NULL, m * 8);
    lt = PyBytes_FromStringAndSize(NULL, m * 4);
    orig = PyBytes_FromStringAndSize(NULL, m * 8);
    ifc = PyBytes_FromStringAndSize(NULL, m * 4);
    off = PyBytes_FromStringAndSize(NULL, (m + 1) * 4);
    data = PyBytes_FromStringAndSize(NULL, total);
    if (!num || !ts || !lt || !orig || !ifc || !off || !data) {
        Py_XDECREF(num);
        Py_XDECREF(ts);
        Py_XDECREF(lt);
        Py_XDECREF(orig);
        Py_XDECREF(ifc);
        Py_XDECREF(off);
        Py_XDECREF(data);
        return NULL;
    }
    pn = (int64_t *)PyBytes_AS_STRING(num);
    pt = (int64_t *)PyBytes_AS_STRING(ts);
    pl = (int32_t *)PyBytes_AS_STRING(lt);
    po = (int64_t *)PyBytes_AS_STRING(orig);
    pi = (int32_t *)PyBytes_AS_STRING(ifc);
    pf = (int32_t *)PyBytes_AS_STRING(off);
    pd = PyBytes_AS_STRING(data);
    total = 0;
    for (i = 0; i < m; i++) {
        const Rec *r = &self->recs[start + i];
        pn[i] = r->number;
        pt[i] = r->ts_ns;
        pl[i] = r->lt;
        po[i] = (int64_t)r->orig;
        pi[i] = r->iface;
        pf[i] = (int32_t)total;
        memcpy(pd + total, (const char *)self->buf.buf + r->body, r->caplen);
        total += (Py_ssize_t)r->caplen;
    }
    pf[m] = (int32_t)total;
    return Py_BuildValue("(nNNNNNNN)", stop, num, ts, lt, orig, ifc, off, data);
}

/* Batch.times() -> (numbers, ts): the records' frame numbers and times as int64 buffers
 * (native byte order): range_stats' clock, without copying the frames' bytes. */
static PyObject *batch_times(Batch *self, PyObject *unused) {
    PyObject *num = PyBytes_FromStringAndSize(NULL, self->n * 8), *ts;
    Py_ssize_t i;
    (void)unused;
    ts = num ? PyBytes_FromStringAndSize(NULL, self->n * 8) : NULL;
    if (ts == NULL) {
        Py_XDECREF(num);
        return NULL;
    }
    for (i = 0; i < self->n; i++) {
        ((int64_t *)PyBytes_AS_STRING(num))[i] = self->recs[i].number;
        ((int64_t *)PyBytes_AS_STRING(ts))[i] = self->recs[i].ts_ns;
    }
    return Py_BuildValue("(NN)", num, ts);
}

/* batch_of_columns(numbers, ts, linktypes, orig_lens, interfaces, offsets, data, start,
 * stop) -> Batch of records [start, stop) of pass 3's Arrow columns (keyed_batches'
 * columns as a dissection task gets them: int64, int64, int32, int64, int32, then the
 * binary column's int32 offsets and data buffer), decoded; the batch views data (no copy
 * of the frames' bytes, as batch_of makes).  Why: a task turned every Arrow row into a
 * Frame tuple only for batch_of to copy its bytes into a batch again. */
static PyObject *py_batch_of_columns(PyObject *self, PyObject *args) {
    Py_buffer num, ts, lt, orig, ifc, off;
    Batch *b;
    Py_ssize_t start, stop, i, m;
    int ok = 1;
    (void)self;
    b = batch_new();
    if (b == NULL) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*nn", &num, &ts, &lt, &orig, &ifc, &off,
                          &b->buf, &start, &stop)) {
        Py_DECREF(b);
        return NULL;
    }
    b->has_buf = 1;
    m = stop - start;
    if (start < 0 || m < 0 || num.len < stop * 8 || ts.len < stop * 8 || lt.len < stop * 4 ||
        orig.len < stop * 8 || ifc.len < stop * 4 || off.len < (stop + 1) * 4) {
        PyErr_SetString(PyExc_ValueError, "columns shorter than the records asked for");
        ok = 0;
    }
    if (ok) {
        b->recs = PyMem_Malloc(sizeof(Rec) * (size_t)(m ? m : 1));
        if (b->recs == NULL) {
            PyErr_NoMemory();
            ok = 0;
        }
    }
    for (i = 0; ok && i < m; i++) {
        const int32_t *o = (const int32_t *)off.buf + start + i;
        Rec *r = &b->recs[i];
        if (o[0] < 0 || o[1] < o[0] || (Py_ssize_t)o[1] > b->buf.len) {
            PyErr_SetString(PyExc_ValueError, "a frame's offsets lie outside the data");
            ok = 0;
            break;
        }
        memset(r, 0, sizeof *r);
        r->number = ((const int64_t *)num.buf)[start + i];
        r->ts_ns = ((const int64_t *)ts.buf)[start + i];
        r->lt = ((const int32_t *)lt.buf)[start + i];
        r->orig = (uint32_t)((const int64_t *)orig.buf)[start + i];
        r->iface = ((const int32_t *)ifc.buf)[start + i];
        r->body = o[0];
        r->caplen = (uint32_t)(o[1] - o[0]);
        decode_rec((const uint8_t *)b->buf.buf + r->body, r->caplen, r->lt, r);
        b->n++;
    }
    PyBuffer_Release(&num);
    PyBuffer_Release(&ts);
    PyBuffer_Release(&lt);
    PyBuffer_Release(&orig);
    PyBuffer_Release(&ifc);
    PyBuffer_Release(&off);
    if (!ok) {
        Py_DECREF(b);
        return NULL;
    }
    return (PyObject *)b;
}
