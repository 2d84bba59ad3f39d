#!/usr/bin/env node
'use strict';
/**
 * Grade a test vector through every grading RPC and print one JSON line per outcome.
 *
 *   node bin/conformance.js <address> <vectors.json>
 *
 * vectors.json is {"suite": Suite, "traces": [Trace, ...]} in the protobuf JSON mapping. Output:
 * {"rpc":"RegisterSuite","suite_id":...}, then one
 * {"rpc":"GradeTrace"|"BatchGradeTraces"|"StreamGradeTraces"|"StreamGradeTracesOnePerMessage","index":i,
 * "outcome":TraceOutcome} per trace and RPC. StreamGradeTraces sends chunks of 4 traces per message
 * (the last one partial); StreamGradeTracesOnePerMessage sends the single-trace form. Each
 * ImportSuiteRequest of the optional "imports" list is sent as it stands and printed as
 * {"rpc":"ImportSuite","index":i,"response":ImportSuiteResponse}.
 *
 * The watch mode follows live grading and prints the first N results, then exits:
 *
 *   node bin/conformance.js watch --addr ADDR [--suite ID]... [--verdict VERDICT_...]...
 *     [--service NAME]... --count N [--token T] [--timeout-s S]
 *
 * Output lines: {"rpc":"WatchResults","index":i,"response":WatchResultsResponse}. --token sends
 * "authorization: Bearer T" on the call; --timeout-s (default 120) bounds the whole watch.
 */
const fs = require('node:fs');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const { TrajgradeClient } = require('../src/client');

const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

/** An interceptor that adds `authorization: Bearer <token>` to every call. */
function bearer(token) {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set('authorization', `Bearer ${token}`);
        next(metadata, listener);
      },
    });
}

async function watch(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      addr: { type: 'string' },
      suite: { type: 'string', multiple: true, default: [] },
      verdict: { type: 'string', multiple: true, default: [] },
      service: { type: 'string', multiple: true, default: [] },
      count: { type: 'string' },
      token: { type: 'string' },
      'timeout-s': { type: 'string', default: '120' },
    },
  });
  const count = Number(values.count);
  if (!values.addr || !Number.isInteger(count) || count < 1) {
    process.stderr.write(
      'usage: conformance.js watch --addr ADDR [--suite ID]... [--verdict V]... ' +
        '[--service S]... --count N [--token T] [--timeout-s S]\n',
    );
    return 2;
  }
  const channelOptions = values.token ? { interceptors: [bearer(values.token)] } : {};
  const client = new TrajgradeClient(values.addr, { channelOptions });
  const request = {
    suite_ids: values.suite,
    verdicts: values.verdict,
    service_names: values.service,
  };
  let index = 0;
  try {
    const watching = client.watchResults(request, {
      timeoutMs: Number(values['timeout-s']) * 1000,
    });
    for await (const response of watching) {
      print({ rpc: 'WatchResults', index, response });
      index += 1;
      if (index === count) {
        return 0;
      }
    }
  } catch (err) {
    throw new Error(`WatchResults after ${index} results: ${err.message}`, { cause: err });
  } finally {
    client.close();
  }
  throw new Error(`WatchResults ended after ${index} of ${count} results`);
}

async function main(argv) {
  if (argv[0] === 'watch') {
    return watch(argv.slice(1));
  }
  if (argv.length !== 2) {
    process.stderr.write('usage: conformance.js <address> <vectors.json>\n');
    return 2;
  }
  const [address, file] = argv;
  const { suite, traces, imports = [] } = JSON.parse(fs.readFileSync(file, 'utf8'));
  const client = new TrajgradeClient(address);
  try {
    const suiteId = await client.registerSuite(suite);
    print({ rpc: 'RegisterSuite', suite_id: suiteId });
    for (const [index, trace] of traces.entries()) {
      const result = await client.gradeTrace(suiteId, trace);
      print({ rpc: 'GradeTrace', index, outcome: { result } });
    }
    const batch = await client.batchGradeTraces(suiteId, traces);
    batch.forEach((outcome, index) => print({ rpc: 'BatchGradeTraces', index, outcome }));
    const stream = await client.streamGradeTraces(suiteId, traces, { chunkSize: 4 });
    stream.forEach((outcome, index) => print({ rpc: 'StreamGradeTraces', index, outcome }));
    const single = await client.streamGradeTraces(suiteId, traces, { chunkSize: 1 });
    single.forEach((outcome, index) =>
      print({ rpc: 'StreamGradeTracesOnePerMessage', index, outcome }),
    );
    for (const [index, request] of imports.entries()) {
      const response = await client.importSuite(request.text, {
        format: request.format ?? 'auto',
        skipUnsupported: request.skip_unsupported ?? false,
        name: request.name ?? '',
      });
      print({ rpc: 'ImportSuite', index, response });
    }
  } finally {
    client.close();
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`trajgrade-conformance: ${err.stack ?? err}\n`);
    process.exitCode = 1;
  },
);
