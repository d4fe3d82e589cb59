"""inspect's read path, entry heads against the general path, in CPU time per entry.

On a data directory written by ``bench/cli.py --data DIR`` (a row's ledger of 10^5
entries, such as ``DIR/n100000/db-crc32c``), in one process, best of 3
(``time.process_time``), output to /dev/null through the command's own output function
(``commands/inspect.py`` ``_show`` with ``fast`` on and off; both write the same bytes,
tests/test_inspect_heads.py):

* ``inspect --depth entry -o jsonl``;
* ``inspect --since T -o jsonl`` at depth messages and metadata, T the median broker
  timestamp (half the entries dropped by the filter);
* with no metadata (digest type detected): ``decode_entry`` per entry with detection
  against ``LedgerSource.entries``' decoding (detected once per ledger).

Prints one JSON object per line.

    python bench/cli.py --entries 100000 --runs 1 --rows db/crc32c --data DIR
    python bench/inspect_paths.py DIR/n100000/db-crc32c
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

from pulsarctl_py.commands.inspect import _show
from pulsarctl_py.decoders import Depth, decode_entry
from pulsarctl_py.inspect_request import InspectRequest, Summary
from pulsarctl_py.ledgers import LedgerSource, _Detecting
from pulsarctl_py.render import OutputFormat

LEDGER_ID = 7


def best(fn: Callable[[], object], runs: int = 3) -> float:
    out = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        out = min(out, time.process_time() - start)
    return out


def main(root: Path) -> None:
    with open(os.devnull, "w") as null:

        def show(source: LedgerSource, request: InspectRequest, fast: bool) -> None:
            with redirect_stdout(null):
                _show(source, request, Summary(), OutputFormat.JSONL, False, quiet=True, fast=fast)

        with LedgerSource.open(f"rocksdb://{root / 'metadata'}", [root / "bookie"]) as source:
            assert source.bookie is not None
            view = source.ledger(LEDGER_ID)
            n = (view.last_stored or 0) + 1
            times = sorted(h.broker_timestamp or 0 for h in source.bookie.read_heads(LEDGER_ID))
            middle = times[n // 2]
            for name, request in (
                ("--depth entry", InspectRequest(ledger_id=LEDGER_ID, depth=Depth.ENTRY)),
                ("--since median", InspectRequest(ledger_id=LEDGER_ID, since=middle)),
                (
                    "--depth metadata --since median",
                    InspectRequest(ledger_id=LEDGER_ID, depth=Depth.METADATA, since=middle),
                ),
            ):
                fast = best(lambda r=request: show(source, r, True))
                general = best(lambda r=request: show(source, r, False))
                result = {
                    "inspect": name,
                    "entries": n,
                    "heads_us_per_entry": round(fast / n * 1e6, 2),
                    "general_us_per_entry": round(general / n * 1e6, 2),
                    "speedup": round(general / fast, 2),
                }
                print(json.dumps(result))
    with LedgerSource.open(None, [root / "bookie"]) as source:
        assert source.bookie is not None
        view = source.ledger(LEDGER_ID)
        options = source.entry_options(view)
        stored = [(s.data, (LEDGER_ID, s.entry_id)) for s in source.bookie.read_entries(LEDGER_ID)]

        def each() -> None:
            for data, position in stored:
                decode_entry(data, options, position)

        def once() -> None:
            decode = _Detecting(options)
            for data, position in stored:
                decode(data, position)

        n = len(stored)
        print(
            json.dumps(
                {
                    "decode without metadata": "digest type detected",
                    "entries": n,
                    "detected_per_entry_us": round(best(each) / n * 1e6, 2),
                    "detected_once_us": round(best(once) / n * 1e6, 2),
                }
            )
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
