package policy

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// A policy that calls a builtin outside the sandbox is rejected at load, with its file, its line
// and the builtin's name; one that calls an allowed builtin loads.
func TestSandboxBuiltins(t *testing.T) {
	cases := map[string]struct {
		// call is the expression on line 4 of the module's violation rule.
		call string
		// denied is the builtin the load must name as not allowed; "" when the module must load.
		denied string
	}{
		"http.send is denied: it would send the input over the network": {
			call: `http.send({"method": "POST", "url": "http://127.0.0.1:1/", "body": input})`, denied: "http.send"},
		"net.lookup_ip_addr is denied: a DNS lookup leaks data and differs between replicas": {
			call: `net.lookup_ip_addr("example.com")`, denied: "net.lookup_ip_addr"},
		"opa.runtime is denied: it exposes the process's environment": {call: `opa.runtime()`, denied: "opa.runtime"},
		"time.now_ns is denied: the clock":                            {call: `time.now_ns()`, denied: "time.now_ns"},
		"rand.intn is denied: randomness":                             {call: `rand.intn("x", 10)`, denied: "rand.intn"},
		"uuid.rfc4122 is denied: randomness":                          {call: `uuid.rfc4122("x")`, denied: "uuid.rfc4122"},
		"io.jwt.decode_verify is denied: it reads the clock": {
			call: `io.jwt.decode_verify("a.b.c", {"secret": "s"})`, denied: "io.jwt.decode_verify"},
		"crypto.x509.parse_and_verify_certificates is denied: it reads the clock": {
			call: `crypto.x509.parse_and_verify_certificates("x")`, denied: "crypto.x509.parse_and_verify_certificates"},
		"json.match_schema is denied: a remote $ref would be fetched": {
			call: `json.match_schema({}, {"$ref": "http://127.0.0.1:1/s.json"})`, denied: "json.match_schema"},
		"net.cidr_expand is denied: one call lists every address of a prefix": {
			call: `net.cidr_expand("10.0.0.0/8")`, denied: "net.cidr_expand"},
		"providers.aws.sign_req is denied: it signs with credentials and the clock": {
			call: `providers.aws.sign_req({}, {}, 0)`, denied: "providers.aws.sign_req"},
		"time.parse_rfc3339_ns is allowed: it reads only its argument": {call: `time.parse_rfc3339_ns("2024-01-01T00:00:00Z")`},
		"numbers.range is allowed: the built-in policies use it":       {call: `numbers.range(1, 3)`},
		"units.parse is allowed: resource quantities":                  {call: `units.parse("512Mi")`},
		"regex.match is allowed":                                       {call: `regex.match("^a", "abc")`},
		"semver.compare is allowed":                                    {call: `semver.compare("1.0.0", "1.2.0")`},
		"net.cidr_contains is allowed: arithmetic, no lookup":          {call: `net.cidr_contains("10.0.0.0/8", "10.1.2.3")`},
		"crypto.sha256 is allowed":                                     {call: `crypto.sha256("x")`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			src := "package daemonguard.policies.p\n\nviolation contains {\"field\": \"f\", \"msg\": \"m\"} if {\n\tx := " + c.call + "\n\tinput.object.never == x\n}\n"
			_, err := Compile(context.Background(), []Module{{Name: "configmap/team/p.rego", Source: src}}, nil)
			if c.denied == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			want := "configmap/team/p.rego:4: rego_type_error: builtin " + c.denied + " is not allowed in daemonguard policies"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want it to contain %q", err, want)
			}
		})
	}
}

// The allow-list names only builtins this OPA has, none of them deprecated or flagged by OPA as
// non-deterministic, and the capabilities hold exactly those: a typo or a builtin OPA dropped
// would otherwise go unnoticed, and a non-deterministic one would make replicas disagree.
func TestAllowListNamesOnlyBuiltinsOPAKnows(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range allowedBuiltins {
		b := ast.BuiltinMap[name]
		switch {
		case seen[name]:
			t.Errorf("%s is listed twice", name)
		case b == nil:
			t.Errorf("%s is not a builtin of this OPA", name)
		case b.IsDeprecated():
			t.Errorf("%s is deprecated", name)
		case b.Nondeterministic:
			t.Errorf("%s is non-deterministic", name)
		}
		seen[name] = true
	}
	var got []string
	for _, b := range Capabilities().Builtins {
		got = append(got, b.Name)
	}
	if want := AllowedBuiltins(); !slices.Equal(got, want) {
		t.Errorf("capabilities hold %d builtins, want the %d allowed:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	if caps := Capabilities(); caps.AllowNet == nil || len(caps.AllowNet) != 0 {
		t.Errorf("AllowNet = %#v, want empty and not nil (nil allows every host)", caps.AllowNet)
	}
}

// `daemonguard policy test` and `go test ./policies/...` run in the same sandbox as the webhook: a
// test cannot call what a policy may not.
func TestRegoTestsRunInTheSandbox(t *testing.T) {
	tests := []Module{{Name: "dir/p_test.rego", Source: "package daemonguard.policies.p\n\ntest_send if {\n\thttp.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1:1/\"})\n}\n"}}
	_, err := RunRegoTests(context.Background(), nil, tests, nil)
	if want := "dir/p_test.rego:4: rego_type_error: builtin http.send is not allowed in daemonguard policies"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to contain %q", err, want)
	}
}

// policies/README.md's Sandbox section lists exactly the allowed builtins, so policy authors read
// the list the compiler enforces.
func TestSandboxIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../policies/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### Allowed builtins\n")
	if !ok {
		t.Fatal("policies/README.md has no section \"### Allowed builtins\"")
	}
	section, _, _ = strings.Cut(section, "\n#")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_.]+)`").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	for _, name := range allowedBuiltins {
		if !documented[name] {
			t.Errorf("%s is allowed but not listed in policies/README.md", name)
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("policies/README.md lists %s, which the sandbox does not allow", name)
	}
}
