package policy

// This file is the Rego sandbox: the only builtins a daemonguard policy may call, and the
// compiler every policy set, the webhook's, the audit's, the CLI's and the Rego tests', is built
// with. Policies come from ConfigMaps that anyone who may write one in daemonguard's namespace
// controls, and they are evaluated on every DaemonSet write with the whole object as input: a
// policy must be a pure function of its input and data, so it can neither send that input away
// nor decide differently from one replica, or one second, to the next.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// allowedBuiltins is the allow-list, by OPA's builtin name. A builtin OPA adds in a later version
// stays out until it is judged and listed here; policies/README.md#sandbox lists the same names
// for policy authors (TestSandboxIsDocumented holds the two together).
//
// Left out, and why:
//   - they reach out of the process: http.send (network), net.lookup_ip_addr (DNS),
//     json.match_schema and json.verify_schema (a schema's remote $ref is fetched),
//     providers.aws.sign_req (makes AWS credentials usable, and signs with the clock);
//   - they read the process: opa.runtime (its environment variables and configuration);
//   - they are not deterministic: rand.intn, uuid.rfc4122, time.now_ns, io.jwt.decode_verify
//     and crypto.x509.parse_and_verify_certificates(_with_options) (they read the clock),
//     io.jwt.encode_sign(_raw) (randomised signatures);
//   - no DaemonSet policy needs them, and each is a parser or a cryptographic routine more for
//     a ConfigMap author to drive: the other io.jwt.*, crypto.x509.parse_*,
//     crypto.parse_private_keys, graphql.*, rego.parse_module, and net.cidr_expand (one call
//     lists every address of a prefix: 16 million terms for a /8);
//   - they are deprecated (the strict compiler rejects them anyway): all, any, cast_*,
//     net.cidr_overlap, re_match, set_diff.
//
// numbers.range and numbers.range_step allocate in proportion to their arguments, yet stay:
// the built-in policies use numbers.range, and OPA stops them when the evaluation is cancelled,
// so the load's heap guard (limits.go) bounds them as it bounds any comprehension.
var allowedBuiltins = []string{
	// Operators, and the calls the compiler writes for `in`, print, template strings and tests.
	"assign", "eq", "equal", "neq", "lt", "lte", "gt", "gte",
	"plus", "minus", "mul", "div", "rem", "and", "or",
	"internal.member_2", "internal.member_3", "internal.print", "internal.template_string", "internal.test_case",
	"print", "trace",
	// Numbers and bits.
	"abs", "ceil", "floor", "round", "to_number", "format_int", "numbers.range", "numbers.range_step",
	"bits.and", "bits.lsh", "bits.negate", "bits.or", "bits.rsh", "bits.xor",
	// Aggregates, arrays, sets, objects, graphs.
	"count", "max", "min", "product", "sort", "sum",
	"array.concat", "array.flatten", "array.reverse", "array.slice",
	"intersection", "union",
	"object.filter", "object.get", "object.keys", "object.remove", "object.subset", "object.union", "object.union_n",
	"json.filter", "json.patch", "json.remove",
	"walk", "graph.reachable", "graph.reachable_paths",
	// Strings, regular expressions, globs.
	"concat", "contains", "endswith", "indexof", "indexof_n", "lower", "replace", "split", "sprintf", "startswith",
	"strings.any_prefix_match", "strings.any_suffix_match", "strings.count", "strings.render_template",
	"strings.replace_n", "strings.reverse", "strings.split_n", "substring", "upper",
	"trim", "trim_left", "trim_prefix", "trim_right", "trim_space", "trim_suffix",
	"regex.find_all_string_submatch_n", "regex.find_n", "regex.globs_match", "regex.is_valid", "regex.match",
	"regex.replace", "regex.split", "regex.template_match",
	"glob.match", "glob.quote_meta",
	// Types.
	"is_array", "is_boolean", "is_null", "is_number", "is_object", "is_set", "is_string", "type_name",
	// Encodings.
	"base64.decode", "base64.encode", "base64.is_valid", "base64url.decode", "base64url.encode", "base64url.encode_no_pad",
	"hex.decode", "hex.encode",
	"json.is_valid", "json.marshal", "json.marshal_with_options", "json.unmarshal",
	"yaml.is_valid", "yaml.marshal", "yaml.unmarshal",
	"urlquery.decode", "urlquery.decode_object", "urlquery.encode", "urlquery.encode_object",
	"uri.is_valid", "uri.parse", "uuid.parse",
	// Versions, quantities, hashes.
	"semver.compare", "semver.is_valid", "units.parse", "units.parse_bytes",
	"crypto.md5", "crypto.sha1", "crypto.sha256",
	"crypto.hmac.equal", "crypto.hmac.md5", "crypto.hmac.sha1", "crypto.hmac.sha256", "crypto.hmac.sha512",
	// Time, from the arguments only (time.now_ns is out).
	"time.add_date", "time.clock", "time.date", "time.diff", "time.format",
	"time.parse_duration_ns", "time.parse_ns", "time.parse_rfc3339_ns", "time.weekday",
	// CIDR arithmetic (no lookups, no expansion).
	"net.cidr_contains", "net.cidr_contains_matches", "net.cidr_intersects", "net.cidr_is_valid", "net.cidr_merge",
}

// Capabilities returns OPA's capabilities cut down to the sandbox: only the allowed builtins, and
// no host to fetch from (AllowNet empty, not nil: nil would allow every host). Each call returns a
// new value, so no caller can widen another's.
func Capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion(ast.CapabilitiesRegoVersion(ast.RegoV1))
	caps.Builtins = slices.DeleteFunc(caps.Builtins, func(b *ast.Builtin) bool {
		return !slices.Contains(allowedBuiltins, b.Name)
	})
	caps.AllowNet = []string{}
	return caps
}

// AllowedBuiltins returns the names of the builtins a policy may call, sorted.
func AllowedBuiltins() []string {
	return slices.Sorted(slices.Values(allowedBuiltins))
}

// newCompiler returns an OPA compiler for Rego v1 in the sandbox; every policy set and every Rego
// test run is compiled by one.
func newCompiler() *ast.Compiler {
	return ast.NewCompiler().WithCapabilities(Capabilities()).WithDefaultRegoVersion(ast.RegoV1)
}

// sandboxErrors rewrites OPA's bare "undefined function http.send" for a builtin OPA has but the
// sandbox leaves out, so the author reads that it is not allowed here, not that it is misspelt.
// The error keeps its code and location (file and line), which the reloader's report quotes.
func sandboxErrors(errs ast.Errors) ast.Errors {
	out := make(ast.Errors, len(errs))
	for i, e := range errs {
		out[i] = e
		name, ok := strings.CutPrefix(e.Message, "undefined function ")
		if !ok || e.Code != ast.TypeErr || ast.BuiltinMap[name] == nil || slices.Contains(allowedBuiltins, name) {
			continue
		}
		rewritten := *e
		rewritten.Message = fmt.Sprintf("builtin %s is not allowed in daemonguard policies: they run without network, "+
			"clock, randomness or access to the process (see the Sandbox section of policies/README.md)", name)
		out[i] = &rewritten
	}
	return out
}
