"""Generated protobuf modules; the schemas beside them are the source (scripts/protogen.py)."""
