#!/usr/bin/env node
// slugify over HTTP: the same tool as slugify.mjs, as a small HTTP JSON
// service that knows nothing about toolmesh; the sidecar's `http` backend
// POSTs the arguments to it (docs/tools-in-any-language.md).
//
//   PORT=8091 node server.mjs            # then: toolmesh-sidecar --config sidecar.yaml
//
// POST /slugify with the arguments as the JSON body:
//   200 {"slug": "..."}                  the result
//   422 {"error": "..."}                 a failure the agent sees as an is_error result
//   401 {"error": "..."}                 the x-tool-key header is not $TOOL_KEY (default example-key)
// Prints "listening on http://HOST:PORT" once it accepts connections.

import * as http from 'node:http';
import { delay, slugify, ToolInputError } from './slug.mjs';

const host = process.env.HOST || '127.0.0.1';
const port = Number(process.env.PORT ?? 8091);
const key = process.env.TOOL_KEY || 'example-key';

function reply(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

const server = http.createServer(async (req, res) => {
  if (req.method !== 'POST' || req.url !== '/slugify') return reply(res, 404, { error: 'POST /slugify' });
  // Sent by the sidecar from the `headers` of the tool's http backend.
  if (req.headers['x-tool-key'] !== key) return reply(res, 401, { error: 'missing or wrong x-tool-key header' });
  let body = '';
  for await (const chunk of req) body += chunk;
  let args;
  try {
    args = JSON.parse(body);
  } catch {
    return reply(res, 400, { error: 'the body is not JSON' });
  }
  await delay(args.delay);
  try {
    reply(res, 200, slugify(args));
  } catch (err) {
    if (!(err instanceof ToolInputError)) throw err;
    reply(res, 422, { error: err.message });
  }
});

server.listen(port, host, () => {
  const { address, port: bound } = server.address();
  console.log(`listening on http://${address}:${bound}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
