#!/usr/bin/env python3
# loom:name: count_lines
# loom:description: Counts the lines of each given file (paths relative to the workspace).
# loom:args: {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}}}, "required": ["paths"], "additionalProperties": false}
import json
import sys

args = json.loads(sys.argv[1])
for path in args["paths"]:
    with open(path) as f:
        print(f"{path}: {sum(1 for _ in f)} lines")
