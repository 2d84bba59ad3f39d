// Package trajgrade is a small Go client for the trajgrade.v1.GraderService gRPC API.
//
// It wraps the generated stubs in gen/trajgrade/v1 with the calls an eval runner needs:
// register a suite once, then grade traces one at a time, in a batch, or as a stream, and
// follow the live grading of OTLP runs (WatchResults).
package trajgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "trajgrade/clients/go/gen/trajgrade/v1"
)

// Client is a connection to one trajgrade server. It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	stub pb.GraderServiceClient
}

// Dial connects to a trajgrade server without TLS. target is "host:port" or "unix:/path/to.sock"
// (the sidecar layout); extra options (TLS credentials, interceptors) are appended after the
// insecure default, so a caller's credentials option wins.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("trajgrade: dial %s: %w", target, err)
	}
	return &Client{conn: conn, stub: pb.NewGraderServiceClient(conn)}, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Stub returns the generated stub for calls this wrapper does not cover (GetSuite, inline suites).
func (c *Client) Stub() pb.GraderServiceClient { return c.stub }

// RegisterSuite validates and compiles a suite on the server and returns its content-hash id.
// An invalid suite fails with codes.InvalidArgument naming the field of each problem.
func (c *Client) RegisterSuite(ctx context.Context, suite *pb.Suite) (string, error) {
	resp, err := c.stub.RegisterSuite(ctx, &pb.RegisterSuiteRequest{Suite: suite})
	if err != nil {
		return "", err
	}
	return resp.GetSuiteId(), nil
}

// ImportSuite converts the text of a suite file in another format (Orbit, promptfoo, Google ADK,
// or native JSON/YAML; format "" or "auto" detects it) to the native Suite on the server and
// registers it. The response holds the suite, its id, and what was left out when
// skipUnsupported is set (otherwise those parts fail the call with codes.InvalidArgument, as
// does anything that cannot be converted). name picks one suite of a file holding several.
func (c *Client) ImportSuite(ctx context.Context, format, text string, skipUnsupported bool, name string) (*pb.ImportSuiteResponse, error) {
	return c.stub.ImportSuite(ctx, &pb.ImportSuiteRequest{
		Format:          format,
		Text:            text,
		SkipUnsupported: skipUnsupported,
		Name:            name,
	})
}

// GradeTrace grades one trace against a registered suite.
func (c *Client) GradeTrace(ctx context.Context, suiteID string, trace *pb.Trace) (*pb.GradeResult, error) {
	resp, err := c.stub.GradeTrace(ctx, &pb.GradeTraceRequest{
		Trace:    trace,
		SuiteRef: &pb.GradeTraceRequest_SuiteId{SuiteId: suiteID},
	})
	if err != nil {
		return nil, err
	}
	return resp.GetResult(), nil
}

// BatchGradeTraces grades many traces against a registered suite in one call. It returns one
// outcome per trace, in order: a result, or an item error for a trace that could not be graded.
func (c *Client) BatchGradeTraces(ctx context.Context, suiteID string, traces []*pb.Trace) ([]*pb.TraceOutcome, error) {
	resp, err := c.stub.BatchGradeTraces(ctx, &pb.BatchGradeTracesRequest{
		SuiteRef: &pb.BatchGradeTracesRequest_SuiteId{SuiteId: suiteID},
		Traces:   traces,
	})
	if err != nil {
		return nil, err
	}
	if len(resp.GetOutcomes()) != len(traces) {
		return nil, fmt.Errorf("trajgrade: %d outcomes for %d traces", len(resp.GetOutcomes()), len(traces))
	}
	return resp.GetOutcomes(), nil
}

// DefaultStreamChunk is how many traces StreamGradeTraces puts in one stream message.
const DefaultStreamChunk = 256

// StreamGradeTraces sends traces over one StreamGradeTraces call in chunks of
// DefaultStreamChunk traces per message and collects the outcomes, which the server returns
// in request order. See StreamGradeTracesChunked.
func (c *Client) StreamGradeTraces(ctx context.Context, suiteID string, traces []*pb.Trace) ([]*pb.TraceOutcome, error) {
	return c.StreamGradeTracesChunked(ctx, suiteID, traces, DefaultStreamChunk)
}

// StreamGradeTracesChunked sends traces over one StreamGradeTraces call, chunkSize traces per
// message (the `traces` field; the server grades each message as one batch and answers its
// `outcomes`), and collects the outcomes in request order. chunkSize 1 (or less) sends one
// trace per message in the `trace` field, the form servers without chunks understand. The
// suite id travels with the first message only; later messages keep it. Sending and
// receiving run concurrently, so a long input does not deadlock on flow control.
func (c *Client) StreamGradeTracesChunked(ctx context.Context, suiteID string, traces []*pb.Trace, chunkSize int) ([]*pb.TraceOutcome, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.stub.StreamGradeTraces(ctx)
	if err != nil {
		return nil, err
	}
	if chunkSize < 1 {
		chunkSize = 1
	}
	sendErr := make(chan error, 1)
	go func() {
		for start := 0; start < len(traces); start += chunkSize {
			end := min(start+chunkSize, len(traces))
			req := &pb.StreamGradeTracesRequest{}
			if chunkSize == 1 {
				req.Trace = traces[start]
			} else {
				req.Traces = traces[start:end]
			}
			if start == 0 {
				req.SuiteRef = &pb.StreamGradeTracesRequest_SuiteId{SuiteId: suiteID}
			}
			if err := stream.Send(req); err != nil {
				// io.EOF means the server ended the call; Recv reports the real status.
				if !errors.Is(err, io.EOF) {
					sendErr <- err
					return
				}
				break
			}
		}
		sendErr <- stream.CloseSend()
	}()
	outcomes := make([]*pb.TraceOutcome, 0, len(traces))
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(resp.GetOutcomes()) > 0 {
			outcomes = append(outcomes, resp.GetOutcomes()...)
		} else {
			outcomes = append(outcomes, resp.GetOutcome())
		}
	}
	if err := <-sendErr; err != nil {
		return nil, err
	}
	if len(outcomes) != len(traces) {
		return nil, fmt.Errorf("trajgrade: %d outcomes for %d traces", len(outcomes), len(traces))
	}
	return outcomes, nil
}

// WatchResults follows live grading (docs/live-grading.md): one response per result of a run
// that the server's OTLP receiver assembled and graded, from the moment of the call on.
// request holds the filters (suite_ids, verdicts, service_names; an empty list matches all;
// nil matches everything). Range over the returned sequence:
//
//	for res, err := range client.WatchResults(ctx, &pb.WatchResultsRequest{Verdicts: ...}) {
//		if err != nil { ... } // the call's gRPC status; the sequence ends after it
//	}
//
// The call starts when the range begins and lasts until ctx is done, the loop breaks, or the
// server ends it: a gRPC status error such as RESOURCE_EXHAUSTED (WATCHER_TOO_SLOW: the caller
// fell behind the server's queue), UNAVAILABLE (SHUTTING_DOWN) or FAILED_PRECONDITION
// (LIVE_GRADING_OFF). Give ctx no deadline unless the watch should stop then.
func (c *Client) WatchResults(ctx context.Context, request *pb.WatchResultsRequest) iter.Seq2[*pb.WatchResultsResponse, error] {
	if request == nil {
		request = &pb.WatchResultsRequest{}
	}
	return func(yield func(*pb.WatchResultsResponse, error) bool) {
		// Breaking out of the loop cancels the call, so the server drops the watcher.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.stub.WatchResults(ctx, request)
		if err != nil {
			yield(nil, err)
			return
		}
		for {
			response, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(response, nil) {
				return
			}
		}
	}
}
