"""The long fuzz run (not in CI): mutate real inputs and feed them to every target.

    python scripts/fuzz_long.py --cases 100000 --seed 1
    python scripts/fuzz_long.py --native --sanitize --calls 10000000 --seed 1

``--native``: the native module against the Python path (tests/support/fuzz_native.py): every
native function called until each has ``--calls`` calls (or ``--seconds`` pass), each
answer compared with the Python path's; ``--sanitize`` first builds the module with
AddressSanitizer and UBSan (gcc, libasan), once per state of its C sources, into
``~/.cache/ledgerctl/ledgerctl-asan-<hash>`` (``--no-cache``: a temporary directory), and
runs the same command under it (LD_PRELOAD of libasan), so that a memory error or
undefined behaviour ends the run with the sanitizer's report. Prints one JSON object with
the calls per function and the differences found; exits 1 on any difference.

Seeds are the project's own test data (entries the official clients and BookKeeper wrote,
ledger metadata, entry logs, journals, shell hex dumps) plus entries with text that is
not UTF-8. Each case picks a target (tests/support/fuzz_targets.py), a seed and 1-4 mutations (bit
flips, byte sets, cuts, inserts, splices, length fields set to huge values). A case may
raise only LedgerctlError; a crash, a case slower than --case-seconds, or MemoryError under
--memory-mib is written to tests/data/fuzz-crashes/ as ``<target>-<sha256 prefix>.bin``
with a ``.txt`` saying what happened. Prints one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import signal
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load_module(path: Path) -> None:
    """Make ``path`` the module ``pulsarctl_py.decoders._speedups`` before anything
    imports it (the native functions then are that build's); a ``_speedups_mac`` build
    beside it becomes ``pulsarctl_py.decoders._speedups_mac``, whose capsule it imports."""
    import importlib.util

    suffix = path.name[len("_speedups") :]
    for name, at in (
        ("pulsarctl_py.decoders._speedups_mac", path.with_name(f"_speedups_mac{suffix}")),
        ("pulsarctl_py.decoders._speedups", path),
    ):
        if not at.is_file():
            continue
        spec = importlib.util.spec_from_file_location(name, at)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module


if "--module" in sys.argv[:-1]:  # before the imports below load the module it replaces
    load_module(Path(sys.argv[sys.argv.index("--module") + 1]))
from tests.support.fuzz_targets import CRASHES, DATA, TARGETS, run_target  # noqa: E402

BIG = [0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 1 << 24, 0x10000]


def seeds() -> dict[str, list[bytes]]:
    """Per target, the real inputs mutations start from."""
    bk = DATA / "bookkeeper"
    entries = [p.read_bytes() for p in sorted((DATA / "real-client").glob("*/*.bin"))]
    entries += [p.read_bytes() for p in sorted((bk / "offline" / "digest").glob("*/*.entry"))]
    entries += [p.read_bytes() for p in sorted((DATA / "upstream").rglob("raw*.bin"))]
    entries += _not_utf8_entries()
    texts = [
        p.read_bytes()[:4096]
        for p in sorted((bk / "live-dbledgerstorage" / "bk-shell").glob("*.txt"))
    ]
    texts += [e.hex().encode() for e in entries[:8]] + [_xxd(e) for e in entries[:8]]
    metadata = [p.read_bytes() for p in sorted((bk / "offline" / "ledger-metadata").glob("*.bin"))]
    logs = [p.read_bytes() for p in sorted(bk.rglob("*.log")) if p.stat().st_size < 1 << 20]
    journals = [p.read_bytes()[: 256 << 10] for p in sorted(bk.rglob("*.txn"))]
    indexes = [p.read_bytes() for p in sorted(bk.rglob("*.idx"))] or [bytes(1100)]
    ml = _ml_seeds()
    return {
        "entry": entries,
        "text": texts,
        "ledger-metadata": metadata,
        "ml": ml,
        "entrylog": logs,
        "journal": journals,
        "index": indexes,
    }


def _xxd(data: bytes) -> bytes:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        groups = " ".join(chunk[j : j + 2].hex() for j in range(0, len(chunk), 2))
        lines.append(f"{i:08x}: {groups}  ..")
    return "\n".join(lines).encode()


def _not_utf8_entries() -> list[bytes]:
    from tests.decoders.test_text import batched_entry, single_entry

    return [
        single_entry(b"k\xff", [(b"p\xfe", b"v")]),
        batched_entry([(b"\xc3", [(b"[/]", b"\xff")]), (None, [])]),
    ]


def _ml_seeds() -> list[bytes]:
    from pulsarctl_py.decoders import managed_ledger as mld
    from pulsarctl_py.proto import ml_data_formats_pb2 as mlpb

    info = mlpb.ManagedLedgerInfo()
    info.ledgerInfo.add(ledgerId=3, entries=10, size=1234, timestamp=1)
    info.properties.add(key="index", value="9")
    cursor = mlpb.ManagedCursorInfo(cursorsLedgerId=-1, markDeleteLedgerId=3, markDeleteEntryId=4)
    return [
        info.SerializeToString(),
        cursor.SerializeToString(),
        mld.build_position_info(mlpb.PositionInfo(ledgerId=3, entryId=4)),
    ]


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        n = len(buf)
        if op == 0 and n:  # flip a bit
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # set a byte
            buf[rng.randrange(n)] = rng.choice([0, 0xFF, 0x80, 0x0E, 0x01, rng.randrange(256)])
        elif op == 2 and n:  # cut
            buf = buf[: rng.randrange(n)]
        elif op == 3:  # insert
            at = rng.randrange(n + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and n:  # delete a span
            at = rng.randrange(n)
            del buf[at : at + rng.randint(1, 16)]
        elif op == 5 and n >= 4:  # a length field claims a lot
            at = rng.randrange(n - 3)
            buf[at : at + 4] = struct.pack(">I", rng.choice(BIG))
        elif op == 6 and pool:  # splice another seed in
            other = rng.choice(pool)
            at = rng.randrange(len(buf) + 1)
            buf[at:] = other[rng.randrange(len(other) + 1) :]
    return bytes(buf)


class Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout


def save(target: str, data: bytes, what: str) -> Path:
    CRASHES.mkdir(parents=True, exist_ok=True)
    name = f"{target}-{hashlib.sha256(data).hexdigest()[:12]}"
    path = CRASHES / f"{name}.bin"
    path.write_bytes(data)
    (CRASHES / f"{name}.txt").write_text(what)
    return path


SANITIZE_FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-O1",
    "-g",
    # the portable CRC32C (slicing-by-8 tables), which a CPU with SSE4.2 never runs in the
    # installed build: the digest checks compared with the Python path cover it here
    "-DSPEEDUPS_PORTABLE_CRC",
]
#: leaks are CPython's own at exit; everything else stops the run with a report
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
}


def extension_sources(name: str) -> list[Path]:
    """The C sources of the extension module ``name`` as pyproject.toml builds it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for ext in config["tool"]["setuptools"]["ext-modules"]:
        if ext["name"] == name:
            return [ROOT / source for source in ext["sources"]]
    raise SystemExit(f"pyproject.toml builds no {name}")


def sanitized_cache(cc: str) -> Path:
    """The directory a sanitized build of the present C sources is kept in, outside the
    repository (``$XDG_CACHE_HOME/ledgerctl``, else ``~/.cache/ledgerctl``): named by a
    hash of the sources, headers, flags, compiler and Python, so that a change to any of
    them builds again."""
    import os
    import subprocess
    import sysconfig

    digest = hashlib.sha256()
    version = subprocess.run([cc, "--version"], check=True, capture_output=True, text=True)
    for part in (version.stdout, sys.version, sysconfig.get_config_var("EXT_SUFFIX") or ""):
        digest.update(part.encode() + b"\0")
    digest.update(" ".join(SANITIZE_FLAGS).encode() + b"\0")
    for path in sorted((ROOT / "decoders").glob("_speedups*.[ch]")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ledgerctl"
    return base / f"ledgerctl-asan-{digest.hexdigest()[:16]}"


def build_sanitized(directory: Path, cc: str = "gcc") -> Path:
    """The extension's units (pyproject.toml) built with AddressSanitizer and UBSan into
    ``directory`` (and _speedups_mac.c beside it where OpenSSL's headers are found): the
    module's path."""
    import subprocess
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    out = directory / f"_speedups{suffix}"
    include = sysconfig.get_paths()["include"]
    sources = [str(path) for path in extension_sources("pulsarctl_py.decoders._speedups")]
    command = [cc, "-shared", "-fPIC", "-std=c11", *SANITIZE_FLAGS, f"-I{include}"]
    subprocess.run([*command, *sources, "-o", str(out)], check=True)
    mac = ROOT / "decoders" / "_speedups_mac.c"
    mac_out = directory / f"_speedups_mac{suffix}"
    # optional, as in the package: without libcrypto's headers MAC stays on the Python path
    subprocess.run([*command, str(mac), "-o", str(mac_out), "-lcrypto"], check=False)
    return out


def cached_sanitized(cc: str = "gcc") -> Path:
    """:func:`build_sanitized`, once per state of the C sources (:func:`sanitized_cache`):
    built in a fresh directory beside the cache's and renamed into place whole, so that a
    run building the same at once loses nothing (the first rename wins)."""
    import shutil
    import tempfile

    cache = sanitized_cache(cc)
    if not (cache / "built").is_file():  # written last: without it, not a build
        cache.parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=cache.name + ".", dir=cache.parent))
        try:
            build_sanitized(fresh, cc)
            (fresh / "built").write_text("")
            fresh.rename(cache)
        except OSError:
            if not (cache / "built").is_file():
                raise
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return next(p for p in cache.iterdir() if p.name.startswith("_speedups."))


def libasan(cc: str = "gcc") -> str:
    """The AddressSanitizer runtime to preload (the interpreter is not instrumented)."""
    import subprocess

    found = subprocess.run(
        [cc, "-print-file-name=libasan.so"], check=True, capture_output=True, text=True
    )
    path = found.stdout.strip()
    if not Path(path).is_file():  # gcc answers the bare name when it has none
        raise SystemExit(f"{cc} has no libasan.so (Debian: the libasan8 package)")
    return path


def run_native(args: argparse.Namespace) -> int:
    if args.sanitize:
        import os
        import subprocess
        import tempfile

        argv = [a for a in sys.argv[1:] if a not in ("--sanitize", "--no-cache")]
        command = [sys.executable, str(Path(__file__).resolve()), *argv]
        env = {**os.environ, **SANITIZER_ENV, "LD_PRELOAD": libasan(args.cc)}
        if args.no_cache:
            with tempfile.TemporaryDirectory(prefix="ledgerctl-asan-") as tmp:
                module = build_sanitized(Path(tmp), args.cc)
                return subprocess.run([*command, "--module", str(module)], env=env).returncode
        module = cached_sanitized(args.cc)
        return subprocess.run([*command, "--module", str(module)], env=env).returncode
    from tests.support import fuzz_native

    native = fuzz_native.native
    if native is None:
        raise SystemExit("the native module is not built (or LEDGERCTL_PURE_PYTHON is set)")
    # the functions each target calls; the one furthest behind picks the next target
    owners = {
        "batch": ["split_batch", "compact_offer", "compact_keep", "compact_rebuild"],
        "entries": ["scan_heads", "verify_records", "verify_heads", "entry_lines"],
        "layouts": [
            "scan_slots",
            "verify_slots",
            "item_slots",
            "record_heads",
            "log_slots",
            "payload_items",
            "payload_slots",
            "payload_records",
        ],
        "v3": ["v3_read_replies"],
        "key-table": ["key_table"],
        "entry-doc": ["entry_doc"],
        "arguments": ["bind", "mac_available"],
        "crc32c": ["crc32c"],
    }
    by_function = {f: t for t, functions in owners.items() for f in functions}
    calls = fuzz_native.CALLS
    rng = random.Random(args.seed)
    differences: list[str] = []
    started = time.monotonic()
    shown = started
    cases = 0
    while True:
        behind = min(by_function, key=lambda f: calls[f])
        now = time.monotonic()
        if calls[behind] >= args.calls or (args.seconds and now - started >= args.seconds):
            break
        if now - shown >= 60:  # progress on stderr, once a minute
            shown = now
            print(f"{now - started:.0f} s: {behind} {calls[behind]} calls", file=sys.stderr)
        try:
            fuzz_native.TARGETS[by_function[behind]](rng)
        except fuzz_native.Difference as exc:
            differences.append(str(exc)[:2000])
            if len(differences) >= 20:
                break
        cases += 1
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    maps = Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else ""
    mac_module = sys.modules.get("pulsarctl_py.decoders._speedups_mac")
    report = {
        "module": str(native.__file__),
        "mac_module": str(mac_module.__file__) if fuzz_native.MAC and mac_module else None,
        "sanitizers": [name for name in ("libasan", "libubsan") if name in maps],
        "hardware_crc32c": bool(native.HARDWARE_CRC32C),
        "seed": args.seed,
        "cases": cases,
        "calls": dict(sorted(calls.items())),
        "compared": dict(sorted(fuzz_native.COMPARED.items())),
        "differences": differences,
        "seconds": round(seconds, 1),
        "peak_rss_mib": round(peak / (1 << 20), 1),
    }
    print(json.dumps(report, indent=2))
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case-seconds", type=float, default=5.0)
    parser.add_argument("--memory-mib", type=int, default=2048)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--native", action="store_true", help="the native module's run")
    parser.add_argument("--calls", type=int, default=10_000_000, help="--native: per function")
    parser.add_argument("--seconds", type=float, default=0, help="--native: stop after")
    parser.add_argument("--sanitize", action="store_true", help="--native: under ASan+UBSan")
    parser.add_argument(
        "--no-cache", action="store_true", help="--sanitize: build afresh, keep no build"
    )
    parser.add_argument("--module", help="--native: the compiled module to load")
    parser.add_argument("--cc", default="gcc", help="--sanitize: the C compiler")
    args = parser.parse_args()
    if args.native:
        return run_native(args)

    limit = args.memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(args.seed)
    pool = seeds()
    targets = [t for t in args.targets.split(",") if pool.get(t)]
    counts = dict.fromkeys(targets, 0)
    crashes: list[dict[str, str]] = []
    slowest = 0.0
    started = time.monotonic()
    for case in range(args.cases):
        target = targets[case % len(targets)]
        data = mutate(rng.choice(pool[target]), rng, pool[target])
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, args.case_seconds)
        try:
            run_target(target, data, random.Random(case))
        except Timeout:
            path = save(target, data, f"slower than {args.case_seconds} s (case {case})\n")
            crashes.append({"target": target, "file": path.name, "error": "timeout"})
        except Exception as exc:  # the point: anything but LedgerctlError is a crash
            what = "".join(traceback.format_exception(exc))
            path = save(target, data, f"case {case}, seed {args.seed}\n{what}")
            crashes.append({"target": target, "file": path.name, "error": repr(exc)[:200]})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.monotonic() - t0)
        counts[target] += 1
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "cases": args.cases,
                "seed": args.seed,
                "per_target": counts,
                "crashes": crashes,
                "seconds": round(seconds, 1),
                "cases_per_second": round(args.cases / seconds, 1),
                "slowest_case_seconds": round(slowest, 3),
                "peak_rss_mib": round(peak / (1 << 20), 1),
            },
            indent=2,
        )
    )
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
