package scalebench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/test/golden"
)

// fixture is a fixed set of results: three sizes, the smallest compared with a baseline build,
// the largest without a managed plan or a join storm measured.
func fixture() Results {
	run := func(nodes int, scale float64) Run {
		return Run{
			Nodes: nodes, Pods: nodes*30 + 100, DaemonSets: 3, Date: "2025-06-01", PopulateSeconds: 40 * scale,
			Rollout: Rollout{BuiltinSeconds: 29.2 * scale, ManagedSeconds: 29.5 * scale, Budget: "10%", ControllerPeakRSSMiB: 75 * scale, ControllerCPUSeconds: 12.34 * scale,
				Builtin: RolloutCost{DaemonSetSyncs: int(800 * scale), DaemonSetSyncSeconds: 20.5 * scale, DaemonSetWrites: int(900 * scale), Conflicts: 3,
					CPUSeconds: map[string]float64{"kube-controller": 30 * scale, "kube-apiserver": 40 * scale, "daemonguard controller": 2}, ReadyP50Seconds: 2, ReadyP99Seconds: 3 * scale},
				Managed: RolloutCost{DaemonSetSyncs: int(1500 * scale), DaemonSetSyncSeconds: 30 * scale, DaemonSetWrites: int(1200 * scale), Conflicts: 40,
					CPUSeconds: map[string]float64{"kube-controller": 25 * scale, "kube-apiserver": 35 * scale, "daemonguard controller": 8}, ReadyP50Seconds: 2, ReadyP99Seconds: 2}},
			Webhook: Webhook{
				StartupSeconds: 1.2 * scale, RSSMiB: 96 * scale, PeakRSSMiB: 120 * scale, ReviewP50Ms: 1.3, ReviewP99Ms: 21.04 * scale, Reviews: 10000,
				JoinNodes: 500, JoinPods: 1500, JoinFailed: 0, JoinSeconds: 41.23,
			},
			Audit: Audit{DaemonSets: 3, Seconds: 0.8 * scale, PeakRSSMiB: 101 * scale, Events: 3, Reports: 3, LargestReportBytes: int(20480 * scale)},
			Plans: []Plan{
				{DaemonSet: "rolling-update", WallSeconds: 0.65 * scale, Requests: 12, PeakRSSMiB: 60 * scale, CPUSeconds: 0.5 * scale, APIServerCPUSeconds: 0.4 * scale},
				{DaemonSet: "managed", WallSeconds: 2.35 * scale, Requests: 1010 * int(scale), PeakRSSMiB: 80 * scale},
			},
		}
	}
	small, medium, large := run(1000, 1), run(2500, 2.5), run(5000, 6)
	before := small
	before.Webhook.RSSMiB, before.Webhook.PeakRSSMiB, before.Webhook.StartupSeconds = 412, 530, 14.61
	before.Webhook.JoinFailed, before.Webhook.JoinSeconds = 7, 120.4
	before.Plans = nil
	before.Rollout.Managed.Conflicts = 400
	before.Date = "2025-05-31"
	small.Before = &before
	large.Plans = large.Plans[:1]
	large.Webhook.JoinNodes, large.Webhook.JoinPods, large.Webhook.JoinSeconds = 0, 0, 0
	return Results{
		Settings: []string{"kwok fake nodes, ~30 pods per node", "one API server, etcd on tmpfs, 2 cores"},
		Runs:     []Run{small, medium, large},
	}
}

func TestMarkdownGolden(t *testing.T) {
	golden.Assert(t, filepath.Join("testdata", "markdown.golden"), []byte(fixture().Markdown()))
}

func TestMarkdown(t *testing.T) {
	for name, tc := range map[string]struct {
		results Results
		want    []string // lines or parts of lines
		absent  []string
	}{
		"each size is a column headed by its nodes and pods": {
			results: fixture(),
			want:    []string{"| measure | 1,000 nodes / 30,100 pods | 2,500 nodes / 75,100 pods | 5,000 nodes / 150,100 pods |"},
		},
		"the join storm reads as one cell": {
			results: fixture(),
			want:    []string{" 500 nodes, 1,500 pods, 0 failed, 41.2 s |"},
		},
		"both rollouts' costs read in one cell": {
			results: fixture(),
			want: []string{"| DaemonSet controller syncs, built-in / managed | 800 / 1,500 | 2,000 / 3,750 |", "| DaemonSet writes (409 conflicts), built-in / managed | 900 (3) / 1,200 (40) |",
				"| CPU of every process of the machine, built-in / managed, s | 72.0 / 68.0 |", "| of it daemonguard's controller, built-in / managed, s | 2.0 / 8.0 |",
				"| rolling-update: CPU, the plan / the API server, s | 0.50 / 0.40 |", "| managed: CPU, the plan / the API server, s | — |"},
		},
		"a baseline build adds a before → after table of the costs that differ": {
			results: fixture(),
			want: []string{"| RSS after reviews and join storm | 412 → 96 MiB |", "| join storm: failed | 7 → 0 |", "| join storm: until available | 120 → 41.2 s |",
				"| DaemonSet writes (409 conflicts), managed | 1,200 (400) → 1,200 (40) |"},
			absent: []string{"| review p50 | ", "| measured on | 2025-05-31"},
		},
		"a component the baseline was not measured on is left out of the comparison": {
			results: fixture(),
			want:    []string{"| managed: wall time, s | 2.4 |"},
			absent:  []string{"| managed: wall time | ", "| rolling-update: wall time | ", "| rolling-update: peak RSS | "},
		},
		"a zero count of a measured component still compares": {
			results: Results{Runs: []Run{{Nodes: 1000, Pods: 30000, Webhook: Webhook{ReviewP50Ms: 2, JoinFailed: 3, JoinPods: 10},
				Before: &Run{Nodes: 1000, Pods: 30000, Webhook: Webhook{ReviewP50Ms: 4, JoinPods: 10}}}}},
			want: []string{"| review p50 | 4.0 → 2.0 ms |", "| join storm: failed | 0 → 3 |"},
		},
		"a cost a run did not measure reads as a dash": {
			results: Results{Runs: []Run{{Nodes: 200, Pods: 6000}}},
			want:    []string{"| managed rollout, s | — |", "| DaemonSet controller syncs, built-in / managed | — |", "| CPU of every process of the machine, built-in / managed, s | — |", "| join storm: nodes, DaemonSet pods, failed, until available | — |", "| DaemonSets audited | — |", "| Events | — |", "| Reports | — |"},
			absent:  []string{"Before → after", "Settings"},
		},
		"no runs still state the settings": {
			results: Results{Settings: []string{"kwok"}},
			want:    []string{"No cluster size measured yet.", "- kwok"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := tc.results.Markdown()
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("lacks %q:\n%s", want, got)
				}
			}
			for _, absent := range tc.absent {
				if strings.Contains(got, absent) {
					t.Errorf("holds %q:\n%s", absent, got)
				}
			}
		})
	}
}

func TestNumbers(t *testing.T) {
	for name, tc := range map[string]struct {
		got, want string
	}{
		"seconds read to a tenth below 100":                 {seconds(41.23), "41.2"},
		"seconds read to the second from 100":               {seconds(1234.5), "1,234"},
		"seconds that round to 100 read as 100":             {seconds(99.97), "100"},
		"zero seconds were not measured":                    {seconds(0), "—"},
		"MiB read to the unit":                              {mib(411.6), "412"},
		"milliseconds read to a tenth with separators":      {ms(12345.67), "12,345.7"},
		"counts carry thousands separators":                 {count(1234567), "1,234,567"},
		"a count below a thousand has no separator":         {count(999), "999"},
		"a negative number groups its digits after a sign":  {number(-1234.5, 1), "-1,234.5"},
		"a negative number that rounds to zero has no sign": {number(-0.04, 1), "0.0"},
		"bytes read in KiB":                                 {kib(20480), "20.0"},
		"a ratio reads with an x":                           {ratio(29.5, 29.2), "1.01x"},
		"a ratio of an unmeasured cost is a dash":           {ratio(29.5, 0), "—"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", name, tc.got, tc.want)
		}
	}
}

func TestGrowth(t *testing.T) {
	// runs measures the controller's peak RSS at each size; other costs stay unmeasured.
	runs := func(rss map[int]float64) []Run {
		var out []Run
		for nodes, v := range rss {
			out = append(out, Run{Nodes: nodes, Rollout: Rollout{ControllerPeakRSSMiB: v}})
		}
		return out
	}
	for name, tc := range map[string]struct {
		runs []Run
		want []Series
	}{
		"a cost per node that doubles from 1,000 to 2,000 nodes gives 2": {
			runs: runs(map[int]float64{1000: 100, 2000: 400}),
			want: []Series{{Name: "controller peak RSS", Points: []Point{{1000, 1}, {2000, 2}}}},
		},
		"a constant cost gives 0.5 at twice the nodes": {
			runs: runs(map[int]float64{1000: 100, 2000: 100}),
			want: []Series{{Name: "controller peak RSS", Points: []Point{{1000, 1}, {2000, 0.5}}}},
		},
		"a linear cost stays at 1": {
			runs: runs(map[int]float64{1000: 100, 2500: 250, 5000: 500}),
			want: []Series{{Name: "controller peak RSS", Points: []Point{{1000, 1}, {2500, 1}, {5000, 1}}}},
		},
		"the smallest run is the baseline in whatever order the runs come": {
			runs: []Run{{Nodes: 5000, Rollout: Rollout{ControllerPeakRSSMiB: 50}}, {Nodes: 200, Rollout: Rollout{ControllerPeakRSSMiB: 10}}},
			want: []Series{{Name: "controller peak RSS", Points: []Point{{200, 1}, {5000, 0.2}}}},
		},
		"a run that did not measure a cost has no point": {
			runs: runs(map[int]float64{1000: 100, 2500: 0, 5000: 500}),
			want: []Series{{Name: "controller peak RSS", Points: []Point{{1000, 1}, {5000, 1}}}},
		},
		"a cost the smallest run did not measure has no series": {
			runs: runs(map[int]float64{1000: 0, 2500: 250}),
		},
		"no runs have no series": {},
		"the plans are followed per kind of DaemonSet": {
			runs: []Run{
				{Nodes: 1000, Plans: []Plan{{DaemonSet: "rolling-update", WallSeconds: 1}, {DaemonSet: "managed", WallSeconds: 2}}},
				{Nodes: 2000, Plans: []Plan{{DaemonSet: "rolling-update", WallSeconds: 2}, {DaemonSet: "managed", WallSeconds: 8}}},
			},
			want: []Series{
				{Name: "plan wall (rolling-update)", Points: []Point{{1000, 1}, {2000, 1}}},
				{Name: "plan wall (managed)", Points: []Point{{1000, 1}, {2000, 2}}},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := Growth(tc.runs)
			if !equalSeries(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// equalSeries compares series to a part in a billion: the relative costs are quotients.
func equalSeries(a, b []Series) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || len(a[i].Points) != len(b[i].Points) {
			return false
		}
		for j, p := range a[i].Points {
			q := b[i].Points[j]
			if p.Nodes != q.Nodes || math.Abs(p.Relative-q.Relative) > 1e-9 {
				return false
			}
		}
	}
	return true
}

func TestGrowthSVG(t *testing.T) {
	results := fixture()
	svg, err := results.GrowthSVG()
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not XML: %v", err)
		}
		if start, ok := tok.(xml.StartElement); ok && root == "" {
			root = start.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("the root element is %q, want svg", root)
	}
	series := Growth(results.Runs)
	if len(series) != 9 {
		t.Errorf("the fixture plots %d costs, want 9", len(series))
	}
	for _, s := range series {
		if !bytes.Contains(svg, []byte(">"+s.Name+"<")) {
			t.Errorf("the SVG does not name %q", s.Name)
		}
	}
	for _, want := range []string{">linear<", ">1,000<", ">5,000<", "How daemonguard&#39;s costs grow with the cluster"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if _, err := (Results{}).GrowthSVG(); err == nil {
		t.Error("no runs drew a plot")
	}
}

func TestPut(t *testing.T) {
	for name, tc := range map[string]struct {
		have []int // nodes of the runs already there
		put  int
		want []int
	}{
		"the first run starts the list":          {nil, 1000, []int{1000}},
		"a larger size goes last":                {[]int{1000, 2500}, 5000, []int{1000, 2500, 5000}},
		"a smaller size goes first":              {[]int{1000, 2500}, 200, []int{200, 1000, 2500}},
		"a size in between goes between":         {[]int{1000, 5000}, 2500, []int{1000, 2500, 5000}},
		"a size measured again replaces its run": {[]int{1000, 2500, 5000}, 2500, []int{1000, 2500, 5000}},
	} {
		t.Run(name, func(t *testing.T) {
			var r Results
			for _, n := range tc.have {
				r.Runs = append(r.Runs, Run{Nodes: n, Date: "old"})
			}
			r.Put(Run{Nodes: tc.put, Date: "new"})
			var got []int
			for _, run := range r.Runs {
				got = append(got, run.Nodes)
				if (run.Date == "new") != (run.Nodes == tc.put) {
					t.Errorf("run of %d nodes dated %q", run.Nodes, run.Date)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("runs %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLoadPutSaveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scale.json")
	r, err := Load(path)
	if err != nil || !reflect.DeepEqual(r, Results{}) {
		t.Fatalf("a missing file loaded as %+v, %v; want empty results and no error", r, err)
	}
	want := fixture()
	r.Settings = want.Settings
	for _, i := range []int{2, 0, 1} {
		r.Put(want.Runs[i])
	}
	if err := r.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %+v\nwant %+v", got, want)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "{\n  \"settings\": [\n") || !strings.HasSuffix(string(data), "}\n") {
		t.Errorf("the file is not indented JSON ending in a newline:\n%s", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the save left %d files in its folder, want the results alone", len(entries))
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("the file's mode is %v (%v), want 0644", info.Mode(), err)
	}
}

func TestSaveWritesEmptyListsNotNull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scale.json")
	if err := (Results{}).Save(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"settings\": [],\n  \"runs\": []\n}\n"; string(data) != want {
		t.Errorf("got %q, want %q", data, want)
	}
}

func TestLoadRefusesMalformedFileNamingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scale.json")
	if err := os.WriteFile(path, []byte(`{"runs": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("got error %v, want one naming %s", err, path)
	}
}
