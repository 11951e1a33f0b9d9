/**
 * Runs the TypeScript agent against the real toolmesh-registry and
 * toolmesh-sidecar. The binaries come from $TOOLMESH_BIN_DIR (default:
 * ../../../target/debug). Run: npm run generate && npm test
 */

import { after, before, describe, it } from 'node:test';
import * as assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawn, spawnSync, type ChildProcess, type SpawnSyncReturns } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import * as protobuf from 'protobufjs';

import {
  EXIT,
  PROTO_DIR,
  InvalidAddress,
  InvalidCredential,
  RateLimited,
  TaskCancelled,
  TaskNotFound,
  ToolArgumentError,
  ToolChanged,
  ToolFailed,
  ToolmeshClient,
  ToolNotFound,
  ToolTimeout,
  ToolUnavailable,
  Unauthenticated,
  registryAddress,
  registryTarget,
  progressText,
  tokenFromEnv,
  Task,
  ToolmeshError,
  type ToolSpec,
} from './agent';
import type { ProtoGrpcType } from './gen/toolmesh';
import type { InvokeRequest__Output } from './gen/toolmesh/v1/InvokeRequest';
import type { Task__Output } from './gen/toolmesh/v1/Task';
import type { Tool } from './gen/toolmesh/v1/Tool';

const BIN_DIR = path.resolve(process.env.TOOLMESH_BIN_DIR || path.join(__dirname, '../../../target/debug'));
const WORD_COUNT = path.resolve(__dirname, '../testdata/word_count.py');
const SLOW_REPORT = path.resolve(__dirname, '../../demo/slow_report.py');
const AGENT = path.join(__dirname, 'agent.ts');
const REPO_PROTO = path.resolve(__dirname, '../../../proto/proto');
/** tsx's loader by absolute URL, so the CLI can be started from any folder. */
const TSX = pathToFileURL(require.resolve('tsx')).href;
const TOOLS = ['always_fails', 'echo', 'limited', 'slow', 'slow_report', 'word_count'];
const REPORT = { quarter: 'Q3', report: 'all good' };
/** Longest a test waits for slow_report's task (5 s of work) on a busy machine. */
const TASK_WAIT_MS = 60_000;
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
  - name: echo
    description: Returns its arguments
    timeout: 2s
    backend:
      command: ["cat"]
  - name: limited
    description: Returns its arguments, once per 100 seconds
    rate_limit: {rate: 0.01, burst: 1}
    timeout: 2s
    backend:
      command: ["cat"]
  - name: slow_report
    description: Build the quarterly report (5 s; 1 s as a call, 30 s as a task)
    arguments:
      - {name: quarter, type: string, enum: [Q1, Q2, Q3, Q4], required: true}
    timeout: 1s
    task_timeout: 30s
    backend:
      command: ["python3", ${JSON.stringify(SLOW_REPORT)}]
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

interface RunOptions {
  cwd?: string;
  stdin?: string;
  env?: Record<string, string>;
}

/** `node --import tsx ARGS` from another folder (a temp dir by default), without npm's INIT_CWD. */
function node(args: string[], opts: RunOptions = {}): SpawnSyncReturns<string> {
  const cwd = opts.cwd ?? fs.mkdtempSync(path.join(os.tmpdir(), 'toolmesh-ts-cwd-'));
  const env: NodeJS.ProcessEnv = { ...process.env, ...opts.env };
  delete env.INIT_CWD;
  try {
    return spawnSync(process.execPath, ['--import', TSX, ...args], {
      cwd,
      env,
      input: opts.stdin ?? '',
      encoding: 'utf8',
      timeout: 60_000,
    });
  } finally {
    if (!opts.cwd) fs.rmSync(cwd, { recursive: true, force: true });
  }
}

/** The agent's CLI (this folder's, or a copy's). */
function cli(args: string[], opts: RunOptions & { agent?: string } = {}): SpawnSyncReturns<string> {
  return node([opts.agent ?? AGENT, ...args], opts);
}

function assertExit(done: SpawnSyncReturns<string>, code: number): void {
  assert.equal(done.status, code, `exit ${done.status ?? done.signal}, wanted ${code}\nstdout: ${done.stdout}\nstderr: ${done.stderr}`);
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

/** How a Mesh's registry and sidecar run, beyond the defaults. */
interface MeshOptions {
  yaml?: string;
  /** Added to the registry's command line (credentials, policy, TLS). */
  registryArgs?: string[];
  /** Added to the sidecar's command line. */
  sidecarArgs?: string[];
  /** How the sidecar reaches the registry: https:// when it serves TLS. */
  scheme?: string;
}

/** A registry and one sidecar on ephemeral loopback ports. */
class Mesh {
  readonly procs: { name: string; proc: ChildProcess }[] = [];
  registryAddr = '';

  constructor(
    readonly workdir: string,
    readonly opts: MeshOptions = {},
  ) {}

  async start(): Promise<void> {
    for (const binary of ['toolmesh-registry', 'toolmesh-sidecar']) {
      assert.ok(fs.existsSync(path.join(BIN_DIR, binary)), `${binary} missing in ${BIN_DIR}: run cargo build --workspace --bins`);
    }
    this.registryAddr = `127.0.0.1:${await freePort()}`;
    const sidecarAddr = `127.0.0.1:${await freePort()}`;
    const config = path.join(this.workdir, 'sidecar.yaml');
    fs.writeFileSync(config, this.opts.yaml ?? SIDECAR_YAML);
    this.spawn('registry', 'toolmesh-registry', [
      '--listen', this.registryAddr,
      '--lease-ttl', '3s',
      ...(this.opts.registryArgs ?? []),
    ]);
    this.spawn('sidecar', 'toolmesh-sidecar', [
      '--config', config,
      '--registry', `${this.opts.scheme ?? 'http://'}${this.registryAddr}`,
      '--listen', sidecarAddr,
      ...(this.opts.sidecarArgs ?? []),
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
    client = new ToolmeshClient(mesh.registryAddr, { defaultTimeoutMs: 10_000 });
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
    assert.deepEqual(Object.keys(wc.function).sort(), ['description', 'name', 'parameters', 'strict']);
    assert.equal(wc.function.strict, false);
    assert.equal(wc.function.description, 'Count the words in a text');
    assert.equal((wc.function.parameters.properties as Record<string, { type: string }>).text.type, 'string');
    assert.equal(rendered.get('always_fails')!.function.parameters.type, 'object');
  });

  it('exports tools for every LLM API', async () => {
    const anthropic = await client.exportTools('anthropic', { names: ['word_count'] });
    assert.deepEqual(
      (anthropic.tools as { name: string }[]).map((t) => t.name),
      ['word_count'],
    );
    const gemini = await client.exportTools('gemini', { names: ['word_count', 'no_such_tool'] });
    const declarations = (gemini.tools[0] as { functionDeclarations: { name: string }[] }).functionDeclarations;
    assert.deepEqual(declarations.map((d) => d.name), ['word_count']);
    assert.deepEqual(
      gemini.issues.filter((i) => i.omitted),
      [{ tool: 'no_such_tool', omitted: true, message: 'no live tool of this name matches the request' }],
    );
    // word_count is idempotent: a hint Gemini has no field for, said rather than dropped silently.
    assert.ok(gemini.issues.some((i) => i.tool === 'word_count' && !i.omitted && i.message.includes('hints')));
    const mcp = await client.exportTools('mcp');
    assert.ok((mcp.tools as { name: string }[]).some((t) => t.name === 'word_count'));
    await assert.rejects(client.exportTools('cohere' as never), RangeError);
  });

  it('searches tools by a task in words', async () => {
    let found: { tool: ToolSpec; score: number }[] = [];
    for (let i = 0; i < 50 && found[0]?.tool.name !== 'word_count'; i++) {
      found = await client.searchTools('how many words are in this text', { limit: 2 });
      if (found[0]?.tool.name !== 'word_count') await sleep(100);
    }
    assert.equal(found[0]?.tool.name, 'word_count');
    assert.ok(found.length <= 2 && found[0].score > 0);
    await assert.rejects(client.searchTools(''), ToolArgumentError);
  });

  it('invokes a tool', async () => {
    assert.deepEqual(await invokeWaiting('word_count', { text: 'the quick brown fox' }), { words: 4 });
  });

  it('reports schema violations with JSON-pointer paths', async () => {
    const err = await rejectsWith(client.invoke('word_count', { text: 42 }), ToolArgumentError);
    assert.ok(err.violations.some((v) => v.path === '/text'), JSON.stringify(err.violations));
    assert.equal(err.status?.details.length, 1);
  });

  it('refuses a digest the registry did not show as ToolChanged', async () => {
    const echo = await client.getTool('echo');
    assert.match(echo.digest, /^[0-9a-f]{64}$/);
    assert.deepEqual(await client.invoke('echo', { a: 1 }, { toolDigest: echo.digest }), { a: 1 });
    const stale = '0'.repeat(64);
    const err = await rejectsWith(client.invoke('echo', { a: 1 }, { toolDigest: stale }), ToolChanged);
    assert.deepEqual([err.tool, err.shownDigest, err.liveDigest], ['echo', stale, echo.digest]);
    assert.ok(err.changed.length > 0, err.message);
    await rejectsWith(client.startTask('echo', { a: 1 }, { toolDigest: stale }), ToolChanged);
    const bad = await rejectsWith(client.invoke('echo', { a: 1 }, { toolDigest: 'not-a-digest' }), ToolArgumentError);
    assert.deepEqual(bad.violations.map((v) => v.path), ['tool_digest']);
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
  it('times a long call out, and completes it as a task with its progress', async () => {
    // slow_report needs 5 s: as a call (timeout 1 s) it is cut off...
    let started = Date.now();
    await rejectsWith(client.invoke('slow_report', { quarter: 'Q3' }), ToolTimeout);
    assert.ok(Date.now() - started < 4_500);
    // ...as a task (task_timeout 30 s) it runs to its end, reporting its progress.
    started = Date.now();
    const task = await client.startTask('slow_report', { quarter: 'Q3' });
    assert.deepEqual([task.tool, task.state], ['slow_report', 'WORKING']);
    const seen: Task[] = [];
    const ended = await client.waitTask(task.id, { timeoutMs: TASK_WAIT_MS, onChange: (t) => seen.push(t) });
    assert.equal(ended.state, 'COMPLETED', JSON.stringify(ended.message));
    assert.deepEqual(ended.result(), REPORT);
    assert.ok(Date.now() - started >= 4_000);
    const progress = seen.flatMap((t) => (t.progress ? [t.progress] : []));
    assert.ok(progress.length > 0, `no progress seen in ${JSON.stringify(seen.map((t) => t.message))}`);
    for (const report of progress) {
      assert.ok(report.fraction !== undefined && report.fraction >= 0 && report.fraction < 1, JSON.stringify(report));
      assert.ok(report.message.startsWith('counting Q3: step '), JSON.stringify(report));
    }
    assert.match(progressText(progress[0]), /^\d+% counting Q3: step \d of 5$/);
    assert.ok(BigInt(ended.revision) > BigInt(task.revision));
    assert.deepEqual((await client.getTask(task.id)).result(), REPORT);
  });

  it('cancels a task', async () => {
    const task = await client.startTask('slow_report', { quarter: 'Q4' });
    const cancelled = await client.cancelTask(task.id);
    assert.equal(cancelled.state, 'CANCELLED');
    assert.throws(() => cancelled.result(), (err: unknown) => err instanceof TaskCancelled && err.code === 1);
    assert.equal((await client.getTask(task.id)).state, 'CANCELLED');
    // Cancelling a task that is over returns it as it is.
    assert.equal((await client.cancelTask(task.id)).state, 'CANCELLED');
    const { tasks } = await client.listTasks();
    assert.ok(tasks.some((t) => t.id === task.id && t.state === 'CANCELLED'));
  });

  it('ends a task as invoke would have', async () => {
    // Refused at the start, as invoke is: no task is made.
    const refused = await rejectsWith(client.startTask('slow_report', { quarter: 'Q5' }), ToolArgumentError);
    assert.ok(refused.violations.some((v) => v.path === '/quarter'), JSON.stringify(refused.violations));
    // The tool ran and failed: COMPLETED, its result a ToolFailed.
    const failed = await client.waitTask((await client.startTask('always_fails')).id, { timeoutMs: TASK_WAIT_MS });
    assert.equal(failed.state, 'COMPLETED');
    assert.throws(() => failed.result(), (err: unknown) => err instanceof ToolFailed && /boom/.test(err.message));
    // Past its task timeout (slow has none: its timeout, 500 ms): FAILED, DEADLINE_EXCEEDED.
    const late = await client.waitTask((await client.startTask('slow')).id, { timeoutMs: TASK_WAIT_MS });
    assert.equal(late.state, 'FAILED');
    assert.throws(() => late.result(), ToolTimeout);
  });

  it('reports an unknown task as TaskNotFound', async () => {
    const err = await rejectsWith(client.getTask('no-such-task'), TaskNotFound);
    assert.equal(err.taskId, 'no-such-task');
    await rejectsWith(client.waitTask('no-such-task', { timeoutMs: 5_000 }), TaskNotFound);
  });

  it('takes the registry as an http:// URL too', async () => {
    const byUrl = new ToolmeshClient(`http://${mesh.registryAddr}`);
    try {
      assert.deepEqual(await byUrl.invoke('echo', { n: 1 }), { n: 1 });
    } finally {
      byUrl.close();
    }
  });

  for (const scheme of ['', 'http://']) {
    it(`CLI: prints only the result (--registry ${scheme}host:port), from another folder`, () => {
      const done = cli(['--registry', scheme + mesh.registryAddr, 'echo', '{"text": "a b c", "n": [1, 2]}']);
      assertExit(done, EXIT.ok);
      assert.equal(done.stdout, '{"text":"a b c","n":[1,2]}\n');
      assert.equal(done.stderr, '');
    });
  }

  it('CLI: reads the arguments from stdin with -', () => {
    const done = cli(['--registry', mesh.registryAddr, 'call', 'echo', '-'], { stdin: '{"from": "stdin"}' });
    assertExit(done, EXIT.ok);
    assert.deepEqual(JSON.parse(done.stdout), { from: 'stdin' });
  });

  it('CLI: defaults the arguments to {} and the registry to TOOLMESH_REGISTRY', () => {
    const done = cli(['echo'], { env: { TOOLMESH_REGISTRY: `http://${mesh.registryAddr}` } });
    assertExit(done, EXIT.ok);
    assert.equal(done.stdout, '{}\n');
  });

  it('CLI: lists only with list', () => {
    const done = cli(['--registry', mesh.registryAddr, 'list']);
    assertExit(done, EXIT.ok);
    const lines = done.stdout.trim().split('\n');
    assert.ok(lines.includes('word_count: Count the words in a text (1 instance(s), 1/s burst 3)'), done.stdout);
    for (const name of TOOLS) assert.ok(lines.some((l) => l.startsWith(`${name}: `)), name);
    const openai = cli(['--registry', mesh.registryAddr, 'list', '--openai']);
    assertExit(openai, EXIT.ok);
    const names = (JSON.parse(openai.stdout) as { function: { name: string } }[]).map((t) => t.function.name);
    for (const name of TOOLS) assert.ok(names.includes(name), name);
  });

  for (const [args, code, stderr] of [
    [['always_fails'], EXIT.toolFailed, 'tool failed: command failed (exit code 1): boom\n'],
    [['word_count', '{"text": 42}'], EXIT.invalidArguments, 'invalid arguments: '],
    [['no_such_tool'], EXIT.notFound, 'ToolNotFound (NOT_FOUND): '],
    [['slow'], EXIT.timeout, 'ToolTimeout (DEADLINE_EXCEEDED): '],
  ] as const) {
    it(`CLI: ${args[0]} exits ${code}`, () => {
      const done = cli(['--registry', mesh.registryAddr, ...args]);
      assertExit(done, code);
      assert.equal(done.stdout, '');
      assert.ok(done.stderr.startsWith(stderr), done.stderr);
    });
  }

  it('CLI: runs a long call as a task', () => {
    const args = ['--registry', mesh.registryAddr, 'slow_report', '{"quarter": "Q3"}'];
    // A call: cut off at the tool's 1 s timeout.
    const called = cli(args);
    assertExit(called, EXIT.timeout);
    assert.ok(called.stderr.startsWith('ToolTimeout (DEADLINE_EXCEEDED): '), called.stderr);
    // A task: the progress on stderr, only the result on stdout.
    const done = cli(['--task', ...args]);
    assertExit(done, EXIT.ok);
    assert.equal(done.stdout, `${JSON.stringify(REPORT)}\n`);
    const lines = done.stderr.trim().split('\n');
    assert.match(lines[0], /^task \S+ started: slow_report WORKING$/);
    assert.ok(lines.some((l) => l.startsWith('progress: ') && l.includes('counting Q3: step ')), done.stderr);
    // A wait shorter than the task: timed out, the task going on.
    const short = cli(['--task', '--timeout', '1', ...args]);
    assertExit(short, EXIT.timeout);
    assert.equal(short.stdout, '');
    assert.match(short.stderr, /did not end within 1s; it goes on/);
    // A task ends with the exit code of the same call.
    assertExit(cli(['--task', '--registry', mesh.registryAddr, 'always_fails']), EXIT.toolFailed);
  });

  it('CLI: invalid arguments name the path', () => {
    const done = cli(['--registry', mesh.registryAddr, 'word_count', '{"text": 42}']);
    assert.match(done.stderr, /^ {2}\/text: /m);
  });

  it('CLI: rate limited exits 3', () => {
    // rate 0.01/s, burst 1: the second call within 100 s is refused.
    cli(['--registry', mesh.registryAddr, 'limited']);
    const done = cli(['--registry', mesh.registryAddr, 'limited']);
    assertExit(done, EXIT.rateLimited);
    assert.ok(done.stderr.startsWith('rate limited, retry in '), done.stderr);
  });

  for (const how of ['flag', 'environment']) {
    it(`runs copied out of the repository (proto folder by ${how})`, () => {
      const root = fs.mkdtempSync(path.join(os.tmpdir(), 'toolmesh-ts-copy-'));
      try {
        const home = path.join(root, 'my-agent');
        const elsewhere = path.join(root, 'elsewhere');
        fs.mkdirSync(home);
        fs.mkdirSync(elsewhere);
        for (const name of ['agent.ts', 'generate.ts', 'package.json']) {
          fs.copyFileSync(path.join(__dirname, name), path.join(home, name));
        }
        fs.symlinkSync(path.join(__dirname, 'node_modules'), path.join(home, 'node_modules'));
        fs.cpSync(REPO_PROTO, path.join(root, 'contract'), { recursive: true });
        const agent = path.join(home, 'agent.ts');

        const unstubbed = cli(['list'], { agent, cwd: elsewhere });
        assertExit(unstubbed, EXIT.usage);
        assert.equal(
          unstubbed.stderr,
          `agent.ts: error: the toolmesh contract is not in ${path.join(home, 'gen', 'proto')}: run npm run generate first (in ${home})\n`,
        );
        const lost = node([path.join(home, 'generate.ts')], { cwd: elsewhere });
        assertExit(lost, 2);
        assert.match(lost.stderr, /pass --proto-dir DIR or set TOOLMESH_PROTO_DIR/);

        const generated =
          how === 'flag'
            ? node([path.join(home, 'generate.ts'), '--proto-dir', '../contract'], { cwd: elsewhere })
            : node([path.join(home, 'generate.ts')], { cwd: elsewhere, env: { TOOLMESH_PROTO_DIR: '../contract' } });
        assertExit(generated, 0);
        assert.ok(fs.existsSync(path.join(home, 'gen', 'toolmesh', 'v1', 'ToolRegistry.ts')));

        const done = cli(['--registry', mesh.registryAddr, 'echo', '{"copied": true}'], { agent, cwd: elsewhere });
        assertExit(done, EXIT.ok);
        assert.equal(done.stdout, '{"copied":true}\n');
      } finally {
        fs.rmSync(root, { recursive: true, force: true });
      }
    });
  }
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

describe('registry addresses', () => {
  it('takes host:port and http://host:port alike', () => {
    for (const given of ['127.0.0.1:50051', 'http://127.0.0.1:50051', 'http://127.0.0.1:50051/', ' 127.0.0.1:50051\n']) {
      assert.equal(registryTarget(given), '127.0.0.1:50051', JSON.stringify(given));
      assert.equal(registryAddress(given).tls, false, JSON.stringify(given));
    }
    assert.equal(registryTarget('registry.svc:7000'), 'registry.svc:7000');
    assert.equal(registryTarget('[::1]:50051'), '[::1]:50051');
  });

  it('keeps https:// as TLS, never plaintext', () => {
    assert.deepEqual(registryAddress('https://registry.svc:7000/'), { target: 'registry.svc:7000', tls: true });
  });

  it('says what to write for every mistake (the table of toolmesh_proto::endpoint)', () => {
    for (const [given, problem] of [
      ['', 'the host is missing'],
      ['http://', 'the host is missing'],
      [':50051', 'the host is missing'],
      ['127.0.0.1', 'the port is missing'],
      ['127.0.0.1:', 'the port must be a number'],
      ['127.0.0.1:http', 'the port must be a number'],
      ['127.0.0.1:70000', 'the port must be a number'],
      ['127.0.0.1:0', 'the port must be a number'],
      ['https://', 'the host is missing'],
      ['grpc://127.0.0.1:50051', 'the scheme must be http:// or https://'],
      ['http://127.0.0.1:50051/v1', 'only a host and a port'],
      ['::1:50051', 'an IPv6 address goes in brackets'],
    ]) {
      assert.throws(
        () => registryTarget(given),
        (err: unknown) =>
          err instanceof InvalidAddress &&
          err.message.startsWith(`${JSON.stringify(given)} is not a server address: `) &&
          err.message.includes(problem) &&
          err.message.endsWith('write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051'),
        given,
      );
    }
  });
});

describe('the CLI on bad input', () => {
  for (const [args, message] of [
    [[], 'name a tool to call, or list to see them'],
    [['call'], 'name the tool to call after call'],
    [['--bogus', 'echo'], 'unknown option --bogus'],
    [['echo', '{not json'], 'the arguments are not JSON ('],
    [['echo', '[1, 2]'], 'the arguments must be a JSON object, not array'],
    [['echo', '{}', 'extra'], 'too many arguments after echo'],
    [['list', 'echo'], "list takes no arguments, got 'echo'"],
    [['--openai', 'echo'], '--openai only goes with list'],
    [['--task', 'list'], '--task goes with a call, not with list'],
    [['--timeout', 'soon', 'echo'], "argument --timeout: 'soon' is not a number of seconds > 0"],
    [
      ['--registry', 'grpc://127.0.0.1:50051', 'list'],
      '--registry "grpc://127.0.0.1:50051" is not a server address: the scheme must be http:// or https://',
    ],
    [
      ['--ca-file', '/dev/null', 'list'],
      '--ca-file is set but the registry "127.0.0.1:50051" is plaintext: write https://127.0.0.1:50051 for TLS',
    ],
    [
      ['--registry', 'https://127.0.0.1:50051', '--ca-file', '/no/such/ca.pem', 'list'],
      '--ca-file /no/such/ca.pem: No such file or directory',
    ],
    [['--token-file', '/no/such/token', 'list'], '--token-file /no/such/token: No such file or directory'],
    [['--registry', '127.0.0.1', 'list'], '--registry "127.0.0.1" is not a server address: the port is missing'],
  ] as const) {
    it(`${JSON.stringify(args)}: one line, exit 2`, () => {
      const done = cli([...args]);
      assertExit(done, EXIT.usage);
      assert.equal(done.stdout, '');
      assert.equal(done.stderr.split('\n').length, 2, done.stderr);
      assert.ok(done.stderr.startsWith(`agent.ts: error: ${message}`), done.stderr);
      assert.ok(done.stderr.endsWith(' (see --help)\n'), done.stderr);
    });
  }

  it('exits 8 when the registry is unreachable', async () => {
    const done = cli(['--registry', `http://127.0.0.1:${await freePort()}`, '--timeout', '5', 'echo']);
    assertExit(done, EXIT.unavailable);
    assert.ok(done.stderr.startsWith('ToolUnavailable (UNAVAILABLE): '), done.stderr);
  });

  it('documents the exit codes in --help', () => {
    const done = cli(['--help']);
    assertExit(done, EXIT.ok);
    assert.match(done.stdout, /exit codes: 0 result printed/);
  });
});

// ------------------------------------------------------------------- credentials and TLS

// Test keys: long enough to look like real ones; only their SHA-256 goes to the registry.
const KEY_A = 'agent-a-key-0123456789abcdef0123456789abcdef';
const KEY_B = 'agent-b-key-fedcba9876543210fedcba9876543210';
const WRONG_KEY = 'not-a-key-the-registry-knows-0123456789';
const ADD_CODE = "import json, sys; a = json.load(sys.stdin); print(json.dumps({'sum': a['a'] + a['b']}))";
const SECURED_YAML = `\
tools:
  - name: add
    description: Adds a and b
    timeout: 2s
    backend:
      command: ["python3", "-c", ${JSON.stringify(ADD_CODE)}]
  - name: echo
    description: Returns its arguments
    timeout: 2s
    backend:
      command: ["cat"]
`;
const SECURED_TOOLS = ['add', 'echo'];
/** The agent's own variables emptied, so the test's environment cannot leak in. */
const NO_TOKEN = { TOOLMESH_TOKEN: '', TOOLMESH_TOKEN_FILE: '', TOOLMESH_CA_FILE: '' };

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * The registry's --api-keys-file (SHA-256 of KEY_A and KEY_B) and
 * --policy-file (agent-a may call add only; agent-b anything).
 */
function authFiles(workdir: string): string[] {
  const keys = path.join(workdir, 'api-keys.yaml');
  fs.writeFileSync(
    keys,
    `keys:\n  - {caller: agent-a, sha256: ${sha256(KEY_A)}}\n  - {caller: agent-b, sha256: ${sha256(KEY_B)}}\n`,
  );
  const policy = path.join(workdir, 'policy.yaml');
  fs.writeFileSync(policy, 'rules:\n  - {callers: [agent-a], tools: ["add"]}\n  - {callers: [agent-b], tools: ["*"]}\n');
  return ['--api-keys-file', keys, '--policy-file', policy];
}

/** A CA made for this run and a server certificate it signs for 127.0.0.1 and localhost, with openssl. */
function makeCertificates(workdir: string): { ca: string; cert: string; key: string } {
  const file = (name: string) => path.join(workdir, name);
  fs.writeFileSync(
    file('server.ext'),
    'subjectAltName = IP:127.0.0.1, DNS:localhost\nbasicConstraints = critical, CA:FALSE\n' +
      'keyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth\n',
  );
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  for (const args of [
    ['req', '-x509', ...ec, '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', '2', '-subj', '/CN=toolmesh test CA'],
    ['req', ...ec, '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', '/CN=127.0.0.1'],
    ['x509', '-req', '-in', file('server.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-set_serial', '2',
      '-days', '2', '-extfile', file('server.ext'), '-out', file('server.pem')],
  ]) {
    const done = spawnSync('openssl', args, { encoding: 'utf8', timeout: 60_000 });
    assert.equal(done.status, 0, `openssl ${args.join(' ')}: ${done.stderr}`);
  }
  return { ca: file('ca.pem'), cert: file('server.pem'), key: file('server.key') };
}

function toolNames(stdout: string): string[] {
  return stdout.trim().split('\n').map((line) => line.split(':')[0]);
}

describe('a registry that authenticates agents, with a policy', () => {
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'toolmesh-ts-auth-'));
  const mesh = new Mesh(workdir, { yaml: SECURED_YAML, registryArgs: authFiles(workdir) });
  const registry = () => mesh.registryAddr;

  before(async () => {
    await mesh.start();
    const admin = new ToolmeshClient(mesh.registryAddr, { token: KEY_B, defaultTimeoutMs: 10_000 });
    try {
      await mesh.waitForTools(admin, SECURED_TOOLS);
    } finally {
      admin.close();
    }
  });

  after(async () => {
    await mesh.stop();
    fs.rmSync(workdir, { recursive: true, force: true });
  });

  it('without a token: the registry wants a credential', async () => {
    const anonymous = new ToolmeshClient(registry());
    try {
      const err = await rejectsWith(anonymous.listTools(), Unauthenticated);
      assert.equal(err.hadCredential, false);
      assert.equal(err.code, 16);
      assert.ok(err.message.startsWith('the registry wants a credential: set TOOLMESH_TOKEN'), err.message);
    } finally {
      anonymous.close();
    }
    const done = cli(['--registry', registry(), 'list'], { env: NO_TOKEN });
    assertExit(done, EXIT.unauthenticated);
    assert.equal(done.stdout, '');
    assert.ok(
      done.stderr.startsWith(
        "the registry wants a credential: set TOOLMESH_TOKEN to the agent's API key or JWT, " +
          'or TOOLMESH_TOKEN_FILE (or --token-file) to a file holding it (',
      ),
      done.stderr,
    );
    assert.equal(done.stderr.split('\n').length, 2, done.stderr);
  });

  it('refuses a wrong token and never shows it', async () => {
    const wrong = new ToolmeshClient(registry(), { token: WRONG_KEY });
    try {
      const err = await rejectsWith(wrong.invoke('add', { a: 1, b: 2 }), Unauthenticated);
      assert.equal(err.hadCredential, true);
      assert.ok(!err.message.includes(WRONG_KEY));
    } finally {
      wrong.close();
    }
    const done = cli(['--registry', registry(), 'list'], { env: { ...NO_TOKEN, TOOLMESH_TOKEN: WRONG_KEY } });
    assertExit(done, EXIT.unauthenticated);
    assert.ok(done.stderr.startsWith('the registry refused the credential from TOOLMESH_TOKEN ('), done.stderr);
    assert.ok(!(done.stdout + done.stderr).includes(WRONG_KEY));
  });

  it('with the key: lists and invokes (TOOLMESH_TOKEN, TOOLMESH_TOKEN_FILE, --token-file)', async () => {
    const client = new ToolmeshClient(registry(), { token: KEY_B });
    try {
      assert.deepEqual((await client.listTools()).map((t) => t.name), SECURED_TOOLS);
      assert.equal((await client.getTool('add')).name, 'add');
      assert.deepEqual(await client.invoke('add', { a: 2, b: 3 }), { sum: 5 });
    } finally {
      client.close();
    }
    const tokenFile = path.join(workdir, 'token');
    fs.writeFileSync(tokenFile, `${KEY_B}\r\n`);
    for (const [args, env] of [
      [[], { ...NO_TOKEN, TOOLMESH_TOKEN: KEY_B }],
      [[], { ...NO_TOKEN, TOOLMESH_TOKEN_FILE: tokenFile }],
      [['--token-file', tokenFile], NO_TOKEN],
    ] as const) {
      const listed = cli(['--registry', registry(), ...args, 'list'], { env });
      assertExit(listed, EXIT.ok);
      assert.deepEqual(toolNames(listed.stdout), SECURED_TOOLS);
      const called = cli(['--registry', registry(), ...args, 'add', '{"a": 40, "b": 2}'], { env });
      assertExit(called, EXIT.ok);
      assert.equal(called.stdout, '{"sum":42}\n');
    }
  });

  it('the policy shows a caller only the tools it may call', async () => {
    const agentA = new ToolmeshClient(registry(), { token: KEY_A });
    try {
      assert.deepEqual((await agentA.listTools()).map((t) => t.name), ['add']);
      assert.deepEqual(await agentA.invoke('add', { a: 1, b: 1 }), { sum: 2 });
      await rejectsWith(agentA.invoke('echo'), ToolNotFound);
      await rejectsWith(agentA.getTool('echo'), ToolNotFound);
    } finally {
      agentA.close();
    }
    const env = { ...NO_TOKEN, TOOLMESH_TOKEN: KEY_A };
    const listed = cli(['--registry', registry(), 'list'], { env });
    assertExit(listed, EXIT.ok);
    assert.deepEqual(toolNames(listed.stdout), ['add']);
    assertExit(cli(['--registry', registry(), 'echo'], { env }), EXIT.notFound);
  });
});

describe('a registry serving TLS', () => {
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'toolmesh-ts-tls-'));
  const { ca, cert, key } = makeCertificates(workdir);
  const mesh = new Mesh(workdir, {
    yaml: SECURED_YAML,
    registryArgs: [...authFiles(workdir), '--tls-cert-file', cert, '--tls-key-file', key],
    sidecarArgs: ['--registry-ca-file', ca],
    scheme: 'https://',
  });

  before(async () => {
    await mesh.start();
    const admin = new ToolmeshClient(`https://${mesh.registryAddr}`, { token: KEY_B, caFile: ca, defaultTimeoutMs: 10_000 });
    try {
      await mesh.waitForTools(admin, SECURED_TOOLS);
    } finally {
      admin.close();
    }
  });

  after(async () => {
    await mesh.stop();
    fs.rmSync(workdir, { recursive: true, force: true });
  });

  it('connects over https:// with the CA file', async () => {
    const agentA = new ToolmeshClient(`https://${mesh.registryAddr}`, { token: KEY_A, caFile: ca });
    try {
      assert.deepEqual((await agentA.listTools()).map((t) => t.name), ['add']);
      assert.deepEqual(await agentA.invoke('add', { a: 1, b: 2 }), { sum: 3 });
    } finally {
      agentA.close();
    }
    const env = { ...NO_TOKEN, TOOLMESH_TOKEN: KEY_B, TOOLMESH_CA_FILE: ca };
    const done = cli(['--registry', `https://${mesh.registryAddr}`, 'add', '{"a": 20, "b": 22}'], { env });
    assertExit(done, EXIT.ok);
    assert.equal(done.stdout, '{"sum":42}\n');
    assert.equal(done.stderr, '');
    const byFlag = cli(['--registry', `https://${mesh.registryAddr}`, '--ca-file', ca, 'list'], {
      env: { ...env, TOOLMESH_CA_FILE: '' },
    });
    assertExit(byFlag, EXIT.ok);
    assert.deepEqual(toolNames(byFlag.stdout), SECURED_TOOLS);
  });

  it('verifies the certificate and never falls back to plaintext', () => {
    const env = { ...NO_TOKEN, TOOLMESH_TOKEN: KEY_B };
    // Without the CA the certificate is not trusted (public roots only).
    assertExit(cli(['--registry', `https://${mesh.registryAddr}`, '--timeout', '5', 'list'], { env }), EXIT.unavailable);
    // http:// is plaintext, which a TLS registry does not speak.
    assertExit(cli(['--registry', `http://${mesh.registryAddr}`, '--timeout', '5', 'list'], { env }), EXIT.unavailable);
  });
});

describe('token settings', () => {
  it('reads the token from the flag, the variable or the file, and never shows it', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'toolmesh-ts-token-'));
    try {
      const tokenFile = path.join(dir, 'token');
      fs.writeFileSync(tokenFile, `${KEY_A}\n`);
      assert.equal(tokenFromEnv(undefined, {}), undefined);
      assert.equal(tokenFromEnv(undefined, { TOOLMESH_TOKEN: KEY_A }), KEY_A);
      assert.equal(tokenFromEnv(undefined, { TOOLMESH_TOKEN_FILE: tokenFile }), KEY_A);
      assert.equal(tokenFromEnv(tokenFile, { TOOLMESH_TOKEN: KEY_B }), KEY_A);
      const bad = `has a space ${KEY_B}`;
      for (const [env, message] of [
        [{ TOOLMESH_TOKEN: KEY_A, TOOLMESH_TOKEN_FILE: tokenFile }, 'TOOLMESH_TOKEN and TOOLMESH_TOKEN_FILE are both set'],
        [{ TOOLMESH_TOKEN: bad }, 'TOOLMESH_TOKEN is not a usable token: a token is one line of visible ASCII'],
      ] as const) {
        assert.throws(
          () => tokenFromEnv(undefined, env),
          (err: unknown) =>
            err instanceof InvalidCredential &&
            err.message.startsWith(message) &&
            !err.message.includes(KEY_A) &&
            !err.message.includes(bad),
        );
      }
      fs.writeFileSync(tokenFile, 'two\nlines\n');
      assert.throws(() => tokenFromEnv(undefined, { TOOLMESH_TOKEN_FILE: tokenFile }), /is not a usable token/);
      const done = cli(['list'], { env: { ...NO_TOKEN, TOOLMESH_TOKEN: bad } });
      assertExit(done, EXIT.usage);
      assert.ok(done.stderr.startsWith('agent.ts: error: TOOLMESH_TOKEN is not a usable token'), done.stderr);
      assert.ok(!done.stderr.includes(bad));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

// ------------------------------------------------------------------- tool digests

const SHOWN = 'a'.repeat(64);
const LIVE = 'b'.repeat(64);

/** google/rpc/*.proto (google-proto-files), to encode statuses as the registry does. */
function rpcRoot(): protobuf.Root {
  const dir = path.dirname(require.resolve('google-proto-files/package.json'));
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(dir, target));
  return root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto']);
}

/**
 * A refused call's google.rpc.Status, encoded, as the registry builds it for
 * a stale toolDigest (RegistryError::ToolChanged).
 */
function digestMismatch(reason = 'TOOL_DIGEST_MISMATCH'): Buffer {
  const root = rpcRoot();
  const pack = (type: string, value: object) => ({
    type_url: `type.googleapis.com/${type}`,
    value: root.lookupType(type).encode(root.lookupType(type).fromObject(value)).finish(),
  });
  const status = root.lookupType('google.rpc.Status');
  const message = status.fromObject({
    code: grpc.status.FAILED_PRECONDITION,
    message: 'tool "word_count" is not the definition the agent was shown',
    details: [
      pack('google.rpc.ErrorInfo', {
        reason,
        domain: 'toolmesh.dev',
        metadata: { tool: 'word_count', shown_digest: SHOWN, live_digest: LIVE, changed: 'description,input_schema_json' },
      }),
      pack('google.rpc.PreconditionFailure', {
        violations: [
          { type: 'TOOL_CHANGED', subject: 'tool:word_count', description: 'description: shown "Count words" != live "Count the words"' },
          { type: 'TOOL_CHANGED', subject: 'tool:word_count', description: 'input_schema_json: shown {} != live {...}' },
        ],
      }),
    ],
  });
  return Buffer.from(status.encode(message).finish());
}

/**
 * A registry on a loopback port whose word_count is at `digest`: it records
 * every call's InvokeRequest and refuses one bound to another digest as the
 * real registry does, the rich status in the trailers.
 */
class FakeRegistry {
  readonly calls: InvokeRequest__Output[] = [];
  digest = SHOWN;
  reason = 'TOOL_DIGEST_MISMATCH';
  private readonly server = new grpc.Server();

  private tool(): Tool {
    return { descriptor: { name: 'word_count', description: 'Count words', inputSchemaJson: '{"type":"object"}' }, instances: 1, digest: this.digest };
  }

  /** The refusal of a call, or null when it may run. */
  private check(call: InvokeRequest__Output): grpc.ServiceError | null {
    this.calls.push(call);
    if (!call.toolDigest || call.toolDigest === this.digest) return null;
    const metadata = new grpc.Metadata();
    metadata.set('grpc-status-details-bin', digestMismatch(this.reason));
    return Object.assign(new Error('changed'), {
      code: grpc.status.FAILED_PRECONDITION,
      details: 'tool "word_count" is not the definition the agent was shown',
      metadata,
    });
  }

  async start(): Promise<string> {
    const definition = protoLoader.loadSync('toolmesh/v1/toolmesh.proto', {
      keepCase: false, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [PROTO_DIR],
    });
    const { ToolRegistry, Tasks } = (grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType).toolmesh.v1;
    type Unary = (call: { request: any }, callback: (err: grpc.ServiceError | null, value?: unknown) => void) => void;
    const handlers: Record<string, Unary> = {
      listTools: (_call, done) => done(null, { tools: [this.tool()] }),
      getTool: (_call, done) => done(null, this.tool()),
      searchTools: (_call, done) => done(null, { matches: [{ tool: this.tool(), score: 1 }] }),
      invoke: ({ request }, done) => {
        const refused = this.check(request);
        done(refused, refused ? undefined : { resultJson: '{"words":2}', instanceId: 'fake', attempts: 1 });
      },
    };
    this.server.addService(ToolRegistry.service, handlers as unknown as grpc.UntypedServiceImplementation);
    this.server.addService(Tasks.service, {
      startTask: (({ request }, done) => {
        const refused = this.check(request.call);
        done(refused, refused ? undefined : { id: 't1', tool: request.call.tool, state: 'TASK_STATE_WORKING' });
      }) as Unary,
    } as unknown as grpc.UntypedServiceImplementation);
    const port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, bound) =>
        err ? reject(err) : resolve(bound),
      ),
    );
    return `127.0.0.1:${port}`;
  }

  stop(): void {
    this.server.forceShutdown();
  }
}

describe('tool digests, against a registry on loopback that checks them', () => {
  const fake = new FakeRegistry();
  let client: ToolmeshClient;

  before(async () => {
    client = new ToolmeshClient(await fake.start(), { defaultTimeoutMs: 10_000 });
  });

  after(() => {
    client?.close();
    fake.stop();
  });

  it('exposes the digest and sends the one shown', async () => {
    const [listed] = await client.listTools();
    assert.equal(listed.digest, SHOWN);
    assert.equal((await client.getTool('word_count')).digest, SHOWN);
    assert.equal((await client.searchTools('count words'))[0].tool.digest, SHOWN);
    assert.deepEqual(await client.invoke('word_count', { text: 'a b' }, { toolDigest: listed.digest }), { words: 2 });
    assert.equal((await client.startTask('word_count', { text: 'a b' }, { toolDigest: listed.digest })).id, 't1');
    await client.invoke('word_count', { text: 'a b' });
    assert.deepEqual(fake.calls.map((c) => c.toolDigest), [SHOWN, SHOWN, '']);
  });

  it('turns TOOL_DIGEST_MISMATCH into ToolChanged, for invoke and startTask', async () => {
    fake.digest = LIVE; // the tool changed after it was listed
    fake.calls.length = 0;
    const err = await rejectsWith(client.invoke('word_count', { text: 'a b' }, { toolDigest: SHOWN }), ToolChanged);
    assert.ok(err instanceof ToolmeshError);
    assert.equal(err.code, grpc.status.FAILED_PRECONDITION);
    assert.equal(err.tool, 'word_count');
    assert.equal(err.shownDigest, SHOWN);
    assert.equal(err.liveDigest, LIVE);
    assert.deepEqual(err.changed, ['description', 'input_schema_json']);
    assert.equal(err.differences.length, 2);
    assert.ok(err.differences[0].startsWith('description: shown'), err.differences[0]);
    const started = await rejectsWith(client.startTask('word_count', {}, { toolDigest: SHOWN }), ToolChanged);
    assert.deepEqual(started.changed, ['description', 'input_schema_json']);
    assert.deepEqual(fake.calls.map((c) => c.toolDigest), [SHOWN, SHOWN]);
  });

  it('leaves another FAILED_PRECONDITION a plain ToolmeshError', async () => {
    fake.reason = 'APPROVAL_REQUIRED';
    try {
      const err = await rejectsWith(client.invoke('word_count', {}, { toolDigest: SHOWN }), ToolmeshError);
      assert.equal(err.constructor, ToolmeshError);
      assert.equal(err.code, grpc.status.FAILED_PRECONDITION);
    } finally {
      fake.reason = 'TOOL_DIGEST_MISMATCH';
    }
  });

  it("reads a failed task's TOOL_DIGEST_MISMATCH as ToolChanged", () => {
    const task = new Task({
      id: 't2',
      tool: 'word_count',
      state: 'TASK_STATE_FAILED',
      outcome: 'error',
      error: { code: grpc.status.FAILED_PRECONDITION, message: 'changed', details: digestMismatch() },
    } as unknown as Task__Output);
    assert.throws(() => task.result(), (err: unknown) => err instanceof ToolChanged && err.liveDigest === LIVE);
  });
});
