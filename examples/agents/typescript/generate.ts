/**
 * Generates the TypeScript types for the toolmesh contract into gen/ beside
 * this file (not committed), and copies the .proto files they describe to
 * gen/proto/, where the agent loads them at run time: after this step the
 * agent needs nothing outside this folder.
 *
 *   npm run generate [-- --proto-dir DIR]
 *
 * DIR holds toolmesh/v1/toolmesh.proto: --proto-dir, else
 * $TOOLMESH_PROTO_DIR, else the repository's proto/proto (found from this
 * file's own location). A relative DIR is relative to the directory npm was
 * run from. Exit code 2, with one line on stderr, when DIR has no contract.
 */

import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';

const USAGE = 'usage: npm run generate [-- --proto-dir DIR]  (or TOOLMESH_PROTO_DIR=DIR)';
const CONTRACT = path.join('toolmesh', 'v1', 'toolmesh.proto');

function fail(message: string): never {
  console.error(`generate: error: ${message}`);
  process.exit(2);
}

function protoDir(): string {
  let values: { 'proto-dir'?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: process.argv.slice(2),
      options: { 'proto-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    }));
  } catch (err) {
    fail(`${(err as Error).message.split('. ')[0]}; ${USAGE}`);
  }
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const given = values['proto-dir'] || process.env.TOOLMESH_PROTO_DIR;
  // npm runs scripts in the package's folder; INIT_CWD is where it was called from.
  const dir = given
    ? path.resolve(process.env.INIT_CWD ?? process.cwd(), given)
    : path.resolve(__dirname, '../../../proto/proto');
  if (!fs.existsSync(path.join(dir, CONTRACT))) {
    fail(
      `no ${CONTRACT} in ${JSON.stringify(dir)}: pass --proto-dir DIR or set TOOLMESH_PROTO_DIR ` +
        "to the folder holding it (the toolmesh repository's proto/proto)",
    );
  }
  return dir;
}

function main(): void {
  const dir = protoDir();
  const gen = path.join(__dirname, 'gen');
  const googleProtos = path.dirname(require.resolve('google-proto-files/package.json'));
  const generator = require.resolve('@grpc/proto-loader/build/bin/proto-loader-gen-types.js');
  fs.rmSync(gen, { recursive: true, force: true });
  // The flags decide the shape of the types: they must match CONVERSION in agent.ts.
  const run = spawnSync(
    process.execPath,
    [
      generator,
      'toolmesh/v1/toolmesh.proto',
      'google/rpc/status.proto',
      'google/rpc/error_details.proto',
      '--grpcLib=@grpc/grpc-js',
      `--outDir=${gen}`,
      '--longs=String',
      '--enums=String',
      '--defaults',
      '--oneofs',
      '--includeComments',
      '-I',
      dir,
      googleProtos,
    ],
    { stdio: 'inherit', cwd: __dirname },
  );
  if (run.status !== 0) fail(`proto-loader-gen-types failed (${run.status ?? run.signal})`);
  // The contract the types were generated from, for the agent to load at run time.
  fs.cpSync(dir, path.join(gen, 'proto'), {
    recursive: true,
    filter: (source) => fs.statSync(source).isDirectory() || source.endsWith('.proto'),
  });
  console.log(`generated ${gen} from ${dir}`);
}

main();
