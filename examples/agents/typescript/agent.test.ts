/**
 * Runs the TypeScript agent against the real toolmesh-registry and
 * toolmesh-sidecar. The binaries come from $TOOLMESH_BIN_DIR (default:
 * ../../../target/debug). Run: npm run generate && npm test
 */

import { after, before, describe, it } from 'node:test';
import * as assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  RateLimited,
  ToolArgumentError,
  ToolFailed,
  ToolmeshClient,
  ToolNotFound,
  ToolTimeout,
  ToolUnavailable,
  type ToolmeshError,
} from './agent';

const BIN_DIR = path.resolve(process.env.TOOLMESH_BIN_DIR || path.join(__dirname, '../../../target/debug'));
const WORD_COUNT = path.resolve(__dirname, '../testdata/word_count.py');
const TOOLS = ['always_fails', 'slow', 'word_count'];
const STARTUP_TIMEOUT_MS = 20_000;

const SIDECAR_YAML = `\
tools:
  - name: word_count
    description: Count the words in a text
    arguments:
      - {name: text, type: string, description: The text, required: true}
    rate_limit: {rate: 1, burst: 3}
    timeout: 2s
    idempotent: true
    backend:
      command: ["python3", ${JSON.stringify(WORD_COUNT)}]
  - name: always_fails
    description: A tool that always fails
    timeout: 2s
    backend:
      command: ["sh", "-c", "echo boom >&2; exit 1"]
  - name: slow
    description: A tool slower than its timeout
    timeout: 500ms
    backend:
      command: ["sleep", "10"]
`;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** SIGTERM, a bounded wait, then SIGKILL. */
async function stop(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  proc.kill('SIGTERM');
  // ref: false, so a pending timer does not keep the test process alive.
  const done = await Promise.race([exited.then(() => true), sleep(5_000, false, { ref: false })]);
  if (!done) {
    proc.kill('SIGKILL');
    await Promise.race([exited, sleep(5_000, undefined, { ref: false })]);
  }
}

/** A registry and one sidecar on ephemeral loopback ports. */
class Mesh {
  readonly procs: { name: string; proc: ChildProcess }[] = [];
  registryAddr = '';

  constructor(readonly workdir: string) {}

  async start(): Promise<void> {
    for (const binary of ['toolmesh-registry', 'toolmesh-sidecar']) {
      assert.ok(fs.existsSync(path.join(BIN_DIR, binary)), `${binary} missing in ${BIN_DIR}: run cargo build --workspace --bins`);
    }
    this.registryAddr = `127.0.0.1:${await freePort()}`;
    const sidecarAddr = `127.0.0.1:${await freePort()}`;
    const config = path.join(this.workdir, 'sidecar.yaml');
    fs.writeFileSync(config, SIDECAR_YAML);
    this.spawn('registry', 'toolmesh-registry', ['--listen', this.registryAddr, '--lease-ttl', '3s']);
    this.spawn('sidecar', 'toolmesh-sidecar', [
      '--config', config,
      '--registry', `http://${this.registryAddr}`,
      '--listen', sidecarAddr,
    ]);
  }

  private spawn(name: string, binary: string, args: string[]): void {
    const log = fs.openSync(path.join(this.workdir, `${name}.log`), 'w');
    const proc = spawn(path.join(BIN_DIR, binary), args, { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    this.procs.push({ name, proc });
  }

  logs(): string {
    return this.procs
      .map(({ name, proc }) => {
        const log = fs.readFileSync(path.join(this.workdir, `${name}.log`), 'utf8');
        return `--- ${name} (exit ${proc.exitCode ?? proc.signalCode}) ---\n${log}`;
      })
      .join('\n');
  }

  async waitForTools(client: ToolmeshClient, names: string[]): Promise<void> {
    const deadline = Date.now() + STARTUP_TIMEOUT_MS;
    let seen = new Set<string>();
    while (Date.now() < deadline) {
      for (const { name, proc } of this.procs) {
        if (proc.exitCode !== null || proc.signalCode !== null) {
          throw new Error(`${name} exited early\n${this.logs()}`);
        }
      }
      try {
        seen = new Set((await client.listTools([], 1_000)).map((t) => t.name));
      } catch {
        seen = new Set();
      }
      if (names.every((n) => seen.has(n))) return;
      await sleep(100);
    }
    throw new Error(`tools ${names.filter((n) => !seen.has(n))} did not appear in ${STARTUP_TIMEOUT_MS}ms\n${this.logs()}`);
  }

  async stop(): Promise<void> {
    // The sidecar first, so it withdraws while the registry still listens.
    for (const { proc } of [...this.procs].reverse()) await stop(proc);
  }
}

/** Asserts that `promise` rejects with an instance of `kind`, and returns the error. */
async function rejectsWith<E extends ToolmeshError>(
  promise: Promise<unknown>,
  kind: abstract new (...args: never[]) => E,
): Promise<E> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof kind, `expected ${kind.name}, got ${err}`);
    return err;
  }
  assert.fail(`expected ${kind.name}, but the call succeeded`);
}

describe('toolmesh TypeScript agent against the real registry and sidecar', () => {
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'toolmesh-ts-agent-'));
  const mesh = new Mesh(workdir);
  let client: ToolmeshClient;

  before(async () => {
    await mesh.start();
    client = new ToolmeshClient(mesh.registryAddr, undefined, 10_000);
    await mesh.waitForTools(client, TOOLS);
  });

  after(async () => {
    client?.close();
    await mesh.stop();
    fs.rmSync(workdir, { recursive: true, force: true });
  });

  /** Invoke, sleeping out rate limits (what a polite agent does). */
  async function invokeWaiting(name: string, args: Record<string, unknown>): Promise<unknown> {
    for (let i = 0; i < 10; i++) {
      try {
        return await client.invoke(name, args);
      } catch (err) {
        if (!(err instanceof RateLimited)) throw err;
        await sleep((err.retryAfter ?? 1) * 1000);
      }
    }
    assert.fail('still rate limited after 10 attempts');
  }

  it('lists tools with their schemas', async () => {
    const tools = new Map((await client.listTools()).map((t) => [t.name, t]));
    for (const name of TOOLS) assert.ok(tools.has(name), name);
    const wc = tools.get('word_count')!;
    assert.equal(wc.description, 'Count the words in a text');
    assert.equal(wc.inputSchema.type, 'object');
    assert.deepEqual(wc.inputSchema.required, ['text']);
    assert.equal((wc.inputSchema.properties as Record<string, { type: string }>).text.type, 'string');
    assert.equal(wc.rate, 1);
    assert.equal(wc.burst, 3);
    assert.equal(wc.timeout, 2);
    assert.equal(wc.idempotent, true);
    assert.equal(wc.instances, 1);
    assert.equal((await client.getTool('word_count')).name, 'word_count');
  });

  it('renders tools as OpenAI function definitions', async () => {
    const rendered = new Map((await client.asOpenAITools()).map((t) => [t.function.name, t]));
    const wc = rendered.get('word_count')!;
    assert.equal(wc.type, 'function');
    assert.deepEqual(Object.keys(wc.function).sort(), ['description', 'name', 'parameters']);
    assert.equal(wc.function.description, 'Count the words in a text');
    assert.equal((wc.function.parameters.properties as Record<string, { type: string }>).text.type, 'string');
    assert.equal(rendered.get('always_fails')!.function.parameters.type, 'object');
  });

  it('invokes a tool', async () => {
    assert.deepEqual(await invokeWaiting('word_count', { text: 'the quick brown fox' }), { words: 4 });
  });

  it('reports schema violations with JSON-pointer paths', async () => {
    const err = await rejectsWith(client.invoke('word_count', { text: 42 }), ToolArgumentError);
    assert.ok(err.violations.some((v) => v.path === '/text'), JSON.stringify(err.violations));
    assert.equal(err.status?.details.length, 1);
  });

  it('reports unknown tools', async () => {
    const err = await rejectsWith(client.invoke('no_such_tool'), ToolNotFound);
    assert.equal(err.tool, 'no_such_tool');
    await rejectsWith(client.getTool('no_such_tool'), ToolNotFound);
  });

  it('turns is_error results into ToolFailed', async () => {
    const err = await rejectsWith(client.invoke('always_fails'), ToolFailed);
    assert.match(err.message, /boom/);
  });

  it('reports a tool that outlives its timeout', async () => {
    const started = Date.now();
    await rejectsWith(client.invoke('slow'), ToolTimeout);
    assert.ok(Date.now() - started < 5_000);
  });

  it('reports rate limits with the retry delay', async () => {
    // rate 1/s, burst 3: a burst of calls must run out of tokens.
    const err = await rejectsWith(
      (async () => {
        for (let i = 0; i < 20; i++) await client.invoke('word_count', { text: 'hammer' });
      })(),
      RateLimited,
    );
    assert.ok(err.retryAfter !== undefined && err.retryAfter > 0 && err.retryAfter <= 1.5, String(err.retryAfter));
    assert.ok(err.quotaViolations.length > 0);
  });
});

describe('toolmesh TypeScript agent without a registry', () => {
  it('reports an unreachable registry as ToolUnavailable', async () => {
    const nowhere = new ToolmeshClient(`127.0.0.1:${await freePort()}`);
    try {
      await rejectsWith(nowhere.listTools([], 2_000), ToolUnavailable);
    } finally {
      nowhere.close();
    }
  });
});
