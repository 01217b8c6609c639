package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParse: any input gives a configuration or errors that name the file; never a
// panic (the validator walks the YAML tree by paths, which a malformed document must not
// break).
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodConfig))
	// The shipped examples and the golden files of validate: every kind of error there is.
	files, err := filepath.Glob(filepath.Join(configsDir, "*.yaml"))
	require.NoError(f, err)
	golden, err := filepath.Glob(filepath.Join("testdata", "validate", "*.yaml"))
	require.NoError(f, err)
	for _, file := range append(files, golden...) {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte("listeners: [{address: \"fe80::1\", port: 0}]\nluns: [{lun: -1, backstore: null}]\nacls: [{luns: [0, 0]}]\n"))
	f.Add([]byte("luns:\n  - backstore: null\n    lun: 1\n  - backstore: null\n    lun: 1\n"))
	f.Add([]byte("listeners: &a [*a]\nluns: &b\n  - <<: *b\n    blocksize: yes\n    size: 1EiB\n    lun: \"1\"\n    lun: 2\n"))
	f.Add([]byte("limits: {immediate_data: on, credits: 1.5, max_sessions: 99999999999999999999}\nacls: {luns: x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.yaml", data)
		if err == nil {
			require.NotNil(t, cfg)
			require.NotEmpty(t, cfg.Listeners)
			require.NotNil(t, cfg.Limits.ImmediateData)
			// What Parse returns is valid, has every default, and Validate leaves it as it is.
			before := fmt.Sprintf("%+v", *cfg)
			require.NoError(t, cfg.Validate())
			cfg.ApplyDefaults()
			require.Equal(t, before, fmt.Sprintf("%+v", *cfg))
			return
		}
		errs := AsErrors(err)
		require.NotEmpty(t, errs, "error of type %T: %v", err, err)
		for _, e := range errs {
			require.Equal(t, "f.yaml", e.File)
			requireNoGoTypes(t, e)
		}
	})
}

// requireNoGoTypes fails when an error shows the YAML library's Go-facing wording (a Go type
// name, "cannot unmarshal"): the file's author writes YAML and cannot act on it.
func requireNoGoTypes(t *testing.T, e *Error) {
	t.Helper()
	for _, leak := range []string{"config.", "unmarshal", "!!", "yaml:"} {
		require.NotContains(t, e.Msg, leak)
	}
}

// FuzzParseSize: a parsed size prints as a string that parses back to it.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "4096", "512KiB", "1T", " 8 MiB ", "9223372036854775807", "1GB", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		require.GreaterOrEqual(t, int64(n), int64(0))
		back, err := ParseSize(n.String())
		require.NoError(t, err)
		require.Equal(t, n, back)
	})
}
