'use strict';
/**
 * Node.js client for trajgrade.v1.GraderService.
 *
 * The protos are loaded at runtime from the repository's proto/ directory (or `protoDir`), so
 * there is no generated code to keep in sync. Messages are plain objects in the protobuf JSON
 * shape: snake_case field names, enum values by name, 64-bit integers as decimal strings.
 */
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const DEFAULT_PROTO_DIR = path.resolve(__dirname, '..', '..', '..', 'proto');

/** proto-loader options that keep objects in the protobuf JSON shape. */
const LOADER_OPTIONS = Object.freeze({
  keepCase: true, // snake_case, as in the protobuf JSON mapping with proto names
  longs: String, // uint64 timestamps above 2^53 survive
  enums: String, // "VERDICT_PASS", not 1
  defaults: false, // absent stays absent (optional fields keep their presence)
  oneofs: false, // no virtual oneof-name keys in decoded objects
});

/**
 * Load the trajgrade.v1 package definition.
 * @param {string} [protoDir] directory holding trajgrade/v1/*.proto
 */
function loadPackage(protoDir = DEFAULT_PROTO_DIR) {
  const definition = protoLoader.loadSync('trajgrade/v1/grader_service.proto', {
    ...LOADER_OPTIONS,
    includeDirs: [protoDir],
  });
  return grpc.loadPackageDefinition(definition).trajgrade.v1;
}

/** A connection to one trajgrade server. */
class TrajgradeClient {
  /**
   * @param {string} target "host:port" or "unix:/path/to.sock"
   * @param {{credentials?: grpc.ChannelCredentials, protoDir?: string, timeoutMs?: number}} [options]
   */
  constructor(target, options = {}) {
    const pkg = loadPackage(options.protoDir);
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.stub = new pkg.GraderService(target, credentials);
  }

  close() {
    this.stub.close();
  }

  _callOptions() {
    return { deadline: Date.now() + this.timeoutMs };
  }

  _unary(method, request) {
    return new Promise((resolve, reject) => {
      this.stub[method](request, this._callOptions(), (err, response) =>
        err ? reject(err) : resolve(response),
      );
    });
  }

  /** Validate and compile a suite on the server; resolves to its content-hash id. */
  async registerSuite(suite) {
    const response = await this._unary('RegisterSuite', { suite });
    return response.suite_id;
  }

  /** Grade one trace against a registered suite; resolves to a GradeResult. */
  async gradeTrace(suiteId, trace) {
    const response = await this._unary('GradeTrace', { trace, suite_id: suiteId });
    return response.result;
  }

  /** Grade many traces in one call; resolves to one TraceOutcome ({result} or {error}) per trace. */
  async batchGradeTraces(suiteId, traces) {
    const response = await this._unary('BatchGradeTraces', { suite_id: suiteId, traces });
    const outcomes = response.outcomes ?? [];
    if (outcomes.length !== traces.length) {
      throw new Error(`trajgrade: ${outcomes.length} outcomes for ${traces.length} traces`);
    }
    return outcomes;
  }

  /**
   * Grade traces over one bidirectional stream; outcomes arrive in request order. The suite id
   * travels with the first message only.
   */
  streamGradeTraces(suiteId, traces) {
    return new Promise((resolve, reject) => {
      const outcomes = [];
      const call = this.stub.StreamGradeTraces(this._callOptions());
      call.on('data', (response) => outcomes.push(response.outcome ?? {}));
      call.on('error', reject);
      call.on('end', () => {
        if (outcomes.length !== traces.length) {
          reject(new Error(`trajgrade: ${outcomes.length} outcomes for ${traces.length} traces`));
        } else {
          resolve(outcomes);
        }
      });
      traces.forEach((trace, i) => call.write(i === 0 ? { trace, suite_id: suiteId } : { trace }));
      call.end();
    });
  }
}

module.exports = { TrajgradeClient, loadPackage, LOADER_OPTIONS, DEFAULT_PROTO_DIR };
