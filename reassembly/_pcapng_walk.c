/*
 * The pcapng block walk of the native engine (issue 22): runs of packet blocks
 * (Enhanced, Simple and obsolete Packet Blocks) taken into one Batch, as
 * reassembly/_engine.c's walk_pcap takes classic pcap records.
 *
 * Why a walk of runs only: everything else in a pcapng file changes what the frames
 * after it mean (a Section Header Block the byte order and interfaces, an Interface
 * Description Block the link type and time scale) or must reach a layer before the
 * frames after it (a Decryption Secrets Block's keys).  So the walk stops at any block
 * that is not a packet block the Python reader (reassembly.pcapng.PcapngReader) would
 * turn into a frame without a damage entry, and hands the position back: the reader
 * reads that block exactly as without the engine, then calls the walk again
 * (PcapngReader.walked).  The reader stays the definition of every frame's fields.
 *
 * Part of _engine.c's translation unit (that file includes this one before its module
 * table: the Batch type, its record row and the decode are that file's, static there);
 * a file of its own because it reads another format, not because it builds apart.
 */

/* reassembly.pcapng.MAX_BLOCK: the largest block taken for a block, not corruption */
#define NG_MAX_BLOCK ((64u << 20) + 4096u)
#define NG_EPB 6u
#define NG_SPB 3u
#define NG_PB 2u
#define NG_CACHE 16 /* interfaces parsed per walk, by id modulo this */

/* One interface of the section (reassembly.pcapng.Interface), as the walk needs it. */
typedef struct {
    Py_ssize_t id; /* its index in the section's list; -1: slot empty */
    int ok;        /* link type and global index fit the batch's record */
    int ts_ok;     /* mul, div and offset fit the int64 arithmetic below */
    int32_t lt, gidx;
    int64_t mul, div, off;
    uint32_t snaplen;
} NgIface;

static inline uint32_t ng32(const uint8_t *p, int big) { return big ? be32(p) : le32(p); }
static inline uint32_t ng16(const uint8_t *p, int big) {
    return big ? (uint32_t)be16(p) : (uint32_t)(p[1] << 8 | p[0]);
}

/* Field i of an interface tuple as an int64; *fits = 0 when it does not fit. */
static int64_t ng_field(PyObject *t, Py_ssize_t i, int *fits) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, i), &overflow);
    if (overflow) *fits = 0;
    return (int64_t)v;
}

/* Interface `id` of the list `ifs` (0 <= id < len), parsed into the cache; NULL with an
 * exception set when an entry is not a 6-tuple of ints. */
static const NgIface *ng_iface(NgIface *cache, PyObject *ifs, Py_ssize_t id) {
    NgIface *f = &cache[id % NG_CACHE];
    PyObject *t;
    int fits = 1, tfits = 1;
    int64_t lt, gidx, snap;
    if (f->id == id) return f;
    t = PyList_GET_ITEM(ifs, id);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 6) {
        PyErr_SetString(PyExc_TypeError, "an interface is a 6-tuple of ints");
        return NULL;
    }
    lt = ng_field(t, 0, &fits);
    f->mul = ng_field(t, 1, &tfits);
    f->div = ng_field(t, 2, &tfits);
    f->off = ng_field(t, 3, &tfits);
    gidx = ng_field(t, 4, &fits);
    snap = ng_field(t, 5, &fits);
    if (PyErr_Occurred()) return NULL; /* not an int */
    f->ok = fits && lt >= INT32_MIN && lt <= INT32_MAX && gidx >= 0 && gidx <= INT32_MAX &&
            snap >= 0 && snap <= UINT32_MAX;
    f->ts_ok = f->ok && tfits && f->mul >= 0 && f->div > 0;
    f->lt = (int32_t)lt;
    f->gidx = (int32_t)gidx;
    f->snaplen = (uint32_t)snap;
    f->id = id;
    return f;
}

/* units * mul // div + off (reassembly.pcapng's time of a packet block, Python ints
 * there); 0 when the result does not fit an int64 (the reader takes the block then). */
static int ng_time(uint64_t units, const NgIface *f, int64_t *ts) {
#ifdef __SIZEOF_INT128__
    /* units < 2^64 and 0 <= mul < 2^63: the product fits; it is not negative, so the
     * division truncates as Python's floor division */
    __int128 v = (__int128)units * f->mul / f->div + f->off;
    if (v > INT64_MAX || v < INT64_MIN) return 0;
    *ts = (int64_t)v;
    return 1;
#else
    uint64_t q;
    if (f->mul && units > (uint64_t)INT64_MAX / (uint64_t)f->mul) return 0;
    q = units * (uint64_t)f->mul / (uint64_t)f->div;
    if ((f->off > 0 && (int64_t)q > INT64_MAX - f->off) ||
        (f->off < 0 && (int64_t)q < INT64_MIN - f->off))
        return 0;
    *ts = (int64_t)q + f->off;
    return 1;
#endif
}

/* walk_pcapng(buf, pos, stop, big_endian, interfaces, number, last_ts, max)
 * -> (Batch, last_ts): the packet blocks from buf[pos:] (starting before stop) that
 * PcapngReader would yield as frames, decoded, numbered from number + 1; last_ts: the
 * last one's time (a Simple Packet Block's time is the previous frame's, last_ts
 * before the first).  interfaces: the section's PcapngReader interface tuples
 * (link type, mul, div, offset ns, global index, snaplen).  The batch's end is the
 * block the walk stopped at: another kind of block, one the reader would report as
 * damage or skip, one not whole in buf, one whose time does not fit an int64. */
static PyObject *py_walk_pcapng(PyObject *self, PyObject *args) {
    Py_ssize_t pos, stop, max, size, nifs, i, cap;
    int big;
    long long number, last_ts;
    PyObject *ifs;
    NgIface cache[NG_CACHE];
    const uint8_t *d;
    Batch *b = batch_new();
    if (b == NULL) return NULL;
    if (!PyArg_ParseTuple(args, "y*nnpO!LLn", &b->buf, &pos, &stop, &big, &PyList_Type, &ifs,
                          &number, &last_ts, &max)) {
        Py_DECREF(b);
        return NULL;
    }
    b->has_buf = 1;
    /* grown as records come: a run between two other blocks is often one record */
    cap = max < 64 ? (max > 0 ? max : 1) : 64;
    b->recs = PyMem_Malloc(sizeof(Rec) * (size_t)cap);
    if (b->recs == NULL) {
        Py_DECREF(b);
        return PyErr_NoMemory();
    }
    for (i = 0; i < NG_CACHE; i++) cache[i].id = -1;
    d = (const uint8_t *)b->buf.buf;
    size = b->buf.len;
    nifs = PyList_GET_SIZE(ifs);
    if (pos < 0) pos = 0;
    while (b->n < max && pos < stop && size - pos >= 12) {
        const uint8_t *h = d + pos;
        uint32_t btype = ng32(h, big), blen = ng32(h + 4, big), caplen, orig;
        const NgIface *f;
        int64_t ts;
        Py_ssize_t body;
        Rec *r;
        if (btype != NG_EPB && btype != NG_SPB && btype != NG_PB) break;
        if (blen & 3 || blen < (btype == NG_SPB ? 16u : 32u) || blen > NG_MAX_BLOCK ||
            (Py_ssize_t)blen > size - pos || ng32(h + blen - 4, big) != blen)
            break; /* damage, or not whole in buf: the reader's */
        if (btype == NG_SPB) {
            if (nifs == 0) break; /* skipped with a damage entry */
            f = ng_iface(cache, ifs, 0);
            if (f == NULL) goto error;
            if (!f->ok) break;
            orig = ng32(h + 8, big);
            caplen = orig < blen - 16 ? orig : blen - 16;
            if (f->snaplen && f->snaplen < caplen) caplen = f->snaplen;
            ts = last_ts;
            body = pos + 12;
        } else {
            uint32_t id = btype == NG_EPB ? ng32(h + 8, big) : ng16(h + 8, big);
            uint64_t units = (uint64_t)ng32(h + 12, big) << 32 | ng32(h + 16, big);
            caplen = ng32(h + 20, big);
            orig = ng32(h + 24, big);
            if (caplen > blen - 32 || (Py_ssize_t)id >= nifs) break; /* damage */
            f = ng_iface(cache, ifs, (Py_ssize_t)id);
            if (f == NULL) goto error;
            if (!f->ts_ok || !ng_time(units, f, &ts)) break;
            body = pos + 28;
        }
        if (b->n == cap) {
            Rec *more;
            cap = cap > max / 2 ? max : cap * 2;
            more = PyMem_Realloc(b->recs, sizeof(Rec) * (size_t)cap);
            if (more == NULL) {
                PyErr_NoMemory();
                goto error;
            }
            b->recs = more;
        }
        r = &b->recs[b->n++];
        memset(r, 0, sizeof *r);
        r->number = ++number;
        r->ts_ns = ts;
        r->body = body;
        r->caplen = caplen;
        r->orig = orig;
        r->lt = f->lt;
        r->iface = f->gidx;
        decode_rec(d + body, caplen, f->lt, r);
        last_ts = ts;
        pos += blen;
    }
    b->end = pos;
    return Py_BuildValue("(NL)", (PyObject *)b, last_ts);
error:
    Py_DECREF(b);
    return NULL;
}


/* pcapng_count(buf, pos, starts_before, big_endian, mins, max_block) -> (pos, packets,
 * spb): pass 1 of Spark's split ingest over a run of packet blocks (reassembly.ranges
 * _walk_pcapng, whose loop stays the definition and handles every other block): from
 * buf[pos], the Enhanced, obsolete and Simple Packet Blocks that start before
 * starts_before, whole in buf, with a length a multiple of 4, at least mins (EPB, PB,
 * SPB minimum lengths) and at most max_block, and a trailing copy of it; returns where
 * it stopped, the blocks counted and how many of them were SPBs. */
static PyObject *py_pcapng_count(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, before, len, packets = 0, spb = 0;
    int big;
    unsigned long epb_min, pb_min, spb_min, max_block;
    const uint8_t *d;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnp(kkk)k", &view, &pos, &before, &big, &epb_min, &pb_min,
                          &spb_min, &max_block))
        return NULL;
    d = (const uint8_t *)view.buf;
    len = view.len;
    if (pos < 0) pos = 0;
    while (pos < before && pos + 12 <= len) {
        uint32_t bt = big ? be32(d + pos) : le32(d + pos);
        uint32_t bl = big ? be32(d + pos + 4) : le32(d + pos + 4);
        unsigned long min_len;
        if (bt == 6) min_len = epb_min;
        else if (bt == 2) min_len = pb_min;
        else if (bt == 3) min_len = spb_min;
        else break;
        if ((bl & 3) || bl < min_len || bl > max_block || pos + (Py_ssize_t)bl > len) break;
        if ((big ? be32(d + pos + bl - 4) : le32(d + pos + bl - 4)) != bl) break;
        packets++;
        if (bt == 3) spb++;
        pos += bl;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnn)", pos, packets, spb);
}
