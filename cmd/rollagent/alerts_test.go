package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/internal/consultest"
)

const (
	alertRules     = "../../docs/examples/prometheus-alerts.yml"
	alertRulesTest = "../../docs/examples/prometheus-alerts.test.yml"
)

// promtool finds Prometheus's rule checker: ROLLAGENT_PROMTOOL (which the
// Makefile sets from scripts/promtool.sh), else PATH. Without one the test
// skips, or fails under CI=true.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ROLLAGENT_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		consultest.Unavailable(t, "no promtool: set ROLLAGENT_PROMTOOL (scripts/promtool.sh prints one) or put it on PATH")
	}
	return p
}

// The example alert rules are valid, and their unit tests pass: the
// stuck-rollout alert fires on a stuck group and not on a progressing one.
func TestAlertRulesPromtool(t *testing.T) {
	bin := promtool(t)
	tests := []struct {
		name string
		args []string
	}{
		{"check rules", []string{"check", "rules", alertRules}},
		{"test rules", []string{"test", "rules", alertRulesTest}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			}
		})
	}
}

// Every rollagent metric the rules use is one the exporter exports, and
// every gate state they match is one of coordinator.GateStates: a rename cannot leave
// an alert matching nothing, which no alert would ever tell.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	rules := string(b)
	exported := map[string]bool{}
	for _, name := range exportedNames() {
		exported[name] = true
	}
	used := regexp.MustCompile(`rollagent_[a-z_]+`).FindAllString(rules, -1)
	if len(used) == 0 {
		t.Fatal("the rules use no rollagent metric")
	}
	for _, name := range used {
		if !exported[name] {
			t.Errorf("the rules use %s, which the exporter does not export", name)
		}
	}
	for _, m := range regexp.MustCompile(`rollagent_group_gate\{state=~?"([^"]+)"\}`).FindAllStringSubmatch(rules, -1) {
		for _, s := range strings.Split(m[1], "|") {
			if !slices.Contains(coordinator.GateStates, coordinator.GateState(s)) {
				t.Errorf("the rules match gate state %q, which is not one of %v", s, coordinator.GateStates)
			}
		}
	}
}

// The README's table of the exporter's metrics names each of them, and
// nothing else.
func TestREADMEExporterMetrics(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(rollagent_group_[a-z_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented = append(documented, m[1])
	}
	exported := exportedNames()
	slices.Sort(documented)
	if !slices.Equal(documented, exported) {
		t.Fatalf("README's metrics table names %v; the exporter exports %v", documented, exported)
	}
}

// exportedNames are the names of the exporter's group metrics, sorted.
func exportedNames() []string {
	var names []string
	ch := make(chan *prometheus.Desc, 16)
	newGroupCollector(nil, coordinator.DefaultLostAfter, time.Now).Describe(ch)
	close(ch)
	for d := range ch {
		names = append(names, regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1])
	}
	slices.Sort(names)
	return names
}
