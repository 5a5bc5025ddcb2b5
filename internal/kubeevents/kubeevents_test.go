package kubeevents

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// slowEventsAPI answers Event creations after latency, and records how each one ended.
type slowEventsAPI struct {
	latency time.Duration
	arrived chan struct{}
	mu      sync.Mutex
	created []string // notes of the Events answered 201
	aborted int      // writes the client gave up on
}

func (s *slowEventsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/apis/events.k8s.io/v1/namespaces/") {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.arrived <- struct{}{}
	select {
	case <-r.Context().Done():
		s.mu.Lock()
		s.aborted++
		s.mu.Unlock()
		return
	case <-time.After(s.latency):
	}
	var e struct {
		Note string `json:"note"`
	}
	_ = json.Unmarshal(body, &e)
	s.mu.Lock()
	s.created = append(s.created, e.Note)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// An Event being written when the component stops is written, not aborted, and Stop returns
// after it; nothing about writing Events is logged as an error (client-go's "Unable to write
// event ... context canceled" was, on stderr, when the broadcaster's context was cancelled).
func TestStopLetsTheWriteUnderWayFinish(t *testing.T) {
	api := &slowEventsAPI{latency: 300 * time.Millisecond, arrived: make(chan struct{}, 1)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errorLogs []string
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, `"error"`) || strings.Contains(args, "Unable") {
			mu.Lock()
			errorLogs = append(errorLogs, prefix+" "+args)
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 10})

	b, err := Start(client, log)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "policy", Namespace: "ns", UID: "u1"}}
	b.NewRecorder("test").Eventf(cm, nil, corev1.EventTypeNormal, "Loaded", "Load", "policies loaded")
	<-api.arrived // the write is under way
	b.Stop()

	api.mu.Lock()
	created, aborted := api.created, api.aborted
	api.mu.Unlock()
	if len(created) != 1 || created[0] != "policies loaded" || aborted != 0 {
		t.Errorf("when Stop returned: Events created %q, writes aborted %d; want the one Event created", created, aborted)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errorLogs) > 0 {
		t.Errorf("errors logged while stopping: %q", errorLogs)
	}
}
