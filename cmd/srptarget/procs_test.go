package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSchedulerProcs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current int
		env     string
		want    int
	}{
		{"one CPU: a second P", 1, "", 2},
		{"two CPUs: the runtime's choice", 2, "", 0},
		{"many CPUs: the runtime's choice", 16, "", 0},
		{"the operator's GOMAXPROCS=1 is kept", 1, "1", 0},
		{"the operator's GOMAXPROCS=4 is kept", 1, "4", 0},
	} {
		require.Equal(t, tc.want, schedulerProcs(tc.current, tc.env), tc.name)
	}
}
