// Package benchkit is what the benchmarks of lockstep and agent share: the
// one writer of their Markdown reports, the statistics their rows give,
// polling, and what /proc says of a process. The harness of each benchmark
// lives in a subpackage (lockbench, agentbench, fleetbench); the Benchmark
// functions in the measured packages are thin wrappers around them.
package benchkit
