package netns_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openrdmo/rdmo/internal/netns"
	"github.com/openrdmo/rdmo/internal/testproc"
	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// The child roles run inside a namespace: "server" maps memory and prints
// its address and rkey; "client" writes into it over UCX and reads it back.
func TestMain(m *testing.M) {
	switch testproc.Role() {
	case "server":
		os.Exit(server())
	case "client":
		os.Exit(client())
	}
	os.Exit(m.Run())
}

func server() int {
	ctx, w, err := ucptest.NewChildWorker()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	mem, _ := ctx.Allocate(4096)
	addr, _ := w.Address()
	rk, _ := mem.PackRkey()
	fmt.Printf("READY %x %x %d\n", addr, rk, mem.Address())
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		w.Progress()
		if bytes.HasPrefix(mem.Bytes(), []byte("across")) {
			fmt.Println("GOT", string(mem.Bytes()[:16]))
			for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
				w.Progress()
			}
			return 0
		}
	}
	return 1
}

func client() int {
	_, w, err := ucptest.NewChildWorker()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	f := strings.Fields(os.Getenv("NETNS_SERVER"))
	addr, _ := hex.DecodeString(f[0])
	rk, _ := hex.DecodeString(f[1])
	var base uint64
	fmt.Sscan(f[2], &base)
	ep, err := w.Connect(addr, ucp.EndpointOptions{})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	rkey, err := ep.UnpackRkey(rk)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	if err := ep.PutSync([]byte("across-the-wire!"), base, rkey, 10*time.Second); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	ep.FlushSync(10 * time.Second)
	fmt.Println("DONE", ep.Transports())
	return 0
}

func TestUCXAcrossNamespaces(t *testing.T) {
	p := netns.New(t)
	srv := testproc.Start(t, "server", testproc.Options{Command: p.A.Command, Env: p.A.UCXEnv()})
	ready := strings.Join(srv.Must(t, "READY", 30*time.Second), " ")
	cl := testproc.Start(t, "client", testproc.Options{Command: p.B.Command, Env: append([]string{"NETNS_SERVER=" + ready}, p.B.UCXEnv()...)})
	done, err := cl.Await("DONE", 30*time.Second)
	if code := cl.Wait(t, 30*time.Second); err != nil || code != 0 || strings.Join(done, " ") != "[tcp]" {
		t.Fatalf("client: exit %d, DONE %q: %v", code, done, err)
	}
	if got, err := srv.Await("GOT", 30*time.Second); err != nil || !strings.HasPrefix(strings.Join(got, " "), "across-the-wire!") {
		t.Fatalf("server did not see the write: %q %v", got, err)
	}
	srv.Wait(t, 30*time.Second)
}
