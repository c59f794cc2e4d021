package watch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollagent/rollagent/internal/retry"
)

func TestIndex(t *testing.T) {
	tests := []struct {
		name      string
		from      uint64
		answers   []uint64
		wantWaits []uint64 // the index sent before each answer, then the next
	}{
		{"moves on", 0, []uint64{5, 7}, []uint64{0, 5, 7}},
		{"never 0 again", 0, []uint64{0}, []uint64{0, 1}},
		{"backwards starts over", 9, []uint64{4, 6}, []uint64{9, 0, 6}},
		{"same index", 3, []uint64{3}, []uint64{3, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := From(tt.from)
			var got []uint64
			for _, a := range tt.answers {
				got = append(got, i.Wait())
				i.Answered(a)
			}
			got = append(got, i.Wait())
			if len(got) != len(tt.wantWaits) {
				t.Fatalf("waits %v, want %v", got, tt.wantWaits)
			}
			for n := range got {
				if got[n] != tt.wantWaits[n] {
					t.Fatalf("waits %v, want %v", got, tt.wantWaits)
				}
			}
		})
	}
}

func TestRun(t *testing.T) {
	errDown := errors.New("down")
	type answer struct {
		last uint64
		done bool
		err  error
	}
	tests := []struct {
		name       string
		reset      bool
		answers    []answer
		wantIndex  []uint64
		wantErrors int
	}{
		{"done", false, []answer{{4, false, nil}, {6, true, nil}}, []uint64{2, 4}, 0},
		{"error keeps the index", false, []answer{{4, false, nil}, {0, false, errDown}, {5, true, nil}}, []uint64{2, 4, 4}, 1},
		{"error resets the index", true, []answer{{4, false, nil}, {0, false, errDown}, {5, true, nil}}, []uint64{2, 4, 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []uint64
			errs := 0
			opts := Options{From: 2, Backoff: retry.NewSteady(time.Millisecond, time.Millisecond), ResetOnError: tt.reset,
				OnError: func(error, time.Duration) { errs++ }}
			done := Run(t.Context(), opts, func(_ context.Context, index uint64) (uint64, bool, error) {
				a := tt.answers[len(got)]
				got = append(got, index)
				return a.last, a.done, a.err
			})
			if !done || errs != tt.wantErrors || len(got) != len(tt.wantIndex) {
				t.Fatalf("done %v, %d errors, indexes %v; want done, %d errors, %v", done, errs, got, tt.wantErrors, tt.wantIndex)
			}
			for n := range got {
				if got[n] != tt.wantIndex[n] {
					t.Fatalf("indexes %v, want %v", got, tt.wantIndex)
				}
			}
		})
	}
	t.Run("until", func(t *testing.T) {
		opts := Options{Until: time.Now().Add(20 * time.Millisecond), Backoff: retry.New(time.Millisecond, time.Millisecond)}
		if Run(t.Context(), opts, func(context.Context, uint64) (uint64, bool, error) {
			time.Sleep(5 * time.Millisecond)
			return 1, false, nil
		}) {
			t.Fatal("done, want the watch to end at Until")
		}
	})
}
