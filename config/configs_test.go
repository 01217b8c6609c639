package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const configsDir = "../configs"

// TestConfigsDirectoryIsValid loads every configuration shipped in configs/. File LUNs with
// create: true may name files that do not exist yet: that is what Parse accepts.
func TestConfigsDirectoryIsValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configsDir, "*.yaml"))
	require.NoError(t, err)
	require.Contains(t, files, filepath.Join(configsDir, "demo.yaml"))
	require.Contains(t, files, filepath.Join(configsDir, "example.yaml"))
	for _, f := range files {
		_, err := Load(f)
		require.NoError(t, err, f)
	}
}

func TestDemoConfig(t *testing.T) {
	cfg, err := Load(filepath.Join(configsDir, "demo.yaml"))
	require.NoError(t, err)
	require.Equal(t, []Listener{{Address: "0.0.0.0", Port: 5555}}, cfg.Listeners)
	require.Len(t, cfg.LUNs, 2)
	require.Equal(t, BackstoreKind("memory"), cfg.LUNs[0].Backstore)
	require.Equal(t, Size(1<<30), cfg.LUNs[0].Size)
	require.Equal(t, BackstoreKind("file"), cfg.LUNs[1].Backstore)
	// A private directory of the daemon's, never a world-writable one such as /tmp where
	// another user could plant the file first.
	require.Equal(t, "/var/lib/srptarget/demo/lun1.img", cfg.LUNs[1].Path)
	for _, shared := range []string{"/tmp/", "/var/tmp/", "/dev/shm/"} {
		require.False(t, strings.HasPrefix(cfg.LUNs[1].Path, shared), cfg.LUNs[1].Path)
	}
	require.True(t, cfg.LUNs[1].Create)
	require.Equal(t, []ACL{{Name: "demo-hosts", PerInitiatorMetrics: true, Initiators: []string{"*"}, LUNs: []int{0, 1}}}, cfg.ACLs)
}

// yamlKeys returns every yaml key of the configuration's struct types.
func yamlKeys(tt *testing.T, t reflect.Type, into map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := strings.Split(f.Tag.Get("yaml"), ",")
		if f.Anonymous && len(tag) == 2 && tag[1] == "inline" {
			yamlKeys(tt, f.Type, into)
			continue
		}
		require.NotEmpty(tt, tag[0], "%s.%s has no yaml tag", t.Name(), f.Name)
		into[tag[0]] = true
		yamlKeys(tt, f.Type, into)
	}
}

// TestConfigsDocumentEveryKey keeps configs/README.md and example.yaml true to the types: the
// README has a table row for every key, and example.yaml uses every key.
func TestConfigsDocumentEveryKey(t *testing.T) {
	keys := map[string]bool{}
	yamlKeys(t, reflect.TypeFor[Config](), keys)
	readme, err := os.ReadFile(filepath.Join(configsDir, "README.md"))
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	for _, section := range []string{"target", "listeners", "limits", "luns", "acls", "alua"} {
		require.Contains(t, string(readme), "## `"+section+"`")
		documented[section] = true
	}
	require.Contains(t, string(readme), "### `rbd`")
	// The backstore table lists the backstore kinds, not keys.
	for _, kind := range []string{"file", "block", "memory", "null"} {
		delete(documented, kind)
	}
	require.Equal(t, sortedKeys(keys), sortedKeys(documented))

	data, err := os.ReadFile(filepath.Join(configsDir, "example.yaml"))
	require.NoError(t, err)
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &root))
	used := map[string]bool{}
	var walkKeys func(n *yaml.Node)
	walkKeys = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				used[n.Content[i].Value] = true
			}
		}
		for _, c := range n.Content {
			walkKeys(c)
		}
	}
	walkKeys(&root)
	require.Equal(t, sortedKeys(keys), sortedKeys(used))
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
