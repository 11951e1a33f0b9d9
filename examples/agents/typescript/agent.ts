/**
 * A small toolmesh agent library and CLI.
 *
 * `npm run generate` copies the contract from proto/ into gen/proto and
 * generates the interfaces that type it into gen/ (proto-loader-gen-types);
 * at run time @grpc/proto-loader loads gen/proto, so the agent runs from any
 * folder; nothing here hand-writes a message type. Errors come back as typed
 * exceptions decoded from the google.rpc.Status the registry sends in
 * `grpc-status-details-bin`.
 *
 *   npx tsx agent.ts list                                     # the live tools, one a line
 *   npx tsx agent.ts word_count '{"text":"a b c"}'            # only the result, on stdout
 *   npx tsx agent.ts --registry http://10.0.0.5:50051 list --openai
 *   npx tsx agent.ts --task slow_report '{"quarter":"Q3"}'    # as a task: progress on stderr, then the result
 *   TOOLMESH_TOKEN_FILE=key TOOLMESH_CA_FILE=ca.pem npx tsx agent.ts --registry https://registry:50051 list
 *
 * The credential (an API key or a JWT) is sent as `authorization: Bearer ...`
 * on every call: `--token-file FILE`, else TOOLMESH_TOKEN or
 * TOOLMESH_TOKEN_FILE. An https:// registry is TLS, verified with
 * TOOLMESH_CA_FILE (or --ca-file), else Node's public roots.
 *
 * The CLI's exit codes are those of the Python agent: see EXIT below. A
 * task's end has the exit code of the same call's Invoke (a CANCELLED task: 1).
 */

import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import * as protobuf from 'protobufjs';

import type { ProtoGrpcType } from './gen/toolmesh';
import type { ToolRegistryClient } from './gen/toolmesh/v1/ToolRegistry';
import type { TasksClient } from './gen/toolmesh/v1/Tasks';
import type { Task__Output } from './gen/toolmesh/v1/Task';
import type { Tool__Output } from './gen/toolmesh/v1/Tool';
import type { InvokeRequest } from './gen/toolmesh/v1/InvokeRequest';
import type { InvokeResponse__Output } from './gen/toolmesh/v1/InvokeResponse';
import type { Duration__Output } from './gen/google/protobuf/Duration';
import type { Any__Output } from './gen/google/protobuf/Any';
import type { Status__Output } from './gen/google/rpc/Status';
import type { BadRequest__Output } from './gen/google/rpc/BadRequest';
import type { ResourceInfo__Output } from './gen/google/rpc/ResourceInfo';
import type { RetryInfo__Output } from './gen/google/rpc/RetryInfo';
import type { QuotaFailure__Output } from './gen/google/rpc/QuotaFailure';
import type { ErrorInfo__Output } from './gen/google/rpc/ErrorInfo';
import type { PreconditionFailure__Output } from './gen/google/rpc/PreconditionFailure';

/**
 * Where toolmesh/v1/toolmesh.proto is loaded from at run time: the copy
 * `npm run generate` made beside the generated types (so both always match).
 */
export const PROTO_DIR = path.join(__dirname, 'gen', 'proto');

/** google/rpc/*.proto, from the google-proto-files package. */
const GOOGLE_PROTO_DIR = path.dirname(require.resolve('google-proto-files/package.json'));

/**
 * Conversion options: they must match the flags of `npm run generate`, which
 * decide the shape of the generated types (camelCase fields, 64-bit integers
 * as strings, enums as names, defaults filled in, virtual oneof fields).
 */
const CONVERSION = { longs: String, enums: String, defaults: true, oneofs: true } as const;
const LOADER_OPTIONS: protoLoader.Options = { keepCase: false, ...CONVERSION, includeDirs: [PROTO_DIR] };

let registryPackage: ProtoGrpcType | undefined;
function toolmeshPackage(): ProtoGrpcType {
  if (!registryPackage) {
    if (!fs.existsSync(path.join(PROTO_DIR, 'toolmesh/v1/toolmesh.proto'))) {
      throw new ToolmeshSetupError(
        `the toolmesh contract is not in ${PROTO_DIR}: run npm run generate first (in ${__dirname})`,
      );
    }
    const definition = protoLoader.loadSync('toolmesh/v1/toolmesh.proto', LOADER_OPTIONS);
    registryPackage = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType;
  }
  return registryPackage;
}

// ------------------------------------------------------------------- addresses

/** A registry address that is not host:port, http://host:port or https://host:port. */
export class InvalidAddress extends Error {
  override name = 'InvalidAddress';
}

/** The agent cannot run: the generated contract is missing. */
export class ToolmeshSetupError extends Error {
  override name = 'ToolmeshSetupError';
}

/** Where the registry is: its gRPC target and whether to speak TLS. */
export interface RegistryAddress {
  /** host:port, as gRPC dials it. */
  target: string;
  /** true for https:// (TLS, never plaintext); false for host:port and http://. */
  tls: boolean;
}

/**
 * The registry's target and transport, by the rule every toolmesh binary and
 * agent shares (toolmesh_proto::endpoint in Rust): `host:port` or
 * `http://host:port` (plaintext), `https://host:port` (TLS), a trailing `/`
 * dropped. Throws InvalidAddress saying what to write.
 */
export function registryAddress(address: string): RegistryAddress {
  const given = address.trim();
  const error = (problem: string) =>
    new InvalidAddress(
      `${JSON.stringify(address)} is not a server address: ${problem}; ` +
        'write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051',
    );
  let rest = given;
  let scheme = 'http';
  const sep = given.indexOf('://');
  if (sep >= 0) {
    scheme = given.slice(0, sep);
    if (scheme !== 'http' && scheme !== 'https') throw error('the scheme must be http:// or https://');
    rest = given.slice(sep + 3);
  }
  const authority = rest.endsWith('/') ? rest.slice(0, -1) : rest;
  if (!authority) throw error('the host is missing');
  if (/[/?#@\s]/.test(authority)) throw error('only a host and a port may be given');
  const colon = authority.lastIndexOf(':');
  const host = authority.slice(0, Math.max(colon, 0));
  const port = authority.slice(colon + 1);
  if (colon < 0 || (host.endsWith(':') && !host.startsWith('['))) throw error('the port is missing');
  if (!host || host === '[]') throw error('the host is missing');
  if (host.includes(':') && !(host.startsWith('[') && host.endsWith(']'))) {
    throw error('an IPv6 address goes in brackets, e.g. [::1]:50051');
  }
  if (!/^\+?[0-9]+$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    throw error('the port must be a number from 1 to 65535');
  }
  return { target: authority, tls: scheme === 'https' };
}

/** The gRPC target (host:port) of a registry address; see registryAddress. */
export function registryTarget(address: string): string {
  return registryAddress(address).target;
}

// ------------------------------------------------------------------- credentials

/** A token or CA setting that cannot be used. The message names the variable, flag or file, never the token. */
export class InvalidCredential extends Error {
  override name = 'InvalidCredential';
}

function usableToken(token: string, source: string): string {
  if (!token) throw new InvalidCredential(`${source} is empty: it must hold the agent's API key or JWT`);
  if (!/^[\x21-\x7e]+$/.test(token)) {
    throw new InvalidCredential(
      `${source} is not a usable token: a token is one line of visible ASCII characters, without spaces (an API key or a JWT)`,
    );
  }
  return token;
}

function readOrExplain(file: string, source: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    const { code, message } = err as NodeJS.ErrnoException;
    const why = code === 'ENOENT' ? 'No such file or directory' : code === 'EACCES' ? 'Permission denied' : message;
    throw new InvalidCredential(`${source} ${file}: ${why}`);
  }
}

function readTokenFile(file: string, source: string): string {
  let text = readOrExplain(file, source).toString('latin1');
  if (text.endsWith('\r\n')) text = text.slice(0, -2);
  else if (text.endsWith('\n')) text = text.slice(0, -1);
  return usableToken(text, `${source} ${file}`);
}

/**
 * The agent's credential: the file `tokenFile` (the --token-file flag) if
 * given, else TOOLMESH_TOKEN (the key or JWT itself) or TOOLMESH_TOKEN_FILE
 * (a file holding it, one line; the trailing line break is dropped), else
 * undefined. Setting both variables is an error. Throws InvalidCredential,
 * which never repeats the token.
 */
export function tokenFromEnv(tokenFile?: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (tokenFile) return readTokenFile(tokenFile, '--token-file');
  const value = env.TOOLMESH_TOKEN ?? '';
  const file = env.TOOLMESH_TOKEN_FILE ?? '';
  if (value && file) throw new InvalidCredential('TOOLMESH_TOKEN and TOOLMESH_TOKEN_FILE are both set: set only one');
  if (file) return readTokenFile(file, 'TOOLMESH_TOKEN_FILE');
  if (value) return usableToken(value, 'TOOLMESH_TOKEN');
  return undefined;
}

/**
 * The CA file an https:// registry's certificate is verified with: `caFile`
 * (the --ca-file flag), else TOOLMESH_CA_FILE, else undefined (public roots).
 */
export function caFileFromEnv(caFile?: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  return caFile || env.TOOLMESH_CA_FILE || undefined;
}

function readCa(file: string, source: string): Buffer {
  const pem = readOrExplain(file, source);
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
    throw new InvalidCredential(`${source} ${file}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)`);
  }
  return pem;
}

/** How a client reaches the registry and who it says it is. */
export interface ConnectOptions {
  /** The API key or JWT, sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** PEM CA certificates an https:// registry is verified with (default: Node's public roots); refused for a plaintext address. */
  caFile?: string;
  /** Channel credentials to use instead (custom TLS); `caFile` is then ignored. */
  credentials?: grpc.ChannelCredentials;
  /** Default deadline of each call, in milliseconds. */
  defaultTimeoutMs?: number;
}

export const NO_CREDENTIAL_HINT =
  "the registry wants a credential: set TOOLMESH_TOKEN to the agent's API key or JWT, " +
  'or TOOLMESH_TOKEN_FILE (or --token-file) to a file holding it';

// ------------------------------------------------------------------- errors

/** Base of every error the client throws. */
export class ToolmeshError extends Error {
  override name = 'ToolmeshError';
  constructor(
    message: string,
    /** The gRPC status code; undefined for ToolFailed (not a transport error). */
    readonly code?: grpc.status,
    /** The decoded google.rpc.Status, if the registry sent one. */
    readonly status?: Status__Output,
  ) {
    super(message);
  }
}

/** One schema violation: a JSON pointer into the arguments and what is wrong. */
export interface Violation {
  path: string;
  message: string;
}

/** INVALID_ARGUMENT: the arguments are not JSON or fail the tool's schema. */
export class ToolArgumentError extends ToolmeshError {
  override name = 'ToolArgumentError';
  constructor(message: string, readonly violations: Violation[], code?: grpc.status, status?: Status__Output) {
    super(message, code, status);
  }
}

/** NOT_FOUND: no live instance serves the tool. */
export class ToolNotFound extends ToolmeshError {
  override name = 'ToolNotFound';
  constructor(message: string, readonly tool: string, code?: grpc.status, status?: Status__Output) {
    super(message, code, status);
  }
}

/** RESOURCE_EXHAUSTED: the tool's rate limit is used up. */
export class RateLimited extends ToolmeshError {
  override name = 'RateLimited';
  constructor(
    message: string,
    /** Seconds until the next call may succeed (google.rpc.RetryInfo), if sent. */
    readonly retryAfter: number | undefined,
    /** QuotaFailure violations: which quota, and its description. */
    readonly quotaViolations: { subject: string; description: string }[],
    code?: grpc.status,
    status?: Status__Output,
  ) {
    super(message, code, status);
  }
}

/** The tool ran and reported a failure (InvokeResponse.isError): show it to the LLM. */
export class ToolFailed extends ToolmeshError {
  override name = 'ToolFailed';
  constructor(message: string, /** The tool's error as parsed JSON. */ readonly result: unknown) {
    super(message);
  }
}

/** DEADLINE_EXCEEDED: the call's deadline (or the tool's timeout) passed. */
export class ToolTimeout extends ToolmeshError {
  override name = 'ToolTimeout';
}

/** UNAVAILABLE: no healthy instance, or the registry cannot be reached. */
export class ToolUnavailable extends ToolmeshError {
  override name = 'ToolUnavailable';
}

/** UNAUTHENTICATED: the registry wants a credential, or refuses the one sent. */
export class Unauthenticated extends ToolmeshError {
  override name = 'Unauthenticated';
  constructor(
    message: string,
    /** Whether the client sent a credential. */
    readonly hadCredential: boolean,
    /** What the registry said (never the credential). */
    readonly statusMessage: string,
    code?: grpc.status,
    status?: Status__Output,
  ) {
    super(message, code, status);
  }
}

/** NOT_FOUND for a task: unknown, expired (kept for its retention once over), or another caller's. */
export class TaskNotFound extends ToolmeshError {
  override name = 'TaskNotFound';
  constructor(message: string, readonly taskId: string, code?: grpc.status, status?: Status__Output) {
    super(message, code, status);
  }
}

/** CANCELLED: the task was cancelled (CancelTask) before it ended. */
export class TaskCancelled extends ToolmeshError {
  override name = 'TaskCancelled';
}

/**
 * FAILED_PRECONDITION (ErrorInfo TOOL_DIGEST_MISMATCH): the call carried a
 * `toolDigest` and the tool's live definition has another one. Nothing ran:
 * fetch the definition again (getTool, searchTools, exportTools), show it to
 * the LLM, and call with its digest.
 */
export class ToolChanged extends ToolmeshError {
  override name = 'ToolChanged';
  constructor(
    message: string,
    /** The tool. */
    readonly tool: string,
    /** The digest the call carried: the definition the LLM was shown. */
    readonly shownDigest: string,
    /** The digest of the tool's live definition. */
    readonly liveDigest: string,
    /** The fields that differ, as the registry names them, e.g. ['description', 'input_schema_json']; ['unknown'] when the registry never served the shown definition. */
    readonly changed: string[],
    /** One line per field saying how it changed (PreconditionFailure), e.g. `description: shown "..." != live "..."`. */
    readonly differences: string[],
    code?: grpc.status,
    status?: Status__Output,
  ) {
    super(message, code, status);
  }
}

// google.rpc messages are decoded with protobufjs (the library under
// proto-loader) from the .proto files google-proto-files ships.
let rpcRoot: protobuf.Root | undefined;
function rpcType(name: string): protobuf.Type {
  if (!rpcRoot) {
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) =>
      // google/protobuf/* are protobufjs built-ins; the rest come from google-proto-files.
      target.startsWith('google/protobuf/') ? target : path.join(GOOGLE_PROTO_DIR, target);
    rpcRoot = root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: false });
  }
  return rpcRoot.lookupType(name);
}

function decode<T>(typeName: string, bytes: Uint8Array): T {
  const type = rpcType(typeName);
  return type.toObject(type.decode(bytes), CONVERSION) as T;
}

/** The google.rpc.Status in a failed call's trailers, if any. */
export function richStatus(err: grpc.ServiceError): Status__Output | undefined {
  const [bin] = err.metadata?.get('grpc-status-details-bin') ?? [];
  if (!bin || typeof bin === 'string') return undefined;
  try {
    return decode<Status__Output>('google.rpc.Status', bin);
  } catch {
    return undefined;
  }
}

/** Every detail of the status of the given google.rpc type, decoded. */
function details<T>(status: Status__Output | undefined, typeName: string): T[] {
  const wanted = `type.googleapis.com/${typeName}`;
  return (status?.details ?? [])
    .filter((any: Any__Output) => any.type_url === wanted)
    .map((any: Any__Output) => decode<T>(typeName, any.value));
}

function seconds(d: Duration__Output): number {
  return Number(d.seconds) + d.nanos / 1e9;
}

/** The ResourceInfo.resourceType of a NOT_FOUND task. */
export const TASK_RESOURCE_TYPE = 'toolmesh.v1.Task';

/** The ErrorInfo.reason of a call whose toolDigest is not the tool's live one. */
export const TOOL_DIGEST_MISMATCH = 'TOOL_DIGEST_MISMATCH';

function translate(err: grpc.ServiceError, tool: string, hadCredential = false): ToolmeshError {
  return typedError(err.code, err.details || grpc.status[err.code], richStatus(err), tool, hadCredential);
}

/** The typed error of a status: a failed call's, or a failed task's. */
function typedError(
  code: grpc.status,
  message: string,
  status: Status__Output | undefined,
  tool: string,
  hadCredential = false,
): ToolmeshError {
  switch (code) {
    case grpc.status.INVALID_ARGUMENT: {
      const violations = details<BadRequest__Output>(status, 'google.rpc.BadRequest').flatMap((b) =>
        b.fieldViolations.map((v) => ({ path: v.field, message: v.description })),
      );
      return new ToolArgumentError(message, violations, code, status);
    }
    case grpc.status.NOT_FOUND: {
      const [info] = details<ResourceInfo__Output>(status, 'google.rpc.ResourceInfo');
      if (info?.resourceType === TASK_RESOURCE_TYPE) return new TaskNotFound(message, info.resourceName, code, status);
      return new ToolNotFound(message, info?.resourceName || tool, code, status);
    }
    case grpc.status.RESOURCE_EXHAUSTED: {
      const delay = details<RetryInfo__Output>(status, 'google.rpc.RetryInfo').find((r) => r.retryDelay)?.retryDelay;
      const quota = details<QuotaFailure__Output>(status, 'google.rpc.QuotaFailure').flatMap((q) =>
        q.violations.map((v) => ({ subject: v.subject, description: v.description })),
      );
      return new RateLimited(message, delay ? seconds(delay) : undefined, quota, code, status);
    }
    case grpc.status.FAILED_PRECONDITION: {
      const info = details<ErrorInfo__Output>(status, 'google.rpc.ErrorInfo').find(
        (i) => i.reason === TOOL_DIGEST_MISMATCH,
      );
      if (!info) return new ToolmeshError(message, code, status);
      const meta = info.metadata ?? {};
      const differences = details<PreconditionFailure__Output>(status, 'google.rpc.PreconditionFailure').flatMap((p) =>
        p.violations.filter((v) => v.type === 'TOOL_CHANGED').map((v) => v.description),
      );
      const changed = (meta.changed ?? '')
        .split(',')
        .map((f) => f.trim())
        .filter(Boolean);
      return new ToolChanged(
        message,
        meta.tool || tool,
        meta.shown_digest ?? '',
        meta.live_digest ?? '',
        changed,
        differences,
        code,
        status,
      );
    }
    case grpc.status.DEADLINE_EXCEEDED:
      return new ToolTimeout(message, code, status);
    case grpc.status.UNAVAILABLE:
      return new ToolUnavailable(message, code, status);
    case grpc.status.UNAUTHENTICATED: {
      const text = hadCredential ? `the registry refused the credential (${message})` : `${NO_CREDENTIAL_HINT} (${message})`;
      return new Unauthenticated(text, hadCredential, message, code, status);
    }
    default:
      return new ToolmeshError(message, code, status);
  }
}

// ------------------------------------------------------------------- tools

/** A tool as an agent sees it, with its JSON Schemas parsed. */
export interface ToolSpec {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  version: string;
  tags: string[];
  idempotent: boolean;
  /** Seconds; undefined means the registry's default. */
  timeout?: number;
  /** Calls per second across all instances; undefined means unlimited. */
  rate?: number;
  burst?: number;
  instances: number;
  /** The definition's digest (64 hex digits): pass it as invoke's `toolDigest` to call only the definition shown to the LLM. */
  digest: string;
}

/** An OpenAI Chat Completions function definition, as ExportTools makes it. */
export interface OpenAITool {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown>; strict: boolean };
}

/** The formats ExportTools speaks: the `tools` parameter of each LLM API. */
export const EXPORT_FORMATS = ['openai_chat', 'openai_responses', 'anthropic', 'gemini', 'mcp'] as const;
export type ExportFormatName = (typeof EXPORT_FORMATS)[number];

/** One thing a format could not express about one tool. */
export interface ExportIssue {
  tool: string;
  /** True if the tool is left out of `tools`. */
  omitted: boolean;
  message: string;
}

/** What ExportTools returned. */
export interface ExportedTools {
  /** The value of the LLM API's `tools` parameter. */
  tools: unknown[];
  issues: ExportIssue[];
}

function toSpec(tool: Tool__Output): ToolSpec {
  const d = tool.descriptor;
  if (!d) throw new ToolmeshError('registry returned a tool without a descriptor');
  return {
    name: d.name,
    description: d.description,
    inputSchema: d.inputSchemaJson ? JSON.parse(d.inputSchemaJson) : { type: 'object' },
    outputSchema: d.outputSchemaJson ? JSON.parse(d.outputSchemaJson) : undefined,
    version: d.version,
    tags: d.tags,
    idempotent: d.idempotent,
    timeout: d.timeout ? seconds(d.timeout) : undefined,
    rate: d.rateLimit?.rate,
    burst: d.rateLimit?.burst,
    instances: tool.instances,
    digest: tool.digest,
  };
}

/** The parsed result of an InvokeResponse; throws ToolFailed for isError. */
function resultOf<T>(response: InvokeResponse__Output): T {
  const result: unknown = response.resultJson ? JSON.parse(response.resultJson) : null;
  if (response.isError) {
    const message =
      typeof result === 'string'
        ? result
        : typeof (result as { message?: unknown })?.message === 'string'
          ? (result as { message: string }).message
          : response.resultJson || 'tool failed';
    throw new ToolFailed(message, result);
  }
  return result as T;
}

// ------------------------------------------------------------------- tasks

/** The states of a task (MCP's), as Task.state names them. */
export const TASK_STATES = ['WORKING', 'INPUT_REQUIRED', 'COMPLETED', 'FAILED', 'CANCELLED'] as const;
export type TaskStateName = (typeof TASK_STATES)[number];
const OVER: readonly TaskStateName[] = ['COMPLETED', 'FAILED', 'CANCELLED'];

/** How far a task has come, as its tool reports it. */
export interface TaskProgress {
  /** Done so far, from 0 to 1; undefined when the tool does not say. */
  fraction?: number;
  /** What the tool is doing, in words; may be empty. */
  message: string;
}

/** `40% counting Q3: step 3 of 5`, or the message alone. */
export function progressText(progress: TaskProgress): string {
  const percent =
    progress.fraction === undefined ? '' : `${Math.round(Math.min(Math.max(progress.fraction, 0), 1) * 100)}%`;
  return [percent, progress.message.trim()].filter(Boolean).join(' ');
}

/**
 * A call that outlives one request (the Tasks service), as an agent sees
 * it. Started by ToolmeshClient.startTask; followed by waitTask or
 * watchTask; `result()` once it is over gives what invoke would have.
 */
export class Task {
  readonly id: string;
  readonly tool: string;
  /** One of TASK_STATES: WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED. */
  readonly state: TaskStateName;
  readonly statusMessage: string;
  /** The last progress its tool reported; undefined if none. */
  readonly progress?: TaskProgress;
  /** Every change makes it larger (a 64-bit integer, as a string). */
  readonly revision: string;

  constructor(/** The generated toolmesh.v1.Task, as received. */ readonly message: Task__Output) {
    this.id = message.id;
    this.tool = message.tool;
    this.state = message.state.replace(/^TASK_STATE_/, '') as TaskStateName;
    this.statusMessage = message.statusMessage;
    if (message.progress) this.progress = { fraction: message.progress.fraction, message: message.progress.message };
    this.revision = message.revision;
  }

  /** True once COMPLETED, FAILED or CANCELLED: it never changes again. */
  get over(): boolean {
    return OVER.includes(this.state);
  }

  /**
   * What invoke would have resolved to: the parsed result of a COMPLETED
   * task. Throws what invoke would have rejected with: ToolFailed when the
   * tool ran and failed, the typed error of a FAILED task's status
   * (ToolTimeout, ToolUnavailable, ...), TaskCancelled for a CANCELLED one;
   * a ToolmeshError while the task is not over.
   */
  result<T = unknown>(): T {
    const { outcome, response, error } = this.message;
    if (outcome === 'response' && response) return resultOf<T>(response);
    if (outcome === 'error' && error) {
      const code = error.code as grpc.status;
      const message = error.message || grpc.status[code] || 'UNKNOWN';
      const status = error.details.length ? decode<Status__Output>('google.rpc.Status', error.details) : undefined;
      if (this.state === 'CANCELLED') throw new TaskCancelled(message, code, status);
      throw typedError(code, message, status, this.tool);
    }
    throw new ToolmeshError(`task ${this.id} is ${this.state}: it has not ended`);
  }
}

// ------------------------------------------------------------------- client

export interface InvokeOptions {
  /** Calls with the same key are deduplicated by the registry. */
  idempotencyKey?: string;
  /** gRPC deadline in milliseconds; the registry applies min(deadline, tool timeout). */
  timeoutMs?: number;
  /**
   * The digest of the definition shown to the LLM (a ToolSpec's `digest`):
   * if the tool has changed since, nothing runs and the call rejects with
   * ToolChanged.
   */
  toolDigest?: string;
}

/** The InvokeRequest of a call (Invoke's, or StartTask's `call`). */
function invokeRequest(name: string, args: Record<string, unknown>, opts: InvokeOptions): InvokeRequest {
  return {
    tool: name,
    argumentsJson: JSON.stringify(args),
    idempotencyKey: opts.idempotencyKey ?? '',
    toolDigest: opts.toolDigest ?? '',
  };
}

export interface WaitOptions {
  /** Bounds the wait, in milliseconds: ToolTimeout when it passes, the task going on. Default: until the task ends. */
  timeoutMs?: number;
  /** Called with the task as it is and at each change until it is over (its progress, a state such as INPUT_REQUIRED). */
  onChange?: (task: Task) => void;
}

/** Discovers and calls tools through a toolmesh registry. */
export class ToolmeshClient {
  private readonly stub: ToolRegistryClient;
  private readonly tasks: TasksClient;
  private readonly metadata: grpc.Metadata;
  private readonly hasCredential: boolean;
  readonly defaultTimeoutMs: number;

  /**
   * `target` is host:port or http://host:port (plaintext), or
   * https://host:port (TLS; see registryAddress, which throws InvalidAddress
   * for anything else). `options.token` is sent on every call;
   * `options.caFile` verifies an https:// registry's certificate.
   * ToolmeshClient.fromEnv() reads them from the environment.
   */
  constructor(target = '127.0.0.1:50051', options: ConnectOptions = {}) {
    const address = registryAddress(target);
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? 30_000;
    this.metadata = new grpc.Metadata();
    this.hasCredential = options.token !== undefined;
    if (options.token !== undefined) {
      this.metadata.set('authorization', `Bearer ${usableToken(options.token, 'the token')}`);
    }
    let credentials = options.credentials;
    if (!credentials) {
      if (address.tls) {
        credentials = grpc.credentials.createSsl(options.caFile ? readCa(options.caFile, 'the CA file') : null);
      } else if (options.caFile) {
        throw new InvalidCredential(
          `a CA file is given but ${JSON.stringify(target)} is plaintext: write https://${address.target} for TLS`,
        );
      } else {
        credentials = grpc.credentials.createInsecure();
      }
    }
    const { ToolRegistry, Tasks } = toolmeshPackage().toolmesh.v1;
    this.stub = new ToolRegistry(address.target, credentials);
    // One channel for both services; closing the stub closes it.
    this.tasks = new Tasks(address.target, credentials, { channelOverride: this.stub.getChannel() });
  }

  /**
   * A client set up from the environment: the registry from
   * TOOLMESH_REGISTRY (unless `target`), the credential by tokenFromEnv and
   * the CA by caFileFromEnv.
   */
  static fromEnv(target?: string, opts: { tokenFile?: string; caFile?: string; defaultTimeoutMs?: number } = {}): ToolmeshClient {
    return new ToolmeshClient(target || process.env.TOOLMESH_REGISTRY || '127.0.0.1:50051', {
      token: tokenFromEnv(opts.tokenFile),
      caFile: caFileFromEnv(opts.caFile),
      defaultTimeoutMs: opts.defaultTimeoutMs,
    });
  }

  close(): void {
    this.stub.close();
  }

  private options(timeoutMs?: number): grpc.CallOptions {
    return { deadline: Date.now() + (timeoutMs ?? this.defaultTimeoutMs) };
  }

  private failed(err: grpc.ServiceError, tool: string): ToolmeshError {
    return translate(err, tool, this.hasCredential);
  }

  /** The tools with at least one live instance, sorted by name. */
  listTools(tags: string[] = [], timeoutMs?: number): Promise<ToolSpec[]> {
    return new Promise((resolve, reject) => {
      this.stub.listTools({ tags }, this.metadata, this.options(timeoutMs), (err, response) =>
        err ? reject(this.failed(err, '')) : resolve(response!.tools.map(toSpec)),
      );
    });
  }

  /** One tool; rejects with ToolNotFound if it has no live instance. */
  getTool(name: string, timeoutMs?: number): Promise<ToolSpec> {
    return new Promise((resolve, reject) => {
      this.stub.getTool({ name }, this.metadata, this.options(timeoutMs), (err, tool) =>
        err ? reject(this.failed(err, name)) : resolve(toSpec(tool!)),
      );
    });
  }

  /**
   * The live tools as an LLM API takes them in its `tools` parameter,
   * converted by the registry (ExportTools); `names` picks tools, in that
   * order. What the format cannot express is in `issues`, never silently
   * changed.
   */
  exportTools(
    format: ExportFormatName,
    opts: { tags?: string[]; names?: string[]; timeoutMs?: number } = {},
  ): Promise<ExportedTools> {
    if (!EXPORT_FORMATS.includes(format)) {
      return Promise.reject(new RangeError(`unknown export format ${JSON.stringify(format)}: one of ${EXPORT_FORMATS.join(', ')}`));
    }
    const request = {
      format: `EXPORT_FORMAT_${format.toUpperCase()}` as `EXPORT_FORMAT_${Uppercase<ExportFormatName>}`,
      tags: opts.tags ?? [],
      names: opts.names ?? [],
    };
    return new Promise((resolve, reject) => {
      this.stub.exportTools(request, this.metadata, this.options(opts.timeoutMs), (err, response) =>
        err
          ? reject(this.failed(err, ''))
          : resolve({
              tools: JSON.parse(response!.toolsJson) as unknown[],
              issues: response!.issues.map((i) => ({ tool: i.tool, omitted: i.omitted, message: i.message })),
            }),
      );
    });
  }

  /** The tools most relevant to a task described in words (SearchTools), best first, with their scores. */
  searchTools(
    query: string,
    opts: { limit?: number; tags?: string[]; timeoutMs?: number } = {},
  ): Promise<{ tool: ToolSpec; score: number }[]> {
    const request = { query, limit: opts.limit ?? 5, tags: opts.tags ?? [] };
    return new Promise((resolve, reject) => {
      this.stub.searchTools(request, this.metadata, this.options(opts.timeoutMs), (err, response) =>
        err
          ? reject(this.failed(err, ''))
          : resolve(response!.matches.map((m) => ({ tool: toSpec(m.tool!), score: m.score }))),
      );
    });
  }

  /** The live tools as OpenAI Chat Completions function definitions, as the registry exports them. */
  async asOpenAITools(tags: string[] = []): Promise<OpenAITool[]> {
    return (await this.exportTools('openai_chat', { tags })).tools as OpenAITool[];
  }

  /**
   * Calls a tool and resolves to its parsed JSON result. Rejects with
   * ToolArgumentError, ToolNotFound, RateLimited, ToolFailed, ToolTimeout,
   * ToolUnavailable, Unauthenticated or ToolChanged (all ToolmeshError).
   */
  invoke<T = unknown>(name: string, args: Record<string, unknown> = {}, opts: InvokeOptions = {}): Promise<T> {
    const request = invokeRequest(name, args, opts);
    return new Promise<InvokeResponse__Output>((resolve, reject) => {
      this.stub.invoke(request, this.metadata, this.options(opts.timeoutMs), (err, response) =>
        err ? reject(this.failed(err, name)) : resolve(response!),
      );
    }).then((response) => resultOf<T>(response));
  }

  /**
   * Starts a call as a task (Tasks.StartTask): the tool may run for its task
   * timeout, past the interactive one, with no request open. Resolves to the
   * task once an instance has taken it (WORKING, or already over for a quick
   * tool). A call invoke would refuse is refused here with the same error
   * (ToolChanged for a stale toolDigest included), and no task is made; a
   * repeated idempotencyKey returns the first call's task.
   */
  startTask(name: string, args: Record<string, unknown> = {}, opts: InvokeOptions = {}): Promise<Task> {
    const call = invokeRequest(name, args, opts);
    return new Promise((resolve, reject) => {
      this.tasks.startTask({ call }, this.metadata, this.options(opts.timeoutMs), (err, task) =>
        err ? reject(this.failed(err, name)) : resolve(new Task(task!)),
      );
    });
  }

  /** One task as it is now; rejects with TaskNotFound if it is unknown, expired or another caller's. */
  getTask(id: string, timeoutMs?: number): Promise<Task> {
    return new Promise((resolve, reject) => {
      this.tasks.getTask({ id }, this.metadata, this.options(timeoutMs), (err, task) =>
        err ? reject(this.failed(err, '')) : resolve(new Task(task!)),
      );
    });
  }

  /**
   * The task as it is, then the task each time it changes (progress, the
   * end), ending after it is over (Tasks.WatchTask). At the deadline
   * (`timeoutMs`, else the client's default) it throws ToolTimeout; the task
   * goes on.
   */
  async *watchTask(id: string, timeoutMs?: number): AsyncGenerator<Task, void, undefined> {
    const stream = this.tasks.watchTask({ id }, this.metadata, this.options(timeoutMs));
    try {
      for await (const task of stream as AsyncIterable<Task__Output>) yield new Task(task);
    } catch (err) {
      if (err instanceof Error && 'code' in err && 'metadata' in err) throw this.failed(err as grpc.ServiceError, '');
      throw err;
    } finally {
      stream.cancel();
    }
  }

  /**
   * Follows a task until it is over and resolves to it as it ended (call its
   * result()). Without `timeoutMs` it waits until the task ends, watching
   * again whenever a watch reaches the client's default deadline.
   */
  async waitTask(id: string, opts: WaitOptions = {}): Promise<Task> {
    const until = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
    for (;;) {
      const left = until === undefined ? undefined : until - Date.now();
      if (left !== undefined && left <= 0) {
        throw new ToolTimeout(
          `task ${id} did not end within ${opts.timeoutMs! / 1000}s; it goes on`,
          grpc.status.DEADLINE_EXCEEDED,
        );
      }
      try {
        for await (const task of this.watchTask(id, Math.min(left ?? Infinity, this.defaultTimeoutMs))) {
          if (task.over) return task;
          opts.onChange?.(task);
        }
      } catch (err) {
        if (err instanceof ToolTimeout) continue; // that watch's deadline: watch again, or end above
        throw err;
      }
      // The stream ended before the task did (it should not): read it.
      const task = await this.getTask(id);
      if (task.over) return task;
    }
  }

  /** Cancels a task: it ends CANCELLED at once and its backend is stopped. A task already over is returned as it is. */
  cancelTask(id: string, timeoutMs?: number): Promise<Task> {
    return new Promise((resolve, reject) => {
      this.tasks.cancelTask({ id }, this.metadata, this.options(timeoutMs), (err, task) =>
        err ? reject(this.failed(err, '')) : resolve(new Task(task!)),
      );
    });
  }

  /** One page of the caller's tasks, newest first, and the next page's token ('' on the last page). */
  listTasks(
    opts: { pageSize?: number; pageToken?: string; timeoutMs?: number } = {},
  ): Promise<{ tasks: Task[]; nextPageToken: string }> {
    const request = { pageSize: opts.pageSize ?? 0, pageToken: opts.pageToken ?? '' };
    return new Promise((resolve, reject) => {
      this.tasks.listTasks(request, this.metadata, this.options(opts.timeoutMs), (err, response) =>
        err
          ? reject(this.failed(err, ''))
          : resolve({ tasks: response!.tasks.map((t) => new Task(t)), nextPageToken: response!.nextPageToken }),
      );
    });
  }
}

// ------------------------------------------------------------------- CLI

/** Exit codes of the CLI, the same as the Python agent's. */
export const EXIT = {
  /** The result (or the list) was printed. */
  ok: 0,
  /** Any other error from the registry (e.g. INTERNAL). */
  other: 1,
  /** A bad command line: unknown flag, no tool named, arguments not a JSON object, bad --registry, an unusable token or CA setting. */
  usage: 2,
  /** RESOURCE_EXHAUSTED: the tool's rate limit is used up. */
  rateLimited: 3,
  /** The tool ran and reported a failure (is_error). */
  toolFailed: 4,
  /** INVALID_ARGUMENT: the arguments fail the tool's schema. */
  invalidArguments: 5,
  /** NOT_FOUND: no such tool is live. */
  notFound: 6,
  /** DEADLINE_EXCEEDED. */
  timeout: 7,
  /** UNAVAILABLE: the registry is unreachable, or no instance of the tool is. */
  unavailable: 8,
  /** UNAUTHENTICATED: no credential, or one the registry refuses. */
  unauthenticated: 9,
} as const;

const USAGE = `usage: agent.ts [--registry ADDR] [--token-file FILE] [--ca-file PEM] list [--openai]
       agent.ts [--registry ADDR] [--token-file FILE] [--ca-file PEM] [--timeout SECONDS] [--idempotency-key KEY] [--task] [call] TOOL [JSON|-]

List the tools of a toolmesh registry, or call one.

options:
  --registry ADDR          registry address, host:port, http://host:port or
                           https://host:port (TLS)
                           (env TOOLMESH_REGISTRY; default 127.0.0.1:50051)
  --token-file FILE        file holding the API key or JWT, one line
                           (else env TOOLMESH_TOKEN or TOOLMESH_TOKEN_FILE)
  --ca-file PEM            CA certificates an https:// registry is verified
                           with (env TOOLMESH_CA_FILE; default: public roots)
  --openai                 with list: print OpenAI tool definitions
  --timeout SECONDS        deadline of the call, in seconds
  --idempotency-key KEY    calls with the same key run the tool once
  --task                   start the call as a task and wait for its end,
                           showing its progress

TOOL's result is printed alone on stdout, as JSON. JSON defaults to {};
- reads it from stdin. \`call\` is only needed for a tool named "list" or "call".
--task starts the call as a task, which may run for the tool's task timeout:
its progress goes to stderr, its result to stdout; --timeout then bounds the
wait (the task goes on), which is otherwise as long as the task runs.

credential (sent as \`authorization: Bearer ...\`): --token-file FILE, else
TOOLMESH_TOKEN (the API key or JWT) or TOOLMESH_TOKEN_FILE (a file holding
it). An https:// registry is TLS, verified with --ca-file or TOOLMESH_CA_FILE
(PEM), else the public roots.

exit codes: 0 result printed, 1 other registry error, 2 bad command line,
3 rate limited, 4 the tool failed (is_error), 5 arguments refused
(INVALID_ARGUMENT), 6 unknown tool, 7 timed out, 8 registry or tool
unavailable, 9 no credential or a refused one (UNAUTHENTICATED).`;

class UsageError extends Error {}

const EXAMPLE = `e.g. '{"text": "a b c"}'`;

interface Command {
  registry: string;
  address: RegistryAddress;
  tokenFile?: string;
  caFile?: string;
  timeoutMs?: number;
  list?: { openai: boolean };
  call?: { tool: string; args: Record<string, unknown>; idempotencyKey?: string; task: boolean };
}

function parseCommand(argv: string[]): Command | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        registry: { type: 'string' },
        'token-file': { type: 'string' },
        'ca-file': { type: 'string' },
        openai: { type: 'boolean' },
        timeout: { type: 'string' },
        'idempotency-key': { type: 'string' },
        task: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    const { code, message } = err as { code?: string; message: string };
    const option = /'([^']*)'/.exec(message)?.[1];
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option) throw new UsageError(`unknown option ${option}`);
    throw new UsageError(message.split('. ')[0]);
  }
  const { values, positionals } = parsed;
  if (values.help) return 'help';
  const registry = values.registry ?? (process.env.TOOLMESH_REGISTRY || '127.0.0.1:50051');
  const command: Command = {
    registry,
    address: registryAddress(registry),
    tokenFile: values['token-file'],
    caFile: values['ca-file'],
  };
  if (values.timeout !== undefined) {
    const seconds = Number(values.timeout);
    if (!(seconds > 0) || !Number.isFinite(seconds) || values.timeout.trim() === '') {
      throw new UsageError(`argument --timeout: '${values.timeout}' is not a number of seconds > 0, e.g. 2.5`);
    }
    command.timeoutMs = seconds * 1000;
  }
  let words = positionals;
  if (words[0] === 'list') {
    if (words.length > 1) throw new UsageError(`list takes no arguments, got '${words.slice(1).join(' ')}'`);
    if (values.task) throw new UsageError('--task goes with a call, not with list');
    command.list = { openai: values.openai ?? false };
    return command;
  }
  if (values.openai) throw new UsageError('--openai only goes with list');
  if (words[0] === 'call') {
    words = words.slice(1);
    if (!words.length) throw new UsageError('name the tool to call after call');
  }
  if (!words.length) throw new UsageError('name a tool to call, or list to see them');
  if (words.length > 2) {
    throw new UsageError(
      `too many arguments after ${words[0]}: pass the tool's arguments as one JSON object, ${EXAMPLE}`,
    );
  }
  let text = words[1] ?? '{}';
  if (text === '-') text = fs.readFileSync(0, 'utf8');
  let args: unknown;
  try {
    args = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`the arguments are not JSON (${(err as Error).message}): write one JSON object, ${EXAMPLE}`);
  }
  if (typeof args !== 'object' || args === null || Array.isArray(args)) {
    const kind = args === null ? 'null' : Array.isArray(args) ? 'array' : typeof args;
    throw new UsageError(`the arguments must be a JSON object, not ${kind}: ${EXAMPLE}`);
  }
  command.call = {
    tool: words[0],
    args: args as Record<string, unknown>,
    idempotencyKey: values['idempotency-key'],
    task: values.task ?? false,
  };
  return command;
}

/**
 * `--task`: starts the call as a task, shows its progress on stderr until it
 * ends, and resolves to its result (rejecting as invoke would).
 */
async function runTask(mesh: ToolmeshClient, call: NonNullable<Command['call']>, timeoutMs?: number): Promise<unknown> {
  let task = await mesh.startTask(call.tool, call.args, { idempotencyKey: call.idempotencyKey });
  console.error(`task ${task.id} started: ${task.tool} ${task.state}`);
  let state = task.state;
  let progress: string | undefined;
  const show = (now: Task) => {
    if (now.state !== state) console.error(`task ${now.id}: ${now.state} ${now.statusMessage}`.trimEnd());
    const text = now.progress && progressText(now.progress);
    if (text !== undefined && text !== progress) console.error(`progress: ${text}`);
    state = now.state;
    progress = text;
  };
  if (!task.over) task = await mesh.waitTask(task.id, { timeoutMs, onChange: show });
  return task.result();
}

/** The CLI: see USAGE. Resolves to the exit code. */
export async function main(argv: string[]): Promise<number> {
  let command: Command | 'help';
  try {
    command = parseCommand(argv);
  } catch (err) {
    if (!(err instanceof UsageError || err instanceof InvalidAddress)) throw err;
    const what = err instanceof InvalidAddress ? '--registry ' : '';
    console.error(`agent.ts: error: ${what}${err.message.split(/\s+/).join(' ')} (see --help)`);
    return EXIT.usage;
  }
  if (command === 'help') {
    console.log(USAGE);
    return EXIT.ok;
  }
  let mesh: ToolmeshClient;
  const tokenSource = command.tokenFile
    ? '--token-file'
    : process.env.TOOLMESH_TOKEN_FILE
      ? 'TOOLMESH_TOKEN_FILE'
      : 'TOOLMESH_TOKEN';
  try {
    const token = tokenFromEnv(command.tokenFile);
    const caFile = caFileFromEnv(command.caFile);
    const caSource = command.caFile ? '--ca-file' : 'TOOLMESH_CA_FILE';
    if (caFile && !command.address.tls) {
      throw new InvalidCredential(
        `${caSource} is set but the registry ${JSON.stringify(command.registry)} is plaintext: write https://${command.address.target} for TLS`,
      );
    }
    if (caFile) readCa(caFile, caSource);
    mesh = new ToolmeshClient(command.registry, { token, caFile });
  } catch (err) {
    if (err instanceof InvalidCredential) {
      console.error(`agent.ts: error: ${err.message.split(/\s+/).join(' ')} (see --help)`);
      return EXIT.usage;
    }
    if (!(err instanceof ToolmeshSetupError)) throw err;
    console.error(`agent.ts: error: ${err.message}`);
    return EXIT.usage;
  }
  try {
    if (command.list) {
      if (command.list.openai) {
        const exported = await mesh.exportTools('openai_chat', { timeoutMs: command.timeoutMs });
        console.log(JSON.stringify(exported.tools, null, 2));
      } else {
        const tools = await mesh.listTools([], command.timeoutMs);
        for (const t of tools) {
          const limit = t.rate ? `, ${t.rate}/s burst ${t.burst}` : '';
          console.log(`${t.name}: ${t.description} (${t.instances} instance(s)${limit})`);
        }
      }
    } else if (command.call) {
      const { tool, args, idempotencyKey, task } = command.call;
      const result = task
        ? await runTask(mesh, command.call, command.timeoutMs)
        : await mesh.invoke(tool, args, { idempotencyKey, timeoutMs: command.timeoutMs });
      console.log(JSON.stringify(result));
    }
    return EXIT.ok;
  } catch (err) {
    if (err instanceof ToolArgumentError) {
      console.error(`invalid arguments: ${err.message}`);
      for (const v of err.violations) console.error(`  ${v.path || '/'}: ${v.message}`);
      return EXIT.invalidArguments;
    }
    if (err instanceof RateLimited) {
      console.error(`rate limited, retry in ${err.retryAfter}s: ${err.message}`);
      return EXIT.rateLimited;
    }
    if (err instanceof ToolFailed) {
      console.error(`tool failed: ${err.message}`);
      return EXIT.toolFailed;
    }
    if (err instanceof Unauthenticated) {
      console.error(
        err.hadCredential ? `the registry refused the credential from ${tokenSource} (${err.statusMessage})` : err.message,
      );
      return EXIT.unauthenticated;
    }
    if (err instanceof ToolmeshError) {
      console.error(`${err.name} (${err.code === undefined ? '-' : grpc.status[err.code]}): ${err.message}`);
      if (err instanceof ToolNotFound || err instanceof TaskNotFound) return EXIT.notFound;
      if (err instanceof ToolTimeout) return EXIT.timeout;
      if (err instanceof ToolUnavailable) return EXIT.unavailable;
      return EXIT.other;
    }
    throw err;
  } finally {
    mesh.close();
  }
}

if (require.main === module) {
  // grpc-js sets the TLS server name to the registry's host even when it is an
  // IP address (https://127.0.0.1:50051), which Node warns about (DEP0123) on
  // stderr; the certificate is still verified for that IP. Other warnings
  // are printed as Node prints them.
  process.removeAllListeners('warning');
  process.on('warning', (warning: Error & { code?: string }) => {
    if (warning.code !== 'DEP0123') console.error(`(node:${process.pid}) ${warning.name}: ${warning.message}`);
  });
  // A reader that goes away (e.g. `| head -1`) is not an error worth a stack trace.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => process.exit(err.code === 'EPIPE' ? EXIT.ok : EXIT.other));
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
