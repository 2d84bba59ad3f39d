// live_sender: bench_live's paced latency sender written with the OpenTelemetry Go SDK and its
// OTLP/gRPC exporter, so that the load generator is not what saturates the machine (the
// Python SDK's sender costs about 1.1 ms of CPU per run).
//
// It makes `-rate` agent runs a second for `-seconds` over `-workers` goroutines, each run an
// `invoke_agent` root with four `execute_tool` children (the attributes of bench_live.py's
// trace_steps), and exports each run's five spans in one request as soon as its root ends,
// waiting for the answer (as the SDK's exporter does). It prints "ready", waits for a line on
// stdin, streams, then prints one line per run: trace id, root end (ns since the epoch), and
// when its export began; and a last line "achieved <runs/s> <failed exports> <CPU seconds of
// the process over the stream>".
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

var tools = []string{"get_weather", "get_time", "get_weather", "get_time"}

// ended collects one worker's ended spans until they are exported.
type ended struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (e *ended) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e *ended) OnEnd(s sdktrace.ReadOnlySpan) {
	e.mu.Lock()
	e.spans = append(e.spans, s)
	e.mu.Unlock()
}
func (e *ended) Shutdown(context.Context) error   { return nil }
func (e *ended) ForceFlush(context.Context) error { return nil }

func (e *ended) take() []sdktrace.ReadOnlySpan {
	e.mu.Lock()
	defer e.mu.Unlock()
	spans := e.spans
	e.spans = nil
	return spans
}

type sent struct {
	traceID string
	end     int64
	began   int64
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}

func run(tracer trace.Tracer) {
	ctx, root := tracer.Start(context.Background(), "invoke_agent bench_agent",
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "invoke_agent"),
			attribute.String("gen_ai.agent.name", "bench_agent"),
		))
	for i, tool := range tools {
		_, span := tracer.Start(ctx, "execute_tool "+tool, trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", tool),
			attribute.String("gen_ai.tool.call.id", fmt.Sprintf("call_%d", i)),
			attribute.String("gen_ai.tool.call.arguments", `{"city": "Paris"}`),
			attribute.String("gen_ai.tool.call.result", "ok"),
		))
		span.End()
	}
	root.End()
}

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:4317", "the OTLP/gRPC receiver")
	rate := flag.Float64("rate", 1000, "runs a second, over all workers")
	seconds := flag.Float64("seconds", 5, "how long to send")
	workers := flag.Int("workers", 4, "goroutines, each exporting one run at a time")
	flag.Parse()

	ctx := context.Background()
	exporter, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(*endpoint),
		otlptracegrpc.WithInsecure(), otlptracegrpc.WithTimeout(30*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "exporter:", err)
		os.Exit(1)
	}
	// The SDK's default resource (telemetry.sdk.*), named as bench_live.py's Python senders.
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(attribute.String("service.name", "bench-agent")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "resource:", err)
		os.Exit(1)
	}

	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(1)
	}
	cpu := cpuSeconds()
	results := make([][]sent, *workers)
	failed := make([]int, *workers)
	var wg sync.WaitGroup
	start := time.Now()
	perWorker := *rate / float64(*workers)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			collected := &ended{}
			provider := sdktrace.NewTracerProvider(sdktrace.WithResource(res),
				sdktrace.WithSpanProcessor(collected))
			tracer := provider.Tracer("bench")
			// Workers start a fraction of a period apart, so their runs interleave.
			offset := time.Duration(float64(w) / *rate * float64(time.Second))
			done := 0
			for {
				elapsed := time.Since(start) - offset
				if elapsed.Seconds() >= *seconds {
					return
				}
				due := int(elapsed.Seconds()*perWorker) + 1 - done
				for ; due > 0; due-- {
					run(tracer)
					spans := collected.take()
					began := time.Now().UnixNano()
					if err := exporter.ExportSpans(ctx, spans); err != nil {
						failed[w]++
					}
					for _, s := range spans {
						if !s.Parent().IsValid() {
							results[w] = append(results[w], sent{
								s.SpanContext().TraceID().String(), s.EndTime().UnixNano(), began})
						}
					}
					done++
				}
				next := start.Add(offset + time.Duration(float64(done)/perWorker*float64(time.Second)))
				if pause := time.Until(next); pause > 0 {
					time.Sleep(pause)
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	cpu = cpuSeconds() - cpu
	_ = exporter.Shutdown(ctx)
	out := bufio.NewWriter(os.Stdout)
	runs, errors := 0, 0
	for w := range results {
		errors += failed[w]
		for _, r := range results[w] {
			fmt.Fprintf(out, "%s %d %d\n", r.traceID, r.end, r.began)
			runs++
		}
	}
	fmt.Fprintf(out, "achieved %f %d %f\n", float64(runs)/elapsed, errors, cpu)
	out.Flush()
}
