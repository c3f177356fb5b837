/*
 * Native packet engine (issue 22): capture records -> link/IP/transport decode ->
 * registered TCP flows -> in-order delivery, coalesced.  Wrapped by reassembly.native.
 *
 * Why it exists: on a bulk capture the pure-Python reassembly spends a few
 * microseconds per packet (a Frame tuple, an L4Packet, the flow-table lookup, the half
 * stream's bookkeeping, a StreamData per segment) while the bytes need nanoseconds.
 * This module does that common path in one pass over the reader's buffer.  It is
 * deliberately conservative: a record is "fast" only when the Python reference
 * (reassembly.network.NetworkDecoder.decode, FlowTable.tcp) would return the same
 * packet without an anomaly, and a packet is "taken" only when the reference would do
 * nothing but bookkeeping and at most one in-order delivery for it.  Everything else
 * is handed back, frame by frame, to the reference, which stays the definition of the
 * output (docs/performance.md, "Native engine (issue 22): design").
 *
 * Objects:
 *   Batch      - the records of one buffer walk (walk_pcap, or walk_pcapng in
 *                _pcapng_walk.c, included below) with their decoded rows.
 *   Engine     - the registered flows and what was taken since the last sync.
 *   decode()   - the decode of one frame, for frames read by the Python readers.
 *   conn_keys(), conn_facts(), Batch.columns() - for Spark's split ingest
 *                (_conn_keys.c, included below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ decode */

enum { K_SLOW = 0, K_TCP = 6, K_UDP = 17 };
#define MAX_VLANS 2

typedef struct {
    int64_t ts_ns;
    int64_t number;
    Py_ssize_t body; /* offset of the record's data in the batch buffer */
    uint32_t caplen, orig;
    int32_t lt, iface; /* link type, interface index */
    uint8_t kind;  /* K_SLOW, K_TCP, K_UDP */
    uint8_t ipver; /* 4 or 6 */
    uint8_t nvlan;
    uint8_t tflags; /* TCP flags */
    uint16_t vlan[MAX_VLANS];
    uint16_t sport, dport;
    uint32_t seq, ack;
    uint16_t window;
    uint32_t ip;    /* offset of the IP header in the record */
    uint32_t l4;    /* offset of the transport header */
    uint32_t l4len; /* transport header + data, trimmed to the IP length */
    uint32_t hlen;  /* transport header length (TCP data offset; 8 for UDP) */
} Rec;

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* Where the IP header starts, as reassembly.link.decode_link finds it, for the link
 * types of the common path; 4 / 6 (the link layer says which), 1 (the version nibble
 * says) or 0 (anything else: the reference decides). */
static int link_ip(const uint8_t *d, size_t n, int lt, size_t *off, Rec *r) {
    unsigned et;
    size_t o;
    r->nvlan = 0;
    switch (lt) {
    case 1: /* Ethernet II */
        if (n < 14) return 0;
        et = be16(d + 12);
        if (et < 0x0600) return 0; /* 802.3 length: not IP */
        o = 14;
        break;
    case 113: /* Linux cooked v1 */
        if (n < 16) return 0;
        et = be16(d + 14);
        o = 16;
        break;
    case 276: /* Linux cooked v2 */
        if (n < 20) return 0;
        et = be16(d);
        o = 20;
        break;
    case 0:
    case 108: { /* BSD NULL (host order) / LOOP (network order), either guessed */
        uint32_t v;
        if (n < 4) return 0;
        if (lt == 0) {
            v = le32(d);
            if (v >= 0x10000) v = be32(d);
        } else {
            v = be32(d);
            if (v >= 0x10000) v = le32(d);
        }
        *off = 4;
        if (v == 2) return 4;
        if (v == 24 || v == 28 || v == 30) return 6;
        return 0;
    }
    case 12:
    case 14:
    case 101:
        *off = 0;
        return 1;
    case 228:
        *off = 0;
        return 4;
    case 229:
        *off = 0;
        return 6;
    default:
        return 0;
    }
    for (;;) { /* ethertypes: VLAN tags (at most MAX_VLANS), then IPv4 / IPv6 */
        if (et == 0x0800) { *off = o; return 4; }
        if (et == 0x86DD) { *off = o; return 6; }
        if (et == 0x8100 || et == 0x88A8 || et == 0x9100 || et == 0x9200) {
            if (o + 4 > n || r->nvlan == MAX_VLANS) return 0;
            r->vlan[r->nvlan++] = be16(d + o) & 0x0FFF;
            et = be16(d + o + 2);
            o += 4;
            continue;
        }
        return 0; /* PPPoE, MPLS, non-IP: the reference */
    }
}

/* Fill r from one frame; r->kind stays K_SLOW unless the reference would decode it to
 * the same packet with no anomaly and no state but the counters frames, ipv4/ipv6 and
 * l4_packets, and the flow table would accept its transport header. */
static void decode_rec(const uint8_t *d, size_t n, int lt, Rec *r) {
    size_t off = 0, avail, l4, end;
    unsigned proto;
    int kind = link_ip(d, n, lt, &off, r);
    r->kind = K_SLOW;
    if (kind == 0) return;
    if (kind == 1) {
        if (off >= n) return;
        kind = d[off] >> 4;
        if (kind != 4 && kind != 6) return;
    }
    avail = n - off;
    if (kind == 4) {
        unsigned hl, tot;
        if (avail < 20) return;
        if (d[off] >> 4 != 4) return;
        hl = (unsigned)(d[off] & 0x0F) << 2;
        tot = be16(d + off + 2);
        if (hl < 20 || tot < hl || hl > avail || tot > avail) return; /* tot 0: offload */
        if (be16(d + off + 6) & 0x3FFF) return;                       /* a fragment */
        proto = d[off + 9];
        l4 = off + hl;
        end = off + tot;
    } else {
        unsigned plen;
        if (avail < 40) return;
        if (d[off] >> 4 != 6) return;
        plen = be16(d + off + 4);
        proto = d[off + 6];
        if (plen == 0 || 40 + (size_t)plen > avail) return;
        if (proto != K_TCP && proto != K_UDP) return; /* extension headers */
        l4 = off + 40;
        end = l4 + plen;
    }
    r->ipver = (uint8_t)kind;
    r->ip = (uint32_t)off;
    r->l4 = (uint32_t)l4;
    r->l4len = (uint32_t)(end - l4);
    if (proto == K_TCP) {
        unsigned hlen;
        if (r->l4len < 20) return;
        hlen = (unsigned)(d[l4 + 12] >> 4) * 4;
        if (hlen < 20 || hlen > r->l4len) return;
        r->sport = be16(d + l4);
        r->dport = be16(d + l4 + 2);
        r->seq = be32(d + l4 + 4);
        r->ack = be32(d + l4 + 8);
        r->tflags = d[l4 + 13];
        r->window = be16(d + l4 + 14);
        r->hlen = hlen;
        r->kind = K_TCP;
    } else if (proto == K_UDP) {
        if (r->l4len < 8) return;
        r->sport = be16(d + l4);
        r->dport = be16(d + l4 + 2);
        r->hlen = 8;
        r->kind = K_UDP;
    }
}

/* The decoded row as a tuple (see reassembly.native.decode), or None when slow. */
static PyObject *row_tuple(const uint8_t *d, const Rec *r) {
    PyObject *vlans, *res;
    size_t alen;
    const uint8_t *src;
    int i;
    if (r->kind == K_SLOW) Py_RETURN_NONE;
    vlans = PyTuple_New(r->nvlan);
    if (vlans == NULL) return NULL;
    for (i = 0; i < r->nvlan; i++) PyTuple_SET_ITEM(vlans, i, PyLong_FromLong(r->vlan[i]));
    alen = r->ipver == 4 ? 4 : 16;
    src = d + r->ip + (r->ipver == 4 ? 12 : 8);
    res = Py_BuildValue("(iy#y#iIINiiIIiiI)", r->ipver, src, (Py_ssize_t)alen, src + alen,
                        (Py_ssize_t)alen, (int)r->kind, r->l4, r->l4len, vlans, (int)r->sport,
                        (int)r->dport, r->seq, r->ack, (int)r->tflags, (int)r->window,
                        r->hlen);
    return res;
}

/* wscale(options) -> the window scale shift of a SYN's TCP options (capped at 14), or
   None: reassembly.flows._wscale_option (the definition; tests/perf/test_engine_native.py
   compares them on any bytes).  Why here: the flow table reads it for every SYN and SYN/ACK
   in Python (~240 bytecodes for a usual option list), a short flow's whole handshake. */
static PyObject *py_wscale(PyObject *self, PyObject *arg) {
    Py_buffer view;
    const unsigned char *o;
    Py_ssize_t n, i = 0;
    long shift = -1;
    (void)self;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    o = (const unsigned char *)view.buf;
    n = view.len;
    while (i < n) {
        unsigned char kind = o[i];
        if (kind == 0) break;
        if (kind == 1) {
            i++;
            continue;
        }
        if (i + 1 >= n || o[i + 1] < 2) break;
        if (kind == 3 && o[i + 1] == 3 && i + 2 < n) {
            shift = o[i + 2] < 14 ? o[i + 2] : 14;
            break;
        }
        i += o[i + 1];
    }
    PyBuffer_Release(&view);
    if (shift < 0) Py_RETURN_NONE;
    return PyLong_FromLong(shift);
}

static PyObject *py_decode(PyObject *self, PyObject *args) {
    int lt;
    Py_buffer b;
    Rec r;
    PyObject *res;
    if (!PyArg_ParseTuple(args, "iy*", &lt, &b)) return NULL;
    memset(&r, 0, sizeof r);
    decode_rec((const uint8_t *)b.buf, (size_t)b.len, lt, &r);
    res = row_tuple((const uint8_t *)b.buf, &r);
    PyBuffer_Release(&b);
    return res;
}

/* ------------------------------------------------------------------ Batch */

typedef struct {
    PyObject_HEAD
    Py_buffer buf; /* the walked buffer, held while the batch lives */
    int has_buf;
    Rec *recs;
    Py_ssize_t n;
    Py_ssize_t end; /* where the walk stopped in buf */
    int stop;       /* 0: buffer ended (refill); 1: a caplen over the limit */
} Batch;

static PyTypeObject BatchType;

static void batch_dealloc(Batch *self) {
    if (self->has_buf) PyBuffer_Release(&self->buf);
    PyMem_Free(self->recs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An empty batch (no buffer, no record yet): what each constructor fills. */
static Batch *batch_new(void) {
    Batch *b = PyObject_New(Batch, &BatchType);
    if (b == NULL) return NULL;
    b->has_buf = 0;
    b->recs = NULL;
    b->n = 0;
    b->end = 0;
    b->stop = 0;
    return b;
}

static Py_ssize_t batch_len(Batch *self) { return self->n; }

static int batch_index(Batch *self, Py_ssize_t i) {
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "batch index out of range");
        return -1;
    }
    return 0;
}

static PyObject *batch_frame(Batch *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    const Rec *r;
    if ((i == -1 && PyErr_Occurred()) || batch_index(self, i) < 0) return NULL;
    r = &self->recs[i];
    return Py_BuildValue("(LLiy#Ii)", (long long)r->number, (long long)r->ts_ns, (int)r->lt,
                         (const char *)self->buf.buf + r->body, (Py_ssize_t)r->caplen, r->orig,
                         (int)r->iface);
}

static PyObject *batch_row(Batch *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if ((i == -1 && PyErr_Occurred()) || batch_index(self, i) < 0) return NULL;
    return row_tuple((const uint8_t *)self->buf.buf + self->recs[i].body, &self->recs[i]);
}

static PyObject *batch_kinds(Batch *self, PyObject *unused) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, self->n);
    Py_ssize_t i;
    if (out == NULL) return NULL;
    for (i = 0; i < self->n; i++) PyBytes_AS_STRING(out)[i] = (char)self->recs[i].kind;
    return out;
}

static PyObject *batch_get_end(Batch *self, void *c) { return PyLong_FromSsize_t(self->end); }
static PyObject *batch_get_stop(Batch *self, void *c) { return PyLong_FromLong(self->stop); }
static PyObject *batch_get_number(Batch *self, void *c) {
    return PyLong_FromLongLong(self->n ? self->recs[self->n - 1].number : 0);
}

/* walk_pcap(buf, pos, big_endian, rec_len, swap, mult, limit, linktype, number, max
 * [, starts_before]) -> Batch: whole pcap records from buf[pos:], decoded; numbered from
 * number + 1; none that starts at or after buf offset starts_before (a range's end).
 * swap: 0 caplen/len as stored, 1 swapped, 2 swapped when "caplen" > "len" (v2.3). */
static PyObject *py_walk_pcap(PyObject *self, PyObject *args) {
    Py_ssize_t pos, max, rec_len, before = PY_SSIZE_T_MAX;
    int big, swap, lt;
    long long mult, number;
    unsigned long long limit;
    Batch *b;
    const uint8_t *d;
    Py_ssize_t size, cap;
    b = batch_new();
    if (b == NULL) return NULL;
    if (!PyArg_ParseTuple(args, "y*npniLKiLn|n", &b->buf, &pos, &big, &rec_len, &swap, &mult,
                          &limit, &lt, &number, &max, &before)) {
        Py_DECREF(b);
        return NULL;
    }
    b->has_buf = 1;
    if (rec_len < 16 || mult < 0) {
        Py_DECREF(b);
        PyErr_SetString(PyExc_ValueError, "a pcap record header is at least 16 bytes");
        return NULL;
    }
    d = (const uint8_t *)b->buf.buf;
    size = b->buf.len;
    cap = max > 0 ? max : 1;
    b->recs = PyMem_Malloc(sizeof(Rec) * (size_t)cap);
    if (b->recs == NULL) {
        Py_DECREF(b);
        return PyErr_NoMemory();
    }
    if (pos < 0) pos = 0;
    while (b->n < max && pos < before && pos + rec_len <= size) {
        const uint8_t *h = d + pos;
        uint32_t sec = big ? be32(h) : le32(h), frac = big ? be32(h + 4) : le32(h + 4);
        uint32_t incl = big ? be32(h + 8) : le32(h + 8), orig = big ? be32(h + 12) : le32(h + 12);
        Rec *r;
        if (swap && (swap == 1 || incl > orig)) {
            uint32_t t = incl;
            incl = orig;
            orig = t;
        }
        if (incl > limit) {
            b->stop = 1;
            break;
        }
        if (pos + rec_len + (Py_ssize_t)incl > size) break;
        r = &b->recs[b->n++];
        memset(r, 0, sizeof *r);
        r->number = ++number;
        r->ts_ns = (int64_t)sec * 1000000000LL + (int64_t)frac * mult;
        r->body = pos + rec_len;
        r->caplen = incl;
        r->orig = orig;
        r->lt = lt;
        decode_rec(d + r->body, incl, lt, r);
        pos += rec_len + incl;
    }
    b->end = pos;
    return (PyObject *)b;
}

/* batch_of(frames) -> Batch: Frame tuples (number, ts_ns, linktype, data, orig_len,
 * interface) from any reader, their data copied into one buffer and decoded. */
static PyObject *py_batch_of(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "batch_of() takes a sequence of frames"), *buf;
    Py_ssize_t n, i, total = 0, at = 0;
    Batch *b;
    if (seq == NULL) return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n; i++) {
        PyObject *f = PySequence_Fast_GET_ITEM(seq, i), *data;
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 6) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "a frame is a 6-tuple");
            return NULL;
        }
        data = PyTuple_GET_ITEM(f, 3);
        if (!PyBytes_Check(data)) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "frame data must be bytes");
            return NULL;
        }
        total += PyBytes_GET_SIZE(data);
    }
    buf = PyBytes_FromStringAndSize(NULL, total);
    b = buf ? batch_new() : NULL;
    if (b == NULL) {
        Py_XDECREF(buf);
        Py_DECREF(seq);
        return NULL;
    }
    b->recs = PyMem_Malloc(sizeof(Rec) * (size_t)(n ? n : 1));
    if (b->recs == NULL || PyObject_GetBuffer(buf, &b->buf, PyBUF_SIMPLE) < 0) {
        int nomem = b->recs == NULL;
        Py_DECREF(buf);
        Py_DECREF(seq);
        Py_DECREF(b);
        return nomem ? PyErr_NoMemory() : NULL;
    }
    b->has_buf = 1;
    Py_DECREF(buf); /* the view holds it */
    for (i = 0; i < n; i++) {
        PyObject *f = PySequence_Fast_GET_ITEM(seq, i), *data = PyTuple_GET_ITEM(f, 3);
        Rec *r = &b->recs[i];
        Py_ssize_t len = PyBytes_GET_SIZE(data);
        memset(r, 0, sizeof *r);
        r->number = PyLong_AsLongLong(PyTuple_GET_ITEM(f, 0));
        r->ts_ns = PyLong_AsLongLong(PyTuple_GET_ITEM(f, 1));
        r->lt = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(f, 2));
        r->orig = (uint32_t)PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(f, 4));
        r->iface = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(f, 5));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            Py_DECREF(b);
            return NULL;
        }
        memcpy((char *)b->buf.buf + at, PyBytes_AS_STRING(data), (size_t)len);
        r->body = at;
        r->caplen = (uint32_t)len;
        decode_rec((const uint8_t *)b->buf.buf + at, (size_t)len, r->lt, r);
        at += len;
        b->n++;
    }
    Py_DECREF(seq);
    return (PyObject *)b;
}

/* ------------------------------------------------------------------ connection keys */

#include "_conn_keys.c"

static PyMethodDef batch_methods[] = {
    {"frame", (PyCFunction)batch_frame, METH_O,
     "frame(i) -> (number, ts_ns, linktype, data, orig_len, interface): a Frame's fields"},
    {"row", (PyCFunction)batch_row, METH_O, "row(i) -> the decoded row (see decode) or None"},
    {"kinds", (PyCFunction)batch_kinds, METH_NOARGS,
     "kinds() -> bytes: 0 slow, 6 TCP, 17 UDP, one per record"},
    {"columns", (PyCFunction)batch_columns, METH_O,
     "columns(start) -> (stop, numbers, ts, linktypes, orig_lens, interfaces, offsets, data):"
     " records [start, stop) as Arrow column buffers (_conn_keys.c)"},
    {"times", (PyCFunction)batch_times, METH_NOARGS,
     "times() -> (numbers, ts): int64 buffers of the records' frame numbers and times"},
    {NULL}};

static PyGetSetDef batch_getset[] = {
    {"end", (getter)batch_get_end, NULL, "offset in the buffer where the walk stopped", NULL},
    {"stop", (getter)batch_get_stop, NULL, "0: the buffer ended; 1: caplen over the limit", NULL},
    {"number", (getter)batch_get_number, NULL, "number of the last record (0: none)", NULL},
    {NULL}};

static PySequenceMethods batch_seq = {.sq_length = (lenfunc)batch_len};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "reassembly._engine.Batch",
    .tp_basicsize = sizeof(Batch),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records of one pcap buffer walk, decoded (see module docstring).",
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
    .tp_as_sequence = &batch_seq,
};


/* ------------------------------------------------------------------ Engine */

#define MOD32 4294967296LL
#define HALF32 2147483648LL
#define F_FIN 0x01
#define F_SYN 0x02
#define F_RST 0x04
#define F_ACK 0x10

/* One direction of a registered flow: the fields of reassembly.tcp.TcpHalfStream the
 * common path reads or moves, and what moved since the last sync. */
typedef struct {
    uint32_t base;
    int64_t ref_off, next_off;
    int has_acked, has_edge, has_last_end;
    int64_t acked_off, win_edge, win_size;
    uint32_t last_end;
    int syn_seen;
    int64_t keep, rlen, rheld; /* overlap-check window: limit, length, budget held */
    int shift;                 /* window scale of the ACKs this direction sends */
    int64_t d_packets, d_bytes; /* since the last sync */
    int mid;                    /* data taken while syn_seen is false */
    int data_ok;                /* light flow: its TcpHalfTracker already had data */
    /* the reorder buffer (TcpHalfStream.pieces): how many pieces, their bytes, where the
     * first starts and the last ends (the pieces themselves live in the reference's
     * half, written there at each sync), and the bytes buffered since the sync */
    int64_t npieces, buffered, p_first, p_end, d_pbytes;
    /* the pieces the C core took itself, in order (their bytes, offset, time, frame):
     * when they are all the buffer holds and adjoin one another (contig), an ACK that
     * proves the hole before them is taken too (drain); d_drained: bytes delivered
     * from the buffer since the sync */
    struct HPiece { PyObject *obj; int64_t off, ts, frame; } *hp;
    int64_t nhp, hpcap, d_drained;
    int contig;
} Half;

typedef struct {
    uint8_t key[37]; /* v6 flag, client address (16), server address (16), ports (4) */
    int32_t next;    /* hash chain / free list */
    int used;
    int64_t flow_id;
    PyObject *conn; /* the reassembly.flows._Tcp */
    PyObject *info; /* its FlowInfo */
    int64_t ts_last, frame_last, idle_timeout;
    int64_t last_ord; /* ordinal of its last taken packet since the sync, -1: none */
    int32_t cur_run;  /* build_runs, per flow: its latest run and that run's direction */
    int cur_dir;
    int8_t mov[2];    /* build_runs, per direction: movable (1), fixed (0), not asked (-1) */
    int light;        /* another process reassembles it: bookkeeping only (register_light) */
    Half h[2];
} Flow;

typedef struct { /* one taken payload, or the gap a taken ACK proved (gap) */
    int32_t flow;
    uint8_t dir;
    uint8_t gap;     /* a StreamGap ("acked-unseen") of body bytes at off */
    Py_ssize_t body; /* offset of the payload in the batch buffer (gap: its size) */
    uint32_t len;
    int64_t off, ts, frame;
    PyObject *obj;   /* a drained piece's bytes (owned), else NULL: the batch's */
} Seg;

/* What the C core did since the sync that the reference's memory budget and buffers
 * must learn, in order (sync() lists them): */
enum {
    FX_PIECE = 0,   /* a payload into a reorder buffer (data, off, ts, frame), held: the
                     * buffer's charge after it (TcpHalfStream._hold_budget) */
    FX_WINDOW = 1,  /* an overlap-check window grew: held, its charge (_hold_window) */
    FX_DRAIN = 2,   /* a gap of held bytes at off proved by the ACK at ts, frame; the
                     * window forgotten, every piece delivered (_flush_hole) */
    FX_RELEASE = 3, /* the drained buffer's charge given back (_hold_budget: 0) */
};
typedef struct {
    int kind;
    int32_t flow;
    int dir;
    PyObject *data; /* FX_PIECE: its bytes (a copy: the batch may be gone by the sync) */
    int64_t off, ts, frame;
    int64_t held;
} Piece;

typedef struct {
    PyObject_HEAD
    Flow *flows;
    int32_t nflows, cap, free_head;
    int32_t *buckets;
    int32_t nbuckets;
    Seg *segs;
    Py_ssize_t nsegs, segcap;
    /* clock and counters of the reference, as of the last hand-back */
    int64_t now_ns, last_sweep_ns, sweep_ns;
    int has_sweep;
    int lt_cur;
    int64_t taken, taken_v4, taken_v6; /* frames taken since the sync */
    /* the memory budget's room (limit - used) */
    int64_t headroom;
    int32_t *dirty;
    int32_t ndirty;
    /* the last run(): its batch (the segments point into its buffer, so regroup() can
     * build them again), the budget's room left after its payloads and window charges
     * (coalesce="flow": below 0, the stretch is grouped as the reference's order), and
     * whether its runs are in another order than the reference's events (mixed) */
    PyObject *batch;
    int64_t room;
    int mixed;
    /* segments taken into reorder buffers since the sync, and the reference's limits
     * on those buffers (reorder(); max_psegs 0: none is taken) */
    Piece *pieces;
    Py_ssize_t npieces, piececap;
    int64_t max_pbytes, max_psegs, piece_overhead, oow_slack;
} Engine;

static uint32_t key_hash(const uint8_t *k) {
    uint32_t h = 2166136261u;
    int i;
    for (i = 0; i < 37; i++) h = (h ^ k[i]) * 16777619u;
    return h;
}

static void make_key(uint8_t *k, int v6, const uint8_t *a, const uint8_t *b, uint16_t pa,
                     uint16_t pb) {
    size_t n = v6 ? 16 : 4;
    memset(k, 0, 37);
    k[0] = (uint8_t)v6;
    memcpy(k + 1, a, n);
    memcpy(k + 17, b, n);
    k[33] = (uint8_t)(pa >> 8);
    k[34] = (uint8_t)pa;
    k[35] = (uint8_t)(pb >> 8);
    k[36] = (uint8_t)pb;
}

static int32_t find(Engine *e, const uint8_t *k) {
    int32_t i = e->buckets[key_hash(k) & (uint32_t)(e->nbuckets - 1)];
    while (i >= 0) {
        if (memcmp(e->flows[i].key, k, 37) == 0) return i;
        i = e->flows[i].next;
    }
    return -1;
}

/* Drop the references a direction keeps to the pieces it took. */
static void half_clear(Half *h) {
    int64_t k;
    for (k = 0; k < h->nhp; k++) Py_XDECREF(h->hp[k].obj);
    PyMem_Free(h->hp);
    h->hp = NULL;
    h->nhp = h->hpcap = 0;
}

/* Drop the segments of the last run() (and the drained pieces' bytes they own). */
static void clear_segs(Engine *e) {
    Py_ssize_t j;
    for (j = 0; j < e->nsegs; j++) Py_CLEAR(e->segs[j].obj);
    e->nsegs = 0;
}

static void unlink_flow(Engine *e, int32_t idx) {
    Flow *f = &e->flows[idx];
    int32_t *p = &e->buckets[key_hash(f->key) & (uint32_t)(e->nbuckets - 1)];
    while (*p >= 0 && *p != idx) p = &e->flows[*p].next;
    if (*p == idx) *p = f->next;
    Py_CLEAR(f->conn);
    Py_CLEAR(f->info);
    half_clear(&f->h[0]);
    half_clear(&f->h[1]);
    f->used = 0;
    f->next = e->free_head;
    e->free_head = idx;
    e->nflows--;
}

static int grow(Engine *e) {
    int32_t ncap = e->cap ? e->cap * 2 : 64, nb = ncap * 2, i;
    Flow *nf = PyMem_Realloc(e->flows, sizeof(Flow) * (size_t)ncap);
    int32_t *b, *dirty;
    if (nf == NULL) return -1;
    e->flows = nf;
    dirty = PyMem_Realloc(e->dirty, sizeof(int32_t) * (size_t)ncap);
    if (dirty == NULL) return -1;
    e->dirty = dirty;
    b = PyMem_Malloc(sizeof(int32_t) * (size_t)nb);
    if (b == NULL) return -1;
    for (i = 0; i < nb; i++) b[i] = -1;
    for (i = e->cap; i < ncap; i++) {
        nf[i].used = 0;
        nf[i].conn = nf[i].info = NULL;
        nf[i].next = e->free_head;
        e->free_head = i;
    }
    for (i = 0; i < e->cap; i++) {
        if (nf[i].used) {
            uint32_t h = key_hash(nf[i].key) & (uint32_t)(nb - 1);
            nf[i].next = b[h];
            b[h] = i;
        }
    }
    PyMem_Free(e->buckets);
    e->buckets = b;
    e->nbuckets = nb;
    e->cap = ncap;
    return 0;
}

/* TcpHalfStream._seq_off while no FIN was seen (registration requires it). */
static inline int64_t seq_off(const Half *h, uint32_t seq) {
    int64_t rel = (int64_t)(uint32_t)(seq - h->base);
    int64_t ref = h->ref_off, r = ((ref % MOD32) + MOD32) % MOD32;
    int64_t diff = rel - r;
    if (diff > HALF32) diff -= MOD32;
    else if (diff < -HALF32) diff += MOD32;
    return ref + diff;
}

static PyObject *engine_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Engine *e = (Engine *)type->tp_alloc(type, 0);
    if (e == NULL) return NULL;
    e->free_head = -1;
    e->lt_cur = -1;
    if (grow(e) < 0) {
        Py_DECREF(e);
        return PyErr_NoMemory();
    }
    return (PyObject *)e;
}

static void engine_dealloc(Engine *e) {
    int32_t i;
    clear_segs(e);
    for (i = 0; i < e->cap; i++) {
        Py_XDECREF(e->flows[i].conn);
        Py_XDECREF(e->flows[i].info);
        if (e->flows[i].used) {
            half_clear(&e->flows[i].h[0]);
            half_clear(&e->flows[i].h[1]);
        }
    }
    PyMem_Free(e->flows);
    PyMem_Free(e->buckets);
    PyMem_Free(e->segs);
    PyMem_Free(e->dirty);
    {
        Py_ssize_t j;
        for (j = 0; j < e->npieces; j++) Py_XDECREF(e->pieces[j].data);
    }
    PyMem_Free(e->pieces);
    Py_XDECREF(e->batch);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int opt_i64(PyObject *o, int64_t *v, int *has) {
    if (o == Py_None) {
        *has = 0;
        *v = 0;
        return 0;
    }
    *has = 1;
    *v = PyLong_AsLongLong(o);
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The free slot a registration under key k fills (its fields set, still on the free
 * list until link_flow): any registration under k is dropped first; -1 with an
 * exception when that one has packets not synced yet, or memory ran out. */
static int32_t claim(Engine *e, const uint8_t *k, int64_t flow_id, int64_t ts_last,
                     int64_t frame_last, int64_t idle) {
    int32_t idx = find(e, k), next;
    Flow *f;
    if (idx >= 0) {
        if (e->flows[idx].last_ord >= 0) {
            PyErr_SetString(PyExc_RuntimeError, "register over a flow not synced");
            return -1;
        }
        unlink_flow(e, idx);
    }
    if (e->free_head < 0 && grow(e) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    idx = e->free_head;
    f = &e->flows[idx];
    next = f->next;
    memset(f, 0, sizeof *f);
    f->next = next;
    memcpy(f->key, k, 37);
    f->flow_id = flow_id;
    f->ts_last = ts_last;
    f->frame_last = frame_last;
    f->idle_timeout = idle;
    f->last_ord = -1;
    return idx;
}

/* The claimed slot idx leaves the free list for its key's hash chain. */
static void link_flow(Engine *e, int32_t idx, PyObject *conn, PyObject *info) {
    Flow *f = &e->flows[idx];
    uint32_t h = key_hash(f->key) & (uint32_t)(e->nbuckets - 1);
    e->free_head = f->next;
    Py_INCREF(conn);
    Py_INCREF(info);
    f->conn = conn;
    f->info = info;
    f->used = 1;
    f->next = e->buckets[h];
    e->buckets[h] = idx;
    e->nflows++;
}

/* The arguments register and register_light share, (v6, client, cport, server, sport,
 * flow_id, conn, info, ts_last, frame_last, idle_timeout, half_c2s, half_s2c): the slot
 * claimed for the flow's key (-1 with an exception set), its conn and info, and the two
 * half tuples, which each caller reads its own way. */
static int32_t claim_from_args(Engine *e, PyObject *args, PyObject **conn, PyObject **info,
                               PyObject *hs[2]) {
    int v6, cport, sport;
    Py_buffer a, b;
    long long flow_id, ts_last, frame_last, idle;
    uint8_t k[37];
    if (!PyArg_ParseTuple(args, "py*iy*iLOOLLLO!O!", &v6, &a, &cport, &b, &sport, &flow_id,
                          conn, info, &ts_last, &frame_last, &idle, &PyTuple_Type, &hs[0],
                          &PyTuple_Type, &hs[1]))
        return -1;
    if (a.len != (v6 ? 16 : 4) || b.len != a.len) {
        PyBuffer_Release(&a);
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "address length does not match the version");
        return -1;
    }
    make_key(k, v6, a.buf, b.buf, (uint16_t)cport, (uint16_t)sport);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return claim(e, k, flow_id, ts_last, frame_last, idle);
}

/* register(v6, client, cport, server, sport, flow_id, conn, info, ts_last, frame_last,
 *          idle_timeout, half_c2s, half_s2c): a flow in the reference's common state;
 * half = (base, ref_off, next_off, acked_off|None, win_edge|None, win_size,
 *         last_end|None, syn_seen, keep, recent_len, recent_held, ack_shift,
 *         pieces, buffered, first_piece_start, last_piece_end) (the reorder buffer's
 *         count, bytes and extent; 0 0 0 0 when empty).
 * Replaces any registration under the same key. */
static PyObject *engine_register(Engine *e, PyObject *args) {
    int d;
    PyObject *conn, *info, *hs[2];
    int32_t idx = claim_from_args(e, args, &conn, &info, hs);
    Flow *f;
    if (idx < 0) return NULL;
    f = &e->flows[idx];
    for (d = 0; d < 2; d++) {
        Half *h = &f->h[d];
        PyObject *acked, *edge, *last_end;
        unsigned long base;
        long long ref, next, wsize, keep, rlen, rheld, np, nb, pfirst, pend;
        int syn, shift;
        if (!PyArg_ParseTuple(hs[d], "kLLOOLOpLLLiLLLL", &base, &ref, &next, &acked, &edge,
                              &wsize, &last_end, &syn, &keep, &rlen, &rheld, &shift, &np, &nb,
                              &pfirst, &pend))
            return NULL;
        h->npieces = np;
        h->buffered = nb;
        h->p_first = pfirst;
        h->p_end = pend;
        h->base = (uint32_t)base;
        h->ref_off = ref;
        h->next_off = next;
        h->win_size = wsize;
        h->syn_seen = syn;
        h->keep = keep;
        h->rlen = rlen;
        h->rheld = rheld;
        h->shift = shift;
        if (opt_i64(acked, &h->acked_off, &h->has_acked) < 0 ||
            opt_i64(edge, &h->win_edge, &h->has_edge) < 0)
            return NULL;
        {
            int64_t le;
            if (opt_i64(last_end, &le, &h->has_last_end) < 0) return NULL;
            h->last_end = (uint32_t)le;
        }
    }
    link_flow(e, idx, conn, info);
    Py_RETURN_NONE;
}

/* register_light(v6, client, cport, server, sport, flow_id, conn, info, ts_last,
 *                frame_last, idle_timeout, half_c2s, half_s2c): a flow another process
 * reassembles (FlowTable(owns=...) keeps TcpHalfTracker directions for it), open, both
 * directions' trackers with a sequence base and no conflicting ISN pending; half =
 * (last_end|None, syn_seen, had_data).  Its ACK packets are taken as the bookkeeping
 * FlowTable.tcp does for it (counters, activity, last_end; data only on a direction
 * that had data, where TcpHalfTracker.on_segment changes nothing), so a worker of
 * ``--workers N`` skips the flows it does not own without Python work per packet.
 * Replaces any registration under the same key. */
static PyObject *engine_register_light(Engine *e, PyObject *args) {
    int d;
    PyObject *conn, *info, *hs[2];
    int32_t idx = claim_from_args(e, args, &conn, &info, hs);
    Flow *f;
    if (idx < 0) return NULL;
    f = &e->flows[idx];
    f->light = 1;
    for (d = 0; d < 2; d++) {
        Half *h = &f->h[d];
        PyObject *last_end;
        int64_t le;
        if (!PyArg_ParseTuple(hs[d], "Opp", &last_end, &h->syn_seen, &h->data_ok) ||
            opt_i64(last_end, &le, &h->has_last_end) < 0)
            return NULL; /* the slot stays free (link_flow takes it) */
        h->last_end = (uint32_t)le;
    }
    link_flow(e, idx, conn, info);
    Py_RETURN_NONE;
}

/* unregister(client, cport, server, sport, flow_id): drop that flow's registration
 * (no-op if another flow or none is registered under the key). */
static PyObject *engine_unregister(Engine *e, PyObject *args) {
    Py_buffer a, b;
    int cport, sport;
    long long fid;
    uint8_t k[37];
    int32_t idx;
    if (!PyArg_ParseTuple(args, "y*iy*iL", &a, &cport, &b, &sport, &fid)) return NULL;
    if ((a.len != 4 && a.len != 16) || b.len != a.len) {
        PyBuffer_Release(&a);
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "bad address length");
        return NULL;
    }
    make_key(k, a.len == 16, a.buf, b.buf, (uint16_t)cport, (uint16_t)sport);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    idx = find(e, k);
    if (idx >= 0 && e->flows[idx].flow_id == fid) {
        if (e->flows[idx].last_ord >= 0) {
            PyErr_SetString(PyExc_RuntimeError, "unregister of a flow not synced");
            return NULL;
        }
        unlink_flow(e, idx);
    }
    Py_RETURN_NONE;
}

/* registered() -> [(flow_id, conn)] of every registered flow. */
static PyObject *engine_registered(Engine *e, PyObject *unused) {
    PyObject *out = PyList_New(0), *t;
    int32_t i;
    if (out == NULL) return NULL;
    for (i = 0; i < e->cap; i++) {
        if (!e->flows[i].used) continue;
        t = Py_BuildValue("(LO)", (long long)e->flows[i].flow_id, e->flows[i].conn);
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
    }
    return out;
}

/* clock(now_ns, last_sweep_ns|None, sweep_ns, linktype|None, headroom): the reference's
 * clock, current link type and memory budget room, after a frame it handled. */
static PyObject *engine_clock(Engine *e, PyObject *args) {
    long long now, sweep;
    PyObject *last, *lt;
    int64_t v;
    long long headroom;
    if (!PyArg_ParseTuple(args, "LOLOL", &now, &last, &sweep, &lt, &headroom)) return NULL;
    e->headroom = headroom;
    e->now_ns = now;
    e->sweep_ns = sweep;
    if (opt_i64(last, &v, &e->has_sweep) < 0) return NULL;
    e->last_sweep_ns = v;
    if (lt == Py_None) e->lt_cur = -1;
    else {
        e->lt_cur = (int)PyLong_AsLong(lt);
        if (e->lt_cur == -1 && PyErr_Occurred()) return NULL;
    }
    Py_RETURN_NONE;
}

/* Whether a light flow was ended by the reference (FlowInfo.close_reason set: evicted,
 * replaced by port reuse, ...): 1, 0, or -1 with an exception.  An owned flow's end
 * emits an event, which unregisters it (reassembly.native); a light flow's emits none. */
static int ended(Flow *f) {
    static PyObject *name = NULL;
    PyObject *v;
    int gone;
    if (name == NULL && (name = PyUnicode_InternFromString("close_reason")) == NULL) return -1;
    v = PyObject_GetAttr(f->info, name);
    if (v == NULL) return -1;
    gone = PyObject_IsTrue(v);
    Py_DECREF(v);
    return gone;
}

/* A taken packet's effects on the clock, the counters and its flow's activity. */
static inline void took(Engine *e, Flow *f, int32_t idx, const Rec *r, int v6) {
    if (r->ts_ns > e->now_ns) e->now_ns = r->ts_ns;
    e->taken++;
    if (v6) e->taken_v6++;
    else e->taken_v4++;
    if (r->ts_ns > f->ts_last) f->ts_last = r->ts_ns;
    f->frame_last = r->number;
    if (f->last_ord < 0) e->dirty[e->ndirty++] = idx;
    f->last_ord = e->taken;
}

/* An effect with no bytes (FX_WINDOW, FX_RELEASE) of the record r on a flow direction
 * (the caller made room for it). */
static inline void fx(Engine *e, int kind, int32_t flow, int dir, int64_t held, const Rec *r) {
    Piece *pc = &e->pieces[e->npieces++];
    pc->kind = kind;
    pc->flow = flow;
    pc->dir = dir;
    pc->data = NULL;
    pc->off = 0;
    pc->ts = r->ts_ns;
    pc->frame = r->number;
    pc->held = held;
}

/* What TcpHalfStream.place does with dlen bytes at off ahead of the next byte due (a
 * capture that lost a packet: each segment after the hole is out of order until the
 * receiver's ACK proves the hole): appended to the reorder buffer when nothing but that
 * can follow -- it starts past the delivered bytes and at or past the last piece (no
 * overlap, no drain), is not out of window (_far_beyond), stays within the buffer's
 * limits (no _enforce_limits anomaly) and its budget charge fits in the room (no
 * reclaim).  Returns the buffer's charge after it (_hold_budget), or -1: the reference
 * places it. */
static int64_t piece_charge(const Engine *e, const Half *h, int64_t off, uint32_t dlen) {
    int64_t sent_end = h->npieces ? h->p_end : h->next_off, slack, nb, np, old;
    if (!e->max_psegs || off <= h->next_off || off < sent_end) return -1;
    if (h->has_edge) {
        slack = h->win_size > e->oow_slack ? h->win_size : e->oow_slack;
        if (off > h->win_edge + slack && off > sent_end + slack) return -1;
    }
    nb = h->buffered + dlen;
    np = h->npieces + 1;
    if (nb > e->max_pbytes || np > e->max_psegs) return -1;
    old = h->npieces ? h->buffered + h->npieces * e->piece_overhead : 0;
    if (nb + np * e->piece_overhead - old > e->headroom) return -1;
    return nb + np * e->piece_overhead;
}

/* Take one fast TCP record if the reference would only do bookkeeping and at most one
 * in-order delivery, or one append to a reorder buffer (piece_charge), for it; 0 if
 * not (the reference handles the frame). */
static int take(Engine *e, const uint8_t *d, Py_ssize_t body, const Rec *r) {
    uint8_t k[37];
    const uint8_t *ip = d + body + r->ip;
    const uint8_t *src = ip + (r->ipver == 4 ? 12 : 8);
    const uint8_t *dst = src + (r->ipver == 4 ? 4 : 16);
    int v6 = r->ipver == 6, dir;
    int32_t idx;
    Flow *f;
    Half *mine, *peer;
    uint32_t dlen = r->l4len - r->hlen;
    int64_t off = 0, aoff, wb, newlen = 0, grown = 0, pheld = -1, pnewlen = 0, pgrown = 0;
    PyObject *pdata = NULL;
    int drain = 0;
    if ((r->tflags & (F_SYN | F_FIN | F_RST | F_ACK)) != F_ACK) return 0;
    make_key(k, v6, src, dst, r->sport, r->dport);
    idx = find(e, k);
    dir = 0;
    if (idx < 0) {
        make_key(k, v6, dst, src, r->dport, r->sport);
        idx = find(e, k);
        if (idx < 0) return 0;
        dir = 1;
    }
    f = &e->flows[idx];
    if (r->ts_ns - f->ts_last > f->idle_timeout) return 0; /* stale: the reference decides */
    mine = &f->h[dir];
    peer = &f->h[1 - dir];
    if (f->light) {
        int gone = ended(f);
        if (gone) { /* its end emitted nothing that would have unregistered it */
            if (gone > 0 && f->last_ord < 0) unlink_flow(e, idx);
            return gone < 0 ? -1 : 0;
        }
        if (dlen && !mine->data_ok) return 0; /* on_segment may set had_data */
        took(e, f, idx, r, v6);
        mine->d_packets++;
        if (dlen) {
            mine->d_bytes += dlen;
            if (!mine->syn_seen) mine->mid = 1;
        }
        mine->last_end = r->seq + dlen;
        mine->has_last_end = 1;
        return 1;
    }
    aoff = seq_off(peer, r->ack);
    if (peer->npieces && aoff >= peer->p_first) {
        /* an ACK at or past the peer's first buffered piece proves the hole before it:
         * on_ack makes it a gap ("acked-unseen"), forgets the overlap-check window and
         * delivers the pieces that now follow.  Taken when the C core took every piece
         * itself and they adjoin (all of them are delivered), the packet carries no
         * data, and the new window's charge fits in the room; else the reference does */
        if (dlen || !peer->contig || peer->nhp != peer->npieces) return 0;
        if (peer->keep) {
            pnewlen = peer->buffered < peer->keep ? peer->buffered : peer->keep;
            for (pgrown = 256; pgrown < pnewlen; pgrown <<= 1) {}
            if (pgrown - peer->rheld > e->headroom) return 0;
        }
        while (e->nsegs + peer->npieces + 1 > e->segcap) {
            Py_ssize_t ncap = e->segcap ? e->segcap * 2 : 1024;
            Seg *ns = PyMem_Realloc(e->segs, sizeof(Seg) * (size_t)ncap);
            if (ns == NULL) return -1;
            e->segs = ns;
            e->segcap = ncap;
        }
        drain = 1;
    }
    while (e->npieces + 3 > e->piececap) { /* (a drain's three, or a piece or a window) */
        Py_ssize_t ncap = e->piececap ? e->piececap * 2 : 64;
        Piece *np = PyMem_Realloc(e->pieces, sizeof(Piece) * (size_t)ncap);
        if (np == NULL) return -1;
        e->pieces = np;
        e->piececap = ncap;
    }
    if (dlen && (seq_off(mine, r->seq) != mine->next_off || mine->npieces)) {
        off = seq_off(mine, r->seq);
        pheld = piece_charge(e, mine, off, dlen);
        if (pheld < 0) return 0;
        if (mine->nhp == mine->hpcap) {
            int64_t ncap = mine->hpcap ? mine->hpcap * 2 : 8;
            struct HPiece *nh = PyMem_Realloc(mine->hp, sizeof(struct HPiece) * (size_t)ncap);
            if (nh == NULL) return -1;
            mine->hp = nh;
            mine->hpcap = ncap;
        }
        pdata = PyBytes_FromStringAndSize((const char *)d + body + r->l4 + r->hlen, dlen);
        if (pdata == NULL) return -1;
    } else if (dlen) {
        off = seq_off(mine, r->seq);
        if (mine->keep) {
            newlen = mine->rlen + dlen;
            if (newlen > mine->keep) newlen = mine->keep;
            if (newlen > mine->rheld) {
                /* the window grows: TcpHalfStream._hold_window's charge (powers of two
                 * from 256), taken only while the budget has room for it, so the
                 * reference would not have reclaimed anything */
                for (grown = 256; grown < newlen; grown <<= 1) {}
                if (grown - mine->rheld > e->headroom) return 0;
            }
        }
    }
    if (dlen && pdata == NULL && e->nsegs == e->segcap) {
        Py_ssize_t ncap = e->segcap ? e->segcap * 2 : 1024;
        Seg *ns = PyMem_Realloc(e->segs, sizeof(Seg) * (size_t)ncap);
        if (ns == NULL) return -1;
        e->segs = ns;
        e->segcap = ncap;
    }
    /* taken: the reference's effects, in its order */
    took(e, f, idx, r, v6);
    mine->d_packets++;
    if (!peer->has_acked || aoff > peer->acked_off) {
        peer->acked_off = aoff;
        peer->has_acked = 1;
    }
    wb = (int64_t)r->window << mine->shift;
    if (!peer->has_edge || aoff + wb > peer->win_edge) {
        peer->win_edge = aoff + wb;
        peer->has_edge = 1;
    }
    peer->win_size = wb;
    if (drain) { /* the gap, then the pieces as in-order data (TcpHalfStream._flush_hole) */
        Seg *g = &e->segs[e->nsegs++];
        Piece *pc = &e->pieces[e->npieces++];
        int64_t kk, charge = peer->buffered + peer->npieces * e->piece_overhead;
        g->flow = pc->flow = idx;
        g->dir = (uint8_t)(1 - dir);
        pc->dir = 1 - dir;
        g->gap = 1;
        g->body = (Py_ssize_t)(peer->p_first - peer->next_off);
        g->len = 0;
        g->off = pc->off = peer->next_off;
        g->ts = pc->ts = r->ts_ns;
        g->frame = pc->frame = r->number;
        g->obj = pc->data = NULL;
        pc->kind = FX_DRAIN;
        pc->held = peer->p_first - peer->next_off;
        for (kk = 0; kk < peer->nhp; kk++) {
            struct HPiece *h = &peer->hp[kk];
            Seg *q = &e->segs[e->nsegs++];
            q->flow = idx;
            q->dir = (uint8_t)(1 - dir);
            q->gap = 0;
            q->body = 0;
            q->len = (uint32_t)PyBytes_GET_SIZE(h->obj);
            q->off = h->off;
            q->ts = h->ts;
            q->frame = h->frame;
            q->obj = h->obj; /* (the segment owns it now) */
            h->obj = NULL;
        }
        peer->nhp = 0;
        peer->next_off = peer->p_end;
        peer->d_drained += peer->buffered;
        e->room -= peer->buffered;
        peer->npieces = peer->buffered = peer->p_first = peer->p_end = 0;
        peer->contig = 0;
        peer->rlen = pnewlen;
        if (peer->keep) { /* the window after the gap (TcpHalfStream._hold_window) */
            fx(e, FX_WINDOW, idx, 1 - dir, pgrown, r);
            e->headroom -= pgrown - peer->rheld;
            e->room -= pgrown - peer->rheld;
            peer->rheld = pgrown;
        }
        fx(e, FX_RELEASE, idx, 1 - dir, 0, r);
        e->headroom += charge; /* what the buffer held, given back (_hold_budget) */
    }
    if (pdata != NULL) { /* into the reorder buffer */
        Piece *pc = &e->pieces[e->npieces++];
        int64_t inc = pheld - (mine->npieces ? mine->buffered +
                                                   mine->npieces * e->piece_overhead : 0);
        if (!mine->syn_seen) mine->mid = 1;
        pc->kind = FX_PIECE;
        pc->flow = idx;
        pc->dir = dir;
        pc->data = pdata;
        pc->off = off;
        pc->ts = r->ts_ns;
        pc->frame = r->number;
        pc->held = pheld;
        Py_INCREF(pdata);
        mine->hp[mine->nhp].obj = pdata;
        mine->hp[mine->nhp].off = off;
        mine->hp[mine->nhp].ts = r->ts_ns;
        mine->hp[mine->nhp].frame = r->number;
        mine->nhp++;
        mine->contig = mine->npieces ? mine->contig && off == mine->p_end : 1;
        if (!mine->npieces) mine->p_first = off;
        mine->npieces++;
        mine->buffered += dlen;
        mine->p_end = off + dlen;
        mine->ref_off = off + dlen;
        mine->d_pbytes += dlen;
        e->headroom -= inc;
        e->room -= inc;
    } else if (dlen) {
        Seg *s = &e->segs[e->nsegs++];
        if (!mine->syn_seen) mine->mid = 1;
        s->flow = idx;
        s->dir = (uint8_t)dir;
        s->gap = 0;
        s->obj = NULL;
        s->body = body + r->l4 + r->hlen;
        s->len = dlen;
        s->off = off;
        s->ts = r->ts_ns;
        s->frame = r->number;
        mine->ref_off = off + dlen;
        mine->next_off = off + dlen;
        mine->d_bytes += dlen;
        mine->rlen = newlen;
        e->room -= dlen;
        if (grown) {
            fx(e, FX_WINDOW, idx, dir, grown, r);
            e->headroom -= grown - mine->rheld;
            e->room -= grown - mine->rheld;
            mine->rheld = grown;
        }
    }
    mine->last_end = r->seq + dlen;
    mine->has_last_end = 1;
    return 1;
}

/* Would the reference's _tick for a frame at ts do more than move the clock? */
static inline int tick_special(Engine *e, int64_t ts) {
    int64_t now;
    if (!e->has_sweep) return 1;
    if (ts > e->now_ns && e->now_ns == 0) return 1; /* restamp of untimed flows */
    now = ts > e->now_ns ? ts : e->now_ns;
    return now - e->last_sweep_ns >= e->sweep_ns;
}

/* Runs of taken payloads as (info, conn, direction, offset, data, segments) with
 * segments the packed int64 (end offset, ts_ns, frame) of each.  A run joins payloads
 * of one flow direction that are adjacent in the reference's event order, or
 * (per_flow) adjacent in their own flow's event order (a run then ends where the
 * flow's other direction sends), and is placed where its *last* segment was: each
 * flow's events keep their order, and the flows whose last segments come later in the
 * stretch are fed later, as in the reference (so the memory budget's holders, each
 * told its size at the end of every feed, end the stretch in the reference's order).
 * Sets e->mixed when the runs are not the reference's events in its order (some run
 * joined payloads with another flow's in between).  The segments are kept until the
 * next run() (regroup() builds them again). */
/* per_flow: segments in one run at most (a run is one bytes object: a stretch of one
 * bulk flow would otherwise be one object of many megabytes, which the allocator keeps
 * as heap once freed; 256 segments of 1,448 bytes are ~370 kB) */
#define MAX_RUN_SEGS 256

static int movable(Flow *f, int dir, PyObject *keys) {
    PyObject *key;
    int got;
    if (keys == NULL) return 1;
    if (f->mov[dir] >= 0) return f->mov[dir];
    key = PyLong_FromLongLong((long long)(f->flow_id << 1 | dir));
    if (key == NULL) return -1;
    got = PySet_Contains(keys, key);
    Py_DECREF(key);
    if (got < 0) return -1;
    f->mov[dir] = (int8_t)got;
    return got;
}

static PyObject *build_runs(Engine *e, const uint8_t *d, int per_flow, PyObject *keys) {
    PyObject *out = PyList_New(0);
    Py_ssize_t i, nruns = 0, n = e->nsegs;
    int32_t last_fixed = -1; /* per_flow: the run of the latest fixed segment */
    int32_t *run_of = NULL, *first = NULL, *count = NULL, *order = NULL, *last = NULL;
    Py_ssize_t *fill = NULL;
    e->mixed = 0;
    if (out == NULL) return NULL;
    if (n == 0) return out;
    run_of = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    first = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    count = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    order = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    last = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    fill = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
    if (!run_of || !first || !count || !order || !last || !fill) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < n; i++) {
        Flow *f = &e->flows[e->segs[i].flow];
        f->cur_run = -1;
        f->mov[0] = f->mov[1] = -1;
    }
    for (i = 0; i < n; i++) { /* which run each segment joins */
        Seg *s = &e->segs[i];
        Flow *f = &e->flows[s->flow];
        int32_t r;
        if (per_flow) {
            int mov = movable(f, s->dir, keys);
            if (mov < 0) goto fail;
            r = (f->cur_run >= 0 && f->cur_dir == s->dir && count[f->cur_run] < MAX_RUN_SEGS &&
                 !s->gap) ? f->cur_run : -1;
            if (!mov) {
                if (r != last_fixed) r = -1; /* a fixed run ends at another fixed one */
                last_fixed = r >= 0 ? r : (int32_t)nruns;
            }
            if (r >= 0 && run_of[i - 1] != r) e->mixed = 1;
        } else {
            r = (nruns > 0 && e->segs[first[nruns - 1]].flow == s->flow &&
                 e->segs[first[nruns - 1]].dir == s->dir && !s->gap &&
                 !e->segs[first[nruns - 1]].gap) ? (int32_t)(nruns - 1) : -1;
        }
        if (r < 0) {
            r = (int32_t)nruns++;
            first[r] = (int32_t)i;
            count[r] = 0;
            f->cur_run = r;
            f->cur_dir = s->dir;
        }
        run_of[i] = r;
        last[r] = (int32_t)i;
        count[r]++;
        if (s->gap) f->cur_run = -1; /* a gap is a run of its own: the flow's next starts anew */
    }
    { /* the segments grouped by run, each run's in their order */
        Py_ssize_t at = 0;
        for (i = 0; i < nruns; i++) {
            fill[i] = at;
            at += count[i];
        }
        for (i = 0; i < n; i++) order[fill[run_of[i]]++] = (int32_t)i;
        for (i = 0; i < nruns; i++) fill[i] -= count[i]; /* back to each run's start */
    }
    for (i = 0; i < n; i++) { /* runs in the order of their last segments */
        Py_ssize_t r = run_of[i], j, k = count[r], total = 0;
        Seg *s0;
        PyObject *data, *segs, *t;
        char *p;
        int64_t *q;
        if (last[r] != i) continue;
        s0 = &e->segs[first[r]];
        if (s0->gap) { /* (info, conn, direction, offset, None, packed (nbytes, ts, frame)) */
            int64_t g3[3];
            g3[0] = (int64_t)s0->body;
            g3[1] = s0->ts;
            g3[2] = s0->frame;
            t = Py_BuildValue("(OOiLOy#)", e->flows[s0->flow].info, e->flows[s0->flow].conn,
                              (int)s0->dir, (long long)s0->off, Py_None, (const char *)g3,
                              (Py_ssize_t)sizeof g3);
            if (t == NULL || PyList_Append(out, t) < 0) {
                Py_XDECREF(t);
                goto fail;
            }
            Py_DECREF(t);
            continue;
        }
        for (j = fill[r]; j < fill[r] + k; j++) total += e->segs[order[j]].len;
        data = PyBytes_FromStringAndSize(NULL, total);
        segs = PyBytes_FromStringAndSize(NULL, k * 3 * (Py_ssize_t)sizeof(int64_t));
        if (data == NULL || segs == NULL) {
            Py_XDECREF(data);
            Py_XDECREF(segs);
            goto fail;
        }
        p = PyBytes_AS_STRING(data);
        q = (int64_t *)PyBytes_AS_STRING(segs);
        for (j = fill[r]; j < fill[r] + k; j++) {
            Seg *g = &e->segs[order[j]];
            memcpy(p, g->obj != NULL ? (const uint8_t *)PyBytes_AS_STRING(g->obj) : d + g->body,
                   g->len);
            p += g->len;
            *q++ = g->off + g->len;
            *q++ = g->ts;
            *q++ = g->frame;
        }
        t = Py_BuildValue("(OOiLNN)", e->flows[s0->flow].info, e->flows[s0->flow].conn,
                          (int)s0->dir, (long long)s0->off, data, segs);
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    PyMem_Free(run_of);
    PyMem_Free(first);
    PyMem_Free(count);
    PyMem_Free(order);
    PyMem_Free(last);
    PyMem_Free(fill);
    return out;
fail:
    PyMem_Free(run_of);
    PyMem_Free(first);
    PyMem_Free(count);
    PyMem_Free(order);
    PyMem_Free(last);
    PyMem_Free(fill);
    Py_DECREF(out);
    return NULL;
}

/* run(batch, start, per_flow=False, movable=None) -> (index, runs): take records from
 * start until one the reference must handle (index: that record, or len(batch));
 * runs: see build_runs.  per_flow joins a flow direction's payloads across other
 * flows' only while the stretch's payloads and window charges fit in the budget's room
 * (headroom, as the caller last set it): then neither that order nor the reference's
 * can make the budget reclaim anything within the stretch; past it the stretch's runs
 * are those of the reference's order.  movable (a set of flow_id << 1 | direction, or
 * None: every one): the flow directions whose runs may move among other flows'; the
 * others' runs keep the reference's order among themselves (a fixed run ends where
 * another fixed flow direction's payload comes). */
static PyObject *engine_run(Engine *e, PyObject *args) {
    Batch *b;
    Py_ssize_t i;
    const uint8_t *d;
    int per_flow = 0;
    PyObject *keys = Py_None;
    if (!PyArg_ParseTuple(args, "O!n|pO", &BatchType, &b, &i, &per_flow, &keys)) return NULL;
    if (keys != Py_None && !PyAnySet_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "movable must be a set or None");
        return NULL;
    }
    d = (const uint8_t *)b->buf.buf;
    clear_segs(e);
    e->room = e->headroom;
    Py_INCREF(b);
    Py_XSETREF(e->batch, (PyObject *)b);
    {
        for (; i < b->n; i++) {
            const Rec *r = &b->recs[i];
            int got;
            if (r->kind != K_TCP || r->lt != e->lt_cur || tick_special(e, r->ts_ns)) break;
            got = take(e, d, r->body, r);
            if (got < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
            if (!got) break;
        }
    }
    {
        PyObject *runs = build_runs(e, d, per_flow && e->room >= 0,
                                    keys == Py_None ? NULL : keys);
        if (runs == NULL) return NULL;
        return Py_BuildValue("(nN)", i, runs);
    }
}

/* handshakes(batch, i, lead=0) -> [(src, dst, transport, ts_ns, number, vlans)]: the
 * records from i on, up to the first that is not one, that the reference must handle
 * whatever the flows' state (SYN, FIN or RST set, or no ACK: take() never takes them),
 * the record at i whatever its flags when lead is set (the caller's run() stopped at it:
 * the reference handles it anyway, a short flow's third handshake ACK, its first data,
 * its last ACK, so it too skips the Python decode), but whose decode
 * the C walk already did as the reference would (a fast TCP record of the current link
 * type), and whose tick would only move the clock (tick_special, the clock moving with
 * them).  transport: the TCP header and data, as NetworkDecoder.decode gives them.  The
 * caller feeds them to the flow table itself (reassembly.native): a SYN flood's or a
 * scan's new flows skip the Python decode and the per-frame hand-back.  At most
 * MAX_HANDSHAKES a call: the list is held while the flow table takes them (a batch's
 * worth of rows held ~5 MB outside the memory budget). */
#define MAX_HANDSHAKES 256
static PyObject *engine_handshakes(Engine *e, PyObject *args) {
    Batch *b;
    Py_ssize_t i;
    const uint8_t *d;
    PyObject *out;
    int64_t now = e->now_ns;
    int lead = 0;
    if (!PyArg_ParseTuple(args, "O!n|p", &BatchType, &b, &i, &lead)) return NULL;
    if ((out = PyList_New(0)) == NULL) return NULL;
    d = (const uint8_t *)b->buf.buf;
    for (; i < b->n && PyList_GET_SIZE(out) < MAX_HANDSHAKES; i++, lead = 0) {
        const Rec *r = &b->recs[i];
        const uint8_t *src;
        Py_ssize_t alen;
        PyObject *vlans, *t;
        int v, rc;
        if (r->kind != K_TCP || r->lt != e->lt_cur ||
            (!lead && (r->tflags & (F_SYN | F_FIN | F_RST | F_ACK)) == F_ACK))
            break;
        /* tick_special with the clock these records move */
        if (!e->has_sweep || (r->ts_ns > now && now == 0)) break;
        if (r->ts_ns > now) now = r->ts_ns;
        if (now - e->last_sweep_ns >= e->sweep_ns) break;
        if ((vlans = PyTuple_New(r->nvlan)) == NULL) goto fail;
        for (v = 0; v < r->nvlan; v++) {
            PyObject *id = PyLong_FromLong(r->vlan[v]);
            if (id == NULL) {
                Py_DECREF(vlans);
                goto fail;
            }
            PyTuple_SET_ITEM(vlans, v, id);
        }
        alen = r->ipver == 4 ? 4 : 16;
        src = d + r->body + r->ip + (r->ipver == 4 ? 12 : 8);
        t = Py_BuildValue("(y#y#y#LLN)", src, alen, src + alen, alen,
                          d + r->body + r->l4, (Py_ssize_t)r->l4len, (long long)r->ts_ns,
                          (long long)r->number, vlans);
        if (t == NULL) goto fail;
        rc = PyList_Append(out, t);
        Py_DECREF(t);
        if (rc < 0) goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* regroup() -> runs: the last run()'s payloads as the reference's events in its order
 * (what run() gives without per_flow), for a caller that may not take another order. */
static PyObject *engine_regroup(Engine *e, PyObject *unused) {
    if (e->batch == NULL) return PyList_New(0);
    return build_runs(e, (const uint8_t *)((Batch *)e->batch)->buf.buf, 0, NULL);
}

/* headroom(n): what the run's memory budget can still grant before it reclaims (the
 * caller's fresh figure; clock() sets it too). */
static PyObject *engine_headroom(Engine *e, PyObject *arg) {
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    e->headroom = v;
    Py_RETURN_NONE;
}

static PyObject *engine_get_mixed(Engine *e, void *c) { return PyBool_FromLong(e->mixed); }

/* reorder(max_bytes, max_segments, piece_overhead, oow_slack): the reference's limits
 * on a direction's reorder buffer (Limits.max_buffered_bytes/_segments,
 * tcp.PIECE_OVERHEAD_BYTES, tcp.OOW_SLACK_BYTES), under which segments ahead of a hole
 * are taken into it (piece_charge); until it is called none is. */
static PyObject *engine_reorder(Engine *e, PyObject *args) {
    long long nb, ns, over, slack;
    if (!PyArg_ParseTuple(args, "LLLL", &nb, &ns, &over, &slack)) return NULL;
    if (nb < 0 || ns < 0 || over < 0 || slack < 0) {
        PyErr_SetString(PyExc_ValueError, "reorder limits must not be negative");
        return NULL;
    }
    e->max_pbytes = nb;
    e->max_psegs = ns;
    e->piece_overhead = over;
    e->oow_slack = slack;
    Py_RETURN_NONE;
}

/* sync() -> (frames, ipv4, ipv6, now_ns, [(conn, info, ts_last, frame_last, ordinal,
 * half_c2s, half_s2c)] in the order of their last taken packet, [(kind, conn, direction,
 * offset, data|None, ts_ns, frame, held)] the effects on buffers, windows and the
 * budget in order (FX_*: the windows' charges, the segments taken into reorder buffers,
 * the buffers drained)); half =
 * (packets, bytes delivered in order, mid, next_off, ref_off, last_end|None,
 * acked_off|None, win_edge|None, win_size, recent_len, bytes buffered, bytes delivered
 * from the buffer).  Resets what was taken. */
static PyObject *opt_obj(int has, int64_t v) {
    if (!has) Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

static Engine *sort_ctx;
static int cmp_ord(const void *a, const void *b) {
    int64_t x = sort_ctx->flows[*(const int32_t *)a].last_ord;
    int64_t y = sort_ctx->flows[*(const int32_t *)b].last_ord;
    return (x > y) - (x < y);
}

static PyObject *engine_sync(Engine *e, PyObject *unused) {
    PyObject *list = PyList_New(e->ndirty), *res, *pieces;
    int32_t i;
    int d;
    if (list == NULL) return NULL;
    sort_ctx = e;
    qsort(e->dirty, (size_t)e->ndirty, sizeof(int32_t), cmp_ord);
    for (i = 0; i < e->ndirty; i++) {
        Flow *f = &e->flows[e->dirty[i]];
        PyObject *h[2], *t;
        for (d = 0; d < 2; d++) {
            Half *x = &f->h[d];
            h[d] = Py_BuildValue("(LLiLLNNNLLLL)", (long long)x->d_packets,
                                 (long long)x->d_bytes, x->mid, (long long)x->next_off,
                                 (long long)x->ref_off, opt_obj(x->has_last_end, x->last_end),
                                 opt_obj(x->has_acked, x->acked_off),
                                 opt_obj(x->has_edge, x->win_edge), (long long)x->win_size,
                                 (long long)x->rlen, (long long)x->d_pbytes,
                                 (long long)x->d_drained);
            x->d_packets = x->d_bytes = x->d_pbytes = x->d_drained = 0;
            x->mid = 0;
        }
        t = Py_BuildValue("(OOLLLNN)", f->conn, f->info, (long long)f->ts_last,
                          (long long)f->frame_last, (long long)f->last_ord, h[0], h[1]);
        if (t == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, t);
        f->last_ord = -1;
    }
    {
        Py_ssize_t j;
        pieces = PyList_New(e->npieces);
        if (pieces == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        for (j = 0; j < e->npieces; j++) {
            Piece *pc = &e->pieces[j];
            PyObject *t = Py_BuildValue("(iOiLNLLL)", pc->kind, e->flows[pc->flow].conn,
                                        pc->dir, (long long)pc->off,
                                        pc->data != NULL ? pc->data : Py_NewRef(Py_None),
                                        (long long)pc->ts,
                                        (long long)pc->frame, (long long)pc->held);
            pc->data = NULL; /* (the tuple holds it now, or it was released) */
            if (t == NULL) {
                Py_ssize_t k;
                for (k = j + 1; k < e->npieces; k++) Py_CLEAR(e->pieces[k].data);
                e->npieces = 0;
                Py_DECREF(pieces);
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(pieces, j, t);
        }
        e->npieces = 0;
        res = Py_BuildValue("(LLLLNN)", (long long)e->taken, (long long)e->taken_v4,
                            (long long)e->taken_v6, (long long)e->now_ns, list, pieces);
    }
    e->ndirty = 0;
    e->taken = e->taken_v4 = e->taken_v6 = 0;
    return res;
}

static Py_ssize_t engine_len(Engine *e) { return e->nflows; }

static PyMethodDef engine_methods[] = {
    {"register", (PyCFunction)engine_register, METH_VARARGS,
     "register(v6, client, cport, server, sport, flow_id, conn, info, ts_last, frame_last, "
     "idle_timeout, half_c2s, half_s2c)"},
    {"register_light", (PyCFunction)engine_register_light, METH_VARARGS,
     "register_light(v6, client, cport, server, sport, flow_id, conn, info, ts_last, "
     "frame_last, idle_timeout, half_c2s, half_s2c): a flow another process reassembles"},
    {"unregister", (PyCFunction)engine_unregister, METH_VARARGS,
     "unregister(client, cport, server, sport, flow_id)"},
    {"registered", (PyCFunction)engine_registered, METH_NOARGS,
     "registered() -> [(flow_id, conn)]"},
    {"clock", (PyCFunction)engine_clock, METH_VARARGS,
     "clock(now_ns, last_sweep_ns, sweep_ns, linktype, headroom): the reference's clock"},
    {"run", (PyCFunction)engine_run, METH_VARARGS,
     "run(batch, start, per_flow=False, movable=None) -> (index, runs)"},
    {"handshakes", (PyCFunction)engine_handshakes, METH_VARARGS,
     "handshakes(batch, i, lead=False) -> [(src, dst, transport, ts_ns, number, vlans)] of the records "
     "from i on the reference handles whatever the flows' state, decoded"},
    {"regroup", (PyCFunction)engine_regroup, METH_NOARGS,
     "regroup() -> runs: the last run's payloads in the reference's order"},
    {"reorder", (PyCFunction)engine_reorder, METH_VARARGS,
     "reorder(max_bytes, max_segments, piece_overhead, oow_slack): segments ahead of a "
     "hole are taken into reorder buffers within these limits"},
    {"headroom", (PyCFunction)engine_headroom, METH_O,
     "headroom(n): the memory budget's room, as the caller sees it now"},
    {"sync", (PyCFunction)engine_sync, METH_NOARGS,
     "sync() -> (frames, ipv4, ipv6, now_ns, flows, effects): what was taken since the "
     "last sync"},
    {NULL}};

static PySequenceMethods engine_seq = {.sq_length = (lenfunc)engine_len};

static PyGetSetDef engine_getset[] = {
    {"mixed", (getter)engine_get_mixed, NULL,
     "whether the last run()'s runs are in another order than the reference's events", NULL},
    {NULL}};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "reassembly._engine.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Registered TCP flows and the packets taken for them (module docstring).",
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
    .tp_as_sequence = &engine_seq,
    .tp_new = engine_new,
};

/* ------------------------------------------------------------------ flow sizes */

/* flow_bytes(batch) -> [(key, bytes)]: the captured bytes of the batch's TCP/UDP
 * records per flow 4-tuple, in order of each one's first record; key = protocol byte
 * + the two (address, port) ends in a fixed order (either direction gives the same
 * key).  A pre-pass of ``msgcap dissect --workers N`` (reassembly.flowplan) sums them
 * over the capture to give each worker a share of the bytes. */
typedef struct {
    uint8_t key[38];
    int64_t bytes;
} Sized;

static PyObject *py_flow_bytes(PyObject *self, PyObject *arg) {
    Batch *b;
    const uint8_t *d;
    Sized *ents = NULL;
    int32_t *slots = NULL, nslots = 16, nents = 0, i;
    PyObject *out = NULL;
    Py_ssize_t j;
    if (!PyObject_TypeCheck(arg, &BatchType)) {
        PyErr_SetString(PyExc_TypeError, "flow_bytes() takes a Batch");
        return NULL;
    }
    b = (Batch *)arg;
    d = (const uint8_t *)b->buf.buf;
    while (nslots < 2 * b->n) nslots <<= 1;
    ents = PyMem_Malloc(sizeof(Sized) * (size_t)(b->n ? b->n : 1));
    slots = PyMem_Malloc(sizeof(int32_t) * (size_t)nslots);
    if (ents == NULL || slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < nslots; i++) slots[i] = -1;
    for (j = 0; j < b->n; j++) {
        const Rec *r = &b->recs[j];
        const uint8_t *ip, *src, *dst;
        uint8_t k[38];
        int v6, n, c;
        uint32_t h;
        if (r->kind != K_TCP && r->kind != K_UDP) continue;
        ip = d + r->body + r->ip;
        v6 = r->ipver == 6;
        n = v6 ? 16 : 4;
        src = ip + (v6 ? 8 : 12);
        dst = src + n;
        c = memcmp(src, dst, (size_t)n);
        k[0] = r->kind;
        if (c < 0 || (c == 0 && r->sport <= r->dport))
            make_key(k + 1, v6, src, dst, r->sport, r->dport);
        else
            make_key(k + 1, v6, dst, src, r->dport, r->sport);
        h = (key_hash(k + 1) ^ k[0]) & (uint32_t)(nslots - 1);
        while (slots[h] >= 0 && memcmp(ents[slots[h]].key, k, 38) != 0)
            h = (h + 1) & (uint32_t)(nslots - 1);
        if (slots[h] < 0) {
            slots[h] = nents;
            memcpy(ents[nents].key, k, 38);
            ents[nents++].bytes = 0;
        }
        ents[slots[h]].bytes += r->caplen;
    }
    out = PyList_New(nents);
    if (out == NULL) goto done;
    for (i = 0; i < nents; i++) {
        PyObject *t = Py_BuildValue("(y#L)", (const char *)ents[i].key, (Py_ssize_t)38,
                                    (long long)ents[i].bytes);
        if (t == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, t);
    }
done:
    PyMem_Free(ents);
    PyMem_Free(slots);
    return out;
}

/* ------------------------------------------------------------------ windows */

/* One flow direction's part of slide(): the half stream, its keep, and the data of its
 * runs from the last one back (reversed), as far as reaches into the last keep bytes. */
typedef struct {
    PyObject *half;  /* a TcpHalfStream (new reference), NULL: nothing to do */
    Py_ssize_t keep, size;
    PyObject *parts; /* list, reversed order */
    int done;
} Slide;

/* Apply one direction's slide: half.recent (a _Window, made if it is not one: the first
 * bytes, or the first after a gap) ends with the last keep bytes delivered. */
static int slide_apply(Slide *sl, PyObject *wtype) {
    PyObject *recent;
    Py_ssize_t np = PyList_GET_SIZE(sl->parts), i, keep = sl->keep, size = 0, rlen, pos;
    char *dst;
    if (np == 0) return 0;
    if ((recent = PyObject_GetAttrString(sl->half, "recent")) == NULL) return -1;
    if (!PyObject_TypeCheck(recent, (PyTypeObject *)wtype)) {
        PyObject *zero = PyLong_FromLong(0);
        int rc;
        Py_DECREF(recent);
        if (zero == NULL || (recent = PyObject_CallNoArgs(wtype)) == NULL) {
            Py_XDECREF(zero);
            return -1;
        }
        rc = PyObject_SetAttrString(sl->half, "recent", recent) < 0 ||
             PyObject_SetAttrString(recent, "half", sl->half) < 0 ||
             PyObject_SetAttrString(recent, "held", zero) < 0;
        Py_DECREF(zero);
        if (rc) {
            Py_DECREF(recent);
            return -1;
        }
    }
    for (i = 0; i < np; i++) size += PyBytes_GET_SIZE(PyList_GET_ITEM(sl->parts, i));
    rlen = PyByteArray_GET_SIZE(recent);
    if (size >= keep) { /* the window is the last keep bytes of the new ones */
        if (PyByteArray_Resize(recent, keep) < 0) goto fail;
        pos = keep; /* filled from the end, parts reversed: the last part first */
    } else {
        Py_ssize_t excess = rlen + size - keep;
        if (excess > 0) { /* (as del recent[:excess]: the bytearray only moves its start) */
            if (PySequence_DelSlice(recent, 0, excess) < 0) goto fail;
            rlen -= excess;
        }
        if (PyByteArray_Resize(recent, rlen + size) < 0) goto fail;
        pos = rlen + size;
    }
    dst = PyByteArray_AS_STRING(recent);
    for (i = 0; i < np && pos > 0; i++) {
        PyObject *part = PyList_GET_ITEM(sl->parts, i);
        Py_ssize_t len = PyBytes_GET_SIZE(part), take = len < pos ? len : pos;
        memcpy(dst + pos - take, PyBytes_AS_STRING(part) + len - take, (size_t)take);
        pos -= take;
    }
    Py_DECREF(recent);
    return 0;
fail:
    Py_DECREF(recent);
    return -1;
}

/* slide(runs, window_type): reassembly.native.NativeReassembler._slide_windows (its
 * reference, kept there) in C: each direction's overlap-check window ends with the
 * bytes its runs delivered after its last gap, once per direction and sync.  Why: a
 * stretch of many short flows has about one run per flow direction, and that loop cost
 * ~55 bytecodes a segment in Python.  The runs are read from the last one back, so a
 * direction's bytes stop being collected once they cover its keep. */
static PyObject *py_slide(PyObject *self, PyObject *args) {
    PyObject *runs, *wtype, *seen = NULL, *key = NULL;
    Slide *sl = NULL;
    Py_ssize_t n, i, nsl = 0;
    int ok = 0;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &runs, &PyType_Type, &wtype)) return NULL;
    n = PyList_GET_SIZE(runs);
    if (n == 0) Py_RETURN_NONE;
    if ((sl = PyMem_Calloc((size_t)n, sizeof(Slide))) == NULL) return PyErr_NoMemory();
    if ((seen = PyDict_New()) == NULL) goto done;
    for (i = n - 1; i >= 0; i--) {
        PyObject *run = PyList_GET_ITEM(runs, i), *conn, *dir, *data, *at;
        Slide *cur;
        if (!PyTuple_Check(run) || PyTuple_GET_SIZE(run) != 6) {
            PyErr_SetString(PyExc_TypeError, "slide: a run is a 6-tuple");
            goto done;
        }
        conn = PyTuple_GET_ITEM(run, 1);
        dir = PyTuple_GET_ITEM(run, 2);
        data = PyTuple_GET_ITEM(run, 4);
        if ((key = PyTuple_Pack(2, conn, dir)) == NULL) goto done;
        at = PyDict_GetItemWithError(seen, key);
        if (at == NULL) {
            PyObject *idx, *keep;
            long d;
            if (PyErr_Occurred()) goto done;
            cur = &sl[nsl];
            if ((idx = PyLong_FromSsize_t(nsl++)) == NULL) goto done;
            if (PyDict_SetItem(seen, key, idx) < 0) {
                Py_DECREF(idx);
                goto done;
            }
            Py_DECREF(idx);
            if ((d = PyLong_AsLong(dir)) == -1 && PyErr_Occurred()) goto done;
            if ((cur->half = PyObject_GetAttrString(conn, d ? "s2c" : "c2s")) == NULL) goto done;
            if ((keep = PyObject_GetAttrString(cur->half, "keep")) == NULL) goto done;
            cur->keep = PyLong_AsSsize_t(keep);
            Py_DECREF(keep);
            if (cur->keep == -1 && PyErr_Occurred()) goto done;
            if ((cur->parts = PyList_New(0)) == NULL) goto done;
            cur->done = cur->keep <= 0;
        } else {
            cur = &sl[PyLong_AsSsize_t(at)];
        }
        Py_CLEAR(key);
        if (cur->done) continue;
        if (data == Py_None) { /* a gap forgot the window: only the bytes after it count */
            cur->done = 1;
            continue;
        }
        if (!PyBytes_Check(data)) {
            PyErr_SetString(PyExc_TypeError, "slide: a run's data is bytes or None");
            goto done;
        }
        if (PyList_Append(cur->parts, data) < 0) goto done;
        cur->size += PyBytes_GET_SIZE(data);
        if (cur->size >= cur->keep) cur->done = 1;
    }
    /* in order of each direction's last run (the Python reference: of its first run;
     * the windows are distinct objects, so the order changes nothing) */
    for (i = 0; i < nsl; i++)
        if (sl[i].keep > 0 && slide_apply(&sl[i], wtype) < 0) goto done;
    ok = 1;
done:
    Py_XDECREF(key);
    Py_XDECREF(seen);
    for (i = 0; i < nsl; i++) {
        Py_XDECREF(sl[i].half);
        Py_XDECREF(sl[i].parts);
    }
    PyMem_Free(sl);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ write_back */

/* The attribute names write_back sets (interned once). */
enum {
    WB_TS_LAST, WB_FRAME_LAST, WB_FLOW_ID, WB_TICK, WB_OWNED, WB_C2S, WB_S2C, WB_PACKETS,
    WB_PAYLOAD, WB_STREAM, WB_NEXT_OFF, WB_REF_OFF, WB_STARTED, WB_HAD_DATA, WB_MID,
    WB_LAST_END, WB_ACKED, WB_EDGE, WB_WSIZE, WB_N
};
static const char *const wb_names[WB_N] = {
    "ts_last_ns", "frame_last", "flow_id", "tick", "owned", "c2s", "s2c", "packets",
    "payload_bytes", "stream_bytes", "next_off", "ref_off", "started", "had_data",
    "mid_stream", "last_end", "acked_off", "win_edge", "win_size"};
static PyObject *wb_str[WB_N];

/* obj.<name>[d] += v, as Python evaluates it (the attribute read once, item, add, store) */
static int wb_add_at(PyObject *obj, int name, PyObject *idx, PyObject *v) {
    PyObject *seq = PyObject_GetAttr(obj, wb_str[name]), *cur = NULL, *sum = NULL;
    int rc = -1;
    if (seq == NULL) return -1;
    if ((cur = PyObject_GetItem(seq, idx)) == NULL) goto done;
    if ((sum = PyNumber_InPlaceAdd(cur, v)) == NULL) goto done;
    rc = PyObject_SetItem(seq, idx, sum);
done:
    Py_XDECREF(sum);
    Py_XDECREF(cur);
    Py_DECREF(seq);
    return rc;
}

/* One owned flow direction's delta (Engine.sync's half tuple) into its TcpHalfStream. */
static int wb_half(PyObject *conn, PyObject *info, int d, PyObject *delta, PyObject *idx) {
    PyObject *half, *nbytes, *buffered, *drained, *sum;
    int rc = -1, moved;
    if (!PyTuple_Check(delta) || PyTuple_GET_SIZE(delta) != 12) {
        PyErr_SetString(PyExc_TypeError, "write_back: a direction's delta is a 12-tuple");
        return -1;
    }
    if ((half = PyObject_GetAttr(conn, wb_str[d ? WB_S2C : WB_C2S])) == NULL) return -1;
    if (wb_add_at(info, WB_PACKETS, idx, PyTuple_GET_ITEM(delta, 0)) < 0) goto done;
    nbytes = PyTuple_GET_ITEM(delta, 1);
    buffered = PyTuple_GET_ITEM(delta, 10);
    drained = PyTuple_GET_ITEM(delta, 11);
    if ((moved = PyObject_IsTrue(nbytes)) == 0 && (moved = PyObject_IsTrue(buffered)) == 0)
        moved = PyObject_IsTrue(drained);
    if (moved < 0) goto done;
    if (moved) {
        int mid;
        if ((sum = PyNumber_Add(nbytes, buffered)) == NULL) goto done;
        rc = wb_add_at(info, WB_PAYLOAD, idx, sum);
        Py_DECREF(sum);
        if (rc < 0) goto done;
        rc = -1;
        if ((sum = PyNumber_Add(nbytes, drained)) == NULL) goto done;
        rc = wb_add_at(info, WB_STREAM, idx, sum);
        Py_DECREF(sum);
        if (rc < 0) goto done;
        rc = -1;
        if (PyObject_SetAttr(half, wb_str[WB_NEXT_OFF], PyTuple_GET_ITEM(delta, 3)) < 0 ||
            PyObject_SetAttr(half, wb_str[WB_REF_OFF], PyTuple_GET_ITEM(delta, 4)) < 0 ||
            PyObject_SetAttr(half, wb_str[WB_STARTED], Py_True) < 0 ||
            PyObject_SetAttr(half, wb_str[WB_HAD_DATA], Py_True) < 0)
            goto done;
        if ((mid = PyObject_IsTrue(PyTuple_GET_ITEM(delta, 2))) < 0) goto done;
        if (mid) {
            PyObject *flags = PyObject_GetAttr(info, wb_str[WB_MID]);
            int bad = flags == NULL || PyObject_SetItem(flags, idx, Py_True) < 0;
            Py_XDECREF(flags);
            if (bad) goto done;
        }
    }
    if (PyObject_SetAttr(half, wb_str[WB_LAST_END], PyTuple_GET_ITEM(delta, 5)) < 0 ||
        PyObject_SetAttr(half, wb_str[WB_ACKED], PyTuple_GET_ITEM(delta, 6)) < 0 ||
        PyObject_SetAttr(half, wb_str[WB_EDGE], PyTuple_GET_ITEM(delta, 7)) < 0 ||
        PyObject_SetAttr(half, wb_str[WB_WSIZE], PyTuple_GET_ITEM(delta, 8)) < 0)
        goto done;
    rc = 0;
done:
    Py_DECREF(half);
    return rc;
}

/* write_back(flows, move_to_end, base) -> [(conn, info, half_c2s, half_s2c)] of the flows
 * not owned: reassembly.native.NativeReassembler._write_back (its Python loop stays the
 * definition) in C: per flow of Engine.sync's list, in order, its time and frame, its
 * place in the open flows (move_to_end(flow_id)) and tick (base + ordinal), and each
 * owned direction's counters and TcpHalfStream fields.  Why: ~190 bytecodes a flow and
 * sync in Python, most of a short flow's stretch. */
static PyObject *py_write_back(PyObject *self, PyObject *args) {
    PyObject *flows, *move, *base, *light, *idx[2] = {NULL, NULL};
    Py_ssize_t i, n;
    if (!PyArg_ParseTuple(args, "O!OO", &PyList_Type, &flows, &move, &base)) return NULL;
    for (i = 0; i < WB_N; i++)
        if (wb_str[i] == NULL && (wb_str[i] = PyUnicode_InternFromString(wb_names[i])) == NULL)
            return NULL;
    if ((light = PyList_New(0)) == NULL) return NULL;
    if ((idx[0] = PyLong_FromLong(0)) == NULL || (idx[1] = PyLong_FromLong(1)) == NULL)
        goto fail;
    n = PyList_GET_SIZE(flows);
    for (i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(flows, i), *conn, *info, *fid, *r, *tick, *owned;
        int own, d;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 7) {
            PyErr_SetString(PyExc_TypeError, "write_back: a flow is a 7-tuple");
            goto fail;
        }
        conn = PyTuple_GET_ITEM(t, 0);
        info = PyTuple_GET_ITEM(t, 1);
        if (PyObject_SetAttr(info, wb_str[WB_TS_LAST], PyTuple_GET_ITEM(t, 2)) < 0 ||
            PyObject_SetAttr(info, wb_str[WB_FRAME_LAST], PyTuple_GET_ITEM(t, 3)) < 0)
            goto fail;
        if ((fid = PyObject_GetAttr(info, wb_str[WB_FLOW_ID])) == NULL) goto fail;
        r = PyObject_CallOneArg(move, fid);
        Py_DECREF(fid);
        if (r == NULL) goto fail;
        Py_DECREF(r);
        if ((tick = PyNumber_Add(base, PyTuple_GET_ITEM(t, 4))) == NULL) goto fail;
        d = PyObject_SetAttr(conn, wb_str[WB_TICK], tick);
        Py_DECREF(tick);
        if (d < 0) goto fail;
        if ((owned = PyObject_GetAttr(conn, wb_str[WB_OWNED])) == NULL) goto fail;
        own = PyObject_IsTrue(owned);
        Py_DECREF(owned);
        if (own < 0) goto fail;
        if (!own) {
            PyObject *l = PyTuple_Pack(4, conn, info, PyTuple_GET_ITEM(t, 5),
                                       PyTuple_GET_ITEM(t, 6));
            int bad = l == NULL || PyList_Append(light, l) < 0;
            Py_XDECREF(l);
            if (bad) goto fail;
            continue;
        }
        for (d = 0; d < 2; d++)
            if (wb_half(conn, info, d, PyTuple_GET_ITEM(t, 5 + d), idx[d]) < 0) goto fail;
    }
    Py_DECREF(idx[0]);
    Py_DECREF(idx[1]);
    return light;
fail:
    Py_XDECREF(idx[0]);
    Py_XDECREF(idx[1]);
    Py_DECREF(light);
    return NULL;
}

/* ------------------------------------------------------------------ effects */

/* The attribute names apply_effects reads and sets (interned once). */
enum {
    FE_C2S, FE_S2C, FE_PIECES, FE_STARTS, FE_BUFFERED, FE_RECENT, FE_HALF, FE_HELD, FE_INFO,
    FE_GAP_BYTES, FE_N
};
static const char *const fe_names[FE_N] = {
    "c2s", "s2c", "pieces", "starts", "buffered", "recent", "half", "held", "info",
    "gap_bytes"};
static PyObject *fe_str[FE_N];

/* later.append((frame, holder, held, tier)) */
static int fe_later(PyObject *later, PyObject *frame, PyObject *holder, PyObject *held,
                    PyObject *tier) {
    PyObject *t = PyTuple_Pack(4, frame, holder, held, tier);
    int rc = t == NULL ? -1 : PyList_Append(later, t);
    Py_XDECREF(t);
    return rc;
}

/* seq.append(item) */
static int fe_append(PyObject *seq, PyObject *item) {
    PyObject *r;
    if (PyList_CheckExact(seq)) return PyList_Append(seq, item);
    if ((r = PyObject_CallMethod(seq, "append", "O", item)) == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* obj.name += v */
static int fe_add_attr(PyObject *obj, int name, PyObject *v) {
    PyObject *cur = PyObject_GetAttr(obj, fe_str[name]), *sum;
    int rc;
    if (cur == NULL) return -1;
    sum = PyNumber_InPlaceAdd(cur, v);
    Py_DECREF(cur);
    if (sum == NULL) return -1;
    rc = PyObject_SetAttr(obj, fe_str[name], sum);
    Py_DECREF(sum);
    return rc;
}

/* One effect of Engine.sync (see NativeReassembler._effects, its definition). */
static int fe_apply(PyObject *e, PyObject *later, PyObject *wtype, PyObject *ptype,
                    PyObject *tier_buffers, PyObject *tier_windows, PyObject *zero,
                    PyObject *all) {
    PyObject *conn, *dir, *off, *data, *ts, *frame, *held, *half = NULL;
    long kind, d;
    int rc = -1;
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 8) {
        PyErr_SetString(PyExc_TypeError, "apply_effects: an effect is an 8-tuple");
        return -1;
    }
    if ((kind = PyLong_AsLong(PyTuple_GET_ITEM(e, 0))) == -1 && PyErr_Occurred()) return -1;
    conn = PyTuple_GET_ITEM(e, 1);
    dir = PyTuple_GET_ITEM(e, 2);
    off = PyTuple_GET_ITEM(e, 3);
    data = PyTuple_GET_ITEM(e, 4);
    ts = PyTuple_GET_ITEM(e, 5);
    frame = PyTuple_GET_ITEM(e, 6);
    held = PyTuple_GET_ITEM(e, 7);
    if ((d = PyLong_AsLong(dir)) == -1 && PyErr_Occurred()) return -1;
    if ((half = PyObject_GetAttr(conn, fe_str[d ? FE_S2C : FE_C2S])) == NULL) return -1;
    if (kind == FX_PIECE) {
        PyObject *buf = NULL, *starts = NULL, *piece = NULL, *n = NULL;
        int ok = 0, tb, ts_ok;
        if (!PyBytes_Check(data)) {
            PyErr_SetString(PyExc_TypeError, "apply_effects: a piece's data is bytes");
            goto done;
        }
        if ((buf = PyObject_GetAttr(half, fe_str[FE_PIECES])) == NULL) goto done;
        if ((starts = PyObject_GetAttr(half, fe_str[FE_STARTS])) == NULL) goto piece_done;
        if ((tb = PyObject_IsTrue(buf)) < 0 || (ts_ok = tb ? PyObject_IsTrue(starts) : 0) < 0)
            goto piece_done;
        if (!tb || !ts_ok) { /* (both or neither, as in TcpHalfStream._insert) */
            Py_SETREF(buf, PyList_New(0));
            Py_SETREF(starts, PyList_New(0));
            if (buf == NULL || starts == NULL ||
                PyObject_SetAttr(half, fe_str[FE_PIECES], buf) < 0 ||
                PyObject_SetAttr(half, fe_str[FE_STARTS], starts) < 0)
                goto piece_done;
        }
        {
            PyObject *a[4] = {off, data, ts, frame};
            if ((piece = PyObject_Vectorcall(ptype, a, 4, NULL)) == NULL) goto piece_done;
        }
        if (fe_append(buf, piece) < 0 || fe_append(starts, off) < 0) goto piece_done;
        if ((n = PyLong_FromSsize_t(PyBytes_GET_SIZE(data))) == NULL) goto piece_done;
        if (fe_add_attr(half, FE_BUFFERED, n) < 0) goto piece_done;
        if (fe_later(later, frame, half, held, tier_buffers) < 0) goto piece_done;
        ok = 1;
    piece_done:
        Py_XDECREF(n);
        Py_XDECREF(piece);
        Py_XDECREF(starts);
        Py_XDECREF(buf);
        if (!ok) goto done;
    } else if (kind == FX_WINDOW) {
        PyObject *win = PyObject_GetAttr(half, fe_str[FE_RECENT]);
        int is;
        if (win == NULL) goto done;
        if ((is = PyObject_IsInstance(win, wtype)) < 0) {
            Py_DECREF(win);
            goto done;
        }
        if (!is) { /* the first bytes, or the first after a gap */
            Py_SETREF(win, PyObject_CallNoArgs(wtype));
            if (win == NULL || PyObject_SetAttr(half, fe_str[FE_RECENT], win) < 0 ||
                PyObject_SetAttr(win, fe_str[FE_HALF], half) < 0) {
                Py_XDECREF(win);
                goto done;
            }
        }
        is = PyObject_SetAttr(win, fe_str[FE_HELD], held) < 0 ||
             fe_later(later, frame, win, held, tier_windows) < 0;
        Py_DECREF(win);
        if (is) goto done;
    } else if (kind == FX_DRAIN) {
        PyObject *info, *gaps, *idx, *cur, *sum, *win, *seq;
        int bad, is;
        if ((info = PyObject_GetAttr(conn, fe_str[FE_INFO])) == NULL) goto done;
        gaps = PyObject_GetAttr(info, fe_str[FE_GAP_BYTES]);
        Py_DECREF(info);
        if (gaps == NULL) goto done;
        idx = PyLong_FromLong(d);
        cur = idx == NULL ? NULL : PyObject_GetItem(gaps, idx);
        sum = cur == NULL ? NULL : PyNumber_InPlaceAdd(cur, held);
        bad = sum == NULL || PyObject_SetItem(gaps, idx, sum) < 0;
        Py_XDECREF(sum);
        Py_XDECREF(cur);
        Py_XDECREF(idx);
        Py_DECREF(gaps);
        if (bad) goto done;
        if ((win = PyObject_GetAttr(half, fe_str[FE_RECENT])) == NULL) goto done;
        if ((is = PyObject_IsInstance(win, wtype)) > 0) { /* (forget_recent) */
            PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
            is = empty == NULL || PyObject_SetAttr(half, fe_str[FE_RECENT], empty) < 0 ||
                 fe_later(later, frame, win, zero, tier_windows) < 0 ? -1 : 0;
            Py_XDECREF(empty);
        }
        Py_DECREF(win);
        if (is < 0) goto done;
        if ((seq = PyObject_GetAttr(half, fe_str[FE_PIECES])) == NULL) goto done;
        bad = PyObject_DelItem(seq, all) < 0;
        Py_DECREF(seq);
        if (bad || (seq = PyObject_GetAttr(half, fe_str[FE_STARTS])) == NULL) goto done;
        bad = PyObject_DelItem(seq, all) < 0;
        Py_DECREF(seq);
        if (bad || PyObject_SetAttr(half, fe_str[FE_BUFFERED], zero) < 0) goto done;
    } else { /* FX_RELEASE */
        if (fe_later(later, frame, half, zero, tier_buffers) < 0) goto done;
    }
    rc = 0;
done:
    Py_XDECREF(half);
    return rc;
}

/* apply_effects(effects, later, window_type, piece_type, tier_buffers, tier_windows):
 * reassembly.native.NativeReassembler._effects (its Python loop stays the definition) in
 * C: Engine.sync's effects on reorder buffers and overlap-check windows, into the
 * reference's objects in order, each budget charge appended to later.  Why: a short
 * flow's window grows in powers of two (TcpHalfStream._hold_window), ~9 effects a flow
 * at ~60 bytecodes each in Python. */
static PyObject *py_apply_effects(PyObject *self, PyObject *args) {
    PyObject *effects, *later, *wtype, *ptype, *tb, *tw, *zero = NULL, *all = NULL;
    Py_ssize_t i, n;
    int ok = 0;
    if (!PyArg_ParseTuple(args, "O!O!OOOO", &PyList_Type, &effects, &PyList_Type, &later,
                          &wtype, &ptype, &tb, &tw))
        return NULL;
    for (i = 0; i < FE_N; i++)
        if (fe_str[i] == NULL && (fe_str[i] = PyUnicode_InternFromString(fe_names[i])) == NULL)
            return NULL;
    if ((zero = PyLong_FromLong(0)) == NULL || (all = PySlice_New(NULL, NULL, NULL)) == NULL)
        goto done;
    n = PyList_GET_SIZE(effects);
    for (i = 0; i < n; i++)
        if (fe_apply(PyList_GET_ITEM(effects, i), later, wtype, ptype, tb, tw, zero, all) < 0)
            goto done;
    ok = 1;
done:
    Py_XDECREF(zero);
    Py_XDECREF(all);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ events */

/* One packed segment of a run (reassembly.provenance.SEGMENT, "=qqq"): its end offset
 * (a gap's: its size), time and frame. */
static void seg_at(const char *p, int64_t *v) { memcpy(v, p, 3 * sizeof(int64_t)); }

/* events(runs, single, holds, make_data, make_chunk, make_gap, directions) ->
 * (events, cuts): reassembly.native.NativeReassembler.process's loop over a stretch's
 * runs (the Python loop there stays its definition, NativeReassembler._emit) in C: per
 * run, a gap (data None) is make_gap(info, direction, offset, nbytes, ts, frame,
 * "acked-unseen"), a run of one segment make_data(info, direction, offset, data, ts, ts,
 * frame, frame) when single, any other make_chunk(info, direction, offset, data,
 * segments); direction is directions[d].  holds: the budget charges due, (frame, ...)
 * each (ascending frames); cuts: (i, frame) where process makes the charges up to frame before it
 * yields events[i] (_hold_pieces), as its loop decides them.  Why: a stretch of many
 * short flows has about one run a segment, and that loop cost ~50 bytecodes each. */
static PyObject *py_events(PyObject *self, PyObject *args) {
    PyObject *runs, *holds, *make_data, *make_chunk, *make_gap, *dirs, *out = NULL,
             *cuts = NULL, *reason = NULL, *res;
    int single;
    Py_ssize_t n, i, nh, k = 0;
    int64_t *hf = NULL;
    if (!PyArg_ParseTuple(args, "O!pOOOOO!", &PyList_Type, &runs, &single, &holds, &make_data,
                          &make_chunk, &make_gap, &PyTuple_Type, &dirs))
        return NULL;
    if (PyTuple_GET_SIZE(dirs) != 2) {
        PyErr_SetString(PyExc_ValueError, "events: two directions");
        return NULL;
    }
    if ((holds = PySequence_Fast(holds, "events: holds is a sequence")) == NULL) return NULL;
    nh = PySequence_Fast_GET_SIZE(holds);
    if (nh && (hf = PyMem_Malloc(sizeof(int64_t) * (size_t)nh)) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < nh; i++) { /* each a tuple whose first item is the frame */
        PyObject *hold = PySequence_Fast_GET_ITEM(holds, i);
        if (!PyTuple_Check(hold) || PyTuple_GET_SIZE(hold) < 1) {
            PyErr_SetString(PyExc_TypeError, "events: a hold is a tuple (frame, ...)");
            goto fail;
        }
        hf[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(hold, 0));
        if (hf[i] == -1 && PyErr_Occurred()) goto fail;
    }
    n = PyList_GET_SIZE(runs);
    if ((out = PyList_New(n)) == NULL || (cuts = PyList_New(0)) == NULL) goto fail;
    if ((reason = PyUnicode_InternFromString("acked-unseen")) == NULL) goto fail;
    for (i = 0; i < n; i++) {
        PyObject *run = PyList_GET_ITEM(runs, i), *info, *data, *segs, *dir, *ev, *a[8];
        Py_ssize_t ns;
        long d;
        int64_t v[3], due = -1;
        const char *sp;
        if (!PyTuple_Check(run) || PyTuple_GET_SIZE(run) != 6) {
            PyErr_SetString(PyExc_TypeError, "events: a run is a 6-tuple");
            goto fail;
        }
        info = PyTuple_GET_ITEM(run, 0);
        data = PyTuple_GET_ITEM(run, 4);
        segs = PyTuple_GET_ITEM(run, 5);
        if ((d = PyLong_AsLong(PyTuple_GET_ITEM(run, 2))) == -1 && PyErr_Occurred()) goto fail;
        if (!PyBytes_Check(segs) || (ns = PyBytes_GET_SIZE(segs)) < 24 || ns % 24 ||
            (d != 0 && d != 1)) {
            PyErr_SetString(PyExc_ValueError, "events: a run's segments or direction");
            goto fail;
        }
        dir = PyTuple_GET_ITEM(dirs, d);
        sp = PyBytes_AS_STRING(segs);
        seg_at(sp + ns - 24, v); /* the last segment: the frame a charge waits for */
        if (single && data != Py_None && ns == 24) {
            if (k < nh && hf[k] <= v[2]) due = v[2];
            a[0] = info, a[1] = dir, a[2] = PyTuple_GET_ITEM(run, 3), a[3] = data;
            a[4] = a[5] = PyLong_FromLongLong(v[1]);
            a[6] = a[7] = PyLong_FromLongLong(v[2]);
            ev = a[4] && a[6] ? PyObject_Vectorcall(make_data, a, 8, NULL) : NULL;
            Py_XDECREF(a[4]);
            Py_XDECREF(a[6]);
        } else {
            if (k < nh && hf[k] <= v[2]) due = v[2];
            if (data == Py_None) {
                a[0] = info, a[1] = dir, a[2] = PyTuple_GET_ITEM(run, 3);
                a[3] = PyLong_FromLongLong(v[0]);
                a[4] = PyLong_FromLongLong(v[1]);
                a[5] = PyLong_FromLongLong(v[2]);
                a[6] = reason;
                ev = a[3] && a[4] && a[5] ? PyObject_Vectorcall(make_gap, a, 7, NULL) : NULL;
                Py_XDECREF(a[3]);
                Py_XDECREF(a[4]);
                Py_XDECREF(a[5]);
            } else {
                a[0] = info, a[1] = dir, a[2] = PyTuple_GET_ITEM(run, 3), a[3] = data, a[4] = segs;
                ev = PyObject_Vectorcall(make_chunk, a, 5, NULL);
            }
        }
        if (ev == NULL) goto fail;
        PyList_SET_ITEM(out, i, ev);
        if (due >= 0) {
            PyObject *cut = Py_BuildValue("(nL)", i, (long long)due);
            int rc = cut == NULL ? -1 : PyList_Append(cuts, cut);
            Py_XDECREF(cut);
            if (rc < 0) goto fail;
            while (k < nh && hf[k] <= due) k++;
        }
    }
    res = PyTuple_Pack(2, out, cuts);
    Py_DECREF(out);
    Py_DECREF(cuts);
    Py_DECREF(reason);
    Py_DECREF(holds);
    PyMem_Free(hf);
    return res;
fail:
    Py_XDECREF(out); /* (a list made by PyList_New(n) with NULL items frees fine) */
    Py_XDECREF(cuts);
    Py_XDECREF(reason);
    Py_DECREF(holds);
    PyMem_Free(hf);
    return NULL;
}

/* ------------------------------------------------------------------ Maker */

/* Maker(cls, names, defaults=()): a callable that makes an instance of cls from its
 * fields' values in order, as cls(*values) would, without a Python __init__ or __new__.
 * Why: the engine makes one StreamData per segment (and the conveyor one Span), a
 * frozen slots dataclass whose generated __init__ sets each of its 9 fields through
 * object.__setattr__ (~2 us) and a NamedTuple whose __new__ is a Python function
 * (~0.5 us); made here, either costs a tenth of that.  Only for classes whose
 * construction is nothing but storing the values: a tuple subclass with no slots of its
 * own (a NamedTuple: names are its fields), or a class whose names are all object slots
 * (member descriptors of type T_OBJECT_EX: a slots dataclass with no __post_init__; the
 * caller checks that).  defaults: the values of the last fields when fewer are given. */
#include <structmember.h>

#define MAKER_MAX 32
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    PyObject *defaults; /* tuple */
    Py_ssize_t n;       /* fields */
    int is_tuple;
    Py_ssize_t offsets[MAKER_MAX];
} Maker;

static PyObject *maker_call(Maker *m, PyObject *const *args, size_t nargsf, PyObject *kw) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nd = PyTuple_GET_SIZE(m->defaults), i;
    PyObject *obj, *v;
    if (kw != NULL && PyTuple_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Maker takes positional arguments only");
        return NULL;
    }
    if (nargs > m->n || nargs < m->n - nd) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd to %zd values, not %zd", m->cls->tp_name,
                     m->n - nd, m->n, nargs);
        return NULL;
    }
    obj = m->cls->tp_alloc(m->cls, m->is_tuple ? m->n : 0);
    if (obj == NULL) return NULL;
    for (i = 0; i < m->n; i++) {
        v = i < nargs ? args[i] : PyTuple_GET_ITEM(m->defaults, i - (m->n - nd));
        Py_INCREF(v);
        if (m->is_tuple)
            PyTuple_SET_ITEM(obj, i, v);
        else
            *(PyObject **)((char *)obj + m->offsets[i]) = v;
    }
    return obj;
}

static PyObject *maker_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *cls, *names, *defaults = NULL;
    Maker *m;
    Py_ssize_t i, n;
    static char *kwlist[] = {"cls", "names", "defaults", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|O!", kwlist, &PyType_Type, &cls,
                                     &PyTuple_Type, &names, &PyTuple_Type, &defaults))
        return NULL;
    n = PyTuple_GET_SIZE(names);
    if (n > MAKER_MAX || (defaults != NULL && PyTuple_GET_SIZE(defaults) > n)) {
        PyErr_SetString(PyExc_ValueError, "Maker: too many names or defaults");
        return NULL;
    }
    m = (Maker *)type->tp_alloc(type, 0);
    if (m == NULL) return NULL;
    m->vectorcall = (vectorcallfunc)maker_call;
    m->cls = (PyTypeObject *)Py_NewRef(cls);
    m->defaults = defaults != NULL ? Py_NewRef(defaults) : PyTuple_New(0);
    if (m->defaults == NULL) goto fail;
    m->n = n;
    m->is_tuple = PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type);
    if (m->is_tuple) {
        if (((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize ||
            ((PyTypeObject *)cls)->tp_dictoffset) {
            PyErr_Format(PyExc_TypeError, "%s: a tuple subclass with state of its own",
                         ((PyTypeObject *)cls)->tp_name);
            goto fail;
        }
        return (PyObject *)m;
    }
    if (((PyTypeObject *)cls)->tp_new != PyBaseObject_Type.tp_new ||
        ((PyTypeObject *)cls)->tp_itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: not a plain slots class",
                     ((PyTypeObject *)cls)->tp_name);
        goto fail;
    }
    for (i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i), *d;
        PyMemberDef *md;
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "Maker: names must be str");
            goto fail;
        }
        d = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict, name);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s.%U is not a slot of the class",
                             ((PyTypeObject *)cls)->tp_name, name);
            goto fail;
        }
        md = ((PyMemberDescrObject *)d)->d_member;
        if (md->type != T_OBJECT_EX || (md->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "%s.%U is not an object slot",
                         ((PyTypeObject *)cls)->tp_name, name);
            goto fail;
        }
        m->offsets[i] = md->offset;
    }
    return (PyObject *)m;
fail:
    Py_DECREF(m);
    return NULL;
}

static void maker_dealloc(Maker *m) {
    Py_XDECREF(m->cls);
    Py_XDECREF(m->defaults);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "reassembly._engine.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = maker_new,
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_doc = "Maker(cls, names, defaults=()) -> callable making cls from field values",
};

/* ------------------------------------------------------------------ pcapng walk */

#include "_pcapng_walk.c"

/* ------------------------------------------------------------------ module */

static PyMethodDef module_methods[] = {
    {"wscale", py_wscale, METH_O,
     "wscale(options) -> the window scale shift of a SYN's TCP options (at most 14), or "
     "None (reassembly.flows._wscale_option)"},
    {"decode", py_decode, METH_VARARGS,
     "decode(linktype, data) -> (ip_version, src, dst, proto, l4_offset, l4_len, vlans, "
     "sport, dport, seq, ack, flags, window, header_len) or None (slow)"},
    {"batch_of", py_batch_of, METH_O,
     "batch_of(frames) -> Batch of Frame tuples (number, ts_ns, linktype, data, orig_len, "
     "interface)"},
    {"flow_bytes", py_flow_bytes, METH_O,
     "flow_bytes(batch) -> [(key, bytes)]: captured bytes per TCP/UDP 4-tuple, in order "
     "of first record"},
    {"walk_pcap", py_walk_pcap, METH_VARARGS,
     "walk_pcap(buf, pos, big_endian, rec_len, swap, mult, limit, linktype, number, max"
     "[, starts_before]) -> Batch"},
    {"events", py_events, METH_VARARGS,
     "events(runs, single, holds, make_data, make_chunk, make_gap, directions) -> (events, "
     "cuts): a stretch's runs as events (reassembly.native.NativeReassembler.process)"},
    {"apply_effects", py_apply_effects, METH_VARARGS,
     "apply_effects(effects, later, window_type, piece_type, tier_buffers, tier_windows): "
     "Engine.sync's effects into the reference's objects "
     "(reassembly.native.NativeReassembler._effects)"},
    {"write_back", py_write_back, METH_VARARGS,
     "write_back(flows, move_to_end, base) -> [(conn, info, half_c2s, half_s2c)] of the "
     "flows not owned: Engine.sync's flows into the reference's objects "
     "(reassembly.native.NativeReassembler._write_back)"},
    {"slide", py_slide, METH_VARARGS,
     "slide(runs, window_type): each run's flow direction's overlap-check window ends with "
     "the bytes delivered (reassembly.native.NativeReassembler._slide_windows)"},
    {"conn_keys", py_conn_keys, METH_VARARGS,
     "conn_keys(batch, rep) -> (keys, slow): the split ingest's task key of each fast "
     "record, None for the slow ones, and their indexes (_conn_keys.c)"},
    {"batch_of_columns", py_batch_of_columns, METH_VARARGS,
     "batch_of_columns(numbers, ts, linktypes, orig_lens, interfaces, offsets, data, start, "
     "stop) -> Batch of pass 3's Arrow column buffers, viewing data (_conn_keys.c)"},
    {"conn_facts", py_conn_facts, METH_VARARGS,
     "conn_facts(batch, pairs, hints, patterns) -> slow: range_stats' facts of the fast "
     "records into the sets; the slow records' indexes (_conn_keys.c)"},
    {"pcapng_count", py_pcapng_count, METH_VARARGS,
     "pcapng_count(buf, pos, starts_before, big_endian, mins, max_block) -> (pos, packets, "
     "spb): a run of packet blocks counted (_pcapng_walk.c)"},
    {"walk_pcapng", py_walk_pcapng, METH_VARARGS,
     "walk_pcapng(buf, pos, stop, big_endian, interfaces, number, last_ts, max) -> "
     "(Batch, last_ts)"},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "reassembly._engine",
    "Native packet engine (reference: reassembly.network, reassembly.flows, reassembly.tcp).",
    -1, module_methods};

PyMODINIT_FUNC PyInit__engine(void) {
    PyObject *m;
    if (PyType_Ready(&BatchType) < 0 || PyType_Ready(&EngineType) < 0 ||
        PyType_Ready(&MakerType) < 0)
        return NULL;
    m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&BatchType);
    if (PyModule_AddObject(m, "Batch", (PyObject *)&BatchType) < 0) {
        Py_DECREF(&BatchType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&MakerType);
    if (PyModule_AddObject(m, "Maker", (PyObject *)&MakerType) < 0) {
        Py_DECREF(&MakerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
