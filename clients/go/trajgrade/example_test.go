package trajgrade_test

import (
	"context"
	"fmt"
	"log"

	pb "trajgrade/clients/go/gen/trajgrade/v1"
	"trajgrade/clients/go/trajgrade"
)

// Follow the failing results of live grading until the server ends the watch (compiled by
// `go vet` and `go test`, not run: it needs a server with an OTLP receiver).
func ExampleClient_WatchResults() {
	client, err := trajgrade.Dial("127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	request := &pb.WatchResultsRequest{Verdicts: []pb.Verdict{pb.Verdict_VERDICT_FAIL}}
	for res, err := range client.WatchResults(ctx, request) {
		if err != nil {
			log.Print(err) // the call's gRPC status, e.g. RESOURCE_EXHAUSTED: fell behind
			return
		}
		fmt.Println(res.GetTraceId(), res.GetSuiteId(), res.GetResult().GetVerdict())
	}
}
