package trajgrade.client;

import com.google.gson.Gson;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.util.JsonFormat;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import trajgrade.v1.GraderServiceOuterClass.ImportSuiteRequest;
import trajgrade.v1.Result.TraceOutcome;
import trajgrade.v1.SuiteOuterClass.Suite;
import trajgrade.v1.TraceOuterClass.Trace;

/**
 * Grades a test vector through every grading RPC and prints one JSON line per outcome.
 *
 * <pre>java -jar trajgrade-client-all.jar &lt;address&gt; &lt;vectors.json&gt;</pre>
 *
 * <p>vectors.json is {"suite": Suite, "traces": [Trace, ...]} in the protobuf JSON mapping.
 * Output: {"rpc":"RegisterSuite","suite_id":...}, then one
 * {"rpc":"GradeTrace"|"BatchGradeTraces"|"StreamGradeTraces"|"StreamGradeTracesOnePerMessage","index":i,
 * "outcome":TraceOutcome} per trace and RPC. StreamGradeTraces sends chunks of 4 traces per
 * message (the last one partial); StreamGradeTracesOnePerMessage sends the single-trace form.
 * Each ImportSuiteRequest of the optional "imports" list is sent as it stands and printed as
 * {"rpc":"ImportSuite","index":i,"response":ImportSuiteResponse}.
 *
 * <p>The watch mode follows live grading and prints the first N results, then exits:
 *
 * <pre>java -jar trajgrade-client-all.jar watch --addr ADDR [--suite ID]... [--verdict V]...
 *     [--service NAME]... --count N [--token T] [--timeout-s S]</pre>
 *
 * <p>Output lines: {"rpc":"WatchResults","index":i,"response":WatchResultsResponse}. --token
 * sends "authorization: Bearer T" on the call; --timeout-s (default 120) bounds the whole watch.
 */
public final class Conformance {
  static final JsonFormat.Printer PRINTER =
      JsonFormat.printer().preservingProtoFieldNames().omittingInsignificantWhitespace();
  static final Gson GSON = new Gson();

  private Conformance() {}

  public static void main(String[] args) throws Exception {
    if (args.length > 0 && args[0].equals("watch")) {
      System.exit(Watch.run(Arrays.copyOfRange(args, 1, args.length)));
    }
    if (args.length != 2) {
      System.err.println("usage: Conformance <address> <vectors.json>");
      System.exit(2);
    }
    JsonObject vectors = JsonParser
        .parseString(Files.readString(Path.of(args[1]), StandardCharsets.UTF_8))
        .getAsJsonObject();
    Suite.Builder suite = Suite.newBuilder();
    JsonFormat.parser().merge(vectors.get("suite").toString(), suite);
    List<Trace> traces = new ArrayList<>();
    for (JsonElement element : vectors.getAsJsonArray("traces")) {
      Trace.Builder trace = Trace.newBuilder();
      JsonFormat.parser().merge(element.toString(), trace);
      traces.add(trace.build());
    }

    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    try (TrajgradeClient client = new TrajgradeClient(args[0], 60_000)) {
      String suiteId = client.registerSuite(suite.build());
      JsonObject registered = new JsonObject();
      registered.addProperty("rpc", "RegisterSuite");
      registered.addProperty("suite_id", suiteId);
      out.println(GSON.toJson(registered));

      List<TraceOutcome> single = new ArrayList<>();
      for (Trace trace : traces) {
        single.add(TraceOutcome.newBuilder().setResult(client.gradeTrace(suiteId, trace)).build());
      }
      emit(out, "GradeTrace", single);
      emit(out, "BatchGradeTraces", client.batchGradeTraces(suiteId, traces));
      emit(out, "StreamGradeTraces", client.streamGradeTraces(suiteId, traces, 4));
      emit(out, "StreamGradeTracesOnePerMessage", client.streamGradeTraces(suiteId, traces, 1));

      JsonElement imports = vectors.get("imports");
      if (imports != null) {
        int index = 0;
        for (JsonElement element : imports.getAsJsonArray()) {
          ImportSuiteRequest.Builder request = ImportSuiteRequest.newBuilder();
          JsonFormat.parser().merge(element.toString(), request);
          JsonObject line = new JsonObject();
          line.addProperty("rpc", "ImportSuite");
          line.addProperty("index", index++);
          line.add(
              "response",
              JsonParser.parseString(PRINTER.print(client.importSuite(request.build()))));
          out.println(GSON.toJson(line));
        }
      }
    }
  }

  private static void emit(PrintStream out, String rpc, List<TraceOutcome> outcomes)
      throws InvalidProtocolBufferException, IOException {
    for (int i = 0; i < outcomes.size(); i++) {
      JsonObject line = new JsonObject();
      line.addProperty("rpc", rpc);
      line.addProperty("index", i);
      line.add("outcome", JsonParser.parseString(PRINTER.print(outcomes.get(i))));
      out.println(GSON.toJson(line));
    }
  }
}
