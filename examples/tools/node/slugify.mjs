#!/usr/bin/env node
// slugify: a toolmesh command tool in Node.
//
// The contract (docs/tools-in-any-language.md): the arguments arrive as one
// JSON object on stdin, already validated by the registry against the
// input_schema in sidecar.yaml; the result is the JSON printed on stdout; a
// failure is a message on stderr and a non-zero exit code, which the agent
// receives as an `is_error` result.
//
//   echo '{"text": "Hello, World!"}' | node slugify.mjs
//   {"slug":"hello-world"}

import { delay, slugify, ToolInputError } from './slug.mjs';

let input = '';
for await (const chunk of process.stdin) input += chunk;
const args = JSON.parse(input);

await delay(args.delay);
try {
  process.stdout.write(JSON.stringify(slugify(args)));
} catch (err) {
  if (!(err instanceof ToolInputError)) throw err; // a bug: Node prints the stack, exit code 1
  process.stderr.write(err.message);
  process.exitCode = 1;
}
