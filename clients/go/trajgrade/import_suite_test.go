package trajgrade

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "trajgrade/clients/go/gen/trajgrade/v1"
)

// TestImportSuiteLive runs against the live server that tests/suite_formats/test_go_client.py
// starts (TRAJGRADE_TARGET); run alone it fails, it does not skip.
func TestImportSuiteLive(t *testing.T) {
	target := os.Getenv("TRAJGRADE_TARGET")
	if target == "" {
		t.Fatal("TRAJGRADE_TARGET is not set: run through tests/suite_formats/test_go_client.py")
	}
	client, err := Dial(target)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	orbit := `{"tool_call_args": [{"tool": "issue_refund", "match": {"mode": "subset", "args": {"amount_cents": 5000}}}]}`
	imported, err := client.ImportSuite(ctx, "", orbit, false, "")
	if err != nil {
		t.Fatal(err)
	}
	if imported.GetFormat() != "orbit" || !strings.HasPrefix(imported.GetSuiteId(), "s1-") {
		t.Fatalf("unexpected response %v", imported)
	}
	refund := func(amount string) *pb.Trace {
		return &pb.Trace{Calls: []*pb.ToolCall{{Name: "issue_refund", ArgumentsJson: proto(`{"amount_cents":` + amount + `}`)}}}
	}
	for amount, want := range map[string]pb.Verdict{"5000": pb.Verdict_VERDICT_PASS, "500": pb.Verdict_VERDICT_FAIL} {
		result, err := client.GradeTrace(ctx, imported.GetSuiteId(), refund(amount))
		if err != nil {
			t.Fatal(err)
		}
		if result.GetVerdict() != want || result.GetResults()[0].GetName() != "tool_call_args:issue_refund" {
			t.Fatalf("amount %s: %v", amount, result)
		}
	}

	promptfoo := "- description: t\n  assert:\n    - type: javascript\n      value: 'true'\n    - type: trajectory:tool-used\n      value: issue_refund\n"
	_, err = client.ImportSuite(ctx, "promptfoo", promptfoo, false, "")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "javascript") {
		t.Fatalf("want InvalidArgument naming javascript, got %v", err)
	}
	skipped, err := client.ImportSuite(ctx, "promptfoo", promptfoo, true, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped.GetUnsupported()) != 1 || len(skipped.GetSuite().GetAssertions()) != 1 {
		t.Fatalf("want one assertion and one listed part, got %v", skipped)
	}
}

func proto(s string) *string { return &s }
