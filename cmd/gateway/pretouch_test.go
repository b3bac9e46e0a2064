//go:build !race

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/codec/codectest"
)

// TestStartCompilesCodecsBeforeServing checks that a started gateway has
// compiled the request path's JSON codecs before its listener serves: in a
// process that has compiled none, the first chat body decoded after
// startApp returns compiles nothing. The count is the whole process's, and
// the started app's own goroutines (the ledger's writer, the key listener)
// allocate meanwhile: 8–49 measured. Compiling the chat body costs about
// 20,000, so the bound sits between.
func TestStartCompilesCodecsBeforeServing(t *testing.T) {
	codectest.RunFresh(t, func(t *testing.T) {
		startTestApp(t)
		codectest.FirstUse(t, "chat completions body", 1000, func() {
			var r codec.ChatRequest
			require.Nil(t, codec.DecodeRequest([]byte(`{"model":"mira","messages":[{"role":"user","content":"hi"}]}`), &r))
		})
	})
}
