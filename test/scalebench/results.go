package scalebench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Results are every size the benchmark measured, kept in one JSON file that each run updates.
type Results struct {
	Settings []string `json:"settings"` // how the clusters were set up, one line each, stated beside the results
	Runs     []Run    `json:"runs"`     // sorted by Nodes
}

// Run is what one cluster size measured.
type Run struct {
	Nodes           int     `json:"nodes"`
	Pods            int     `json:"pods"`            // every pod in the cluster once it is populated
	DaemonSets      int     `json:"daemonSets"`      // DaemonSets with pods on every node
	Date            string  `json:"date"`            // YYYY-MM-DD
	PopulateSeconds float64 `json:"populateSeconds"` // cluster start and occupancy, not measured further
	Rollout         Rollout `json:"rollout"`
	Webhook         Webhook `json:"webhook"`
	Audit           Audit   `json:"audit"`
	Plans           []Plan  `json:"plans"`
	// Before holds the same measurements of a baseline binary, when the run compared two builds.
	Before *Run `json:"before,omitempty"`
}

// Rollout is one image change rolled out over every node, by the built-in DaemonSet controller
// and by daemonguard's, under the same unavailability budget.
type Rollout struct {
	BuiltinSeconds       float64 `json:"builtinSeconds"` // built-in RollingUpdate, same budget
	ManagedSeconds       float64 `json:"managedSeconds"`
	Budget               string  `json:"budget"` // e.g. "10%"
	ControllerPeakRSSMiB float64 `json:"controllerPeakRSSMiB"`
	ControllerCPUSeconds float64 `json:"controllerCPUSeconds"` // from start to the managed rollout's end
	// Builtin and Managed are what each rollout cost the control plane besides its time.
	Builtin RolloutCost `json:"builtin"`
	Managed RolloutCost `json:"managed"`
}

// RolloutCost is the control plane's work during one rollout: the DaemonSet controller's syncs
// (each a pass over the DaemonSet's nodes and pods) and the writes of DaemonSets the API server
// answered, every client's.
type RolloutCost struct {
	DaemonSetSyncs       int     `json:"daemonSetSyncs"`       // kube-controller-manager's DaemonSet syncs, of every DaemonSet
	DaemonSetSyncSeconds float64 `json:"daemonSetSyncSeconds"` // their time in all
	DaemonSetWrites      int     `json:"daemonSetWrites"`      // PATCH and UPDATE of DaemonSets, status included
	Conflicts            int     `json:"conflicts"`            // writes refused for a stale resourceVersion (409)
	// CPUSeconds is the CPU time each process of the machine's cluster and daemonguard used
	// during the rollout, by process name: on 2 cores shared by all, one's work slows the others.
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
	// ReadyP50Seconds and ReadyP99Seconds are how long the rollout's new pods took from their
	// scheduling to Ready (readyAfterScheduled): kwok's ready delay while kwok keeps up.
	ReadyP50Seconds float64 `json:"readyP50Seconds,omitempty"`
	ReadyP99Seconds float64 `json:"readyP99Seconds,omitempty"`
}

// Webhook is the admission webhook on the populated cluster: its start, its memory, its review
// latency, and a storm of nodes joining at once, whose DaemonSet pods it admits.
type Webhook struct {
	StartupSeconds float64 `json:"startupSeconds"` // process start to first ready answer (informers synced)
	RSSMiB         float64 `json:"rssMiB"`         // after the review and join measurements
	PeakRSSMiB     float64 `json:"peakRSSMiB"`
	ReviewP50Ms    float64 `json:"reviewP50Ms"`
	ReviewP99Ms    float64 `json:"reviewP99Ms"`
	Reviews        int     `json:"reviews"`
	JoinNodes      int     `json:"joinNodes"`
	JoinPods       int     `json:"joinPods"`    // pods the DaemonSets created on the joined nodes
	JoinFailed     int     `json:"joinFailed"`  // failed or timed-out pod creations
	JoinSeconds    float64 `json:"joinSeconds"` // nodes created → every DaemonSet available on them
}

// Audit is one audit of the cluster's DaemonSets by a webhook replica, and what it wrote.
type Audit struct {
	DaemonSets         int     `json:"daemonSets"`
	Seconds            float64 `json:"seconds"`
	PeakRSSMiB         float64 `json:"peakRSSMiB"` // the webhook replica that ran it
	Events             int     `json:"events"`
	Reports            int     `json:"reports"`
	LargestReportBytes int     `json:"largestReportBytes"` // against etcd's 1.5 MiB object limit
}

// Plan is one `daemonguard rollout plan` of an image change, end to end.
type Plan struct {
	DaemonSet   string  `json:"daemonSet"` // "rolling-update" or "managed"
	WallSeconds float64 `json:"wallSeconds"`
	Requests    int     `json:"requests"`
	PeakRSSMiB  float64 `json:"peakRSSMiB"`
	// CPUSeconds is the plan process's CPU time (user and system), APIServerCPUSeconds the API
	// server's while the plan ran: which side its wall time is spent on.
	CPUSeconds          float64 `json:"cpuSeconds,omitempty"`
	APIServerCPUSeconds float64 `json:"apiServerCPUSeconds,omitempty"`
}

// Load reads the results file at path. A missing file is empty Results and no error, so that the
// first run of the benchmark starts the file; a file that is not the results' JSON is an error
// rather than a reason to start over, since saving over it would lose the sizes measured before.
// The runs come back sorted by Nodes even if the file was edited by hand.
func Load(path string) (Results, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Results{}, nil
	}
	if err != nil {
		return Results{}, err
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		return Results{}, fmt.Errorf("read the scale benchmark results %s: %w", path, err)
	}
	sortRuns(r.Runs)
	return r, nil
}

// Put records run, replacing the run of the same cluster size: each benchmark run measures one
// size at a time and the file keeps the latest measurement of every size. The runs stay sorted by
// Nodes, the order of the tables' columns and of the plot's x axis.
func (r *Results) Put(run Run) {
	if i := slices.IndexFunc(r.Runs, func(have Run) bool { return have.Nodes == run.Nodes }); i >= 0 {
		r.Runs[i] = run
		return
	}
	r.Runs = append(r.Runs, run)
	sortRuns(r.Runs)
}

// Save writes the results to path as indented JSON ending in a newline, so that the file reads
// and diffs well in review. It writes a temporary file beside path and renames it over path, so
// that a benchmark interrupted while saving leaves the previous results whole rather than a
// truncated file that Load refuses.
func (r Results) Save(path string) (err error) {
	if r.Settings == nil {
		r.Settings = []string{} // [] rather than null in the file
	}
	if r.Runs == nil {
		r.Runs = []Run{}
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil { // CreateTemp makes it 0600; the results are for everyone
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// sortRuns orders runs by cluster size.
func sortRuns(runs []Run) {
	slices.SortStableFunc(runs, func(a, b Run) int { return a.Nodes - b.Nodes })
}
