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

/** How many traces streamGradeTraces puts in one stream message by default. */
const DEFAULT_STREAM_CHUNK = 256;

/** A connection to one trajgrade server. */
class TrajgradeClient {
  /**
   * @param {string} target "host:port" or "unix:/path/to.sock"
   * `channelOptions` go to the grpc-js client as they are (e.g. `interceptors`, for a bearer
   * token on a plaintext channel, where call credentials are refused).
   * @param {{credentials?: grpc.ChannelCredentials, protoDir?: string, timeoutMs?: number,
   *   channelOptions?: grpc.ClientOptions}} [options]
   */
  constructor(target, options = {}) {
    const pkg = loadPackage(options.protoDir);
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.stub = new pkg.GraderService(target, credentials, options.channelOptions);
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

  /**
   * Convert the text of a suite file in another format (Orbit, promptfoo, Google ADK, or native
   * JSON/YAML; format 'auto' detects it) on the server and register it. Resolves to
   * {suite, suite_id, unsupported, format}; `unsupported` lists what was left out with
   * skipUnsupported (without it those parts reject with INVALID_ARGUMENT naming each).
   * `name` picks one suite of a file holding several.
   */
  async importSuite(text, { format = 'auto', skipUnsupported = false, name = '' } = {}) {
    return this._unary('ImportSuite', {
      text,
      format,
      skip_unsupported: skipUnsupported,
      name,
    });
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
   * Grade traces over one bidirectional stream; resolves to one TraceOutcome per trace, in
   * request order. Traces go out `chunkSize` per message (the `traces` field, default 256; the
   * server grades each message as one batch and answers its `outcomes`); `chunkSize: 1` sends one
   * trace per message in the `trace` field, the form servers without chunks understand. The suite
   * id travels with the first message only.
   */
  streamGradeTraces(suiteId, traces, { chunkSize = DEFAULT_STREAM_CHUNK } = {}) {
    const size = Math.max(1, Math.floor(chunkSize));
    return new Promise((resolve, reject) => {
      const outcomes = [];
      const call = this.stub.StreamGradeTraces(this._callOptions());
      call.on('data', (response) => {
        if (response.outcomes && response.outcomes.length > 0) {
          outcomes.push(...response.outcomes);
        } else {
          outcomes.push(response.outcome ?? {});
        }
      });
      call.on('error', reject);
      call.on('end', () => {
        if (outcomes.length !== traces.length) {
          reject(new Error(`trajgrade: ${outcomes.length} outcomes for ${traces.length} traces`));
        } else {
          resolve(outcomes);
        }
      });
      for (let start = 0; start < traces.length; start += size) {
        const message =
          size === 1 ? { trace: traces[start] } : { traces: traces.slice(start, start + size) };
        if (start === 0) {
          message.suite_id = suiteId;
        }
        call.write(message);
      }
      call.end();
    });
  }

  /**
   * Follow live grading (docs/live-grading.md): an async iterator of WatchResultsResponse
   * objects, one per result of a run that the server's OTLP receiver assembled and graded, from
   * the moment of the call on.
   *
   *   for await (const res of client.watchResults({ verdicts: ['VERDICT_FAIL'] })) { ... }
   *
   * `request` holds the filters (`suite_ids`, `verdicts`, `service_names`; an empty or absent
   * list matches all). The watch has no deadline unless `timeoutMs` is given (the client's
   * `timeoutMs` is for the short calls); `signal` (an AbortSignal) cancels it, as does leaving
   * the loop. The server ending the call rejects the loop with its gRPC status error
   * (`err.code`): RESOURCE_EXHAUSTED (WATCHER_TOO_SLOW: the caller fell behind the server's
   * queue), UNAVAILABLE (SHUTTING_DOWN), FAILED_PRECONDITION (LIVE_GRADING_OFF).
   * @param {{suite_ids?: string[], verdicts?: string[], service_names?: string[]}} [request]
   * @param {{timeoutMs?: number, signal?: AbortSignal}} [options]
   */
  async *watchResults(request = {}, { timeoutMs, signal } = {}) {
    signal?.throwIfAborted();
    const callOptions = timeoutMs === undefined ? {} : { deadline: Date.now() + timeoutMs };
    const call = this.stub.WatchResults(request, callOptions);
    const cancel = () => call.cancel();
    signal?.addEventListener('abort', cancel, { once: true });
    try {
      // The call is a Readable: its 'error' (the final non-OK status) rejects the loop.
      for await (const response of call) {
        yield response;
      }
      // A cancel by `signal` surfaces as CANCELLED above; an OK end just ends the loop.
    } finally {
      signal?.removeEventListener('abort', cancel);
      // Leaving early: cancel the call so the server drops the watcher. The CANCELLED status
      // that follows is expected; without a listener it would be an uncaught 'error'.
      call.on('error', () => {});
      call.cancel();
    }
  }
}

module.exports = {
  TrajgradeClient,
  loadPackage,
  LOADER_OPTIONS,
  DEFAULT_PROTO_DIR,
  DEFAULT_STREAM_CHUNK,
};
