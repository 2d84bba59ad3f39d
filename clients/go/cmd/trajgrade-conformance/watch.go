package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	pb "trajgrade/clients/go/gen/trajgrade/v1"
	"trajgrade/clients/go/trajgrade"
)

// repeated collects every value of a flag given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// bearer sends a bearer token on every call; the server's --auth-token checks it. Plaintext is
// allowed because the conformance tests run on loopback and unix sockets.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func watch(args []string) error {
	flags := flag.NewFlagSet("watch", flag.ContinueOnError)
	address := flags.String("addr", "", "server address: host:port or unix:/path")
	count := flags.Int("count", 0, "results to print before exiting")
	token := flags.String("token", "", "bearer token")
	timeout := flags.Float64("timeout-s", 120, "give up after this many seconds")
	var suites, verdicts, services repeated
	flags.Var(&suites, "suite", "only results of this suite id (repeatable)")
	flags.Var(&verdicts, "verdict", "only results with this verdict, e.g. VERDICT_FAIL (repeatable)")
	flags.Var(&services, "service", "only runs of this service.name (repeatable)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *address == "" || *count < 1 || flags.NArg() != 0 {
		return errors.New("usage: trajgrade-conformance watch --addr ADDR [--suite ID]... [--verdict V]... [--service S]... --count N [--token T] [--timeout-s S]")
	}
	request := &pb.WatchResultsRequest{SuiteIds: suites, ServiceNames: services}
	for _, name := range verdicts {
		value, ok := pb.Verdict_value[name]
		if !ok {
			return fmt.Errorf("unknown verdict %q", name)
		}
		request.Verdicts = append(request.Verdicts, pb.Verdict(value))
	}

	var options []grpc.DialOption
	if *token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer(*token)))
	}
	client, err := trajgrade.Dial(*address, options...)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*timeout*float64(time.Second)))
	defer cancel()

	out := json.NewEncoder(os.Stdout)
	index := 0
	for response, err := range client.WatchResults(ctx, request) {
		if err != nil {
			return fmt.Errorf("WatchResults after %d results: %w", index, err)
		}
		text, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(response)
		if err != nil {
			return err
		}
		at := index
		if err := out.Encode(line{RPC: "WatchResults", Index: &at, Response: text}); err != nil {
			return err
		}
		index++
		if index == *count {
			return nil
		}
	}
	return fmt.Errorf("WatchResults ended after %d of %d results", index, *count)
}
