package cli

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

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

// The webhook and the controller ask the API server for uncompressed responses, as the control
// plane's own components do; the CLI's commands, run from afar, still ask for gzip. Seen on the
// wire: the Accept-Encoding of a request each makes.
func TestComponentsAskForUncompressedResponses(t *testing.T) {
	encodings := make(chan string, 1)
	// TLS, as every API server: client-go serves a plain-HTTP server with Go's default
	// transport, which asks for gzip whatever the config says.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encodings <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"c": {Server: srv.URL,
			CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "c",
	}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		load     func(string) (*rest.Config, error)
		wantGzip bool
	}{
		"the webhook and the controller": {load: componentRESTConfig},
		"the CLI":                        {load: restConfig, wantGzip: true},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := tc.load(kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Discovery().ServerVersion(); err != nil {
				t.Fatal(err)
			}
			if got := <-encodings; strings.Contains(got, "gzip") != tc.wantGzip {
				t.Errorf("Accept-Encoding %q, want gzip asked for: %v", got, tc.wantGzip)
			}
		})
	}
}
