// Package testkit holds the machinery that tests of every package share: a
// RoundTripper that counts a client's requests, bounded polling (a wait
// for a condition, and a watch that nothing changes), a context bounded
// in time, and a buffer that a running process writes while the test
// reads it.
//
// It imports no package of rollagent's own but consultest, so that the
// in-package tests of lockstep and coordinator can use it; what needs a
// group's keys or its slot lives in groupkit.
package testkit
