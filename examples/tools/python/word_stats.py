#!/usr/bin/env python3
"""word_stats: a toolmesh command tool in Python.

The contract (docs/tools-in-any-language.md): the arguments arrive as one JSON
object on stdin, already validated by the registry against the input_schema
in sidecar.yaml; the result is the JSON printed on stdout; a failure is a
message on stderr and a non-zero exit code, which the agent receives as an
`is_error` result.

    echo '{"text": "the cat and the hat", "top": 1}' | python3 word_stats.py
    {"words": 5, "distinct": 4, "top": [{"word": "the", "count": 2}]}
"""

import json
import re
import sys
import time
from collections import Counter


def main() -> int:
    args = json.load(sys.stdin)
    # Only to try the tool's timeout: the sidecar kills the tool when it passes.
    time.sleep(args.get("delay", 0))

    words = re.findall(r"[\w']+", args["text"].lower())
    if not words:
        # Shown to the agent (and its LLM) as the error: say what to change.
        print("the text has no words: give a text with at least one word", file=sys.stderr)
        return 1

    top = Counter(words).most_common(args.get("top", 3))
    json.dump(
        {
            "words": len(words),
            "distinct": len(set(words)),
            "top": [{"word": word, "count": count} for word, count in top],
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
