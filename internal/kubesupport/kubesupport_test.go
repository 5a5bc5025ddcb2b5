package kubesupport_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"

	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// server is a discovery client of a server of gitVersion serving MutatingAdmissionPolicy in
// mapVersions.
func server(gitVersion string, mapVersions ...string) *fakediscovery.FakeDiscovery {
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}, FakedServerVersion: &version.Info{GitVersion: gitVersion}}
	d.Resources = append(d.Resources, &metav1.APIResourceList{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "validatingadmissionpolicies"}, {Name: "mutatingwebhookconfigurations"},
	}})
	for _, v := range mapVersions {
		gv := "admissionregistration.k8s.io/" + v
		list := &metav1.APIResourceList{GroupVersion: gv}
		for _, l := range d.Resources {
			if l.GroupVersion == gv {
				list = l
			}
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: "mutatingadmissionpolicies"})
		if len(list.APIResources) == 1 {
			d.Resources = append(d.Resources, list)
		}
	}
	return d
}

func TestRead(t *testing.T) {
	for _, c := range []struct {
		name        string
		discovery   *fakediscovery.FakeDiscovery
		minor       int
		unsupported string // in Check's error; "" when supported
		inProcess   string // in InProcessInjection's error; "" when it can
	}{
		{"the oldest supported minor, before MutatingAdmissionPolicy", server("v1.33.13"), 33, "", "this server (v1.33.13) does not"},
		{"1.34 with the beta API turned on is told that v1beta1 is not generated", server("v1.34.4-eks-4a2d1c", "v1beta1"), 34, "", "serves v1beta1, which daemonguard does not generate"},
		{"1.36 serves v1", server("v1.36.3", "v1"), 36, "", ""},
		{"the newest supported minor", server("v1.37.2", "v1"), 37, "", ""},
		{"a managed version string with a plus", server("v1.35.1-gke.100+abc"), 35, "", "keep"},
		{"older than the range", server("v1.32.9"), 32, "older than daemonguard supports (1.33 to 1.37)", "does not"},
		{"newer than the range", server("v1.38.0", "v1"), 38, "newer than daemonguard has been tested with", ""},
		{"a version without a minor", server("master"), 0, "cannot read a Kubernetes 1.x minor", "does not"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := kubesupport.Read(context.Background(), c.discovery)
			if err != nil {
				t.Fatal(err)
			}
			if s.Minor != c.minor {
				t.Errorf("minor %d, want %d", s.Minor, c.minor)
			}
			checkErr := s.Check()
			switch {
			case c.unsupported == "" && checkErr != nil:
				t.Errorf("Check: %v, want supported", checkErr)
			case c.unsupported != "" && (checkErr == nil || !errors.Is(checkErr, kubesupport.ErrUnsupported) || !strings.Contains(checkErr.Error(), c.unsupported)):
				t.Errorf("Check: %v, want ErrUnsupported saying %q", checkErr, c.unsupported)
			}
			injectErr := s.InProcessInjection()
			switch {
			case c.inProcess == "" && injectErr != nil:
				t.Errorf("InProcessInjection: %v, want possible", injectErr)
			case c.inProcess == "":
			case injectErr == nil:
				t.Errorf("InProcessInjection possible, want an error saying %q", c.inProcess)
			case c.inProcess == "keep":
				// Every refusal names the alternative.
			case !strings.Contains(injectErr.Error(), c.inProcess):
				t.Errorf("InProcessInjection: %v, want it to say %q", injectErr, c.inProcess)
			}
			if injectErr != nil && (!strings.Contains(injectErr.Error(), "webhook.inProcessInjection: auto or false") || !strings.Contains(injectErr.Error(), "1.36")) {
				t.Errorf("InProcessInjection: %v, want the version that has it and the alternative", injectErr)
			}
		})
	}
}

// TestReadFails: an unreachable or refusing server is an error, never a guess.
func TestReadFails(t *testing.T) {
	d := server("v1.37.2", "v1")
	d.PrependReactor("get", "version", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := kubesupport.Read(context.Background(), d); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Read: %v, want the server's error", err)
	}
	d = server("v1.37.2", "v1")
	d.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	if _, err := kubesupport.Read(context.Background(), d); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("Read: %v, want the discovery error", err)
	}
}

// TestRangeIsTested: the supported range's ends are the control planes the tests run on.
func TestRangeIsTested(t *testing.T) {
	for v, minor := range map[string]int{toolbin.KubernetesVersion: kubesupport.NewestMinor, toolbin.OldestKubernetesVersion: kubesupport.OldestMinor} {
		if got := kubesupport.FromVersion(&version.Info{GitVersion: v}).Minor; got != minor {
			t.Errorf("the test control plane %s is minor %d, the supported range ends at %d", v, got, minor)
		}
	}
}

// TestAnnounce: a process started against a server outside the range says so in its log, with the
// version; one inside logs the version only.
func TestAnnounce(t *testing.T) {
	for _, c := range []struct {
		gitVersion string
		wantError  string
	}{
		{"v1.32.4", "older than daemonguard supports"},
		{"v1.35.0", ""},
	} {
		t.Run(c.gitVersion, func(t *testing.T) {
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Path == "/version" {
					_ = json.NewEncoder(w).Encode(version.Info{GitVersion: c.gitVersion})
					return
				}
				http.NotFound(w, r)
			}))
			defer api.Close()
			var logged []string
			log := funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
			s, err := kubesupport.Announce(context.Background(), &rest.Config{Host: api.URL}, log)
			if err != nil {
				t.Fatal(err)
			}
			if s.Version != c.gitVersion || s.MutatingAdmissionPolicyV1 {
				t.Errorf("read %+v", s)
			}
			all := strings.Join(logged, "\n")
			if !strings.Contains(all, c.gitVersion) {
				t.Errorf("the log does not name the version: %s", all)
			}
			if got := strings.Contains(all, "outside the supported range"); got != (c.wantError != "") || !strings.Contains(all, c.wantError) {
				t.Errorf("log %s, want an error saying %q", all, c.wantError)
			}
		})
	}
}
