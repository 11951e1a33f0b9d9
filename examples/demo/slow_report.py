#!/usr/bin/env python3
"""toolmesh command tool that is too slow on purpose.

It needs 5 s, its descriptor allows 1 s: the sidecar kills it at the
deadline and the agent sees DEADLINE_EXCEEDED.
"""
import json
import sys
import time

args = json.load(sys.stdin)
time.sleep(5)
json.dump({"quarter": args["quarter"], "report": "all good"}, sys.stdout)
