"""RESP (REdis Serialization Protocol) building blocks: pure functions, no state.

Spec: https://redis.io/docs/latest/develop/reference/protocol-spec/ (RESP2 and RESP3).
Client behaviour follows the Redis server source (``networking.c``: a request starting
with ``*`` is a multibulk command, anything else an *inline* command split by
``sdssplitargs`` in ``sds.c``).
"""

from __future__ import annotations

from enum import IntEnum

from dissectors.api import Direction, Verdict

__all__ = [
    "AGGREGATE_TYPES",
    "ARITY",
    "BULK_TYPES",
    "LENGTH_TYPES",
    "MAX_AGGREGATE",
    "MAX_BULK_BYTES",
    "RespType",
    "TYPE_NAMES",
    "arity_ok",
    "parse_int",
    "probe",
    "resync_c2s",
    "resync_s2c",
    "split_inline",
]


class RespType(IntEnum):
    """The first byte of every RESP value (spec, "RESP protocol description")."""

    SIMPLE_STRING = ord("+")
    SIMPLE_ERROR = ord("-")
    INTEGER = ord(":")
    BULK_STRING = ord("$")
    ARRAY = ord("*")
    NULL = ord("_")  # RESP3
    BOOLEAN = ord("#")  # RESP3
    DOUBLE = ord(",")  # RESP3
    BIG_NUMBER = ord("(")  # RESP3
    BULK_ERROR = ord("!")  # RESP3
    VERBATIM_STRING = ord("=")  # RESP3
    MAP = ord("%")  # RESP3
    ATTRIBUTE = ord("|")  # RESP3
    SET = ord("~")  # RESP3
    PUSH = ord(">")  # RESP3


TYPE_NAMES = {t.value: t.name.lower() for t in RespType}
# types whose header gives a byte length followed by that many bytes and CRLF
BULK_TYPES = frozenset((RespType.BULK_STRING, RespType.BULK_ERROR, RespType.VERBATIM_STRING))
# types whose header gives an element count (map and attribute: pairs)
AGGREGATE_TYPES = frozenset(
    (RespType.ARRAY, RespType.MAP, RespType.ATTRIBUTE, RespType.SET, RespType.PUSH)
)
LENGTH_TYPES = BULK_TYPES | AGGREGATE_TYPES

# Redis's default proto-max-bulk-len: the server refuses longer bulk strings.
MAX_BULK_BYTES = 512 * 1024 * 1024
# Redis refuses multibulk requests with more than INT_MAX elements (networking.c);
# replies are bounded by the same in practice.  Counts are only counted, never allocated.
MAX_AGGREGATE = 2**31 - 1

# Command arity as in Redis's COMMAND table: n > 0 exactly n words including the name,
# n < 0 at least -n.  Used to tell an inline Redis command from other text protocols
# (an HTTP "GET / HTTP/1.1" has the wrong arity for GET).
ARITY: dict[bytes, int] = {
    # keys and strings
    b"GET": 2, b"SET": -3, b"SETNX": 3, b"SETEX": 4, b"PSETEX": 4, b"APPEND": 3,
    b"STRLEN": 2, b"DEL": -2, b"UNLINK": -2, b"EXISTS": -2, b"INCR": 2, b"DECR": 2,
    b"INCRBY": 3, b"DECRBY": 3, b"INCRBYFLOAT": 3, b"MGET": -2, b"MSET": -3,
    b"MSETNX": -3, b"GETSET": 3, b"GETDEL": 2, b"GETEX": -2, b"GETRANGE": 4,
    b"SETRANGE": 4, b"EXPIRE": -3, b"PEXPIRE": -3, b"EXPIREAT": -3, b"PEXPIREAT": -3,
    b"TTL": 2, b"PTTL": 2, b"PERSIST": 2, b"TYPE": 2, b"KEYS": 2, b"SCAN": -2,
    b"RENAME": 3, b"RENAMENX": 3, b"RANDOMKEY": 1, b"DBSIZE": 1, b"SELECT": 2, b"MOVE": 3,
    b"COPY": -3, b"DUMP": 2, b"RESTORE": -4, b"OBJECT": -2, b"TOUCH": -2, b"SORT": -2,
    b"SORT_RO": -2, b"SWAPDB": 3,
    # hashes
    b"HSET": -4, b"HSETNX": 4, b"HGET": 3, b"HMSET": -4, b"HMGET": -3, b"HDEL": -3,
    b"HLEN": 2, b"HSTRLEN": 3, b"HEXISTS": 3, b"HKEYS": 2, b"HVALS": 2, b"HGETALL": 2,
    b"HINCRBY": 4, b"HINCRBYFLOAT": 4, b"HSCAN": -3, b"HRANDFIELD": -2,
    # lists
    b"LPUSH": -3, b"RPUSH": -3, b"LPUSHX": -3, b"RPUSHX": -3, b"LPOP": -2, b"RPOP": -2,
    b"BLPOP": -3, b"BRPOP": -3, b"LLEN": 2, b"LRANGE": 4, b"LINDEX": 3, b"LSET": 4,
    b"LREM": 4, b"LTRIM": 4, b"LINSERT": 5, b"LPOS": -3, b"LMOVE": 5, b"BLMOVE": 6,
    b"RPOPLPUSH": 3, b"BRPOPLPUSH": 4, b"LMPOP": -4, b"BLMPOP": -5,
    # sets
    b"SADD": -3, b"SREM": -3, b"SMEMBERS": 2, b"SISMEMBER": 3, b"SMISMEMBER": -3,
    b"SCARD": 2, b"SPOP": -2, b"SRANDMEMBER": -2, b"SMOVE": 4, b"SINTER": -2,
    b"SINTERSTORE": -3, b"SUNION": -2, b"SUNIONSTORE": -3, b"SDIFF": -2, b"SDIFFSTORE": -3,
    b"SSCAN": -3, b"SINTERCARD": -3,
    # sorted sets
    b"ZADD": -4, b"ZREM": -3, b"ZSCORE": 3, b"ZINCRBY": 4, b"ZCARD": 2, b"ZCOUNT": 4,
    b"ZRANGE": -4, b"ZREVRANGE": -4, b"ZRANGEBYSCORE": -4, b"ZREVRANGEBYSCORE": -4,
    b"ZRANK": -3, b"ZREVRANK": -3, b"ZREMRANGEBYRANK": 4, b"ZREMRANGEBYSCORE": 4,
    b"ZPOPMIN": -2, b"ZPOPMAX": -2, b"BZPOPMIN": -3, b"BZPOPMAX": -3, b"ZSCAN": -3,
    b"ZMSCORE": -3, b"ZUNIONSTORE": -4, b"ZINTERSTORE": -4, b"ZRANGESTORE": -5,
    b"ZLEXCOUNT": 4, b"ZRANGEBYLEX": -4,
    # streams, hyperloglog, bitmaps, geo
    b"XADD": -5, b"XRANGE": -4, b"XREVRANGE": -4, b"XLEN": 2, b"XREAD": -4,
    b"XREADGROUP": -7, b"XGROUP": -2, b"XACK": -4, b"XPENDING": -3, b"XCLAIM": -6,
    b"XAUTOCLAIM": -6, b"XTRIM": -4, b"XDEL": -3, b"XINFO": -2, b"PFADD": -2,
    b"PFCOUNT": -2, b"PFMERGE": -2, b"SETBIT": 4, b"GETBIT": 3, b"BITCOUNT": -2,
    b"BITOP": -4, b"BITPOS": -3, b"BITFIELD": -2, b"GEOADD": -5, b"GEODIST": -4,
    b"GEOPOS": -2, b"GEOSEARCH": -7, b"GEORADIUS": -6,
    # pub/sub
    b"PUBLISH": 3, b"SPUBLISH": 3, b"SUBSCRIBE": -2, b"UNSUBSCRIBE": -1,
    b"PSUBSCRIBE": -2, b"PUNSUBSCRIBE": -1, b"SSUBSCRIBE": -2, b"SUNSUBSCRIBE": -1,
    b"PUBSUB": -2,
    # transactions and scripting
    b"MULTI": 1, b"EXEC": 1, b"DISCARD": 1, b"WATCH": -2, b"UNWATCH": 1, b"EVAL": -3,
    b"EVALSHA": -3, b"EVAL_RO": -3, b"EVALSHA_RO": -3, b"SCRIPT": -2, b"FCALL": -3,
    b"FCALL_RO": -3, b"FUNCTION": -2,
    # connection and server
    b"PING": -1, b"ECHO": 2, b"QUIT": -1, b"RESET": 1, b"AUTH": -2, b"HELLO": -1,
    b"CLIENT": -2, b"INFO": -1, b"CONFIG": -2, b"COMMAND": -1, b"TIME": 1,
    b"LASTSAVE": 1, b"SAVE": 1, b"BGSAVE": -1, b"BGREWRITEAOF": 1, b"FLUSHDB": -1,
    b"FLUSHALL": -1, b"DEBUG": -2, b"MONITOR": 1, b"SLOWLOG": -2, b"MEMORY": -2,
    b"LATENCY": -2, b"ROLE": 1, b"REPLICAOF": 3, b"SLAVEOF": 3, b"SYNC": 1, b"PSYNC": -3,
    b"REPLCONF": -1, b"WAIT": 3, b"WAITAOF": 4, b"CLUSTER": -2, b"READONLY": 1,
    b"READWRITE": 1, b"ASKING": 1, b"SHUTDOWN": -1, b"ACL": -2, b"MODULE": -2,
    b"LOLWUT": -1,
}
_LONGEST_COMMAND = max(map(len, ARITY))


def arity_ok(name: bytes, nwords: int) -> bool:
    """Whether ``nwords`` words (name included) fit the arity of known command ``name``."""
    a = ARITY.get(name.upper())
    if a is None:
        return False
    return nwords == a if a > 0 else nwords >= -a


def parse_int(raw: bytes) -> int | None:
    """A RESP integer (``[+-]?digits``, no spaces), or None."""
    if not raw or len(raw) > 21:
        return None
    body = raw[1:] if raw[:1] in (b"-", b"+") else raw
    if not body.isdigit():
        return None
    return int(raw)


# ---------------------------------------------------------------- inline commands

_SPACE = b" \n\r\t\x00"  # what ends an unquoted word in sdssplitargs (plus end of line)
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_HEX = b"0123456789abcdefABCDEF"


def split_inline(line: bytes) -> list[bytes] | None:
    """Words of an inline command, as Redis's ``sdssplitargs`` splits them: blanks
    separate words; ``"..."`` allows ``\\n \\r \\t \\b \\a \\xHH`` and ``\\<c>`` escapes;
    ``'...'`` allows ``\\'``; a closing quote must be followed by a blank or the end.
    None for unbalanced quotes (Redis: "Protocol error: unbalanced quotes in request")."""
    words: list[bytes] = []
    line = line.split(b"\x00", 1)[0]  # C string: a NUL ends the line for Redis
    n = len(line)
    i = 0
    while True:
        while i < n and line[i] in b" \n\r\t\x0b\x0c":
            i += 1
        if i >= n:
            return words
        cur = bytearray()
        inq = insq = False
        while True:
            c = line[i] if i < n else None
            if inq:
                if c is None:
                    return None
                if (c == 0x5C and i + 3 < n and line[i + 1] == ord("x")
                        and line[i + 2] in _HEX and line[i + 3] in _HEX):
                    cur.append(int(line[i + 2 : i + 4], 16))
                    i += 4
                    continue
                if c == 0x5C and i + 1 < n:
                    e = line[i + 1]
                    cur.append(_ESCAPES.get(e, e))
                    i += 2
                    continue
                if c == ord('"'):
                    if i + 1 < n and line[i + 1] not in b" \n\r\t\x0b\x0c":
                        return None
                    i += 1
                    break
                cur.append(c)
                i += 1
            elif insq:
                if c is None:
                    return None
                if c == 0x5C and i + 1 < n and line[i + 1] == ord("'"):
                    cur.append(ord("'"))
                    i += 2
                    continue
                if c == ord("'"):
                    if i + 1 < n and line[i + 1] not in b" \n\r\t\x0b\x0c":
                        return None
                    i += 1
                    break
                cur.append(c)
                i += 1
            else:
                if c is None or c in _SPACE:
                    break
                if c == ord('"'):
                    inq = True
                elif c == ord("'"):
                    insq = True
                else:
                    cur.append(c)
                i += 1
        words.append(bytes(cur))


# -------------------------------------------------------------------------- probe

_CRLF = b"\r\n"


def _probe_multibulk(prefix: bytes) -> Verdict:
    """``*N CRLF $M CRLF name CRLF``: a Redis request (or a RESP2 push)."""
    i = prefix.find(_CRLF)
    if i < 0:
        head = prefix[1:]
        ok = not head or head.isdigit()
        return Verdict.NEED_MORE if len(prefix) < 12 and ok else Verdict.NO
    count = parse_int(prefix[1:i])
    if count is None or not 1 <= count <= 1024 * 1024:
        return Verdict.NO
    rest = prefix[i + 2 :]
    if not rest:
        return Verdict.NEED_MORE
    if rest[:1] != b"$":
        return Verdict.NO
    j = rest.find(_CRLF)
    if j < 0:
        return Verdict.NEED_MORE if len(rest) < 12 and rest[1:].isdigit() else Verdict.NO
    size = parse_int(rest[1:j])
    if size is None or not 1 <= size <= 1024:
        return Verdict.NO
    body = rest[j + 2 :]
    if len(body) < size + 2:
        return Verdict.NEED_MORE
    return Verdict.YES if body[size : size + 2] == _CRLF else Verdict.NO


def _probe_inline(prefix: bytes) -> Verdict:
    end = prefix.find(b"\n")
    if end < 0:
        word = prefix.split(b" ", 1)[0].upper()
        if b" " not in prefix:
            if len(word) <= _LONGEST_COMMAND and any(c.startswith(word) for c in ARITY):
                return Verdict.NEED_MORE
            return Verdict.NO
        return Verdict.NEED_MORE if word in ARITY and len(prefix) < 1024 else Verdict.NO
    line = prefix[:end].rstrip(b"\r")
    if b"HTTP/" in line:
        return Verdict.NO
    words = split_inline(line)
    if not words or not arity_ok(words[0], len(words)):
        return Verdict.NO
    if words[0].upper() == b"GET" and (words[1].startswith(b"/") or b"://" in words[1]):
        return Verdict.NO  # an HTTP/0.9-style "GET /path" request, not a Redis key
    return Verdict.YES


_S2C_FIRST = frozenset(t.value for t in RespType)


def probe(direction: Direction, prefix: bytes) -> Verdict:
    """Client side: a multibulk request or an inline command with a known name and a
    fitting arity.  Server side: only an array of bulk strings (a pub/sub push) is proof;
    other RESP values (``+OK``, ``:1``) are too common in other protocols to say yes
    alone, so they wait for the client side; a non-RESP first byte is a no."""
    if not prefix:
        return Verdict.NEED_MORE
    first = prefix[0]
    if direction == Direction.C2S:
        if first == RespType.ARRAY:
            return _probe_multibulk(prefix)
        if not (0x41 <= first <= 0x5A or 0x61 <= first <= 0x7A):
            return Verdict.NO
        return _probe_inline(prefix)
    if first not in _S2C_FIRST:
        return Verdict.NO
    end = prefix.find(b"\n")
    if end < 0:
        return Verdict.NEED_MORE if len(prefix) < 1024 else Verdict.NO
    if prefix[end - 1 : end] != b"\r":
        return Verdict.NO  # RESP always ends lines with CRLF
    if first in LENGTH_TYPES or first in (RespType.INTEGER, RespType.DOUBLE):
        body = prefix[1 : end - 1]
        if parse_int(body) is None and body not in (b"?", b"inf", b"-inf", b"nan"):
            try:
                float(body)
            except ValueError:
                return Verdict.NO
    is_array = first in (RespType.ARRAY, RespType.PUSH)
    if is_array and _probe_multibulk(b"*" + prefix[1:]) == Verdict.YES:
        return Verdict.YES  # an array of bulk strings: a pub/sub message
    return Verdict.NEED_MORE


# ------------------------------------------------------------------------- resync


def _resync(buf: bytes, prev_byte: int | None, plausible) -> tuple[int, bool]:
    """Next line start (after an LF) whose first bytes ``plausible`` accepts."""
    pos = 0 if prev_byte == 0x0A else None
    n = len(buf)
    while True:
        if pos is None:
            lf = buf.find(b"\n")
            if lf < 0:
                return n, False
            pos = lf + 1
        if pos >= n:
            return pos, False
        verdict = plausible(buf, pos)
        if verdict is None:
            return pos, False  # cannot tell yet: keep the candidate buffered
        if verdict:
            return pos, True
        lf = buf.find(b"\n", pos)
        if lf < 0:
            return n, False
        pos = lf + 1


def _plausible_s2c(buf: bytes, pos: int) -> bool | None:
    c = buf[pos]
    if c not in _S2C_FIRST:
        return False
    if pos + 1 >= len(buf):
        return None
    nxt = buf[pos + 1]
    if c in LENGTH_TYPES:
        return 0x30 <= nxt <= 0x39 or nxt in b"-?"
    if c in (RespType.INTEGER, RespType.BIG_NUMBER, RespType.DOUBLE):
        return 0x30 <= nxt <= 0x39 or nxt in b"-+in"
    if c == RespType.NULL:
        return nxt == 0x0D
    if c == RespType.BOOLEAN:
        return nxt in b"tf"
    return True  # simple string / error: any text


def _plausible_c2s(buf: bytes, pos: int) -> bool | None:
    if buf[pos] == RespType.ARRAY:
        if pos + 1 >= len(buf):
            return None
        return 0x30 <= buf[pos + 1] <= 0x39
    end = pos
    n = len(buf)
    while end < n and buf[end] not in b" \r\n":
        end += 1
    if end >= n:
        return None if n - pos <= _LONGEST_COMMAND else False
    return buf[pos:end].upper() in ARITY


def resync_s2c(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
    """Framing resync rule for replies: a line that starts like a RESP value."""
    return _resync(buf, prev_byte, _plausible_s2c)


def resync_c2s(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
    """Framing resync rule for requests: ``*<digit>`` or a known command name."""
    return _resync(buf, prev_byte, _plausible_c2s)
