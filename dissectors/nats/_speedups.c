/*
 * Compiled fast path of the NATS client-protocol dissector (dissectors.nats.fastpath).
 *
 * Why it exists: on bulk traffic the pure-Python session spends ~25 us per operation
 * (framer events, a dict per row, row dicts turned into Arrow columns).  This module
 * parses runs of *ordinary* operations straight from the framer's buffer into column
 * buffers, ~0.2 us each.  It is deliberately conservative: any operation whose
 * reference handling could produce an anomaly or needs knowledge it does not have
 * (INFO/CONNECT JSON, non-ASCII text, odd separators, header blocks that are not plain
 * `NATS/1.0` + `Name: value` CRLF lines, a trailer that is not CRLF, an op sent the wrong
 * way, a payload a payload dissector may claim, anything over the size limits) is left
 * for the pure-Python reference, which stays the definition of the output.  Tests run
 * both paths over every sample capture and require equal tables.
 *
 * Two objects:
 *   Columns  - growable column buffers: the rows one session scanned (protocol columns
 *              and provenance), or the pipeline's per-table accumulator, which also
 *              holds the envelope columns filled by move().
 *   scan()   - parses operations from a buffer into a Columns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h> /* mmap: big column buffers (below) */

#include "../proto/_wire.h"

/* ------------------------------------------------------------------ SHA-256 */

/* OpenSSL's SHA256_Init/Update/Final when the Python side hands us their addresses
 * (libcrypto uses the CPU's SHA extensions); the portable FIPS 180-4 code otherwise. */
typedef struct { uint32_t h[8]; uint64_t n; uint8_t buf[64]; uint32_t used; } Sha;
typedef int (*ossl_init_t)(void *);
typedef int (*ossl_update_t)(void *, const void *, size_t);
typedef int (*ossl_final_t)(unsigned char *, void *);
static ossl_init_t ossl_init = NULL;
static ossl_update_t ossl_update = NULL;
static ossl_final_t ossl_final = NULL;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(uint32_t *h, const uint8_t *p) {
    uint32_t w[64], a, b, c, d, e, f, g, hh, t1, t2;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0]; b = h[1]; c = h[2]; d = h[3]; e = h[4]; f = h[5]; g = h[6]; hh = h[7];
    for (i = 0; i < 64; i++) {
        t1 = hh + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

static void sha256_portable(const uint8_t *p, size_t n, uint8_t out[32]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    uint8_t tail[128];
    size_t full = n / 64 * 64, rest = n - full, tl;
    uint64_t bits = (uint64_t)n * 8;
    size_t i;
    for (i = 0; i < full; i += 64) sha_block(h, p + i);
    memset(tail, 0, sizeof tail);
    memcpy(tail, p + full, rest);
    tail[rest] = 0x80;
    tl = rest + 1 + 8 <= 64 ? 64 : 128;
    for (i = 0; i < 8; i++) tail[tl - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha_block(h, tail);
    if (tl == 128) sha_block(h, tail + 64);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24); out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8); out[4 * i + 3] = (uint8_t)h[i];
    }
}

static void sha256(const uint8_t *p, size_t n, uint8_t out[32]) {
    if (ossl_init != NULL) {
        uint64_t ctx[32]; /* SHA256_CTX is 112 bytes */
        ossl_init(ctx);
        ossl_update(ctx, p, n);
        ossl_final(out, ctx);
        return;
    }
    sha256_portable(p, n, out);
}

/* Fan-out: nats-server delivers one published payload to every subscriber, so a capture
 * holds a large payload several times (its PUB, then a MSG per subscriber, a JetStream
 * fetch later).  The payloads of at least REUSE_MIN bytes hashed last are kept with their
 * digest, REUSE_BYTES in all (the least recently used go first); a payload equal to one
 * of them (same length, then memcmp: ~1/20 of the cost of hashing it) takes its digest
 * instead of being hashed again.  A fixed bound per process, whatever the capture. */
#define REUSE_MIN (16 << 10)
#define REUSE_SLOTS 64
#define REUSE_BYTES (8 << 20)
typedef struct { uint8_t *p; size_t n; uint64_t used; uint8_t d[32]; } Kept;
static Kept kept[REUSE_SLOTS];
static size_t kept_bytes;
static uint64_t kept_clock, kept_hits, kept_misses, kept_hit_bytes, kept_miss_bytes;

static void keep(const uint8_t *p, size_t n, const uint8_t d[32]) {
    Kept *slot, *lru;
    int i;
    while (1) {
        slot = lru = NULL;
        for (i = 0; i < REUSE_SLOTS; i++) {
            Kept *k = &kept[i];
            if (k->p == NULL) {
                if (slot == NULL) slot = k;
            } else if (lru == NULL || k->used < lru->used) {
                lru = k;
            }
        }
        if (slot != NULL && kept_bytes + n <= REUSE_BYTES) break;
        if (lru == NULL) return; /* (n > REUSE_BYTES: not kept) */
        kept_bytes -= lru->n;
        PyMem_RawFree(lru->p);
        memset(lru, 0, sizeof *lru);
    }
    slot->p = PyMem_RawMalloc(n);
    if (slot->p == NULL) return; /* not kept: the digest is right either way */
    memcpy(slot->p, p, n);
    memcpy(slot->d, d, 32);
    slot->n = n;
    slot->used = ++kept_clock;
    kept_bytes += n;
}

static void sha256_payload(const uint8_t *p, size_t n, uint8_t out[32]) {
    int i;
    if (n < REUSE_MIN) { sha256(p, n, out); return; }
    for (i = 0; i < REUSE_SLOTS; i++) {
        Kept *k = &kept[i];
        if (k->n == n && memcmp(k->p, p, n) == 0) {
            memcpy(out, k->d, 32);
            k->used = ++kept_clock;
            kept_hits++;
            kept_hit_bytes += n;
            return;
        }
    }
    sha256(p, n, out);
    kept_misses++;
    kept_miss_bytes += n;
    keep(p, n, out);
}

static PyObject *py_reuse_stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("KKKK", (unsigned long long)kept_hits, (unsigned long long)kept_misses,
                         (unsigned long long)kept_hit_bytes, (unsigned long long)kept_miss_bytes);
}

static PyObject *py_use_openssl(PyObject *self, PyObject *args) {
    unsigned long long a, b, c;
    if (!PyArg_ParseTuple(args, "KKK", &a, &b, &c)) return NULL;
    ossl_init = (ossl_init_t)(uintptr_t)a;
    ossl_update = (ossl_update_t)(uintptr_t)b;
    ossl_final = (ossl_final_t)(uintptr_t)c;
    if (!a || !b || !c) ossl_init = NULL;
    Py_RETURN_NONE;
}

static PyObject *py_sha256_hex(PyObject *self, PyObject *args) {
    Py_buffer v;
    uint8_t d[32];
    char hex[64];
    static const char digits[] = "0123456789abcdef";
    int portable = 0, i;
    if (!PyArg_ParseTuple(args, "y*|p", &v, &portable)) return NULL;
    if (portable) sha256_portable(v.buf, (size_t)v.len, d);
    else sha256(v.buf, (size_t)v.len, d);
    PyBuffer_Release(&v);
    for (i = 0; i < 32; i++) { hex[2 * i] = digits[d[i] >> 4]; hex[2 * i + 1] = digits[d[i] & 15]; }
    return PyUnicode_FromStringAndSize(hex, 64);
}

/* ------------------------------------------------------------------ buffers */

typedef struct { char *p; Py_ssize_t len, cap; } Buf;

/* Big buffers (>= BIG_MIN) are mapped pages of their own, and a freed one waits in a small
 * pool (at most POOL_MAX bytes, POOL_SLOTS regions) for the next batch's columns.  Why:
 * a bulk run's column buffers are a few MiB each, made and freed every 16,384 rows, and
 * from glibc's heap they left ~30 MiB freed but kept between other allocations (the 1 GB
 * bulk recording's peak RSS 213 MB; 194 MB this way, same CPU time: docs/performance.md,
 * "Memory").  Mapped without the pool, every batch's pages fault in anew (+1.3 s of
 * system time on that run).  The pool is touched with the GIL held only: Columns'
 * methods, and the deallocation of an Owned (Arrow drops its buffers holding the GIL). */
#define BIG_MIN ((Py_ssize_t)256 << 10)
#define POOL_MAX ((Py_ssize_t)32 << 20)
#define POOL_SLOTS 64
#define PAGE ((Py_ssize_t)4096)

typedef struct { char *p; Py_ssize_t cap; } Region;
static Region pool[POOL_SLOTS];
static int npool;
static Py_ssize_t pool_bytes;
static unsigned long long regions_mapped, regions_reused; /* region_stats() */

/* A region of at least need bytes: the smallest pooled one not over twice that, else a
 * new mapping; *cap its size.  NULL when no memory is left. */
static char *region_take(Py_ssize_t need, Py_ssize_t *cap) {
    int i, best = -1;
    char *p;
    for (i = 0; i < npool; i++)
        if (pool[i].cap >= need && pool[i].cap / 2 <= need
            && (best < 0 || pool[i].cap < pool[best].cap)) best = i;
    if (best >= 0) {
        p = pool[best].p;
        *cap = pool[best].cap;
        pool[best] = pool[--npool];
        pool_bytes -= *cap;
        regions_reused++;
        return p;
    }
    need = (need + PAGE - 1) / PAGE * PAGE;
    p = mmap(NULL, (size_t)need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *cap = need;
    regions_mapped++;
    return p;
}

static void region_give(char *p, Py_ssize_t cap) {
    if (npool < POOL_SLOTS && pool_bytes + cap <= POOL_MAX) {
        pool[npool].p = p;
        pool[npool].cap = cap;
        npool++;
        pool_bytes += cap;
    } else {
        munmap(p, (size_t)cap);
    }
}

/* Memory of cap bytes from PyMem or a region: which, by its size alone. */
static void mem_free(char *p, Py_ssize_t cap) {
    if (p == NULL) return;
    if (cap >= BIG_MIN) region_give(p, cap);
    else PyMem_Free(p);
}

/* b grown to at least cap bytes, its contents kept. */
static int mem_grow(Buf *b, Py_ssize_t cap) {
    char *np;
    if (cap < BIG_MIN) {
        np = PyMem_Realloc(b->p, (size_t)cap);
        if (np == NULL) return -1;
        b->cap = cap;
    } else {
        Py_ssize_t got;
        np = region_take(cap, &got);
        if (np == NULL) return -1;
        if (b->len) memcpy(np, b->p, (size_t)b->len);
        mem_free(b->p, b->cap);
        b->cap = got;
    }
    b->p = np;
    return 0;
}

static PyObject *py_region_stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("KKnn", regions_mapped, regions_reused, (Py_ssize_t)npool, pool_bytes);
}

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    Py_ssize_t need = b->len + extra, cap;
    if (need <= b->cap) return 0;
    cap = b->cap ? b->cap : 16;
    while (cap < need) cap *= 2;
    if (mem_grow(b, cap) < 0) { PyErr_NoMemory(); return -1; }
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (b->len + n > b->cap && buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int buf_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static inline int buf_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static inline int buf_u8(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }

static void buf_free(Buf *b) { mem_free(b->p, b->cap); b->p = NULL; b->len = b->cap = 0; }

/* Columns are kept one byte of validity (and of boolean value) per row: appending and
 * moving rows stays simple; export() packs them into Arrow bitmaps. */

enum Kind { VAR = 0, I64 = 1, I32 = 2, BOOL = 3, U8 = 4 };

/* column order: protocol columns, provenance, then the envelope (accumulators only) */
enum Col {
    C_OP, C_SUBJECT, C_REPLY, C_SID, C_QUEUE, C_MAX_MSGS, C_HDR_LEN, C_PAY_LEN, C_PAYLOAD,
    C_TRUNC, C_SHA, C_HDR_RAW, C_STATUS, C_STATUS_DESC, C_MP_EXCEEDED,
    C_TS_FIRST, C_TS_LAST, C_FRAME_FIRST, C_FRAME_LAST, C_OFF_START, C_OFF_END,
    C_FLOW_ID, C_RECORD_ID, C_DIRECTION, C_STREAM_ID, C_SRC_IP, C_SRC_PORT, C_DST_IP,
    C_DST_PORT,
    NCOLS
};
#define N_SCANNED C_FLOW_ID /* columns scan() fills */

static const char *COL_NAMES[NCOLS] = {
    "op", "subject", "reply_to", "sid", "queue_group", "max_msgs", "header_len",
    "payload_len", "payload", "payload_truncated", "payload_sha256", "headers_raw",
    "status_code", "status_description", "max_payload_exceeded",
    "ts_first", "ts_last", "frame_first", "frame_last", "offset_start", "offset_end",
    "flow_id", "record_id", "direction", "stream_id", "src_ip", "src_port", "dst_ip",
    "dst_port"};
static const uint8_t COL_KIND[NCOLS] = {
    VAR, VAR, VAR, VAR, VAR, I64, I64, I64, VAR, BOOL, VAR, VAR, I32, VAR, BOOL,
    I64, I64, I64, I64, I64, I64,
    I64, I64, U8, I64, VAR, I32, VAR, I32};

typedef struct {
    Buf data, off, valid; /* off: int32 offsets (VAR only, n+1 entries) */
} Col;

typedef struct {
    PyObject_HEAD
    Col cols[NCOLS];
    /* headers: map<string, list<string>> */
    Buf h_off, h_valid;        /* per row: int32 offsets into keys (n+1), validity */
    Buf k_off, k_data;         /* keys: int32 offsets (nkeys+1), utf-8 bytes */
    Buf l_off;                 /* per key: int32 offsets into items (nkeys+1) */
    Buf i_off, i_data;         /* items: int32 offsets (nitems+1), bytes */
    Py_ssize_t nrows, nkeys, nitems;
    Py_ssize_t head;           /* rows before this were moved out (FIFO) */
} Columns;

static void columns_reset(Columns *c) {
    int i;
    int32_t zero = 0;
    for (i = 0; i < NCOLS; i++) {
        c->cols[i].data.len = c->cols[i].valid.len = 0;
        c->cols[i].off.len = 0;
        if (COL_KIND[i] == VAR) buf_put(&c->cols[i].off, &zero, 4);
    }
    c->h_off.len = c->h_valid.len = c->k_off.len = c->k_data.len = 0;
    c->l_off.len = c->i_off.len = c->i_data.len = 0;
    buf_put(&c->h_off, &zero, 4);
    buf_put(&c->k_off, &zero, 4);
    buf_put(&c->l_off, &zero, 4);
    buf_put(&c->i_off, &zero, 4);
    c->nrows = c->nkeys = c->nitems = 0;
    c->head = 0;
}

static void columns_dealloc(Columns *c) {
    int i;
    for (i = 0; i < NCOLS; i++) {
        buf_free(&c->cols[i].data); buf_free(&c->cols[i].off); buf_free(&c->cols[i].valid);
    }
    buf_free(&c->h_off); buf_free(&c->h_valid); buf_free(&c->k_off); buf_free(&c->k_data);
    buf_free(&c->l_off); buf_free(&c->i_off); buf_free(&c->i_data);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *columns_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Columns *c = (Columns *)type->tp_alloc(type, 0);
    if (c == NULL) return NULL;
    columns_reset(c);
    return (PyObject *)c;
}

/* append helpers (one row's value of one column) */
static inline int put_var(Col *col, const void *p, Py_ssize_t n) {
    int32_t end;
    if (buf_put(&col->data, p, n) < 0) return -1;
    end = (int32_t)col->data.len;
    if (buf_put(&col->off, &end, 4) < 0) return -1;
    return buf_u8(&col->valid, 1);
}
static inline int put_null(Col *col, int kind) {
    if (kind == VAR) {
        int32_t end = (int32_t)col->data.len;
        if (buf_put(&col->off, &end, 4) < 0) return -1;
    } else {
        static const char zeros[8] = {0};
        if (buf_put(&col->data, zeros, kind == I64 ? 8 : kind == I32 ? 4 : 1) < 0) return -1;
    }
    return buf_u8(&col->valid, 0);
}
static inline int put_i64(Col *col, int64_t v) {
    if (buf_i64(&col->data, v) < 0) return -1;
    return buf_u8(&col->valid, 1);
}
static inline int put_i32(Col *col, int32_t v) {
    if (buf_i32(&col->data, v) < 0) return -1;
    return buf_u8(&col->valid, 1);
}
static inline int put_u8(Col *col, uint8_t v) {
    if (buf_u8(&col->data, v) < 0) return -1;
    return buf_u8(&col->valid, 1);
}

/* ------------------------------------------------------------------ parsing */

enum Op { OP_PUB, OP_HPUB, OP_MSG, OP_HMSG, OP_SUB, OP_UNSUB, OP_PING, OP_PONG, OP_OK };
static const char *OP_NAMES[] = {"PUB", "HPUB", "MSG", "HMSG", "SUB", "UNSUB", "PING",
                                 "PONG", "+OK"};

typedef struct { const uint8_t *p; Py_ssize_t n; } Tok;

#define MAX_TOKS 8
#define MAX_SIZE_DIGITS 9
#define MAX_HEADERS 64
/* payloads above this are streamed by the reference framer (bounded memory) */
#define MAX_FAST_TOTAL (1 << 20)

static int verb_is(const Tok *t, const char *name) {
    Py_ssize_t i, n = (Py_ssize_t)strlen(name);
    if (t->n != n) return 0;
    for (i = 0; i < n; i++) {
        uint8_t ch = t->p[i];
        if (ch >= 'a' && ch <= 'z') ch -= 32;
        if (ch != (uint8_t)name[i]) return 0;
    }
    return 1;
}

/* 1-9 ASCII digits, else -1 (parser.parse_size) */
static int64_t parse_size(const Tok *t) {
    int64_t v = 0;
    Py_ssize_t i;
    if (t->n < 1 || t->n > MAX_SIZE_DIGITS) return -1;
    for (i = 0; i < t->n; i++) {
        if (t->p[i] < '0' || t->p[i] > '9') return -1;
        v = v * 10 + (t->p[i] - '0');
    }
    return v;
}

static inline const uint8_t *strip_l(const uint8_t *a, const uint8_t *b) {
    while (a < b && (*a == ' ' || *a == '\t')) a++;
    return a;
}
static inline const uint8_t *strip_r(const uint8_t *a, const uint8_t *b) {
    while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
    return b;
}

typedef struct { const uint8_t *name; Py_ssize_t nn; const uint8_t *val; Py_ssize_t vn; } Hdr;

typedef struct {
    int status;  /* -1: none */
    const uint8_t *desc; Py_ssize_t dn;  /* desc NULL: none */
    Hdr h[MAX_HEADERS];
    int nh;
} Headers;

/* parser.parse_headers for blocks it would accept without a problem; 0 = refuse */
static int parse_headers(const uint8_t *p, Py_ssize_t n, Headers *out) {
    const uint8_t *e = p + n, *ls, *le, *nl, *st, *se;
    int ended = 0;
    if (n < 10 || memcmp(p, "NATS/1.0", 8) != 0 || e[-1] != '\n') return 0;
    /* first line */
    nl = memchr(p, '\n', (size_t)n);
    if (nl == NULL || nl == p || nl[-1] != '\r') return 0;
    st = strip_l(p + 8, nl - 1);
    se = strip_r(st, nl - 1);
    out->status = -1;
    out->desc = NULL;
    out->dn = 0;
    out->nh = 0;
    if (se > st) {
        const uint8_t *d, *de;
        if (se - st < 3) return 0;
        if (st[0] < '0' || st[0] > '9' || st[1] < '0' || st[1] > '9' || st[2] < '0' ||
            st[2] > '9')
            return 0;
        out->status = (st[0] - '0') * 100 + (st[1] - '0') * 10 + (st[2] - '0');
        d = strip_l(st + 3, se);
        de = strip_r(d, se);
        if (de > d) { out->desc = d; out->dn = de - d; }
    }
    ls = nl + 1;
    while (ls < e) {
        const uint8_t *colon;
        nl = memchr(ls, '\n', (size_t)(e - ls));
        if (nl == NULL || nl == ls || nl[-1] != '\r') return 0; /* bare LF or no LF */
        le = nl - 1;
        if (ended) {
            if (le > ls) return 0; /* bytes after the empty line */
        } else if (le == ls) {
            ended = 1;
        } else {
            const uint8_t *a, *b;
            colon = memchr(ls, ':', (size_t)(le - ls));
            if (colon == NULL || colon == ls) return 0;
            if (out->nh >= MAX_HEADERS) return 0;
            a = strip_l(ls, colon); b = strip_r(a, colon);
            out->h[out->nh].name = a; out->h[out->nh].nn = b - a;
            a = strip_l(colon + 1, le); b = strip_r(a, le);
            out->h[out->nh].val = a; out->h[out->nh].vn = b - a;
            out->nh++;
        }
        ls = nl + 1;
    }
    return ended;
}

static int put_headers(Columns *c, const Headers *h) {
    int i, j;
    uint8_t done[MAX_HEADERS];
    int32_t v;
    memset(done, 0, sizeof done);
    for (i = 0; i < h->nh; i++) {
        if (done[i]) continue;
        if (buf_put(&c->k_data, h->h[i].name, h->h[i].nn) < 0) return -1;
        v = (int32_t)c->k_data.len;
        if (buf_put(&c->k_off, &v, 4) < 0) return -1;
        c->nkeys++;
        for (j = i; j < h->nh; j++) {
            if (done[j] || h->h[j].nn != h->h[i].nn ||
                memcmp(h->h[j].name, h->h[i].name, (size_t)h->h[i].nn) != 0)
                continue;
            done[j] = 1;
            if (buf_put(&c->i_data, h->h[j].val, h->h[j].vn) < 0) return -1;
            v = (int32_t)c->i_data.len;
            if (buf_put(&c->i_off, &v, 4) < 0) return -1;
            c->nitems++;
        }
        v = (int32_t)c->nitems;
        if (buf_put(&c->l_off, &v, 4) < 0) return -1;
    }
    v = (int32_t)c->nkeys;
    if (buf_put(&c->h_off, &v, 4) < 0) return -1;
    return buf_u8(&c->h_valid, 1);
}

static int put_no_headers(Columns *c) {
    int32_t v = (int32_t)c->nkeys;
    if (buf_put(&c->h_off, &v, 4) < 0) return -1;
    return buf_u8(&c->h_valid, 0);
}

/* chunk provenance: (end_offset, ts_first, ts_last, frame_first, frame_last) */
typedef struct { int64_t end, ts_first, ts_last, frame_first, frame_last; } Chunk;

static Py_ssize_t chunk_at(const Chunk *ch, Py_ssize_t nch, Py_ssize_t from, int64_t off) {
    /* framing._Framer._prov: the first chunk ending after off, else the last one */
    while (from < nch - 1 && ch[from].end <= off) from++;
    return from;
}

enum Status { NEED_MORE = 0, REFUSE = 1, NEED_VERDICT = 2, NEED_PROBE = 3 };

static inline int tok_put(Col *col, const Tok *t) {
    return t ? put_var(col, t->p, t->n) : put_null(col, VAR);
}

/* a token as the reference's str (tokens are ASCII: tok_is_ok), None for no token */
static PyObject *tok_str(const Tok *t) {
    if (t == NULL) Py_RETURN_NONE;
    return PyUnicode_DecodeASCII((const char *)t->p, t->n, NULL);
}

static PyTypeObject ColumnsType;

static int tok_is_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t k;
    for (k = 0; k < n; k++) {
        uint8_t b = s[k];
        if (b >= 0x80 || b == 0x0b || b == 0x0c) return 0;
    }
    return 1;
}

static int load_chunks(PyObject *seq, Chunk **out, Py_ssize_t *nout, Chunk *stackbuf) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Chunk *ch = stackbuf;
    if (n < 1) { PyErr_SetString(PyExc_ValueError, "no chunks"); return -1; }
    if (n > 64) {
        ch = PyMem_Malloc(sizeof(Chunk) * (size_t)n);
        if (ch == NULL) { PyErr_NoMemory(); return -1; }
    }
    for (i = 0; i < n; i++) {
        PyObject *t = items[i];
        int64_t v[5];
        int k;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5) {
            PyErr_SetString(PyExc_TypeError, "chunk must be a 5-tuple");
            goto fail;
        }
        for (k = 0; k < 5; k++) {
            v[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, k));
            if (v[k] == -1 && PyErr_Occurred()) goto fail;
        }
        ch[i].end = v[0]; ch[i].ts_first = v[1]; ch[i].ts_last = v[2];
        ch[i].frame_first = v[3]; ch[i].frame_last = v[4];
    }
    *out = ch;
    *nout = n;
    return 0;
fail:
    if (ch != stackbuf) PyMem_Free(ch);
    return -1;
}

/* ------------------------------------------------ carried messages, batches (emit) */

#define MSG_FIELDS 15 /* dissectors.api.CarriedMessage's, in its order */

/* Append the ColumnBatch record of n more rows to out, as NatsSession did in Python:
 * it replaces the last record when that is a batch of the same direction without
 * children (no record between them).  batch: (ColumnBatch, table, direction, rows,
 * format); kids: the children of the batch's last row (a carried message's records). */
static int emit_batch(PyObject *out, PyObject *batch, Py_ssize_t n, PyObject *kids) {
    PyTypeObject *btype = (PyTypeObject *)PyTuple_GET_ITEM(batch, 0);
    PyObject *direction = PyTuple_GET_ITEM(batch, 2), *b, *num;
    Py_ssize_t len = PyList_GET_SIZE(out), k;
    int replace = 0;
    if (len > 0) {
        PyObject *last = PyList_GET_ITEM(out, len - 1);
        if (Py_IS_TYPE(last, btype) && PyTuple_GET_SIZE(last) == 6) {
            int r = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 1), direction, Py_EQ);
            if (r < 0) return -1;
            if (r) {
                r = PyObject_IsTrue(PyTuple_GET_ITEM(last, 5));
                if (r < 0) return -1;
                if (!r) {
                    Py_ssize_t had = PyLong_AsSsize_t(PyTuple_GET_ITEM(last, 2));
                    if (had == -1 && PyErr_Occurred()) return -1;
                    n += had;
                    replace = 1;
                }
            }
        }
    }
    num = PyLong_FromSsize_t(n);
    if (num == NULL) return -1;
    /* a tuple subclass's instance, made as tuple.__new__(ColumnBatch, ...) makes it */
    b = btype->tp_alloc(btype, 6);
    if (b == NULL) { Py_DECREF(num); return -1; }
    for (k = 0; k < 5; k++) {
        /* table, direction, n, rows, format: batch's items 1, 2, -, 3, 4 */
        PyObject *x = k == 2 ? num : PyTuple_GET_ITEM(batch, k < 2 ? k + 1 : k);
        if (k != 2) Py_INCREF(x);
        PyTuple_SET_ITEM(b, k, x);
    }
    Py_INCREF(kids);
    PyTuple_SET_ITEM(b, 5, kids);
    if (replace) return PyList_SetItem(out, len - 1, b); /* (steals b) */
    k = PyList_Append(out, b);
    Py_DECREF(b);
    return (int)k;
}

/* The str objects every carried message of a kind shares: the table name and the op
 * names (made once, at import; the reference's are constants too). */
static PyObject *S_NATS, *S_OPS[Py_ARRAY_LENGTH(OP_NAMES)];

/* Whether the reference offers a complete payload of n bytes: it keeps it whole for the
 * hook when n <= carry_max, else only payload_cap bytes (NatsSession._keep), and offers
 * what it kept whole (NatsSession._on_block); -1: no limit. */
static inline int offered(int64_t n, long long cmax, long long cap) {
    return cmax < 0 || n <= cmax || cap < 0 || n <= cap;
}

/* Offer a carried operation's message: offer is (callable, message maker, flow_id,
 * carry_max), the maker called with the message's fields in order (``reassembly.native
 * .maker(CarriedMessage)``: filling its slots in C, without the dataclass's __init__);
 * subject: the subject's str (the verdict lookup's key); returns the records (new
 * reference) or NULL. */
static PyObject *offer_message(PyObject *offer, PyObject *direction, const uint8_t *pl,
                               Py_ssize_t plen, int op, PyObject *subject, const Tok *reply,
                               const Tok *sid, int64_t o1, int64_t o2, int64_t t1,
                               int64_t t2, int64_t f1, int64_t f2) {
    PyObject *v[MSG_FIELDS] = {NULL}, *msg, *res = NULL;
    int i;
    v[0] = Py_NewRef(S_NATS);
    v[1] = Py_NewRef(S_OPS[op]);
    v[2] = Py_NewRef(subject);
    v[3] = tok_str(reply);
    v[4] = tok_str(sid);
    v[5] = Py_NewRef(Py_None);
    v[6] = PyBytes_FromStringAndSize((const char *)pl, plen);
    v[7] = Py_NewRef(direction);
    v[8] = Py_NewRef(PyTuple_GET_ITEM(offer, 2));
    v[9] = PyLong_FromLongLong(o1);
    v[10] = PyLong_FromLongLong(o2);
    v[11] = PyLong_FromLongLong(t1);
    v[12] = PyLong_FromLongLong(t2);
    v[13] = PyLong_FromLongLong(f1);
    v[14] = PyLong_FromLongLong(f2);
    for (i = 0; i < MSG_FIELDS; i++)
        if (v[i] == NULL) goto done;
    msg = PyObject_Vectorcall(PyTuple_GET_ITEM(offer, 1), v, MSG_FIELDS, NULL);
    if (msg == NULL) goto done;
    res = PyObject_CallOneArg(PyTuple_GET_ITEM(offer, 0), msg);
    Py_DECREF(msg);
done:
    for (i = 0; i < MSG_FIELDS; i++) Py_XDECREF(v[i]);
    return res;
}

static const char HEX[] = "0123456789abcdef";

/* dissectors.proto.wire.scan() is not None: a well-formed top-level protobuf message
 * (wire types 0, 1, 2, 5; field number > 0; every length inside; ends exactly at the
 * end).  Probes that declare probe_needs_protobuf say NO to anything else. */
static int protobuf_ok(const uint8_t *p, Py_ssize_t end) {
    Py_ssize_t pos = 0;
    while (pos < end) {
        uint64_t tag, v;
        int wt;
        if (!pb_varint(p, &pos, end, &tag)) return 0;
        wt = (int)(tag & 7);
        if ((tag >> 3) == 0 || !(wt == 0 || wt == 1 || wt == 2 || wt == 5)) return 0;
        if (wt == 0) {
            if (!pb_varint(p, &pos, end, &v)) return 0;
        } else if (wt == 2) {
            if (!pb_varint(p, &pos, end, &v)) return 0;
            if (v > (uint64_t)(end - pos)) return 0;
            pos += (Py_ssize_t)v;
        } else {
            Py_ssize_t w = wt == 1 ? 8 : 4;
            if (w > end - pos) return 0;
            pos += w;
        }
    }
    return 1;
}

/* Flag 3 of first_bytes: every probe that may claim this first byte declared its exact
 * rule (PayloadDissector.probe_prefixes), "YES exactly when the payload starts with one
 * of these"; the prefixes follow the 256 flags, each as one length byte (1-255) and its
 * bytes (dispatch.probe_first_bytes).  Whether one of them starts the payload. */
static int prefix_claims(const uint8_t *t, Py_ssize_t n, const uint8_t *pl, Py_ssize_t plen) {
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t k = t[i];
        if (k > n - i - 1) return 0;  /* a cut table: claims nothing more */
        if (k > 0 && k <= plen && memcmp(t + i + 1, pl, (size_t)k) == 0) return 1;
        i += 1 + k;
    }
    return 0;
}

static PyObject *py_protobuf_ok(PyObject *self, PyObject *args) {
    Py_buffer v;
    int ok;
    if (!PyArg_ParseTuple(args, "y*", &v)) return NULL;
    ok = protobuf_ok(v.buf, v.len);
    PyBuffer_Release(&v);
    return PyBool_FromLong(ok);
}

/*
 * scan_with(config, buf, pos, base, chunks, cleared, carry, records)
 *   -> (status, new_pos, rows, subject_or_payload)
 *
 * config: the arguments that stay the same from one call to the next, as one tuple
 * (out, c2s, max_line, max_payload, payload_cap, header_cap, first_bytes, verdicts,
 * batch, offer), which a session builds once per direction (and again when one of them
 * changes): passing them one by one cost its Python caller ~60 bytecodes a call, one
 * call per TCP segment on a STAN capture.
 *
 * buf: the framer's bytearray; pos: read position in it; base: stream offset of buf[0];
 * chunks: sequence of the framer's chunk tuples; max_payload/payload_cap/header_cap: -1
 * for none; first_bytes: None, or 256 bytes flagging the payload first bytes a payload
 * dissector's probe may claim (0 none, 1 any payload, 2 a well-formed protobuf one, 3
 * one that starts with a prefix of the table after the flags: decided here, no stop;
 * dissectors.dispatch.probe_first_bytes); verdicts: None (no payload dissectors), or a dict
 * subject -> bool (is a payload dissector bound to it).  Stops at the first operation
 * it cannot finish yet (NEED_MORE), must leave to the reference (REFUSE), or whose
 * subject has no verdict yet (NEED_VERDICT; the subject is returned) or whose payload
 * a probe must look at (NEED_PROBE; the payload is returned; call again with cleared
 * true when no probe claims it).  out may be None: parse and count only (rows another
 * worker writes).  On NEED_MORE for an operation whose line is in but not all of its
 * payload, the last item is the stream offset the buffered bytes must reach before a
 * scan can answer anything else for it (the caller need not scan before).
 *
 * records: the session's list of records: the scan appends the ColumnBatch records of
 * the rows it takes itself (batch: (ColumnBatch, table, direction, rows, format);
 * emit_batch).
 *
 * carry: 0, a PUB/MSG bound to a payload dissector is refused (the reference offers it);
 * 1, it is taken like any other operation: its row written, the CarriedMessage the
 * reference would build offered (offer: (callable, message type, flow_id, carry_max or
 * -1): the callable called with it), the records returned made the children of the batch
 * ending with that row, and the scan goes on; 2, as 1, and the first operation is one a
 * probe claimed (after NEED_PROBE): carried.  HPUB/HMSG are refused as with 0 (the offer
 * needs their parsed headers).
 * Why: on a STAN or Liftbridge capture nearly every operation is carried, and a stop,
 * a Python loop turn and a CarriedMessage.__init__ per operation cost ~250 bytecodes
 * (most of NatsSession._scan's).  The order of offers, hence of the bindings their
 * decodes make, is the reference's: the next operation's verdict is read after the
 * offer returns (the memo of the last one is dropped, the dict may have changed).
 */
static PyObject *py_scan_with(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *cfg, *outobj, *bufobj, *chunks, *first_obj, *verdicts, *seq = NULL;
    PyObject *subject = NULL, *result = NULL, *records, *batch, *offer;
    /* the current operation's subject as a str, when the verdict lookup made it (the
     * carried message's subject); owned */
    PyObject *subj_str = NULL;
    Py_ssize_t emitted = 0; /* rows already in a batch appended to records */
    Columns *out = NULL;
    Py_buffer view;
    Py_ssize_t pos, nch = 0, ci = 0, rows = 0, max_line, end, p, nfirst = 0;
    long long base, max_payload, payload_cap, header_cap, carry_max = -1;
    int c2s, status = NEED_MORE, have_view = 0, cleared, carry, carried = 0;
    const uint8_t *buf, *first = NULL;
    Chunk stackch[64], *ch = stackch;
    Headers hdrs;
    /* the last subject looked up in verdicts and its verdict (a run of one subject's
     * operations decodes and hashes it once) */
    PyObject *memo_v = NULL;
    const uint8_t *memo_p = NULL;
    Py_ssize_t memo_n = 0;

    if (nargs != 8 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_with(config: 10-tuple, buf, pos, base, chunks, cleared, carry, "
                        "records)");
        return NULL;
    }
    cfg = args[0];
    outobj = PyTuple_GET_ITEM(cfg, 0);
    c2s = PyObject_IsTrue(PyTuple_GET_ITEM(cfg, 1));
    max_line = PyLong_AsSsize_t(PyTuple_GET_ITEM(cfg, 2));
    max_payload = PyLong_AsLongLong(PyTuple_GET_ITEM(cfg, 3));
    payload_cap = PyLong_AsLongLong(PyTuple_GET_ITEM(cfg, 4));
    header_cap = PyLong_AsLongLong(PyTuple_GET_ITEM(cfg, 5));
    first_obj = PyTuple_GET_ITEM(cfg, 6);
    verdicts = PyTuple_GET_ITEM(cfg, 7);
    batch = PyTuple_GET_ITEM(cfg, 8);
    offer = PyTuple_GET_ITEM(cfg, 9);
    bufobj = args[1];
    pos = PyLong_AsSsize_t(args[2]);
    base = PyLong_AsLongLong(args[3]);
    chunks = args[4];
    cleared = PyObject_IsTrue(args[5]);
    carry = PyLong_AsLong(args[6]);
    records = args[7];
    if (PyErr_Occurred()) return NULL; /* (a number that did not convert) */
    if (c2s < 0 || cleared < 0) return NULL;
    if (!PyList_Check(records) || !PyTuple_Check(batch) || PyTuple_GET_SIZE(batch) != 5 ||
        !PyType_Check(PyTuple_GET_ITEM(batch, 0)) ||
        !PyType_IsSubtype((PyTypeObject *)PyTuple_GET_ITEM(batch, 0), &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "records must be a list, batch (ColumnBatch, table, direction, "
                        "rows, format)");
        return NULL;
    }
    if (carry) {
        if (!PyTuple_Check(offer) || PyTuple_GET_SIZE(offer) != 4) {
            PyErr_SetString(PyExc_TypeError,
                            "carry needs offer (callable, type, flow_id, carry_max)");
            return NULL;
        }
        carry_max = PyLong_AsLongLong(PyTuple_GET_ITEM(offer, 3));
        if (carry_max == -1 && PyErr_Occurred()) return NULL;
    }
    if (outobj != Py_None) {
        if (!PyObject_TypeCheck(outobj, &ColumnsType)) {
            PyErr_SetString(PyExc_TypeError, "out must be Columns or None");
            return NULL;
        }
        out = (Columns *)outobj;
    }
    if (first_obj != Py_None) {
        if (!PyBytes_Check(first_obj) || PyBytes_GET_SIZE(first_obj) < 256) {
            PyErr_SetString(PyExc_TypeError, "first_bytes must be >= 256 bytes or None");
            return NULL;
        }
        first = (const uint8_t *)PyBytes_AS_STRING(first_obj);
        nfirst = PyBytes_GET_SIZE(first_obj);
    }
    if (verdicts != Py_None && !PyDict_Check(verdicts)) {
        PyErr_SetString(PyExc_TypeError, "verdicts must be a dict or None");
        return NULL;
    }
    seq = PySequence_Fast(chunks, "chunks must be a sequence");
    if (seq == NULL) return NULL;
    if (load_chunks(seq, &ch, &nch, stackch) < 0) goto done;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) goto done;
    have_view = 1;
    buf = view.buf;
    end = view.len;
    p = pos;
    while (1) {
        const uint8_t *s = buf + p, *lf;
        Py_ssize_t avail = end - p, lim, li, j, k, ntok = 0, consumed;
        Tok t[MAX_TOKS];
        const Tok *subj = NULL, *reply = NULL, *sid = NULL, *queue = NULL;
        int op = -1, has_hdr = 0;
        int64_t hdr = -1, total = -1, max_msgs = -1;
        Py_ssize_t c1, c2;
        int64_t off0;

        if (avail <= 0) { status = NEED_MORE; break; }
        lim = avail < max_line + 2 ? avail : max_line + 2;
        lf = memchr(s, '\n', (size_t)lim);
        if (lf == NULL) { status = avail > max_line + 1 ? REFUSE : NEED_MORE; break; }
        li = lf - s;
        j = (li > 0 && s[li - 1] == '\r') ? li - 1 : li;
        if (j > max_line || j == 0 || s[0] == ' ' || s[0] == '\t' || !tok_is_ok(s, j)) {
            status = REFUSE;
            break;
        }
        /* split like parser.split_args (space, tab, CR; VT/FF refused above) */
        k = 0;
        while (k < j) {
            Py_ssize_t a;
            while (k < j && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
            if (k >= j) break;
            a = k;
            while (k < j && s[k] != ' ' && s[k] != '\t' && s[k] != '\r') k++;
            if (ntok == MAX_TOKS) { ntok = MAX_TOKS + 1; break; }
            t[ntok].p = s + a;
            t[ntok].n = k - a;
            ntok++;
        }
        if (ntok < 1 || ntok > MAX_TOKS) { status = REFUSE; break; }
        if (c2s) {
            if (verb_is(&t[0], "PUB") && (ntok == 3 || ntok == 4)) {
                op = OP_PUB; subj = &t[1]; reply = ntok == 4 ? &t[2] : NULL;
                total = parse_size(&t[ntok - 1]);
                if (total < 0) op = -1;
            } else if (verb_is(&t[0], "HPUB") && (ntok == 4 || ntok == 5)) {
                op = OP_HPUB; subj = &t[1]; reply = ntok == 5 ? &t[2] : NULL;
                hdr = parse_size(&t[ntok - 2]);
                total = parse_size(&t[ntok - 1]);
                if (hdr < 0 || total < 0 || hdr > total) op = -1;
                has_hdr = 1;
            } else if (verb_is(&t[0], "SUB") && (ntok == 3 || ntok == 4)) {
                op = OP_SUB; subj = &t[1]; queue = ntok == 4 ? &t[2] : NULL; sid = &t[ntok - 1];
            } else if (verb_is(&t[0], "UNSUB") && (ntok == 2 || ntok == 3)) {
                op = OP_UNSUB; sid = &t[1];
                if (ntok == 3) {
                    max_msgs = parse_size(&t[2]);
                    if (max_msgs < 0) op = -1;
                }
            } else if (ntok == 1 && verb_is(&t[0], "PING")) {
                op = OP_PING;
            } else if (ntok == 1 && verb_is(&t[0], "PONG")) {
                op = OP_PONG;
            }
        } else {
            if (verb_is(&t[0], "MSG") && (ntok == 4 || ntok == 5)) {
                op = OP_MSG; subj = &t[1]; sid = &t[2]; reply = ntok == 5 ? &t[3] : NULL;
                total = parse_size(&t[ntok - 1]);
                if (total < 0) op = -1;
            } else if (verb_is(&t[0], "HMSG") && (ntok == 5 || ntok == 6)) {
                op = OP_HMSG; subj = &t[1]; sid = &t[2]; reply = ntok == 6 ? &t[3] : NULL;
                hdr = parse_size(&t[ntok - 2]);
                total = parse_size(&t[ntok - 1]);
                if (hdr < 0 || total < 0 || hdr > total) op = -1;
                has_hdr = 1;
            } else if (ntok == 1 && verb_is(&t[0], "PING")) {
                op = OP_PING;
            } else if (ntok == 1 && verb_is(&t[0], "PONG")) {
                op = OP_PONG;
            } else if (ntok == 1 && verb_is(&t[0], "+OK")) {
                op = OP_OK;
            }
        }
        if (op < 0) { status = REFUSE; break; }
        if ((op == OP_PUB || op == OP_HPUB) && max_payload >= 0 && total > max_payload) {
            status = REFUSE; /* nats.max_payload_exceeded */
            break;
        }
        consumed = li + 1;
        if (total >= 0) {
            const uint8_t *body = s + li + 1;
            if (total > MAX_FAST_TOTAL) { status = REFUSE; break; }
            if (avail - (li + 1) < total + 2) {
                /* the reference settles a bare-LF trailer as soon as the LF is in */
                int lenient = avail - (li + 1) == total + 1 && body[total] == '\n';
                status = lenient ? REFUSE : NEED_MORE;
                if (!lenient) {
                    /* where the buffer must reach before this operation can give another
                     * answer (its payload and the first trailer byte are in) */
                    subject = PyLong_FromLongLong(base + p + li + 1 + total + 1);
                    if (subject == NULL) goto done;
                }
                break;
            }
            if (body[total] != '\r' || body[total + 1] != '\n') { status = REFUSE; break; }
            if (has_hdr) {
                if (header_cap >= 0 && hdr > header_cap) { status = REFUSE; break; }
                if (!parse_headers(body, hdr, &hdrs)) { status = REFUSE; break; }
            }
            if (verdicts != Py_None) {
                /* dispatch order: bindings first, then probes (dispatch.ScopeDispatcher) */
                Py_ssize_t plen = total - (has_hdr ? hdr : 0);
                const uint8_t *pl = body + (has_hdr ? hdr : 0);
                PyObject *key, *v;
                if (memo_v != NULL && memo_n == subj->n &&
                    memcmp(memo_p, subj->p, (size_t)subj->n) == 0) {
                    v = memo_v; /* the subject of the row before: its verdict again */
                } else {
                    key = PyUnicode_DecodeASCII((const char *)subj->p, subj->n, NULL);
                    if (key == NULL) goto done;
                    v = PyDict_GetItemWithError(verdicts, key);
                    if (v == NULL) {
                        if (PyErr_Occurred()) { Py_DECREF(key); goto done; }
                        subject = key;
                        status = NEED_VERDICT;
                        break;
                    }
                    Py_XSETREF(subj_str, key); /* (the subject of a carried message) */
                    /* borrowed: nothing but an offer changes the dict (str keys run no
                     * Python code), after which the memo is dropped */
                    memo_v = v;
                    memo_p = subj->p;
                    memo_n = subj->n;
                }
                if (v != Py_False) {
                    if (!carry || has_hdr) { status = REFUSE; break; }
                    carried = 1;
                } else if (plen > 0 && first != NULL && first[pl[0]] &&
                           !(cleared && rows == 0) &&
                           (first[pl[0]] == 3
                                ? prefix_claims(first + 256, nfirst - 256, pl, plen)
                                : first[pl[0]] == 1 || protobuf_ok(pl, plen))) {
                    if (first[pl[0]] == 3 || (carry == 2 && rows == 0)) {
                        /* claimed: by the probes' exact rule, or by the caller's probe */
                        if (!carry || has_hdr) { status = REFUSE; break; }
                        carried = 1;
                    } else {
                        subject = PyBytes_FromStringAndSize((const char *)pl, plen);
                        if (subject == NULL) goto done;
                        status = NEED_PROBE;
                        break;
                    }
                }
            }
            consumed = li + 1 + total + 2;
        }
        off0 = base + p;
        c1 = chunk_at(ch, nch, ci, off0);
        ci = c1;
        c2 = chunk_at(ch, nch, c1, off0 + consumed - 1);
        if (out != NULL) {
            Col *c = out->cols;
            const char *name = OP_NAMES[op];
            int payload_op = total >= 0;
            if (put_var(&c[C_OP], name, (Py_ssize_t)strlen(name)) < 0) goto done;
            if (tok_put(&c[C_SUBJECT], subj) < 0 || tok_put(&c[C_REPLY], reply) < 0 ||
                tok_put(&c[C_SID], sid) < 0 || tok_put(&c[C_QUEUE], queue) < 0)
                goto done;
            if ((max_msgs >= 0 ? put_i64(&c[C_MAX_MSGS], max_msgs)
                               : put_null(&c[C_MAX_MSGS], I64)) < 0)
                goto done;
            if ((has_hdr ? put_i64(&c[C_HDR_LEN], hdr) : put_null(&c[C_HDR_LEN], I64)) < 0)
                goto done;
            if (payload_op) {
                const uint8_t *pl = s + li + 1 + (has_hdr ? hdr : 0);
                int64_t plen = total - (has_hdr ? hdr : 0);
                int64_t keep = payload_cap >= 0 && plen > payload_cap ? payload_cap : plen;
                uint8_t d[32];
                char hex[64];
                int q;
                sha256_payload(pl, (size_t)plen, d);
                for (q = 0; q < 32; q++) {
                    hex[2 * q] = HEX[d[q] >> 4];
                    hex[2 * q + 1] = HEX[d[q] & 15];
                }
                if (put_i64(&c[C_PAY_LEN], plen) < 0 || put_var(&c[C_PAYLOAD], pl, keep) < 0 ||
                    put_u8(&c[C_TRUNC], keep < plen) < 0 || put_var(&c[C_SHA], hex, 64) < 0)
                    goto done;
            } else if (put_null(&c[C_PAY_LEN], I64) < 0 || put_null(&c[C_PAYLOAD], VAR) < 0 ||
                       put_null(&c[C_TRUNC], BOOL) < 0 || put_null(&c[C_SHA], VAR) < 0) {
                goto done;
            }
            if (has_hdr) {
                if (put_var(&c[C_HDR_RAW], s + li + 1, hdr) < 0) goto done;
                if ((hdrs.status >= 0 ? put_i32(&c[C_STATUS], hdrs.status)
                                      : put_null(&c[C_STATUS], I32)) < 0)
                    goto done;
                if ((hdrs.desc ? put_var(&c[C_STATUS_DESC], hdrs.desc, hdrs.dn)
                               : put_null(&c[C_STATUS_DESC], VAR)) < 0)
                    goto done;
                if (put_headers(out, &hdrs) < 0) goto done;
            } else if (put_null(&c[C_HDR_RAW], VAR) < 0 || put_null(&c[C_STATUS], I32) < 0 ||
                       put_null(&c[C_STATUS_DESC], VAR) < 0 || put_no_headers(out) < 0) {
                goto done;
            }
            if (op == OP_PUB || op == OP_HPUB) {
                if ((max_payload >= 0 ? put_u8(&c[C_MP_EXCEEDED], 0)
                                      : put_null(&c[C_MP_EXCEEDED], BOOL)) < 0)
                    goto done;
            } else if (put_null(&c[C_MP_EXCEEDED], BOOL) < 0) {
                goto done;
            }
            if (put_i64(&c[C_TS_FIRST], ch[c1].ts_first) < 0 ||
                put_i64(&c[C_TS_LAST], ch[c2].ts_last) < 0 ||
                put_i64(&c[C_FRAME_FIRST], ch[c1].frame_first) < 0 ||
                put_i64(&c[C_FRAME_LAST], ch[c2].frame_last) < 0 ||
                put_i64(&c[C_OFF_START], off0) < 0 ||
                put_i64(&c[C_OFF_END], off0 + consumed) < 0)
                goto done;
            out->nrows++;
        }
        rows++;
        p += consumed;
        if (carried && offered(total, carry_max, payload_cap)) {
            /* offered here (as the reference offers it: when it keeps the payload
             * whole), its records the children of the batch ending with its row; then on
             * with the next operation, as the caller would scan again (carry 1, not
             * cleared: this row was the first after a stop) */
            PyObject *kids = offer_message(
                offer, PyTuple_GET_ITEM(batch, 2), s + li + 1, (Py_ssize_t)total, op,
                subj_str, reply, sid, off0, off0 + consumed, ch[c1].ts_first,
                ch[c2].ts_last, ch[c1].frame_first, ch[c2].frame_last);
            if (kids == NULL) goto done;
            if (emit_batch(records, batch, rows - emitted, kids) < 0) {
                Py_DECREF(kids);
                goto done;
            }
            Py_DECREF(kids);
            emitted = rows;
            carry = 1;
            /* the offer may have changed the verdicts (a decode binds subjects): the
             * borrowed memo may be stale or gone */
            memo_v = NULL;
        }
        carried = 0;
    }
    if (rows > emitted) {
        PyObject *none = PyTuple_New(0); /* no children: () */
        int r = none == NULL ? -1 : emit_batch(records, batch, rows - emitted, none);
        Py_XDECREF(none);
        if (r < 0) goto done;
    }
    result = Py_BuildValue("innO", status, p, rows, subject ? subject : Py_None);
done:
    if (have_view) PyBuffer_Release(&view);
    if (ch != stackch) PyMem_Free(ch);
    Py_XDECREF(seq);
    Py_XDECREF(subject);
    Py_XDECREF(subj_str);
    return result;
}

/* ------------------------------------------------------------------ Columns methods */

static int copy_rows(Columns *dst, Columns *src, Py_ssize_t h, Py_ssize_t k) {
    int i;
    Py_ssize_t r;
    for (i = 0; i < N_SCANNED; i++) {
        Col *d = &dst->cols[i], *s = &src->cols[i];
        int kind = COL_KIND[i];
        if (kind == VAR) {
            int32_t *so = (int32_t *)s->off.p, a = so[h], b = so[h + k];
            int32_t shift = (int32_t)d->data.len - a;
            if (buf_put(&d->data, s->data.p + a, b - a) < 0) return -1;
            if (buf_reserve(&d->off, 4 * k) < 0) return -1;
            for (r = 1; r <= k; r++) {
                int32_t v = so[h + r] + shift;
                memcpy(d->off.p + d->off.len, &v, 4);
                d->off.len += 4;
            }
        } else {
            Py_ssize_t w = kind == I64 ? 8 : kind == I32 ? 4 : 1;
            if (buf_put(&d->data, s->data.p + h * w, k * w) < 0) return -1;
        }
        if (buf_put(&d->valid, s->valid.p + h, k) < 0) return -1;
    }
    {
        int32_t *ho = (int32_t *)src->h_off.p, *ko = (int32_t *)src->k_off.p;
        int32_t *lo = (int32_t *)src->l_off.p, *io = (int32_t *)src->i_off.p;
        int32_t k0 = ho[h], k1 = ho[h + k], i0 = lo[k0], i1 = lo[k1];
        int32_t kshift = (int32_t)dst->nkeys - k0, ishift = (int32_t)dst->nitems - i0;
        int32_t kd = (int32_t)dst->k_data.len - ko[k0], id = (int32_t)dst->i_data.len - io[i0];
        int32_t q, v;
        for (r = 1; r <= k; r++) { v = ho[h + r] + kshift; if (buf_i32(&dst->h_off, v) < 0) return -1; }
        if (buf_put(&dst->h_valid, src->h_valid.p + h, k) < 0) return -1;
        if (buf_put(&dst->k_data, src->k_data.p + ko[k0], ko[k1] - ko[k0]) < 0) return -1;
        for (q = k0 + 1; q <= k1; q++) {
            if (buf_i32(&dst->k_off, ko[q] + kd) < 0) return -1;
            if (buf_i32(&dst->l_off, lo[q] + ishift) < 0) return -1;
        }
        if (buf_put(&dst->i_data, src->i_data.p + io[i0], io[i1] - io[i0]) < 0) return -1;
        for (q = i0 + 1; q <= i1; q++)
            if (buf_i32(&dst->i_off, io[q] + id) < 0) return -1;
        dst->nkeys += k1 - k0;
        dst->nitems += i1 - i0;
    }
    return 0;
}

/* k values of one envelope column at once (Columns.move): reserve, then plain stores */
static int fill_valid(Col *col, int valid, Py_ssize_t k) {
    if (buf_reserve(&col->valid, k) < 0) return -1;
    memset(col->valid.p + col->valid.len, valid, (size_t)k);
    col->valid.len += k;
    return 0;
}
static int fill_i64(Col *col, int64_t v, Py_ssize_t k, int valid) {
    Py_ssize_t r;
    int64_t *d;
    if (!valid) v = 0; /* a null's value bytes are zeros (put_null) */
    if (buf_reserve(&col->data, 8 * k) < 0) return -1;
    d = (int64_t *)(col->data.p + col->data.len);
    for (r = 0; r < k; r++) d[r] = v;
    col->data.len += 8 * k;
    return fill_valid(col, valid, k);
}
static int fill_i32(Col *col, int32_t v, Py_ssize_t k) {
    Py_ssize_t r;
    int32_t *d;
    if (buf_reserve(&col->data, 4 * k) < 0) return -1;
    d = (int32_t *)(col->data.p + col->data.len);
    for (r = 0; r < k; r++) d[r] = v;
    col->data.len += 4 * k;
    return fill_valid(col, 1, k);
}
static int fill_bytes(Col *col, uint8_t v, Py_ssize_t k) {
    if (buf_reserve(&col->data, k) < 0) return -1;
    memset(col->data.p + col->data.len, v, (size_t)k);
    col->data.len += k;
    return fill_valid(col, 1, k);
}
static int fill_var(Col *col, const char *p, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t r;
    int32_t *o, end = (int32_t)col->data.len;
    char *d;
    if (buf_reserve(&col->data, n * k) < 0 || buf_reserve(&col->off, 4 * k) < 0) return -1;
    d = col->data.p + col->data.len;
    o = (int32_t *)(col->off.p + col->off.len);
    for (r = 0; r < k; r++) {
        memcpy(d + r * n, p, (size_t)n);
        o[r] = end + (int32_t)((r + 1) * n);
    }
    col->data.len += n * k;
    col->off.len += 4 * k;
    return fill_valid(col, 1, k);
}

static void consume(Columns *src, Py_ssize_t k) {
    src->head += k;
    if (src->head >= src->nrows) columns_reset(src);
}

/* an int argument of move() in range of a C int, as PyArg_ParseTuple's "i" */
static int arg_int(PyObject *o, int *out) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "move: argument out of range of a C int");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* move(src, k, flow_id, record_id, direction, stream_id, src_ip, src_port, dst_ip, dst_port)
 * appends the k oldest rows of src (a session's scan buffer) with their envelope.
 * (METH_FASTCALL, each argument read directly: the conveyor calls it for every batch of
 * every flow, and PyArg_ParseTuple's format walk cost ~5,000 instructions a call, about
 * 1.4 % of a STAN capture's run.) */
static PyObject *columns_move(Columns *self, PyObject *const *args, Py_ssize_t nargs) {
    Columns *src;
    Py_ssize_t k, r;
    long long flow_id, rid;
    int direction, src_port, dst_port;
    PyObject *stream_obj;
    const char *sip, *dip;
    Py_ssize_t sipn, dipn;
    int64_t stream_id = 0;
    Col *c = self->cols;
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "move() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &ColumnsType)) {
        PyErr_SetString(PyExc_TypeError, "move: the source must be a Columns");
        return NULL;
    }
    if (!PyUnicode_Check(args[6]) || !PyUnicode_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "move: the addresses must be str");
        return NULL;
    }
    src = (Columns *)args[0];
    stream_obj = args[5];
    k = PyLong_AsSsize_t(args[1]);
    if (k == -1 && PyErr_Occurred()) return NULL;
    flow_id = PyLong_AsLongLong(args[2]);
    if (flow_id == -1 && PyErr_Occurred()) return NULL;
    rid = PyLong_AsLongLong(args[3]);
    if (rid == -1 && PyErr_Occurred()) return NULL;
    if (arg_int(args[4], &direction) < 0 || arg_int(args[7], &src_port) < 0 ||
        arg_int(args[9], &dst_port) < 0)
        return NULL;
    sip = PyUnicode_AsUTF8AndSize(args[6], &sipn);
    if (sip == NULL) return NULL;
    dip = PyUnicode_AsUTF8AndSize(args[8], &dipn);
    if (dip == NULL) return NULL;
    if (k < 0 || src->head + k > src->nrows) {
        PyErr_SetString(PyExc_ValueError, "move: more rows than buffered");
        return NULL;
    }
    if (stream_obj != Py_None) {
        stream_id = PyLong_AsLongLong(stream_obj);
        if (stream_id == -1 && PyErr_Occurred()) return NULL;
    }
    if (copy_rows(self, src, src->head, k) < 0) return NULL;
    /* the envelope is the same for the k rows (but the record id): filled a column at a
     * time, with one reservation each, not k rows of eight appends */
    {
        int64_t *ids;
        if (fill_i64(&c[C_FLOW_ID], flow_id, k, 1) < 0 ||
            fill_i64(&c[C_STREAM_ID], stream_id, k, stream_obj != Py_None) < 0 ||
            fill_bytes(&c[C_DIRECTION], (uint8_t)direction, k) < 0 ||
            fill_i32(&c[C_SRC_PORT], src_port, k) < 0 || fill_i32(&c[C_DST_PORT], dst_port, k) < 0 ||
            fill_var(&c[C_SRC_IP], sip, sipn, k) < 0 || fill_var(&c[C_DST_IP], dip, dipn, k) < 0 ||
            fill_i64(&c[C_RECORD_ID], 0, k, 1) < 0)
            return NULL;
        ids = (int64_t *)(c[C_RECORD_ID].data.p + c[C_RECORD_ID].data.len) - k;
        for (r = 0; r < k; r++) ids[r] = rid + r;
    }
    self->nrows += k;
    consume(src, k);
    Py_RETURN_NONE;
}

/* skip(k): drop the k oldest rows (rows of a flow this process does not write) */
static PyObject *columns_skip(Columns *self, PyObject *args) {
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "n", &k)) return NULL;
    if (k < 0 || self->head + k > self->nrows) {
        PyErr_SetString(PyExc_ValueError, "skip: more rows than buffered");
        return NULL;
    }
    consume(self, k);
    Py_RETURN_NONE;
}

static PyObject *bitmap(const Buf *valid, Py_ssize_t n, Py_ssize_t *nulls) {
    /* one byte per row -> Arrow's LSB-first bitmap; None when nothing is null */
    PyObject *b;
    uint8_t *d;
    Py_ssize_t i, z = 0;
    const uint8_t *v = (const uint8_t *)valid->p;
    for (i = 0; i < n; i++) z += !v[i];
    *nulls = z;
    if (z == 0) Py_RETURN_NONE;
    b = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (b == NULL) return NULL;
    d = (uint8_t *)PyBytes_AS_STRING(b);
    memset(d, 0, (size_t)(n + 7) / 8);
    for (i = 0; i < n; i++)
        if (v[i]) d[i >> 3] |= (uint8_t)(1u << (i & 7));
    return b;
}

/* export() hands the column buffers over instead of copying them (a flush is ~all of
 * the rows' bytes): an Owned object keeps the memory alive behind the buffer protocol
 * for as long as Arrow holds it, and the Columns starts again with empty buffers. */
typedef struct { PyObject_HEAD char *p; Py_ssize_t len, cap; } Owned;

static int owned_getbuffer(Owned *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len, 1, flags);
}
static void owned_dealloc(Owned *self) {
    mem_free(self->p, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}
static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};
static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dissectors.nats._speedups.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory handed over by Columns.export() (buffer protocol, read-only).",
    .tp_as_buffer = &owned_as_buffer,
};

static PyObject *bytes_of(Buf *b) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (o == NULL) return NULL;
    if (b->p == NULL && (b->p = PyMem_Malloc(8)) == NULL) { /* never a NULL Py_buffer */
        Py_DECREF(o);
        return PyErr_NoMemory();
    }
    o->p = b->p;
    o->len = b->len;
    o->cap = b->cap;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

/* export() -> (nrows, {column: buffers}); the buffers, then an empty Columns.
 * VAR: (validity, nulls, offsets, data); I64/I32/U8: (validity, nulls, data);
 * BOOL: (validity, nulls, value bitmap); "headers": (validity, nulls, row offsets,
 * key offsets, key data, value-list offsets, item offsets, item data). */
static PyObject *columns_export(Columns *self, PyObject *unused) {
    PyObject *d = PyDict_New(), *t = NULL, *res = NULL;
    Py_ssize_t n = self->nrows, nulls, i, sizes[NCOLS][3];
    int c;
    if (d == NULL) return NULL;
    for (c = 0; c < NCOLS; c++) {
        sizes[c][0] = self->cols[c].data.len;
        sizes[c][1] = self->cols[c].off.len;
        sizes[c][2] = self->cols[c].valid.len;
    }
    if (self->head) {
        PyErr_SetString(PyExc_ValueError, "export of a partly moved buffer");
        goto fail;
    }
    for (c = 0; c < NCOLS; c++) {
        Col *col = &self->cols[c];
        PyObject *valid;
        if (col->valid.len != n) continue; /* envelope of a scan buffer: not filled */
        valid = bitmap(&col->valid, n, &nulls);
        if (valid == NULL) goto fail;
        if (COL_KIND[c] == VAR) {
            t = Py_BuildValue("(NnNN)", valid, nulls, bytes_of(&col->off), bytes_of(&col->data));
        } else if (COL_KIND[c] == BOOL) {
            Buf vals = col->data;
            Py_ssize_t dummy;
            PyObject *bits = bitmap(&vals, n, &dummy);
            if (bits == Py_None) { /* all true */
                Py_DECREF(bits);
                bits = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
                if (bits) memset(PyBytes_AS_STRING(bits), 0xff, (size_t)(n + 7) / 8);
            }
            if (bits == NULL) { Py_DECREF(valid); goto fail; }
            t = Py_BuildValue("(NnN)", valid, nulls, bits);
        } else {
            t = Py_BuildValue("(NnN)", valid, nulls, bytes_of(&col->data));
        }
        if (t == NULL || PyDict_SetItemString(d, COL_NAMES[c], t) < 0) goto fail;
        Py_CLEAR(t);
    }
    {
        PyObject *valid = bitmap(&self->h_valid, n, &nulls);
        if (valid == NULL) goto fail;
        t = Py_BuildValue("(NnNNNNNN)", valid, nulls, bytes_of(&self->h_off),
                          bytes_of(&self->k_off), bytes_of(&self->k_data),
                          bytes_of(&self->l_off), bytes_of(&self->i_off),
                          bytes_of(&self->i_data));
        if (t == NULL || PyDict_SetItemString(d, "headers", t) < 0) goto fail;
        Py_CLEAR(t);
    }
    (void)i;
    res = Py_BuildValue("(nN)", n, d);
    columns_reset(self);
    /* the next batch is likely as large as this one: its buffers are reserved at this
     * one's sizes now, rather than grown from nothing by doubling (a copy each time) */
    if (res != NULL) {
        for (c = 0; c < NCOLS; c++) {
            Col *col = &self->cols[c];
            if (buf_reserve(&col->data, sizes[c][0]) < 0 ||
                buf_reserve(&col->off, sizes[c][1]) < 0 ||
                buf_reserve(&col->valid, sizes[c][2]) < 0) {
                PyErr_Clear(); /* (no memory for it now: the buffers grow as they fill) */
                break;
            }
        }
    }
    return res;
fail:
    Py_XDECREF(t);
    Py_DECREF(d);
    return NULL;
}

static Py_ssize_t columns_len(Columns *self) { return self->nrows - self->head; }

static PyObject *columns_nbytes(Columns *self, void *closure) {
    Py_ssize_t n = self->k_data.len + self->i_data.len;
    int c;
    for (c = 0; c < NCOLS; c++) n += self->cols[c].data.len;
    return PyLong_FromSsize_t(n);
}

static PyMethodDef columns_methods[] = {
    {"move", (PyCFunction)(void (*)(void))columns_move, METH_FASTCALL,
     "move(src, k, flow_id, record_id, direction, stream_id, src_ip, src_port, dst_ip, "
     "dst_port): append the k oldest rows of src with their envelope"},
    {"skip", (PyCFunction)columns_skip, METH_VARARGS, "skip(k): drop the k oldest rows"},
    {"export", (PyCFunction)columns_export, METH_NOARGS,
     "export() -> (nrows, {column: buffers}), then empty"},
    {NULL}};

static PyGetSetDef columns_getset[] = {
    {"nbytes", (getter)columns_nbytes, NULL, "bytes held in column data", NULL}, {NULL}};

static PySequenceMethods columns_seq = {.sq_length = (lenfunc)columns_len};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dissectors.nats._speedups.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_dealloc = (destructor)columns_dealloc,
    /* (a base type: fastpath._Accumulator adds to_batch and keeps len, nbytes and move
     * the C type's own, which the conveyor asks after every batch it moves) */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Growable column buffers of nats rows (see module docstring).",
    .tp_methods = columns_methods,
    .tp_getset = columns_getset,
    .tp_as_sequence = &columns_seq,
    .tp_new = columns_new,
};

static PyMethodDef module_methods[] = {
    {"scan_with", (PyCFunction)(void (*)(void))py_scan_with, METH_FASTCALL,
     "scan_with(config, buf, pos, base, chunks, cleared, carry, records): parse ordinary "
     "NATS operations into a Columns, the arguments that do not change between calls in "
     "one tuple (see the source)"},
    {"use_openssl", py_use_openssl, METH_VARARGS,
     "use_openssl(init, update, final): addresses of libcrypto's SHA256_* (0s: portable)"},
    {"sha256_hex", py_sha256_hex, METH_VARARGS, "sha256_hex(data, portable=False) -> hex"},
    {"reuse_stats", py_reuse_stats, METH_NOARGS,
     "reuse_stats() -> (hits, misses, hit bytes, missed bytes) of the digests of payloads "
     ">= REUSE_MIN bytes: taken from an equal kept payload, or hashed"},
    {"region_stats", py_region_stats, METH_NOARGS,
     "region_stats() -> (mapped, reused, pooled, pooled bytes): the big column buffers' "
     "regions mapped and taken from the pool so far, and the pool now"},
    {"protobuf_ok", py_protobuf_ok, METH_VARARGS,
     "protobuf_ok(data) -> dissectors.proto.wire.scan(data) is not None"},
    {NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "dissectors.nats._speedups",
    "Compiled fast path of the NATS dissector (reference: dissectors.nats.session).", -1,
    module_methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *m;
    int k;
    if (PyType_Ready(&ColumnsType) < 0 || PyType_Ready(&OwnedType) < 0) return NULL;
    if (S_NATS == NULL) { /* (S_NATS last: a failed first import is made again whole) */
        for (k = 0; k < (int)Py_ARRAY_LENGTH(S_OPS); k++) {
            if (S_OPS[k] == NULL) S_OPS[k] = PyUnicode_InternFromString(OP_NAMES[k]);
            if (S_OPS[k] == NULL) return NULL;
        }
        S_NATS = PyUnicode_InternFromString("nats");
        if (S_NATS == NULL) return NULL;
    }
    m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(&ColumnsType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "NEED_MORE", NEED_MORE);
    PyModule_AddIntConstant(m, "REFUSE", REFUSE);
    PyModule_AddIntConstant(m, "NEED_VERDICT", NEED_VERDICT);
    PyModule_AddIntConstant(m, "NEED_PROBE", NEED_PROBE);
    PyModule_AddIntConstant(m, "MAX_FAST_TOTAL", MAX_FAST_TOTAL);
    return m;
}
