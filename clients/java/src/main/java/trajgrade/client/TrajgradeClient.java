package trajgrade.client;

import io.grpc.Context;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import trajgrade.v1.GraderServiceGrpc;
import trajgrade.v1.GraderServiceOuterClass.BatchGradeTracesRequest;
import trajgrade.v1.GraderServiceOuterClass.GradeTraceRequest;
import trajgrade.v1.GraderServiceOuterClass.ImportSuiteRequest;
import trajgrade.v1.GraderServiceOuterClass.ImportSuiteResponse;
import trajgrade.v1.GraderServiceOuterClass.RegisterSuiteRequest;
import trajgrade.v1.GraderServiceOuterClass.StreamGradeTracesRequest;
import trajgrade.v1.GraderServiceOuterClass.StreamGradeTracesResponse;
import trajgrade.v1.GraderServiceOuterClass.WatchResultsRequest;
import trajgrade.v1.Result.GradeResult;
import trajgrade.v1.Result.TraceOutcome;
import trajgrade.v1.SuiteOuterClass.Suite;
import trajgrade.v1.TraceOuterClass.Trace;

/**
 * A small client for trajgrade.v1.GraderService: register a suite once, then grade traces one at
 * a time, in a batch, or over a stream, and follow live grading ({@link #watchResults}). Failed
 * calls throw {@link io.grpc.StatusRuntimeException} with the server's status code
 * (INVALID_ARGUMENT for a bad suite, NOT_FOUND for an unknown id).
 */
public final class TrajgradeClient implements AutoCloseable {
  private final ManagedChannel channel;
  private final GraderServiceGrpc.GraderServiceBlockingStub blocking;
  private final GraderServiceGrpc.GraderServiceStub async;
  private final long timeoutMillis;

  /**
   * Connects without TLS.
   *
   * @param target "host:port" or "unix:/path/to.sock" (the sidecar layout)
   * @param timeoutMillis deadline of each call
   */
  public TrajgradeClient(String target, long timeoutMillis) {
    this(Grpc.newChannelBuilder(target, InsecureChannelCredentials.create()).build(), timeoutMillis);
  }

  /** Uses a channel the caller built (TLS, interceptors); {@link #close()} shuts it down. */
  public TrajgradeClient(ManagedChannel channel, long timeoutMillis) {
    this.channel = channel;
    this.blocking = GraderServiceGrpc.newBlockingStub(channel);
    this.async = GraderServiceGrpc.newStub(channel);
    this.timeoutMillis = timeoutMillis;
  }

  private GraderServiceGrpc.GraderServiceBlockingStub blocking() {
    return blocking.withDeadlineAfter(timeoutMillis, TimeUnit.MILLISECONDS);
  }

  /** Validates and compiles a suite on the server and returns its content-hash id. */
  public String registerSuite(Suite suite) {
    return blocking().registerSuite(RegisterSuiteRequest.newBuilder().setSuite(suite).build())
        .getSuiteId();
  }

  /**
   * Converts the text of a suite file in another format (Orbit, promptfoo, Google ADK, or native
   * JSON/YAML; format "" or "auto" detects it) on the server and registers it. The response holds
   * the native suite, its id, the format read, and what was left out when skip_unsupported is set
   * (without it those parts fail the call with INVALID_ARGUMENT naming each). The request's name
   * picks one suite of a file holding several.
   */
  public ImportSuiteResponse importSuite(ImportSuiteRequest request) {
    return blocking().importSuite(request);
  }

  /** {@link #importSuite(ImportSuiteRequest)} of a file's text, its format detected. */
  public ImportSuiteResponse importSuite(String text) {
    return importSuite(ImportSuiteRequest.newBuilder().setText(text).build());
  }

  /** Grades one trace against a registered suite. */
  public GradeResult gradeTrace(String suiteId, Trace trace) {
    return blocking()
        .gradeTrace(GradeTraceRequest.newBuilder().setSuiteId(suiteId).setTrace(trace).build())
        .getResult();
  }

  /** Grades many traces in one call: one outcome (result or item error) per trace, in order. */
  public List<TraceOutcome> batchGradeTraces(String suiteId, List<Trace> traces) {
    List<TraceOutcome> outcomes = blocking()
        .batchGradeTraces(
            BatchGradeTracesRequest.newBuilder().setSuiteId(suiteId).addAllTraces(traces).build())
        .getOutcomesList();
    checkCount(outcomes.size(), traces.size());
    return outcomes;
  }

  /** How many traces {@link #streamGradeTraces(String, List)} puts in one stream message. */
  public static final int DEFAULT_STREAM_CHUNK = 256;

  /**
   * Grades traces over one bidirectional stream, {@link #DEFAULT_STREAM_CHUNK} traces per
   * message; outcomes come back in request order.
   */
  public List<TraceOutcome> streamGradeTraces(String suiteId, List<Trace> traces)
      throws InterruptedException {
    return streamGradeTraces(suiteId, traces, DEFAULT_STREAM_CHUNK);
  }

  /**
   * Grades traces over one bidirectional stream, {@code chunkSize} traces per message (the
   * {@code traces} field; the server grades each message as one batch and answers its
   * {@code outcomes}); outcomes come back in request order. {@code chunkSize} 1 sends one trace
   * per message in the {@code trace} field, the form servers without chunks understand. The
   * suite id travels with the first message only.
   */
  public List<TraceOutcome> streamGradeTraces(String suiteId, List<Trace> traces, int chunkSize)
      throws InterruptedException {
    int size = Math.max(1, chunkSize);
    CompletableFuture<List<TraceOutcome>> done = new CompletableFuture<>();
    List<TraceOutcome> outcomes = new ArrayList<>();
    StreamObserver<StreamGradeTracesResponse> responses = new StreamObserver<>() {
      @Override
      public void onNext(StreamGradeTracesResponse response) {
        if (response.getOutcomesCount() > 0) {
          outcomes.addAll(response.getOutcomesList());
        } else {
          outcomes.add(response.getOutcome());
        }
      }

      @Override
      public void onError(Throwable t) {
        done.completeExceptionally(t);
      }

      @Override
      public void onCompleted() {
        done.complete(outcomes);
      }
    };
    StreamObserver<StreamGradeTracesRequest> requests = async
        .withDeadlineAfter(timeoutMillis, TimeUnit.MILLISECONDS)
        .streamGradeTraces(responses);
    for (int start = 0; start < traces.size(); start += size) {
      StreamGradeTracesRequest.Builder request = StreamGradeTracesRequest.newBuilder();
      if (size == 1) {
        request.setTrace(traces.get(start));
      } else {
        request.addAllTraces(traces.subList(start, Math.min(start + size, traces.size())));
      }
      if (start == 0) {
        request.setSuiteId(suiteId);
      }
      requests.onNext(request.build());
    }
    requests.onCompleted();
    try {
      List<TraceOutcome> result = done.get(timeoutMillis + 1_000, TimeUnit.MILLISECONDS);
      checkCount(result.size(), traces.size());
      return result;
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RuntimeException runtime) {
        throw runtime;
      }
      throw new IllegalStateException(e.getCause());
    } catch (TimeoutException e) {
      throw new IllegalStateException("trajgrade: stream did not finish", e);
    }
  }

  /**
   * Follows live grading (docs/live-grading.md): one response per result of a run that the
   * server's OTLP receiver assembled and graded, from the moment of the call on. The request
   * holds the filters (suite_ids, verdicts, service_names; an empty list matches all). The
   * watch has no deadline (the client's timeout is for the short calls); close it to stop.
   *
   * <pre>{@code
   * try (ResultWatch watch = client.watchResults(WatchResultsRequest.newBuilder()
   *     .addVerdicts(Verdict.VERDICT_FAIL).build())) {
   *   while (watch.hasNext()) {
   *     WatchResultsResponse result = watch.next();
   *   }
   * }
   * }</pre>
   */
  public ResultWatch watchResults(WatchResultsRequest request) {
    return watchResults(request, 0);
  }

  /**
   * {@link #watchResults(WatchResultsRequest)} ending with DEADLINE_EXCEEDED after
   * {@code timeoutMillis} (0: no deadline).
   */
  public ResultWatch watchResults(WatchResultsRequest request, long timeoutMillis) {
    GraderServiceGrpc.GraderServiceBlockingStub stub = timeoutMillis > 0
        ? blocking.withDeadlineAfter(timeoutMillis, TimeUnit.MILLISECONDS)
        : blocking;
    // The call belongs to its own cancellable context: closing the watch cancels it.
    Context.CancellableContext context = Context.current().withCancellation();
    Context previous = context.attach();
    try {
      return new ResultWatch(context, stub.watchResults(request));
    } finally {
      context.detach(previous);
    }
  }

  private static void checkCount(int outcomes, int traces) {
    if (outcomes != traces) {
      throw new IllegalStateException(
          "trajgrade: " + outcomes + " outcomes for " + traces + " traces");
    }
  }

  @Override
  public void close() throws InterruptedException {
    channel.shutdown().awaitTermination(5, TimeUnit.SECONDS);
  }
}
