"""A command-backend tool for the agent tests: JSON arguments on stdin, JSON result on stdout."""
import json
import sys

args = json.load(sys.stdin)
print(json.dumps({"words": len(args["text"].split())}))
