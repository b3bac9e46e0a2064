package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSimRefusesInvalidFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--sim-addr", "no-port"},
		{"--sim-ttft", "-1s"},
		{"--sim-itl", "soon"},
		{"--sim-seed", "-3"},
		{"--nope"},
		{"extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var errOut strings.Builder
			code := serveSim(context.Background(), args, io.Discard, &errOut)
			require.Equal(t, 2, code, errOut.String())
			require.Contains(t, errOut.String(), "gateway sim")
		})
	}
	t.Run("through runSim", func(t *testing.T) {
		var errOut strings.Builder
		require.Equal(t, 2, runSim([]string{"--sim-addr", "no-port"}, io.Discard, &errOut))
		require.Contains(t, errOut.String(), "addr")
	})
	t.Run("help", func(t *testing.T) {
		var errOut strings.Builder
		require.Equal(t, 0, serveSim(context.Background(), []string{"--help"}, io.Discard, &errOut))
		for _, env := range []string{"GATEWAY_SIM_ADDR", "GATEWAY_SIM_TTFT", "GATEWAY_SIM_ITL", "GATEWAY_SIM_SEED"} {
			require.Contains(t, errOut.String(), env)
		}
	})
}

func TestSimServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- serveSim(ctx, []string{"--sim-addr", "127.0.0.1:0", "--sim-seed", "5"}, io.Discard, pw)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	require.True(t, lines.Scan())
	var ready struct{ Msg, Addr string }
	require.NoError(t, json.Unmarshal(lines.Bytes(), &ready), lines.Text())
	require.Equal(t, "simulator listening", ready.Msg)
	require.NotEmpty(t, ready.Addr)
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	resp, err := http.Post("http://"+ready.Addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"Hi [[sim:tokens=3]]"}]}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"completion_tokens":3`)

	cancel()
	select {
	case c := <-code:
		require.Equal(t, 0, c)
	case <-time.After(15 * time.Second):
		t.Fatal("the simulator did not stop")
	}
}
