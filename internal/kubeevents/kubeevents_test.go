package kubeevents

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	if s.arrived != nil {
		s.arrived <- struct{}{}
	}
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
	var mu sync.Mutex
	var errorLogs []string
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, `"error"`) || strings.Contains(args, "Unable") {
			mu.Lock()
			errorLogs = append(errorLogs, prefix+" "+args)
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 10})

	b, err := Start(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}, log)
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

// A burst of Events larger than the API allows at once is written whole: each Event waits for
// its turn before its write begins, so none spends its write timeout waiting (client-go gives an
// Event up after twelve timeouts), and the pace is this package's, not the config's QPS.
func TestBurstOfEventsIsWrittenWhole(t *testing.T) {
	api := &slowEventsAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	const burst = 3 * writeBurst
	// QPS 1 would write the burst in minutes and time most writes out.
	b, err := Start(&rest.Config{Host: srv.URL, QPS: 1, Burst: 1, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	recorder := b.NewRecorder("test")
	start := time.Now()
	for i := range burst {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ds-%d", i), Namespace: "ns", UID: types.UID(fmt.Sprint(i))}}
		recorder.Eventf(ds, nil, corev1.EventTypeWarning, "PolicyViolation", "Audit", "finding %d", i)
	}
	// At writesPerSecond the burst takes (burst-writeBurst)/writesPerSecond = 5 s; the deadline
	// leaves room for a slow machine, and is far below what QPS 1 or timed-out retries take.
	deadline := time.Now().Add(30 * time.Second)
	for {
		api.mu.Lock()
		created, aborted := len(api.created), api.aborted
		api.mu.Unlock()
		if created == burst {
			if aborted != 0 {
				t.Errorf("%d writes aborted", aborted)
			}
			if took, least := time.Since(start), time.Duration(burst-writeBurst)*time.Second/writesPerSecond; took < least*9/10 {
				t.Errorf("%d Events written in %s, faster than %d per second allows (%s)", burst, took, writesPerSecond, least)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Events written after 30 s, %d writes aborted", created, burst, aborted)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
