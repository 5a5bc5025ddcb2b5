package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/webhook"
)

// The evaluation bounds' flags are read and checked before the webhook starts: none may turn a
// bound off.
func TestEvaluationBoundsFlags(t *testing.T) {
	tests := map[string]struct {
		bounds    webhook.Bounds // as the duration and int flags set them
		waiting   int            // --max-waiting-evaluations
		heapLimit string         // --evaluation-heap-limit
		wantHeap  uint64         // the heap limit read, when it is accepted
		wantWait  int            // Bounds.MaxWaiting, when it is accepted
		wantErr   string         // part of the error; "" when accepted
	}{
		"the defaults": {
			bounds: webhook.Bounds{Timeout: 4 * time.Second, MaxConcurrent: 8}, waiting: 16, heapLimit: "384Mi", wantHeap: 384 << 20, wantWait: 16,
		},
		"no review waits": {
			bounds: webhook.Bounds{Timeout: 4 * time.Second, MaxConcurrent: 8}, heapLimit: "384Mi", wantHeap: 384 << 20, wantWait: -1,
		},
		"a negative number of waiting reviews": {
			bounds: webhook.Bounds{Timeout: time.Second, MaxConcurrent: 8}, waiting: -1, heapLimit: "384Mi", wantErr: "--max-waiting-evaluations -1 must not be negative",
		},
		"a heap limit in bytes": {
			bounds: webhook.Bounds{Timeout: time.Second, MaxConcurrent: 1}, waiting: 2, heapLimit: "1000000", wantHeap: 1000000, wantWait: 2,
		},
		"no deadline": {
			bounds: webhook.Bounds{MaxConcurrent: 8}, heapLimit: "384Mi", wantErr: "--evaluation-timeout 0s must be positive",
		},
		"no concurrent evaluation": {
			bounds: webhook.Bounds{Timeout: time.Second}, heapLimit: "384Mi", wantErr: "--max-concurrent-evaluations 0 must be positive",
		},
		"an unreadable heap limit": {
			bounds: webhook.Bounds{Timeout: time.Second, MaxConcurrent: 8}, heapLimit: "lots", wantErr: `--evaluation-heap-limit "lots"`,
		},
		"a heap limit of 0": {
			bounds: webhook.Bounds{Timeout: time.Second, MaxConcurrent: 8}, heapLimit: "0", wantErr: "--evaluation-heap-limit 0 must be positive",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := tc.bounds
			err := evaluationBounds(&b, tc.waiting, tc.heapLimit)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr == "" && b.HeapLimit != tc.wantHeap:
				t.Errorf("heap limit %d, want %d", b.HeapLimit, tc.wantHeap)
			case tc.wantErr == "" && b.MaxWaiting != tc.wantWait:
				t.Errorf("waiting reviews %d, want %d", b.MaxWaiting, tc.wantWait)
			}
		})
	}
}
