/* dissectors/proto/_wire.h: the protobuf wire pieces every compiled reader shares.
 *
 * Why a header: three extensions read protobuf (the NATS scan's well-formedness check,
 * Pulsar's clean decode, the STAN/Liftbridge walk), and each is its own module (no
 * linking between them), so one static copy is compiled into each from here.  What they
 * mirror is dissectors.proto.wire, the reference: a varint has at most 10 bytes and keeps
 * the low 64 bits; a scalar is what the reader's ``_scalar`` makes of it.
 */
#ifndef MSGCAP_PROTO_WIRE_H
#define MSGCAP_PROTO_WIRE_H

#include <Python.h>
#include <stdint.h>

/* wire.Kind's numbers */
enum { K_STRING, K_BYTES, K_INT32, K_INT64, K_UINT32, K_UINT64, K_BOOL, K_ENUM, K_MESSAGE,
       K_MAP };

/* A varint at buf[*pos] before end (at most 10 bytes, bits past 64 dropped, as the
 * reader); *pos moves past it.  0 (and *pos unchanged) when cut short or longer. */
static inline int pb_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out)
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

/* A length-delimited value at buf[*pos] (its length varint, then that many bytes, all
 * before end): its start and length, *pos moved past it.  0 (and *pos somewhere inside)
 * when the length is cut short, too long, or runs past end. */
static inline int pb_bytes(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end,
                           Py_ssize_t *start, Py_ssize_t *len)
{
    uint64_t n;
    if (!pb_varint(buf, pos, end, &n) || n > (uint64_t)(end - *pos))
        return 0;
    *start = *pos;
    *len = (Py_ssize_t)n;
    *pos += (Py_ssize_t)n;
    return 1;
}

/* The tag at buf[*pos]: its field number and wire type.  0 when the tag is cut short or
 * too long, or its number is 0 or not below ``limit`` (a field the caller's table, indexed
 * by field number, cannot name). */
static inline int pb_tag(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t limit,
                         Py_ssize_t *number, int *wt)
{
    uint64_t tag;
    if (!pb_varint(buf, pos, end, &tag))
        return 0;
    uint64_t n = tag >> 3;
    if (n == 0 || n >= (uint64_t)limit)
        return 0;
    *number = (Py_ssize_t)n;
    *wt = (int)(tag & 7);
    return 1;
}

/* A varint field's value as the reader's _scalar makes it (an enum as its number). */
static inline PyObject *pb_scalar(long kind, uint64_t v)
{
    switch (kind) {
    case K_INT32:
    case K_ENUM:
        return PyLong_FromLong((long)(int32_t)(uint32_t)v);
    case K_INT64:
        return PyLong_FromLongLong((long long)(int64_t)v);
    case K_UINT32:
        return PyLong_FromUnsignedLong((unsigned long)(v & 0xFFFFFFFFu));
    case K_BOOL:
        return PyBool_FromLong(v != 0);
    default: /* K_UINT64 */
        return PyLong_FromUnsignedLongLong(v);
    }
}

#endif
