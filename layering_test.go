package gateway_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/edgegw/gateway"

// layers says which of the module's top-level packages each layer may
// import, and which outside modules it must never link (ARCHITECTURE.md).
var layers = map[string]struct {
	may    []string
	forbid []string
}{
	"codec":   {forbid: []string{"github.com/valyala/fasthttp", "github.com/jackc/pgx", "github.com/redis/rueidis"}},
	"hotpath": {may: []string{"codec"}, forbid: []string{"github.com/valyala/fasthttp", "github.com/jackc/pgx", "github.com/redis/rueidis"}},
	"proxy":   {may: []string{"hotpath", "codec"}, forbid: []string{"github.com/jackc/pgx"}},
	"control": {may: []string{"storage", "hotpath", "codec"}},
	"storage": {may: []string{"hotpath", "codec"}},
	"bench":   {may: []string{"proxy", "hotpath", "codec"}},
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-json", "./...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		layer, _, _ := strings.Cut(rel, "/")
		rule, ok := layers[layer]
		if !ok {
			continue // cmd/ wires everything; the root holds only tests
		}
		checked++
		for _, imp := range p.Imports {
			if target, ok := strings.CutPrefix(imp, module+"/"); ok {
				top, _, _ := strings.Cut(target, "/")
				if top == layer {
					continue
				}
				require.Contains(t, rule.may, top, "%s imports %s, which its layer forbids", p.ImportPath, imp)
				continue
			}
			for _, f := range rule.forbid {
				require.False(t, strings.HasPrefix(imp, f), "%s imports %s, which its layer must not link", p.ImportPath, imp)
			}
		}
	}
	require.Greater(t, checked, 4)
}
