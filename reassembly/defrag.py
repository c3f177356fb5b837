"""IPv4 / IPv6 fragment reassembly with a bounded table, timeouts and overlap checks.

Strategy
--------
One ``_FragSet`` per datagram in progress, keyed by whatever the caller passes (the
network decoder uses interface, VLANs, version, addresses, protocol for IPv4, and the
identification).  A set holds a ``bytearray`` of the datagram's payload plus two
sorted lists of disjoint ranges:

* ``declared``: the byte ranges that fragments *claimed* (offset .. offset + length
  from the IP header), which decides completeness;
* ``have``: the byte ranges actually *captured*.  A fragment cut by the snaplen
  claims more than it carries; the missing bytes are a hole in ``have`` only.

A datagram is complete when the last fragment (MF=0 / M=0) fixed its length and the
declared ranges cover it without a hole.  The payload handed on is then the
captured prefix; if that is shorter than the datagram, it is flagged truncated.

Overlap policy: ``Limits.overlap_policy``, shared with TCP, default **first wins**:
bytes already captured are never overwritten; a later fragment only fills bytes
nobody captured yet.  With ``last`` the later copy replaces differing bytes (what
tshark shows).  Either way the comparison below is made and reported.  Where a
later fragment overlaps captured bytes, they are compared: identical bytes are a
duplicate (``ip.frag_duplicate``, counted in ``frag_duplicates``), different bytes an
overlap conflict (``ip.frag_overlap``, counted in ``frag_overlaps``).  RFC 5722 tells
IPv6 hosts to drop a datagram with overlapping fragments; a forensic tool keeps it and
says so instead.  The first fragment with MF=0 fixes the datagram length; data past it
and later contradicting "last" fragments are reported as ``ip.frag_bad`` and ignored.

Limits (``Limits``): ``max_fragment_datagrams`` sets in the table (the oldest is
evicted, ``limit.fragment_table``), ``max_fragment_bytes`` per datagram and the
protocol maximum of 65535 (``ip.frag_too_big``, the set is dropped), and
``fragment_timeout_ns`` counted from a set's first fragment (``ip.frag_incomplete``).
Expiry is checked lazily on every fragment (oldest sets first) and by ``flush``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable

from .events import Anomaly
from .ip import addr_str
from .limits import Limits, OverlapPolicy

_MAX_FRAMES_LISTED = 8
# What a datagram in progress costs beyond its payload buffer (the set, its range and
# frame lists, the table entry and key), for the run's memory budget; the buffer itself
# is counted with the 1/8 a growing bytearray over-allocates.
FRAGSET_OVERHEAD_BYTES = 1024


class _FragSet:
    __slots__ = (
        "version",
        "src",
        "dst",
        "ident",
        "proto",
        "created_ns",
        "last_ns",
        "frames",
        "nfrags",
        "buf",
        "have_s",
        "have_e",
        "decl_s",
        "decl_e",
        "total",
        "total_frame",
        "charged",
    )

    def __init__(
        self, version: int, src: bytes, dst: bytes, ident: int, ts_ns: int, frame: int
    ) -> None:
        self.version = version
        self.src = src
        self.dst = dst
        self.ident = ident
        self.proto: int | None = None
        self.created_ns = ts_ns
        self.last_ns = ts_ns
        self.frames: list[int] = [frame]
        self.nfrags = 0
        self.buf = bytearray()
        self.have_s: list[int] = []
        self.have_e: list[int] = []
        self.decl_s: list[int] = []
        self.decl_e: list[int] = []
        self.total: int | None = None
        self.total_frame = 0
        self.charged = 0  # bytes this set counts for in the memory budget

    def describe(self) -> str:
        ident = f"0x{self.ident:04x}" if self.version == 4 else f"0x{self.ident:08x}"
        proto = "" if self.proto is None else f" proto {self.proto}"
        return f"IPv{self.version} {addr_str(self.src)} -> {addr_str(self.dst)} id {ident}{proto}"

    def frames_text(self) -> str:
        fr = self.frames
        if len(fr) <= _MAX_FRAMES_LISTED:
            return "frames " + ",".join(map(str, fr))
        head = ",".join(map(str, fr[: _MAX_FRAMES_LISTED - 1]))
        return f"frames {head},...,{fr[-1]} ({len(fr)} in all)"

    def progress(self) -> str:
        got = sum(e - s for s, e in zip(self.decl_s, self.decl_e, strict=True))
        held = sum(e - s for s, e in zip(self.have_s, self.have_e, strict=True))
        total = "unknown (last fragment missing)" if self.total is None else str(self.total)
        captured = "" if held == got else f" ({held} captured)"
        plural = "" if self.nfrags == 1 else "s"
        return f"{self.nfrags} fragment{plural}, {got} bytes{captured} of {total}"


def _add_range(starts: list[int], ends: list[int], s: int, e: int) -> None:
    """Merge [s, e) into the sorted disjoint ranges (touching ranges merge)."""
    i = bisect_left(ends, s)
    j = bisect_right(starts, e)
    if i < j:
        s = min(s, starts[i])
        e = max(e, ends[j - 1])
        starts[i:j] = [s]
        ends[i:j] = [e]
    else:
        starts.insert(i, s)
        ends.insert(i, e)


def _clip_ranges(starts: list[int], ends: list[int], limit: int) -> None:
    """Drop everything at or beyond ``limit``."""
    i = bisect_left(starts, limit)
    del starts[i:]
    del ends[i:]
    if ends and ends[-1] > limit:
        ends[-1] = limit


class Defragmenter:
    """Reassembles fragments of IPv4 and IPv6 datagrams; see the module docstring."""

    def __init__(
        self,
        limits: Limits,
        report: Callable[[Anomaly], None],
        counters: dict[str, int] | None = None,
    ) -> None:
        self.limits = limits
        self.report = report
        self.counters: dict[str, int] = counters if counters is not None else {}
        for name in (
            "fragments",
            "reassembled",
            "frag_duplicates",
            "frag_overlaps",
            "frag_incomplete",
            "frag_too_big",
            "frag_evicted",
            "frag_bad",
        ):
            self.counters.setdefault(name, 0)
        self._sets: dict[Hashable, _FragSet] = {}
        self._held_bytes = 0  # what the sets count for in the memory budget

    def __len__(self) -> int:
        return len(self._sets)

    # ------------------------------------------------------------------ adding
    def add(
        self,
        key: Hashable,
        version: int,
        src: bytes,
        dst: bytes,
        ident: int,
        proto: int | None,
        offset: int,
        more: bool,
        declared_len: int,
        data: bytes,
        frame: int,
        ts_ns: int,
        header_len: int = 0,
    ) -> tuple[bytes, bool, int, int] | None:
        """Add one fragment.

        ``offset``/``declared_len`` are in bytes of the fragmentable part as the IP
        header states them; ``data`` is what was captured of it (may be shorter when
        the capture was cut).  ``proto`` is the protocol of the datagram when this
        fragment knows it (always for IPv4, only the offset-0 fragment for IPv6).
        ``header_len`` is the length of the IP header(s) in front of the fragmentable
        part, used for the 65535-byte protocol maximum.

        Returns ``(payload, truncated, proto, length)`` when this fragment completes
        the datagram (``length`` is the datagram's declared length, ``payload`` the
        captured prefix of it, ``proto`` -1 if no fragment said), else ``None``.
        """
        c = self.counters
        c["fragments"] += 1
        sets = self._sets
        limits = self.limits
        timeout = limits.fragment_timeout_ns

        # lazy expiry, oldest first (dict order is creation order)
        while sets:
            oldest_key = next(iter(sets))
            oldest = sets[oldest_key]
            if ts_ns - oldest.created_ns <= timeout:
                break
            del sets[oldest_key]
            self._forget(oldest)
            self._incomplete(oldest, "timed out")

        fs = sets.get(key)
        if fs is not None and ts_ns - fs.created_ns > timeout:
            del sets[key]
            self._forget(fs)
            self._incomplete(fs, "timed out")
            fs = None
        if fs is None:
            fs = _FragSet(version, src, dst, ident, ts_ns, frame)
            if proto is not None:
                fs.proto = proto
            if declared_len <= 0:
                self._bad(fs, frame, ts_ns, f"zero-length fragment at offset {offset} ignored")
                return None
            max_sets = limits.max_fragment_datagrams
            if max_sets <= 0:
                c["frag_evicted"] += 1
                self.report(
                    Anomaly(
                        "limit.fragment_table",
                        f"fragment table size is {max_sets}: {fs.describe()} "
                        f"fragment in frame {frame} dropped",
                        ts_ns,
                        frame,
                    )
                )
                return None
            while len(sets) >= max_sets:
                old_key = next(iter(sets))
                old = sets.pop(old_key)
                self._forget(old)
                c["frag_evicted"] += 1
                self.report(
                    Anomaly(
                        "limit.fragment_table",
                        f"fragment table full ({max_sets} datagrams): evicted incomplete "
                        f"{old.describe()}, {old.progress()}, {old.frames_text()}",
                        ts_ns,
                        frame,
                    )
                )
            sets[key] = fs
        else:
            fs.frames.append(frame)
            fs.last_ns = ts_ns
            if proto is not None and fs.proto is None:
                fs.proto = proto
            if declared_len <= 0:
                self._bad(fs, frame, ts_ns, f"zero-length fragment at offset {offset} ignored")
                return None

        fs.nfrags += 1
        end = offset + declared_len
        if more and declared_len & 7:
            self._bad(
                fs,
                frame,
                ts_ns,
                f"non-final fragment at offset {offset} has length {declared_len}, "
                "not a multiple of 8 (kept)",
            )

        if end > limits.max_fragment_bytes or end + header_len > 65535:
            del sets[key]
            self._forget(fs)
            c["frag_too_big"] += 1
            self.report(
                Anomaly(
                    "ip.frag_too_big",
                    f"{fs.describe()}: fragment in frame {frame} reaches byte {end} "
                    f"(+{header_len} header bytes); limit {limits.max_fragment_bytes} "
                    f"payload bytes / 65535 IP bytes; datagram dropped ({fs.frames_text()})",
                    ts_ns,
                    frame,
                )
            )
            return None

        # the datagram length, fixed by the first last-fragment
        total = fs.total
        if not more:
            if total is None:
                if fs.decl_e and fs.decl_e[-1] > end:
                    self._bad(
                        fs,
                        frame,
                        ts_ns,
                        f"last fragment ends the datagram at {end} but earlier fragments "
                        f"reach {fs.decl_e[-1]}; bytes past {end} discarded",
                    )
                    _clip_ranges(fs.decl_s, fs.decl_e, end)
                    _clip_ranges(fs.have_s, fs.have_e, end)
                fs.total = total = end
                fs.total_frame = frame
            elif end != total:
                self._bad(
                    fs,
                    frame,
                    ts_ns,
                    f"second last fragment ends at {end}, frame {fs.total_frame} "
                    f"already ended the datagram at {total}; kept {total}",
                )
        if total is not None and end > total:
            if offset >= total:
                self._bad(
                    fs,
                    frame,
                    ts_ns,
                    f"fragment at offset {offset} lies past the datagram end {total}; ignored",
                )
                return None
            self._bad(
                fs,
                frame,
                ts_ns,
                f"fragment {offset}-{end} runs past the datagram end {total}; tail ignored",
            )
            end = total
            declared_len = end - offset
            if len(data) > declared_len:
                data = data[:declared_len]

        self._store(fs, offset, data, frame, ts_ns)
        self._charge(fs)
        _add_range(fs.decl_s, fs.decl_e, offset, end)

        if (
            total is not None
            and len(fs.decl_s) == 1
            and fs.decl_s[0] == 0
            and fs.decl_e[0] >= total
        ):
            del sets[key]
            self._forget(fs)
            c["reassembled"] += 1
            have_end = fs.have_e[0] if fs.have_s and fs.have_s[0] == 0 else 0
            if have_end > total:
                have_end = total
            payload = bytes(fs.buf[:have_end])
            proto = fs.proto if fs.proto is not None else -1
            return payload, have_end < total, proto, total
        return None

    def _store(self, fs: _FragSet, s: int, data: bytes, frame: int, ts_ns: int) -> None:
        """Copy captured bytes not held yet, compare the ones already held."""
        e = s + len(data)
        if e == s:
            return
        buf = fs.buf
        if len(buf) < e:
            buf.extend(bytes(e - len(buf)))
        starts, ends = fs.have_s, fs.have_e
        i = bisect_right(ends, s)  # first held range ending after s
        n = len(starts)
        cursor = s
        same = 0
        conflicts: list[tuple[int, int]] = []
        while i < n and starts[i] < e:
            a = starts[i] if starts[i] > s else s
            b = ends[i] if ends[i] < e else e
            if a > cursor:
                buf[cursor:a] = data[cursor - s : a - s]
            if buf[a:b] == data[a - s : b - s]:
                same += b - a
            else:
                conflicts.append((a, b))
            cursor = b
            i += 1
        if cursor < e:
            buf[cursor:e] = data[cursor - s :]
        _add_range(starts, ends, s, e)

        if conflicts:
            self.counters["frag_overlaps"] += 1
            ranges = ", ".join(f"{a}-{b}" for a, b in conflicts[:8])
            ndiff = sum(
                1
                for a, b in conflicts
                for x, y in zip(buf[a:b], data[a - s : b - s], strict=True)
                if x != y
            )
            if self.limits.overlap_policy is OverlapPolicy.LAST:
                kept = "last copy kept"
                for a, b in conflicts:
                    buf[a:b] = data[a - s : b - s]
            else:
                kept = "first copy kept"
            self.report(
                Anomaly(
                    "ip.frag_overlap",
                    f"{fs.describe()}: fragment {s}-{e} in frame {frame} overlaps bytes "
                    f"already held with different data at {ranges} ({ndiff} bytes differ); "
                    f"{kept} ({fs.frames_text()})",
                    ts_ns,
                    frame,
                    nbytes=ndiff,
                )
            )
        elif same:
            self.counters["frag_duplicates"] += 1
            what = "duplicate fragment" if same == e - s else f"fragment overlapping {same} bytes"
            self.report(
                Anomaly(
                    "ip.frag_duplicate",
                    f"{fs.describe()}: {what} {s}-{e} in frame {frame}, identical bytes "
                    f"({fs.frames_text()})",
                    ts_ns,
                    frame,
                    nbytes=same,
                )
            )

    def _bad(self, fs: _FragSet, frame: int, ts_ns: int, what: str) -> None:
        self.counters["frag_bad"] += 1
        self.report(Anomaly("ip.frag_bad", f"{fs.describe()}: {what}", ts_ns, frame))

    def _incomplete(self, fs: _FragSet, why: str) -> None:
        self.counters["frag_incomplete"] += 1
        self.report(
            Anomaly(
                "ip.frag_incomplete",
                f"{fs.describe()}: {why} before completion; {fs.progress()}; {fs.frames_text()}",
                fs.last_ns,
                fs.frames[0],
            )
        )

    # ------------------------------------------------------------------ memory budget
    def _charge(self, fs: _FragSet) -> None:
        """A fragment was stored in ``fs``: tell the run's memory budget."""
        cost = len(fs.buf) + (len(fs.buf) >> 3) + FRAGSET_OVERHEAD_BYTES
        self._held_bytes += cost - fs.charged
        fs.charged = cost
        self._hold_budget()

    def _forget(self, fs: _FragSet) -> None:
        """``fs`` left the table (complete, dropped or expired)."""
        if fs.charged:
            self._held_bytes -= fs.charged
            fs.charged = 0
            self._hold_budget()

    def _hold_budget(self) -> None:
        budget = self.limits.budget
        if budget is not None:
            budget.hold(self, self._held_bytes)

    def release_memory(self, need: int) -> None:
        """The run's memory budget is reached and the fragment table is the oldest holder:
        drop incomplete datagrams, oldest first, until ``need`` bytes are freed (each a
        ``limit.memory`` anomaly saying what was held of it)."""
        sets = self._sets
        budget = self.limits.budget
        freed = 0
        while sets and freed < need:
            key = next(iter(sets))
            fs = sets.pop(key)
            freed += fs.charged
            self._forget(fs)
            self.counters["frag_evicted"] += 1
            self.report(
                Anomaly(
                    "limit.memory",
                    f"memory budget of {budget.limit_bytes if budget else 0} bytes reached: "
                    f"dropped incomplete {fs.describe()}, {fs.progress()}, {fs.frames_text()}",
                    fs.last_ns,
                    fs.frames[-1],
                )
            )
        self._hold_budget()

    # ------------------------------------------------------------------ expiry
    def flush(self, now_ns: int | None = None) -> None:
        """Expire sets older than the timeout at ``now_ns``; ``None`` expires all."""
        sets = self._sets
        if now_ns is None:
            items = list(sets.items())
            sets.clear()
            for _key, fs in items:
                self._forget(fs)
            for _key, fs in items:
                self._incomplete(fs, "capture ended")
            return
        timeout = self.limits.fragment_timeout_ns
        expired = [k for k, fs in sets.items() if now_ns - fs.created_ns > timeout]
        for k in expired:
            fs = sets.pop(k)
            self._forget(fs)
            self._incomplete(fs, "timed out")
