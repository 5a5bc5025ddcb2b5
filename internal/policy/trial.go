package policy

// This file is the trial evaluation of a new policy set: before a set is put in force, it is
// evaluated, as admission would, on a few of the fixture DaemonSets (trial/, copies of
// testdata/policies fixtures), within the load's limits. A rule that explodes or errors on an
// ordinary DaemonSet is found while the last good set still serves, not on the first request.

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sync"

	"github.com/open-policy-agent/opa/v1/rego"
	"sigs.k8s.io/yaml"
)

//go:embed trial/*.yaml
var trialFiles embed.FS

// trialInput is one evaluation of the trial.
type trialInput struct {
	name string // e.g. "trial DaemonSet nginx-ds.yaml (CREATE)"
	in   *Input
}

// trialInputs are the trial's evaluations, one per operation a set serves: each fixture as a
// CREATE with cluster facts, an UPDATE to itself, offline as the CLI checks it, and as the audit
// re-evaluates it. They are decoded once and never modified.
var trialInputs = sync.OnceValues(func() ([]trialInput, error) {
	paths, err := fs.Glob(trialFiles, "trial/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []trialInput
	for _, p := range paths {
		raw, err := fs.ReadFile(trialFiles, p)
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", p, err)
		}
		// Numbers as json.Number, as the webhook decodes objects.
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("decode %s: %w", p, err)
		}
		ns := "default"
		if meta, ok := obj["metadata"].(map[string]any); ok {
			if n, ok := meta["namespace"].(string); ok {
				ns = n
			}
		}
		namespace := Namespace{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}
		facts := &ClusterFacts{Nodes: 5, MatchingNodes: 5}
		name := "trial DaemonSet " + p[len("trial/"):]
		out = append(out,
			trialInput{name + " (CREATE)", &Input{Operation: OpCreate, Object: obj, Namespace: namespace, Cluster: facts}},
			trialInput{name + " (UPDATE)", &Input{Operation: OpUpdate, Object: obj, OldObject: obj, Namespace: namespace, Cluster: facts}},
			trialInput{name + " (CHECK)", &Input{Operation: OpCheck, Object: obj, Namespace: namespace}},
			trialInput{name + " (AUDIT)", &Input{Operation: OpAudit, Object: obj, Namespace: namespace, Cluster: facts}},
		)
	}
	return out, nil
})

// trial evaluates the set on every trial input as admission does (inject, then validate). An
// error rejects the set: it is one admission would meet on ordinary DaemonSets.
func (s *Set) trial(ctx context.Context, step func(string, *whereTracer)) error {
	inputs, err := trialInputs()
	if err != nil {
		return fmt.Errorf("load the trial DaemonSets: %w", err)
	}
	for _, t := range inputs {
		where := &whereTracer{}
		step("evaluating the "+t.name, where)
		if _, err := s.inject(ctx, t.in, rego.EvalQueryTracer(where)); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if _, err := s.validate(ctx, t.in, rego.EvalQueryTracer(where)); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return nil
}
