// Package admissionsim simulates admission: it evaluates manifests against daemonguard's policies
// exactly as the webhooks would, the inject policy's mutation first, then validation of the
// mutated object. Without a cluster it backs `daemonguard check` (CI pipelines, `helm template ...
// | daemonguard check -f -`) and `daemonguard mutate`; with the live namespace and nodes it backs
// the in-cluster audit.
package admissionsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/webhook"
)

// Document is one object of a manifest stream.
type Document struct {
	Source    string // file path ("-" for stdin) and document index, e.g. ds.yaml#2
	Raw       []byte // the object as JSON
	Kind      string
	Namespace string
	Name      string
}

// Ref names the document for people: file, kind, namespace/name.
func (d Document) Ref() string {
	ns := d.Namespace
	if ns == "" {
		ns = "default"
	}
	return fmt.Sprintf("%s %s %s/%s", d.Source, d.Kind, ns, d.Name)
}

// Read reads every document of the given paths: files, directories (every .yaml, .yml and .json
// below them, in lexical order) and "-" for stdin. Lists (kind: List) are unpacked.
func Read(paths []string, stdin io.Reader) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		if p == "-" {
			more, err := readStream("-", stdin)
			if err != nil {
				return nil, err
			}
			docs = append(docs, more...)
			continue
		}
		files, err := manifestFiles(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			more, err := readStream(f, bytes.NewReader(data))
			if err != nil {
				return nil, err
			}
			docs = append(docs, more...)
		}
	}
	return docs, nil
}

func manifestFiles(p string) ([]string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				files = append(files, path)
			}
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

func readStream(name string, r io.Reader) ([]Document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs []Document
	for i := 1; ; i++ {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s#%d: %w", name, i, err)
		}
		if len(bytes.TrimSpace(chunk)) == 0 {
			continue
		}
		raw, err := yaml.YAMLToJSON(chunk)
		if err != nil {
			return nil, fmt.Errorf("%s#%d: %w", name, i, err)
		}
		if string(raw) == "null" {
			continue // a document holding only comments
		}
		more, err := documents(fmt.Sprintf("%s#%d", name, i), raw)
		if err != nil {
			return nil, err
		}
		docs = append(docs, more...)
	}
}

func documents(source string, raw []byte) ([]Document, error) {
	var head struct {
		Kind     string            `json:"kind"`
		Items    []json.RawMessage `json:"items"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%s: not a Kubernetes object: %w", source, err)
	}
	if strings.HasSuffix(head.Kind, "List") && head.Items != nil {
		var out []Document
		for j, item := range head.Items {
			more, err := documents(fmt.Sprintf("%s.items[%d]", source, j), item)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		}
		return out, nil
	}
	return []Document{{Source: source, Raw: raw, Kind: head.Kind, Namespace: head.Metadata.Namespace, Name: head.Metadata.Name}}, nil
}

// Result is what admission would do with one DaemonSet.
type Result struct {
	Document   Document
	Mutated    []byte // the object as admission would store it (JSON)
	Changed    bool   // the mutation changed something
	Violations []policy.Violation
	Verdict    webhook.Verdict
	Err        error // evaluation failed: treated as a denial by callers
}

// IsDaemonSet tells the documents daemonguard evaluates.
func IsDaemonSet(d Document) bool {
	var head struct {
		APIVersion string `json:"apiVersion"`
	}
	_ = json.Unmarshal(d.Raw, &head)
	return d.Kind == "DaemonSet" && (head.APIVersion == "apps/v1" || head.APIVersion == "")
}

// Context is what is known around a document: nothing offline, the live namespace and nodes in
// an audit.
type Context struct {
	Operation       policy.Operation // OpCheck when empty
	NamespaceLabels map[string]string
	Cluster         *policy.ClusterFacts
}

// Evaluate runs the inject policy and the validation policies over one DaemonSet document, as
// admission would: validation sees the object with the injection applied.
func Evaluate(ctx context.Context, set *policy.Set, d Document, around Context) Result {
	r := Result{Document: d, Mutated: d.Raw}
	fail := func(err error) Result { r.Err = err; return r }
	obj, err := decode(d.Raw)
	if err != nil {
		return fail(err)
	}
	ns := d.Namespace
	if ns == "" {
		ns = "default"
	}
	labels := around.NamespaceLabels
	if labels == nil {
		labels = map[string]string{}
	}
	op := around.Operation
	if op == "" {
		op = policy.OpCheck
	}
	in := &policy.Input{Operation: op, Object: obj, Namespace: policy.Namespace{Name: ns, Labels: labels}, Cluster: around.Cluster}
	decision, err := set.Inject(ctx, in)
	if err != nil {
		return fail(err)
	}
	patch, err := webhook.DaemonSetPatch(d.Raw, decision)
	if err != nil {
		return fail(err)
	}
	if len(patch) > 0 {
		ops, err := json.Marshal(patch)
		if err != nil {
			return fail(err)
		}
		p, err := jsonpatchapply.DecodePatch(ops)
		if err != nil {
			return fail(err)
		}
		if r.Mutated, err = p.Apply(d.Raw); err != nil {
			return fail(err)
		}
		r.Changed = true
		if in.Object, err = decode(r.Mutated); err != nil {
			return fail(err)
		}
	}
	if r.Violations, err = set.Validate(ctx, in); err != nil {
		return fail(err)
	}
	r.Verdict = webhook.Decide(r.Violations)
	return r
}

func decode(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// LoadPolicySet compiles the built-in policies, overlaid with the .rego files and parameters.yaml
// found in dirs (same replacement rules as ConfigMaps: a module with a built-in's package replaces it).
func LoadPolicySet(ctx context.Context, dirs []string) (*policy.Set, error) {
	modules, params, err := LoadPolicies(dirs)
	if err != nil {
		return nil, err
	}
	return policy.Compile(ctx, modules, params)
}

// LoadPolicies returns the modules and parameters LoadPolicySet compiles.
func LoadPolicies(dirs []string) ([]policy.Module, map[string]any, error) {
	builtin, params, err := policy.Builtin()
	if err != nil {
		return nil, nil, err
	}
	var sources []policy.Source
	for _, dir := range dirs {
		src := policy.Source{Name: dir, Files: map[string]string{}}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if strings.HasSuffix(path, ".rego") || filepath.Base(path) == "parameters.yaml" {
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dir, path)
				src.Files[rel] = string(data)
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read policies from %s: %w", dir, err)
		}
		sources = append(sources, src)
	}
	return policy.Overlay(builtin, params, sources)
}
