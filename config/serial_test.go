package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSerialClashes(t *testing.T) {
	for _, tt := range []struct {
		name    string
		serials []string
		want    []SerialClash
	}{
		{"distinct", []string{"a1", "a2", "", "b1"}, nil},
		{"unset serials never clash", []string{"", ""}, nil},
		{"equal", []string{"x", "disk1", "disk1"}, []SerialClash{{I: 2, J: 1, SerialI: "disk1", SerialJ: "disk1"}}},
		{"equal hexadecimal digits", []string{"server1", "server-1"}, []SerialClash{{I: 1, J: 0, SerialI: "server-1", SerialJ: "server1"}}},
		{"case", []string{"ABC1", "abc1"}, []SerialClash{{I: 1, J: 0, SerialI: "abc1", SerialJ: "ABC1"}}},
		{"no hexadecimal digit at all", []string{"xyz", "qrs"}, []SerialClash{{I: 1, J: 0, SerialI: "qrs", SerialJ: "xyz"}}},
		{"only the first 25 digits count", []string{"0123456789abcdef012345678" + "9", "0123456789abcdef012345678" + "0"},
			[]SerialClash{{I: 1, J: 0, SerialI: "0123456789abcdef0123456780", SerialJ: "0123456789abcdef0123456789"}}},
		{"each against the first", []string{"d1", "d1", "d1"}, []SerialClash{{I: 1, J: 0, SerialI: "d1", SerialJ: "d1"}, {I: 2, J: 0, SerialI: "d1", SerialJ: "d1"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, SerialClashes(tt.serials))
		})
	}
}
