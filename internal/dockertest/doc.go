// Package dockertest helps tests drive the real Docker engine: it connects
// (skipping, or failing under CI=true, when Docker is unreachable), builds
// FROM-scratch images out of static Go binaries, waits for containers to turn
// healthy, and removes what a test created.
//
// Nothing is pulled: the machines this project runs on reach no image
// registry, so every image is FROM scratch with the binaries copied in.
//
// Every container, network and image a test makes carries the label
// rollagent.test=<RunID()>. Cleanup removes this process's containers and
// networks by that label; SweepStale removes anything with the label that is
// over an hour old, left behind by a run that crashed before its cleanups.
// Containers inherit their image's labels, so a container made from an image
// of BuildGoImage is labelled even if the test forgot to. Its images also
// carry rollagent.test.image=<tag>, which makes each BuildGoImage call's
// image distinct, so removing one never touches another test's containers.
//
// ImageFromBinaries, Connect and SweepStale take no testing.TB so that
// non-test code such as `make demo` can build the same images.
package dockertest
