"""Stands in for Apple's `metal` and `metallib` in tests/cmake/metallib_rule: appends
one JSON line (the tool and its arguments) to LOG and creates the file after -o.

usage: stub_tool.py LOG TOOL ARGS...
"""
import json
import pathlib
import sys

log, tool, args = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(log, "a", encoding="utf-8") as out:
    out.write(json.dumps({"tool": tool, "args": args}) + "\n")
output = pathlib.Path(args[args.index("-o") + 1])
output.write_text(f"stub {tool} output\n", encoding="utf-8")
