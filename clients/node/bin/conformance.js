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
 */
const fs = require('node:fs');
const { TrajgradeClient } = require('../src/client');

async function main(argv) {
  if (argv.length !== 2) {
    process.stderr.write('usage: conformance.js <address> <vectors.json>\n');
    return 2;
  }
  const [address, file] = argv;
  const { suite, traces, imports = [] } = JSON.parse(fs.readFileSync(file, 'utf8'));
  const client = new TrajgradeClient(address);
  const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
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
