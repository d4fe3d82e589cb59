"""No traceback, no hang, whatever the option (issue 24 point 5, issue 21 acceptance).

Every command's declared options and arguments get values of their type and of others
(tests/support/cli_fuzz.py): huge, negative and non-integer numbers, unicode, bytes that are not
UTF-8, markup, empty values, special paths (``/``, ``/proc/self/status``, a FIFO and
device nodes made in a temporary directory, a JSON document nested 100,000 deep). Each
case runs in-process in a worker with a memory limit, under a per-case timeout, and must
end with a documented exit code, any error as one ``ledgerctl: error:`` line, and
``-o jsonl`` output one JSON object per line.

The bounded runs here take about a minute; scripts/fuzz_cli.py is the long run whose
figures are in docs/hostile-inputs.md.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import cli_fuzz
from tests.support.cli_fuzz import Kind, Outcome, Worker, World, judge

#: a generous bound of CPU time for one case (a hang that waits is caught after two
#: minutes of wall-clock time: a store that does not answer costs 5 s, a FIFO nobody
#: writes to 5 s)
CASE_SECONDS = 20.0
COMMANDS = cli_fuzz.command_specs()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    assert os.geteuid() == 0, "the fuzz world makes device nodes: run the suite as root"
    return cli_fuzz.build_world(tmp_path_factory.mktemp("cli-fuzz"))


@pytest.fixture(scope="module")
def worker(world: World) -> Iterator[Worker]:
    with Worker(world, CASE_SECONDS) as running:
        yield running


@pytest.fixture(scope="module")
def impatient(world: World) -> Iterator[Worker]:
    """A worker for the cases known to hang today: a hang is seen in 3 s, not 20."""
    with Worker(world, 3.0, wall=3.0) as running:
        yield running


def _check(outcome: Outcome) -> None:
    wrong = judge(outcome)
    assert not wrong, (
        f"ledgerctl {' '.join(map(repr, outcome.argv))}\n"
        f"exit {outcome.code}; wrong: {wrong}\nstderr: {outcome.err[-2000:]}\n"
        f"{outcome.detail[-4000:]}"
    )


def test_the_specs_cover_every_command_and_option() -> None:
    """The fuzzer reads the app itself: a new command or option is fuzzed without an edit."""
    paths = {" ".join(c.path) for c in COMMANDS}
    for expected in ("inspect", "seek", "migrate index", "repair missing-ledgers", "apply"):
        assert expected in paths
    seek = next(c for c in COMMANDS if c.path == ("seek",))
    kinds = {p.opts[0]: p.kind for p in seek.params if p.opts}
    assert kinds["--ledger"] is Kind.INT and kinds["--bookie-timeout"] is Kind.FLOAT
    assert kinds["--output"] is Kind.CHOICE and kinds["--explain"] is Kind.FLAG
    roles = {
        p.opts[0]: p.role for c in COMMANDS for p in c.params if p.kind is Kind.PATH and p.opts
    }
    assert roles["--plan"] == "output" and roles["--bookie-dir"] == "input"
    assert roles["--from-verify"] == "plan-input"


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_options_end_with_a_documented_code(
    world: World, worker: Worker, data: st.DataObject
) -> None:
    _check(worker.run(data.draw(cli_fuzz.cases(world, COMMANDS), label="argv")))


def test_the_root_option_meets_its_hostile_values(worker: Worker) -> None:
    """``ledgerctl --max-message-size SIZE``: the one option of the root, before any command."""
    for value in ["", "0", "-1", "nan", "1e400", str(2**63), "9" * 30 + "GiB", "\udcff", "[/]"]:
        outcome = worker.run(["--max-message-size", value, "topic", "list"])
        _check(outcome)
        assert outcome.code == 2, (value, outcome.err)
        assert "--max-message-size" in outcome.err


def _sweep() -> list[tuple[tuple[str, ...], str, str]]:
    """(command, option, value): every number option with the values that broke them, and
    every distinct path option with every special path, each once."""
    numbers = {
        Kind.INT: [str(2**63), str(-(2**63) - 1), "10" * 20, "-1", "1e3", "\udcff"],
        Kind.FLOAT: ["nan", "inf", "-1", "1e308", "99999999999999999999"],
        Kind.TEXT: ["", "[/]", ":1234:", "\udcff", "\x1b[2J"],
    }
    cases: list[tuple[tuple[str, ...], str, str]] = []
    seen: set[tuple[str, str]] = set()
    for command in COMMANDS:
        for param in command.params:
            if not param.opts or param.role in ("spark-master", "spark-threshold"):
                continue
            option = param.opts[0]
            if param.kind in numbers and (param.kind is not Kind.TEXT or param.role):
                for value in numbers[param.kind]:
                    cases.append((command.path, option, value))
            elif param.kind is Kind.PATH and (option, param.role) not in seen:
                seen.add((option, param.role))
                cases.append((command.path, option, param.role))
    return cases


SWEEP = _sweep()


@pytest.mark.parametrize("chunk", range(4))
def test_every_option_meets_its_hostile_values(world: World, worker: Worker, chunk: int) -> None:
    """The sweep, a quarter at a time: no option of any command is left out."""
    topics = {"topic": "batched", "shadow_topic": "batched-shadow", "subscription": "sub"}
    for path, option, value in SWEEP[chunk::4]:
        command = next(c for c in COMMANDS if c.path == path)
        arguments = [topics.get(p.name, "4") for p in command.params if p.is_argument]
        values = [value]
        if value in ("input", "output", "plan-input"):
            specials = world.input_paths() if value != "output" else world.output_paths()
            values = list(specials)
        for v in values:
            _check(worker.run([*path, *arguments, option, v]))


# -- plans and reports read (pulsarctl_py.documents), outputs written (pulsarctl_py.outputs) --


@pytest.mark.parametrize(
    "argv",
    [
        [*command, special]
        for command, special in itertools.product(
            (["apply"], ["undo"], ["repair", "--from-verify"]), ("fifo", "zero", "deep.json")
        )
    ],
    ids=lambda argv: " ".join(argv),
)
def test_a_plan_that_is_a_fifo_a_device_or_deep_json(
    world: World, impatient: Worker, argv: list[str]
) -> None:
    outcome = impatient.run([*argv[:-1], str(world.special / argv[-1])])
    _check(outcome)
    assert outcome.code == 2


def test_compact_export_to_a_fifo(world: World, impatient: Worker) -> None:
    _check(impatient.run(["compact", "batched", "--export", str(world.special / "fifo")]))
