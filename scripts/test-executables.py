#!/usr/bin/env python3
"""The test executables of `cargo test --no-run --message-format=json` output (argv[1]),
one per line: "e2e|unit NAME DIR EXE". e2e: the basalt binary's end-to-end test files
(crates/cli/tests); DIR: the package's directory, where cargo would run the executable."""
import json
import os
import sys

for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m.get("profile", {}).get("test"):
        continue
    t = m["target"]
    e2e = "basalt-cli" in m["package_id"] and t["kind"] == ["test"]
    kind = "e2e" if e2e else "unit"
    print(kind, t["name"], os.path.dirname(m["manifest_path"]), m["executable"])
