package fleetbench

import (
	"slices"
	"testing"
	"time"
)

func TestFleetReportMedians(t *testing.T) {
	a, b := fleetCase{n: 100, k: 1}, fleetCase{n: 300, k: 1}
	run := func(fc fleetCase, wall time.Duration) *fleetResult {
		return &fleetResult{fleetCase: fc, wall: wall, bound: time.Second}
	}
	tests := []struct {
		name      string
		rows      []*fleetResult
		wantWalls []time.Duration // the median rows', in the cases' order
		wantEvery map[fleetCase]string
	}{
		{"one run", []*fleetResult{run(a, 2*time.Second)}, []time.Duration{2 * time.Second}, map[fleetCase]string{a: "2.00×"}},
		{"three runs, round the cases", []*fleetResult{
			run(a, 3*time.Second), run(b, 5*time.Second),
			run(a, 1*time.Second), run(b, 4*time.Second),
			run(a, 2*time.Second), run(b, 6*time.Second),
		}, []time.Duration{2 * time.Second, 5 * time.Second}, map[fleetCase]string{a: "1.00×, 2.00×, 3.00×", b: "4.00×, 5.00×, 6.00×"}},
		{"two runs: the slower", []*fleetResult{run(a, 1*time.Second), run(a, 3*time.Second)},
			[]time.Duration{3 * time.Second}, map[fleetCase]string{a: "1.00×, 3.00×"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &fleetReport{rows: tt.rows}
			rows, every := rep.medians()
			var walls []time.Duration
			for _, r := range rows {
				walls = append(walls, r.wall)
			}
			if !slices.Equal(walls, tt.wantWalls) {
				t.Errorf("median walls = %v, want %v", walls, tt.wantWalls)
			}
			for fc, want := range tt.wantEvery {
				if got := everyRun(every[fc]); got != want {
					t.Errorf("every run of %+v = %q, want %q", fc, got, want)
				}
			}
		})
	}
}
