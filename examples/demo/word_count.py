#!/usr/bin/env python3
"""toolmesh command tool: counts the words of `text`.

Reads the arguments as JSON on stdin ({"text": "..."}) and prints
{"words": N} on stdout. The registry has already validated the arguments
against the schema declared in sidecar.yaml.
"""
import json
import sys

args = json.load(sys.stdin)
json.dump({"words": len(args["text"].split())}, sys.stdout)
