"""Plans are untrusted input, bound to their store; output paths never clobber.

One named test per finding of the adversarial run about plans and output paths (each
failed before plans were validated and bound and outputs went through one module), on
real stores: verify worlds (Pulsar's RocksDB store or a real ZooKeeper, a stopped
bookie's directory), demo data directories, and the CLI as users type it.

A hand edit is made as an attacker could: the plan's digest is made again
(:func:`resign`), since the digest is tamper evidence, not a secret. Device nodes are
made in a temporary directory with ``mknod`` (the tests run as root), never the
machine's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarctl_py.demo import create_demo
from pulsarctl_py.stores.metadata import open_metadata_store
from tests.plans.test_bookie_index import ORPHAN, _flags, index_dump, stored
from tests.repair.test_repairs import snapshot
from tests.support.cli_helpers import Result, run
from tests.support.demo_env import isolate
from tests.support.verify_world import ORDERS, World, build_world

PLAIN = "persistent://public/default/plain"
#: (major, minor) of the character devices the adversarial run clobbered
DEVICES = {"null": (1, 3), "zero": (1, 5), "urandom": (1, 9)}


def resign(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its digest made again: sha256 of the canonical JSON of the rest."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return body | {"digest": hashlib.sha256(text.encode()).hexdigest()}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def edit(path: Path, change: Any, *, sign: bool = True) -> None:
    """Apply ``change(doc)`` to the plan file at ``path`` (then sign it again)."""
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(resign(doc) if sign else doc, indent=2))


def one_line(r: Result, code: int) -> None:
    """Exit ``code`` with one error line, the last on stderr (warnings may come first)."""
    assert r.code == code, (r.code, r.err)
    lines = r.err.splitlines()
    errors = [line for line in lines if line.startswith("ledgerctl: error:")]
    assert "Traceback" not in r.err and len(errors) == 1 and lines[-1] == errors[0], r.err


def orphan_plan(capsys: pytest.CaptureFixture[str], world: World, path: Path) -> None:
    r = run(capsys, "orphans", "--delete", "--min-age", "0", *_flags(world), "--plan", path)
    assert r.code == 0, r.err


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    d = tmp_path / "dev"
    d.mkdir()
    for name, (major, minor) in DEVICES.items():
        os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    return d


def nodes(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        p.name: (stat.S_IFMT(p.lstat().st_mode), p.lstat().st_rdev) for p in directory.iterdir()
    }


@pytest.fixture
def demo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh demo data directory, the working directory of the test."""
    isolate(monkeypatch, tmp_path)
    root = tmp_path / "demo"
    create_demo(root)
    monkeypatch.chdir(root)
    return root


def demo_snapshot(root: Path) -> dict[str, str]:
    return snapshot(f"rocksdb://{root / 'metadata'}")


# -- a plan edited by hand ------------------------------------------------------------------------


def test_an_edited_plan_cannot_delete_a_file_outside_the_bookie_directories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 24: apply deleted a file outside every bookie directory, calling it
    'ledger 1: index file'."""
    world = build_world(tmp_path / "w", "orphan-ledger", index="idx")
    plan = tmp_path / "plan.json"
    orphan_plan(capsys, world, plan)
    victim = tmp_path / "victim.conf"
    victim.write_bytes(b"keep me\n")
    before = (snapshot(world.metadata_url), index_dump(world))

    def retarget(doc: dict[str, Any]) -> None:
        change = doc["bookie"][0]
        change.update(path=str(victim), old_base64=b64(b"keep me\n"), old_sha256=sha(b"keep me\n"))

    edit(plan, retarget)
    r = run(capsys, "apply", plan)
    one_line(r, 2)
    assert "refused" in r.err and str(victim) in r.err
    assert victim.read_bytes() == b"keep me\n"
    # inside the bookie directory, but another ledger's index file: refused too
    other = next((world.bookie_dir / "current").rglob("a.idx"))
    edit(
        plan,
        lambda doc: doc["bookie"][0].update(
            path=str(other), old_base64=b64(other.read_bytes()), old_sha256=sha(other.read_bytes())
        ),
    )
    one_line(run(capsys, "apply", plan), 2)
    assert (snapshot(world.metadata_url), index_dump(world)) == before


def test_an_edited_plan_cannot_retarget_a_change_to_ledgers_layout(
    capsys: pytest.CaptureFixture[str], demo_dir: Path
) -> None:
    """Issue 24: a change retargeted to /ledgers/LAYOUT (or INSTANCEID) was written."""
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--to", "5:0", "--plan", "p.json")
    assert r.code == 0, r.err
    before = demo_snapshot(demo_dir)
    with open_metadata_store("rocksdb://metadata") as store:
        targets = {key: store.get(key) for key in ("/ledgers/LAYOUT", "/ledgers/INSTANCEID")}
    for key, node in targets.items():
        assert node is not None
        for kind in ("cursor", "ledger", "managed-ledger"):

            def retarget(
                doc: dict[str, Any], key: str = key, kind: str = kind, node: Any = node
            ) -> None:
                doc["changes"][0].update(
                    key=key,
                    kind=kind,
                    version=node.stat.version,
                    creation=node.stat.creation,
                    old_base64=b64(node.data),
                    old_sha256=sha(node.data),
                )

            edit(Path("p.json"), retarget)
            r = run(capsys, "apply", "p.json")
            one_line(r, 2)
            assert f"{key} is not a {kind} node" in r.err
    assert demo_snapshot(demo_dir) == before


def test_an_edited_plan_cannot_write_a_value_that_does_not_decode(
    capsys: pytest.CaptureFixture[str], demo_dir: Path
) -> None:
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--to", "5:0", "--plan", "p.json")
    assert r.code == 0, r.err
    before = demo_snapshot(demo_dir)
    garbage = b"\xff\xff\xff\xff not a cursor"
    edit(
        Path("p.json"),
        lambda doc: doc["changes"][0].update(new_base64=b64(garbage), new_sha256=sha(garbage)),
    )
    r = run(capsys, "apply", "p.json")
    one_line(r, 2)
    assert "is not a cursor value" in r.err
    assert demo_snapshot(demo_dir) == before


@pytest.mark.parametrize("store_kind", ["rocksdb", "zookeeper"])
def test_a_key_deleted_and_created_again_with_the_same_bytes_is_a_conflict(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    store_kind: str,
) -> None:
    """Issue 24: between plan and apply the orphan's ledger znode was deleted and created
    again with the same bytes (version 0 again); apply deleted it without a conflict."""
    if store_kind == "rocksdb":
        world = build_world(tmp_path / "w", "orphan-ledger")
    else:
        url = request.getfixturevalue("scratch_zk")
        with open_metadata_store(url, read_only=False) as store:
            world = build_world(tmp_path / "w", "orphan-ledger", store=store, metadata_url=url)
    plan = tmp_path / "plan.json"
    orphan_plan(capsys, world, plan)
    doc = json.loads(plan.read_text())
    key = next(c["key"] for c in doc["changes"] if c["kind"] == "ledger")
    with open_metadata_store(world.metadata_url, read_only=False) as store:
        node = store.get(key)
        assert node is not None and node.stat.version == 0
        store.delete(key, 0)
        time.sleep(0.005)  # the RocksDB store tells incarnations apart by creation time
        store.put(key, node.data, -1)
        again = store.get(key)
        assert again is not None and (again.data, again.stat.version) == (node.data, 0)
    before = (snapshot(world.metadata_url), index_dump(world))
    r = run(capsys, "apply", plan)
    one_line(r, 5)
    assert "deleted and created again" in r.err and "nothing was written" in r.err
    assert (snapshot(world.metadata_url), index_dump(world)) == before
    assert ORPHAN in stored(world)


def test_a_hand_edited_plan_is_detected(capsys: pytest.CaptureFixture[str], demo_dir: Path) -> None:
    """Issue 20: any edit, even of a field apply never acts on, is refused."""
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--to", "5:0", "--plan", "p.json")
    assert r.code == 0, r.err
    before = demo_snapshot(demo_dir)
    edit(Path("p.json"), lambda doc: doc["changes"][0]["why"].append("looks fine"), sign=False)
    r = run(capsys, "apply", "p.json")
    one_line(r, 2)
    assert "plan was edited after it was made" in r.err
    r = run(capsys, "undo", "p.json")
    one_line(r, 2)
    assert "plan was edited after it was made" in r.err
    assert demo_snapshot(demo_dir) == before


# -- plans that are not plan files -------------------------------------------------------------


def script(*args: str, timeout: float = 30) -> Result:
    """ledgerctl in a child process (a hang is a failure, not a stuck suite); its peak
    RSS in KiB is appended to stderr as a last line ``VmHWM <n>``."""
    code = (
        "import sys\n"
        "from pulsarctl_py.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "sys.stderr.write(f'VmHWM {hwm}\\n')\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, timeout=timeout, text=True
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def peak_and_error(r: Result) -> tuple[int, str]:
    lines = r.err.splitlines()
    assert lines and lines[-1].startswith("VmHWM "), r.err
    return int(lines[-1].split()[1]), "\n".join(lines[:-1])


def test_a_1gib_plan_is_refused_quickly_in_bounded_memory(tmp_path: Path) -> None:
    """Issue 24: a 1 GiB plan was read whole (5.3 GB, then a MemoryError traceback)."""
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.write(b'{"format": "ledgerctl-plan", "changes": ["')
        fh.truncate(1 << 30)
    started = time.monotonic()
    r = script("apply", str(big))
    peak_kib, err = peak_and_error(r)
    assert r.code == 2 and err.startswith("ledgerctl: error:") and "more than" in err, err
    assert time.monotonic() - started < 20 and peak_kib < 300 * 1024


@pytest.mark.parametrize("verb", ["apply", "undo"])
def test_empty_root_fifo_device_and_deep_plans_are_one_line(
    tmp_path: Path, dev: Path, verb: str
) -> None:
    """Issue 24: an empty or / plan path, /dev/zero or a FIFO as a plan (hangs), a JSON
    document nested 100,000 deep (RecursionError) were tracebacks or hangs."""
    os.mkfifo(tmp_path / "fifo")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases = {
        "": "an empty path names nothing",
        "/": "it is a directory",
        str(tmp_path / "fifo"): "it is a FIFO",
        str(dev / "zero"): "it is a device",
        str(deep): "is not JSON",
    }
    for path, message in cases.items():
        r = script(verb, path, timeout=20)
        _, err = peak_and_error(r)
        assert r.code == 2 and err.count("\n") == 0 and message in err, (path, err)
    assert stat.S_ISFIFO((tmp_path / "fifo").lstat().st_mode)


def test_repair_from_verify_reads_its_report_as_untrusted(
    capsys: pytest.CaptureFixture[str], demo_dir: Path, dev: Path
) -> None:
    deep = demo_dir.parent / "deep.json"
    deep.write_text("{" + '"a":{' * 100_000 + "}" * 100_001)
    for report, message in ((dev / "zero", "it is a device"), (deep, "is not JSON")):
        r = run(capsys, "repair", "--from-verify", report, "--plan", "p.json")
        one_line(r, 2)
        assert message in r.err
    assert not Path("p.json").exists() and not any(
        p.name.startswith(".p.json") for p in Path().iterdir()
    )


# -- output paths ---------------------------------------------------------------------------------


def plan_commands(world: World, report: Path) -> dict[str, list[str]]:
    """Every verb that saves a plan, on the world (whose orders topic has a cursor past
    its ledger's end and an orphan ledger)."""
    flags = _flags(world)
    return {
        "repair clamp-cursors": ["repair", "clamp-cursors", ORDERS, *flags],
        "repair cursor": ["repair", "cursor", ORDERS, "sub", "--earliest", *flags],
        "orphans": ["orphans", "--delete", "--min-age", "0", *flags],
        "repair --from-verify": ["repair", "--from-verify", str(report), *flags],
        "migrate index": ["migrate", "index", "persistent://tenant-b/ns/plain", *flags],
    }


@pytest.fixture
def plan_world(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[World, Path]:
    world = build_world(tmp_path / "w", "orphan-ledger")
    report = tmp_path / "verify.json"
    report.write_text(run(capsys, "verify", "--all", *_flags(world), "-o", "json").out)
    return world, report


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_a_plan_to_a_device_never_replaces_it(
    capsys: pytest.CaptureFixture[str],
    plan_world: tuple[World, Path],
    dev: Path,
    device: str,
) -> None:
    """Issue 24: --plan /dev/zero (/dev/null, /dev/urandom) replaced the device node with
    a regular file, for every verb, and the mapping went beside it in /dev."""
    world, report = plan_world
    before_nodes = nodes(dev)
    before = (snapshot(world.metadata_url), index_dump(world))
    for verb, args in plan_commands(world, report).items():
        r = run(capsys, *args, "--plan", dev / device, "-o", "json")
        if verb == "migrate index":  # it writes ledgers only the saved plan references
            one_line(r, 2)
            assert "not a regular file" in r.err
        else:
            assert r.code == 0, (verb, r.err)
            assert "plan discarded" in r.err
        assert nodes(dev) == before_nodes, verb  # still devices; no sibling made in dev/
    r = run(
        capsys, *plan_commands(world, report)["repair cursor"], "--plan", dev / device, "--apply"
    )
    one_line(r, 2)
    assert "--apply keeps the plan" in r.err
    assert nodes(dev) == before_nodes
    assert (snapshot(world.metadata_url), index_dump(world)) == before


def test_a_plan_never_overwrites_a_file_it_did_not_write(
    capsys: pytest.CaptureFixture[str], plan_world: tuple[World, Path], tmp_path: Path
) -> None:
    """Issue 24: --plan on an existing file (/etc/hosts would do) overwrote it silently;
    a symbolic link was replaced by a file."""
    world, report = plan_world
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    link = tmp_path / "link.json"
    link.symlink_to(hosts)
    for verb, args in plan_commands(world, report).items():
        r = run(capsys, *args, "--plan", hosts)
        one_line(r, 2)
        assert "will not overwrite" in r.err and "--force" in r.err, verb
        r = run(capsys, *args, "--plan", link, "--force")
        one_line(r, 2)
        assert f"{link}: it is a symbolic link" in r.err, verb
        assert hosts.read_text() == "127.0.0.1 localhost\n" and link.is_symlink()
    r = run(
        capsys,
        "migrate",
        "index",
        "persistent://tenant-b/ns/plain",
        *_flags(world),
        "--mapping",
        hosts,
    )
    one_line(r, 2)
    assert hosts.read_text() == "127.0.0.1 localhost\n"
    # ledgerctl's own earlier plan is replaced; --force replaces the file
    args = plan_commands(world, report)["repair cursor"]
    assert run(capsys, *args, "--plan", tmp_path / "p.json").code == 0
    assert run(capsys, *args, "--plan", tmp_path / "p.json").code == 0
    assert run(capsys, *args, "--plan", hosts, "--force").code == 0
    assert json.loads(hosts.read_text())["format"] == "ledgerctl-plan"


def test_migrate_index_puts_its_mapping_beside_a_plan_file_only(
    capsys: pytest.CaptureFixture[str], plan_world: tuple[World, Path], dev: Path
) -> None:
    world, _ = plan_world
    before = nodes(dev)
    r = run(
        capsys,
        "migrate",
        "index",
        "persistent://tenant-b/ns/plain",
        *_flags(world),
        "--mapping",
        dev / "null",
        "-o",
        "json",
    )
    assert r.code == 0, r.err
    assert nodes(dev) == before


def test_output_checks_come_before_the_work(
    capsys: pytest.CaptureFixture[str], demo_dir: Path
) -> None:
    """A path that cannot be written fails in one line before anything is read or
    computed (export --to an unwritable place said 'cannot read', after the work)."""
    for args in (
        ["export", "plain", "--to", "no/such/dir/out.jsonl"],
        ["compact", "tombstones", "--export", "no/such/dir/view.jsonl"],
        ["compact", "tombstones", "--export", "/proc/self/status"],
        ["repair", "clamp-cursors", PLAIN, "--plan", "no/such/dir/p.json"],
        ["migrate", "index", "seek-times", "--mapping", "no/such/dir/m.jsonl"],
    ):
        # a store that does not exist: had the work started, this would be the error
        r = run(capsys, *args, "--metadata-url", "rocksdb://no-such-store")
        one_line(r, 2)
        assert "cannot write" in r.err and "cannot read" not in r.err, args


def test_export_to_an_unwritable_directory_says_cannot_write_and_exits_3(
    tmp_path: Path,
) -> None:
    """Issue 24: permission errors exited 2 and `export --to` an unwritable directory said
    'cannot read'. Run as an unprivileged user (root writes anywhere) in a forked child."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="ledgerctl-hostile-"))
    try:
        top.chmod(0o755)
        create_demo(top / "demo")
        (top / "ro").mkdir(mode=0o555)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 99
            try:
                os.dup2(write, 2)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                sys.stderr = open(2, "w", closefd=False)
                sys.stdout = open(1, "w", closefd=False)
                os.environ["XDG_CONFIG_HOME"] = str(top)  # not root's own config
                # the same export once as root, into a null device of its own, so that
                # every module is imported (nobody cannot read this interpreter's library)
                from pulsarctl_py.cli import main

                os.mknod(top / "null", stat.S_IFCHR | 0o666, os.makedev(*DEVICES["null"]))
                os.chdir(top / "demo")
                assert main(["export", "plain", "--to", str(top / "null")]) == 0
                os.setgid(65534)
                os.setuid(65534)
                os.chdir(top / "demo")
                code = main(["export", "plain", "--to", str(top / "ro" / "out.jsonl")])
            except BaseException as exc:
                sys.stderr.write(f"the child failed: {type(exc).__name__}: {exc}\n")
            finally:
                sys.stderr.flush()
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as fh:
            err = fh.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3, err
        assert err.startswith("ledgerctl: error: cannot write") and "permission denied" in err
        assert os.listdir(top / "ro") == []
    finally:
        (top / "ro").chmod(0o755)
        import shutil

        shutil.rmtree(top)


def test_export_to_stdout_writes_json_lines(
    capfd: pytest.CaptureFixture[str], demo_dir: Path
) -> None:
    from pulsarctl_py.cli import main

    capfd.readouterr()
    assert main(["export", "plain", "--to", "/dev/stdout", "-o", "table"]) == 0
    out = capfd.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and all(row["topic"] == PLAIN for row in rows)


# -- plans bound to their store ----------------------------------------------------------------


def test_a_plan_made_in_one_demo_directory_is_refused_in_another(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20: a plan made in one demo directory was applied to another one's store
    (ledgerctl.toml says rocksdb://metadata; the versions happened to match)."""
    isolate(monkeypatch, tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    create_demo(a)
    create_demo(b)
    monkeypatch.chdir(a)
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--to", "5:0", "--plan", "../p.json")
    assert r.code == 0, r.err
    assert json.loads((tmp_path / "p.json").read_text())["metadata_url"] == (
        f"rocksdb://{a / 'metadata'}"
    )
    monkeypatch.chdir(b)
    before_a, before_b = demo_snapshot(a), demo_snapshot(b)
    r = run(capsys, "apply", "../p.json", "--metadata-url", "rocksdb://metadata")
    one_line(r, 2)
    assert "made for" in r.err and str(a / "metadata") in r.err
    assert (demo_snapshot(a), demo_snapshot(b)) == (before_a, before_b)
    # without --metadata-url it goes to the store it was made for, from anywhere
    assert run(capsys, "apply", "../p.json").code == 0
    assert demo_snapshot(a) != before_a and demo_snapshot(b) == before_b
    assert run(capsys, "undo", "../p.json").code == 0
    assert demo_snapshot(a) == before_a
    # a store created again at the same place is another store: its identity differs
    monkeypatch.chdir(tmp_path)
    create_demo(a, force=True)
    before = demo_snapshot(a)
    r = run(capsys, "apply", "p.json")
    one_line(r, 2)
    assert "is not the store the plan was made for" in r.err
    assert demo_snapshot(a) == before


def test_a_zookeeper_rebuilt_at_the_same_address_is_another_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scratch_zk: str
) -> None:
    from kazoo.client import KazooClient

    with open_metadata_store(scratch_zk, read_only=False) as store:
        world = build_world(tmp_path / "w", "orphan-ledger", store=store, metadata_url=scratch_zk)
    plan = tmp_path / "plan.json"
    orphan_plan(capsys, world, plan)
    connect, chroot = scratch_zk[len("zk:") :].split("/", 1)
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    try:
        client.delete("/" + chroot, recursive=True)
        client.ensure_path("/" + chroot)
    finally:
        client.stop()
        client.close()
    with open_metadata_store(scratch_zk, read_only=False) as store:
        build_world(tmp_path / "again", "orphan-ledger", store=store, metadata_url=scratch_zk)
    before = snapshot(scratch_zk)
    r = run(capsys, "apply", plan)
    assert r.code == 2 and "is not the store the plan was made for" in r.err, r.err
    assert snapshot(scratch_zk) == before


def test_apply_twice_says_already_applied_and_undo_needs_an_apply(
    capsys: pytest.CaptureFixture[str], demo_dir: Path
) -> None:
    """Issue 20: applying twice says 'already applied'; undo of a plan never applied is
    refused."""
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--to", "5:0", "--plan", "p.json")
    assert r.code == 0, r.err
    before = demo_snapshot(demo_dir)
    r = run(capsys, "undo", "p.json")
    one_line(r, 2)
    assert "was never applied" in r.err
    assert demo_snapshot(demo_dir) == before
    assert run(capsys, "apply", "p.json").code == 0
    applied = demo_snapshot(demo_dir)
    r = run(capsys, "apply", "p.json")
    assert r.code == 0 and "already applied" in r.err and "nothing written" in r.err
    assert demo_snapshot(demo_dir) == applied
    assert run(capsys, "undo", "p.json").code == 0
    assert demo_snapshot(demo_dir) == before
    r = run(capsys, "undo", "p.json")
    assert r.code == 0 and "already undone" in r.err
    # an applied plan's file is not overwritten (its undo needs it), an undone one may be
    assert run(capsys, "apply", "p.json").code == 5  # the versions moved on: make it again
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--to", "5:0", "--plan", "p.json")
    assert r.code == 0, r.err
    assert not Path("p.json.backup.json").exists()
    assert run(capsys, "apply", "p.json").code == 0
    r = run(capsys, "repair", "cursor", PLAIN, "sub-1", "--earliest", "--plan", "p.json")
    one_line(r, 2)
    assert "it is a plan that was applied" in r.err


def test_an_apply_cut_short_after_the_commit_is_finished_by_applying_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from pulsarctl_py.plans import apply_plan

    world = build_world(tmp_path / "w", "orphan-ledger")
    plan = tmp_path / "plan.json"
    orphan_plan(capsys, world, plan)

    class Crash(Exception):
        pass

    def crash(step: str) -> None:
        if step == "commit":
            raise Crash(step)

    with open_metadata_store(world.metadata_url, read_only=False) as store, pytest.raises(Crash):
        apply_plan(plan, store, after_step=crash)
    assert ORPHAN in stored(world)  # the metadata committed, the bookie side not yet
    r = run(capsys, "apply", plan)
    assert r.code == 0 and "resumed" in r.err, r.err
    assert ORPHAN not in stored(world)
    r = run(capsys, "apply", plan)
    assert r.code == 0 and "already applied" in r.err
    assert run(capsys, "undo", plan).code == 0
    assert ORPHAN in stored(world)


@pytest.fixture
def two_worlds(tmp_path: Path) -> Iterator[tuple[World, World]]:
    yield build_world(tmp_path / "a", "orphan-ledger"), build_world(tmp_path / "b", "orphan-ledger")


def test_a_plan_is_refused_on_another_bookie_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, two_worlds: tuple[World, World]
) -> None:
    """The bookie side is bound too: a plan pointed at another bookie's directory (edited,
    signed again) is refused before anything is written."""
    a, b = two_worlds
    plan = tmp_path / "plan.json"
    orphan_plan(capsys, a, plan)
    before = (snapshot(b.metadata_url), index_dump(b), index_dump(a))
    old, new = str(a.bookie_dir.resolve()), str(b.bookie_dir.resolve())

    def move(doc: dict[str, Any]) -> None:
        for item in doc["store"]["bookie_dirs"]:
            item["path"] = item["path"].replace(old, new)
        for change in doc["bookie"]:
            change["path"] = change["path"].replace(old, new)
            change["current"] = change["current"].replace(old, new)

    edit(plan, move)
    r = run(capsys, "apply", plan)
    one_line(r, 2)
    assert "is not the bookie directory the plan was made for" in r.err
    assert (snapshot(b.metadata_url), index_dump(b), index_dump(a)) == before
