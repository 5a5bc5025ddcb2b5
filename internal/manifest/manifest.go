// Package manifest reads Kubernetes manifests as kubectl -f does: files, directories and stdin,
// YAML or JSON streams, lists unpacked, each object a Document with where it came from. The
// offline commands (check, mutate) and the pre-flight plan read their -f arguments with it; the
// whole package is manifest.go.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Document is one object of a manifest stream.
type Document struct {
	Source    string // file path ("-" for stdin) and document index, e.g. ds.yaml#2
	Raw       []byte // the object as JSON
	Kind      string
	Namespace string
	Name      string
	Labels    map[string]string
}

// Ref names the document for people: file, kind, namespace/name.
func (d Document) Ref() string {
	ns := d.Namespace
	if ns == "" {
		ns = "default"
	}
	return fmt.Sprintf("%s %s %s/%s", d.Source, d.Kind, ns, d.Name)
}

// RequirePaths is the error of a command that reads manifests (check, mutate, rollout plan)
// and was given none.
func RequirePaths(paths []string) error {
	if len(paths) == 0 {
		return fmt.Errorf("-f is required (a file, a directory or - for stdin)")
	}
	return nil
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
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	// Case-sensitive, as the API server reads objects: "Metadata" or "KIND" is an unknown field,
	// not the metadata or the kind.
	if err := utiljson.Unmarshal(raw, &head); err != nil {
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
	return []Document{{Source: source, Raw: raw, Kind: head.Kind, Namespace: head.Metadata.Namespace, Name: head.Metadata.Name, Labels: head.Metadata.Labels}}, nil
}

// IsDaemonSet tells the documents daemonguard evaluates.
func IsDaemonSet(d Document) bool {
	var head struct {
		APIVersion string `json:"apiVersion"`
	}
	_ = utiljson.Unmarshal(d.Raw, &head)
	return d.Kind == "DaemonSet" && (head.APIVersion == "apps/v1" || head.APIVersion == "")
}

// NamespaceLabels are the labels of the Namespace documents among docs, by name: what offline
// admission knows of namespaces. A namespace the manifests do not hold has no labels, so it is
// not marked for node agents (admission.NodeAgentsLabel) and nothing is injected there.
func NamespaceLabels(docs []Document) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, d := range docs {
		if d.Kind == "Namespace" && d.Namespace == "" {
			out[d.Name] = d.Labels
		}
	}
	return out
}
