package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// updateGolden rewrites the expected output of TestValidateGolden from what validate prints
// now: go test ./config/ -run TestValidateGolden -update (or SRPTARGET_UPDATE_GOLDEN=1).
// Read the diff before committing it: the golden files are the messages users see.
var updateGolden = flag.Bool("update", false, "rewrite testdata/validate/*.txt")

// TestValidateGolden runs validate's loading and printing on each testdata/validate/*.yaml
// and compares what it prints, errors or summary and warnings, with the .txt next to it,
// exactly. One file per kind of error, so that a change of wording shows in review.
func TestValidateGolden(t *testing.T) {
	// Every machine gets the same RAM, so that the memory LUN messages do not depend on it.
	ram := totalRAM
	totalRAM = func() (int64, error) { return 16 << 30, nil }
	t.Cleanup(func() { totalRAM = ram })
	update := *updateGolden || os.Getenv("SRPTARGET_UPDATE_GOLDEN") != ""

	files, err := filepath.Glob(filepath.Join("testdata", "validate", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			var got bytes.Buffer
			if cfg, err := Load(file); err != nil {
				WriteErrors(&got, file, err)
			} else {
				got.WriteString(cfg.Summary())
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".txt"
			if update {
				require.NoError(t, os.WriteFile(golden, got.Bytes(), 0o644))
				return
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "no golden file: run with -update to write it")
			require.Equal(t, string(want), got.String())
		})
	}
}
