"""Output paths (pulsarctl_py.outputs) and untrusted documents (pulsarctl_py.documents).

Device nodes are made with os.mknod in a temporary directory (the tests run as root) and
FIFOs with os.mkfifo: never the machine's own /dev nodes. The block device uses a major
number reserved for local experiments (240), which no driver serves.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarctl_py import outputs
from pulsarctl_py.documents import ENV_MAX_SIZE, load_document, read_document
from pulsarctl_py.errors import LedgerctlError

PLAN_TEXT = '{\n  "format": "ledgerctl-plan",\n  "version": 3\n}\n'
#: (major, minor) of the character devices the adversarial run clobbered
DEVICES = {"null": (1, 3), "zero": (1, 5), "urandom": (1, 9)}


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    """A directory holding device nodes and a FIFO of its own."""
    d = tmp_path / "dev"
    d.mkdir()
    for name, (major, minor) in DEVICES.items():
        os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    os.mkfifo(d / "fifo")
    os.mknod(d / "disk", stat.S_IFBLK | 0o600, os.makedev(240, 0))
    return d


def node_state(directory: Path) -> dict[str, tuple[int, int]]:
    """Every entry of ``directory``: its file type and device number."""
    return {
        p.name: (stat.S_IFMT(p.lstat().st_mode), p.lstat().st_rdev) for p in directory.iterdir()
    }


# -- devices, FIFOs, links ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DEVICES))
@pytest.mark.parametrize("kind", [outputs.PLAN, outputs.MAPPING, outputs.COMPACTED_VIEW])
def test_a_device_is_streamed_into_never_replaced(
    dev: Path, name: str, kind: outputs.OutputKind
) -> None:
    before = node_state(dev)
    out = outputs.prepare(dev / name, kind)
    assert out.stream and out.sibling(".mapping.jsonl") is None
    out.write_text(PLAN_TEXT)
    assert node_state(dev) == before  # still the device, nothing beside it


def test_a_fifo_is_streamed_into(dev: Path) -> None:
    got: list[bytes] = []
    reading, writing = threading.Event(), threading.Event()

    def reader() -> None:
        fd = os.open(dev / "fifo", os.O_RDONLY | os.O_NONBLOCK)
        reading.set()
        writing.wait(5)  # a read before any writer opened would see the end at once
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as fh:
            got.append(fh.read())

    thread = threading.Thread(target=reader)
    thread.start()
    reading.wait(5)
    out = outputs.prepare(dev / "fifo", outputs.PLAN)
    writing.set()
    out.write_text(PLAN_TEXT)
    thread.join(5)
    assert got == [PLAN_TEXT.encode()]
    assert stat.S_ISFIFO((dev / "fifo").lstat().st_mode)


def test_a_fifo_nobody_reads_is_an_error_not_a_hang(dev: Path) -> None:
    started = time.monotonic()
    with pytest.raises(LedgerctlError, match="no process is reading it"):
        outputs.prepare(dev / "fifo", outputs.PLAN)
    assert time.monotonic() - started < 2


def test_a_block_device_a_socket_a_directory_are_refused(dev: Path, tmp_path: Path) -> None:
    import socket

    before = node_state(dev)
    with pytest.raises(LedgerctlError, match="block device"):
        outputs.prepare(dev / "disk", outputs.PLAN)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(dev / "sock"))
    try:
        with pytest.raises(LedgerctlError, match="socket"):
            outputs.prepare(dev / "sock", outputs.PLAN)
    finally:
        sock.close()
    with pytest.raises(LedgerctlError, match="directory"):
        outputs.prepare(tmp_path, outputs.PLAN)
    with pytest.raises(LedgerctlError, match="directory"):
        outputs.prepare(f"{tmp_path}/", outputs.PLAN)
    assert {k: v for k, v in node_state(dev).items() if k != "sock"} == before


@pytest.mark.parametrize("target", ["file", "device", "missing"])
def test_a_symlink_is_refused_naming_it(dev: Path, tmp_path: Path, target: str) -> None:
    victim = {"file": tmp_path / "hosts", "device": dev / "zero", "missing": tmp_path / "none"}[
        target
    ]
    if target == "file":
        victim.write_text("127.0.0.1 localhost\n")
    link = tmp_path / "plan.json"
    link.symlink_to(victim)
    with pytest.raises(LedgerctlError, match=f"{link}: it is a symbolic link"):
        outputs.prepare(link, outputs.PLAN, force=True)
    assert link.is_symlink() and os.readlink(link) == str(victim)
    if target == "file":
        assert victim.read_text() == "127.0.0.1 localhost\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"dev", "plan.json", *(["hosts"] if target == "file" else [])}
    )


def test_this_process_descriptors_are_written_through(capfd: pytest.CaptureFixture[str]) -> None:
    for name in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        out = outputs.prepare(name, outputs.PLAN)
        assert out.stream
        out.write_text(f"to {name}\n")
    assert capfd.readouterr().out == "to /dev/stdout\nto /dev/fd/1\nto /proc/self/fd/1\n"


# -- regular files ------------------------------------------------------------------------------


def test_a_file_ledgerctl_did_not_write_is_kept_unless_forced(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    with pytest.raises(LedgerctlError, match=r"will not overwrite .* --force"):
        outputs.prepare(hosts, outputs.PLAN)
    assert hosts.read_text() == "127.0.0.1 localhost\n"
    assert os.listdir(tmp_path) == ["hosts"]  # no temporary file left either
    outputs.prepare(hosts, outputs.PLAN, force=True).write_text(PLAN_TEXT)
    assert hosts.read_text() == PLAN_TEXT


def test_an_earlier_output_of_the_same_kind_is_replaced(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    outputs.prepare(plan, outputs.PLAN).write_text(PLAN_TEXT)
    outputs.prepare(plan, outputs.PLAN).write_text(PLAN_TEXT.replace("3", "4"))
    assert '"version": 4' in plan.read_text()
    # a plan is not a mapping, nor a mapping a plan
    with pytest.raises(LedgerctlError, match="not a ledgerctl offset mapping"):
        outputs.prepare(plan, outputs.MAPPING)
    mapping = tmp_path / "m.jsonl"
    row = '{"first_index": 0, "index": 0, "legacy_kop_offset": 0, "messages": 1, '
    row += '"old_index": null, "old_position": "1:0"}\n'
    mapping.write_text(row)
    outputs.prepare(mapping, outputs.MAPPING).write_text(row)
    with pytest.raises(LedgerctlError, match="not a ledgerctl plan"):
        outputs.prepare(mapping, outputs.PLAN)


def test_an_empty_file_is_a_new_output(tmp_path: Path) -> None:
    fd, name = tempfile.mkstemp(dir=tmp_path)
    os.close(fd)
    outputs.prepare(name, outputs.PLAN).write_text(PLAN_TEXT)
    assert Path(name).read_text() == PLAN_TEXT


def test_a_new_file_is_created_whole_with_its_mode(tmp_path: Path) -> None:
    plan, view = tmp_path / "p.json", tmp_path / "v.jsonl"
    out = outputs.prepare(plan, outputs.PLAN)
    hidden = [p.name for p in tmp_path.iterdir()]
    assert len(hidden) == 1 and hidden[0].startswith(".p.json.")  # reserved beside it
    with out.open_text() as fh:
        fh.write(PLAN_TEXT)
        assert not plan.exists()  # nothing under its name until it is whole
    assert plan.read_text() == PLAN_TEXT and os.listdir(tmp_path) == ["p.json"]
    assert stat.S_IMODE(plan.stat().st_mode) == 0o600  # a plan may hold a ledger password
    outputs.prepare(view, outputs.COMPACTED_VIEW).write_text("{}\n")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(view.stat().st_mode) == 0o666 & ~mask


def test_a_failure_while_writing_leaves_nothing(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    out = outputs.prepare(plan, outputs.PLAN)
    with pytest.raises(RuntimeError), out.open_text() as fh:
        fh.write("half")
        raise RuntimeError("the work failed")
    assert os.listdir(tmp_path) == []
    outputs.prepare(plan, outputs.PLAN).discard()
    assert os.listdir(tmp_path) == []
    outputs.prepare(plan, outputs.PLAN)  # dropped when collected
    assert os.listdir(tmp_path) == []


def test_a_file_that_appears_meanwhile_is_left_alone(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    out = outputs.prepare(plan, outputs.PLAN)
    plan.write_text("someone else's\n")
    with pytest.raises(LedgerctlError, match="appeared while ledgerctl was working"):
        out.write_text(PLAN_TEXT)
    assert plan.read_text() == "someone else's\n" and os.listdir(tmp_path) == ["p.json"]
    # and an earlier output swapped for a link meanwhile is not renamed over
    outputs.prepare(plan, outputs.PLAN, force=True).write_text(PLAN_TEXT)
    out = outputs.prepare(plan, outputs.PLAN)
    plan.unlink()
    plan.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LedgerctlError, match="replaced while ledgerctl was working"):
        out.write_text(PLAN_TEXT)
    assert plan.is_symlink()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "an empty path"),
        ("/", "directory"),
        ("/proc/self/status", "takes no new files"),
        ("{tmp}/no/such/dir/p.json", "no such directory"),
        ("{tmp}/file/p.json", "cannot write"),
    ],
)
def test_paths_that_cannot_be_written_say_so_in_one_line(
    tmp_path: Path, path: str, message: str
) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(LedgerctlError, match=message) as info:
        outputs.prepare(path.format(tmp=tmp_path), outputs.COMPACTED_VIEW)
    assert "\n" not in str(info.value) and "cannot read" not in str(info.value)
    assert info.value.exit_code == 2


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory an unprivileged user can reach but not write."""
    top = Path(tempfile.mkdtemp(prefix="ledgerctl-outputs-"))
    try:
        top.chmod(0o755)
        (top / "ro").mkdir(mode=0o555)
        yield top / "ro"
    finally:
        (top / "ro").chmod(0o755)
        for p in sorted(top.rglob("*"), reverse=True):
            p.unlink() if not p.is_dir() else p.rmdir()
        top.rmdir()


def test_permission_denied_exits_3(shared_dir: Path) -> None:
    """As an unprivileged user (root writes anywhere): 'cannot write', exit code 3. The
    check runs in a forked child that drops to nobody (the interpreter may live where
    nobody can run it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer on the pipe, never return into pytest
        answer = "no error"
        try:
            os.setgid(65534)
            os.setuid(65534)
            outputs.prepare(shared_dir / "p.json", outputs.PLAN)
        except LedgerctlError as exc:
            answer = f"{exc.exit_code} {exc}"
        except BaseException as exc:
            answer = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(write, answer.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        answer = fh.read()
    os.waitpid(pid, 0)
    assert answer.startswith("3 cannot write") and "permission denied" in answer, answer
    assert os.listdir(shared_dir) == []


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    what=st.sampled_from(["missing", "foreign", "ours", "empty", "link", "fifo", "device"]),
    force=st.booleans(),
    kind=st.sampled_from([outputs.PLAN, outputs.MAPPING, outputs.BACKUP]),
)
def test_no_output_replaces_what_it_may_not(
    tmp_path_factory: pytest.TempPathFactory, what: str, force: bool, kind: outputs.OutputKind
) -> None:
    """Whatever stands at the path: a device, FIFO or link is never replaced, a foreign
    file only with force, and a refusal is one LedgerctlError."""
    d = tmp_path_factory.mktemp("out")
    target = d / "t"
    foreign = b"precious\n"
    if what == "foreign":
        target.write_bytes(foreign)
    elif what == "ours":
        outputs.prepare(target, kind).write_text(
            PLAN_TEXT.replace("ledgerctl-plan", "ledgerctl-plan-backup")
            if kind is outputs.BACKUP
            else PLAN_TEXT
            if kind is outputs.PLAN
            else '{"first_index": 0, "index": 0, "legacy_kop_offset": 0, "messages": 1, '
            '"old_index": null, "old_position": "1:0"}\n'
        )
    elif what == "empty":
        target.write_bytes(b"")
    elif what == "link":
        target.symlink_to(d / "elsewhere")
    elif what == "fifo":
        os.mkfifo(target)
    elif what == "device":
        os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(*DEVICES["null"]))
    before = node_state(d)
    try:
        outputs.prepare(target, kind, force=force).write_text("new\n")
    except LedgerctlError:
        assert node_state(d) == before and (what != "foreign" or target.read_bytes() == foreign)
        assert what in ("foreign", "link", "fifo") and not (what == "foreign" and force)
        return
    assert what not in ("fifo", "link"), f"a {what} nobody reads was written"
    if what == "device":  # streamed into: still the device, nothing beside it
        assert node_state(d) == before
        return
    if what == "foreign":
        assert force
    assert target.read_bytes() == b"new\n" and os.listdir(d) == ["t"]


# -- documents read back ------------------------------------------------------------------------


def test_documents_come_from_regular_files_only(dev: Path, tmp_path: Path) -> None:
    for path, message in [
        (dev / "fifo", "it is a FIFO"),
        (dev / "zero", "it is a device"),
        (tmp_path, "it is a directory"),
        (Path("/"), "it is a directory"),
        ("", "an empty path"),
        (tmp_path / "none.json", "cannot read"),
    ]:
        started = time.monotonic()
        with pytest.raises(LedgerctlError, match=message) as info:
            load_document(path, "plan")
        assert "\n" not in str(info.value) and time.monotonic() - started < 2


def test_a_1gib_plan_is_refused_at_once(tmp_path: Path) -> None:
    import resource

    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: no disk used
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(LedgerctlError, match="more than the 268435456 bytes"):
        load_document(big, "plan")
    assert time.monotonic() - started < 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 64 * 1024  # KiB


def test_the_cap_holds_for_a_growing_file_and_can_be_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "p.json"
    doc.write_text("[" + "1," * 100 + "1]")
    monkeypatch.setenv(ENV_MAX_SIZE, "100")
    with pytest.raises(LedgerctlError, match=ENV_MAX_SIZE):
        read_document(doc, "plan")
    monkeypatch.setenv(ENV_MAX_SIZE, "1000")
    assert load_document(doc, "plan")[0] == 1
    monkeypatch.setenv(ENV_MAX_SIZE, "lots")
    with pytest.raises(LedgerctlError, match="expected a number of bytes"):
        read_document(doc, "plan")


@pytest.mark.parametrize("depth", [1_025, 100_000])
def test_deep_json_is_one_line(tmp_path: Path, depth: int) -> None:
    for opening, closing in (("[", "]"), ('{"a":', "}")):
        doc = tmp_path / "deep.json"
        doc.write_text(opening * depth + "1" + closing * depth)
        with pytest.raises(LedgerctlError, match="is not JSON") as info:
            load_document(doc, "plan")
        assert "\n" not in str(info.value)


def test_standard_input_where_a_command_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"a": 1}')))
    assert load_document("-", "verify report", stdin=True) == {"a": 1}
