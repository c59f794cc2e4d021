package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollagent/rollagent/hashspec"
)

// Symlinks are judged by where they lead, as Docker follows them: one
// planted under an allowed prefix (by a container that had it read-write)
// must not open the host.
func TestAllowCheckFollowsSymlinks(t *testing.T) {
	root := t.TempDir()
	allowed := filepath.Join(root, "srv")
	mkdir := func(p string) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, at string) {
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	mkdir(filepath.Join(allowed, "data"))
	mkdir(filepath.Join(root, "etc"))
	mkdir(filepath.Join(root, "real-app"))
	link(filepath.Join(root, "etc"), filepath.Join(allowed, "escape"))
	link("../etc", filepath.Join(allowed, "relative-escape"))
	link(filepath.Join(allowed, "data"), filepath.Join(allowed, "inside"))
	link(filepath.Join(root, "etc", "not-yet"), filepath.Join(allowed, "dangling"))
	link(filepath.Join(root, "real-app"), filepath.Join(root, "app")) // the prefix itself is a link
	allow := Allow{BindPrefixes: []string{allowed, filepath.Join(root, "app")}}
	tests := []struct {
		name, src, wantErr string
	}{
		{"plain directory", filepath.Join(allowed, "data"), ""},
		{"missing path under the prefix", filepath.Join(allowed, "new", "dir"), ""},
		{"symlink out of the prefix", filepath.Join(allowed, "escape"), "a symlink to " + filepath.Join(root, "etc")},
		{"path through a symlink out", filepath.Join(allowed, "escape", "passwd"), "outside --allow-bind"},
		{"relative symlink out", filepath.Join(allowed, "relative-escape"), "outside --allow-bind"},
		{"symlink that stays inside", filepath.Join(allowed, "inside"), ""},
		{"dangling symlink", filepath.Join(allowed, "dangling"), "does not exist"},
		{"under a dangling symlink", filepath.Join(allowed, "dangling", "x"), "does not exist"},
		{"prefix that is a symlink, by its name", filepath.Join(root, "app", "x"), ""},
		{"prefix that is a symlink, by its target", filepath.Join(root, "real-app", "x"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &hashspec.Spec{Container: hashspec.Container{Image: "web:1",
				Volumes: []hashspec.Volume{{Type: "bind", Source: tt.src, Target: "/data"}}}}
			err := allow.Check(spec)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Check = %v, want allowed", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Check = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestAllowCheck(t *testing.T) {
	bind := func(src string) hashspec.Container {
		return hashspec.Container{Volumes: []hashspec.Volume{{Type: "bind", Source: src, Target: "/data"}}}
	}
	volume := func(name string) hashspec.Container {
		return hashspec.Container{Volumes: []hashspec.Volume{{Type: "volume", Source: name, Target: "/cache"}}}
	}
	prefixes := Allow{BindPrefixes: []string{"/srv", "/var/lib/app/"}}
	tests := []struct {
		name    string
		allow   Allow
		c       hashspec.Container
		wantErr string // "" for allowed
	}{
		{"plain container", Allow{}, hashspec.Container{}, ""},
		{"privileged refused", Allow{}, hashspec.Container{Privileged: true}, "--allow-privileged"},
		{"privileged allowed", Allow{Privileged: true}, hashspec.Container{Privileged: true}, ""},
		{"host network refused", Allow{}, hashspec.Container{NetworkMode: "host"}, "--allow-host-network"},
		{"host network allowed", Allow{HostNetwork: true}, hashspec.Container{NetworkMode: "host"}, ""},
		{"bridge network needs nothing", Allow{}, hashspec.Container{NetworkMode: "bridge"}, ""},
		{"host pid refused", Allow{}, hashspec.Container{PIDMode: "host"}, "--allow-host-pid"},
		{"host pid allowed", Allow{HostPID: true}, hashspec.Container{PIDMode: "host"}, ""},
		{"host network does not allow host pid", Allow{HostNetwork: true},
			hashspec.Container{NetworkMode: "host", PIDMode: "host"}, "--allow-host-pid"},
		{"bind with no prefixes", Allow{}, bind("/srv/data"), "outside --allow-bind"},
		{"bind inside a prefix", prefixes, bind("/srv/data"), ""},
		{"bind deep inside a prefix", prefixes, bind("/var/lib/app/x/y"), ""},
		{"bind of the prefix itself", prefixes, bind("/srv"), ""},
		{"bind of a prefix given with a slash", prefixes, bind("/var/lib/app"), ""},
		{"bind outside every prefix", prefixes, bind("/etc"), "/etc"},
		{"bind of a sibling sharing the prefix's name", prefixes, bind("/srvx"), "/srvx"},
		{"bind under a sibling sharing the prefix's name", prefixes, bind("/srvx/data"), "/srvx/data"},
		{"bind escaping a prefix with dot-dot", prefixes, bind("/srv/../etc"), "outside --allow-bind"},
		{"bind of the parent of a prefix", prefixes, bind("/var/lib"), "/var/lib"},
		{"bind of the root", prefixes, bind("/"), "outside --allow-bind"},
		{"root prefix allows every bind", Allow{BindPrefixes: []string{"/"}}, bind("/etc"), ""},
		{"named volume refused by default", Allow{}, volume("cache"), `--allow-volume cache`},
		{"another group's volume refused", Allow{Volumes: []string{"web-*"}}, volume("db-data"), `"db-data"`},
		{"named volume allowed by a pattern", Allow{Volumes: []string{"db-*", "web-*"}}, volume("web-cache"), ""},
		{"volume pattern allows only volumes", Allow{Networks: []string{"*"}}, volume("cache"), "--allow-volume"},
		{"bind prefixes allow no volume", Allow{BindPrefixes: []string{"/"}}, volume("cache"), "--allow-volume"},
		{"named network refused by default", Allow{}, hashspec.Container{NetworkMode: "db-internal"}, "--allow-network db-internal"},
		{"another group's network refused", Allow{Networks: []string{"web-*"}}, hashspec.Container{NetworkMode: "db-internal"}, `"db-internal"`},
		{"named network allowed by a pattern", Allow{Networks: []string{"web-*"}}, hashspec.Container{NetworkMode: "web-internal"}, ""},
		{"none network needs nothing", Allow{}, hashspec.Container{NetworkMode: "none"}, ""},
		{"network pattern allows only networks", Allow{Volumes: []string{"*"}}, hashspec.Container{NetworkMode: "db"}, "--allow-network"},
		{"second volume refused", prefixes, hashspec.Container{Volumes: []hashspec.Volume{
			{Type: "bind", Source: "/srv/a", Target: "/a"}, {Type: "bind", Source: "/home", Target: "/b"}}}, "/home"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.c.Image = "web:1"
			err := tt.allow.Check(&hashspec.Spec{Container: tt.c})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Check = %v, want allowed", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Check allowed it, want an error mentioning %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Check = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestAllowValidate(t *testing.T) {
	tests := []struct {
		name    string
		allow   Allow
		wantErr string
	}{
		{"nothing", Allow{}, ""},
		{"patterns", Allow{Volumes: []string{"web-*", "cache"}, Networks: []string{"web-?"}}, ""},
		{"bad volume pattern", Allow{Volumes: []string{"web-["}}, "--allow-volume"},
		{"empty network pattern", Allow{Networks: []string{""}}, "--allow-network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.allow.Validate()
			if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
