package trajgrade.client;

import io.grpc.Context;
import java.util.Iterator;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
import trajgrade.v1.GraderServiceOuterClass.WatchResultsResponse;

/**
 * A running WatchResults call: an iterator over live results, in the order the server graded
 * them. {@link #hasNext()} blocks until the next result arrives; when the server ends the call
 * it throws {@link io.grpc.StatusRuntimeException} with the status (RESOURCE_EXHAUSTED for
 * WATCHER_TOO_SLOW, UNAVAILABLE for SHUTTING_DOWN, FAILED_PRECONDITION for LIVE_GRADING_OFF).
 * {@link #close()} cancels the call, so the server drops the watcher; use try-with-resources.
 * Not thread-safe, except {@code close()}, which may be called from another thread to stop a
 * reader blocked in {@code hasNext()} (it then throws CANCELLED).
 */
public final class ResultWatch implements Iterator<WatchResultsResponse>, AutoCloseable {
  private final Context.CancellableContext context;
  private final Iterator<WatchResultsResponse> responses;

  ResultWatch(Context.CancellableContext context, Iterator<WatchResultsResponse> responses) {
    this.context = context;
    this.responses = responses;
  }

  @Override
  public boolean hasNext() {
    return responses.hasNext();
  }

  @Override
  public WatchResultsResponse next() {
    return responses.next();
  }

  /** The remaining results as a sequential, ordered stream (closing it closes the watch). */
  public Stream<WatchResultsResponse> stream() {
    return StreamSupport.stream(
            Spliterators.spliteratorUnknownSize(this, Spliterator.ORDERED | Spliterator.NONNULL),
            false)
        .onClose(this::close);
  }

  @Override
  public void close() {
    context.cancel(null);
  }
}
