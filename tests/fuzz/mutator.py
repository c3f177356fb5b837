"""A coverage-free mutation fuzzer: the engine of the CI pass and the fallback when atheris
is not installed (``benchmarks/fuzz.py --engine random``).

Each execution takes a parent from the corpus (seeds plus the regression corpus) and
applies 1-4 mutations: bit flips, interesting bytes, interesting integers written over
1/2/4/8 bytes in either byte order (0, 1, -1, 2**n +- 1, the input's own length), inserted,
deleted, duplicated or repeated ranges, a run of ASCII digits replaced by a huge number
(NATS sizes), truncation, splicing with another corpus entry, and for script targets
item-level changes (swap, duplicate, drop, flip direction, turn into a gap).  Everything
is drawn from one ``random.Random(seed)``, so a run is reproducible.

A failure is an exception from the target (bugs and broken invariants alike), a hang
(an execution longer than ``timeout`` seconds, stopped by SIGALRM) or a memory blow-up
(resident set above ``rss_limit_mb`` after an execution).  Failing inputs are written to
``artifacts`` named after their SHA-1.
"""

from __future__ import annotations

import hashlib
import random
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.targets import SEP, TARGETS, Target, corpus_files

_INTS = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF,
         0x80000000, 0xFFFFFFFF, 0x100000000, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
_BYTES = (0x00, 0x01, 0x0A, 0x0D, 0x20, 0x7F, 0x80, 0xFF, 0x16, 0x03, 0x0E, 0x01)
_PAGE = 4096


class Hang(Exception):
    pass


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def mutate(rng: random.Random, data: bytes, corpus: Sequence[bytes], script: bool) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(14 if script else 11)
        n = len(b)
        if op == 0 and n:  # flip bits
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(n)
                b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # interesting byte
            b[rng.randrange(n)] = rng.choice(_BYTES)
        elif op == 2 and n:  # interesting integer over 1/2/4/8 bytes
            width = rng.choice((1, 2, 4, 8))
            v = rng.choice((*_INTS, n, n + 1, n - 1, rng.getrandbits(8 * width))) % (1 << 8 * width)
            i = rng.randrange(n)
            b[i : i + width] = v.to_bytes(width, rng.choice(("big", "little")))
        elif op == 3:  # insert random bytes
            i = rng.randrange(n + 1)
            b[i:i] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and n:  # delete a range
            i = rng.randrange(n)
            del b[i : i + rng.randint(1, max(1, min(256, n // 4)))]
        elif op == 5 and n:  # duplicate a range
            i = rng.randrange(n)
            j = min(n, i + rng.randint(1, 256))
            b[j:j] = b[i:j]
        elif op == 6 and n:  # repeat one byte many times (long lines, runs)
            i = rng.randrange(n)
            b[i:i] = bytes([b[i]]) * rng.choice((16, 256, 4096))
        elif op == 7 and n:  # truncate
            del b[rng.randrange(n) :]
        elif op == 8 and corpus:  # splice with another entry
            other = rng.choice(corpus)
            if other:
                i = rng.randrange(n + 1)
                j = rng.randrange(len(other))
                b[i:] = other[j:]
        elif op == 9 and n:  # a run of digits becomes a (huge) number
            digits = [i for i in range(n) if 0x30 <= b[i] <= 0x39]
            if digits:
                i = rng.choice(digits)
                j = i
                while j < n and 0x30 <= b[j] <= 0x39:
                    j += 1
                b[i:j] = str(rng.choice((0, 1, 9, 10**9 - 1, 10**9, 2**32, 2**63,
                                         rng.randrange(10**12)))).encode()
        elif op == 10 and n:  # overwrite with random bytes
            i = rng.randrange(n)
            k = rng.randint(1, 32)
            b[i : i + k] = rng.randbytes(k)
        elif script:  # item-level: the script / message encodings split on SEP
            head, parts = bytes(b[:2]), bytes(b[2:]).split(SEP)
            if not parts:
                continue
            i = rng.randrange(len(parts))
            if op == 11 and len(parts) > 1:
                j = rng.randrange(len(parts))
                parts[i], parts[j] = parts[j], parts[i]
            elif op == 12:
                parts.insert(i, parts[i])
            elif op == 13 and parts[i]:
                p = bytearray(parts[i])
                p[0] ^= rng.choice((1, 6))  # other direction, or data <-> gap
                parts[i] = bytes(p)
            b = bytearray(head + SEP.join(parts))
    return bytes(b)


@dataclass
class Failure:
    target: str
    kind: str  # exception | hang | memory
    error: str
    data: bytes
    path: Path | None = None


@dataclass
class Stats:
    target: str
    executions: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    corpus: int = 0


def _alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Hang()


def run_one(target: Target, data: bytes, timeout: float | None = None) -> None:
    """Run one input; raises the target's exception, or ``Hang`` past ``timeout``."""
    if timeout:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            target.fn(data)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    else:
        target.fn(data)


def load_corpus(target: Target) -> list[bytes]:
    return [*target.seeds(), *(p.read_bytes() for p in corpus_files(target.name))]


def fuzz(
    name: str,
    *,
    seconds: float | None = None,
    iterations: int | None = None,
    seed: int = 0,
    timeout: float = 10.0,
    rss_limit_mb: float = 2048,
    artifacts: Path | None = None,
    keep_going: bool = False,
    log: Callable[[str], None] | None = None,
) -> Stats:
    """Mutate the corpus of target ``name`` until ``seconds`` or ``iterations`` run out."""
    target = TARGETS[name]
    corpus = load_corpus(target)
    rng = random.Random(seed)
    stats = Stats(name, corpus=len(corpus))
    start = time.perf_counter()
    # the corpus itself first: a seed that fails is a failure too
    queue = list(corpus)
    while True:
        if iterations is not None and stats.executions >= iterations:
            break
        if seconds is not None and time.perf_counter() - start >= seconds:
            break
        if queue:
            data = queue.pop()
        else:
            data = mutate(rng, rng.choice(corpus) if corpus else b"", corpus, target.script)
        failure = None
        try:
            run_one(target, data, timeout)
        except Hang:
            failure = Failure(name, "hang", f"no result after {timeout} s", data)
        except Exception as exc:
            failure = Failure(name, "exception", "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:]), data)
        stats.executions += 1
        if failure is None and stats.executions % 64 == 0 and _rss_mb() > rss_limit_mb:
            failure = Failure(name, "memory", f"resident set {_rss_mb():.0f} MB > "
                              f"{rss_limit_mb} MB", data)
        if failure is not None:
            if artifacts is not None:
                artifacts.mkdir(parents=True, exist_ok=True)
                failure.path = artifacts / f"{failure.kind}-{hashlib.sha1(data).hexdigest()}"
                failure.path.write_bytes(data)
            stats.failures.append(failure)
            if log:
                log(f"[{name}] {failure.kind}: {failure.error.strip().splitlines()[-1]}"
                    + (f" -> {failure.path}" if failure.path else ""))
            if not keep_going:
                break
    stats.seconds = time.perf_counter() - start
    return stats


def same_failure(target: Target, data: bytes, kind: str, timeout: float) -> bool:
    try:
        run_one(target, data, timeout)
    except Hang:
        return kind == "Hang"
    except Exception as exc:
        return type(exc).__name__ == kind
    return False


def failure_kind(target: Target, data: bytes, timeout: float) -> str | None:
    try:
        run_one(target, data, timeout)
    except Hang:
        return "Hang"
    except Exception as exc:
        return type(exc).__name__
    return None


def minimize(name: str, data: bytes, timeout: float = 10.0, budget_s: float = 120.0) -> bytes:
    """Delta debugging: the smallest input (chunk removal, then byte simplification) that
    still fails with the same exception type."""
    target = TARGETS[name]
    kind = failure_kind(target, data, timeout)
    if kind is None:
        return data
    start = time.perf_counter()
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and time.perf_counter() - start < budget_s:
        i = 0
        changed = False
        while i < len(data) and time.perf_counter() - start < budget_s:
            cand = data[:i] + data[i + chunk :]
            if cand != data and same_failure(target, cand, kind, timeout):
                data = cand
                changed = True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return data
