// Package codectest checks what the first use of a JSON codec costs in a
// process: sonic compiles a codec the first time a type is decoded or
// encoded and keeps it for the life of the process, so only a process that
// has used none shows what a first use compiles.
package codectest

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"
)

// Compiled bounds the allocations of a first decode or encode whose codec
// is already compiled: 4–18 measured, the values decoded. Compiling one
// costs thousands (13,829 for the Anthropic messages body). The race
// detector's build allocates more on a first encode, so tests that use it
// are built without the race detector.
const Compiled = 30

// freshEnv names, in the started process, the test it runs.
const freshEnv = "GATEWAY_FIRST_USE_TEST"

// RunFresh runs check in a new process of the test binary that runs only
// the calling test, and fails the test if check fails there (and skips it
// if check skipped). Before check
// it shows that the measure sees a compilation: the first decode of a type
// nothing has used allocates thousands of times. sonic compiles at run time
// on amd64 only; elsewhere the test is skipped, except under CI=true, where
// it fails: CI runs on amd64 and must never pass by skipping.
func RunFresh(t *testing.T, check func(t *testing.T)) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("sonic compiles codecs at run time only on amd64, and CI runs on amd64; this is %s", runtime.GOARCH)
		}
		t.Skip("sonic compiles codecs at run time only on amd64")
	}
	if os.Getenv(freshEnv) == t.Name() {
		var unused struct {
			A string `json:"a"`
			B []struct {
				C int64 `json:"c"`
			} `json:"b"`
		}
		n := Mallocs(func() { require.NoError(t, sonic.Unmarshal([]byte(`{"a":"x","b":[{"c":1}]}`), &unused)) })
		require.Greater(t, n, uint64(1000), "a first decode that compiles its codec allocates thousands")
		t.Logf("a codec compiled on first use: %d allocations", n)
		check(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), freshEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		// What the started test needs is missing here too (a database
		// outside CI): skip as it did, with its reason. It inherits this
		// environment, CI=true included, so under CI it failed instead.
		t.Skipf("%s", out)
	}
	require.Contains(t, string(out), "--- PASS: "+t.Name(), "%s", out)
	t.Logf("%s", out)
}

// FirstUse fails t when f, the first use of a codec, allocates more than
// budget times: a codec compiled on first use costs thousands.
func FirstUse(t *testing.T, name string, budget uint64, f func()) {
	t.Helper()
	n := Mallocs(f)
	t.Logf("%s: %d allocations", name, n)
	require.LessOrEqual(t, n, budget, "%s compiled a codec on first use", name)
}

// Mallocs returns how many heap allocations f made (the whole process's).
func Mallocs(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}
