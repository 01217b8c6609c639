package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSysmonEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + sysmonAwake}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=b"}, []string{"GODEBUG=" + sysmonAwake, "A=b"}, true},
		{"other settings kept", []string{"GODEBUG=madvdontneed=1"}, []string{"GODEBUG=madvdontneed=1," + sysmonAwake}, true},
		{"operator's schedtrace wins", []string{"GODEBUG=gctrace=1,schedtrace=0"}, []string{"GODEBUG=gctrace=1,schedtrace=0"}, false},
		{"already set: no second exec", []string{"X=1", "GODEBUG=" + sysmonAwake}, []string{"X=1", "GODEBUG=" + sysmonAwake}, false},
		{"duplicates: the first counts, the rest go", []string{"GODEBUG=a=1", "GODEBUG=schedtrace=5"}, []string{"GODEBUG=a=1," + sysmonAwake}, true},
		{"a value that only looks alike", []string{"GODEBUG=xschedtrace=1"}, []string{"GODEBUG=xschedtrace=1," + sysmonAwake}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := sysmonEnv(tc.env)
			require.Equal(t, tc.changed, changed)
			require.Equal(t, tc.want, got)
		})
	}
}
