package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var (
	// sourceRE is a Document's Source read from stdin: the document's index in the stream and
	// the path through nested lists.
	sourceRE = regexp.MustCompile(`^-#([1-9][0-9]*)((?:\.items\[[0-9]+\])*)$`)
	itemRE   = regexp.MustCompile(`\.items\[([0-9]+)\]`)
	// readErrRE is the start of a read error: the document it is about.
	readErrRE = regexp.MustCompile(`^-#[1-9][0-9]*(\.items\[[0-9]+\])*: `)
)

// FuzzRead feeds arbitrary bytes to the manifest reader of `daemonguard check`, `mutate` and
// `rollout plan`, as stdin (go test -fuzz FuzzRead ./internal/manifest/). It must never panic, and:
//
//   - every object it returns came from the input: its Source names a document of the stream
//     (and the path through the lists that held it), and the object is exactly that document
//     or item, with its kind, namespace, name and labels;
//   - objects come in the order of the input, and reading them back gives the same objects;
//   - an error names the document it is about (-#N).
func FuzzRead(f *testing.F) {
	// Every manifest of the repository's fixtures and demo, and the streams of manifest_test.go.
	for _, pattern := range []string{"policies/*/*.yaml", "demo/*.yaml", "demo-rollout/*.yaml", "preflight/*.yaml"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "testdata", pattern))
		if err != nil || len(files) == 0 {
			f.Fatalf("no seeds in testdata/%s: %v", pattern, err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("# leading comment only\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: a, namespace: x}\n---\n" +
		"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: apps/v1, kind: DaemonSet, metadata: {name: b}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n"))
	f.Add([]byte("kind: DaemonSet\nmetadata: [unclosed\n"))
	f.Add([]byte(`{"kind":"List","items":[{"kind":"PodList","items":[{"kind":"Pod"}]},{"kind":"List","items":null}]}`))
	f.Add([]byte("---\n---\n5\n---\n[]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := Read([]string{"-"}, bytes.NewReader(data))
		if err != nil {
			if !readErrRE.MatchString(err.Error()) {
				t.Fatalf("error %q names no document", err)
			}
			return
		}
		chunks := streamDocuments(t, data)
		last := 0
		for _, d := range docs {
			m := sourceRE.FindStringSubmatch(d.Source)
			if m == nil {
				t.Fatalf("document %s: source names no document of stdin", d.Source)
			}
			index, _ := strconv.Atoi(m[1])
			if index < last {
				t.Fatalf("document %s read after document #%d", d.Source, last)
			}
			last = index
			if index > len(chunks) {
				t.Fatalf("document %s: the stream has %d documents", d.Source, len(chunks))
			}
			want := chunks[index-1]
			for _, item := range itemRE.FindAllStringSubmatch(m[2], -1) {
				j, _ := strconv.Atoi(item[1])
				items, _ := want.(map[string]any)["items"].([]any)
				if j >= len(items) {
					t.Fatalf("document %s: no such item in %v", d.Source, want)
				}
				want = items[j]
			}
			got := decodeJSON(t, d.Raw)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("document %s is\n %s\nthe input holds there\n %v", d.Source, d.Raw, want)
			}
			obj, ok := got.(map[string]any)
			if !ok {
				t.Fatalf("document %s is %s, not an object", d.Source, d.Raw)
			}
			meta, _ := obj["metadata"].(map[string]any)
			labels, _ := meta["labels"].(map[string]any)
			if d.Kind != str(obj["kind"]) || d.Name != str(meta["name"]) || d.Namespace != str(meta["namespace"]) || !sameLabels(d.Labels, labels) {
				t.Fatalf("document %s read as %s with labels %v, its object is %s", d.Source, d.Ref(), d.Labels, d.Raw)
			}
		}
		var stream bytes.Buffer
		for _, d := range docs {
			stream.WriteString("---\n")
			stream.Write(d.Raw)
			stream.WriteString("\n")
		}
		again, err := Read([]string{"-"}, &stream)
		if err != nil || len(again) != len(docs) {
			t.Fatalf("the documents read, written back as a stream, read as %d documents (%v), first %d", len(again), err, len(docs))
		}
		for i := range docs {
			a, b := docs[i], again[i]
			if !reflect.DeepEqual(decodeJSON(t, a.Raw), decodeJSON(t, b.Raw)) || a.Kind != b.Kind || a.Name != b.Name || a.Namespace != b.Namespace || !reflect.DeepEqual(a.Labels, b.Labels) {
				t.Fatalf("document %s read back as %s: %s, then %s", a.Ref(), b.Ref(), a.Raw, b.Raw)
			}
		}
	})
}

// streamDocuments splits data into the documents of a YAML stream, as Kubernetes does, each as
// generic JSON; nil for a document that holds nothing.
func streamDocuments(t *testing.T, data []byte) []any {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []any
	for {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("the stream Read accepted does not split: %v", err)
		}
		var v any
		if len(bytes.TrimSpace(chunk)) > 0 {
			raw, err := yaml.YAMLToJSON(chunk)
			if err != nil {
				t.Fatalf("document %d, which Read accepted, is no YAML: %v", len(out)+1, err)
			}
			v = decodeJSON(t, raw)
		}
		out = append(out, v)
	}
}

func decodeJSON(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s is no JSON: %v", raw, err)
	}
	return v
}

func str(v any) string { s, _ := v.(string); return s }

// sameLabels tells whether a Document's labels are the object's metadata.labels; a null value
// is the empty string, as the API server's decoding into ObjectMeta gives it.
func sameLabels(got map[string]string, want map[string]any) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		s, ok := v.(string)
		if v == nil {
			s, ok = "", true
		}
		if g, found := got[k]; !ok || !found || g != s {
			return false
		}
	}
	return true
}
