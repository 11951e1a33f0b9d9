#!/usr/bin/env python3
"""toolmesh command tool that is slow on purpose.

It needs 5 s. Its descriptor allows 1 s for a call (Invoke): the sidecar
kills it at that deadline and the agent sees DEADLINE_EXCEEDED. Started as
a task, it may run 30 s (task_timeout), and it says how far it has come on
stderr, one `toolmesh-progress` line a second (docs/tools-in-any-language.md).
"""
import json
import sys
import time

args = json.load(sys.stdin)
for second in range(5):
    progress = {"fraction": second / 5, "message": f"counting {args['quarter']}: step {second + 1} of 5"}
    print("toolmesh-progress " + json.dumps(progress), file=sys.stderr, flush=True)
    time.sleep(1)
json.dump({"quarter": args["quarter"], "report": "all good"}, sys.stdout)
