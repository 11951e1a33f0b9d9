/**
 * A small toolmesh agent library and CLI.
 *
 * The contract is loaded at run time from proto/ with @grpc/proto-loader and
 * typed by the interfaces proto-loader-gen-types generates into gen/
 * (`npm run generate`); nothing here hand-writes a message type. Errors come
 * back as typed exceptions decoded from the google.rpc.Status the registry
 * sends in `grpc-status-details-bin`.
 *
 *   npx tsx agent.ts --registry 127.0.0.1:50051                      # list the tools
 *   npx tsx agent.ts --registry 127.0.0.1:50051 word_count '{"text":"a b c"}'
 */

import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import * as protobuf from 'protobufjs';

import type { ProtoGrpcType } from './gen/toolmesh';
import type { ToolRegistryClient } from './gen/toolmesh/v1/ToolRegistry';
import type { Tool__Output } from './gen/toolmesh/v1/Tool';
import type { InvokeResponse__Output } from './gen/toolmesh/v1/InvokeResponse';
import type { Duration__Output } from './gen/google/protobuf/Duration';
import type { Any__Output } from './gen/google/protobuf/Any';
import type { Status__Output } from './gen/google/rpc/Status';
import type { BadRequest__Output } from './gen/google/rpc/BadRequest';
import type { ResourceInfo__Output } from './gen/google/rpc/ResourceInfo';
import type { RetryInfo__Output } from './gen/google/rpc/RetryInfo';
import type { QuotaFailure__Output } from './gen/google/rpc/QuotaFailure';

/** Where toolmesh/v1/toolmesh.proto lives (the repository's proto/proto). */
export const PROTO_DIR = process.env.TOOLMESH_PROTO_DIR ?? path.resolve(__dirname, '../../../proto/proto');

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
    const definition = protoLoader.loadSync('toolmesh/v1/toolmesh.proto', LOADER_OPTIONS);
    registryPackage = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType;
  }
  return registryPackage;
}

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

function translate(err: grpc.ServiceError, tool: string): ToolmeshError {
  const status = richStatus(err);
  const message = err.details || grpc.status[err.code];
  switch (err.code) {
    case grpc.status.INVALID_ARGUMENT: {
      const violations = details<BadRequest__Output>(status, 'google.rpc.BadRequest').flatMap((b) =>
        b.fieldViolations.map((v) => ({ path: v.field, message: v.description })),
      );
      return new ToolArgumentError(message, violations, err.code, status);
    }
    case grpc.status.NOT_FOUND: {
      const [info] = details<ResourceInfo__Output>(status, 'google.rpc.ResourceInfo');
      return new ToolNotFound(message, info?.resourceName || tool, err.code, status);
    }
    case grpc.status.RESOURCE_EXHAUSTED: {
      const delay = details<RetryInfo__Output>(status, 'google.rpc.RetryInfo').find((r) => r.retryDelay)?.retryDelay;
      const quota = details<QuotaFailure__Output>(status, 'google.rpc.QuotaFailure').flatMap((q) =>
        q.violations.map((v) => ({ subject: v.subject, description: v.description })),
      );
      return new RateLimited(message, delay ? seconds(delay) : undefined, quota, err.code, status);
    }
    case grpc.status.DEADLINE_EXCEEDED:
      return new ToolTimeout(message, err.code, status);
    case grpc.status.UNAVAILABLE:
      return new ToolUnavailable(message, err.code, status);
    default:
      return new ToolmeshError(message, err.code, status);
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
}

/** An OpenAI function-calling tool definition. */
export interface OpenAITool {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
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
  };
}

/** A tool as an OpenAI function-calling definition. */
export function asOpenAITool(tool: ToolSpec): OpenAITool {
  return {
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
  };
}

// ------------------------------------------------------------------- client

export interface InvokeOptions {
  /** Calls with the same key are deduplicated by the registry. */
  idempotencyKey?: string;
  /** gRPC deadline in milliseconds; the registry applies min(deadline, tool timeout). */
  timeoutMs?: number;
}

/** Discovers and calls tools through a toolmesh registry. */
export class ToolmeshClient {
  private readonly stub: ToolRegistryClient;

  /** `target` is host:port; pass TLS credentials for anything but loopback. */
  constructor(
    target = '127.0.0.1:50051',
    credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
    readonly defaultTimeoutMs = 30_000,
  ) {
    const { ToolRegistry } = toolmeshPackage().toolmesh.v1;
    this.stub = new ToolRegistry(target, credentials);
  }

  close(): void {
    this.stub.close();
  }

  private options(timeoutMs?: number): grpc.CallOptions {
    return { deadline: Date.now() + (timeoutMs ?? this.defaultTimeoutMs) };
  }

  /** The tools with at least one live instance, sorted by name. */
  listTools(tags: string[] = [], timeoutMs?: number): Promise<ToolSpec[]> {
    return new Promise((resolve, reject) => {
      this.stub.listTools({ tags }, this.options(timeoutMs), (err, response) =>
        err ? reject(translate(err, '')) : resolve(response!.tools.map(toSpec)),
      );
    });
  }

  /** One tool; rejects with ToolNotFound if it has no live instance. */
  getTool(name: string, timeoutMs?: number): Promise<ToolSpec> {
    return new Promise((resolve, reject) => {
      this.stub.getTool({ name }, this.options(timeoutMs), (err, tool) =>
        err ? reject(translate(err, name)) : resolve(toSpec(tool!)),
      );
    });
  }

  /** The live tools as OpenAI function-calling definitions (the `tools` parameter). */
  async asOpenAITools(tags: string[] = []): Promise<OpenAITool[]> {
    return (await this.listTools(tags)).map(asOpenAITool);
  }

  /**
   * Calls a tool and resolves to its parsed JSON result. Rejects with
   * ToolArgumentError, ToolNotFound, RateLimited, ToolFailed, ToolTimeout or
   * ToolUnavailable (all ToolmeshError).
   */
  invoke<T = unknown>(name: string, args: Record<string, unknown> = {}, opts: InvokeOptions = {}): Promise<T> {
    const request = { tool: name, argumentsJson: JSON.stringify(args), idempotencyKey: opts.idempotencyKey ?? '' };
    return new Promise<InvokeResponse__Output>((resolve, reject) => {
      this.stub.invoke(request, this.options(opts.timeoutMs), (err, response) =>
        err ? reject(translate(err, name)) : resolve(response!),
      );
    }).then((response) => {
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
    });
  }
}

// ------------------------------------------------------------------- CLI

export async function main(argv: string[]): Promise<number> {
  let registry = '127.0.0.1:50051';
  let openai = false;
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--registry') registry = argv[++i];
    else if (argv[i] === '--openai') openai = true;
    else positional.push(argv[i]);
  }
  const [tool, args = '{}'] = positional;
  const mesh = new ToolmeshClient(registry);
  try {
    if (openai) {
      console.log(JSON.stringify(await mesh.asOpenAITools(), null, 2));
    } else {
      for (const t of await mesh.listTools()) {
        const limit = t.rate ? `, ${t.rate}/s burst ${t.burst}` : '';
        console.log(`${t.name}: ${t.description} (${t.instances} instance(s)${limit})`);
      }
    }
    if (tool) console.log(JSON.stringify(await mesh.invoke(tool, JSON.parse(args))));
    return 0;
  } catch (err) {
    if (err instanceof ToolArgumentError) {
      console.error(`invalid arguments: ${err.message}`);
      for (const v of err.violations) console.error(`  ${v.path || '/'}: ${v.message}`);
      return 2;
    }
    if (err instanceof RateLimited) {
      console.error(`rate limited, retry in ${err.retryAfter}s: ${err.message}`);
      return 3;
    }
    if (err instanceof ToolFailed) {
      console.error(`tool failed: ${err.message}`);
      return 4;
    }
    if (err instanceof ToolmeshError) {
      console.error(`${err.name} (${err.code === undefined ? '-' : grpc.status[err.code]}): ${err.message}`);
      return 1;
    }
    throw err;
  } finally {
    mesh.close();
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
