package main

import (
	"testing"
	"time"
)

func TestFlagDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{3 * time.Second, "3s"},
		{30 * time.Second, "30s"},
		{10 * time.Minute, "10m"},
		{90 * time.Second, "1m30s"},
		{2 * time.Hour, "2h"},
		{2*time.Hour + time.Minute, "2h1m"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := flagDuration(tt.d); got != tt.want {
				t.Fatalf("flagDuration(%v) = %q, want %q", tt.d, got, tt.want)
			}
			if back, err := time.ParseDuration(flagDuration(tt.d)); err != nil || back != tt.d {
				t.Fatalf("%q parses as %v, %v", flagDuration(tt.d), back, err)
			}
		})
	}
}
