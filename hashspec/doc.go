// Package hashspec owns the group spec: its types, defaults, validation,
// JSON and HCL decoding, and the canonical encoding whose SHA-256 is the
// "desired SHA" that agents compare with the SHA of their running config.
//
// # Identity
//
// Two specs that mean the same thing must hash the same, whatever file
// format they came from, however their maps were ordered, and whether
// defaults were written out or left implicit. Anything else makes every
// node restart for nothing. Two specs that differ in any way the agent
// acts on must hash differently.
//
// # Canonical encoding (version rollagent.spec.v1)
//
// SHA = lowercase hex SHA-256 of "rollagent.spec.v1\n" followed by the
// canonical encoding. The canonical encoding is produced as follows:
//
//   - Defaults first: WithDefaults fills every default and normalises
//     values with more than one spelling (empty lists and maps become
//     absent, volume targets and bind sources are path.Clean'ed, host IPs
//     take net/netip's canonical form). The result must pass Validate;
//     invalid specs have no SHA.
//   - The defaulted spec is written as compact JSON (no whitespace) by
//     this package's own writer, not encoding/json, so a standard library
//     change cannot move a SHA.
//   - Object fields appear in Go struct declaration order, under their
//     json tag names; fields tagged omitempty are left out when empty.
//   - Map keys are sorted byte-wise (Go string order).
//   - Strings are raw UTF-8; only '"', '\\' and control characters are
//     escaped (\n, \r, \t, otherwise \u00XX). Invalid UTF-8 is rejected
//     by Validate, never replaced.
//   - Integers are decimal; durations are Go duration strings as printed
//     by time.Duration.String ("1m30s", "10s", "0s"). An Amount
//     (max_parallel, max_failures) is its count as an integer, as before
//     percentages existed, or its percentage as the string "N%".
//   - List order is kept: cmd and entrypoint order matters, and ports and
//     volumes are hashed in the order written (reordering them is a new
//     SHA, which costs one needless rollout but never hides a change).
//
// Changing any of these rules, adding a field, renaming a tag, or
// changing a default changes the SHA of every deployed spec, which makes
// the whole fleet roll. Such a change needs a new version prefix
// ("rollagent.spec.v2") and a migration plan; the golden vectors in
// testdata/golden exist to make an accidental change fail the tests.
//
// # Decoding
//
// Parse is strict: unknown fields, duplicate keys (JSON), wrong types and
// unparsable durations are errors (*ParseError, joined with errors.Join
// when there are several) that name the field path and the line. Field
// paths use the JSON names in both formats ("container.ports[1].host"
// for the second port block of an HCL file). Parse applies no defaults,
// but remembers fields with a non-zero default that were explicitly
// written as zero ("max_parallel = 0", "interval = \"0s\"") so that
// Validate reports them instead of WithDefaults silently replacing them.
//
// HCL is decoded with gohcl and no evaluation context: variables and
// functions are errors, and HCL's own type conversions apply (max_parallel
// = "2" is 2, env = { N = 1 } is "1"), which JSON rejects. Both routes
// end in the same Spec, so the SHA does not depend on the format. Before
// parsing, HCL input is lexed and rejected if it nests deeper than the
// parser can take without overflowing its stack.
package hashspec
