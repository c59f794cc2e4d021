// Command bindplant is a hostile workload for tests of bind mounts: it
// turns a directory it can write into a symlink out of it, the way a
// container given a host path read-write could, so that a bind of that
// directory resolves elsewhere at the next start.
//
//	bindplant [-touch DIR] [-plant DIR -target PATH] [-stay]
//
// -touch writes DIR/ready. -plant waits (at most a minute) for DIR/ready,
// then moves DIR aside and puts a symlink to -target in its place, unless
// DIR is a symlink already. Then it exits 1, for a restart policy to
// start it again, or with -stay sleeps ten minutes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	touch := flag.String("touch", "", "directory to write a ready file into")
	plant := flag.String("plant", "", "directory to replace with a symlink once it holds a ready file")
	target := flag.String("target", "", "where the planted symlink points")
	stay := flag.Bool("stay", false, "sleep instead of exiting")
	flag.Parse()
	if *touch != "" {
		if err := os.WriteFile(filepath.Join(*touch, "ready"), []byte("ready\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "touch:", err)
		}
	}
	if *plant != "" {
		if err := replace(*plant, *target); err != nil {
			fmt.Fprintln(os.Stderr, "plant:", err)
		}
	}
	if *stay {
		time.Sleep(10 * time.Minute)
	}
	os.Exit(1)
}

func replace(dir, target string) error {
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	ready := filepath.Join(dir, "ready")
	for i := 0; i < 1200; i++ {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		return err
	}
	fmt.Println("planted", dir, "->", target)
	return os.Symlink(target, dir)
}
