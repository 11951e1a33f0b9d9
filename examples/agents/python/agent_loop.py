"""An agent loop, runnable offline: a scripted stand-in plays the LLM.

What a real agent does with toolmesh, turn by turn, with no network but the
registry's: it searches the catalog for the task (SearchTools), gives the
model the few tools found as the LLM API takes them (ExportTools), runs the
call the model makes, and when the registry refuses the arguments, hands the
model the violations (each names the field to fix and what is allowed) so
that it corrects the call; a rate-limited call waits the delay the registry
gives. The stand-in slips the way models do (the right value under the wrong
name) and repairs its call from the violations alone.

Each call carries the digest of the definition the model was shown
(tool_digest, from the search's matches). If the tool has changed since,
the registry refuses the call (ToolChanged) and nothing runs: the loop
records which fields changed, fetches the definitions again, shows them to
the model and goes on (within MAX_TURNS calls).

    python3 agent_loop.py 'How many words are in "the quick brown fox"?'
    python3 agent_loop.py --registry http://10.0.0.5:50051 '...'
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from agent import RateLimited, ToolArgumentError, ToolChanged, ToolmeshClient

MAX_TURNS = 4


@dataclass
class Call:
    """A tool call the model asks for."""

    tool: str
    arguments: dict[str, Any]


@dataclass
class Step:
    """One turn of the transcript: what happened, and with what."""

    kind: str  # "search", "call", "refused", "limited", "changed", "result"
    detail: Any


@dataclass
class ScriptedModel:
    """Plays the LLM. It takes the first tool it is offered, and, as models
    do, puts the value it means (the task's quoted text) under a name the
    tool does not declare; given violations, it moves the unexpected value
    to the missing required field, and drops any other unexpected one."""

    slip: str = "input"
    turns: list[str] = field(default_factory=list)

    def first_call(self, task: str, tools: list[dict[str, Any]]) -> Call:
        chosen = tools[0]["function"]
        self.turns.append(f"chose {chosen['name']} of {[t['function']['name'] for t in tools]}")
        quoted = re.findall(r'"([^"]*)"', task)
        return Call(chosen["name"], {self.slip: quoted[0] if quoted else task})

    def repair(self, call: Call, violations: list[tuple[str, str]]) -> Call | None:
        missing = [path[1:] for path, message in violations if message.endswith("is a required property")]
        unexpected = [path[1:] for path, message in violations if message.startswith("unexpected property")]
        arguments = dict(call.arguments)
        if len(missing) == 1 and len(unexpected) == 1:
            arguments[missing[0]] = arguments.pop(unexpected[0])
        else:
            for name in unexpected:
                arguments.pop(name, None)
        if arguments == call.arguments:
            return None
        self.turns.append(f"repaired {call.arguments} to {arguments}")
        return Call(call.tool, arguments)

    def revise(self, task: str, call: Call, tools: list[dict[str, Any]]) -> Call:
        """`call` again once shown `tools` anew (its tool had changed): the
        same call if its tool is still offered (the registry checks the
        arguments against the new schema, and its violations say what to
        fix), else a first call among the tools now offered."""
        if any(t["function"]["name"] == call.tool for t in tools):
            self.turns.append(f"kept {call.tool} {call.arguments} under its new definition")
            return call
        return self.first_call(task, tools)


@dataclass
class Offer:
    """The tools shown to the model: as the LLM API takes them, and the
    digest of each definition, by name."""

    names: list[str]
    tools: list[dict[str, Any]]
    digests: dict[str, str]


def offer(client: ToolmeshClient, task: str) -> Offer:
    """Searches the catalog for `task` and exports the tools found as OpenAI
    Chat Completions definitions."""
    found = client.search_tools(task, limit=3)
    if not found:
        raise LookupError(f"no tool for {task!r}")
    names = [tool.name for tool, _ in found]
    tools = client.export_tools("openai_chat", names=names).tools
    return Offer(names, tools, {tool.name: tool.digest for tool, _ in found})


def run(client: ToolmeshClient, task: str, model: ScriptedModel, max_wait: float = 10.0) -> list[Step]:
    """Runs the loop for `task`; returns the transcript, ending with the
    result. Raises what the registry raised when the model cannot go on."""
    transcript: list[Step] = []
    shown = offer(client, task)
    transcript.append(Step("search", shown.names))
    call = model.first_call(task, shown.tools)
    waited = 0.0
    for _ in range(MAX_TURNS):
        transcript.append(Step("call", (call.tool, call.arguments)))
        try:
            result = client.invoke(call.tool, call.arguments, tool_digest=shown.digests.get(call.tool))
        except ToolChanged as err:
            # Nothing ran: show the model the definitions as they are now.
            transcript.append(Step("changed", {"tool": err.tool, "fields": err.changed}))
            shown = offer(client, task)
            transcript.append(Step("search", shown.names))
            call = model.revise(task, call, shown.tools)
            continue
        except ToolArgumentError as err:
            transcript.append(Step("refused", err.violations))
            repaired = model.repair(call, err.violations)
            if repaired is None:
                raise
            call = repaired
            continue
        except RateLimited as err:
            delay = err.retry_after or 1.0
            if waited + delay > max_wait:
                raise
            transcript.append(Step("limited", delay))
            time.sleep(delay)
            waited += delay
            continue
        transcript.append(Step("result", result))
        return transcript
    raise RuntimeError(f"no result in {MAX_TURNS} turns: {transcript}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=None)
    parser.add_argument("task", nargs="?", default='How many words are in "the quick brown fox jumps"?')
    opts = parser.parse_args(argv)
    with ToolmeshClient.from_env(opts.registry) as client:
        for step in run(client, opts.task, ScriptedModel()):
            print(f"{step.kind:8} {json.dumps(step.detail)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
