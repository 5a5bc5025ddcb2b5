package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// metric is one metric as the code defines it or docs/monitoring.md documents it.
type metric struct {
	kind   string // counter, gauge, histogram, summary
	labels string // comma-separated, in the order the code declares them
}

// TestMetricsTableMatchesTheCode compares docs/monitoring.md's table with every daemonguard_
// metric the product's code defines (prometheus.NewCounter, NewGaugeVec, ... with a literal Name),
// so an alert rule or a dashboard written from the table finds the metric it names.
func TestMetricsTableMatchesTheCode(t *testing.T) {
	code := definedMetrics(t)
	if len(code) == 0 {
		t.Fatal("no daemonguard_ metric found in the code")
	}
	docs := documentedMetrics(t)
	for _, name := range slices.Sorted(maps.Keys(code)) {
		d, ok := docs[name]
		switch {
		case !ok:
			t.Errorf("%s (%s) is defined in the code but not in docs/monitoring.md", name, code[name].kind)
		case d != code[name]:
			t.Errorf("%s: docs/monitoring.md says %+v, the code %+v", name, d, code[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		if _, ok := code[name]; !ok {
			t.Errorf("docs/monitoring.md documents %s, which the code does not define", name)
		}
	}
}

// definedMetrics parses the product's non-test Go files for prometheus.NewX(prometheus.XOpts{Name:
// "daemonguard_..."}, []string{labels}) calls.
func definedMetrics(t *testing.T) map[string]metric {
	t.Helper()
	constructor := regexp.MustCompile(`^New(Counter|Gauge|Histogram|Summary)(Vec|Func)?$`)
	out := map[string]metric{}
	for _, dir := range []string{"webhook", "controller", "internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
					return true
				}
				m := constructor.FindStringSubmatch(sel.Sel.Name)
				if m == nil {
					return true
				}
				name := fieldString(call.Args[0], "Name")
				if !strings.HasPrefix(name, "daemonguard_") {
					return true
				}
				var labels []string
				if len(call.Args) > 1 {
					labels = stringList(call.Args[1])
				}
				out[name] = metric{kind: strings.ToLower(m[1]), labels: strings.Join(labels, ",")}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// fieldString is the string literal of a composite literal's field, or "".
func fieldString(e ast.Expr, field string) string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return ""
	}
	for _, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == field {
				return stringLit(kv.Value)
			}
		}
	}
	return ""
}

// stringList is the string literals of a []string{...} literal.
func stringList(e ast.Expr) []string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range lit.Elts {
		out = append(out, stringLit(el))
	}
	return out
}

func stringLit(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		if s, err := strconv.Unquote(b.Value); err == nil {
			return s
		}
	}
	return ""
}

// documentedMetrics reads the rows of docs/monitoring.md's table: | `name` | type | `l1`, `l2` | meaning |.
func documentedMetrics(t *testing.T) map[string]metric {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]metric{}
	for _, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`daemonguard_") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var labels []string
		for _, l := range strings.Split(cells[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		out[name] = metric{kind: strings.TrimSpace(cells[2]), labels: strings.Join(labels, ",")}
	}
	return out
}
