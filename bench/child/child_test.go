package child

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary doubles as the child: with CHILD_MODE set it logs like a
// gateway process and waits to be interrupted.
func TestMain(m *testing.M) {
	switch os.Getenv("CHILD_MODE") {
	case "serve":
		fmt.Fprintln(os.Stderr, "not json")
		fmt.Fprintln(os.Stderr, `{"msg":"listening","addr":"127.0.0.1:4242"}`)
		fmt.Println("key gw_live_example")
		fmt.Fprintln(os.Stderr, `{"msg":"ready too"}`)
		time.Sleep(time.Minute)
		os.Exit(0)
	case "die":
		fmt.Fprintln(os.Stderr, "cannot start: port taken")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestStartWaitsForEveryMessage(t *testing.T) {
	p, err := Start(context.Background(), "fake", os.Args[0], []string{"CHILD_MODE=serve"}, []string{"listening", "ready too"})
	require.NoError(t, err)
	defer p.Stop()
	require.Equal(t, "127.0.0.1:4242", p.Addr)
	require.Positive(t, p.PID)
	require.Eventually(t, func() bool { return p.Stdout() == "key gw_live_example\n" }, 5*time.Second, 10*time.Millisecond)
	p.Stop()
	p.Stop() // twice is harmless
}

func TestStartReportsAnEarlyExit(t *testing.T) {
	_, err := Start(context.Background(), "fake", os.Args[0], []string{"CHILD_MODE=die"}, []string{"listening"})
	require.ErrorContains(t, err, "port taken")
}

func TestStartHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Start(ctx, "fake", os.Args[0], []string{"CHILD_MODE=serve"}, []string{"never logged"})
	require.ErrorIs(t, err, context.Canceled)
}
