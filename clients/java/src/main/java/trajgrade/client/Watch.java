package trajgrade.client;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import trajgrade.v1.GraderServiceOuterClass.WatchResultsRequest;
import trajgrade.v1.Result.Verdict;

/** The conformance program's watch mode: print the first N live results (see Conformance). */
final class Watch {
  private static final String USAGE = "usage: Conformance watch --addr ADDR [--suite ID]... "
      + "[--verdict V]... [--service S]... --count N [--token T] [--timeout-s S]";

  private Watch() {}

  static int run(String[] args) throws InterruptedException {
    String address = null;
    String token = null;
    int count = 0;
    double timeoutSeconds = 120;
    WatchResultsRequest.Builder request = WatchResultsRequest.newBuilder();
    try {
      for (int i = 0; i < args.length; i += 2) {
        if (i + 1 >= args.length) {
          throw new IllegalArgumentException(args[i] + " needs a value");
        }
        String value = args[i + 1];
        switch (args[i]) {
          case "--addr" -> address = value;
          case "--suite" -> request.addSuiteIds(value);
          case "--verdict" -> request.addVerdicts(Verdict.valueOf(value));
          case "--service" -> request.addServiceNames(value);
          case "--count" -> count = Integer.parseInt(value);
          case "--token" -> token = value;
          case "--timeout-s" -> timeoutSeconds = Double.parseDouble(value);
          default -> throw new IllegalArgumentException("unknown flag " + args[i]);
        }
      }
    } catch (IllegalArgumentException e) {
      System.err.println(e.getMessage() + "\n" + USAGE);
      return 2;
    }
    if (address == null || count < 1) {
      System.err.println(USAGE);
      return 2;
    }

    ManagedChannelBuilder<?> channel =
        Grpc.newChannelBuilder(address, InsecureChannelCredentials.create());
    if (token != null) {
      // A bearer token the way a caller adds one: an interceptor on the channel it builds.
      Metadata headers = new Metadata();
      headers.put(
          Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + token);
      channel.intercept(MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    int index = 0;
    try (TrajgradeClient client = new TrajgradeClient(channel.build(), 60_000);
        ResultWatch watch =
            client.watchResults(request.build(), (long) (timeoutSeconds * 1000))) {
      while (index < count && watch.hasNext()) {
        JsonObject line = new JsonObject();
        line.addProperty("rpc", "WatchResults");
        line.addProperty("index", index++);
        line.add("response", JsonParser.parseString(Conformance.PRINTER.print(watch.next())));
        out.println(Conformance.GSON.toJson(line));
      }
    } catch (StatusRuntimeException e) {
      System.err.println("trajgrade-conformance watch: WatchResults after " + index
          + " results: " + e.getStatus());
      return 1;
    } catch (com.google.protobuf.InvalidProtocolBufferException e) {
      System.err.println("trajgrade-conformance watch: " + e);
      return 1;
    }
    if (index < count) {
      System.err.println("trajgrade-conformance watch: WatchResults ended after " + index
          + " of " + count + " results");
      return 1;
    }
    return 0;
  }
}
