package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

// `history` tells what happened to a group, oldest first, newest last;
// `--shas` still lists the committed SHAs as before; a record of the log
// that is not an event is shown as a problem.
func TestHistoryShowsEvents(t *testing.T) {
	srv := consultest.NewDev(t)
	var shas []string
	for _, args := range [][]string{
		{"commit", "web", "-f", "testdata/web.hcl", "--author=alice"},
		{"commit", "web", "-f", "testdata/web-v2.json", "--author=bob"},
		{"rollback", "web", "--to", "first"}, // nothing converged: the default refuses
		{"cancel", "web", "--reason", "bad image"},
	} {
		if args[0] == "rollback" {
			args[3] = shas[0]
		}
		code, out, errs := runCLI(t, srv.HTTPAddr, args...)
		if code != 0 {
			t.Fatalf("%v: %s", args, errs)
		}
		if args[0] == "commit" {
			shas = append(shas, strings.SplitN(out, "\n", 2)[0])
		}
	}
	s1, s2 := coordinator.ShortSHA(shas[0]), coordinator.ShortSHA(shas[1])
	k, _ := coordinator.NewKeys("", "web")
	if _, err := srv.Client().KV().Put(&api.KVPair{Key: k.EventsPrefix() + "zzz", Value: []byte("garbage")}, nil); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		want []string // regexps, one a line, in order
	}{
		{"events", []string{"history", "web"}, []string{
			`^TIME +EVENT +BY +SHA +NODE +DETAIL$`,
			`^\S+ +commit +alice +` + s1 + ` +- *$`, // a commit's reason is "commit": not repeated
			`^\S+ +commit +bob +` + s2 + ` +- +from ` + s1 + `$`,
			`^\S+ +rollback +\S+ +` + s1 + ` +- +from ` + s2 + `: rollback to ` + s1 + `$`,
			`^\S+ +cancel +\S+ +` + s1 + ` +- +bad image$`,
			`^problem: .*events/zzz: not a valid record`,
		}},
		{"shas", []string{"history", "web", "--shas"}, []string{
			`^SHA +COMMITTED +AUTHOR +IMAGE +NOTE$`,
			`^` + s1 + ` +\S+ +alice +\S+ +desired cancelled$`,
			`^` + s2 + ` +\S+ +bob +\S+ *$`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, srv.HTTPAddr, tc.args...)
			if code != 0 {
				t.Fatalf("code %d: %s", code, errs)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tc.want), out)
			}
			for i, w := range tc.want {
				if !regexp.MustCompile(w).MatchString(lines[i]) {
					t.Errorf("line %d %q does not match %q", i, lines[i], w)
				}
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		code, out, errs := runCLI(t, srv.HTTPAddr, "history", "web", "-o", "json")
		if code != 0 {
			t.Fatalf("code %d: %s", code, errs)
		}
		var h historyJSON
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		var kinds []string
		for _, e := range h.Events {
			kinds = append(kinds, string(e.Kind))
		}
		if strings.Join(kinds, ",") != "commit,commit,rollback,cancel" || len(h.Problems) != 1 || h.Events[3].Reason != "bad image" {
			t.Fatalf("events %v, problems %v", kinds, h.Problems)
		}
	})
}
