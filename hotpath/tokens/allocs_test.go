//go:build !race

package tokens

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAppendWordsAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 8<<10)
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendWords(buf[:0], 5, 600)
	})
	require.Zero(t, allocs)
}
