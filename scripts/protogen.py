"""Generate proto/*_pb2.py and *_pb2.pyi from proto/*.proto, or check that they are fresh.

    python scripts/protogen.py          # regenerate
    python scripts/protogen.py --check  # exit 1 when the committed modules drift from the schemas

The schemas are compiled as if they lived at pulsarctl_py/proto/, their installed
location, so that the generated modules import each other as pulsarctl_py.proto.*
and their descriptors cannot clash with another package's PulsarApi.proto.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
INSTALLED_AS = Path("pulsarctl_py") / "proto"


def generate(out_dir: Path) -> list[Path]:
    """Compile every schema into out_dir; return the generated files."""
    from grpc_tools import protoc  # a development dependency only

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        gen = Path(tmp) / "gen"
        (src / INSTALLED_AS).mkdir(parents=True)
        gen.mkdir()
        schemas = sorted(PROTO_DIR.glob("*.proto"))
        for schema in schemas:
            shutil.copy(schema, src / INSTALLED_AS / schema.name)
        args = [
            "protoc",
            f"-I{src}",
            f"--python_out={gen}",
            f"--pyi_out={gen}",
            *[str(INSTALLED_AS / s.name) for s in schemas],
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        produced = []
        for path in sorted((gen / INSTALLED_AS).iterdir()):
            target = out_dir / path.name
            shutil.copy(path, target)
            produced.append(target)
        return produced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    if not args.check:
        for path in generate(PROTO_DIR):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        drift = []
        fresh = generate(Path(tmp))
        for path in fresh:
            committed = PROTO_DIR / path.name
            if not committed.exists() or committed.read_bytes() != path.read_bytes():
                drift.append(path.name)
        stale = {p.name for p in PROTO_DIR.glob("*_pb2.py*")} - {p.name for p in fresh}
        drift.extend(sorted(stale))
    if drift:
        print("generated protobuf modules drift from proto/*.proto: " + ", ".join(drift))
        print("run: python scripts/protogen.py")
        return 1
    print("generated protobuf modules are fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
