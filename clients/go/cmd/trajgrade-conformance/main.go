// Command trajgrade-conformance grades a test vector against a trajgrade server through every
// grading RPC and prints one JSON line per outcome, for comparison with in-process results.
//
//	trajgrade-conformance <address> <vectors.json>
//
// vectors.json is {"suite": Suite, "traces": [Trace, ...]} in the protobuf JSON mapping.
// Output lines: {"rpc":"RegisterSuite","suite_id":...}, then
// {"rpc":"GradeTrace"|"BatchGradeTraces"|"StreamGradeTraces"|"StreamGradeTracesOnePerMessage","index":i,"outcome":TraceOutcome}.
// StreamGradeTraces sends chunks of 4 traces per message (the last one partial);
// StreamGradeTracesOnePerMessage sends the single-trace form. Each ImportSuiteRequest of the
// optional "imports" list is sent as it stands and printed as
// {"rpc":"ImportSuite","index":i,"response":ImportSuiteResponse}.
//
// The watch mode follows live grading and prints the first N results, then exits:
//
//	trajgrade-conformance watch --addr ADDR [--suite ID]... [--verdict VERDICT_...]... [--service NAME]... --count N [--token T] [--timeout-s S]
//
// Output lines: {"rpc":"WatchResults","index":i,"response":WatchResultsResponse}. --token sends
// "authorization: Bearer T" on the call; --timeout-s (default 120) bounds the whole watch.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "trajgrade/clients/go/gen/trajgrade/v1"
	"trajgrade/clients/go/trajgrade"
)

type vectors struct {
	Suite   json.RawMessage   `json:"suite"`
	Traces  []json.RawMessage `json:"traces"`
	Imports []json.RawMessage `json:"imports"`
}

type line struct {
	RPC      string          `json:"rpc"`
	SuiteID  string          `json:"suite_id,omitempty"`
	Index    *int            `json:"index,omitempty"`
	Outcome  json.RawMessage `json:"outcome,omitempty"`
	Response json.RawMessage `json:"response,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "watch" {
		if err := watch(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "trajgrade-conformance watch:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: trajgrade-conformance <address> <vectors.json>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "trajgrade-conformance:", err)
		os.Exit(1)
	}
}

func run(address, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var vec vectors
	if err := json.Unmarshal(raw, &vec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	suite := &pb.Suite{}
	if err := protojson.Unmarshal(vec.Suite, suite); err != nil {
		return fmt.Errorf("suite: %w", err)
	}
	traces := make([]*pb.Trace, len(vec.Traces))
	for i, t := range vec.Traces {
		traces[i] = &pb.Trace{}
		if err := protojson.Unmarshal(t, traces[i]); err != nil {
			return fmt.Errorf("traces[%d]: %w", i, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := trajgrade.Dial(address)
	if err != nil {
		return err
	}
	defer client.Close()

	suiteID, err := client.RegisterSuite(ctx, suite)
	if err != nil {
		return fmt.Errorf("RegisterSuite: %w", err)
	}
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(line{RPC: "RegisterSuite", SuiteID: suiteID}); err != nil {
		return err
	}
	emit := func(rpc string, outcomes []*pb.TraceOutcome) error {
		for i, o := range outcomes {
			text, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(o)
			if err != nil {
				return err
			}
			index := i
			if err := out.Encode(line{RPC: rpc, Index: &index, Outcome: text}); err != nil {
				return err
			}
		}
		return nil
	}

	single := make([]*pb.TraceOutcome, len(traces))
	for i, t := range traces {
		result, err := client.GradeTrace(ctx, suiteID, t)
		if err != nil {
			return fmt.Errorf("GradeTrace(traces[%d]): %w", i, err)
		}
		single[i] = &pb.TraceOutcome{Outcome: &pb.TraceOutcome_Result{Result: result}}
	}
	if err := emit("GradeTrace", single); err != nil {
		return err
	}
	batch, err := client.BatchGradeTraces(ctx, suiteID, traces)
	if err != nil {
		return fmt.Errorf("BatchGradeTraces: %w", err)
	}
	if err := emit("BatchGradeTraces", batch); err != nil {
		return err
	}
	stream, err := client.StreamGradeTracesChunked(ctx, suiteID, traces, conformanceChunk)
	if err != nil {
		return fmt.Errorf("StreamGradeTraces: %w", err)
	}
	if err := emit("StreamGradeTraces", stream); err != nil {
		return err
	}
	single, err = client.StreamGradeTracesChunked(ctx, suiteID, traces, 1)
	if err != nil {
		return fmt.Errorf("StreamGradeTraces (one per message): %w", err)
	}
	if err := emit("StreamGradeTracesOnePerMessage", single); err != nil {
		return err
	}
	for i, raw := range vec.Imports {
		request := &pb.ImportSuiteRequest{}
		if err := protojson.Unmarshal(raw, request); err != nil {
			return fmt.Errorf("imports[%d]: %w", i, err)
		}
		response, err := client.ImportSuite(ctx, request.GetFormat(), request.GetText(), request.GetSkipUnsupported(), request.GetName())
		if err != nil {
			return fmt.Errorf("ImportSuite(imports[%d]): %w", i, err)
		}
		text, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(response)
		if err != nil {
			return err
		}
		index := i
		if err := out.Encode(line{RPC: "ImportSuite", Index: &index, Response: text}); err != nil {
			return err
		}
	}
	return nil
}

// conformanceChunk is small so that the vectors span several chunk messages.
const conformanceChunk = 4
